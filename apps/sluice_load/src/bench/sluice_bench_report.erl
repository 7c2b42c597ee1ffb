%% @doc From the runs to the figures the benchmark reports: per cell the
%% median and spread of the rate, the paired C reference figure and the
%% ratio, the server's CPU per message, the latency percentiles, and
%% against the best peer; and the plain text table (aligned, to paste into
%% README.md). The speed targets are sluice_bench_targets'.
%%
%% A cell's ratio is the median of the per-round ratios (each run divided
%% by the C run next to it in the same round), so drift between rounds
%% cancels; the C median beside it is the median of those C runs.
%%
%% `vs_c' is the figure a cell is judged by, per round, relative to C
%% (higher is better, 1.0 = as C): the rate ratio, except on the flood,
%% where it is C's server CPU per message over the cell's. (The flood's
%% rate follows the engine as much as the server: a server that lags gets
%% more messages per read, so its rate and CPU per message settle in one
%% of two regimes; bench/README.md, "Noise".) `vs_peer': per round, a
%% cell's vs_c over the best peer's, the peer with the highest median.
-module(sluice_bench_report).

-export([cells/2, table/1, legend/0,
         fmt_rate/1, fmt_ns/1, fmt_ratio/1, fmt_pct/1, fmt_spread/1, judged_by/1, cpu_judged/0]).

-define(PERCENTILES, [<<"p50">>, <<"p90">>, <<"p99">>, <<"p999">>, <<"max">>]).

%% @doc Summaries of the runs, one per cell, in matrix order.
-spec cells([sluice_bench_matrix:cell()], [map()]) -> [map()].
cells(Cells, Runs) ->
    peers([cell(Sc, Sv, Runs) || {Sc, Sv} <- Cells]).

