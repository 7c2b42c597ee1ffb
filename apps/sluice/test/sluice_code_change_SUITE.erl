%% A handler upgraded in place, as a release upgrade (or `l(Mod)' in a
%% shell) does it: release_handler finds the processes that run a module
%% by their supervisors' child specs, suspends them, loads the new code,
%% calls sys:change_code/4 on each and resumes them. Each case loads a
%% first version of a handler written here as source (its state
%% `{v1, N}'), starts a listener on it, loads a second version (its state
%% a map, made from the first by code_change/3) and checks what the
%% connections do then: the live ones and the parked ones reach
%% code_change/3 through release_handler's own walk of the supervision
%% tree, a failed code change keeps the state, and callbacks the new
%% version adds are called.
-module(sluice_code_change_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([an_upgrade_reaches_every_connections_handler/1,
         an_upgrade_reaches_the_parked_connections/1,
         a_connection_that_parks_during_the_upgrade_is_changed/1,
         a_failed_code_change_keeps_the_state/1,
         a_handler_without_code_change_keeps_its_state/1,
         a_reloaded_handler_is_called_with_its_new_callbacks/1,
         a_connection_whose_handler_gained_handle_info_does_not_park/1]).

-define(H, sluice_code_change_handler).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [an_upgrade_reaches_every_connections_handler,
     an_upgrade_reaches_the_parked_connections,
     a_connection_that_parks_during_the_upgrade_is_changed,
     a_failed_code_change_keeps_the_state,
     a_handler_without_code_change_keeps_its_state,
     a_reloaded_handler_is_called_with_its_new_callbacks,
     a_connection_whose_handler_gained_handle_info_does_not_park].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    load(Config, v1()),
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%%% The handler's versions ------------------------------------------------

v1() ->
    ["-module(", atom_to_list(?H), ").\n"
     "-export([init/2, handle_data/2]).\n"
     "init(_Conn, _Opts) -> {ok, {v1, 0}}.\n"
     "handle_data(_Data, {v1, N}) ->\n"
     "    {reply, [<<\"v1:\">>, integer_to_binary(N + 1), $\\n], {v1, N + 1}}.\n"].

%% The state a map; code_change/3 makes it from v1's, and refuses when
%% Extra is `refuse'.
v2() ->
    ["-module(", atom_to_list(?H), ").\n"
     "-export([init/2, handle_data/2, code_change/3]).\n"
     "init(_Conn, _Opts) -> {ok, #{n => 0, extra => none}}.\n"
     "handle_data(_Data, S = #{n := N, extra := E}) ->\n"
     "    {reply, io_lib:format(\"v2:~p:~p~n\", [N + 1, E]), S#{n := N + 1}}.\n"
     "code_change(_Old, {v1, _}, refuse) -> {error, refused};\n"
     "code_change(\"1\", {v1, N}, Extra) -> {ok, #{n => N, extra => Extra}}.\n"].

%% v1 with handle_info/2 added, and nothing else changed.
v1_info() ->
    ["-module(", atom_to_list(?H), ").\n"
     "-export([init/2, handle_data/2, handle_info/2]).\n"
     "init(_Conn, _Opts) -> {ok, {v1, 0}}.\n"
     "handle_data(_Data, {v1, N}) ->\n"
     "    {reply, [<<\"v1:\">>, integer_to_binary(N + 1), $\\n], {v1, N + 1}}.\n"
     "handle_info(Msg, S) -> {reply, io_lib:format(\"info:~p~n\", [Msg]), S}.\n"].

%% What a code upgrade does to a module: the new code becomes current, the
%% old one old (purged first, so that a second load works).
load(Config, Source) ->
    File = filename:join(?config(priv_dir, Config), atom_to_list(?H) ++ ".erl"),
    ok = file:write_file(File, Source),
    {ok, ?H, Bin} = compile:file(File, [binary, report_errors]),
    _ = code:purge(?H),
    {module, ?H} = code:load_binary(?H, File, Bin),
    ok.

%%% release_handler's steps -------------------------------------------------

%% The processes release_handler would suspend and change for an appup's
%% `{update, ?H, {advanced, Extra}}': those whose child spec modules name
%% the handler, found by its own walk of every application's supervision
%% tree.
procs_of(Mod) ->
    [Pid || {_Sup, _Name, Pid, Mods} <- release_handler_1:get_supervised_procs(),
            lists:member(Mod, Mods)].

upgrade(Procs, Extra) ->
    [ok = sys:suspend(P) || P <- Procs],
    Results = [sys:change_code(P, ?H, "1", Extra) || P <- Procs],
    [ok = sys:resume(P) || P <- Procs],
    Results.

%%% Clients --------------------------------------------------------------

connect(Name) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, sluice_test_lib:port(Name),
                                 [binary, {active, false}, {packet, line}], 5000),
    Sock.

