%% EUnit tests of the merge of several engines' results into one
%% (sluice_load_merge, sluice_load_merge_objects), on results written here:
%% storm's waves, tls, the host-wide kernel counters, the exit code.
-module(sluice_load_merge_tests).
-include_lib("eunit/include/eunit.hrl").

%% Host-wide counters of engines on one host are the same counters: the
%% merge takes the union of their windows, never the sum.
kernel_one_host_is_the_union_not_the_sum_test() ->
    A = kernel(<<"h1">>, {100, 200}, {150, 260}),
    B = kernel(<<"h1">>, {110, 205}, {160, 270}),
    K = sluice_load_merge_objects:kernel([A, B]),
    ?assertEqual(<<"host">>, maps:get(<<"scope">>, K)),
    ?assertEqual(<<"h1">>, maps:get(<<"host">>, K)),
    ?assertEqual(160 - 100, maps:get(<<"listen_overflows">>, K)),
    ?assertEqual(270 - 200, maps:get(<<"listen_drops">>, K)),
    ?assertEqual(#{<<"ListenOverflows">> => 100, <<"ListenDrops">> => 200}, maps:get(<<"before">>, K)),
    ?assertEqual(#{<<"ListenOverflows">> => 160, <<"ListenDrops">> => 270}, maps:get(<<"after">>, K)).

%% Engines on several hosts count different listeners: added up, with the
%% hosts listed; an engine that could not read the counters is left out.
kernel_several_hosts_add_up_test() ->
    K = sluice_load_merge_objects:kernel([kernel(<<"h1">>, {0, 0}, {5, 7}), null,
                                          kernel(<<"h2">>, {10, 10}, {11, 13}),
                                          kernel(<<"h1">>, {1, 1}, {4, 6})]),
    ?assertEqual(<<"hosts">>, maps:get(<<"scope">>, K)),
    ?assertEqual(5 + 1, maps:get(<<"listen_overflows">>, K)),
    ?assertEqual(7 + 3, maps:get(<<"listen_drops">>, K)),
    ?assertEqual([<<"h1">>, <<"h2">>], [maps:get(<<"host">>, H) || H <- maps:get(<<"hosts">>, K)]),
    ?assertEqual(null, sluice_load_merge_objects:kernel([null, null])).

%% Without the raw counters (deltas only) the largest delta of a host.
kernel_without_raw_counters_takes_the_largest_test() ->
    K = sluice_load_merge_objects:kernel([#{<<"scope">> => <<"host">>, <<"listen_overflows">> => 3,
                                            <<"listen_drops">> => 4},
                                          #{<<"scope">> => <<"host">>, <<"listen_overflows">> => 2,
                                            <<"listen_drops">> => 9}]),
    ?assertEqual({3, 9}, {maps:get(<<"listen_overflows">>, K), maps:get(<<"listen_drops">>, K)}).

