%% Connection limits and accounting: max_connections holds exactly under a
%% burst and can be changed at run time; killed connection processes,
%% connection supervisors and acceptors never leak a slot or stop the
%% listener; running out of descriptors (emfile) is counted, logged at a
%% limited rate and recovered from, and the default limit sits below the
%% descriptor limit so that connections are rejected instead.
-module(sluice_limits_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([a_connection_loads_no_code/1]).
-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([burst_admits_exactly_max_connections/1,
         over_limit_connection_waits_for_a_slot/1,
         listener_full_for_longer_than_the_wait_closes_newcomers_at_once/1,
         drain_of_a_full_listener_does_not_wait_for_a_slot/1,
         connections_over_the_limit_are_logged_at_most_once_a_second/1,
         named_port_shared_by_another_socket_is_refused/1,
         set_max_connections_at_run_time/1,
         stalled_reader_is_held_back/1,
         killed_connections_give_their_slots_back/1,
         killed_conns_sup_is_restarted_and_count_stays_right/1,
         killed_acceptor_is_restarted_and_listener_keeps_accepting/1,
         killed_acceptor_loses_no_connection_handed_over/1,
         killed_conns_sup_with_a_start_queued_leaves_the_count_exact/1,
         emfile_is_counted_logged_and_recovered_from/1,
         default_limit_rejects_before_emfile/1]).

-import(sluice_test_lib, [ping_results/2, ping_results/3, ping_sock/1, wait_info/4]).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, inet}, {group, socket}].

groups() ->
    [{limits, [], [burst_admits_exactly_max_connections, set_max_connections_at_run_time,
                   over_limit_connection_waits_for_a_slot,
                   listener_full_for_longer_than_the_wait_closes_newcomers_at_once,
                   drain_of_a_full_listener_does_not_wait_for_a_slot,
                   connections_over_the_limit_are_logged_at_most_once_a_second,
                   named_port_shared_by_another_socket_is_refused,
                   stalled_reader_is_held_back]},
     {kills, [], [killed_connections_give_their_slots_back,
                  killed_conns_sup_is_restarted_and_count_stays_right,
                  killed_acceptor_is_restarted_and_listener_keeps_accepting,
                  killed_acceptor_loses_no_connection_handed_over,
                  killed_conns_sup_with_a_start_queued_leaves_the_count_exact]},
     {descriptors, [], [emfile_is_counted_logged_and_recovered_from,
                        default_limit_rejects_before_emfile,
                        a_connection_loads_no_code]}]
        ++ sluice_test_lib:backend_groups([{group, limits}, {group, kills},
                                           {group, descriptors}]).

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

