%% Idle connections: the conns_sup's sweep (sluice_sweep) hibernates quiet
%% connections, a hibernated connection answers as before, the idle timeout
%% closes hibernated and awake connections alike, `hibernate_after' is
%% validated, and a hibernated connection holds less memory than an awake
%% one.
-module(sluice_idle_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([quiet_connection_hibernates_and_still_answers/1,
         idle_timeout_closes_a_hibernated_connection/1,
         a_woken_connection_that_talks_is_not_idle/1,
         busy_connection_does_not_hibernate/1,
         hibernate_after_infinity_keeps_connections_awake/1,
         bad_hibernate_after_is_refused/1,
         hibernated_connections_hold_less_memory/1,
         quiet_connections_hold_no_read_buffer/1,
         quiet_after_a_full_active_window_holds_no_read_buffer/1]).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [quiet_connection_hibernates_and_still_answers,
     idle_timeout_closes_a_hibernated_connection,
     a_woken_connection_that_talks_is_not_idle,
     busy_connection_does_not_hibernate,
     hibernate_after_infinity_keeps_connections_awake,
     bad_hibernate_after_is_refused,
     hibernated_connections_hold_less_memory,
     quiet_connections_hold_no_read_buffer,
     quiet_after_a_full_active_window_holds_no_read_buffer].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%% park_after infinity: these cases are about hibernation; parking is
%% sluice_park_SUITE's.
ping_listener(Config, Opts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, maps:merge(#{handler => {sluice_proto_ping, []},
                                                          park_after => infinity},
                                                        Opts)),
    sluice_test_lib:port(Name).

hibernated(Pid) ->
    process_info(Pid, current_function) =:= {current_function, {erlang, hibernate, 3}}.

%% Reading another process's current_function is done by that process (a
%% signal) and moves its reduction count, which the sweep takes for
%% activity: poll seldom, or the polling itself keeps it awake.
wait_hibernated(Pids, Timeout) ->
    sluice_test_lib:wait_until(fun() -> lists:all(fun hibernated/1, Pids) end, Timeout, 250).

%% With hibernate_after 50 a connection that has answered a Ping and then
%% hears nothing hibernates; the next Ping wakes it and gets its Pong, and
%% it goes back to sleep when quiet again.
quiet_connection_hibernates_and_still_answers(Config) ->
    Port = ping_listener(Config, #{hibernate_after => 50}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(S)),
    [Pid] = sluice_test_lib:conn_pids(?config(name, Config)),
    ok = wait_hibernated([Pid], 2000),
    [?assert(sluice_test_lib:ping_sock(S)) || _ <- lists:seq(1, 3)],
    ok = wait_hibernated([Pid], 2000),
    ?assert(sluice_test_lib:ping_sock(S)),
    ok = gen_tcp:close(S).

%% A hibernated connection is still closed by the idle timeout (the sweep
%% sends the close, no timer runs in the sleeping process), not before it:
%% idle_timeout 400 closes it between 400 ms and 1.5 s after its last Ping.
idle_timeout_closes_a_hibernated_connection(Config) ->
    Port = ping_listener(Config, #{hibernate_after => 20, idle_timeout => 400}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(S)),
    T0 = erlang:monotonic_time(millisecond),
    [Pid] = sluice_test_lib:conn_pids(?config(name, Config)),
    ok = wait_hibernated([Pid], 1000),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("closed ~b ms after the last Pong (idle_timeout 400)", [Ms]),
    ?assert(Ms >= 390 andalso Ms < 1500, Ms),
    sluice_test_lib:wait_info(?config(name, Config), closed, 1, 2000).

%% A hibernated connection that its client wakes is watched again: pinging
%% every 100 ms for 2.5 s after its sleep, it is not closed by an
%% idle_timeout of 1000 (the sweep must learn that it woke, or it would
%% still count it idle since its first Ping and close it 1 s in), and once
%% quiet it sleeps again and is closed.
a_woken_connection_that_talks_is_not_idle(Config) ->
    Port = ping_listener(Config, #{hibernate_after => 20, idle_timeout => 1000}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(S)),
    [Pid] = sluice_test_lib:conn_pids(?config(name, Config)),
    ok = wait_hibernated([Pid], 1000),
    [begin timer:sleep(100), ?assert(sluice_test_lib:ping_sock(S)) end || _ <- lists:seq(1, 25)],
    ok = wait_hibernated([Pid], 1000),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)).

%% A connection that pings every 30 ms never stays quiet for
%% hibernate_after (200): it is never told to hibernate while busy (its
%% received messages are traced; watching it with process_info would itself
%% keep it awake, see wait_hibernated/2); quiet afterwards, it is.
busy_connection_does_not_hibernate(Config) ->
    Port = ping_listener(Config, #{hibernate_after => 200}),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(S)),
    [Pid] = sluice_test_lib:conn_pids(?config(name, Config)),
    1 = erlang:trace(Pid, true, ['receive']),
    [begin timer:sleep(30), true = sluice_test_lib:ping_sock(S) end || _ <- lists:seq(1, 25)],
    ?assertEqual(0, nudges(Pid, 0)),
    ?assertEqual(1, nudges(Pid, 1500)),
    ok = gen_tcp:close(S).

%% {sluice_sweep, hibernate} messages Pid received (trace), waiting up to
%% Wait ms for the first.
nudges(Pid, Wait) ->
    receive
        {trace, Pid, 'receive', {sluice_sweep, hibernate}} -> 1 + nudges(Pid, 0);
        {trace, Pid, 'receive', _} -> nudges(Pid, Wait)
    after Wait -> 0
    end.

%% hibernate_after infinity (and no idle timeout): nothing is swept, the
%% connection stays in its receive loop. Watching the connection alone
%% cannot show "never": a sweep that took infinity for some finite time
%% would first hibernate it two of its ticks later (up to 2 x 5 s), so
%% what each connection supervisor's sweep decided is read too (sys
%% state): hibernate_after infinity, and no tick at all.
hibernate_after_infinity_keeps_connections_awake(Config) ->
    Port = ping_listener(Config, #{hibernate_after => infinity, idle_timeout => infinity}),
    Sweeps = sweep_configs(?config(name, Config)),
    ?assertNotEqual([], Sweeps),
    [begin
         ?assertMatch(#{hibernate_after := infinity, idle := infinity}, Sweep),
         ?assertEqual(infinity, sluice_sweep:tick(Sweep))
     end || Sweep <- Sweeps],
    {ok, S} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(S)),
    [Pid] = sluice_test_lib:conn_pids(?config(name, Config)),
    1 = erlang:trace(Pid, true, ['receive']),
    timer:sleep(300),
    ?assertEqual(0, nudges(Pid, 0)),
    ?assertNot(hibernated(Pid)),
    ?assert(sluice_test_lib:ping_sock(S)),
    ok = gen_tcp:close(S).

%% The sweep settings (sluice_sweep:config/2) each connection supervisor of
%% listener Name runs with: the one map in its state with a
%% hibernate_after key.
sweep_configs(Name) ->
    [Sweep || Sup <- sluice_test_lib:conns_sups(Name),
              Sweep <- tuple_to_list(sys:get_state(Sup)),
              is_map(Sweep), is_map_key(hibernate_after, Sweep)].

%% A bad hibernate_after is refused with an error that names it.
bad_hibernate_after_is_refused(_Config) ->
    [begin
         ?assertEqual({error, {bad_option, hibernate_after, V}},
                      sluice:start_listener(bad, #{handler => {sluice_proto_ping, []},
                                                   hibernate_after => V})),
         ?assertNotEqual(nomatch, string:find(
                                    sluice:format_error({bad_option, hibernate_after, V}),
                                    "hibernate_after"))
     end || V <- [0, -1, soon]].

%% 200 quiet connections, hibernated, each hold less process memory than
%% the same connections awake (hibernate_after infinity): the property the
%% sweep is for. The figures are logged.
hibernated_connections_hold_less_memory(Config) ->
    Name = ?config(name, Config),
    N = 200,
    Awake = memory_of_quiet_conns(Config, N, infinity),
    sluice_test_lib:stop_listener(Name),
    Asleep = memory_of_quiet_conns(Config, N, 20),
    ct:log("process memory per quiet connection: awake ~b bytes, hibernated ~b bytes",
           [Awake, Asleep]),
    ?assert(Asleep < Awake - 500, {Asleep, Awake}).

memory_of_quiet_conns(Config, N, HibAfter) ->
    Port = ping_listener(Config, #{hibernate_after => HibAfter}),
    Socks = [begin {ok, S} = sluice_test_lib:connect(Port), true = sluice_test_lib:ping_sock(S), S end
             || _ <- lists:seq(1, N)],
    Pids = sluice_test_lib:conn_pids(?config(name, Config)),
    ?assertEqual(N, length(Pids)),
    case HibAfter of
        infinity -> timer:sleep(100);
        _ -> ok = wait_hibernated(Pids, 3000)
    end,
    Mem = lists:sum([element(2, process_info(P, memory)) || P <- Pids]) div N,
    [gen_tcp:close(S) || S <- Socks],
    Mem.

%% The inet driver allocates a whole read buffer (256 KiB by default) when
%% a socket is armed with nothing to read, and keeps it until data comes.
%% 40 connections that never send and 40 that sent one Ping and went quiet
%% hold well under 32 KiB of binaries each (the silent ones held 256 KiB
%% each before sluice armed sockets with a small buffer).
quiet_connections_hold_no_read_buffer(Config) ->
    Port = ping_listener(Config, #{hibernate_after => infinity}),
    garbage_collect(),
    B0 = erlang:memory(binary),
    %% The clients are in this VM and are `socket' sockets: inet clients
    %% would hold read buffers of their own that memory(binary) counts.
    Silent = [raw_connect(Port) || _ <- lists:seq(1, 40)],
    Pinged = [begin
                  S = raw_connect(Port),
                  ok = socket:send(S, <<"Ping\n">>),
                  {ok, <<"Pong\n">>} = socket:recv(S, 5, 3000),
                  S
              end || _ <- lists:seq(1, 40)],
    sluice_test_lib:wait_info(?config(name, Config), connections, 80, 5000),
    timer:sleep(200),
    PerConn = (erlang:memory(binary) - B0) div 80,
    ct:log("binary memory per quiet connection: ~b bytes", [PerConn]),
    ?assert(PerConn < 32768, PerConn),
    [socket:close(S) || S <- Silent ++ Pinged].

