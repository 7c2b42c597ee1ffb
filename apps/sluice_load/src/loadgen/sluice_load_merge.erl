%% @doc Merges the `--json' results of several load engine processes into
%% one result of the same shape: counts are summed, histograms are merged
%% bucket by bucket and every percentile is computed again from the merged
%% buckets (percentiles themselves cannot be averaged), ping/scale rounds
%% are merged round by round (the engines start their window together, on
%% the coordinator's `go').
%%
%% Histograms are the engine's: `{"unit":"ns","sub_bucket_bits":7,
%% "buckets":[[Lo, Count], ...]}', a bucket 1 wide below 128 and
%% 2^(floor(log2 Lo) - 7) wide above; a percentile is the midpoint of the
%% bucket holding the ceil(q% x count)-th value, capped at the maximum, as
%% in hist.c (the minimum is not in the JSON, so a percentile in the lowest
%% bucket may sit up to half a bucket, 0.4%, below the engine's).
-module(sluice_load_merge).

-export([merge/1, merge_rounds/1, merge_hists/1, percentile/3, latency/2]).

-type result() :: #{binary() => term()}.
-type hist() :: #{binary() => term()}.

-define(SUM, [<<"conns">>, <<"messages">>, <<"rate">>, <<"bytes">>, <<"errors">>,
              <<"threads">>, <<"conns_up_at_end">>, <<"pings">>, <<"pongs">>,
              <<"timeouts">>, <<"timeouts_whole_run">>, <<"skipped">>,
              <<"late_pongs">>, <<"held_at_end">>, <<"writes">>, <<"writes_per_s">>,
              <<"echo_bytes_per_s">>, <<"conns_up">>, <<"attempts">>, <<"handshakes">>,
              <<"established">>]).

%% @doc One result from the results of engines run side by side.
-spec merge([result()]) -> result().
merge([First | _] = Rs) ->
    Hist = merge_hists([H || #{<<"latency_hist">> := H} <- Rs]),
    Max = lists:max([maps:get(<<"max">>, L, 0) || #{<<"latency_us">> := L} <- Rs]),
    Base = maps:map(fun(K, V) -> field(K, V, Rs) end, First),
    Merged = Base#{<<"latency_hist">> => Hist,
                   <<"latency_us">> => (latency(Hist, Max))#{<<"mean">> => mean([L || #{<<"latency_us">> := L} <- Rs])},
                   <<"engines">> => length(Rs),
                   <<"exit_code">> => exit_code(Rs),
                   <<"protocol_error">> => lists:any(fun(R) -> maps:get(<<"protocol_error">>, R, false) =:= true end, Rs),
                   <<"failures">> => sum_maps([maps:get(<<"failures">>, R, #{}) || R <- Rs])},
    with_connect(with_rounds(Merged, Rs), Rs).

field(K, V, Rs) when is_number(V) ->
    Vs = [N || R <- Rs, N <- [maps:get(K, R, 0)], is_number(N)],
    case K of
        <<"duration_s">> -> lists:max(Vs);
        <<"window_start_unix_ms">> -> lists:min(Vs);
        _ ->
            case lists:member(K, ?SUM) of
                true -> lists:sum(Vs);
                false -> V
            end
    end;
field(_K, V, _Rs) ->
    V.

exit_code(Rs) ->
    Codes = [maps:get(<<"exit_code">>, R, 0) || R <- Rs],
    case {lists:member(1, Codes), lists:all(fun(C) -> C =:= 3 end, Codes)} of
        {true, _} -> 1;
        {false, true} -> 3;
        _ -> 0
    end.

with_connect(M, Rs) ->
    case [C || #{<<"connect">> := C} <- Rs] of
        [] -> M;
        Cs ->
            Sum = fun(K) -> lists:sum([maps:get(K, C, 0) || C <- Cs]) end,
            Est = Sum(<<"established">>),
            %% the engines connect at the same time: the span of the whole
            %% is the longest of theirs
            Span = lists:max([maps:get(<<"span_s">>, C, 0) || C <- Cs]),
            H = merge_hists([maps:get(<<"latency_hist">>, C) || C <- Cs]),
            CMax = lists:max([maps:get(<<"max">>, maps:get(<<"latency_us">>, C, #{}), 0) || C <- Cs]),
            M#{<<"connect">> =>
                   #{<<"attempts">> => Sum(<<"attempts">>),
                     <<"handshakes">> => Sum(<<"handshakes">>),
                     <<"established">> => Est,
                     <<"span_s">> => Span,
                     <<"rate_per_s">> => case Span > 0 of true -> Est / Span; false -> 0 end,
                     <<"latency_us">> => (latency(H, CMax))#{<<"mean">> => mean([maps:get(<<"latency_us">>, C, #{}) || C <- Cs])},
                     <<"latency_hist">> => H}}
    end.

%% @doc Only the rounds of several results, merged: `#{<<"rounds">> => [...]}'.
-spec merge_rounds([result()]) -> result().
merge_rounds(Rs) ->
    with_rounds(#{}, Rs).

with_rounds(M, Rs) ->
    case [Rounds || #{<<"rounds">> := Rounds} <- Rs] of
        [] -> M;
        All ->
            ByIdx = lists:foldl(
                      fun(R, Acc) ->
                              maps:update_with(maps:get(<<"round">>, R), fun(L) -> [R | L] end, [R], Acc)
                      end, #{}, lists:append(All)),
            M#{<<"rounds">> => [merge_round(lists:reverse(maps:get(I, ByIdx)))
                                || I <- lists:sort(maps:keys(ByIdx))]}
    end.

merge_round([First | _] = Rs) ->
    H = merge_hists([maps:get(<<"latency_hist">>, R) || R <- Rs]),
    Max = lists:max([maps:get(<<"max">>, maps:get(<<"latency_us">>, R), 0) || R <- Rs]),
    Base = maps:map(fun(K, V) -> field(K, V, Rs) end, First),
    L = latency(H, Max),
    Base#{<<"latency_hist">> => H,
          <<"latency_us">> => maps:with([<<"p50">>, <<"p90">>, <<"p99">>, <<"p999">>, <<"max">>], L)}.

%% The exact mean: the engines' means weighted by their sample counts.
mean(Ls) ->
    N = lists:sum([maps:get(<<"samples">>, L, 0) || L <- Ls]),
    case N of
        0 -> 0;
        _ -> lists:sum([maps:get(<<"mean">>, L, 0) * maps:get(<<"samples">>, L, 0) || L <- Ls]) / N
    end.

sum_maps(Ms) ->
    lists:foldl(fun(M, Acc) ->
                        maps:fold(fun(K, V, A) -> maps:update_with(K, fun(X) -> X + V end, V, A) end,
                                  Acc, M)
                end, #{}, Ms).

%% @doc Merge histograms: counts added per bucket.
-spec merge_hists([hist()]) -> hist().
merge_hists(Hs) ->
    Counts = lists:foldl(fun([Lo, N], Acc) -> maps:update_with(Lo, fun(X) -> X + N end, N, Acc) end,
                         #{}, lists:append([maps:get(<<"buckets">>, H, []) || H <- Hs])),
    #{<<"unit">> => <<"ns">>, <<"sub_bucket_bits">> => 7,
      <<"buckets">> => [[Lo, N] || {Lo, N} <- lists:sort(maps:to_list(Counts))]}.

%% @doc Latency figures in microseconds from a histogram in nanoseconds;
%% `MaxUs' is the exact maximum (the engines report it).
-spec latency(hist(), number()) -> map().
latency(H, MaxUs) ->
    Bs = maps:get(<<"buckets">>, H, []),
    N = lists:sum([C || [_, C] <- Bs]),
    MaxNs = round(MaxUs * 1000),
    P = fun(Q) -> percentile(Bs, Q, MaxNs) / 1000 end,
    Mean = case N of
               0 -> 0;
               _ -> lists:sum([(Lo + (width(Lo) - 1) div 2) * C || [Lo, C] <- Bs]) / N / 1000
           end,
    #{<<"p50">> => P(50), <<"p90">> => P(90), <<"p99">> => P(99), <<"p999">> => P(99.9),
      <<"max">> => case N of 0 -> 0; _ -> MaxUs end,
      <<"mean">> => Mean, <<"samples">> => N}.

%% @doc The value at percentile `Q' (0..100) of sorted `[[Lo, Count]]'
%% buckets, in the histogram's unit: the midpoint of the bucket holding the
%% ceil(Q% x count)-th value, at most `Max'; 0 when empty.
-spec percentile([[non_neg_integer()]], number(), non_neg_integer()) -> non_neg_integer().
percentile(Buckets, Q, Max) ->
    N = lists:sum([C || [_, C] <- Buckets]),
    if
        N =:= 0 -> 0;
        Q >= 100 -> Max;
        true ->
            X = Q / 100 * N,
            Rank = max(1, ceil(X)),
            min(Max, walk(Buckets, Rank, 0, Max))
    end.

walk([], _Rank, _Seen, Max) -> Max;
walk([[Lo, C] | Rest], Rank, Seen, Max) ->
    case Seen + C >= Rank of
        true -> Lo + (width(Lo) - 1) div 2;
        false -> walk(Rest, Rank, Seen + C, Max)
    end.

width(Lo) when Lo < 128 -> 1;
width(Lo) -> 1 bsl (floor_log2(Lo) - 7).

floor_log2(V) -> floor_log2(V, -1).
floor_log2(0, Acc) -> Acc;
floor_log2(V, Acc) -> floor_log2(V bsr 1, Acc + 1).
