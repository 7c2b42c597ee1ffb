%% @doc The load engine's latency histograms, as the coordinator merges
%% several engines' and reads percentiles from the sum.
%%
%% The bucket layout is c_src/hist.c's and this module keeps no copy of
%% it: every histogram the engine writes carries its layout parameter
%% `sub_bucket_bits' (a bucket starting at Lo is 1 wide below
%% 2^sub_bucket_bits, else 2^(floor(log2 Lo) - sub_bucket_bits): the rule
%% hist.h gives, which sluice-hist-test checks against every bucket) and its
%% exact `min' and `max'. A percentile is then what hist_percentile gives:
%% the midpoint of the bucket holding the ceil(q% x count)-th value,
%% clamped to [min, max].
%%
%% A histogram: `#{<<"unit">>, <<"sub_bucket_bits">>, <<"min">>, <<"max">>,
%% <<"buckets">> => [[Lo, Count], ...]}' (decoded engine JSON).
-module(sluice_hist).

-export([merge/1, percentile/2, latency/1]).

-export_type([hist/0]).

-type hist() :: #{binary() => term()}.

%% @doc The sum of histograms of one layout: counts added bucket by bucket,
%% the extremes of the extremes. Histograms of different layouts (engines
%% of different builds) cannot be added and are an error.
-spec merge([hist()]) -> hist().
merge(Hs) ->
    Counts = lists:foldl(fun([Lo, N], Acc) -> maps:update_with(Lo, fun(X) -> X + N end, N, Acc) end,
                         #{}, lists:append([maps:get(<<"buckets">>, H, []) || H <- Hs])),
    Filled = [H || H <- Hs, maps:get(<<"buckets">>, H, []) =/= []],
    Layout = case lists:usort([maps:get(<<"sub_bucket_bits">>, H) || H <- Hs,
                                                                    maps:is_key(<<"sub_bucket_bits">>, H)]) of
                 [] -> #{};
                 [Bits] -> #{<<"sub_bucket_bits">> => Bits};
                 Several -> error({histogram_layouts_differ, Several})
             end,
    Extremes = case Filled of
                   [] -> #{<<"min">> => 0, <<"max">> => 0};
                   _ -> #{<<"min">> => lists:min([maps:get(<<"min">>, H, 0) || H <- Filled]),
                          <<"max">> => lists:max([maps:get(<<"max">>, H, 0) || H <- Filled])}
               end,
    maps:merge(Layout, Extremes#{<<"unit">> => unit(Hs),
                                 <<"buckets">> => [[Lo, N] || {Lo, N} <- lists:sort(maps:to_list(Counts))]}).

unit([#{<<"unit">> := U} | _]) -> U;
unit(_) -> <<"ns">>.

%% @doc The value at percentile `Q' (0..100), in the histogram's unit; 0
%% when it is empty.
-spec percentile(hist(), number()) -> number().
percentile(H, Q) ->
    Buckets = maps:get(<<"buckets">>, H, []),
    N = lists:sum([C || [_, C] <- Buckets]),
    if
        N =:= 0 -> 0;
        Q >= 100 -> maps:get(<<"max">>, H);
        true ->
            #{<<"min">> := Min, <<"max">> := Max, <<"sub_bucket_bits">> := Bits} = H,
            max(Min, min(Max, walk(Buckets, rank(Q, N), 0, Bits)))
    end.

%% ceil(Q% x N), at least 1, as hist.c computes it: Q/100 is inexact in
%% binary (99.9% of 1000 comes out as 999.0000000000001, whose ceil is the
%% 1000th value, the max), so the product is nudged down first.
rank(Q, N) ->
    X = Q / 100 * N,
    max(1, ceil(X - X * 1.0e-12)).

walk([[Lo, C] | Rest], Rank, Seen, Bits) ->
    case Seen + C >= Rank of
        true -> Lo + (width(Lo, Bits) - 1) div 2;
        false -> walk(Rest, Rank, Seen + C, Bits)
    end.

width(Lo, Bits) when Lo < 1 bsl Bits -> 1;
width(Lo, Bits) -> 1 bsl (floor_log2(Lo) - Bits).

floor_log2(V) -> floor_log2(V, -1).
floor_log2(0, Acc) -> Acc;
floor_log2(V, Acc) -> floor_log2(V bsr 1, Acc + 1).

%% @doc The engine's `latency_us' figures of a histogram in nanoseconds:
%% p50, p90, p99, p99.9 and max in microseconds, the number of samples, and
%% a mean from the bucket midpoints (the caller puts the engines' exact
%% mean in its place where it has them).
-spec latency(hist()) -> #{binary() => number()}.
latency(H) ->
    Bs = maps:get(<<"buckets">>, H, []),
    N = lists:sum([C || [_, C] <- Bs]),
    P = fun(Q) -> percentile(H, Q) / 1000 end,
    Mean = case N of
               0 -> 0;
               _ -> Bits = maps:get(<<"sub_bucket_bits">>, H),
                    lists:sum([(Lo + (width(Lo, Bits) - 1) div 2) * C || [Lo, C] <- Bs]) / N / 1000
           end,
    #{<<"p50">> => P(50), <<"p90">> => P(90), <<"p99">> => P(99), <<"p999">> => P(99.9),
      <<"max">> => case N of 0 -> 0; _ -> maps:get(<<"max">>, H) / 1000 end,
      <<"mean">> => Mean, <<"samples">> => N}.
