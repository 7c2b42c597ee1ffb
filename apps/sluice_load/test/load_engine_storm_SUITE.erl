%% The storm scenario of the C load engine (sluice-load --scenario storm)
%% and the kernel's listen overflow counters in its reports: a wave of
%% connections, all closed from the client side, all reopened at once.
%%
%% On loopback against servers started here on port 0; small N so that
%% each case takes a second or two.  Helpers are load_engine_SUITE's.
-module(load_engine_storm_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([storm_reestablishes_every_connection/1,
         storm_without_probe_counts_handshakes/1,
         storm_from_source_addresses/1,
         storm_over_tls/1,
         storm_against_nothing_exits_3/1,
         overflows_of_a_full_backlog_are_reported/1,
         storm_reports_the_reopen_waves_overflows/1]).

-import(load_engine_SUITE, [run/4, load/2, start_ref/2, get/2]).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [storm_reestablishes_every_connection,
     storm_without_probe_counts_handshakes, storm_from_source_addresses,
     storm_over_tls, storm_against_nothing_exits_3,
     overflows_of_a_full_backlog_are_reported,
     storm_reports_the_reopen_waves_overflows].

init_per_suite(Config) ->
    case sluice_load_test_lib:priv_dir() of
        {ok, Priv} -> [{bin_dir, Priv} | Config];
        error -> {fail, "sluice C binaries not found: run `make -C "
                        "apps/sluice_load/c_src` or set SLUICE_PRIV"}
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(_Case, Config) -> sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) -> sluice_load_test_lib:stop_reaper(Config).