%% @doc What a scenario's cells are judged by: `rate' or server `cpu'
%% per message (see the module doc).
-spec judged_by(sluice_bench_matrix:scenario()) -> rate | cpu.
judged_by(flood) -> cpu;
judged_by(paced) -> cpu;
judged_by(_) -> rate.

%% @doc The scenarios judged by server CPU per message, named for the
%% reports' notes ("flood, paced").
-spec cpu_judged() -> string().
cpu_judged() ->
    lists:join(", ", [atom_to_list(Sc) || Sc <- sluice_bench_matrix:scenarios(),
                                           judged_by(Sc) =:= cpu]).

cell(Sc, Sv, Runs) ->
    Mine = [R || #{scenario := S, server := V} = R <- Runs, S =:= Sc, V =:= Sv,
                 maps:get(role, R) =:= subject],
    Refs = [R || #{scenario := S} = R <- Runs, S =:= Sc, maps:get(role, R) =:= reference,
                 lists:member(Sv, maps:get(pairs, R, []))],
    Rounds = lists:usort([maps:get(round, R) || R <- Mine ++ Refs]),
    Subject = [fig(rate, round_run(Rd, Mine)) || Rd <- Rounds],
    C = [fig(rate, round_run(Rd, Refs)) || Rd <- Rounds],
    Ns = [fig(server_ns_per_msg, round_run(Rd, Mine)) || Rd <- Rounds],
    CNs = [fig(server_ns_per_msg, round_run(Rd, Refs)) || Rd <- Rounds],
    Judged = judged_by(Sc),
    PerRound = [#{round => Rd, rate => S, c_rate => Cr, ns_per_msg => N, c_ns_per_msg => CN,
                  ratio => ratio(S, Cr), cpu_vs_c => ratio(N, CN),
                  vs_c => case Judged of
                              rate -> ratio(S, Cr);
                              cpu -> ratio(CN, N)
                          end}
                || {Rd, {S, Cr}, {N, CN}} <- lists:zip3(Rounds, lists:zip(Subject, C),
                                                        lists:zip(Ns, CNs))],
    IsC = Sv =:= c,
    VsC = sluice_bench_stats:summary([V || #{vs_c := V} <- PerRound, not IsC]),
    #{scenario => Sc, server => Sv,
      unit => maps:get(unit, sluice_bench_matrix:scenario(Sc)),
      ack => sluice_bench_matrix:ack(Sc, Sv),
      rounds => length(Rounds),
      failed_runs => length([R || R <- Mine ++ Refs, not maps:get(ok, R)]),
      rate => sluice_bench_stats:summary(Subject),
      ns_per_msg => sluice_bench_stats:summary(Ns),
      c_rate => sluice_bench_stats:summary(C),
      c_ns_per_msg => sluice_bench_stats:summary(CNs),
      %% server CPU per message relative to the C run of the same round:
      %% steadier than ns/msg where the machine's state moves both
      cpu_vs_c => sluice_bench_stats:summary(sluice_bench_stats:ratios(Ns, CNs)),
      ratio => sluice_bench_stats:summary([R || #{ratio := R} <- PerRound, not IsC]),
      judged_by => Judged,
      vs_c => VsC,
      spread_pct => sluice_bench_stats:spread_pct(VsC),
      wide_spread => sluice_bench_stats:wide(VsC),
      latency_us => latency(Mine),
      c_latency_us => latency(Refs),
      per_round => PerRound}.

ratio(A, B) when is_number(A), is_number(B), B /= 0 -> A / B;
ratio(_, _) -> null.

%% The median over the successful runs of each latency percentile (us).
latency(Runs) ->
    Ls = [L || #{ok := true, latency_us := L} <- Runs, is_map(L)],
    maps:from_list([{P, maps:get(median, sluice_bench_stats:summary(
                                           [maps:get(P, L, null) || L <- Ls]))}
                    || P <- ?PERCENTILES]).

%% Every cell of a scenario with a peer measured: its vs_c against the
%% best peer's (the highest median vs_c), round by round.
peers(Cells) ->
    Peers = sluice_bench_matrix:peers(),
    %% sorted by median, so that the last of a scenario, the one
    %% maps:from_list/1 keeps, is the best
    Best = maps:from_list(
             lists:sort(fun({_, {A, _}}, {_, {B, _}}) -> A =< B end,
                        [{Sc, {M, C}} || #{scenario := Sc, server := Sv,
                                           vs_c := #{median := M}} = C <- Cells,
                                         lists:member(Sv, Peers), is_number(M)])),
    [case maps:find(Sc, Best) of
         {ok, {_, #{server := P} = PC}} when Sv =/= P, Sv =/= c ->
             Cell#{best_peer => P,
                   vs_peer => sluice_bench_stats:summary(per_round_ratios(Cell, PC))};
         _ ->
             Cell
     end || #{scenario := Sc, server := Sv} = Cell <- Cells].

%% Per round, A's vs_c over B's (the rounds both have).
per_round_ratios(#{per_round := A}, #{per_round := B}) ->
    Bs = maps:from_list([{Rd, V} || #{round := Rd, vs_c := V} <- B]),
    [ratio(V, maps:get(Rd, Bs, null)) || #{round := Rd, vs_c := V} <- A].
round_run(Rd, Runs) ->
    case [R || #{round := X} = R <- Runs, X =:= Rd] of
        [R | _] -> R;
        [] -> none
    end.

fig(_, none) -> null;
fig(K, #{ok := true} = R) -> maps:get(K, R, null);
fig(_, _) -> null.

%%% ------------------------------------------------------------------
%%% The table
%%% ------------------------------------------------------------------

-define(HEADER, ["scenario", "server", "median rate", "spread (min-max)", "C median",
                 "vs C", "rounds", "vs peer", "ns/msg", "C ns/msg"]).

%% @doc The cells as an aligned plain-text table.
-spec table([map()]) -> iolist().
table(Cells) ->
    Rows = [row(C) || C <- Cells],
    Widths = [lists:max([string:length(X) || X <- Col])
              || Col <- transpose([?HEADER | Rows])],
    Line = fun(Cols) ->
                   Padded = [pad(X, W, I) || {X, W, I} <- lists:zip3(Cols, Widths,
                                                                     lists:seq(1, length(Cols)))],
                   [string:trim(lists:join("  ", Padded), trailing), $\n]
           end,
    Rule = [lists:duplicate(W, $-) || W <- Widths],
    [Line(?HEADER), Line(Rule), [Line(R) || R <- Rows]].

row(#{scenario := Sc, server := Sv, unit := Unit, rate := R, c_rate := CR, vs_c := VsC,
      ns_per_msg := Ns, c_ns_per_msg := CNs, failed_runs := Failed} = Cell) ->
    U = binary_to_list(Unit),
    Spread = case R of
                 #{min := null} -> "-";
                 #{min := Min, max := Max} -> fmt_rate(Min) ++ "-" ++ fmt_rate(Max)
             end,
    Server = atom_to_list(Sv) ++ case Failed of
                                     0 -> "";
                                     F -> " (" ++ integer_to_list(F) ++ " failed)"
                                 end,
    [atom_to_list(Sc), Server, rate_unit(maps:get(median, R), U), Spread,
     case Sv of c -> "-"; _ -> rate_unit(maps:get(median, CR), U) end,
     fmt_ratio(maps:get(median, VsC)),
     fmt_spread(VsC) ++ case maps:get(wide_spread, Cell, false) of true -> " *"; false -> "" end,
     case Cell of
         #{vs_peer := #{median := VP}} -> fmt_ratio(VP);
         _ -> "-"
     end,
     fmt_ns(maps:get(median, Ns)),
     case Sv of c -> "-"; _ -> fmt_ns(maps:get(median, CNs)) end].

%% @doc A summary's min-max as ratios, "-" without two values.
-spec fmt_spread(map()) -> string().
fmt_spread(#{n := N, min := Min, max := Max}) when N >= 2 ->
    fmt_ratio(Min) ++ "-" ++ fmt_ratio(Max);
fmt_spread(_) ->
    "-".

%% @doc What the columns mean, to print under the table.
-spec legend() -> iolist().
legend() ->
    io_lib:format(
      "rate: median over the rounds (lockstep, pipeline*, conns200, paced: frames acked/s; flood:\n"
      "echoed 6-byte messages/s; connrate: connections established/s; storm: connections back/s in\n"
      "the reconnect wave); C median: sluice-ref --threads 1, same pinning, same engine options, run\n"
      "right before or after in the same round; vs C: median of the per-round ratios to that C run\n"
      "(rate; ~s: C's server CPU per message / this server's), higher is better; rounds:\n"
      "their min-max, * when it spans more than ~s of the median; vs peer: median of the\n"
      "per-round (vs C / best peer's vs C); ns/msg: server user+sys CPU (whole process tree)\n"
      "in the engine's measurement window per message (connrate, storm: whole engine run, per\n"
      "connection).\n"
      "sluice = bin/sluice serve's defaults (--active ~p); peers: handwritten = a careful gen_tcp\n"
      "server (sluice_peer_gen_tcp), gen_tcp-socket = the same on {inet_backend, socket}.~n",
      [cpu_judged(), fmt_pct(sluice_bench_stats:wide_limit()),
       sluice_bench_matrix:default_active()]).

rate_unit(null, _) -> "-";
rate_unit(V, U) -> fmt_rate(V) ++ " " ++ U.

%% Text columns left-aligned, figures right-aligned.
pad(X, W, I) when I =< 2 -> string:pad(X, W, trailing);
pad(X, W, _) -> string:pad(X, W, leading).

transpose([[] | _]) -> [];
transpose(Rows) -> [[hd(R) || R <- Rows] | transpose([tl(R) || R <- Rows])].

%% @doc A rate with three significant digits and a k/M/G suffix.
-spec fmt_rate(number() | null) -> string().
fmt_rate(null) -> "-";
fmt_rate(V) when V == 0 -> "0";
fmt_rate(V) when V >= 1.0e9 -> sig(V / 1.0e9) ++ "G";
fmt_rate(V) when V >= 1.0e6 -> sig(V / 1.0e6) ++ "M";
fmt_rate(V) when V >= 1.0e3 -> sig(V / 1.0e3) ++ "k";
fmt_rate(V) -> sig(V).

sig(X) when X >= 100 -> integer_to_list(round(X));
sig(X) when X >= 10 -> lists:flatten(io_lib:format("~.1f", [float(X)]));
sig(X) -> lists:flatten(io_lib:format("~.2f", [float(X)])).

%% @doc Nanoseconds per message.
-spec fmt_ns(number() | null) -> string().
fmt_ns(null) -> "-";
fmt_ns(V) when V == 0 -> "0";
fmt_ns(V) when V >= 100 -> integer_to_list(round(V));
fmt_ns(V) -> lists:flatten(io_lib:format("~.1f", [float(V)])).

%% @doc A fraction as a whole percentage.
-spec fmt_pct(number() | null) -> string().
fmt_pct(null) -> "-";
fmt_pct(V) -> integer_to_list(round(V * 100)) ++ "%".

-spec fmt_ratio(number() | null) -> string().
fmt_ratio(null) -> "-";
fmt_ratio(V) when V > 0, V < 0.01 -> float_to_list(float(V), [{decimals, 4}]);
fmt_ratio(V) -> lists:flatten(io_lib:format("~.2f", [float(V)])).