%% The descriptor cases run their listener in a peer VM with a lower
%% `ulimit -n', started here and stopped in end_per_testcase.
init_per_testcase(Case, Config) ->
    Peer = case Case of
               emfile_is_counted_logged_and_recovered_from -> sluice_test_lib:start_peer(64, []);
               default_limit_rejects_before_emfile -> sluice_test_lib:start_peer(256, []);
               a_connection_loads_no_code -> sluice_test_lib:start_peer(256, []);
               _ -> undefined
           end,
    [{name, {?MODULE, Case}}, {peer, Peer} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_peer(?config(peer, Config)),
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

ping_listener(Name, Opts) ->
    sluice_test_lib:start_listener(Name, Opts#{handler => {sluice_proto_ping, []}}),
    sluice_test_lib:port(Name).

admitted(Results) -> [S || {admitted, S} <- Results].
rejected(Results) -> [R || {rejected, R} <- Results].
silent(Results) -> [S || {silent, S} <- Results].

close_all(Socks) -> [gen_tcp:close(S) || S <- Socks], ok.

%%% ------------------------------------------------------------------
%%% Limits
%%% ------------------------------------------------------------------

%% A client that writes to an echo listener and never reads: the echoes
%% fill the kernel's buffers, the connection process's sends wait, and it
%% reads no more, so its memory and mailbox stay small while the client is
%% held back by TCP. On the socket backend the wait ends at send_timeout
%% (500 ms here) and the connection is closed. (The inet backend's
%% asynchronous port commands are suspended on a busy port instead; the
%% driver's timeout error is queued behind the chunks already delivered,
%% so it closes much later: not asserted.)
stalled_reader_is_held_back(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                           socket_opts => [{send_timeout, 500},
                                                           {sndbuf, 8192}]}),
    %% linger 0: however the case ends, closing resets instead of waiting
    %% for the unsent flood to drain
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name),
                                      [{recbuf, 4096}, {linger, {true, 0}}]),
    sluice_test_lib:wait_until(fun() -> length(sluice_test_lib:conn_pids(Name)) =:= 1 end, 5000),
    [Conn] = sluice_test_lib:conn_pids(Name),
    Chunk = binary:copy(<<"x">>, 65536),
    Writer = spawn_link(fun() -> write_until_error(S, Chunk, 1000) end),
    T0 = erlang:monotonic_time(millisecond),
    timer:sleep(300),
    Info = process_info(Conn, [memory, message_queue_len]),
    Read = erlang:monotonic_time(millisecond) - T0,
    ct:log("~p: connection ~b ms into a stalled reader: ~p",
           [?config(transport, Config), Read, Info]),
    %% Held back, not gone: a connection that died (and whose socket's
    %% queued echoes kept the client blocked) would otherwise skip the
    %% checks below. Only the socket backend's send_timeout (500 ms from
    %% when the sends began to wait, after T0) may have closed it, and
    %% only if this read came late.
    case {Info, ?config(transport, Config)} of
        {undefined, socket} when Read >= 450 -> ok;
        {undefined, _} -> ct:fail({connection_gone_after, Read});
        {[{memory, Mem}, {message_queue_len, Q}], _} ->
            ?assert(Mem < 1024 * 1024, {memory, Mem}),
            ?assert(Q =< 110, {mailbox, Q})
    end,
    ?assert(is_process_alive(Writer), writer_not_held_back),
    case ?config(transport, Config) of
        socket ->
            wait_info(Name, connections, 0, 5000),
            Took = erlang:monotonic_time(millisecond) - T0,
            ct:log("closed after ~b ms", [Took]),
            ?assert(Took >= 450, {closed_before_send_timeout, Took});
        inet ->
            ok
    end,
    unlink(Writer),
    exit(Writer, kill),
    ok = gen_tcp:close(S).

write_until_error(_S, _Chunk, 0) -> ok;
write_until_error(S, Chunk, N) ->
    case gen_tcp:send(S, Chunk) of
        ok -> write_until_error(S, Chunk, N - 1);
        _ -> ok
    end.

%% 500 clients connect at once to a listener with max_connections 100 and 10
%% acceptors: exactly 100 get a Pong and 400 are closed by the server, and
%% info/1 counts the same; once the clients leave, connections is 0 again.
burst_admits_exactly_max_connections(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 100, num_acceptors => 10}),
    Results = ping_results(Port, 500),
    Admitted = admitted(Results),
    Summary = lists:foldl(fun(R, Acc) -> maps:update_with(element(1, R), fun(N) -> N + 1 end,
                                                          1, Acc) end, #{}, Results),
    ct:log("results ~p; info ~p", [Summary, sluice:info(Name)]),
    ?assertEqual(#{admitted => 100, rejected => 400}, Summary),
    ?assertMatch(#{accepted := 100, rejected := 400, connections := 100}, sluice:info(Name)),
    close_all(Admitted),
    wait_info(Name, connections, 0, 5000),
    ?assertMatch(#{closed := 100}, sluice:info(Name)).

%% A reconnect storm's clients are back before their old connections have
%% closed on the server. A connection over the limit therefore waits up to
%% max_connections_wait for a slot (its acceptor accepts nothing
%% meanwhile) instead of being closed at once: here the third client of a
%% listener limited to two is answered once one of the first two leaves,
%% 300 ms later, and nothing is rejected. With max_connections_wait 0 the
%% same third client is closed at once, as before the option existed.
over_limit_connection_waits_for_a_slot(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 2, max_connections_wait => 3000}),
    [A, B] = admitted(ping_results(Port, 2)),
    Self = self(),
    Leaver = spawn_link(fun() -> receive go -> timer:sleep(300), gen_tcp:close(A), Self ! left end end),
    ok = gen_tcp:controlling_process(A, Leaver),
    Leaver ! go,
    T0 = erlang:monotonic_time(millisecond),
    [Third] = ping_results(Port, 1),
    Waited = erlang:monotonic_time(millisecond) - T0,
    receive left -> ok end,
    ct:log("third client: ~p after ~b ms; info ~p", [Third, Waited, sluice:info(Name)]),
    ?assertMatch({admitted, _}, Third),
    ?assert(Waited >= 250, Waited),
    ?assertMatch(#{accepted := 3, rejected := 0, connections := 2}, sluice:info(Name)),
    close_all([B, element(2, Third)]),
    ok = sluice:stop_listener(Name),
    Name0 = {Name, no_wait},
    Port0 = ping_listener(Name0, #{max_connections => 2, max_connections_wait => 0}),
    Two = admitted(ping_results(Port0, 2)),
    T1 = erlang:monotonic_time(millisecond),
    ?assertMatch([{rejected, _}], ping_results(Port0, 1)),
    ?assert(erlang:monotonic_time(millisecond) - T1 < 250),
    close_all(Two),
    ok = sluice:stop_listener(Name0).

%% A listener that stays full does not keep newcomers waiting one after
%% another: once it has been full for longer than max_connections_wait,
%% every connection over the limit is closed at once, until one is
%% admitted again.
listener_full_for_longer_than_the_wait_closes_newcomers_at_once(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 1, max_connections_wait => 400}),
    [A] = admitted(ping_results(Port, 1)),
    T0 = erlang:monotonic_time(millisecond),
    %% the first over the limit waits for the whole 400 ms
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    First = erlang:monotonic_time(millisecond) - T0,
    T1 = erlang:monotonic_time(millisecond),
    Later = ping_results(Port, 5),
    Rest = erlang:monotonic_time(millisecond) - T1,
    ct:log("first rejected after ~b ms, five more in ~b ms: ~p", [First, Rest, Later]),
    ?assert(First >= 350, First),
    ?assertEqual(5, length(rejected(Later))),
    ?assert(Rest < 350, Rest),
    %% a slot frees: the next is admitted, and the wait starts anew after it
    ok = gen_tcp:close(A),
    wait_info(Name, connections, 0, 5000),
    [{admitted, B}] = ping_results(Port, 1),
    T2 = erlang:monotonic_time(millisecond),
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    ?assert(erlang:monotonic_time(millisecond) - T2 >= 350),
    close_all([B]).

%% A drain of a full listener while a newcomer waits for a slot: the
%% newcomer's acceptor gives up at once (the listener no longer accepts),
%% the newcomer is closed and counted rejected, and drain/2 keeps its own
%% deadline. The drain waited for the acceptor's whole
%% max_connections_wait (an hour at most) before telling any connection,
%% so that drain(Name, 0) took a minute here and a SIGTERM drain of a
%% full server spent its deadline before it began.
drain_of_a_full_listener_does_not_wait_for_a_slot(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 1, max_connections_wait => 60000}),
    [A] = admitted(ping_results(Port, 1)),
    {ok, Waiting} = sluice_test_lib:connect(Port),
    sluice_test_lib:wait_until(fun() -> waiting_for_a_slot(Name) end, 5000),
    Self = self(),
    ok = sluice_log_forwarder:start(self()),
    Drainer = spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 0)} end),
    Drained = receive {drained, R} -> R after 20000 -> {still_draining, Drainer} end,
    ct:log("drain: ~p; info ~p", [Drained, sluice:info(Name)]),
    ?assertMatch({ok, _}, Drained),
    sluice_test_lib:expect_closed(Waiting, 5000),
    sluice_log_forwarder:stop(),
    %% Closed because the listener stopped accepting, not for its limit:
    %% no "max_connections reached" line.
    ?assertEqual([], [Text || {log, warning, Text, _} <- flush_logs(),
                              string:find(Text, "max_connections") =/= nomatch]),
    ?assertMatch(#{status := suspended, accepted := 1, rejected := 1}, sluice:info(Name)),
    close_all([A]),
    wait_info(Name, connections, 0, 5000),
    ?assertMatch(#{accepted := 1, closed := 1}, sluice:info(Name)).

%% A full listener says so in the log, as one out of descriptors does: at
%% most one line a second however many clients it closes, naming the
%% listener and its limit. (It closed them without a word: an operator
%% whose clients were turned away found nothing in the log.)
connections_over_the_limit_are_logged_at_most_once_a_second(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 1, max_connections_wait => 0}),
    [A] = admitted(ping_results(Port, 1)),
    T0 = erlang:monotonic_time(millisecond),
    ok = sluice_log_forwarder:start(self()),
    Results = try ping_results(Port, 30)
              after sluice_log_forwarder:stop()
              end,
    Elapsed = (erlang:monotonic_time(millisecond) - T0) div 1000,
    Lines = [Text || {log, warning, Text, _} <- flush_logs(),
                     string:find(Text, "max_connections") =/= nomatch],
    ct:log("~b log lines in ~b s: ~p", [length(Lines), Elapsed, Lines]),
    ?assertEqual(30, length(rejected(Results))),
    ?assertMatch(#{rejected := 30}, sluice:info(Name)),
    ?assert(length(Lines) >= 1),
    ?assert(length(Lines) =< Elapsed + 2),
    [First | _] = Lines,
    ?assertNotEqual(nomatch, string:find(First, io_lib:format("~p", [Name]))),
    ?assertNotEqual(nomatch, string:find(First, "(1)")),
    close_all([A]).

flush_logs() ->
    receive {log, _, _, _} = Log -> [Log | flush_logs()]
    after 0 -> []
    end.

%% An acceptor of the listener is in its wait for a slot.
waiting_for_a_slot(Name) ->
    lists:any(fun(Pid) ->
                      process_info(Pid, current_function)
                          =:= {current_function, {sluice_stats, retry_admit, 2}}
              end, sluice_test_lib:acceptor_pids(Name)).

%% A listener's listen sockets share their port with each other
%% (SO_REUSEPORT, four by default), never with a socket of someone else that
%% has the option too: a named port already bound that way is refused with
%% eaddrinuse, as one socket would be. A listener that asks for reuseport
%% itself shares it.
named_port_shared_by_another_socket_is_refused(Config) ->
    Name = ?config(name, Config),
    ReusePort = {raw, 1, 15, <<1:32/native>>},
    {ok, Other} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}, ReusePort]),
    {ok, Port} = inet:port(Other),
    ?assertMatch(#{num_listen_sockets := 4}, sluice_opts:defaults()),
    ?assertEqual({error, eaddrinuse},
                 sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => Port,
                                               handler => {sluice_proto_ping, []},
                                               transport => sluice_test_lib:transport()})),
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => Port,
                                            reuseport => true,
                                            handler => {sluice_proto_ping, []},
                                            transport => sluice_test_lib:transport()}),
    ok = sluice:stop_listener(Name),
    ok = gen_tcp:close(Other),
    %% Nor does a second listener join a first one's two sockets.
    Port2 = ping_listener(Name, #{}),
    ?assertEqual({error, eaddrinuse},
                 sluice:start_listener({Name, second}, #{ip => {127, 0, 0, 1}, port => Port2,
                                                         handler => {sluice_proto_ping, []},
                                                         transport => sluice_test_lib:transport()})),
    ok = sluice:stop_listener(Name).

%% set_max_connections/2 takes effect for the next connection: raising the
%% limit admits more; lowering it below the current count closes nothing
%% but rejects newcomers until enough have left; infinity lifts it; a bad
%% value or an unknown listener is an error.
set_max_connections_at_run_time(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 5}),
    First = admitted(ping_results(Port, 5)),
    ?assertEqual(5, length(First)),
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    ok = sluice:set_max_connections(Name, 10),
    ?assertMatch(#{max_connections := 10}, sluice:info(Name)),
    Second = admitted(ping_results(Port, 5)),
    ?assertEqual(5, length(Second)),
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    %% Lowering: all ten stay up and served, newcomers are refused.
    ok = sluice:set_max_connections(Name, 3),
    ?assert(lists:all(fun sluice_test_lib:ping_sock/1, First ++ Second)),
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    ?assertMatch(#{connections := 10, max_connections := 3}, sluice:info(Name)),
    {Leave, Stay} = lists:split(8, First ++ Second),
    close_all(Leave),
    wait_info(Name, connections, 2, 5000),
    [{admitted, Third}] = ping_results(Port, 1),
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    ok = sluice:set_max_connections(Name, infinity),
    ?assertMatch(#{max_connections := infinity}, sluice:info(Name)),
    More = admitted(ping_results(Port, 10)),
    ?assertEqual(10, length(More)),
    ?assertMatch(#{rejected := 4, accepted := 21}, sluice:info(Name)),
    ?assertEqual({error, {bad_option, max_connections, -1}},
                 sluice:set_max_connections(Name, -1)),
    ?assertEqual({error, not_found}, sluice:set_max_connections(no_such_listener, 5)),
    close_all([Third | Stay ++ More]),
    wait_info(Name, connections, 0, 5000).

%%% ------------------------------------------------------------------
%%% Kills
%%% ------------------------------------------------------------------

%% Killing every connection process (exit kill: no terminate, no cleanup
%% in the process) frees every slot: connections goes back to 0, each kill
%% counts as closed, the clients see their sockets close, and a full set of
%% new connections is admitted under the same limit.
killed_connections_give_their_slots_back(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 20}),
    Socks = admitted(ping_results(Port, 20)),
    ?assertEqual(20, length(Socks)),
    Pids = sluice_test_lib:conn_pids(Name),
    ?assertEqual(20, length(Pids)),
    [exit(Pid, kill) || Pid <- Pids],
    wait_info(Name, connections, 0, 5000),
    [sluice_test_lib:expect_closed(S, 2000) || S <- Socks],
    ?assertMatch(#{closed := 20, accepted := 20}, sluice:info(Name)),
    Again = admitted(ping_results(Port, 20)),
    ?assertEqual(20, length(Again)),
    close_all(Socks ++ Again),
    wait_info(Name, connections, 0, 5000).

%% Killing a connection supervisor takes its connections down with it (and
%% only them); it is restarted under a new pid, the live count equals what
%% the other supervisor still holds, and the freed slots can be used again:
%% exactly max_connections are admitted, not one more.
killed_conns_sup_is_restarted_and_count_stays_right(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{max_connections => 20, num_conns_sups => 2,
                                 num_acceptors => 4}),
    Socks = admitted(ping_results(Port, 20)),
    ?assertEqual(20, length(Socks)),
    [Sup1, Sup2] = sluice_test_lib:conns_sups(Name),
    Children = fun(Sup) -> [P || {_, P, _, _} <- supervisor:which_children(Sup)] end,
    %% Kill the busier one, so the kill is sure to take connections down.
    {Victim, Survivor} = case length(Children(Sup1)) >= length(Children(Sup2)) of
                             true -> {Sup1, Sup2};
                             false -> {Sup2, Sup1}
                         end,
    Lost = length(Children(Victim)),
    Kept = Children(Survivor),
    ct:log("killing a conns_sup with ~b connections, the other has ~b", [Lost, length(Kept)]),
    ?assert(Lost > 0),
    exit(Victim, kill),
    sluice_test_lib:wait_until(
      fun() -> Sups = sluice_test_lib:conns_sups(Name),
               length(Sups) =:= 2 andalso not lists:member(Victim, Sups) end, 5000),
    wait_info(Name, connections, length(Kept), 5000),
    ?assertEqual(lists:sort(Kept), lists:sort(Children(Survivor))),
    {Open, Closed} = lists:partition(fun sluice_test_lib:ping_sock/1, Socks),
    ?assertEqual({length(Kept), Lost}, {length(Open), length(Closed)}),
    New = admitted(ping_results(Port, Lost)),
    ?assertEqual(Lost, length(New)),
    ?assertMatch([{rejected, _}], ping_results(Port, 1)),
    ?assertMatch(#{connections := 20}, sluice:info(Name)),
    close_all(Socks ++ New),
    wait_info(Name, connections, 0, 5000).

%% With a single acceptor, killing it leaves the listen socket open (its
%% owner is sluice_listen_sockets): a new acceptor takes over on the same
%% port, new connections are accepted, and an existing one is untouched.
%% The inet driver may have handed one connection to the killed acceptor's
%% pending accept before it learns of the death (the port then closes with
%% its dead owner; gen_tcp cannot cancel that accept): the first client
%% after the kill may be closed, never any later one.
killed_acceptor_is_restarted_and_listener_keeps_accepting(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Name, #{num_acceptors => 1}),
    [Before] = admitted(ping_results(Port, 1)),
    [Acceptor] = sluice_test_lib:acceptor_pids(Name),
    exit(Acceptor, kill),
    sluice_test_lib:wait_until(
      fun() -> case sluice_test_lib:acceptor_pids(Name) of
                   [New] -> New =/= Acceptor;
                   _ -> false
               end
      end, 5000),
    First = ping_results(Port, 1),
    ct:log("first client after the kill: ~p", [First]),
    Results = ping_results(Port, 5),
    After = admitted(Results),
    ?assertEqual(5, length(After), Results),
    ?assert(ping_sock(Before)),
    N = 6 + length(admitted(First)),
    ?assertMatch(#{status := running, connections := N, accepted := N}, sluice:info(Name)),
    ?assertEqual(Port, sluice_test_lib:port(Name)),
    close_all([Before | After] ++ admitted(First)).

%%% ------------------------------------------------------------------
%%% Descriptors: a peer VM with a low `ulimit -n'
%%% ------------------------------------------------------------------