%% 500 connections, each pinged; all closed by the client and reopened at
%% once: every one back (Pong) in both waves, with the figures a user reads
%% (time until all back, latency, failures, kernel counters). Back means
%% Pong: against a server that never answers, nothing is.
storm_reestablishes_every_connection(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    {0, J} = load(Config, ["--scenario", "storm", "--port", Port,
                           "--conns", "500", "--duration", "0.2"]),
    ?assertEqual(0, get(J, errors)),
    ?assertEqual(#{}, get(J, failures)),
    S = get(J, storm),
    ?assertEqual(<<"ping">>, get(S, probe)),
    ?assertEqual(<<"done">>, get(S, reached)),
    ?assert(get(S, close_s) >= 0),
    ?assert(get(S, reopen_connects_issued_s) > 0),
    lists:foreach(
      fun(W) ->
              Wave = get(S, W),
              ?assertEqual(500, get(Wave, attempts)),
              ?assertEqual(500, get(Wave, handshakes)),
              ?assertEqual(500, get(Wave, back)),
              ?assertEqual(true, get(Wave, all_back)),
              ?assertEqual(#{}, get(Wave, failures)),
              ?assert(get(Wave, time_s) > 0),
              ?assert(get(Wave, rate_per_s) > 0),
              [begin
                   L = get(Wave, K),
                   ?assertEqual(500, get(L, samples)),
                   Ps = [get(L, P) || P <- [p50, p99, max]],
                   ?assertEqual(Ps, lists:sort(Ps))
               end || K <- [connect_latency_us, back_latency_us]]
      end, [open, reopen]),
    %% host-wide counters: present, never negative (others may add; that
    %% they count the reopen wave's overflows is the last case's)
    K = get(S, reopen_kernel),
    ?assertEqual(<<"host">>, get(K, scope)),
    ?assert(get(K, listen_overflows) >= 0),
    ?assert(get(K, listen_drops) >= 0),
    ?assert(get(get(J, kernel), listen_overflows) >= 0),
    %% both waves' connections, as the generic connect figures
    ?assertEqual(1000, get(get(J, connect), established)),
    %% against a ping server "back" and a TCP handshake look the same; a
    %% server that accepts but never answers Pong (the ack protocol reads
    %% "Ping\n" as half a header) tells them apart: wave 1 has its
    %% handshakes, nothing is back, there is no wave 2
    Silent = start_ref(Config, ["--protocol", "ack"]),
    {3, J2} = load(Config, ["--scenario", "storm", "--port", Silent,
                            "--conns", "3", "--connect-timeout", "300"]),
    S2 = get(J2, storm),
    ?assertEqual(<<"open">>, get(S2, reached)),
    ?assertEqual(3, get(get(S2, open), handshakes)),
    ?assertEqual(0, get(get(S2, open), back)),
    ?assertEqual(#{<<"ETIMEDOUT">> => 3}, get(get(S2, open), failures)).

%% --probe none: back as soon as the handshake is done.
storm_without_probe_counts_handshakes(Config) ->
    Port = start_ref(Config, ["--protocol", "echo"]),
    {0, J} = load(Config, ["--scenario", "storm", "--probe", "none",
                           "--port", Port, "--conns", "200",
                           "--duration", "0.1"]),
    S = get(J, storm),
    ?assertEqual(<<"none">>, get(S, probe)),
    ?assertEqual(200, get(get(S, reopen), back)).

%% Source addresses round-robin in both waves.
storm_from_source_addresses(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    {0, J} = load(Config, ["--scenario", "storm", "--port", Port,
                           "--conns", "300", "--duration", "0.1",
                           "--source-ips", "127.0.0.2-3"]),
    S = get(J, storm),
    ?assertEqual(2, get(S, source_addresses)),
    ?assertEqual(false, get(S, source_addresses_auto)),
    ?assertEqual(300, get(get(S, reopen), back)).

%% The storm over TLS: every reconnect is a full handshake.
storm_over_tls(Config) ->
    {ok, Root} = sluice_load_test_lib:repo_root(),
    Dir = filename:join(?config(priv_dir, Config), "certs"),
    ct:log("~s", [os:cmd(filename:join(Root, "bench/certs.sh") ++ " " ++ Dir)]),
    Port = start_ref(Config, ["--protocol", "ping", "--tls",
                              "--certfile", filename:join(Dir, "server.pem"),
                              "--keyfile", filename:join(Dir, "server.key")]),
    {0, J} = load(Config, ["--scenario", "storm", "--tls", "--port", Port,
                           "--conns", "100", "--duration", "0.1"]),
    ?assertEqual(100, get(get(get(J, storm), reopen), back)),
    ?assertEqual(200, get(get(J, tls), full_handshakes)).

%% Nothing listens: wave 1 fails, there is no wave 2, exit 3 at once.
storm_against_nothing_exits_3(Config) ->
    {ok, L} = gen_tcp:listen(0, []),
    {ok, P} = inet:port(L),
    ok = gen_tcp:close(L),
    {3, J} = load(Config, ["--scenario", "storm", "--port",
                           integer_to_list(P), "--conns", "5"]),
    S = get(J, storm),
    ?assertEqual(<<"open">>, get(S, reached)),
    ?assertEqual(#{<<"ECONNREFUSED">> => 5}, get(get(S, open), failures)).

%% A listener that never accepts, with a backlog of 1: connects beyond it
%% are dropped by the kernel, and the report's host-wide ListenOverflows
%% and ListenDrops show it; the connects that timed out are errors of the
%% run (exit 4).
overflows_of_a_full_backlog_are_reported(Config) ->
    {ok, L} = gen_tcp:listen(0, [{backlog, 1}, {active, false}]),
    {ok, P} = inet:port(L),
    {Status, J} = load(Config, ["--scenario", "connect", "--port",
                                integer_to_list(P), "--conns", "20",
                                "--connect-timeout", "300",
                                "--duration", "0.1"]),
    ok = gen_tcp:close(L),
    ?assertEqual(4, Status),
    K = get(J, kernel),
    ?assertEqual(<<"host">>, get(K, scope)),
    ?assert(get(K, listen_overflows) >= 1, K),
    ?assert(get(K, listen_drops) >= get(K, listen_overflows), K),
    ?assert(maps:get(<<"ETIMEDOUT">>, get(J, failures)) >= 1),
    %% the text summary says whose counters they are
    Port = start_ref(Config, ["--protocol", "ping"]),
    {0, Out} = run(Config, "sluice-load",
                   ["--scenario", "connect", "--port", Port, "--conns", "3",
                    "--duration", "0.1"], 10000),
    ?assertMatch({match, _},
                 re:run(Out, "kernel over the run \\(host-wide, every "
                        "listener, /proc/net/netstat\\): ListenOverflows "
                        "\\+[0-9]+, ListenDrops \\+[0-9]+")).

%% The reopen wave's kernel counters are that wave's: a listener with a
%% backlog of 2 that stops accepting for a while once wave 1 is in
%% overflows in wave 2 (the SYNs beyond its queue are dropped, and
%% retried a second later, when it accepts again), and the storm's
%% `reopen_kernel' counts it. (The first case can only check that the
%% counters are there: its server keeps up.)
storm_reports_the_reopen_waves_overflows(Config) ->
    N = 20,
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}, {backlog, 2}, {active, false}]),
    {ok, P} = inet:port(L),
    Acceptor = spawn_link(fun() ->
                                  Wave1 = accept(L, N),
                                  timer:sleep(1500),
                                  accept(L, N),
                                  [gen_tcp:close(S) || S <- Wave1],
                                  receive stop -> ok end
                          end),
    {0, J} = load(Config, ["--scenario", "storm", "--probe", "none",
                           "--port", integer_to_list(P), "--conns", integer_to_list(N),
                           "--connect-timeout", "8000", "--duration", "0.1"]),
    unlink(Acceptor),
    exit(Acceptor, kill),
    ok = gen_tcp:close(L),
    S = get(J, storm),
    ?assertEqual(N, get(get(S, reopen), back)),
    K = get(S, reopen_kernel),
    ct:log("reopen wave's kernel counters: ~p", [K]),
    ?assert(get(K, listen_overflows) >= 1, K),
    ?assert(get(K, listen_drops) >= get(K, listen_overflows), K).

accept(L, N) ->
    [begin {ok, S} = gen_tcp:accept(L, 10000), S end || _ <- lists:seq(1, N)].