%% The inet driver keeps the read buffer of the chunk that ends an active-N
%% window until the next read. 40 connections send exactly `active' (4)
%% Pings, one chunk each, then go quiet: they hold well under 32 KiB of
%% binaries each, because the connection tops the window up before it runs
%% out (each held 256 KiB when the window ended in tcp_passive).
quiet_after_a_full_active_window_holds_no_read_buffer(Config) ->
    Port = ping_listener(Config, #{active => 4, hibernate_after => infinity}),
    garbage_collect(),
    B0 = erlang:memory(binary),
    Socks = [begin
                 S = raw_connect(Port),
                 [begin
                      ok = socket:send(S, <<"Ping\n">>),
                      {ok, <<"Pong\n">>} = socket:recv(S, 5, 3000)
                  end || _ <- [1, 2, 3, 4]],
                 S
             end || _ <- lists:seq(1, 40)],
    timer:sleep(200),
    PerConn = (erlang:memory(binary) - B0) div 40,
    ct:log("binary memory per quiet connection: ~b bytes", [PerConn]),
    ?assert(PerConn < 32768, PerConn),
    %% And they still answer: the window was topped up, not lost.
    [begin
         ok = socket:send(S, <<"Ping\n">>),
         ?assertEqual({ok, <<"Pong\n">>}, socket:recv(S, 5, 3000))
     end || S <- Socks],
    [socket:close(S) || S <- Socks].

raw_connect(Port) ->
    {ok, S} = socket:open(inet, stream, tcp),
    ok = socket:connect(S, #{family => inet, addr => {127, 0, 0, 1}, port => Port}),
    S.
