%% sluice:set_handler_opts/2 and get_handler_opts/1, ranch's
%% set_protocol_options/2 and get_protocol_options/1: connections accepted
%% after the call get the new options in init/2, running and parked ones
%% keep their state and are sent nothing; the call returns once every
%% connection supervisor has switched, and the options stay over a
%% restarted connection supervisor, a suspend and a drain, but not over a
%% restart of the whole listener from its child spec.
%%
%% This module is also the handler: its state is its options, and it
%% answers every frame with `{self(), State}'.
-module(sluice_handler_opts_SUITE).
-behaviour(sluice_handler).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([new_connections_get_the_new_options/1,
         running_connections_are_told_nothing/1,
         parked_connection_wakes_with_its_state/1,
         unknown_listener_is_not_found/1,
         call_returns_once_every_conns_sup_has_switched/1,
         connects_racing_the_switch_get_old_or_new/1,
         calls_at_once_leave_every_conns_sup_on_the_last/1,
         restarted_conns_sup_keeps_the_new_options/1,
         suspend_resume_and_drain_keep_the_new_options/1,
         embedded_listener_restarted_goes_back_to_its_child_spec/1]).
-export([init/2, handle_data/2]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 30}}].

all() -> [{group, inet}, {group, socket}].

groups() ->
    sluice_test_lib:backend_groups(
      [new_connections_get_the_new_options,
       running_connections_are_told_nothing,
       parked_connection_wakes_with_its_state,
       unknown_listener_is_not_found,
       call_returns_once_every_conns_sup_has_switched,
       connects_racing_the_switch_get_old_or_new,
       calls_at_once_leave_every_conns_sup_on_the_last,
       restarted_conns_sup_keeps_the_new_options,
       suspend_resume_and_drain_keep_the_new_options,
       embedded_listener_restarted_goes_back_to_its_child_spec]).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% ------------------------------------------------------------------
%%% The handler
%%% ------------------------------------------------------------------

init(_Conn, Opts) ->
    {ok, Opts}.

handle_data(_Frame, Opts) ->
    Bin = term_to_binary({self(), Opts}),
    {reply, [<<(byte_size(Bin)):32>>, Bin], Opts}.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% A listener of this handler, started with options `HOpts'; its port.
listener(Name, HOpts, Opts) ->
    sluice_test_lib:start_listener(Name, Opts#{handler => {?MODULE, HOpts},
                                               framing => {length, 4}}),
    sluice_test_lib:port(Name).

connect(Port) ->
    {ok, S} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}, {packet, 4}], 5000),
    S.

%% `{HandlerPid, State}' of the connection on `S'.
ask(S) ->
    ok = gen_tcp:send(S, <<"?">>),
    {ok, Bin} = gen_tcp:recv(S, 0, 5000),
    binary_to_term(Bin).