ask(Sock) ->
    ok = gen_tcp:send(Sock, <<"x">>),
    {ok, Line} = gen_tcp:recv(Sock, 0, 2000),
    Line.

%%% Cases ----------------------------------------------------------------

%% Every live connection's state goes through the new version's
%% code_change/3, with the upgrade's Extra: the connections are among the
%% processes release_handler finds for the handler (their supervisor's
%% child spec named only sluice_conn, so an appup's update of the handler
%% never reached them), and sys:change_code/4 reaches code_change/3 (it
%% kept the state as it was, and v2's handle_data/2 crashed on it).
an_upgrade_reaches_every_connections_handler(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}, num_conns_sups => 2}),
    Socks = [connect(Name) || _ <- [1, 2, 3]],
    [?assertEqual(<<"v1:1\n">>, ask(S)) || S <- Socks],
    Conns = sluice:connections(Name),
    Procs = procs_of(?H),
    ct:log("processes for ~p: ~p; connections ~p", [?H, Procs, Conns]),
    ?assertEqual([], Conns -- Procs),
    ok = load(Config, v2()),
    Results = upgrade(Procs, upgraded),
    ?assertEqual([ok], lists:usort(Results)),
    [?assertEqual(<<"v2:2:upgraded\n">>, ask(S)) || S <- Socks],
    %% A connection that starts now starts as v2 does.
    New = connect(Name),
    ?assertEqual(<<"v2:1:none\n">>, ask(New)),
    [ok = gen_tcp:close(S) || S <- [New | Socks]].

%% A parked connection has no process: its state is held by its
%% connection supervisor, which release_handler finds for the handler too
%% and whose sys:change_code/4 puts every parked state through
%% code_change/3 (the connection woke with v1's state and crashed).
an_upgrade_reaches_the_parked_connections(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}, park_after => 50,
                                           transport => inet, num_conns_sups => 1}),
    Socks = [connect(Name) || _ <- [1, 2]],
    [?assertEqual(<<"v1:1\n">>, ask(S)) || S <- Socks],
    ok = sluice_test_lib:wait_info(Name, parked, 2, 5000),
    [Sup] = sluice_test_lib:conns_sups(Name),
    Procs = procs_of(?H),
    ?assert(lists:member(Sup, Procs)),
    ok = load(Config, v2()),
    ?assertEqual([ok], lists:usort(upgrade(Procs, upgraded))),
    [?assertEqual(<<"v2:2:upgraded\n">>, ask(S)) || S <- Socks],
    [ok = gen_tcp:close(S) || S <- Socks].

%% A connection nudged to park just before its supervisor is suspended
%% parks after: its state waits in the suspended supervisor's mailbox,
%% not in its table, when the supervisor's code change comes. It is
%% changed too (it stayed v1's, and the connection crashed in v2's
%% handle_data/2 when it woke). The nudge in flight is made certain here
%% by suspending the connection before the sweep sends it
%% (suspend_before_park/3), and waited for as it reaches the connection.
a_connection_that_parks_during_the_upgrade_is_changed(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}, park_after => 50,
                                           transport => inet, num_conns_sups => 1}),
    Sock = connect(Name),
    [Sup] = sluice_test_lib:conns_sups(Name),
    {Conn, N} = suspend_before_park(Name, Sock, 1),
    %% Not polled: a process_info/2 runs the process, which is then not
    %% quiet for the sweep. A trace of what it receives is not.
    receive {trace, Conn, 'receive', {sluice_sweep, park}} -> ok
    after 5000 -> ct:fail(no_park_nudge)
    end,
    _ = erlang:trace(Conn, false, ['receive']),
    ?assertMatch({messages, [{sluice_sweep, park}]}, erlang:process_info(Conn, messages)),
    ok = sys:suspend(Sup),
    Ref = erlang:monitor(process, Conn),
    ok = sys:resume(Conn),
    receive {'DOWN', Ref, process, Conn, normal} -> ok after 5000 -> ct:fail(did_not_park) end,
    ok = load(Config, v2()),
    ?assertEqual(ok, sys:change_code(Sup, ?H, "1", upgraded)),
    ok = sys:resume(Sup),
    ?assertEqual(iolist_to_binary(["v2:", integer_to_list(N + 1), ":upgraded\n"]), ask(Sock)),
    ok = gen_tcp:close(Sock).

