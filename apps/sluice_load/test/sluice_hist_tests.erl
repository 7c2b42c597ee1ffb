%% EUnit tests of the merge of the engine's histograms and of the
%% percentiles read from them (sluice_hist, sluice_load_merge): pure
%% functions, on histograms shaped like the engine's JSON.
-module(sluice_hist_tests).
-include_lib("eunit/include/eunit.hrl").

hist(Buckets, Min, Max) ->
    #{<<"unit">> => <<"ns">>, <<"sub_bucket_bits">> => 7, <<"min">> => Min, <<"max">> => Max,
      <<"buckets">> => Buckets}.

%% hist.c's rule: the midpoint of the bucket holding the ceil(q% n)-th
%% value, clamped to [min, max]; the width from sub_bucket_bits (below
%% 2^7 a bucket per value; 1000 falls in [1000, 1004), width 4).
percentile_test() ->
    B = [[10, 50], [20, 49], [1000, 1]],
    ?assertEqual(10, sluice_hist:percentile(hist(B, 10, 2000), 50)),
    ?assertEqual(20, sluice_hist:percentile(hist(B, 10, 2000), 99)),
    ?assertEqual(1001, sluice_hist:percentile(hist(B, 10, 2000), 99.5)),
    ?assertEqual(1000, sluice_hist:percentile(hist(B, 10, 1000), 99.5)),
    ?assertEqual(2000, sluice_hist:percentile(hist(B, 10, 2000), 100)),
    ?assertEqual(0, sluice_hist:percentile(hist([], 0, 0), 50)).

%% A whole rank that binary floating point misses (0.999 x 1000 =
%% 999.0000000000001) is still that rank: the top 0.1% of the values is
%% above p99.9, not at it.
whole_rank_test() ->
    [?assertEqual({N, 10}, {N, sluice_hist:percentile(hist([[10, N - N div 1000], [999936, N div 1000]],
                                                           10, 1000000), 99.9)})
     || N <- [1000, 10000, 100000, 1000000]],
    ?assertEqual(1000000, sluice_hist:percentile(hist([[10, 999], [999936, 1]], 10, 1000000), 99.95)).

%% Another layout gives other widths: the parameter is read, not assumed.
layout_comes_from_the_histogram_test() ->
    H = (hist([[992, 1]], 992, 5000))#{<<"sub_bucket_bits">> => 4},
    %% 992 lies in [2^9, 2^10): width 2^(9 - 4) = 32, midpoint 1007
    ?assertEqual(1007, sluice_hist:percentile(H, 50)).

%% A value below the bucket's midpoint is the minimum: the merge clamps
%% to it as hist_percentile does.
clamped_to_min_test() ->
    ?assertEqual(1002, sluice_hist:percentile(hist([[1000, 3]], 1002, 1002), 50)).

merge_adds_buckets_and_keeps_extremes_test() ->
    M = sluice_hist:merge([hist([[100, 3]], 100, 100), hist([[100, 1], [5000, 1]], 90, 5010)]),
    ?assertEqual([[100, 4], [5000, 1]], maps:get(<<"buckets">>, M)),
    ?assertMatch(#{<<"min">> := 90, <<"max">> := 5010, <<"sub_bucket_bits">> := 7}, M),
    ?assertError({histogram_layouts_differ, [4, 7]},
                 sluice_hist:merge([hist([], 0, 0), (hist([], 0, 0))#{<<"sub_bucket_bits">> => 4}])).

merge_sums_counts_and_buckets_test() ->
    E = fun(Msgs, Bs, MaxNs) ->
                H = hist(Bs, 0, MaxNs),
                #{<<"scenario">> => <<"ping">>, <<"messages">> => Msgs, <<"conns">> => 2,
                  <<"interval_ms">> => 1000, <<"duration_s">> => 1.0,
                  <<"latency_us">> => #{<<"max">> => MaxNs / 1000, <<"mean">> => 1.0,
                                        <<"samples">> => Msgs},
                  <<"latency_hist">> => H, <<"failures">> => #{<<"EMFILE">> => 1},
                  <<"rounds">> => [#{<<"round">> => 0, <<"pongs">> => Msgs,
                                     <<"latency_us">> => #{<<"max">> => MaxNs / 1000},
                                     <<"latency_hist">> => H}]}
        end,
    M = sluice_load_merge:merge([E(3, [[100, 3]], 100), E(1, [[5000, 1]], 5000)]),
    ?assertEqual(4, maps:get(<<"messages">>, M)),
    ?assertEqual(4, maps:get(<<"conns">>, M)),
    ?assertEqual(1000, maps:get(<<"interval_ms">>, M)),
    ?assertEqual(#{<<"EMFILE">> => 2}, maps:get(<<"failures">>, M)),
    ?assertEqual([[100, 3], [5000, 1]], maps:get(<<"buckets">>, maps:get(<<"latency_hist">>, M))),
    L = maps:get(<<"latency_us">>, M),
    ?assertEqual(0.1, maps:get(<<"p50">>, L)),
    ?assertEqual(5.0, maps:get(<<"p99">>, L)),
    ?assertEqual(5.0, maps:get(<<"max">>, L)),
    [R] = maps:get(<<"rounds">>, M),
    ?assertEqual(4, maps:get(<<"pongs">>, R)).
