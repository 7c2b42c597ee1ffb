%% @doc The HTML report's charts, as inline SVG (no script, nothing
%% fetched): a horizontal bar chart of one figure per server (rates or
%% server CPU per message), and the chart of every cell relative to C with
%% each speed target's line. Every chart has a titled axis with its unit.
-module(sluice_bench_svg).

-export([bars/3, ratios/2]).

-define(W, 860).        % chart width
-define(LABEL_W, 170).  % server names
-define(PLOT_W, 460).   % bars
-define(ROW_H, 26).
-define(TOP, 14).
-define(AXIS_H, 46).    % tick labels and the axis title
-define(RATIO_MAX, 2.0). % the ratio chart's axis ends here at most

-define(SLUICE, "#3465a4").
-define(PEER, "#4e9a06").
-define(SEED, "#8a8a8a").
-define(C, "#e07b00").
-define(TARGET, "#b3261e").
-define(RELATIVE, "#7b2cbf").

%%% ------------------------------------------------------------------
%%% One figure per server
%%% ------------------------------------------------------------------

%% @doc One row per cell: the bar its median, a whisker for min-max, an
%% orange tick for the paired C median. `rate': the cells' rates, labelled
%% with the ratio to C; `cpu': server CPU per message (ns).
-spec bars([map()], rate | cpu, unicode:chardata()) -> iolist().
bars(Cells, What, AxisTitle) ->
    Unit = case Cells of
               [#{unit := U} | _] when What =:= rate -> U;
               _ -> <<"ns">>
           end,
    {Key, CKey} = case What of
                      rate -> {rate, c_rate};
                      cpu -> {ns_per_msg, c_ns_per_msg}
                  end,
    %% the label's ratio is of the figure drawn: rates, or CPU per message
    RKey = case What of rate -> ratio; cpu -> cpu_vs_c end,
    Rows = [{Sv, maps:get(Key, C), maps:get(CKey, C), maps:get(median, maps:get(RKey, C))}
            || #{server := Sv} = C <- Cells],
    Values = lists:flatten([[maps:get(max, S), maps:get(median, CS), maps:get(max, CS)]
                            || {_, S, CS, _} <- Rows]),
    Max = nice(lists:max([0 | [V || V <- Values, is_number(V)]])),
    Fmt = case What of
              rate -> fun sluice_bench_report:fmt_rate/1;
              cpu -> fun sluice_bench_report:fmt_ns/1
          end,
    X = fun(V) -> ?LABEL_W + V / Max * ?PLOT_W end,
    Bottom = ?TOP + length(Rows) * ?ROW_H,
    [svg_open(Bottom + ?AXIS_H),
     axis([Max * K / 4 || K <- lists:seq(0, 4)], Fmt, X, Bottom, AxisTitle),
     [bar(N, R, X, What, Unit) || {N, R} <- enum(Rows)],
     "</svg>\n",
     "<p class=\"note\">bar: median over the rounds; thin line: min&ndash;max; orange tick: "
     "the C reference runs paired with the cell (median)",
     "; right: the median and its ratio to the C runs' (median of per-round ratios)</p>\n"].

bar(N, {Sv, S, CS, Ratio}, X, What, Unit) ->
    Y = ?TOP + (N - 1) * ?ROW_H,
    Mid = Y + ?ROW_H div 2,
    Med = maps:get(median, S),
    Fmt = case What of
              rate -> fun sluice_bench_report:fmt_rate/1;
              cpu -> fun sluice_bench_report:fmt_ns/1
          end,
    Label = [Fmt(Med), " ", esc(Unit),
             case Ratio of
                 null -> "";
                 _ -> [" &#183; ", sluice_bench_report:fmt_ratio(Ratio), "&#215; C"]
             end],
    [name(Sv, Mid),
     case Med of
         null -> [];
         _ -> rect(?LABEL_W, Y + 5, X(Med) - ?LABEL_W, ?ROW_H - 10, fill(Sv))
     end,
     whisker(S, X, Mid),
     case maps:get(median, CS) of
         C when is_number(C), Sv =/= c ->
             line(X(C), Y + 2, X(C), Y + ?ROW_H - 2, [" stroke=\"", ?C, "\" stroke-width=\"3\""]);
         _ -> []
     end,
     text(?LABEL_W + ?PLOT_W + 8, Mid + 4, "start", Label)].

%%% ------------------------------------------------------------------
%%% Every cell relative to C
%%% ------------------------------------------------------------------

%% @doc Every cell's median ratio to C (vs_c: by rate; on the flood by
%% server CPU per message) with its rounds' min-max, each round's point
%% where the spread is wide, a line at 1.0 (as fast as C), and on the row a
%% target judges, a red dashed line where the target lies in these units.
-spec ratios([map()], [map()]) -> iolist().
ratios(Cells0, Targets) ->
    Cells = [C || #{server := Sv, vs_c := #{median := M}} = C <- Cells0, Sv =/= c,
                  is_number(M)],
    Scenarios = lists:usort(fun(A, B) -> order(A, Cells) =< order(B, Cells) end,
                            [Sc || #{scenario := Sc} <- Cells]),
    %% a heading row per scenario, then its cells
    Rows = lists:append([[{heading, Sc} | [{cell, C} || #{scenario := S} = C <- Cells, S =:= Sc]]
                         || Sc <- Scenarios]),
    Lines = [{Sc, Sv, At, Tag} || T <- Targets, {Sc, Sv, At, Tag} <- [target_line(T, Cells)],
                                  is_number(At)],
    Values = [1.0 | [At || {_, _, At, _} <- Lines]]
        ++ lists:append([[maps:get(max, V) | [R || #{vs_c := R} <- PR, is_number(R)]]
                         || #{vs_c := V, per_round := PR} <- Cells]),
    %% a round that ran far from the others (the flood's regimes) would
    %% squeeze every bar into a corner: the axis stops at 2.0 and what lies
    %% beyond is marked at its edge (the label on the right has the figure)
    Max = min(?RATIO_MAX, max(1.25, math:ceil(lists:max(Values) * 4) / 4)),
    X = fun(V) -> ?LABEL_W + min(V, Max) / Max * ?PLOT_W end,
    Bottom = ?TOP + length(Rows) * ?ROW_H,
    Step = if Max =< 2 -> 0.25; Max =< 5 -> 0.5; true -> 1.0 end,
    Ticks = [K * Step || K <- lists:seq(0, trunc(Max / Step + 1.0e-9))],
    [svg_open(Bottom + ?AXIS_H),
     axis(Ticks, fun sluice_bench_report:fmt_ratio/1, X, Bottom,
          <<"ratio to the C reference in the same round (1.0 = as fast as C; higher is better)">>),
     line(X(1.0), ?TOP - 6, X(1.0), Bottom, [" stroke=\"", ?C, "\" stroke-width=\"2\""]),
     text(X(1.0), ?TOP - 4, "middle", "C"),
     [ratio_row(N, Row, X, Lines, Max) || {N, Row} <- enum(Rows)],
     "</svg>\n"].

order(Sc, Cells) ->
    length(lists:takewhile(fun(#{scenario := S}) -> S =/= Sc end, Cells)).

ratio_row(N, {heading, Sc}, _X, _Lines, _Max) ->
    Y = ?TOP + (N - 1) * ?ROW_H,
    ["<text x=\"4\" y=\"", i(Y + ?ROW_H div 2 + 5), "\" font-weight=\"bold\">",
     esc(atom_to_list(Sc)), "</text>\n"];
ratio_row(N, {cell, #{scenario := Sc, server := Sv, vs_c := VsC, per_round := PR} = C},
          X, Lines, Max) ->
    Y = ?TOP + (N - 1) * ?ROW_H,
    Mid = Y + ?ROW_H div 2,
    Med = maps:get(median, VsC),
    Wide = maps:get(wide_spread, C, false),
    [name(Sv, Mid),
     rect(?LABEL_W, Y + 6, X(Med) - ?LABEL_W, ?ROW_H - 12, fill(Sv)),
     whisker(VsC, X, Mid),
     case Wide of
         true -> [["<circle cx=\"", f(X(R)), "\" cy=\"", i(Mid), "\" r=\"3.5\" fill=\"#fff\" "
                   "stroke=\"#111\" stroke-width=\"1.2\"/>\n"]
                  || #{vs_c := R} <- PR, is_number(R)];
         false -> []
     end,
     case maps:get(max, VsC) of
         Far when is_number(Far), Far > Max ->
             text(?LABEL_W + ?PLOT_W + 1, Mid + 4, "start", "&#9656;");
         _ -> []
     end,
     [line(X(At), Y + 1, X(At), Y + ?ROW_H - 1,
           case Kind of
               c -> [" stroke=\"", ?TARGET, "\" stroke-width=\"2.5\" stroke-dasharray=\"4 2\""];
               relative -> [" stroke=\"", ?RELATIVE, "\" stroke-width=\"2.5\" "
                            "stroke-dasharray=\"1.5 1.5\""]
           end)
      || {S, V, At, Kind} <- Lines, S =:= Sc, V =:= Sv],
     text(?LABEL_W + ?PLOT_W + 14, Mid + 4, "start",
          [sluice_bench_report:fmt_ratio(Med),
           case sluice_bench_report:fmt_spread(VsC) of
               "-" -> "";
               Sp -> ["  (", Sp, ")"]
           end,
           case Wide of
               true -> ["  <tspan fill=\"", ?TARGET, "\">spread ",
                        sluice_bench_report:fmt_pct(maps:get(spread_pct, C)), "</tspan>"];
               false -> ""
           end])].

%% Where a target lies on the row it judges, in ratio-to-C units: a
%% target against C at its threshold; one against another cell (the best
%% peer, the best active mode, the inet backend) at the threshold times
%% that cell's median ratio to C.
target_line(#{scenario := Sc, server := Sv, against := c, threshold := T}, _Cells) ->
    {Sc, Sv, T, c};
target_line(#{scenario := Sc, server := Sv, against := Other, threshold := T}, Cells) ->
    case [M || #{scenario := S, server := O, vs_c := #{median := M}} <- Cells,
               S =:= Sc, O =:= Other, is_number(M)] of
        [M | _] -> {Sc, Sv, T * M, relative};
        [] -> {Sc, Sv, null, relative}
    end.

%%% ------------------------------------------------------------------
%%% Pieces
%%% ------------------------------------------------------------------

svg_open(H) ->
    ["<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", i(?W), "\" height=\"", i(H),
     "\" viewBox=\"0 0 ", i(?W), " ", i(H), "\" role=\"img\">\n"].

axis(Ticks, Fmt, X, Y, Title) ->
    [line(?LABEL_W, Y, ?LABEL_W + ?PLOT_W, Y, " stroke=\"#999\""),
     [[line(X(T), ?TOP, X(T), Y + 4, " stroke=\"#ddd\""),
       text(X(T), Y + 17, "middle", esc(Fmt(T)))] || T <- Ticks],
     text(?LABEL_W + ?PLOT_W / 2, Y + 36, "middle", ["<tspan fill=\"#444\">", esc(Title),
                                                     "</tspan>"])].

name(Sv, Mid) ->
    text(?LABEL_W - 6, Mid + 4, "end", esc(atom_to_list(Sv))).

whisker(#{min := Mn, max := Mx}, X, Mid) when is_number(Mn), Mx > Mn ->
    line(X(Mn), Mid, X(Mx), Mid, " stroke=\"#111\" stroke-width=\"1.5\"");
whisker(_, _, _) ->
    [].

rect(X, Y, W, H, Fill) ->
    ["<rect x=\"", f(X), "\" y=\"", f(Y), "\" width=\"", f(max(W, 0)), "\" height=\"", f(H),
     "\" fill=\"", Fill, "\"/>\n"].

line(X1, Y1, X2, Y2, Attrs) ->
    ["<line x1=\"", f(X1), "\" x2=\"", f(X2), "\" y1=\"", f(Y1), "\" y2=\"", f(Y2), "\"",
     Attrs, "/>\n"].

text(X, Y, Anchor, Body) ->
    ["<text x=\"", f(X), "\" y=\"", f(Y), "\" text-anchor=\"", Anchor, "\">", Body, "</text>\n"].

fill(c) -> ?C;
fill(seed) -> ?SEED;
fill(Sv) ->
    case lists:member(Sv, sluice_bench_matrix:peers()) of
        true -> ?PEER;
        false -> ?SLUICE
    end.

enum(L) -> lists:zip(lists:seq(1, length(L)), L).

%% A round axis maximum (quarters of it are the grid), at least V.
nice(V) when V =< 0 -> 1;
nice(V) ->
    P = math:pow(10, math:floor(math:log10(V))),
    hd([M * P || M <- [1, 2, 3, 4, 5, 6, 8, 10], M * P >= V]).

i(N) -> integer_to_list(round(N)).
f(N) -> float_to_list(float(N), [{decimals, 1}]).

esc(B) when is_binary(B) -> esc(unicode:characters_to_list(B));
esc(S) ->
    lists:map(fun($<) -> "&lt;"; ($>) -> "&gt;"; ($&) -> "&amp;"; ($") -> "&quot;";
                 (C) -> C end,
              lists:flatten(io_lib:format("~ts", [S]))).
