%% @doc The HTML report: one self-contained page (inline CSS and SVG, no
%% JavaScript, nothing fetched). From the top: sluice beside C and beside
%% the best peer per scenario; the speed targets, each with its spread and
%% what it means for a user; the cells whose rounds disagree; every cell
%% relative to C with the targets' lines (sluice_bench_svg); the table;
%% latency percentiles of the lock-step and connection cells; one chart
%% per scenario; the machine. Cells without a successful run are left out
%% of the tables and charts and named in one line.
-module(sluice_bench_html).

-export([page/1]).

%% The scenarios whose latency the page shows: one request in flight, and
%% the connection scenarios (where the engine's latency is the connect's).
-define(LATENCY, [lockstep, conns200, connrate, storm, 'tls-lockstep', 'tls-handshakes']).

%% @doc The page for a result document (see sluice_bench:bench/1).
-spec page(map()) -> iodata().
page(#{cells := AllCells, machine := M, date := Date, command := Cmd} = Doc) ->
    Cells = [C || #{rate := #{n := N}} = C <- AllCells, N > 0],
    Empty = [C || #{rate := #{n := 0}} = C <- AllCells],
    Targets = maps:get(targets, Doc, []),
    Present = [Sc || #{scenario := Sc} <- Cells],
    Scenarios = [Sc || Sc <- sluice_bench_matrix:scenarios(), lists:member(Sc, Present)],
    ["<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
     "<title>sluice benchmark ", esc(Date), "</title>\n<style>\n", css(), "</style>\n",
     "</head>\n<body>\n<h1>sluice benchmark</h1>\n",
     "<p>", esc(Date), " &middot; <code>", esc(Cmd), "</code> &middot; ",
     settings(maps:get(settings, Doc, #{}), Scenarios), "</p>\n",
     "<p class=\"note\">Measured on a shared machine: absolute rates drift between runs; "
     "compare the ratios, which are taken within one round.</p>\n",
     [["<p class=\"note\">", esc(N), "</p>\n"] || N <- maps:get(notes, Doc, [])],
     interrupted(Doc),
     glance(Cells, Scenarios),
     targets(Targets),
     warnings(maps:get(warnings, Doc, [])),
     relative(Cells, Targets),
     "<h2>Results</h2>\n", table(Cells), empty(Empty),
     "<p class=\"note\">", notes(), "</p>\n",
     latency([C || #{scenario := Sc} = C <- Cells, lists:member(Sc, ?LATENCY)]),
     storm(maps:get(runs, Doc, [])),
     [scenario_section(Sc, [C || #{scenario := S} = C <- Cells, S =:= Sc]) || Sc <- Scenarios],
     "<h2>Machine</h2>\n", machine(M),
     "</body>\n</html>\n"].

%% Every cell relative to C: a chart only when a cell has a ratio to C (a
%% run of C cells alone, or one whose C runs all failed, has none: an
%% empty chart would read as a broken page).
relative(Cells, Targets) ->
    case [C || #{server := Sv, vs_c := #{median := M}} = C <- Cells, Sv =/= c, is_number(M)] of
        [] ->
            [];
        _ ->
            ["<h2>Every cell relative to C</h2>\n",
             sluice_bench_svg:ratios(Cells, Targets),
             "<p class=\"note\">Bar: the median of the per-round ratios to the C run beside it (by "
             "rate; ", sluice_bench_report:cpu_judged(),
             ": by server CPU per message, C's over the server's); thin line: the rounds' "
             "min&ndash;max; circles: each round, where the spread is wide; &#9656;: a round beyond "
             "the axis; right: median (min&ndash;max). Blue: sluice, green: peers, grey: seed. On the row a speed target "
             "judges, <span style=\"color:#b3261e\">red dashes</span>: a target against C, at its "
             "threshold; <span style=\"color:#7b2cbf\">purple dots</span>: a target against another "
             "cell (the best peer, the best active mode, the inet backend), at the threshold times "
             "that cell's ratio to C: the bar must reach it.</p>\n"]
    end.

css() ->
    "body{font-family:sans-serif;max-width:66em;margin:2em auto;color:#222}\n"
    "table{border-collapse:collapse;margin:1em 0;font-size:.92em}\n"
    "td,th{padding:.2em .6em;border-bottom:1px solid #ddd;text-align:right;"
    "white-space:nowrap}\n"
    "td.t,th.t{text-align:left}\n"
    ".pass{color:#17702f;font-weight:bold}.fail{color:#b3261e;font-weight:bold}\n"
    ".warn{color:#b3261e}\n"
    ".note{color:#555;font-size:.9em}\n"
    "li{margin-bottom:.7em}.meaning{color:#444;font-size:.9em;margin:.2em 0 0}\n"
    "svg text{font-family:sans-serif;font-size:12px}\n".

%% The rounds, and each measured scenario's warmup and window: the bench's
%% unless the scenario has its own (paced), grouped by value in the order
%% the scenarios come; the connection scenarios' CPU is over the whole
%% engine run.
settings(S, Scenarios) ->
    Given = #{warmup => maps:get(warmup_s, S, 0), duration => maps:get(duration_s, S, 0)},
    Times = [{sluice_bench_matrix:times(Sc, Given), Sc} || Sc <- Scenarios,
                                                          measured_window(Sc)],
    Groups = [{T, [Sc || {T2, Sc} <- Times, T2 =:= T]}
              || T <- lists:uniq([T || {T, _} <- Times])],
    Whole = [Sc || Sc <- Scenarios, not measured_window(Sc)],
    Parts = [io_lib:format("~s s warmup + ~s s measured (~s)",
                           [num(case W of none -> 0; _ -> W end), num(D), names(Scs)])
             || {{W, D}, Scs} <- Groups]
        ++ [["whole engine run (", names(Whole), ")"] || Whole =/= []],
    Rounds = maps:get(rounds, S, 0),
    esc(io_lib:format("~p round~s; per run: ~s",
                      [Rounds, [$s || Rounds =/= 1], lists:join("; ", Parts)])).

measured_window(Sc) ->
    maps:get(cpu_window, sluice_bench_matrix:scenario(Sc)) =:= measured.

names(Scs) -> lists:join(", ", [atom_to_list(Sc) || Sc <- Scs]).

num(N) when is_integer(N) -> integer_to_list(N);
num(F) -> float_to_list(float(F), [{decimals, 2}, compact]).

%% Per scenario: sluice's defaults against C and against the best peer.
glance(Cells, Scenarios) ->
    Rows = [{Sc, S, find(Sc, maps:get(best_peer, S, none), Cells)}
            || Sc <- Scenarios, S <- [find(Sc, sluice, Cells)], S =/= none],
    case Rows of
        [] -> [];
        _ ->
            ["<h2>sluice beside C and beside the best peer</h2>\n",
             html_table(["scenario", "sluice / C", "rounds", "best peer", "peer / C",
                         "sluice / best peer", "rounds"],
                        [[atom_to_list(Sc), ratio(maps:get(vs_c, S)), wide(maps:get(vs_c, S)),
                          case P of none -> "-"; #{server := PSv} -> atom_to_list(PSv) end,
                          case P of none -> "-"; _ -> ratio(maps:get(vs_c, P)) end,
                          ratio(maps:get(vs_peer, S, #{median => null})),
                          wide(maps:get(vs_peer, S, #{n => 0}))]
                         || {Sc, S, P} <- Rows], 1),
             "<p class=\"note\">Ratios are medians of per-round ratios (",
             sluice_bench_report:cpu_judged(), ": by server CPU per message, C's over the "
             "server's); rounds: their min&ndash;max, * where that "
             "spans more than ", sluice_bench_report:fmt_pct(sluice_bench_stats:wide_limit()),
             " of the median. Peers: <code>handwritten</code>, the best "
             "ack/ping/echo server a careful engineer writes on gen_tcp alone "
             "(sluice_peer_gen_tcp: acceptor pool, {active, N} topped up, 256 KiB buffer, "
             "whole-chunk parsing, asynchronous sends); <code>gen_tcp-socket</code>, the same "
             "on {inet_backend, socket}.</p>\n"]
    end.

targets([]) -> [];
targets(Ts) ->
    ["<h2>Speed targets</h2>\n<ul>\n",
     [["<li><span class=\"", pf(P), "\">", string:to_upper(pf(P)), "</span> ", esc(Name),
       ": ", sluice_bench_targets:fmt_value(V, T), " ", esc(Rule), " ", ratio_v(T),
       " <span class=\"note\">(rounds ", spread_v(maps:get(spread, Tg, null)), ")</span>",
       case maps:get(wide_spread, Tg, false) of
           true -> " <span class=\"warn\">spread too wide to judge</span>";
           false -> ""
       end,
       case sluice_bench_targets:mode_detail(Tg) of
           {What, Known} ->
               ["<br><span class=\"note\">", What, ": ",
                esc(lists:join(", ", [[atom_to_list(Sv), " ", ratio_v(R)] || {Sv, R} <- Known])),
                "</span>"];
           none -> []
       end,
       "<p class=\"meaning\">", esc(maps:get(meaning, Tg, <<>>)), "</p></li>\n"]
      || #{pass := P, name := Name, value := V, rule := Rule, threshold := T} = Tg <- Ts],
     "</ul>\n"].

warnings([]) -> [];
warnings(Ws) ->
    ["<h2>Spread warnings</h2>\n<p class=\"note\">These cells' per-round ratios to C span "
     "more than ", sluice_bench_report:fmt_pct(sluice_bench_stats:wide_limit()),
     " of their median: one round met a busier machine. Their figures and the targets that "
     "use them are unreliable in this run; rerun them with more <code>--rounds</code>.</p>\n"
     "<ul>\n",
     [["<li class=\"warn\">", esc(atom_to_list(Sc)), "/", esc(atom_to_list(Sv)), ": rounds ",
       spread(VsC), ", median ", ratio(VsC), " (", sluice_bench_report:fmt_pct(P),
       ")</li>\n"]
      || #{scenario := Sc, server := Sv, vs_c := VsC, spread_pct := P} <- Ws],
     "</ul>\n"].

%% A page written after SIGTERM or Ctrl-C holds only the runs done: say
%% so at the top, or it reads as a complete benchmark whose missing cells
%% and ratios are unexplained.
interrupted(#{interrupted := true} = Doc) ->
    Done = length(maps:get(runs, Doc, [])),
    Of = case maps:get(planned_runs, Doc, null) of
             null -> "";
             P -> [" of ", integer_to_list(P)]
         end,
    ["<p class=\"warn\">Interrupted (SIGTERM or Ctrl-C) after ", integer_to_list(Done), Of,
     " runs: only what those runs measured is shown. A cell not reached is missing; one "
     "whose C run was not reached has no ratio to C.</p>\n"];
interrupted(_) ->
    [].

pf(true) -> "pass";
pf(false) -> "fail";
pf(null) -> "n/a".

table(Cells) ->
    html_table(["scenario", "server", "median rate", "spread (min&ndash;max)", "C median",
                "vs C", "rounds", "vs best peer", "server ns/msg", "C ns/msg"],
               [row(C) || C <- Cells], 2).

%% As the text table: a cell's failed runs beside its server (its figures
%% are those of the other rounds), and "-" for a C median there is none of
%% (its C runs failed or were not reached), not "- msg/s".
row(#{scenario := Sc, server := Sv, unit := U, rate := R, c_rate := CR, vs_c := VsC,
      ns_per_msg := Ns, c_ns_per_msg := CNs} = C) ->
    F = fun sluice_bench_report:fmt_rate/1,
    [atom_to_list(Sc),
     [atom_to_list(Sv), case maps:get(failed_runs, C, 0) of
                            0 -> "";
                            N -> [" (", integer_to_list(N), " failed)"]
                        end],
     [F(maps:get(median, R)), " ", U],
     [F(maps:get(min, R)), "-", F(maps:get(max, R))],
     case {Sv, maps:get(median, CR)} of
         {c, _} -> "-";
         {_, null} -> "-";
         {_, CM} -> [F(CM), " ", U]
     end,
     ratio(VsC),
     [spread(VsC), case maps:get(wide_spread, C, false) of true -> " *"; false -> "" end],
     ratio(maps:get(vs_peer, C, #{median => null})),
     sluice_bench_report:fmt_ns(maps:get(median, Ns)),
     case Sv of c -> "-"; _ -> sluice_bench_report:fmt_ns(maps:get(median, CNs)) end].

%% Cells with no successful run: those whose runs failed, and those an
%% interrupt came before (no run at all, so no error to look up).
empty(Cells) ->
    {Failed, NotReached} = lists:partition(fun(#{failed_runs := F}) -> F > 0 end, Cells),
    [case Failed of
         [] -> [];
         _ -> ["<p class=\"warn\">No successful run (left out above): ",
               esc(lists:join(", ", [[cell_name(C), " (", integer_to_list(F), " failed runs)"]
                                     || C = #{failed_runs := F} <- Failed])),
               "; the runs' <code>error</code> in the JSON says why.</p>\n"]
     end,
     case NotReached of
         [] -> [];
         _ -> ["<p class=\"warn\">Not reached before the run was interrupted (left out "
               "above): ", esc(lists:join(", ", [cell_name(C) || C <- NotReached])), ".</p>\n"]
     end].

cell_name(#{scenario := Sc, server := Sv}) ->
    [atom_to_list(Sc), "/", atom_to_list(Sv)].

notes() ->
    ["Rate: the median over the rounds; spread: min&ndash;max. C median: the C reference "
    "server (sluice-ref, one thread, same pinning) measured with the same engine options "
    "in the same round, right before or after the cell's run. vs C: the median of the "
    "per-round ratios to that C run (", sluice_bench_report:cpu_judged(),
    ": C's server CPU per message over the cell's), "
    "higher is better; rounds: their min&ndash;max, * where the spread is wide. vs best "
    "peer: the median of the per-round ratios of vs C to the best peer's. Server ns/msg: "
    "user+system CPU time of the server's process tree over the engine's measurement "
    "window (connrate, storm: over the whole engine run, per connection), divided by the "
    "messages of that window. <code>sluice</code>: <code>bin/sluice serve</code>'s "
    "defaults (a <code>sluice-active-N</code> row with the default N would repeat it and "
    "is left out)."].

%% The engine's latency percentiles, median over the rounds: a round trip
%% for lock-step, a frame's ack for conns200, a connect for connrate and
%% storm.
latency([]) -> [];
latency(Cells) ->
    P = fun(L, K) -> us(maps:get(K, L, null)) end,
    ["<h2>Latency</h2>\n",
     html_table(["scenario", "server", "p50 (&micro;s)", "p90", "p99", "p99.9", "max",
                 "C p50", "C p99"],
                [[atom_to_list(Sc), atom_to_list(Sv),
                  P(L, <<"p50">>), P(L, <<"p90">>), P(L, <<"p99">>), P(L, <<"p999">>),
                  P(L, <<"max">>), P(CL, <<"p50">>), P(CL, <<"p99">>)]
                 || #{scenario := Sc, server := Sv, latency_us := L, c_latency_us := CL}
                        <- Cells], 2),
     "<p class=\"note\">Microseconds, as the engine measures them, median over the rounds: "
     "lockstep, a frame's round trip (client and server on one core); conns200, from a "
     "frame's send to its ack, 1,000 frames in flight per connection (queueing, not service "
     "time); connrate and storm, a connect until Ping got Pong. C: the C runs paired with "
     "the cell.</p>\n"].

storm(Runs) ->
    case sluice_bench_storm:rows(Runs) of
        [] -> [];
        Rows ->
            ["<h2>Reconnect storm, wave 2</h2>\n",
             html_table(["server", "round", "back", "in (s)", "connect p50 (ms)", "p99", "max",
                         "ListenOverflows", "failures"], Rows, 1),
             "<p class=\"note\">Every client reconnects at once: how long until all were "
             "back (Ping answered), their connect latencies, and the SYNs the kernel dropped "
             "because the listen queue was full (host-wide, during the wave): each costs its "
             "client a retransmit a second or more later.</p>\n"]
    end.

us(null) -> "-";
us(V) when V >= 10000 -> integer_to_list(round(V));
us(V) -> lists:flatten(io_lib:format("~.1f", [float(V)])).

scenario_section(Sc, Cells) ->
    ["<h2>", esc(atom_to_list(Sc)), "</h2>\n<p class=\"note\">",
     esc(sluice_bench_matrix:describe_scenario(Sc)), "</p>\n",
     sluice_bench_svg:bars(Cells, rate, [axis_title(Sc), ", median over the rounds"]),
     case sluice_bench_report:judged_by(Sc) of
         cpu -> ["<h3>", esc(atom_to_list(Sc)), ": server CPU per message (lower is better)</h3>\n",
                 sluice_bench_svg:bars(Cells, cpu, [cpu_axis_title(Sc), ", median over the rounds"])];
         rate -> []
     end].

cpu_axis_title(flood) -> "server CPU per echoed message (ns)";
cpu_axis_title(_) -> "server CPU per frame acked (ns)".

axis_title(flood) -> "echoed 6-byte messages per second (msg/s)";
axis_title(storm) -> "connections back per second in the reconnect wave (conn/s)";
axis_title(connrate) -> "connections established per second (conn/s)";
axis_title('tls-handshakes') -> "full TLS handshakes per second (conn/s)";
axis_title(_) -> "frames acked per second (msg/s)".

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

%% Headings are trusted markup; cells are escaped. The first `Left'
%% columns are text (left-aligned), the rest figures.
html_table(Head, Rows, Left) ->
    Cls = fun(I) when I =< Left -> " class=\"t\""; (_) -> "" end,
    ["<table>\n<tr>", [["<th", Cls(I), ">", H, "</th>"] || {I, H} <- enum(Head)], "</tr>\n",
     [["<tr>", [["<td", Cls(I), ">", esc(V), "</td>"] || {I, V} <- enum(R)], "</tr>\n"]
      || R <- Rows],
     "</table>\n"].

enum(L) -> lists:zip(lists:seq(1, length(L)), L).

find(Sc, Sv, Cells) ->
    case [C || #{scenario := S, server := V} = C <- Cells, S =:= Sc, V =:= Sv] of
        [C | _] -> C;
        [] -> none
    end.

ratio(#{median := V}) -> sluice_bench_report:fmt_ratio(V).
wide(S) ->
    [spread(S), case sluice_bench_stats:wide(S) of true -> " *"; false -> "" end].
ratio_v(V) -> sluice_bench_report:fmt_ratio(V).
spread(S) -> sluice_bench_report:fmt_spread(S).
spread_v(null) -> "-";
spread_v(#{min := Min, max := Max}) -> [ratio_v(Min), "&ndash;", ratio_v(Max)].

esc(B) when is_binary(B) -> esc(unicode:characters_to_list(B));
esc(S) ->
    lists:map(fun($<) -> "&lt;"; ($>) -> "&gt;"; ($&) -> "&amp;"; ($") -> "&quot;";
                 (C) -> C end,
              lists:flatten(io_lib:format("~ts", [S]))).
