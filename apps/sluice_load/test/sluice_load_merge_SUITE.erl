%% `bin/sluice load --engines 2' for the engine's storm and TLS figures and
%% the kernel's host-wide counters: the merged report is the engines'
%% results put together by each figure's rule (sluice_load_merge_objects),
%% checked here against the engines' own results in the same JSON.
-module(sluice_load_merge_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([storm_over_two_engines_merges_its_waves/1,
         tls_over_two_engines_merges_its_handshakes/1,
         host_wide_counters_are_not_added_up/1,
         short_ramp_keeps_its_connect_rate/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [storm_over_two_engines_merges_its_waves, tls_over_two_engines_merges_its_handshakes,
     host_wide_counters_are_not_added_up, short_ramp_keeps_its_connect_rate].

init_per_suite(Config) ->
    case sluice_load_test_lib:priv_dir() of
        {ok, Priv} -> sluice_load_test_lib:built_bin([{bin_dir, Priv} | Config]);
        error -> {fail, "sluice C binaries not found: run make"}
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(_Case, Config) -> sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) -> sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------

%% A storm split over two engines: they hold, close and reopen together
%% (the coordinator's go after both first waves); each wave's counts are
%% the sums of the engines', its histograms their bucket-by-bucket sums,
%% its time the longest; the summary prints both waves.
storm_over_two_engines_merges_its_waves(Config) ->
    Port = load_engine_SUITE:start_ref(Config, ["--protocol", "ping", "--threads", "1"]),
    {0, Out, J} = load(Config, ["--scenario", "storm", "--engines", "2", "--port", Port,
                                "--conns", "200", "--duration", "0.2"]),
    Es = [get(storm, E) || E <- get(engine_results, J)],
    ?assertEqual(2, length(Es)),
    S = get(storm, J),
    ?assertEqual(<<"done">>, get(reached, S)),
    [begin
         W = get(Wave, S),
         Ws = [get(Wave, E) || E <- Es],
         ?assertEqual(200, get(back, W)),
         ?assertEqual(true, get(all_back, W)),
         [?assertEqual(lists:sum([get(K, X) || X <- Ws]), get(K, W)) || K <- [attempts, handshakes, back]],
         ?assertEqual(lists:max([get(time_s, X) || X <- Ws]), get(time_s, W)),
         [?assertEqual(sum_buckets([buckets(get(H, X)) || X <- Ws]), buckets(get(H, W)))
          || H <- [connect_hist, back_hist]],
         ?assertEqual(200, get(samples, get(back_latency_us, W)))
     end || Wave <- [open, reopen]],
    %% the waves lined up: neither engine reopened before the other closed
    [?assert(match(Out, Re)) || Re <- ["wave 1 \\(open, --connect-concurrency\\): 200 of 200 back",
                                       "wave 2 \\(all at once: connects made in [0-9.]+ s\\): 200 of "
                                       "200 back", "kernel during wave 2 \\(host-wide",
                                       "errors: 0; exit 0"]].

%% TLS over two engines: handshakes added up, the handshake histogram
%% merged, the full handshake rate over the longest connect span, the
%% version and cipher the engines agree on.
tls_over_two_engines_merges_its_handshakes(Config) ->
    {ok, Root} = sluice_load_test_lib:repo_root(),
    Dir = filename:join(?config(priv_dir, Config), "certs"),
    ct:log("~s", [os:cmd(filename:join(Root, "bench/certs.sh") ++ " " ++ Dir)]),
    Port = load_engine_SUITE:start_ref(Config, ["--protocol", "ping", "--threads", "1", "--tls",
                                                "--certfile", filename:join(Dir, "server.pem"),
                                                "--keyfile", filename:join(Dir, "server.key")]),
    {0, Out, J} = load(Config, ["--scenario", "connect", "--tls", "--engines", "2", "--port", Port,
                                "--conns", "40", "--duration", "0.2"]),
    T = get(tls, J),
    Ts = [get(tls, E) || E <- get(engine_results, J)],
    [?assertEqual(lists:sum([get(K, X) || X <- Ts]), get(K, T))
     || K <- [handshakes, full_handshakes, resumed]],
    ?assertEqual(40, get(full_handshakes, T)),
    ?assertEqual(get(version, hd(Ts)), get(version, T)),
    ?assertEqual(get(cipher, hd(Ts)), get(cipher, T)),
    ?assertEqual(sum_buckets([buckets(get(handshake_hist, X)) || X <- Ts]),
                 buckets(get(handshake_hist, T))),
    ?assertEqual(40, get(samples, get(handshake_latency_us, T))),
    Span = lists:max([get(span_s, get(connect, E)) || E <- get(engine_results, J)]),
    ?assert(abs(get(full_handshakes_per_s, T) - 40 / Span) < 1.0e-6),
    ?assert(match(Out, "tls: TLSv1\\.[23] [A-Z0-9_-]+, ALPN none, SNI none, verify off; 40 "
                       "handshakes \\(40 full, 0 resumed\\)")).

%% Both engines on this host read the same ListenOverflows/ListenDrops:
%% the merged figure is the union of their windows (the earliest before,
%% the latest after), not the sum of their deltas.
host_wide_counters_are_not_added_up(Config) ->
    {ok, L} = gen_tcp:listen(0, [{backlog, 1}, {active, false}, {ip, {127, 0, 0, 1}}]),
    {ok, P} = inet:port(L),
    {Status, _Out, J} = load(Config, ["--scenario", "connect", "--engines", "2", "--port",
                                      integer_to_list(P), "--conns", "40", "--connect-timeout",
                                      "300", "--duration", "0.1"]),
    ok = gen_tcp:close(L),
    ?assertEqual(4, Status),
    K = get(kernel, J),
    Ks = [get(kernel, E) || E <- get(engine_results, J)],
    ?assertEqual(<<"host">>, get(scope, K)),
    [begin
         Before = lists:min([get(Raw, get(before, X)) || X <- Ks]),
         After = lists:max([get(Raw, get('after', X)) || X <- Ks]),
         ?assertEqual(After - Before, get(F, K)),
         ?assert(get(F, K) >= 1, K),
         ?assert(get(F, K) =< lists:sum([get(F, X) || X <- Ks]))
     end || {F, Raw} <- [{listen_overflows, 'ListenOverflows'}, {listen_drops, 'ListenDrops'}]].

%%% ------------------------------------------------------------------

%% A ramp shorter than a millisecond (a connection or two per engine on
%% loopback): each engine's span_s is exact enough to give back its own
%% rate_per_s, and the merged rate is established / the longest span, not
%% 0/s (span_s was rounded to the ms, 0.000).
short_ramp_keeps_its_connect_rate(Config) ->
    Port = load_engine_SUITE:start_ref(Config, ["--protocol", "ack", "--threads", "1"]),
    {0, Out, J} = load(Config, ["--scenario", "lockstep", "--engines", "2", "--port", Port,
                                "--conns", "2", "--duration", "0.1"]),
    Cs = [get(connect, E) || E <- get(engine_results, J)],
    [begin
         ?assert(get(span_s, C) > 0, C),
         ?assert(abs(get(rate_per_s, C) - 1 / get(span_s, C)) =< 0.01 * get(rate_per_s, C), C)
     end || C <- Cs],
    C = get(connect, J),
    Span = lists:max([get(span_s, X) || X <- Cs]),
    ?assertEqual(Span, get(span_s, C)),
    ?assert(get(rate_per_s, C) > 0, C),
    ?assert(abs(get(rate_per_s, C) - 2 / Span) < 1.0e-6, C),
    ?assertNot(match(Out, "connect: 2 established of 2 attempts, 0/s")).

load(Config, Args) ->
    Json = filename:join(?config(priv_dir, Config), "load.json"),
    {Status, Lines} = sluice_load_test_lib:sluice_exit(Config, ["load" | Args] ++ ["--json", Json]),
    Out = iolist_to_binary([[L, $\n] || L <- Lines]),
    ct:log("bin/sluice load ~s -> ~p~n~s", [lists:join(" ", Args), Status, Out]),
    {ok, Bin} = file:read_file(Json),
    {ok, J} = sluice_json:decode(Bin),
    {Status, Out, J}.

get(K, M) -> maps:get(atom_to_binary(K), M).

match(Out, Re) -> re:run(Out, Re) =/= nomatch.

buckets(H) -> [{Lo, N} || [Lo, N] <- get(buckets, H)].

sum_buckets(Lists) ->
    lists:sort(maps:to_list(lists:foldl(fun({Lo, N}, A) -> maps:update_with(Lo, fun(X) -> X + N end,
                                                                            N, A)
                                        end, #{}, lists:append(Lists)))).