%% The connection's process, suspended (sys:suspend/1) before the sweep's
%% park nudge, and the requests it has answered. The nudge comes
%% park_after (50 ms) after the process last ran: a test process that
%% does not get to suspend it by then (a loaded machine) finds it parked,
%% gone from connections/1 (the case failed once so, on a badmatch), or
%% its sys:suspend/1 fails as it parks. Then the next request wakes it and
%% it is tried again.
suspend_before_park(Name, Sock, N) ->
    ?assertEqual(iolist_to_binary(["v1:", integer_to_list(N), "\n"]), ask(Sock)),
    Again = fun() when N < 20 -> suspend_before_park(Name, Sock, N + 1) end,
    case sluice:connections(Name) of
        [Conn] ->
            _ = erlang:trace(Conn, true, ['receive']),
            try sys:suspend(Conn) of
                ok -> {Conn, N}
            catch exit:_ -> Again()
            end;
        [] ->
            Again()
    end.

%% code_change/3 refuses: sys:change_code/4 says so, as it does for a
%% gen_server, and the state is kept: a live connection's, and the parked
%% ones' at their supervisor (none of them changed).
a_failed_code_change_keeps_the_state(Config) ->
    Name = ?config(name, Config),
    Parking = {element(1, Name), parking},
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}}),
    sluice_test_lib:start_listener(Parking, #{handler => {?H, []}, park_after => 50,
                                              transport => inet, num_conns_sups => 1}),
    try
        Live = connect(Name),
        ?assertEqual(<<"v1:1\n">>, ask(Live)),
        [Conn] = sluice:connections(Name),
        Parked = [connect(Parking) || _ <- [1, 2]],
        [?assertEqual(<<"v1:1\n">>, ask(S)) || S <- Parked],
        ok = sluice_test_lib:wait_info(Parking, parked, 2, 5000),
        [Sup] = sluice_test_lib:conns_sups(Parking),
        ok = load(Config, v2()),
        ?assertEqual([{error, {error, refused}}, {error, {error, refused}}],
                     upgrade([Conn, Sup], refuse)),
        ?assertEqual({v1, 1}, sys:get_state(Conn)),
        %% The states are v1's still: v1 answers them again.
        ok = load(Config, v1()),
        [?assertEqual(<<"v1:2\n">>, ask(S)) || S <- [Live | Parked]],
        [ok = gen_tcp:close(S) || S <- [Live | Parked]]
    after
        sluice_test_lib:stop_listener(Parking)
    end.

%% The callback is optional, as a gen_server's: without it the state is
%% kept as it is and the upgrade succeeds.
a_handler_without_code_change_keeps_its_state(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}}),
    Sock = connect(Name),
    ?assertEqual(<<"v1:1\n">>, ask(Sock)),
    [Conn] = sluice:connections(Name),
    ok = load(Config, v1_info()),
    ?assertEqual([ok], upgrade([Conn], whatever)),
    ?assertEqual({v1, 1}, sys:get_state(Conn)),
    ?assertEqual(<<"v1:2\n">>, ask(Sock)),
    ok = gen_tcp:close(Sock).

%% A handler reloaded with a callback it did not have: a connection that
%% starts afterwards, and one that was there and went through
%% sys:change_code/4, call it (which optional callbacks a handler has was
%% read once, at the listener's start: messages to both were dropped).
a_reloaded_handler_is_called_with_its_new_callbacks(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}}),
    Old = connect(Name),
    ?assertEqual(<<"v1:1\n">>, ask(Old)),
    [OldConn] = sluice:connections(Name),
    ok = load(Config, v1_info()),
    New = connect(Name),
    ?assertEqual(<<"v1:1\n">>, ask(New)),
    [NewConn] = sluice:connections(Name) -- [OldConn],
    NewConn ! hello,
    ?assertEqual({ok, <<"info:hello\n">>}, gen_tcp:recv(New, 0, 2000)),
    ?assertEqual([ok], upgrade([OldConn], none)),
    OldConn ! again,
    ?assertEqual({ok, <<"info:again\n">>}, gen_tcp:recv(Old, 0, 2000)),
    [ok = gen_tcp:close(S) || S <- [Old, New]].

%% A listener that parks (its handler had neither handle_info/2 nor
%% handle_call/3 when it started), and a handler reloaded with
%% handle_info/2: its connections must keep their pid, which a message to
%% it needs (they parked, and the message was lost with the process).
a_connection_whose_handler_gained_handle_info_does_not_park(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?H, []}, park_after => 50,
                                           transport => inet, num_conns_sups => 1}),
    Before = connect(Name),
    ?assertEqual(<<"v1:1\n">>, ask(Before)),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 5000),
    ok = load(Config, v1_info()),
    Sock = connect(Name),
    ?assertEqual(<<"v1:1\n">>, ask(Sock)),
    [Conn] = sluice:connections(Name),
    %% Past several park_afters and sweep ticks.
    timer:sleep(500),
    ?assert(is_process_alive(Conn)),
    ?assertEqual(1, maps:get(parked, sluice:info(Name))),
    Conn ! still_here,
    ?assertEqual({ok, <<"info:still_here\n">>}, gen_tcp:recv(Sock, 0, 2000)),
    [ok = gen_tcp:close(S) || S <- [Before, Sock]].