%% The options a new connection's init/2 got.
new_conn_opts(Port) ->
    S = connect(Port),
    {_Pid, Opts} = ask(S),
    ok = gen_tcp:close(S),
    Opts.

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% After the call every new connection gets the new options, whichever
%% connection supervisor starts it; get_handler_opts/1 and info/1's
%% `handler' say them.
new_connections_get_the_new_options(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, #{v => 1}, #{num_conns_sups => 4}),
    ?assertEqual({ok, #{v => 1}}, sluice:get_handler_opts(Name)),
    ?assertEqual(#{v => 1}, new_conn_opts(Port)),
    ?assertEqual(ok, sluice:set_handler_opts(Name, #{v => 2})),
    ?assertEqual({ok, #{v => 2}}, sluice:get_handler_opts(Name)),
    ?assertMatch(#{handler := {?MODULE, #{v := 2}}}, sluice:info(Name)),
    %% Connections held open, so that they spread over the connection
    %% supervisors rather than reuse one.
    Socks = [connect(Port) || _ <- lists:seq(1, 16)],
    ?assertEqual([#{v => 2}], lists:usort([Opts || S <- Socks, {_, Opts} <- [ask(S)]])),
    %% Any term, as at start.
    ok = sluice:set_handler_opts(Name, [{list, "of options"}]),
    ?assertEqual([{list, "of options"}], new_conn_opts(Port)),
    _ = [gen_tcp:close(S) || S <- Socks],
    ok.

%% A running connection keeps its pid and its state, and no message
%% reaches its process (traced) while the options change.
running_connections_are_told_nothing(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, old, #{num_conns_sups => 2}),
    S = connect(Port),
    {Pid, old} = ask(S),
    1 = erlang:trace(Pid, true, ['receive']),
    ok = sluice:set_handler_opts(Name, new),
    Ref = erlang:trace_delivered(Pid),
    receive {trace_delivered, Pid, Ref} -> ok after 5000 -> error(no_trace_delivered) end,
    1 = erlang:trace(Pid, false, ['receive']),
    Received = flush_trace(Pid),
    ?assertEqual([], Received),
    ?assertEqual({Pid, old}, ask(S)),
    ?assertEqual(new, new_conn_opts(Port)),
    #{close_reasons := Reasons} = sluice:info(Name),
    ?assertEqual(0, maps:get(crashed, Reasons, 0)),
    ok = gen_tcp:close(S).

flush_trace(Pid) ->
    receive {trace, Pid, 'receive', Msg} -> [Msg | flush_trace(Pid)]
    after 0 -> []
    end.

%% A parked connection (inet only) that wakes runs in a new process with
%% the state it parked with: init/2 is not run again, the new options do
%% not reach it.
parked_connection_wakes_with_its_state(Config) ->
    case sluice_test_lib:transport() of
        inet -> parked_connection_wakes_with_its_state_inet(Config);
        _ -> {skip, "parking is on inet only"}
    end.

parked_connection_wakes_with_its_state_inet(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, old, #{num_conns_sups => 1, park_after => 50}),
    S = connect(Port),
    {Pid, old} = ask(S),
    ok = sluice_test_lib:wait_until(fun() -> maps:get(parked, sluice:info(Name)) =:= 1 end,
                                    5000),
    ok = sluice:set_handler_opts(Name, new),
    {Woken, State} = ask(S),
    ?assertNotEqual(Pid, Woken),
    ?assertEqual(old, State),
    ?assertEqual(new, new_conn_opts(Port)),
    ok = gen_tcp:close(S).

unknown_listener_is_not_found(_Config) ->
    ?assertEqual({error, not_found}, sluice:set_handler_opts({?MODULE, nobody}, x)),
    ?assertEqual({error, not_found}, sluice:get_handler_opts({?MODULE, nobody})).

%% The call waits for every connection supervisor: with one of them
%% suspended (sys:suspend/1) it does not return; resumed, it returns, and
%% every connection accepted after that gets the new options.
call_returns_once_every_conns_sup_has_switched(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, old, #{num_conns_sups => 2}),
    [_, Sup2] = sluice_test_lib:conns_sups(Name),
    ok = sys:suspend(Sup2),
    Self = self(),
    Caller = spawn_link(fun() -> Self ! {set, self(), sluice:set_handler_opts(Name, new)} end),
    receive
        {set, Caller, Early} -> error({returned_before_every_conns_sup_switched, Early})
    after 300 ->
            ok
    end,
    ok = sys:resume(Sup2),
    receive {set, Caller, Result} -> ?assertEqual(ok, Result)
    after 5000 -> error(no_return)
    end,
    Socks = [connect(Port) || _ <- lists:seq(1, 12)],
    ?assertEqual([new], lists:usort([Opts || S <- Socks, {_, Opts} <- [ask(S)]])),
    _ = [gen_tcp:close(S) || S <- Socks],
    ok.

%% Connects in a loop from two processes while the options change 30
%% times: every connection gets options that were set (the old or the
%% new), never older than the last call that had returned before its
%% connect began, and none crashes.
connects_racing_the_switch_get_old_or_new(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, 0, #{num_conns_sups => 4}),
    Returned = atomics:new(1, [{signed, false}]),
    Self = self(),
    Connectors = [spawn_link(fun() -> connect_loop(Port, Returned, Self, []) end)
                  || _ <- [1, 2]],
    _ = [begin
             ok = sluice:set_handler_opts(Name, K),
             ok = atomics:put(Returned, 1, K),
             timer:sleep(5)
         end || K <- lists:seq(1, 30)],
    _ = [C ! stop || C <- Connectors],
    Seen = lists:append([receive {seen, C, L} -> L after 10000 -> error(no_connector) end
                         || C <- Connectors]),
    ct:log("~p connections", [length(Seen)]),
    ?assert(length(Seen) >= 10),
    ?assertEqual([], [{Min, Got} || {Min, Got} <- Seen,
                                    not (is_integer(Got) andalso Got >= Min
                                         andalso Got =< 30)]),
    %% Some connections got options set during the run.
    ?assert(length(lists:usort([Got || {_, Got} <- Seen])) > 1),
    ?assertEqual(30, new_conn_opts(Port)),
    #{close_reasons := Reasons} = sluice:info(Name),
    ?assertEqual(0, maps:get(crashed, Reasons, 0)).

connect_loop(Port, Returned, Parent, Acc) ->
    receive
        stop -> Parent ! {seen, self(), Acc}
    after 0 ->
            Min = atomics:get(Returned, 1),
            connect_loop(Port, Returned, Parent, [{Min, new_conn_opts(Port)} | Acc])
    end.

%% Eight processes change the options at once, twenty times: each time,
%% once all have returned, every connection supervisor starts
%% connections with the options get_handler_opts/1 gives (those of the
%% call that came last), not some with one call's and some with
%% another's.
calls_at_once_leave_every_conns_sup_on_the_last(Config) ->
    Name = ?config(name, Config),
    _Port = listener(Name, 0, #{num_conns_sups => 4}),
    Sups = sluice_test_lib:conns_sups(Name),
    4 = length(Sups),
    _ = [begin
             Self = self(),
             Callers = [spawn_link(fun() ->
                                           receive go -> ok end,
                                           Self ! {set, self(), sluice:set_handler_opts(Name, {R, I})}
                                   end) || I <- lists:seq(1, 8)],
             _ = [C ! go || C <- Callers],
             _ = [receive {set, C, ok} -> ok after 10000 -> error(no_return) end
                  || C <- Callers],
             {ok, Last} = sluice:get_handler_opts(Name),
             ?assertEqual({R, [Last]}, {R, lists:usort([sup_handler_opts(S) || S <- Sups])})
         end || R <- lists:seq(1, 20)],
    ok.

%% The handler options a connection supervisor starts connections with:
%% those of the listener it holds (its state, read through sys), which
%% it changes with the template its connections start from.
sup_handler_opts(Sup) ->
    [HOpts] = [HOpts || #{name := _, opts := #{handler := {_, HOpts}}}
                            <- tuple_to_list(sys:get_state(Sup))],
    HOpts.

%% A connection supervisor restarted by its own supervisor, and all of
%% them with theirs (which restarts the acceptors too), start from the
%% options set, not from those the listener was started with.
restarted_conns_sup_keeps_the_new_options(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, old, #{num_conns_sups => 1}),
    [Sup] = sluice_test_lib:conns_sups(Name),
    ok = sluice:set_handler_opts(Name, new),
    exit(Sup, kill),
    ok = wait_new_conns_sup(Name, Sup),
    ?assertEqual(new, new_conn_opts(Port)),
    ok = sluice:set_handler_opts(Name, newer),
    {ok, #{sup := ListenerSup}} = sluice_registry:lookup(Name),
    {_, SupSup, _, _} = lists:keyfind(sluice_conns_sup_sup, 1,
                                      supervisor:which_children(ListenerSup)),
    [Sup2] = sluice_test_lib:conns_sups(Name),
    exit(SupSup, kill),
    ok = wait_new_conns_sup(Name, Sup2),
    ok = sluice_test_lib:wait_until(fun() -> maps:get(status, sluice:info(Name)) =:= running end,
                                    5000),
    ?assertEqual(newer, new_conn_opts(Port)).

wait_new_conns_sup(Name, Old) ->
    sluice_test_lib:wait_until(fun() ->
                                       case sluice_test_lib:conns_sups(Name) of
                                           [P] -> P =/= Old;
                                           _ -> false
                                       end
                               end, 5000).

%% suspend/1 and resume/1, a drain and a resume, and a change made while
%% suspended: the listener accepts again with the latest options.
suspend_resume_and_drain_keep_the_new_options(Config) ->
    Name = ?config(name, Config),
    Port = listener(Name, old, #{num_conns_sups => 2}),
    ok = sluice:set_handler_opts(Name, new),
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    ?assertEqual(new, new_conn_opts(Port)),
    ok = sluice_test_lib:wait_until(fun() -> maps:get(connections, sluice:info(Name)) =:= 0 end,
                                    5000),
    ?assertEqual({ok, 0}, sluice:drain(Name, 1000)),
    ok = sluice:resume(Name),
    ?assertEqual(new, new_conn_opts(Port)),
    ok = sluice:suspend(Name),
    ok = sluice:set_handler_opts(Name, set_while_suspended),
    ok = sluice:resume(Name),
    ?assertEqual(set_while_suspended, new_conn_opts(Port)).

%% A listener in the user's supervisor (child_spec/1), stopped and
%% restarted by it, or killed and restarted, starts again from the options
%% of its child spec.
embedded_listener_restarted_goes_back_to_its_child_spec(Config) ->
    Name = ?config(name, Config),
    Spec = sluice:child_spec(#{name => Name, ip => ?LOOPBACK, port => 0,
                               transport => sluice_test_lib:transport(),
                               framing => {length, 4}, handler => {?MODULE, spec}}),
    {ok, Sup} = supervisor:start_link(sluice_test_sup, [Spec]),
    try
        ok = sluice:set_handler_opts(Name, set),
        ?assertEqual(set, new_conn_opts(sluice_test_lib:port(Name))),
        ok = supervisor:terminate_child(Sup, {sluice_listener, Name}),
        {ok, _} = supervisor:restart_child(Sup, {sluice_listener, Name}),
        ?assertEqual({ok, spec}, sluice:get_handler_opts(Name)),
        ?assertEqual(spec, new_conn_opts(sluice_test_lib:port(Name))),
        ok = sluice:set_handler_opts(Name, set),
        {ok, #{sup := ListenerSup}} = sluice_registry:lookup(Name),
        exit(ListenerSup, kill),
        ok = sluice_test_lib:wait_until(
               fun() ->
                       %% the new listener's row, once it has bound its port
                       case sluice_registry:lookup(Name) of
                           {ok, #{sup := New, port := _}} -> New =/= ListenerSup;
                           _ -> false
                       end
               end, 5000),
        ?assertEqual({ok, spec}, sluice:get_handler_opts(Name)),
        ?assertEqual(spec, new_conn_opts(sluice_test_lib:port(Name)))
    after
        unlink(Sup),
        exit(Sup, shutdown)
    end.