%% In a VM limited to 64 descriptors, a listener without a connection limit
%% runs out of them: accept fails with emfile, which is counted in
%% accept_errors and logged at most about once a second (not once per
%% error); the excess is closed at once (the acceptor's spare descriptor),
%% none left waiting silently in the backlog, and counted as rejected; the
%% connections it already has keep being served; once the client closes
%% most of them, new connections are accepted again.
emfile_is_counted_logged_and_recovered_from(Config) ->
    Peer = ?config(peer, Config),
    ok = peer:call(Peer, sluice_test_lib, capture_logs, []),
    {ok, _} = peer:call(Peer, sluice, start_listener,
                        [emf, #{ip => {127, 0, 0, 1}, port => 0, max_connections => infinity,
                                transport => sluice_test_lib:transport(),
                                handler => {sluice_proto_ping, []}}]),
    #{port := Port} = peer:call(Peer, sluice, info, [emf]),
    T0 = erlang:monotonic_time(millisecond),
    %% Silent clients wait 3 s for a Pong that does not come.
    Acceptors = peer:call(Peer, sluice_test_lib, acceptor_pids, [emf]),
    Results = ping_results(Port, 200, 3000),
    ct:log("acceptors: ~p", [[peer:call(Peer, erlang, process_info,
                                        [A, [current_function, current_stacktrace, status]])
                              || A <- Acceptors]]),
    Admitted = admitted(Results),
    Silent = silent(Results),
    Info = peer:call(Peer, sluice, info, [emf]),
    ct:log("admitted ~b, silent ~b, rejected ~p; info ~p",
           [length(Admitted), length(Silent), rejected(Results), Info]),
    ?assert(length(Admitted) > 10),
    ?assert(length(Admitted) < 64),
    ?assertEqual({200, []}, {length(Admitted) + length(rejected(Results)), Silent}),
    #{accept_errors := #{emfile := Emfiles}, rejected := Rejected} = Info,
    ?assertEqual(200 - length(Admitted), Rejected),
    ?assert(Emfiles >= 1),
    %% The connections it has are still served.
    ?assert(lists:all(fun sluice_test_lib:ping_sock/1, Admitted)),
    %% Free the descriptors: the server sees the closes and accepts again.
    {Keep, Leave} = lists:split(2, Admitted),
    close_all(Leave ++ Silent),
    sluice_test_lib:wait_until(
      fun() -> case ping_results(Port, 1) of
                   [{admitted, S}] -> put(late, S), true;
                   Other -> close_all([S || {_, S} <- Other, is_port(S)]), Other
               end
      end, 15000, 200),
    ?assert(lists:all(fun sluice_test_lib:ping_sock/1, Keep)),
    ?assertMatch(#{status := running}, peer:call(Peer, sluice, info, [emf])),
    close_all([get(late) | Keep]),
    %% Rate-limited logging: many errors, about one line a second (read
    %% now that the peer can load the formatting code again).
    Elapsed = (erlang:monotonic_time(millisecond) - T0) div 1000,
    Logs = peer:call(Peer, sluice_test_lib, captured_logs, [], 15000),
    ct:log("all captured logs: ~p", [Logs]),
    Lines = [Msg || {_, warning, Msg} <- Logs, string:find(Msg, "accept failed: emfile") =/= nomatch],
    ct:log("~b emfile errors, ~b log lines in ~b s:~n~p", [Emfiles, length(Lines), Elapsed, Lines]),
    ?assert(length(Lines) >= 1),
    ?assert(length(Lines) =< Elapsed + 2).

%% With `ulimit -n 256' and no max_connections option, the default limit is
%% the descriptor limit less a reserve: 300 clients get exactly that many
%% admitted and the rest rejected, with no accept error at all.
default_limit_rejects_before_emfile(Config) ->
    Peer = ?config(peer, Config),
    {ok, _} = peer:call(Peer, sluice, start_listener,
                        [dflt, #{ip => {127, 0, 0, 1}, port => 0,
                                 transport => sluice_test_lib:transport(),
                                 handler => {sluice_proto_ping, []}}]),
    #{port := Port, max_connections := Max} = peer:call(Peer, sluice, info, [dflt]),
    ct:log("default max_connections with ulimit -n 256: ~p", [Max]),
    ?assert(is_integer(Max) andalso Max > 0 andalso Max < 256),
    Results = ping_results(Port, 300),
    Info = peer:call(Peer, sluice, info, [dflt]),
    ct:log("info ~p", [Info]),
    ?assertEqual({Max, 300 - Max, []},
                 {length(admitted(Results)), length(rejected(Results)), silent(Results)}),
    ?assertMatch(#{accept_errors := Errors} when map_size(Errors) =:= 0, Info),
    ?assertMatch(#{accepted := Max, rejected := Rejected} when Rejected =:= 300 - Max, Info),
    close_all(admitted(Results)).

%% An acceptor hands each socket to a conns_sup and goes back to
%% accepting. Killed right after (suspend/1 and drain/2 brutal_kill
%% acceptors), it loses nothing: the conns_sup owns the socket already,
%% starts the connection and counts it. Here the conns_sup is held
%% (sys:suspend) while a client connects, the acceptor is killed, and the
%% conns_sup resumed.
killed_acceptor_loses_no_connection_handed_over(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ping, []},
                                               num_acceptors => 1, num_conns_sups => 1}),
    Port = sluice_test_lib:port(Name),
    [Sup] = sluice_test_lib:conns_sups(Name),
    [Acceptor] = sluice_test_lib:acceptor_pids(Name),
    ok = sys:suspend(Sup),
    {ok, S} = sluice_test_lib:connect(Port),
    ok = wait_start_queued(Sup),
    exit(Acceptor, kill),
    ok = sys:resume(Sup),
    ?assert(sluice_test_lib:ping_sock(S)),
    ?assertMatch(#{connections := 1, accepted := 1}, sluice:info(Name)),
    ok = gen_tcp:close(S),
    ok = wait_info(Name, connections, 0, 2000).

%% The acceptor's request is in the held conns_sup's mailbox.
wait_start_queued(Sup) ->
    sluice_test_lib:wait_until(
      fun() ->
              {messages, Ms} = process_info(Sup, messages),
              lists:any(fun({sluice_start, _}) -> true; (_) -> false end, Ms)
      end, 2000, 10).

%% A conns_sup that dies with a connection handed to it and not started:
%% the socket closes with it, and its next generation gives back what was
%% counted in its slot, this connection included: the live count is exact,
%% and the restarted conns_sup serves the next client.
killed_conns_sup_with_a_start_queued_leaves_the_count_exact(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ping, []},
                                               num_acceptors => 1, num_conns_sups => 1}),
    Port = sluice_test_lib:port(Name),
    [Sup] = sluice_test_lib:conns_sups(Name),
    [_Acceptor] = sluice_test_lib:acceptor_pids(Name),
    ok = sys:suspend(Sup),
    {ok, S} = sluice_test_lib:connect(Port),
    ok = wait_start_queued(Sup),
    ?assertMatch(#{connections := 1}, sluice:info(Name)),
    exit(Sup, kill),
    ok = sluice_test_lib:expect_closed(S, 2000),
    ok = wait_info(Name, connections, 0, 2000),
    ok = sluice_test_lib:wait_until(fun() -> sluice_test_lib:conns_sups(Name) =/= [Sup] end, 2000),
    {ok, S2} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(S2)),
    ?assertMatch(#{connections := 1}, sluice:info(Name)),
    ok = gen_tcp:close(S2),
    ok = wait_info(Name, connections, 0, 2000).

%% A connection's code is loaded when the listener starts, not by the
%% first connection: with the descriptors gone (the case above), the code
%% server could not open a .beam file and every connection would die with
%% undef (counted `crashed', not `rejected'). In a fresh VM (interactive
%% mode, as a release in development runs), a client's whole life on a
%% listener (accept, a request, its close) loads no module.
a_connection_loads_no_code(Config) ->
    Peer = ?config(peer, Config),
    {ok, _} = peer:call(Peer, sluice, start_listener,
                        [nocode, #{ip => {127, 0, 0, 1}, port => 0,
                                   transport => sluice_test_lib:transport(),
                                   handler => {sluice_proto_ping, []}}]),
    #{port := Port} = peer:call(Peer, sluice, info, [nocode]),
    Loaded = fun() -> lists:sort([M || {M, _} <- peer:call(Peer, code, all_loaded, [])]) end,
    Before = Loaded(),
    [S] = admitted(ping_results(Port, 1)),
    ?assert(ping_sock(S)),
    close_all([S]),
    ok = sluice_test_lib:wait_until(
           fun() -> maps:get(closed, peer:call(Peer, sluice, info, [nocode])) =:= 1 end, 5000),
    ?assertEqual([], Loaded() -- Before).