%% Storm: each wave's counts added, failures by reason added, histograms
%% added bucket by bucket, the time the longest, the phase reached the
%% least advanced; the reopen kernel counters not added.
storm_waves_test() ->
    S1 = storm(<<"done">>, wave(60, 60, true, 0.5, #{}, [[1000, 60]]),
               wave(60, 58, false, 2.0, #{<<"ETIMEDOUT">> => 2}, [[3000, 58]]),
               kernel(<<"h">>, {0, 0}, {4, 4})),
    S2 = storm(<<"reopen">>, wave(40, 40, true, 0.25, #{}, [[1000, 30], [2000, 10]]),
               wave(40, 40, true, 1.0, #{<<"ETIMEDOUT">> => 1, <<"ECONNRESET">> => 1}, [[3000, 40]]),
               kernel(<<"h">>, {1, 1}, {4, 4})),
    S = sluice_load_merge_objects:storm([S1, S2]),
    ?assertEqual(<<"reopen">>, maps:get(<<"reached">>, S)),
    ?assertEqual(3, maps:get(<<"source_addresses">>, S)),
    ?assertEqual(0.75, maps:get(<<"close_s">>, S)),
    Open = maps:get(<<"open">>, S),
    ?assertEqual({100, 100, true}, {maps:get(<<"attempts">>, Open), maps:get(<<"back">>, Open),
                                    maps:get(<<"all_back">>, Open)}),
    ?assertEqual(0.5, maps:get(<<"time_s">>, Open)),
    ?assertEqual(200.0, maps:get(<<"rate_per_s">>, Open)),
    ?assertEqual([[1000, 90], [2000, 10]], maps:get(<<"buckets">>, maps:get(<<"connect_hist">>, Open))),
    ?assertEqual(100, maps:get(<<"samples">>, maps:get(<<"connect_latency_us">>, Open))),
    Reopen = maps:get(<<"reopen">>, S),
    ?assertEqual({98, false}, {maps:get(<<"back">>, Reopen), maps:get(<<"all_back">>, Reopen)}),
    ?assertEqual(#{<<"ETIMEDOUT">> => 3, <<"ECONNRESET">> => 1}, maps:get(<<"failures">>, Reopen)),
    ?assertEqual(2.0, maps:get(<<"time_s">>, Reopen)),
    ?assertEqual(4, maps:get(<<"listen_overflows">>, maps:get(<<"reopen_kernel">>, S))).

%% TLS: handshakes added, the handshake histogram merged, the full
%% handshake rate over the longest connect span; what was negotiated once
%% when the engines agree, all of it when they do not.
tls_test() ->
    T1 = tls(<<"TLSv1.3">>, 30, 30, 0, [[500000, 30]]),
    T2 = tls(<<"TLSv1.2">>, 20, 10, 10, [[500000, 5], [900000, 15]]),
    R = fun(Span) -> #{<<"connect">> => #{<<"span_s">> => Span}} end,
    T = sluice_load_merge_objects:tls([T1, T2], [R(0.5), R(0.8)]),
    ?assertEqual({50, 40, 10}, {maps:get(<<"handshakes">>, T), maps:get(<<"full_handshakes">>, T),
                                maps:get(<<"resumed">>, T)}),
    ?assertEqual(40 / 0.8, maps:get(<<"full_handshakes_per_s">>, T)),
    ?assertEqual([<<"TLSv1.2">>, <<"TLSv1.3">>], maps:get(<<"version">>, T)),
    ?assertEqual(<<"TLS_AES_128_GCM_SHA256">>, maps:get(<<"cipher">>, T)),
    ?assertEqual(null, maps:get(<<"alpn">>, T)),
    ?assertEqual([[500000, 35], [900000, 15]], maps:get(<<"buckets">>, maps:get(<<"handshake_hist">>, T))),
    L = maps:get(<<"handshake_latency_us">>, T),
    ?assertEqual(50, maps:get(<<"samples">>, L)),
    ?assertEqual((30 * 500.0 + 20 * 800.0) / 50, maps:get(<<"mean">>, L)).

%% The whole result: storm, tls and kernel merged by their rules; the
%% exit code of errors anywhere is 4, of a protocol error anywhere 1.
merge_test() ->
    E = fun(Exit, Errors, Kernel) ->
                #{<<"scenario">> => <<"storm">>, <<"conns">> => 10, <<"errors">> => Errors,
                  <<"exit_code">> => Exit, <<"latency_hist">> => hist([[100, 10]]),
                  <<"latency_us">> => #{<<"mean">> => 0.1, <<"samples">> => 10},
                  <<"connect">> => #{<<"latency_hist">> => hist([[100, 10]]), <<"span_s">> => 1},
                  <<"kernel">> => Kernel,
                  <<"storm">> => storm(<<"done">>, wave(10, 10, true, 1, #{}, [[100, 10]]),
                                       wave(10, 10, true, 1, #{}, [[100, 10]]), null),
                  <<"tls">> => tls(<<"TLSv1.3">>, 10, 10, 0, [[100, 10]])}
        end,
    M = sluice_load_merge:merge([E(0, 0, kernel(<<"h">>, {0, 0}, {3, 3})),
                                 E(4, 2, kernel(<<"h">>, {0, 0}, {3, 3}))]),
    ?assertEqual(4, maps:get(<<"exit_code">>, M)),
    ?assertEqual(2, maps:get(<<"errors">>, M)),
    ?assertEqual(3, maps:get(<<"listen_overflows">>, maps:get(<<"kernel">>, M))),
    ?assertEqual(20, maps:get(<<"back">>, maps:get(<<"reopen">>, maps:get(<<"storm">>, M)))),
    ?assertEqual(20, maps:get(<<"handshakes">>, maps:get(<<"tls">>, M))),
    ?assertEqual(null, maps:get(<<"reopen_kernel">>, maps:get(<<"storm">>, M))),
    ?assertEqual(1, maps:get(<<"exit_code">>, sluice_load_merge:merge([E(1, 1, null), E(4, 2, null)]))),
    ?assertEqual(3, maps:get(<<"exit_code">>, sluice_load_merge:merge([E(3, 1, null), E(3, 1, null)]))),
    ?assertEqual(4, maps:get(<<"exit_code">>, sluice_load_merge:merge([E(3, 1, null), E(0, 0, null)]))),
    ?assertEqual(0, maps:get(<<"exit_code">>, sluice_load_merge:merge([E(0, 0, null), E(0, 0, null)]))).

%%% ------------------------------------------------------------------

kernel(Host, {O0, D0}, {O1, D1}) ->
    #{<<"scope">> => <<"host">>, <<"host">> => Host, <<"source">> => <<"/proc/net/netstat TcpExt">>,
      <<"listen_overflows">> => O1 - O0, <<"listen_drops">> => D1 - D0,
      <<"before">> => #{<<"ListenOverflows">> => O0, <<"ListenDrops">> => D0},
      <<"after">> => #{<<"ListenOverflows">> => O1, <<"ListenDrops">> => D1}}.

storm(Reached, Open, Reopen, Kernel) ->
    #{<<"probe">> => <<"ping">>, <<"hold_s">> => 1, <<"reached">> => Reached,
      <<"source_addresses">> => case Reached of <<"done">> -> 2; _ -> 1 end,
      <<"source_addresses_auto">> => false, <<"open">> => Open, <<"reopen">> => Reopen,
      <<"close_s">> => case Reached of <<"done">> -> 0.5; _ -> 0.75 end,
      <<"reopen_connects_issued_s">> => 0.01, <<"reopen_kernel">> => Kernel}.

wave(Attempts, Back, AllBack, Time, Failures, Buckets) ->
    H = hist(Buckets),
    #{<<"attempts">> => Attempts, <<"handshakes">> => Back, <<"back">> => Back,
      <<"all_back">> => AllBack, <<"time_s">> => Time, <<"rate_per_s">> => Back / Time,
      <<"failures">> => Failures, <<"connect_hist">> => H, <<"back_hist">> => H,
      <<"connect_latency_us">> => #{<<"mean">> => 1.0, <<"samples">> => Back},
      <<"back_latency_us">> => #{<<"mean">> => 1.0, <<"samples">> => Back}}.

tls(Version, Handshakes, Full, Resumed, Buckets) ->
    H = hist(Buckets),
    N = lists:sum([C || [_, C] <- Buckets]),
    Mean = lists:sum([Lo * C || [Lo, C] <- Buckets]) / N / 1000,
    #{<<"version">> => Version, <<"cipher">> => <<"TLS_AES_128_GCM_SHA256">>, <<"alpn">> => null,
      <<"sni">> => null, <<"verify">> => false, <<"resume">> => false,
      <<"handshakes">> => Handshakes, <<"full_handshakes">> => Full, <<"resumed">> => Resumed,
      <<"full_handshakes_per_s">> => 0, <<"handshake_hist">> => H,
      <<"handshake_latency_us">> => #{<<"mean">> => Mean, <<"samples">> => N}}.

hist(Buckets) ->
    #{<<"unit">> => <<"ns">>, <<"sub_bucket_bits">> => 7,
      <<"min">> => case Buckets of [] -> 0; [[Lo, _] | _] -> Lo end,
      <<"max">> => case Buckets of [] -> 0; _ -> element(1, lists:last([{Lo, C} || [Lo, C] <- Buckets])) end,
      <<"buckets">> => Buckets}.

%% The merged rate is the merged count over the merged window, not the
%% engines' rates added up: an engine whose connection the server closed
%% after 0.5 s of a 2 s window ran 0.5 s at its rate, not 2 s (the real
%% run: 124,582 messages in 2 s printed as 84,730/s). Connect: the
%% established connections over the longest connect span, as `connect'.
rate_is_over_the_merged_window_test() ->
    H = #{<<"unit">> => <<"ns">>, <<"sub_bucket_bits">> => 7, <<"min">> => 0, <<"max">> => 0,
          <<"buckets">> => []},
    E = fun(Msgs, Secs, Extra) ->
                maps:merge(#{<<"scenario">> => <<"flood">>, <<"messages">> => Msgs,
                             <<"duration_s">> => Secs, <<"rate">> => Msgs / Secs,
                             <<"writes">> => Msgs, <<"writes_per_s">> => Msgs / Secs,
                             <<"bytes">> => 6 * Msgs, <<"echo_bytes_per_s">> => 6 * Msgs / Secs,
                             <<"latency_hist">> => H, <<"latency_us">> => #{}}, Extra)
        end,
    M = sluice_load_merge:merge([E(109565, 2.0, #{}), E(15017, 0.501, #{})]),
    ?assertEqual(124582, maps:get(<<"messages">>, M)),
    ?assertEqual(124582 / 2.0, maps:get(<<"rate">>, M)),
    ?assertEqual(124582 / 2.0, maps:get(<<"writes_per_s">>, M)),
    ?assertEqual(6 * 124582 / 2.0, maps:get(<<"echo_bytes_per_s">>, M)),
    ?assertEqual(0, maps:get(<<"rate">>, sluice_load_merge:merge([E(0, 1, #{<<"duration_s">> => 0})]))),
    C = fun(Est, Span) ->
                E(Est, 1.0, #{<<"scenario">> => <<"connect">>, <<"rate">> => Est / Span,
                              <<"connect">> => #{<<"established">> => Est, <<"span_s">> => Span,
                                                 <<"latency_hist">> => H}})
        end,
    ?assertEqual(3000 / 2.0, maps:get(<<"rate">>, sluice_load_merge:merge([C(1000, 1.0),
                                                                          C(2000, 2.0)]))).

%% `go' reaches the engines of several nodes at different moments: two
%% windows of 2 s, the second starting 0.5 s after the first, counted
%% their messages over 2.5 s, not 2 (the rate was a fifth high). The
%% merged window is the union, its start the earliest, and
%% start + duration is the latest end; an engine that reports no start
%% (a window never started) neither shortens the window nor makes the
%% start 0.
rate_is_over_the_union_of_skewed_windows_test() ->
    H = #{<<"unit">> => <<"ns">>, <<"sub_bucket_bits">> => 7, <<"min">> => 0, <<"max">> => 0,
          <<"buckets">> => []},
    E = fun(Msgs, Start, Secs) ->
                #{<<"scenario">> => <<"flood">>, <<"messages">> => Msgs,
                  <<"duration_s">> => Secs, <<"window_start_unix_ms">> => Start,
                  <<"rate">> => Msgs / Secs, <<"writes">> => Msgs,
                  <<"writes_per_s">> => Msgs / Secs, <<"bytes">> => 6 * Msgs,
                  <<"echo_bytes_per_s">> => 6 * Msgs / Secs,
                  <<"latency_hist">> => H, <<"latency_us">> => #{}}
        end,
    M = sluice_load_merge:merge([E(20000, 1000500, 2.0), E(20000, 1000000, 2.0)]),
    ?assertEqual(2.5, maps:get(<<"duration_s">>, M)),
    ?assertEqual(1000000, maps:get(<<"window_start_unix_ms">>, M)),
    ?assertEqual(40000 / 2.5, maps:get(<<"rate">>, M)),
    ?assertEqual(40000 / 2.5, maps:get(<<"writes_per_s">>, M)),
    ?assertEqual(6 * 40000 / 2.5, maps:get(<<"echo_bytes_per_s">>, M)),
    %% one stopped early (its connections closed): the end is the other's
    Early = sluice_load_merge:merge([E(100, 1000000, 2.0), E(10, 1000300, 0.2)]),
    ?assertEqual(2.0, maps:get(<<"duration_s">>, Early)),
    %% no start from one: placed by its length only, never shorter
    NoStart = maps:remove(<<"window_start_unix_ms">>, E(10, 0, 3.0)),
    M2 = sluice_load_merge:merge([NoStart, E(20000, 1000500, 2.0), E(20000, 1000000, 2.0)]),
    ?assertEqual(3.0, maps:get(<<"duration_s">>, M2)),
    ?assertEqual(1000000, maps:get(<<"window_start_unix_ms">>, M2)),
    M3 = sluice_load_merge:merge([E(0, 1000000, 1.0), NoStart#{<<"duration_s">> => 0.5}]),
    ?assertEqual(1.0, maps:get(<<"duration_s">>, M3)),
    ?assertEqual(1000000, maps:get(<<"window_start_unix_ms">>, M3)).
