%% @doc Merges the `--json' results of several load engine processes into
%% one result of the same shape: counts are summed, histograms are merged
%% bucket by bucket and every percentile is computed again from the merged
%% buckets (sluice_hist: percentiles themselves cannot be averaged),
%% ping/scale rounds are merged round by round (each engine's from its
%% own window start, on the coordinator's `go', which reaches them within
%% moments of each other); the objects with rules of
%% their own (storm, tls, the kernel's host-wide counters) are
%% sluice_load_merge_objects'.
-module(sluice_load_merge).

-export([merge/1, merge_rounds/1, mean/1, sum_maps/1]).

-type result() :: #{binary() => term()}.

-define(SUM, [<<"conns">>, <<"messages">>, <<"bytes">>, <<"errors">>,
              <<"threads">>, <<"conns_up_at_end">>, <<"pings">>, <<"pongs">>,
              <<"timeouts">>, <<"timeouts_whole_run">>, <<"skipped">>,
              <<"late_pongs">>, <<"held_at_end">>, <<"writes">>, <<"conns_up">>,
              <<"attempts">>, <<"handshakes">>, <<"established">>]).

%% Per-second figures of the whole result and the count each is of (the
%% engine's report.c and sc_flood.c: count / measured seconds); with_rates/1
%% computes them again from the merged counts.
-define(PER_S, [{<<"rate">>, <<"messages">>}, {<<"writes_per_s">>, <<"writes">>},
                {<<"echo_bytes_per_s">>, <<"bytes">>}]).

%% @doc One result from the results of engines run side by side.
-spec merge([result()]) -> result().
merge([First | _] = Rs) ->
    Hist = sluice_hist:merge([H || #{<<"latency_hist">> := H} <- Rs]),
    Base = window(maps:map(fun(K, V) -> field(K, V, Rs) end, First), Rs),
    Merged = Base#{<<"latency_hist">> => Hist,
                   <<"latency_us">> => (sluice_hist:latency(Hist))#{<<"mean">> => mean([L || #{<<"latency_us">> := L} <- Rs])},
                   <<"engines">> => length(Rs),
                   <<"exit_code">> => exit_code(Rs),
                   <<"protocol_error">> => lists:any(fun(R) -> maps:get(<<"protocol_error">>, R, false) =:= true end, Rs),
                   <<"failures">> => sum_maps([maps:get(<<"failures">>, R, #{}) || R <- Rs])},
    with_rates(with_objects(with_connect(with_rounds(Merged, Rs), Rs), Rs)).

%% The rates of the whole run from its counts, not the engines' rates
%% added up: an engine whose connections all closed stopped early, and its
%% rate over its shorter window, added to the others', claimed that rate
%% for the whole window (2 engines, one closed after 0.5 s of 2: 84,730/s
%% printed beside 124,582 messages in 2 s). The window is the merged
%% `duration_s' (window/1). Connect and storm: established over the
%% longest connect span, as the merged `connect' says.
with_rates(#{<<"scenario">> := Sc, <<"connect">> := #{<<"rate_per_s">> := R}} = M)
  when Sc =:= <<"connect">>; Sc =:= <<"storm">> ->
    M#{<<"rate">> => R};
with_rates(M) ->
    Secs = maps:get(<<"duration_s">>, M, 0),
    lists:foldl(fun({Rate, Count}, Acc) when is_map_key(Rate, Acc), Secs > 0 ->
                        Acc#{Rate => maps:get(Count, Acc, 0) / Secs};
                   ({Rate, _}, Acc) when is_map_key(Rate, Acc) ->
                        Acc#{Rate => 0};
                   (_, Acc) ->
                        Acc
                end, M, ?PER_S).

%% The merged window: from the earliest start to the latest end. `go'
%% reaches the engines of several nodes at different moments, so their
%% windows are skewed, and the longest alone is shorter than the time the
%% summed counts were counted in (the rate came out high by the skew). An
%% engine with no `window_start_unix_ms' (it never started its window)
%% can only be placed by its length: the window is never shorter than the
%% longest. The start is the earliest of those given (an engine without
%% one does not make it 0), so `window_start_unix_ms' + `duration_s' ends
%% the union, as it ends one engine's window (sluice_bench_run reads it so).
window(M, Rs) ->
    Durs = [D || #{<<"duration_s">> := D} <- Rs, is_number(D)],
    Spans = [{S, S + D * 1000} || #{<<"window_start_unix_ms">> := S, <<"duration_s">> := D} <- Rs,
                                  is_number(S), is_number(D)],
    Starts = [S || #{<<"window_start_unix_ms">> := S} <- Rs, is_number(S)],
    Union = case Spans of
                [] -> 0;
                _ -> (lists:max([E || {_, E} <- Spans]) - lists:min([S || {S, _} <- Spans])) / 1000
            end,
    WithDur = case Durs of
                  [] -> M;
                  _ -> M#{<<"duration_s">> => lists:max([Union | Durs])}
              end,
    case Starts of
        [] -> WithDur;
        _ -> WithDur#{<<"window_start_unix_ms">> => lists:min(Starts)}
    end.

%% Each present in some result: merged from the results that have it.
with_objects(M, Rs) ->
    Objects = [{<<"storm">>, fun sluice_load_merge_objects:storm/1},
               {<<"tls">>, fun(Ts) -> sluice_load_merge_objects:tls(Ts, Rs) end},
               {<<"kernel">>, fun sluice_load_merge_objects:kernel/1}],
    lists:foldl(fun({K, Merge}, Acc) ->
                        case [O || #{K := O} <- Rs] of
                            [] -> Acc;
                            Os -> Acc#{K => Merge(Os)}
                        end
                end, M, Objects).

field(K, V, Rs) when is_number(V) ->
    Vs = [N || R <- Rs, N <- [maps:get(K, R, 0)], is_number(N)],
    case lists:member(K, ?SUM) of
        true -> lists:sum(Vs);
        false -> V
    end;
field(_K, V, _Rs) ->
    V.

%% The engine's rule (c_src/outcome.c) over the whole: a protocol error
%% anywhere; no connection anywhere; else errors anywhere (an engine that
%% could connect nowhere while others could is connections failing).
exit_code(Rs) ->
    Codes = [maps:get(<<"exit_code">>, R, 0) || R <- Rs],
    Errors = lists:sum([maps:get(<<"errors">>, R, 0) || R <- Rs]),
    case {lists:member(1, Codes), lists:all(fun(C) -> C =:= 3 end, Codes)} of
        {true, _} -> 1;
        {false, true} -> 3;
        _ when Errors > 0 -> 4;
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
            H = sluice_hist:merge([maps:get(<<"latency_hist">>, C) || C <- Cs]),
            M#{<<"connect">> =>
                   #{<<"attempts">> => Sum(<<"attempts">>),
                     <<"handshakes">> => Sum(<<"handshakes">>),
                     <<"established">> => Est,
                     <<"span_s">> => Span,
                     <<"rate_per_s">> => case Span > 0 of true -> Est / Span; false -> 0 end,
                     <<"latency_us">> => (sluice_hist:latency(H))#{<<"mean">> => mean([maps:get(<<"latency_us">>, C, #{}) || C <- Cs])},
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
    H = sluice_hist:merge([maps:get(<<"latency_hist">>, R) || R <- Rs]),
    Base = maps:map(fun(K, V) -> field(K, V, Rs) end, First),
    L = sluice_hist:latency(H),
    Base#{<<"latency_hist">> => H,
          <<"latency_us">> => maps:with([<<"p50">>, <<"p90">>, <<"p99">>, <<"p999">>, <<"max">>], L)}.

%% @doc The exact mean of latency objects (`mean', `samples'): the
%% engines' means weighted by their sample counts.
-spec mean([#{binary() => number()}]) -> number().
mean(Ls) ->
    N = lists:sum([maps:get(<<"samples">>, L, 0) || L <- Ls]),
    case N of
        0 -> 0;
        _ -> lists:sum([maps:get(<<"mean">>, L, 0) * maps:get(<<"samples">>, L, 0) || L <- Ls]) / N
    end.

%% @doc Maps of counts added key by key.
-spec sum_maps([#{term() => number()}]) -> #{term() => number()}.
sum_maps(Ms) ->
    lists:foldl(fun(M, Acc) ->
                        maps:fold(fun(K, V, A) -> maps:update_with(K, fun(X) -> X + V end, V, A) end,
                                  Acc, M)
                end, #{}, Ms).
