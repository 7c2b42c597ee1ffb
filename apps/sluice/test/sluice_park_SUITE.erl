%% Parked connections (sluice_conns_sup, sluice_conn's park/1): a quiet
%% inet connection whose handler has no handle_info/2 hands its socket and
%% state to its conns_sup and exits; its next event starts a new process.
%% Each case checks what a client and sluice:info/1 see: answers as before,
%% state kept, still counted (and limited), closed by the peer, the idle
%% timeout, a drain (with FIN) or a stop, and no parking where it cannot
%% work (socket backend, a handler with handle_info/2 or handle_call/3,
%% active false, park_after infinity), and a drain a handler carries on
%% through still closes at its deadline.
-module(sluice_park_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([quiet_connection_parks_and_still_answers/1,
         handler_state_survives_parking/1,
         every_active_mode_resumes_after_parking/1,
         pings_around_the_park_threshold_all_get_answers/1,
         ping_delivered_while_parking_is_answered/1,
         peer_close_of_a_parked_connection_is_counted/1,
         idle_timeout_closes_a_parked_connection/1,
         drain_closes_a_parked_connection_with_fin/1,
         drain_carried_on_closes_parked_and_quiet_connections_at_the_deadline/1,
         idle_timeout_runs_on_through_a_drain_that_woke_a_parked_connection/1,
         drain_carried_on_keeps_reading_a_woken_connection/1,
         handler_that_traps_exits_does_not_park/1,
         call_answered_later_is_not_lost_to_parking/1,
         stop_closes_parked_connections/1,
         killed_conns_sup_closes_its_parked_connections/1,
         parked_connections_count_against_the_limit/1,
         no_parking_where_it_cannot_work/1,
         bad_park_after_is_refused/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [quiet_connection_parks_and_still_answers,
     handler_state_survives_parking,
     every_active_mode_resumes_after_parking,
     pings_around_the_park_threshold_all_get_answers,
     ping_delivered_while_parking_is_answered,
     peer_close_of_a_parked_connection_is_counted,
     idle_timeout_closes_a_parked_connection,
     drain_closes_a_parked_connection_with_fin,
     drain_carried_on_closes_parked_and_quiet_connections_at_the_deadline,
     idle_timeout_runs_on_through_a_drain_that_woke_a_parked_connection,
     drain_carried_on_keeps_reading_a_woken_connection,
     handler_that_traps_exits_does_not_park,
     call_answered_later_is_not_lost_to_parking,
     stop_closes_parked_connections,
     killed_conns_sup_closes_its_parked_connections,
     parked_connections_count_against_the_limit,
     no_parking_where_it_cannot_work,
     bad_park_after_is_refused].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    ok = sluice_faulty_transport:disarm(),
    sluice_test_lib:stop_listener(?config(name, Config)).

%% An inet ping listener that parks after 50 quiet ms (hibernates after
%% 20), unless Opts say otherwise.
ping_listener(Config, Opts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, maps:merge(#{handler => {sluice_proto_ping, []},
                                                          transport => inet,
                                                          hibernate_after => 20,
                                                          park_after => 50},
                                                        Opts)),
    sluice_test_lib:port(Name).

info(Config, Key) ->
    maps:get(Key, sluice:info(?config(name, Config))).

wait_parked(Config, N) ->
    sluice_test_lib:wait_info(?config(name, Config), parked, N, 3000).

pong(S) ->
    ok = gen_tcp:send(S, <<"Ping\n">>),
    {ok, sluice_test_lib:recv_exactly(S, 5, 3000)}.

%% Parked: no connection process, still one connection. A Ping wakes it
%% (a new process answers), and it parks again when quiet.
quiet_connection_parks_and_still_answers(Config) ->
    Port = ping_listener(Config, #{}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
    ok = wait_parked(Config, 1),
    ?assertEqual([], sluice_test_lib:conn_pids(?config(name, Config))),
    ?assertEqual(1, info(Config, connections)),
    [?assertEqual({ok, <<"Pong\n">>}, pong(S)) || _ <- lists:seq(1, 3)],
    ok = wait_parked(Config, 1),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
    ?assertEqual({1, 0, 1}, {info(Config, accepted), info(Config, closed),
                             info(Config, connections)}),
    ok = gen_tcp:close(S).

%% Half a line before parking, the rest after: the handler's state (the
%% partial line) went with the socket, so the line is whole and answered.
handler_state_survives_parking(Config) ->
    Port = ping_listener(Config, #{}),
    {ok, S} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(S, <<"Pi">>),
    ok = wait_parked(Config, 1),
    ok = gen_tcp:send(S, <<"ng\nPing\n">>),
    ?assertEqual(<<"Pong\nPong\n">>, sluice_test_lib:recv_exactly(S, 10, 3000)),
    ok = gen_tcp:close(S).

%% For every parkable active mode: park, then 300 Pings in one write (more
%% than the wake-up read and than any grant): all answered, in one piece,
%% and the connection parks again. A wrong re-arm would stall (a grant
%% lost) or read past flow control; the count of Pongs would show either.
every_active_mode_resumes_after_parking(Config) ->
    Name = ?config(name, Config),
    lists:foreach(
      fun(Active) ->
              Port = ping_listener(Config, #{active => Active}),
              {ok, S} = sluice_test_lib:connect(Port),
              ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
              ok = wait_parked(Config, 1),
              ok = gen_tcp:send(S, binary:copy(<<"Ping\n">>, 300)),
              ?assertEqual(binary:copy(<<"Pong\n">>, 300),
                           sluice_test_lib:recv_exactly(S, 1500, 5000), Active),
              ok = wait_parked(Config, 1),
              ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
              ok = gen_tcp:close(S),
              sluice_test_lib:stop_listener(Name)
      end, [once, 1, 2, 10, true]).

%% 40 clients ping at random gaps around the park threshold (park_after
%% 10 ms, gaps 0-25 ms), so that data often arrives while a connection is
%% parking or waking: every Ping gets its Pong, nothing crashes, and the
%% listener counts 40 connections throughout and none closed.
pings_around_the_park_threshold_all_get_answers(Config) ->
    Port = ping_listener(Config, #{hibernate_after => 5, park_after => 10}),
    sluice_test_lib:seed_rand(),
    Self = self(),
    Pids = [spawn_link(fun() ->
                               {ok, S} = sluice_test_lib:connect(Port),
                               R = [begin
                                        timer:sleep(rand:uniform(26) - 1),
                                        ok = gen_tcp:send(S, <<"Ping\n">>),
                                        gen_tcp:recv(S, 5, 3000)
                                    end || _ <- lists:seq(1, 30)],
                               Self ! {done, self(), R},
                               %% Hold the socket until the counts are read.
                               receive stop -> gen_tcp:close(S) end
                       end) || _ <- lists:seq(1, 40)],
    Results = [receive {done, P, R} -> R after 30000 -> error(stuck) end || P <- Pids],
    ?assertEqual([], [R || Rs <- Results, R <- Rs, R =/= {ok, <<"Pong\n">>}]),
    ?assertEqual(40, info(Config, connections)),
    ?assertEqual(0, info(Config, closed)),
    #{crashed := 0} = info(Config, close_reasons),
    [P ! stop || P <- Pids].

%% The race the case above met about once in 100,000 Pings, made certain:
%% the sweep's `park' has reached the connection, and the driver delivers
%% a Ping to it while it runs, before its pause takes effect (the test
%% transport's pause waits for that). The connection must answer it rather
%% than park with it unread; and it still parks once quiet.
ping_delivered_while_parking_is_answered(Config) ->
    Port = ping_listener(Config, #{transport => sluice_faulty_transport}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
    ok = sluice_faulty_transport:data_before_next_pause(self()),
    receive {pausing, _Conn} -> ok after 3000 -> ct:fail(never_paused) end,
    ok = gen_tcp:send(S, <<"Ping\n">>),
    ?assertEqual({ok, <<"Pong\n">>}, gen_tcp:recv(S, 5, 3000)),
    ok = wait_parked(Config, 1),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
    ?assertEqual({1, 0}, {info(Config, connections), info(Config, closed)}),
    ok = gen_tcp:close(S).

%% The client closes a parked connection: counted as closed by the peer,
%% no longer parked nor live.
peer_close_of_a_parked_connection_is_counted(Config) ->
    Port = ping_listener(Config, #{}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
    ok = wait_parked(Config, 1),
    ok = gen_tcp:close(S),
    sluice_test_lib:wait_info(?config(name, Config), connections, 0, 3000),
    ?assertEqual(0, info(Config, parked)),
    ?assertEqual(1, info(Config, closed)),
    ?assertMatch(#{peer_closed := 1}, info(Config, close_reasons)).

%% idle_timeout 400 closes a parked connection between 400 ms and 1.5 s
%% after its last Ping was sent, and says why.
idle_timeout_closes_a_parked_connection(Config) ->
    Port = ping_listener(Config, #{park_after => 20, idle_timeout => 400}),
    {ok, S} = sluice_test_lib:connect(Port),
    %% Before the Ping: pong/1 returns 50 ms after the Pong (it checks that
    %% nothing follows).
    T0 = erlang:monotonic_time(millisecond),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S)),
    ok = wait_parked(Config, 1),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("closed ~b ms after the last Ping (idle_timeout 400)", [Ms]),
    ?assert(Ms >= 400 andalso Ms < 1500, Ms),
    sluice_test_lib:wait_info(?config(name, Config), connections, 0, 2000),
    ?assertMatch(#{idle_timeout := 1}, info(Config, close_reasons)).

%% A drain reaches parked connections: each is woken and sends FIN; each
%% client reads end-of-stream (not a reset) and closes, and the drain ends
%% with none left well before its deadline (a drained connection waits for
%% its client's close up to the deadline).
drain_closes_a_parked_connection_with_fin(Config) ->
    Port = ping_listener(Config, #{}),
    Self = self(),
    Clients = [spawn_link(fun() ->
                                  {ok, S} = sluice_test_lib:connect(Port),
                                  {ok, _} = pong(S),
                                  Self ! {ready, self()},
                                  End = gen_tcp:recv(S, 0, 10000),
                                  ok = gen_tcp:close(S),
                                  Self ! {ended, self(), End}
                          end) || _ <- lists:seq(1, 5)],
    [receive {ready, C} -> ok end || C <- Clients],
    ok = wait_parked(Config, 5),
    T0 = erlang:monotonic_time(millisecond),
    ?assertEqual({ok, 0}, sluice:drain(?config(name, Config), 3000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("drain of 5 parked connections: ~b ms", [Ms]),
    ?assert(Ms < 2000, Ms),
    ?assertEqual([{error, closed} || _ <- Clients],
                 [receive {ended, C, End} -> End end || C <- Clients]),
    ?assertMatch(#{drained := 5}, info(Config, close_reasons)).

%% A drain whose handle_drain/1 carries on (`{ok, S}'), told to a
%% connection parked before it (woken for it) and to one that then stays
%% quiet for longer than park_after: neither parks while the drain lasts
%% (the handler is asked once each, and keeps its pid), both are served
%% until the deadline and closed there with FIN and reason `drained'.
drain_carried_on_closes_parked_and_quiet_connections_at_the_deadline(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_park_drain_handler,
                                                          #{test => self()}},
                                               transport => inet, hibernate_after => 20,
                                               park_after => 150}),
    Port = sluice_test_lib:port(Name),
    Echo = fun(S, X) -> ok = gen_tcp:send(S, X), gen_tcp:recv(S, 0, 2000) end,
    {ok, Parked} = sluice_test_lib:connect(Port),
    {ok, <<"a">>} = Echo(Parked, <<"a">>),
    ok = wait_parked(Config, 1),
    {ok, Quiet} = sluice_test_lib:connect(Port),
    {ok, <<"b">>} = Echo(Quiet, <<"b">>),
    [receive {init, _} -> ok after 5000 -> error(no_init) end || _ <- [1, 2]],
    DrainMs = 1000,
    T0 = erlang:monotonic_time(millisecond),
    Self = self(),
    _ = spawn_link(fun() -> Self ! {drained, sluice:drain(Name, DrainMs)} end),
    Drained = [receive {drain, P} -> P after 2000 -> error(no_drain) end || _ <- [1, 2]],
    %% Quiet for three times park_after.
    timer:sleep(450),
    ?assertEqual(0, info(Config, parked)),
    ?assertEqual(lists:sort(Drained), lists:sort(sluice_test_lib:conn_pids(Name))),
    ?assertEqual({ok, <<"c">>}, Echo(Parked, <<"c">>)),
    ?assertEqual({ok, <<"d">>}, Echo(Quiet, <<"d">>)),
    ?assert(erlang:monotonic_time(millisecond) - T0 < DrainMs),
    [?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)) || S <- [Parked, Quiet]],
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("closed ~b ms after a drain of ~b ms", [Ms, DrainMs]),
    ?assert(Ms >= DrainMs - 10 andalso Ms < DrainMs + 1000, Ms),
    [receive {terminate, P, R} -> ?assertEqual(drained, R) after 2000 -> error(no_terminate) end
     || P <- Drained],
    receive {drained, _} -> ok after 3000 -> error(drain_stuck) end,
    ?assertEqual([], [M || {messages, Ms2} <- [process_info(self(), messages)],
                           M = {drain, _} <- Ms2]),
    ok = sluice_test_lib:wait_reason(?config(name, Config), drained, 2).

%% A drain that a handler carries on through wakes a parked connection:
%% its idle timeout still runs from the client's last byte, as it does for
%% a connection that never parked. It ran from the drain (the sweep took
%% every byte the socket had received before parking for new ones): with
%% idle_timeout 400 and the drain 250 ms after the last byte, the
%% connection was closed about 650 ms after it instead of 400-440.
idle_timeout_runs_on_through_a_drain_that_woke_a_parked_connection(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_park_drain_handler,
                                                          #{test => self()}},
                                               transport => inet, hibernate_after => 20,
                                               park_after => 50, idle_timeout => 400}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    T0 = erlang:monotonic_time(millisecond),
    ok = gen_tcp:send(S, <<"a">>),
    {ok, <<"a">>} = gen_tcp:recv(S, 0, 2000),
    ok = wait_parked(Config, 1),
    timer:sleep(max(0, T0 + 250 - erlang:monotonic_time(millisecond))),
    Self = self(),
    _ = spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 5000)} end),
    receive {drain, _} -> ok after 2000 -> error(no_drain) end,
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("closed ~b ms after the last byte (idle_timeout 400, drain at 250)", [Ms]),
    ?assert(Ms >= 400 andalso Ms < 550, Ms),
    receive {drained, _} -> ok after 3000 -> error(drain_stuck) end,
    ?assertMatch(#{idle_timeout := 1}, info(Config, close_reasons)).

%% A drain that a handler carries on through wakes a parked connection,
%% whose socket is still armed `once' as it parked: in every parkable
%% active mode the connection goes on reading (with `true' it answered one
%% chunk, then read nothing more until the drain's deadline), and with an
%% integer grant the socket holds no more than the grant (it held one
%% chunk more, for good).
drain_carried_on_keeps_reading_a_woken_connection(Config) ->
    Name = ?config(name, Config),
    lists:foreach(
      fun(Active) ->
              _ = sluice_test_lib:start_listener(
                    Name, #{handler => {sluice_park_drain_handler, #{test => self()}},
                            transport => inet, active => Active, hibernate_after => 20,
                            park_after => 50}),
              {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
              Echo = fun(X) -> ok = gen_tcp:send(S, X), gen_tcp:recv(S, 0, 2000) end,
              {ok, <<"a">>} = Echo(<<"a">>),
              ok = wait_parked(Config, 1),
              Self = self(),
              _ = spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 5000)} end),
              receive {drain, _} -> ok after 2000 -> error(no_drain) end,
              ?assertEqual([{ok, X} || X <- [<<"b">>, <<"c">>, <<"d">>]],
                           [Echo(X) || X <- [<<"b">>, <<"c">>, <<"d">>]], Active),
              [Pid] = sluice_test_lib:conn_pids(Name),
              %% The connection re-arms after it has replied (`once', and
              %% an integer grant run out): the client can have the echo
              %% before that. A sys call is handled after the chunk's
              %% message, so the socket is read as the connection left it.
              _ = sys:get_state(Pid),
              [Port] = [P || P <- erlang:ports(),
                             erlang:port_info(P, connected) =:= {connected, Pid},
                             erlang:port_info(P, name) =:= {name, "tcp_inet"}],
              {ok, [{active, Armed}]} = inet:getopts(Port, [active]),
              ?assert(case Active of
                          N when is_integer(N) -> is_integer(Armed) andalso Armed =< N;
                          _ -> Armed =:= Active
                      end, {Active, Armed}),
              ok = gen_tcp:close(S),
              receive {drained, _} -> ok after 5000 -> error(drain_stuck) end,
              sluice_test_lib:stop_listener(Name)
      end, [true, once, 1, 2]).

%% A handler that traps exits (handler.md: so that terminate/2 runs when
%% the listener stops) does not park: parked, it was closed at the stop
%% without terminate/2, and woken, its new process no longer trapped
%% exits. It keeps its pid and gets terminate({shutdown, shutdown}).
handler_that_traps_exits_does_not_park(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_park_drain_handler,
                                                          #{test => self(),
                                                            trap_exit => true}},
                                               transport => inet, hibernate_after => 20,
                                               park_after => 50}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
    ok = gen_tcp:send(S, <<"a">>),
    {ok, <<"a">>} = gen_tcp:recv(S, 0, 2000),
    timer:sleep(300),
    ?assertEqual(0, info(Config, parked)),
    ?assertEqual([Pid], sluice_test_lib:conn_pids(Name)),
    ok = gen_tcp:send(S, <<"b">>),
    ?assertEqual({ok, <<"b">>}, gen_tcp:recv(S, 0, 2000)),
    ok = sluice:stop_listener(Name),
    ?assertEqual({terminate, Pid, {shutdown, shutdown}},
                 receive {terminate, _, _} = T -> T after 3000 -> no_terminate end),
    ok = gen_tcp:close(S).

%% A handler with handle_call/3 (and no handle_info/2) does not park: a
%% call it answers later, from a later callback, gets its answer after the
%% connection was quiet for longer than park_after (parking would end the
%% process the caller waits on, and the caller would exit).
call_answered_later_is_not_lost_to_parking(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_call_handler,
                                                          #{test => self()}},
                                               transport => inet, hibernate_after => 20,
                                               park_after => 50}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
    Self = self(),
    _ = spawn_link(fun() -> Self ! {answer, catch sluice:call(Pid, later, 5000)} end),
    receive {call, Pid, later} -> ok after 5000 -> error(no_call) end,
    timer:sleep(400),
    ?assertEqual(0, info(Config, parked)),
    ok = gen_tcp:send(S, <<"answer">>),
    ?assertEqual({ok, <<"done">>}, gen_tcp:recv(S, 0, 2000)),
    ?assertEqual(answered, receive {answer, A} -> A after 5000 -> no_answer end),
    ?assertEqual([Pid], sluice_test_lib:conn_pids(Name)),
    ok = gen_tcp:close(S).

%% Stopping the listener closes parked sockets too.
stop_closes_parked_connections(Config) ->
    Port = ping_listener(Config, #{}),
    Socks = [begin {ok, S} = sluice_test_lib:connect(Port), {ok, _} = pong(S), S end
             || _ <- lists:seq(1, 3)],
    ok = wait_parked(Config, 3),
    ok = sluice:stop_listener(?config(name, Config)),
    [?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)) || S <- Socks].

%% Parked sockets are not linked to their conns_sup; if it is killed,
%% sluice_registry (its table's heir) closes them: the clients read
%% end-of-stream, the count goes back to 0, and the listener still serves.
killed_conns_sup_closes_its_parked_connections(Config) ->
    Name = ?config(name, Config),
    Port = ping_listener(Config, #{num_conns_sups => 1}),
    Socks = [begin {ok, S} = sluice_test_lib:connect(Port), {ok, _} = pong(S), S end
             || _ <- lists:seq(1, 3)],
    ok = wait_parked(Config, 3),
    [Sup] = sluice_test_lib:conns_sups(Name),
    exit(Sup, kill),
    [?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)) || S <- Socks],
    ok = sluice_test_lib:wait_until(fun() -> sluice_test_lib:conns_sups(Name) =/= [Sup] end, 3000),
    sluice_test_lib:wait_info(Name, connections, 0, 3000),
    ?assertEqual(0, info(Config, parked)),
    {ok, S4} = sluice_test_lib:connect(Port),
    ?assertEqual({ok, <<"Pong\n">>}, pong(S4)),
    [gen_tcp:close(S) || S <- [S4 | Socks]].

%% Parked connections are live connections: with max_connections 2 and two
%% parked, a third is closed (rejected) once max_connections_wait (1 s by
%% default) is out. Closed: a reset (its Ping is unread) or end-of-stream,
%% not silence (a timeout would be a rejected socket left open).
parked_connections_count_against_the_limit(Config) ->
    Port = ping_listener(Config, #{max_connections => 2}),
    Socks = [begin {ok, S} = sluice_test_lib:connect(Port), {ok, _} = pong(S), S end
             || _ <- lists:seq(1, 2)],
    ok = wait_parked(Config, 2),
    {ok, S3} = sluice_test_lib:connect(Port),
    _ = gen_tcp:send(S3, <<"Ping\n">>),
    End = gen_tcp:recv(S3, 0, 3000),
    ?assert(End =:= {error, closed} orelse End =:= {error, econnreset}, End),
    ?assertEqual(1, info(Config, rejected)),
    [?assertEqual({ok, <<"Pong\n">>}, pong(S)) || S <- Socks],
    [gen_tcp:close(S) || S <- [S3 | Socks]].

%% No parking on the socket backend, for a handler with handle_info/2 (it
%% expects messages at its pid) or handle_call/3 (it is called at its
%% pid), with active false, or with park_after infinity: those
%% connections hibernate (their process stays).
no_parking_where_it_cannot_work(Config) ->
    Name = ?config(name, Config),
    Echo = {sluice_test_handler, #{}},
    Calls = {sluice_call_handler, #{test => self()}},
    lists:foreach(
      fun(Opts) ->
              _ = sluice_test_lib:start_listener(
                    Name, maps:merge(#{handler => {sluice_proto_echo, []},
                                       transport => inet, hibernate_after => 20,
                                       park_after => 50}, Opts)),
              Port = sluice_test_lib:port(Name),
              {ok, S} = sluice_test_lib:connect(Port),
              ok = gen_tcp:send(S, <<"hi">>),
              <<"hi">> = sluice_test_lib:recv_exactly(S, 2, 3000),
              [Pid] = sluice_test_lib:conn_pids(Name),
              ok = sluice_test_lib:wait_until(
                     fun() -> process_info(Pid, current_function) =:=
                                  {current_function, {erlang, hibernate, 3}}
                     end, 3000, 250),
              ?assertEqual(0, maps:get(parked, sluice:info(Name)), Opts),
              ok = gen_tcp:send(S, <<"again">>),
              ?assertEqual(<<"again">>, sluice_test_lib:recv_exactly(S, 5, 3000)),
              timer:sleep(200),
              ?assertEqual(0, maps:get(parked, sluice:info(Name)), Opts),
              ?assertEqual([Pid], sluice_test_lib:conn_pids(Name)),
              ok = gen_tcp:close(S),
              sluice_test_lib:stop_listener(Name)
      end, [#{transport => socket}, #{handler => Echo}, #{handler => Calls},
            #{active => false}, #{park_after => infinity}]).

bad_park_after_is_refused(_Config) ->
    [begin
         ?assertEqual({error, {bad_option, park_after, V}},
                      sluice:start_listener(bad, #{handler => {sluice_proto_ping, []},
                                                   park_after => V})),
         ?assertNotEqual(nomatch, string:find(sluice:format_error({bad_option, park_after, V}),
                                              "park_after"))
     end || V <- [0, -5, yes]].
