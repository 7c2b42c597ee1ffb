%% @doc The HTML report: one self-contained page (inline CSS and SVG, no
%% JavaScript, nothing fetched) with the machine, the table, the speed
%% targets and one bar chart per scenario, plus the server CPU per message
%% on the flood.
-module(sluice_bench_html).

-export([page/1]).

-define(W, 760).        % chart width
-define(LABEL_W, 170).  % server names
-define(PLOT_W, 420).   % bars
-define(ROW_H, 26).
-define(TOP, 10).
-define(AXIS_H, 34).

%% @doc The page for a result document (see sluice_bench:bench/1).
-spec page(map()) -> iodata().
page(#{cells := Cells, machine := M, date := Date, command := Cmd} = Doc) ->
    Present = [Sc || #{scenario := Sc} <- Cells],
    Scenarios = [Sc || Sc <- sluice_bench_matrix:scenarios(), lists:member(Sc, Present)],
    ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
     "<title>sluice benchmark ", esc(Date), "</title>\n<style>\n", css(), "</style>\n",
     "</head>\n<body>\n<h1>sluice benchmark</h1>\n",
     "<p>", esc(Date), " &middot; <code>", esc(Cmd), "</code> &middot; ",
     settings(maps:get(settings, Doc, #{})), "</p>\n",
     "<h2>Machine</h2>\n", machine(M),
     "<h2>Results</h2>\n", table(Cells),
     targets(maps:get(targets, Doc, [])),
     "<p class=\"note\">", notes(), "</p>\n",
     [scenario_section(Sc, [C || #{scenario := S} = C <- Cells, S =:= Sc]) || Sc <- Scenarios],
     "</body>\n</html>\n"].

css() ->
    "body{font-family:sans-serif;max-width:60em;margin:2em auto;color:#222}\n"
    "table{border-collapse:collapse;margin:1em 0}\n"
    "td,th{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right}\n"
    "td.t,th.t{text-align:left}\n"
    ".pass{color:#17702f;font-weight:bold}.fail{color:#b3261e;font-weight:bold}\n"
    ".note{color:#555;font-size:.9em}\n"
    "svg text{font-family:sans-serif;font-size:12px}\n".

settings(S) ->
    esc(io_lib:format("~p rounds, ~s s warmup + ~s s measured per run",
                      [maps:get(rounds, S, 0), num(maps:get(warmup_s, S, 0)),
                       num(maps:get(duration_s, S, 0))])).

num(N) when is_integer(N) -> integer_to_list(N);
num(F) -> float_to_list(float(F), [{decimals, 2}, compact]).

machine(M) ->
    Rows = [{"cores", maps:get(nproc, M, "")}, {"CPU", maps:get(cpu_model, M, "")},
            {"OTP", [maps:get(otp_release, M, ""), " (erts ", maps:get(erts_version, M, ""), ")"]},
            {"kernel", maps:get(kernel, M, "")}, {"clock ticks/s", maps:get(clk_tck, M, "")},
            {"open-file limit", maps:get(open_file_limit, M, "")},
            {"SLUICE_ERL_FLAGS", maps:get(erl_flags, M, "")}],
    ["<table>\n", [["<tr><th class=\"t\">", esc(K), "</th><td class=\"t\">", esc(to_text(V)),
                    "</td></tr>\n"] || {K, V} <- Rows], "</table>\n"].

to_text(V) when is_integer(V) -> integer_to_list(V);
to_text(null) -> "";
to_text(V) -> V.

table(Cells) ->
    Head = ["scenario", "server", "median rate", "spread (min&ndash;max)", "C median",
            "ratio", "server ns/msg", "C ns/msg"],
    ["<table>\n<tr>", [["<th", cls(I), ">", H, "</th>"] || {I, H} <- enum(Head)], "</tr>\n",
     [["<tr>", [["<td", cls(I), ">", esc(V), "</td>"] || {I, V} <- enum(row(C))], "</tr>\n"]
      || C <- Cells],
     "</table>\n"].

cls(I) when I =< 2 -> " class=\"t\"";
cls(_) -> "".

enum(L) -> lists:zip(lists:seq(1, length(L)), L).

row(#{scenario := Sc, server := Sv, unit := U, rate := R, c_rate := CR, ratio := Ra,
      ns_per_msg := Ns, c_ns_per_msg := CNs}) ->
    F = fun sluice_bench_report:fmt_rate/1,
    [atom_to_list(Sc), atom_to_list(Sv),
     [F(maps:get(median, R)), " ", U],
     [F(maps:get(min, R)), "-", F(maps:get(max, R))],
     case Sv of c -> "-"; _ -> [F(maps:get(median, CR)), " ", U] end,
     sluice_bench_report:fmt_ratio(maps:get(median, Ra)),
     sluice_bench_report:fmt_ns(maps:get(median, Ns)),
     case Sv of c -> "-"; _ -> sluice_bench_report:fmt_ns(maps:get(median, CNs)) end].

targets([]) -> [];
targets(Ts) ->
    ["<h2>Speed targets</h2>\n<ul>\n",
     [["<li><span class=\"", pf(P), "\">", string:to_upper(pf(P)), "</span> ", esc(Name),
       ": ", esc(show(M, V)), " ", esc(Rule), " ", esc(show(M, T)),
       case sluice_bench_report:vs_c_text(Tg) of
           [] -> [];
           Text -> ["<br><span class=\"note\">", esc(Text), "</span>"]
       end, "</li>\n"]
      || #{pass := P, name := Name, measure := M, value := V, rule := Rule,
           threshold := T} = Tg <- Ts],
     "</ul>\n"].

pf(true) -> "pass";
pf(false) -> "fail";
pf(null) -> "n/a".

show(ratio, V) -> sluice_bench_report:fmt_ratio(V);
show(ns_per_msg, V) -> sluice_bench_report:fmt_ns(V).

notes() ->
    "Rate: the median over the rounds; spread: min&ndash;max. C median: the C reference "
    "server (sluice-ref, one thread, same pinning) measured with the same engine options "
    "in the same round, right after each sluice run. Ratio: the median of those per-round "
    "sluice/C ratios. Server ns/msg: user+system CPU time of the server's process tree "
    "over the engine's measurement window (connrate: over the whole engine run, per "
    "connection), divided by the messages of that window. <code>sluice</code>: "
    "<code>bin/sluice serve</code>'s defaults (a <code>sluice-active-N</code> row with the "
    "default N would repeat it and is left out).".

scenario_section(Sc, Cells) ->
    ["<h2>", esc(atom_to_list(Sc)), "</h2>\n<p class=\"note\">",
     esc(sluice_bench_matrix:describe_scenario(Sc)), "</p>\n",
     chart(Cells, rate, c_rate, true),
     case Sc of
         flood -> ["<h3>flood: server CPU per message (ns, lower is better)</h3>\n",
                   chart(Cells, ns_per_msg, c_ns_per_msg, false)];
         _ -> []
     end].

%%% ------------------------------------------------------------------
%%% Horizontal bar chart: one row per server, the bar its median, a
%%% whisker for min-max, an orange tick for the paired C median.
%%% ------------------------------------------------------------------

chart(Cells, Key, CKey, IsRate) ->
    Rows = [{Sv, maps:get(Key, C), maps:get(CKey, C), maps:get(median, maps:get(ratio, C))}
            || #{server := Sv} = C <- Cells],
    Values = lists:flatten([[maps:get(max, S), maps:get(median, CS), maps:get(max, CS)]
                            || {_, S, CS, _} <- Rows]),
    Max = case [V || V <- Values, is_number(V)] of
              [] -> 1;
              Vs -> nice(lists:max(Vs))
          end,
    H = ?TOP + length(Rows) * ?ROW_H + ?AXIS_H,
    Unit = case Cells of
               [#{unit := U} | _] when IsRate -> U;
               _ -> <<"ns/msg">>
           end,
    X = fun(V) -> ?LABEL_W + V / Max * ?PLOT_W end,
    ["<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", i(?W), "\" height=\"", i(H),
     "\" viewBox=\"0 0 ", i(?W), " ", i(H), "\" role=\"img\">\n",
     axis(Max, X, ?TOP + length(Rows) * ?ROW_H, IsRate),
     [bar(N, R, X, IsRate, Unit) || {N, R} <- enum(Rows)],
     "</svg>\n",
     "<p class=\"note\">bar: median; thin line: min&ndash;max; orange tick: C reference "
     "(median of the paired runs)",
     case IsRate of true -> "; label: median and ratio to C"; false -> "" end, "</p>\n"].

bar(N, {Sv, S, CS, Ratio}, X, IsRate, Unit) ->
    Y = ?TOP + (N - 1) * ?ROW_H,
    Mid = Y + ?ROW_H div 2,
    Fill = case Sv of
               c -> "#e07b00";
               seed -> "#8a8a8a";
               _ -> "#3465a4"
           end,
    Med = maps:get(median, S),
    Label = case Med of
                null -> "failed";
                _ when IsRate ->
                    [sluice_bench_report:fmt_rate(Med), " ", Unit,
                     case Ratio of
                         null -> "";
                         _ -> ["  ", sluice_bench_report:fmt_ratio(Ratio), "&#215; C"]
                     end];
                _ -> [sluice_bench_report:fmt_ns(Med), " ns"]
            end,
    ["<text x=\"", i(?LABEL_W - 6), "\" y=\"", i(Mid + 4), "\" text-anchor=\"end\">",
     esc(atom_to_list(Sv)), "</text>\n",
     case Med of
         null -> [];
         _ -> ["<rect x=\"", i(?LABEL_W), "\" y=\"", i(Y + 5), "\" width=\"",
               f(X(Med) - ?LABEL_W), "\" height=\"", i(?ROW_H - 10), "\" fill=\"", Fill,
               "\"/>\n"]
     end,
     case S of
         #{min := Mn, max := Mx} when is_number(Mn), Mx > Mn ->
             ["<line x1=\"", f(X(Mn)), "\" x2=\"", f(X(Mx)), "\" y1=\"", i(Mid), "\" y2=\"",
              i(Mid), "\" stroke=\"#111\" stroke-width=\"1.5\"/>\n"];
         _ -> []
     end,
     case maps:get(median, CS) of
         C when is_number(C), Sv =/= c ->
             ["<line x1=\"", f(X(C)), "\" x2=\"", f(X(C)), "\" y1=\"", i(Y + 2), "\" y2=\"",
              i(Y + ?ROW_H - 2), "\" stroke=\"#e07b00\" stroke-width=\"3\"/>\n"];
         _ -> []
     end,
     "<text x=\"", i(?LABEL_W + ?PLOT_W + 8), "\" y=\"", i(Mid + 4), "\">", Label,
     "</text>\n"].

axis(Max, X, Y, IsRate) ->
    Ticks = [Max * K / 4 || K <- lists:seq(0, 4)],
    Fmt = case IsRate of
              true -> fun sluice_bench_report:fmt_rate/1;
              false -> fun sluice_bench_report:fmt_ns/1
          end,
    ["<line x1=\"", i(?LABEL_W), "\" x2=\"", i(?LABEL_W + ?PLOT_W), "\" y1=\"", i(Y),
     "\" y2=\"", i(Y), "\" stroke=\"#999\"/>\n",
     [["<line x1=\"", f(X(T)), "\" x2=\"", f(X(T)), "\" y1=\"", i(?TOP), "\" y2=\"", i(Y + 4),
       "\" stroke=\"#ddd\"/>\n<text x=\"", f(X(T)), "\" y=\"", i(Y + 18),
       "\" text-anchor=\"middle\">", esc(Fmt(T)), "</text>\n"] || T <- Ticks]].

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
