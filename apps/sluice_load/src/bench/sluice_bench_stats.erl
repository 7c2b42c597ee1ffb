%% @doc The few statistics the benchmark reports: the median of a cell's
%% rounds and their spread (min and max), the paired ratios, and the
%% reading of a cumulative counter at an instant between two samples.
-module(sluice_bench_stats).

-export([median/1, spread/1, summary/1, ratios/2, interpolate/2, spread_pct/1, wide/1,
         wide_limit/0]).

-export_type([summary/0]).

-type summary() :: #{n := non_neg_integer(), median := number() | null,
                     min := number() | null, max := number() | null}.

%% @doc The median; for an even count, the mean of the two middle values.
%% `null' for no values.
-spec median([number()]) -> number() | null.
median([]) -> null;
median(Xs) ->
    S = lists:sort(Xs),
    N = length(S),
    case N rem 2 of
        1 -> lists:nth(N div 2 + 1, S);
        0 -> (lists:nth(N div 2, S) + lists:nth(N div 2 + 1, S)) / 2
    end.

%% @doc `{Min, Max}', or `null' for no values.
-spec spread([number()]) -> {number(), number()} | null.
spread([]) -> null;
spread(Xs) -> {lists:min(Xs), lists:max(Xs)}.

%% @doc Count, median, min and max in one map (the JSON form of a cell's
%% figure). Values that are not numbers (a failed run's `null') are left out.
-spec summary([number() | null]) -> summary().
summary(Xs0) ->
    Xs = [X || X <- Xs0, is_number(X)],
    {Min, Max} = case spread(Xs) of
                     null -> {null, null};
                     MM -> MM
                 end,
    #{n => length(Xs), median => median(Xs), min => Min, max => Max}.

%% @doc How far apart a summary's extremes are, relative to its median:
%% (max - min) / median. `null' for fewer than two values.
-spec spread_pct(summary()) -> float() | null.
spread_pct(#{n := N, min := Min, max := Max, median := Med}) when N >= 2, Med > 0 ->
    (Max - Min) / Med;
spread_pct(_) ->
    null.

%% @doc Whether a summary's spread is too wide to judge on (wide_limit/0):
%% one of its rounds met a machine busy with something else.
-spec wide(summary()) -> boolean().
wide(S) ->
    case spread_pct(S) of
        null -> false;
        P -> P > wide_limit()
    end.

%% @doc The spread above which a cell is flagged: 25%.
-spec wide_limit() -> float().
wide_limit() -> 0.25.

%% @doc Ratios of paired figures (A from the same round as B); pairs in
%% which either side is missing or B is zero are left out.
-spec ratios([number() | null], [number() | null]) -> [float()].
ratios(As, Bs) ->
    [A / B || {A, B} <- lists:zip(As, Bs), is_number(A), is_number(B), B /= 0].

%% @doc The value of a cumulative counter at time `T', read from samples
%% `[{Time, Value}]' (any order) by linear interpolation between the last
%% sample at or before `T' and the first at or after it. `error' when `T'
%% lies outside the samples.
-spec interpolate(number(), [{number(), number()}]) -> {ok, float()} | error.
interpolate(T, Samples) ->
    S = lists:keysort(1, Samples),
    Before = [P || {Ti, _} = P <- S, Ti =< T],
    After = [P || {Ti, _} = P <- S, Ti >= T],
    case {Before, After} of
        {[], _} -> error;
        {_, []} -> error;
        {_, [{T1, V1} | _]} ->
            {T0, V0} = lists:last(Before),
            case T1 == T0 of
                true -> {ok, float(V0)};
                false -> {ok, V0 + (V1 - V0) * (T - T0) / (T1 - T0)}
            end
    end.
