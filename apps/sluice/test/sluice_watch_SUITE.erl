%% Watching a listener as ranch users do: sluice:wait_for_connections/3,4,5
%% (each Op reached, each timing out, the count it reads: parked and
%% uncounted connections included, errors), sluice:procs/2 (acceptors and
%% connections, a parked connection has no pid and a woken one its new
%% one) and the `alarms' option (ranch 2's): fired when the live count
%% reaches the threshold with the listener's supervisor and the
%% connections' pids, at most once per cooldown, again at the end of one
%% while the count stays up; a callback that raises or blocks leaves the
%% listener serving; bad alarms refused at start and by
%% set_transport_opts/2, which changes them.
-module(sluice_watch_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_testcase/2, end_per_testcase/2]).
-export([wait_for_each_op_reached/1,
         wait_for_each_op_times_out/1,
         wait_counts_parked_and_uncounted_connections/1,
         wait_errors/1,
         procs_before_and_after_connections/1,
         procs_has_a_woken_connections_new_pid/1,
         alarm_fires_once_per_cooldown_with_the_pids/1,
         alarm_of_cooldown_zero_fires_per_connection/1,
         a_raising_callback_leaves_the_listener_serving/1,
         a_blocking_callback_is_not_called_again_and_blocks_nothing/1,
         bad_alarms_are_refused/1,
         set_transport_opts_changes_alarms/1,
         alarms_may_be_keyword_lists/1]).

-define(ECHO, {sluice_proto_echo, []}).
-define(WAIT, 5000).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [wait_for_each_op_reached,
     wait_for_each_op_times_out,
     wait_counts_parked_and_uncounted_connections,
     wait_errors,
     procs_before_and_after_connections,
     procs_has_a_woken_connections_new_pid,
     alarm_fires_once_per_cooldown_with_the_pids,
     alarm_of_cooldown_zero_fires_per_connection,
     a_raising_callback_leaves_the_listener_serving,
     a_blocking_callback_is_not_called_again_and_blocks_nothing,
     bad_alarms_are_refused,
     set_transport_opts_changes_alarms,
     alarms_may_be_keyword_lists].

init_per_testcase(Case, Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% Helpers -------------------------------------------------------------

start(Config, Opts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, maps:merge(#{handler => ?ECHO}, Opts)),
    sluice_test_lib:port(Name).

%% A connected client, answered once: its connection process is up.
client(Port) ->
    {ok, S} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(S, <<"x">>),
    {ok, <<"x">>} = gen_tcp:recv(S, 1, ?WAIT),
    S.

%% wait_for_connections/5 in a process of its own, its result sent back.
waiter(Name, Op, N) ->
    Self = self(),
    Ref = make_ref(),
    _ = spawn_link(fun() ->
                           Self ! {Ref, sluice:wait_for_connections(Name, Op, N, 5, ?WAIT)}
                   end),
    Ref.

waited(Ref) ->
    receive {Ref, Result} -> Result after 2 * ?WAIT -> error(waiter_silent) end.

%% An alarm callback that reports to the test process.
reporter(Tag) ->
    Self = self(),
    fun(Name, Alarm, Sup, Pids) ->
            Self ! {Tag, Name, Alarm, Sup, lists:sort(Pids),
                    erlang:monotonic_time(millisecond)}
    end.

alarm(Tag) ->
    receive {Tag, _, _, _, _, _} = A -> A after ?WAIT -> error({no_alarm, Tag}) end.

%% Nothing from the alarm for Ms: the only way to see an absence.
no_alarm(Tag, Ms) ->
    receive {Tag, _, _, _, _, _} = A -> error({unexpected_alarm, A}) after Ms -> ok end.

listener_sup(Name) ->
    {ok, #{sup := Sup}} = sluice_registry:lookup(Name),
    Sup.

adds_up(Name) ->
    #{accepted := A, closed := C, connections := N, close_reasons := R} = sluice:info(Name),
    ?assertEqual(A, C + N),
    ?assertEqual(C, lists:sum(maps:values(R))).

%%% wait_for_connections ------------------------------------------------

%% Each Op, waited for before the connections come or go, returns once
%% the count meets it.
wait_for_each_op_reached(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{}),
    Up2 = waiter(Name, '>=', 2),
    Up1 = waiter(Name, '>', 1),
    Eq2 = waiter(Name, '==', 2),
    [A, B] = [client(Port) || _ <- [1, 2]],
    ?assertEqual([ok, ok, ok], [waited(R) || R <- [Up2, Up1, Eq2]]),
    Down0 = waiter(Name, '=<', 0),
    Below1 = waiter(Name, '<', 1),
    ok = gen_tcp:close(A),
    ok = gen_tcp:close(B),
    ?assertEqual([ok, ok], [waited(R) || R <- [Down0, Below1]]),
    %% Met already: at once, /3 and /4 alike.
    ?assertEqual(ok, sluice:wait_for_connections(Name, '==', 0)),
    ?assertEqual(ok, sluice:wait_for_connections(Name, '<', 5, 1000)).

%% Not met within the timeout: `{error, timeout}', for each Op.
wait_for_each_op_times_out(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{}),
    _Clients = [client(Port) || _ <- [1, 2]],
    ok = sluice:wait_for_connections(Name, '==', 2, 5, ?WAIT),
    T0 = erlang:monotonic_time(millisecond),
    [?assertEqual({error, timeout}, sluice:wait_for_connections(Name, Op, N, 10, 100),
                  {Op, N})
     || {Op, N} <- [{'>', 2}, {'>=', 3}, {'==', 1}, {'=<', 1}, {'<', 2}]],
    %% Each waited its 100 ms, no more than it takes to read a count.
    Took = erlang:monotonic_time(millisecond) - T0,
    ?assert(Took >= 500 andalso Took < 3000, Took).

%% The count is info/1's `connections': a parked connection (no process)
%% and one that removed itself from the limit's count are in it.
wait_counts_parked_and_uncounted_connections(Config) ->
    {Name, S} = pinged_on_a_parking_listener(Config),
    ok = sluice_test_lib:wait_info(Name, parked, 1, ?WAIT),
    ?assertEqual([], sluice:procs(Name, connections)),
    ?assertEqual(ok, sluice:wait_for_connections(Name, '==', 1, 5, 1000)),
    ok = gen_tcp:close(S),
    ok = sluice_test_lib:stop_listener(Name),
    Port2 = start(Config, #{handler => {sluice_handoff_handler, self()}, framing => line}),
    {ok, U} = sluice_test_lib:connect(Port2),
    ok = gen_tcp:send(U, <<"UNCOUNT\n">>),
    {ok, <<"uncounted\n">>} = gen_tcp:recv(U, 10, ?WAIT),
    ok = sluice_test_lib:wait_info(Name, uncounted, 1, ?WAIT),
    ?assertEqual(ok, sluice:wait_for_connections(Name, '==', 1, 5, 1000)),
    ok = gen_tcp:close(U).

%% Bad arguments raise badarg (as ranch's do); an unknown listener, or
%% one that stops while waited on, is `{error, not_found}' (ranch counts
%% it 0 and waits on).
wait_errors(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, #{}),
    [?assertError(badarg, sluice:wait_for_connections(Name, Op, N, I, T), {Op, N, I, T})
     || {Op, N, I, T} <- [{'=:=', 1, 10, 100}, {'<', 0, 10, 100}, {'>', -1, 10, 100},
                          {'>', 1.0, 10, 100}, {'>', 1, -1, 100}, {'>', 1, 0, 100}, {'>', 1, 10, -1},
                          {'>', 1, 10, 1 bsl 32}, {'>', 1, infinity, 100}]],
    ?assertError(badarg, sluice:wait_for_connections(Name, '<', 0)),
    ?assertError(badarg, sluice:wait_for_connections(Name, '>', 1, foo)),
    ?assertEqual({error, not_found}, sluice:wait_for_connections(nobody, '==', 0)),
    ?assertEqual({error, not_found}, sluice:wait_for_connections(nobody, '>', 0, 5, 100)),
    Ref = waiter(Name, '>', 0),
    ok = sluice:stop_listener(Name),
    ?assertEqual({error, not_found}, waited(Ref)).

%%% procs ---------------------------------------------------------------

procs_before_and_after_connections(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{num_acceptors => 3}),
    Acceptors = sluice:procs(Name, acceptors),
    ?assertEqual(3, length(Acceptors)),
    ?assertEqual(lists:sort(sluice_test_lib:acceptor_pids(Name)), lists:sort(Acceptors)),
    ?assertEqual([], sluice:procs(Name, connections)),
    Clients = [client(Port) || _ <- [1, 2, 3]],
    Conns = sluice:procs(Name, connections),
    ?assertEqual(3, length(Conns)),
    ?assertEqual(lists:sort(sluice:connections(Name)), lists:sort(Conns)),
    ?assert(lists:all(fun is_process_alive/1, Conns)),
    %% Suspended: no acceptors, the connections carry on.
    ok = sluice:suspend(Name),
    ?assertEqual([], sluice:procs(Name, acceptors)),
    ?assertEqual(3, length(sluice:procs(Name, connections))),
    ok = sluice:resume(Name),
    ?assertEqual(3, length(sluice:procs(Name, acceptors))),
    [ok = gen_tcp:close(S) || S <- Clients],
    ok = sluice:wait_for_connections(Name, '==', 0, 5, ?WAIT),
    ?assertEqual([], sluice:procs(Name, connections)),
    ?assertEqual([], sluice:procs(nobody, acceptors)),
    ?assertEqual([], sluice:procs(nobody, connections)),
    ?assertError(badarg, sluice:procs(Name, listeners)).

%% A parked connection has no process; woken, it is there with its new pid.
procs_has_a_woken_connections_new_pid(Config) ->
    {Name, S} = pinged_on_a_parking_listener(Config),
    [Before] = sluice:procs(Name, connections),
    ok = sluice_test_lib:wait_info(Name, parked, 1, ?WAIT),
    ?assertEqual([], sluice:procs(Name, connections)),
    ok = gen_tcp:send(S, <<"Ping\n">>),
    {ok, <<"Pong\n">>} = gen_tcp:recv(S, 5, ?WAIT),
    %% Answered by a new process, which may park again at once.
    case sluice:procs(Name, connections) of
        [After] -> ?assertNotEqual(Before, After), ?assert(is_process_alive(After));
        [] -> ok = sluice_test_lib:wait_info(Name, parked, 1, ?WAIT)
    end,
    ?assertNot(is_process_alive(Before)),
    ok = gen_tcp:close(S).

%% A client on a listener whose connections park, after one round trip:
%% its connection's process runs, and parks 200 ms later.
pinged_on_a_parking_listener(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{handler => {sluice_proto_ping, []}, transport => inet,
                           hibernate_after => 20, park_after => 200}),
    {ok, S} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(S, <<"Ping\n">>),
    {ok, <<"Pong\n">>} = gen_tcp:recv(S, 5, ?WAIT),
    {Name, S}.

%%% alarms --------------------------------------------------------------

%% Threshold 2, cooldown 300 ms: nothing at one connection; at the
%% second, the callback gets the listener, the alarm's name, the
%% listener's supervisor and both pids; more connections within the
%% cooldown fire nothing; at its end the count is still up and it fires
%% again, with every pid; below the threshold it fires no more.
alarm_fires_once_per_cooldown_with_the_pids(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{alarms => #{crowd => #{type => num_connections, threshold => 2,
                                                  callback => reporter(crowd),
                                                  cooldown => 300}}}),
    A = client(Port),
    no_alarm(crowd, 100),
    B = client(Port),
    {crowd, Name, crowd, Sup, Pids1, T1} = alarm(crowd),
    ?assertEqual(listener_sup(Name), Sup),
    ?assertEqual(2, length(Pids1)),
    ?assertEqual(lists:sort(sluice:connections(Name)), Pids1),
    More = [client(Port) || _ <- [1, 2, 3]],
    {crowd, Name, crowd, Sup, Pids2, T2} = alarm(crowd),
    ?assert(T2 - T1 >= 300, T2 - T1),
    ?assertEqual(5, length(Pids2)),
    ?assertEqual(lists:sort(sluice:connections(Name)), Pids2),
    [ok = gen_tcp:close(S) || S <- [A, B | More]],
    ok = sluice:wait_for_connections(Name, '==', 0, 5, ?WAIT),
    no_alarm(crowd, 500),
    %% Reached again after the cooldown: fires at once.
    _ = [client(Port) || _ <- [1, 2]],
    {crowd, Name, crowd, Sup, Pids3, _} = alarm(crowd),
    ?assertEqual(2, length(Pids3)),
    adds_up(Name).

%% Cooldown 0: every connection admitted at or above the threshold fires
%% it (the callback returns at once); two alarms fire apart.
alarm_of_cooldown_zero_fires_per_connection(Config) ->
    Port = start(Config, #{alarms => #{each => #{type => num_connections, threshold => 1,
                                                 callback => reporter(each),
                                                 cooldown => 0},
                                       three => #{type => num_connections,
                                                  threshold => 3,
                                                  callback => reporter(three)}}}),
    _ = client(Port),
    {each, _, each, _, [_], _} = alarm(each),
    _ = client(Port),
    {each, _, each, _, [_, _], _} = alarm(each),
    no_alarm(three, 50),
    _ = client(Port),
    {each, _, each, _, [_, _, _], _} = alarm(each),
    {three, _, three, _, [_, _, _], _} = alarm(three).

%% A callback that raises is logged; the listener goes on accepting and
%% serving, nothing restarts, and the alarm fires again after its
%% cooldown, not before (a callback that crashed the process holding the
%% cooldowns fired again at once, from its restart).
a_raising_callback_leaves_the_listener_serving(Config) ->
    Name = ?config(name, Config),
    Self = self(),
    Raise = fun(_, _, _, Pids) ->
                    Self ! {raised, length(Pids), erlang:monotonic_time(millisecond)},
                    error(on_purpose)
            end,
    Port = start(Config, #{alarms => #{boom => #{type => num_connections, threshold => 1,
                                                 callback => Raise, cooldown => 200}}}),
    Sup = listener_sup(Name),
    A = client(Port),
    T1 = receive {raised, 1, Ta} -> Ta after ?WAIT -> error(not_called) end,
    B = client(Port),
    ok = gen_tcp:send(A, <<"still">>),
    {ok, <<"still">>} = gen_tcp:recv(A, 5, ?WAIT),
    %% Called again at the cooldown's end, the count still up.
    T2 = receive {raised, N2, Tb} -> ?assertEqual(2, N2), Tb
         after ?WAIT -> error(not_called_again)
         end,
    ?assert(T2 - T1 >= 200, T2 - T1),
    #{status := running, connections := 2} = sluice:info(Name),
    ?assertEqual(Sup, listener_sup(Name)),
    {ok, #{alarms := AlarmsPid}} = sluice_registry:lookup(Name),
    ?assertEqual([AlarmsPid], [P || {sluice_alarms, P, _, _} <- supervisor:which_children(Sup)]),
    [ok = gen_tcp:close(S) || S <- [A, B]],
    ok = sluice:wait_for_connections(Name, '==', 0, 5, ?WAIT),
    adds_up(Name).

%% A callback that never returns: the listener accepts and serves, the
%% alarm is not called again while it runs (past several cooldowns), and
%% once it returns the alarm fires again.
a_blocking_callback_is_not_called_again_and_blocks_nothing(Config) ->
    Name = ?config(name, Config),
    Self = self(),
    Block = fun(_, _, _, Pids) ->
                    Self ! {blocked, self(), length(Pids)},
                    receive go_on -> ok end
            end,
    Port = start(Config, #{alarms => #{stuck => #{type => num_connections, threshold => 1,
                                                  callback => Block, cooldown => 50}}}),
    A = client(Port),
    Cb = receive {blocked, P, 1} -> P after ?WAIT -> error(not_called) end,
    More = [client(Port) || _ <- lists:seq(1, 5)],
    ok = gen_tcp:send(A, <<"y">>),
    {ok, <<"y">>} = gen_tcp:recv(A, 1, ?WAIT),
    receive {blocked, _, _} = Again -> error({called_while_running, Again})
    after 300 -> ok
    end,
    %% Nor does it hold the API: the alarms change meanwhile.
    Changer = self(),
    _ = spawn_link(fun() ->
                           {ok, #{alarms := #{stuck := Stuck}}} =
                               sluice:get_transport_opts(Name),
                           Changer ! {changed, sluice:set_transport_opts(
                                                 Name, #{alarms => #{stuck => Stuck#{cooldown => 60}}})}
                   end),
    receive {changed, Changed} -> ?assertEqual(ok, Changed) after 1000 -> error(api_held) end,
    Cb ! go_on,
    receive {blocked, Cb2, 6} -> Cb2 ! go_on after ?WAIT -> error(not_called_after) end,
    [ok = gen_tcp:close(S) || S <- [A | More]],
    ok = sluice:wait_for_connections(Name, '==', 0, 5, ?WAIT),
    adds_up(Name).

%% Each bad alarm is refused at start with a sentence that names it, and
%% so by set_transport_opts/2.
bad_alarms_are_refused(Config) ->
    Name = ?config(name, Config),
    Cb = fun(_, _, _, _) -> ok end,
    Good = #{type => num_connections, threshold => 5, callback => Cb},
    Cases = [{x, {not_a_map, x}, "expected a map of alarm name"},
             {[{a}], {not_a_map, [{a}]}, "expected a map of alarm name"},
             {[{a, [1]}], {a, {not_a_map, [1]}}, "alarm a is [1]"},
             {#{a => x}, {a, {not_a_map, x}}, "alarm a is x"},
             {#{a => Good#{type => memory}}, {a, {bad_value, type, memory}},
              "alarm a's type is memory"},
             {#{a => Good#{threshold => 0}}, {a, {bad_value, threshold, 0}},
              "alarm a's threshold is 0"},
             {#{a => Good#{threshold => 1 bsl 63}}, {a, {bad_value, threshold, 1 bsl 63}},
              "threshold"},
             {#{a => Good#{callback => fun(_, _, _) -> ok end}},
              {a, {bad_value, callback, Good#{callback => x}}}, "fun of 4 arguments"},
             {#{a => Good#{cooldown => -1}}, {a, {bad_value, cooldown, -1}},
              "alarm a's cooldown is -1"},
             {#{a => Good#{cooldown => infinity}}, {a, {bad_value, cooldown, infinity}},
              "cooldown"},
             {#{a => maps:remove(callback, Good)}, {a, {missing_key, callback}},
              "alarm a has no callback"},
             {#{a => maps:remove(type, Good)}, {a, {missing_key, type}}, "has no type"},
             {#{a => Good#{treshold => 5}}, {a, {unknown_key, treshold}},
              "here threshold"},
             {#{a => Good#{limit => 5}}, {a, {unknown_key, limit}}, "unknown key limit"}],
    Check = fun({Alarms, Expected, Words}, Result) ->
                    case {Expected, Result} of
                        {{a, {bad_value, callback, _}},
                         {error, {bad_option, alarms, {a, {bad_value, callback, F}}}}}
                          when is_function(F, 3) -> ok;
                        {_, {error, {bad_option, alarms, Expected}}} -> ok;
                        _ -> error({Alarms, Result})
                    end,
                    {error, Reason} = Result,
                    Text = sluice:format_error(Reason),
                    ?assertNotEqual(nomatch, string:find(Text, Words), Text),
                    ?assertEqual(nomatch, string:find(Text, "\n"), Text)
            end,
    [Check(C, sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0,
                                            handler => ?ECHO, alarms => A}))
     || C = {A, _, _} <- Cases],
    ?assertEqual({error, not_found}, sluice:info(Name)),
    _ = start(Config, #{}),
    [Check(C, sluice:set_transport_opts(Name, #{alarms => A})) || C = {A, _, _} <- Cases],
    ?assertEqual({ok, #{}}, maps:find(alarms, element(2, sluice:get_transport_opts(Name)))).

%% set_transport_opts/2 changes the alarms: added ones fire at once when
%% the count is already at their threshold (as ranch's do), removed ones
%% fire no more, and the map get_transport_opts/1 gives is taken back.
set_transport_opts_changes_alarms(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{}),
    _ = [client(Port) || _ <- [1, 2]],
    Two = #{type => num_connections, threshold => 2, callback => reporter(two),
            cooldown => 100},
    ok = sluice:set_transport_opts(Name, #{alarms => #{two => Two}}),
    {two, Name, two, _, [_, _], _} = alarm(two),
    {ok, Opts = #{alarms := #{two := Two}}} = sluice:get_transport_opts(Name),
    ok = sluice:set_transport_opts(Name, Opts),
    {two, Name, two, _, [_, _], _} = alarm(two),   % the next cooldown's
    ok = sluice:set_transport_opts(Name, [{alarms, #{}}]),
    no_alarm(two, 300),
    _ = client(Port),
    no_alarm(two, 100),
    ok = sluice:set_transport_opts(Name, #{alarms => #{three => Two#{threshold => 3,
                                                           callback => reporter(three)}}}),
    {three, Name, three, _, [_, _, _], _} = alarm(three).

%% `alarms' as Elixir's keyword lists, at both levels (`alarms: [crowd:
%% [type: :num_connections, threshold: 1, ...]]'), read as the other
%% options are: the first of a repeated key wins, `[]' is none; the
%% listener holds, and get_transport_opts/1 gives, the map of maps.
alarms_may_be_keyword_lists(Config) ->
    Name = ?config(name, Config),
    Crowd = [{type, num_connections}, {threshold, 1}, {callback, reporter(crowd)},
             {cooldown, 0}, {threshold, 5}],
    Port = start(Config, #{alarms => [{crowd, Crowd}, {crowd, []}]}),
    {ok, #{alarms := Alarms}} = sluice:get_transport_opts(Name),
    ?assertMatch(#{crowd := #{type := num_connections, threshold := 1, cooldown := 0}}, Alarms),
    ?assertEqual([crowd], maps:keys(Alarms)),
    _ = client(Port),
    {crowd, Name, crowd, _, [_], _} = alarm(crowd),
    ok = sluice:set_transport_opts(Name, [{alarms, []}]),
    ?assertMatch({ok, #{alarms := #{}}}, sluice:get_transport_opts(Name)),
    Two = [{type, num_connections}, {threshold, 2}, {callback, reporter(two)}],
    ok = sluice:set_transport_opts(Name, [{alarms, [{two, Two}]}]),
    _ = client(Port),
    {two, Name, two, _, [_, _], _} = alarm(two),
    no_alarm(crowd, 50).
