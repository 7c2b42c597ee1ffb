%% @doc The speed targets: each a median of per-round ratios, so that
%% every comparison is between runs seconds apart and drift between rounds
%% cancels (absolute figures drift by 2x between runs on these machines),
%% with the spread of those ratios (min-max) beside it. A target is shown
%% only when the cells it needs were measured.
%%
%% <ul>
%%  <li>sluice against C (`vs_c' of sluice_bench_report, per round);</li>
%%  <li>sluice's defaults against the best of its own active modes, on each
%%      scenario where they were measured (pipeline and flood), per round
%%      by the ratio to C (the flood's by server CPU per message), within
%%      5%, each round against the mode best in the other rounds;</li>
%%  <li>peers: sluice's defaults against the best peer of the scenario
%%      (the one with the highest median vs C), per round, at least 1.0;</li>
%%  <li>the socket backend against the inet one, per round by rate.</li>
%% </ul>
%% Each carries a sentence saying what it means for a user (`meaning'),
%% for the HTML report. warnings/1 lists the cells whose per-round ratio
%% to C spreads wider than sluice_bench_stats:wide_limit/0.
-module(sluice_bench_targets).

-export([targets/1, warnings/1, text/2, mode_detail/1, fmt_value/2]).

%% How the mode lines choose their comparator (held_out/2), in words.
-define(HELD_OUT, "Each round is compared with the mode that was best in the other rounds, so "
                  "one lucky round of one mode does not decide; the line names the mode best "
                  "over all of them.").

%% @doc The targets that the measured cells allow to judge.
-spec targets([map()]) -> [map()].
targets(Cells) ->
    Ratio = [{<<"pipelined, one connection: sluice/C">>, pipeline, 0.95},
             {<<"lock-step on one core: sluice/C">>, lockstep, 0.95},
             {<<"200 connections: sluice/C">>, conns200, 0.85},
             {<<"connection rate: sluice/C">>, connrate, 0.5},
             {<<"TLS lock-step: sluice/C+OpenSSL">>, 'tls-lockstep', 0.8},
             {<<"TLS pipelined: sluice/C+OpenSSL">>, 'tls-pipeline', 0.5},
             {<<"TLS handshakes: sluice/C+OpenSSL">>, 'tls-handshakes', 0.5}],
    [ratio_target(Name, Sc, Min, C) || {Name, Sc, Min} <- Ratio,
                                       C <- [find(Sc, sluice, Cells)], C =/= none]
        ++ mode_targets(Cells)
        ++ peer_targets(Cells)
        ++ backend_targets(Cells).

ratio_target(Name, Sc, Min, #{vs_c := VsC}) ->
    target(#{name => Name, scenario => Sc, server => sluice, against => c,
             meaning => meaning(Sc)}, VsC, Min).

target(T, Summary, Threshold) ->
    V = maps:get(median, Summary),
    T#{measure => ratio, threshold => Threshold, value => V, rule => <<">=">>,
       spread => spread(Summary),
       wide_spread => sluice_bench_stats:wide(Summary),
       pass => if is_number(V) -> V >= Threshold; true -> null end}.

spread(#{min := Min, max := Max}) when is_number(Min) -> #{min => Min, max => Max};
spread(_) -> null.

%% Issue 16 items 2 and 4: the defaults within 5% of the best active mode
%% on every scenario that measured the modes, by per-round ratios to C,
%% not by absolute figures across cells measured minutes apart. Per round:
%% sluice's ratio to C over that of the mode best in the other rounds
%% (held_out/2; the flood's ratio to C is by server CPU per message). The
%% detail beside the line lists every mode's median ratio to C, and the
%% line names the mode best over all rounds.
mode_targets(Cells) ->
    [T || Sc <- sluice_bench_matrix:scenarios(), T <- mode_target(Sc, Cells)].

mode_target(Sc, Cells) ->
    Modes = [C || #{scenario := S, server := Sv, vs_c := #{median := M}} = C <- Cells,
                  S =:= Sc, lists:prefix("sluice-active-", atom_to_list(Sv)), is_number(M)],
    case {find(Sc, sluice, Cells), Modes} of
        {none, _} -> [];
        {_, []} -> [];
        {Def, _} ->
            #{server := BestSv} = best(Modes, all),
            {CellKey, Measure} = mode_measure(Sc),
            Detail = [{Sv, maps:get(median, maps:get(CellKey, C))}
                      || #{server := Sv} = C <- [Def | Modes]],
            [target(#{name => iolist_to_binary(
                                 [atom_to_list(Sc), ": sluice defaults / best active mode (",
                                  atom_to_list(BestSv), ")", Measure]),
                      scenario => Sc, server => sluice, against => BestSv,
                      compared => [atom_to_binary(S, utf8) || #{server := S} <- Modes],
                      modes => maps:from_list(Detail),
                      meaning => meaning({modes, Sc})},
                    sluice_bench_stats:summary(held_out(Def, Modes)), 0.95)]
    end.

%% Per round of Def, its vs C over that of the mode with the highest median
%% over the other rounds (over all of them when there is one round). The
%% best of six cells chosen by the rounds it is then judged on is biased
%% upward by their noise: a default as fast as every mode would fall below
%% it in most runs (2026-11-25 03:35: 0.946 chosen in-sample against 1.03
%% held out, the rounds' ratios to C moving by 10% between modes).
held_out(#{per_round := DefRounds}, Modes) ->
    Rounds = [Rd || #{round := Rd} <- DefRounds],
    [X / Y || #{round := Rd, vs_c := X} <- DefRounds, is_number(X),
              #{per_round := B} <- [best(Modes, others(Rd, Rounds))],
              #{round := BRd, vs_c := Y} <- B, BRd =:= Rd, is_number(Y), Y /= 0].

others(Rd, Rounds) ->
    case Rounds -- [Rd] of
        [] -> Rounds;
        Other -> Other
    end.

%% The cell with the highest median vs C over Rounds (`all': every round).
best(Cells, Rounds) ->
    Median = fun(#{per_round := PR}) ->
                     M = sluice_bench_stats:median([V || #{round := Rd, vs_c := V} <- PR,
                                                         Rounds =:= all orelse
                                                             lists:member(Rd, Rounds),
                                                         is_number(V)]),
                     case M of null -> -1; _ -> M end
             end,
    hd(lists:sort(fun(A, B) -> Median(A) >= Median(B) end, Cells)).

%% Which of a cell's ratios to C the detail lists, and how the line says
%% what is compared.
mode_measure(flood) -> {cpu_vs_c, ", server CPU per message vs C"};
mode_measure(_) -> {vs_c, ", rate vs C"}.

%% Issue 16 item 1: sluice's defaults at least as fast as the best peer.
peer_targets(Cells) ->
    Peers = sluice_bench_matrix:peers(),
    [target(#{name => iolist_to_binary([atom_to_list(Sc), ": sluice / best peer (",
                                        atom_to_list(P), ")"]),
              scenario => Sc, server => sluice, against => P,
              meaning => meaning({peer, Sc})},
            sluice_bench_stats:summary(per_round(Def, find(Sc, P, Cells))), 1.0)
     || Sc <- sluice_bench_matrix:scenarios(),
        Def <- [find(Sc, sluice, Cells)], Def =/= none,
        #{best_peer := P} <- [Def],
        lists:member(P, Peers)].

%% Issue 5: the socket backend at least matches the inet one (within 5%),
%% by the median over rounds of socket rate / inet rate in the same round.
backend_targets(Cells) ->
    [backend_target(Sc, Inet, Sock)
     || Sc <- [pipeline, lockstep],
        Inet <- [find(Sc, sluice, Cells)], Inet =/= none,
        Sock <- [find(Sc, 'sluice-socket', Cells)], Sock =/= none].

backend_target(Sc, #{per_round := InetRounds}, #{per_round := SockRounds}) ->
    Inet = maps:from_list([{Rd, R} || #{round := Rd, rate := R} <- InetRounds]),
    Pairs = [{R, maps:get(Rd, Inet, null)} || #{round := Rd, rate := R} <- SockRounds],
    S = sluice_bench_stats:summary(sluice_bench_stats:ratios([A || {A, _} <- Pairs],
                                                             [B || {_, B} <- Pairs])),
    target(#{name => iolist_to_binary([atom_to_list(Sc), ": socket backend / inet backend"]),
             scenario => Sc, server => 'sluice-socket', against => sluice,
             meaning => meaning({backend, Sc})}, S, 0.95).

%% Per round, A's vs C over B's.
per_round(#{per_round := A}, #{per_round := B}) ->
    Bs = maps:from_list([{Rd, V} || #{round := Rd, vs_c := V} <- B]),
    [X / Y || #{round := Rd, vs_c := X} <- A, Y <- [maps:get(Rd, Bs, null)],
              is_number(X), is_number(Y), Y /= 0].

find(Sc, Sv, Cells) ->
    case [C || #{scenario := S, server := V} = C <- Cells, S =:= Sc, V =:= Sv] of
        [C | _] -> C;
        [] -> none
    end.

%% What each target means for someone choosing a server (no figures here:
%% the report prints them beside it).
meaning(pipeline) ->
    <<"A client that pipelines many small frames on one connection gets this share of the "
      "C server's throughput from sluice's defaults. The gap is the VM's cost of walking the "
      "frames (bench/README.md, \"Defaults\"), paid by any Erlang server; the peer rows show "
      "whether sluice adds to it.">>;
meaning(lockstep) ->
    <<"One request in flight at a time, as an RPC client waits for each answer: the round "
      "trips per second sluice gives relative to a C server on the same core. Below 1.0 is "
      "latency a user's client sees on every call.">>;
meaning(conns200) ->
    <<"Many busy connections at once, each with up to 1,000 frames in flight: what one core "
      "of sluice serves relative to one core of C when the load is spread over connections.">>;
meaning(connrate) ->
    <<"How fast new connections are accepted and answered (clients reconnecting after a "
      "deploy): at 0.5 a burst of reconnects takes at most twice as long as with C.">>;
meaning('tls-lockstep') ->
    <<"Request-response over TLS: round trips per second relative to a C server with OpenSSL "
      "on the same core. OTP's ssl passes every record through its own processes, so any "
      "Erlang server pays the same (docs/backends.md, \"TLS\").">>;
meaning('tls-pipeline') ->
    <<"Pipelined frames over TLS on one connection, relative to C with OpenSSL: the share of "
      "the decryption and framing throughput an Erlang server on OTP's ssl gets.">>;
meaning('tls-handshakes') ->
    <<"Full TLS handshakes per second (clients reconnecting without resumption), relative to "
      "C with OpenSSL: at 0.5 a reconnect wave over TLS takes at most twice as long.">>;
meaning({modes, flood}) ->
    <<"Clients that write without waiting for answers: sluice's default delivery mode costs "
      "no more server CPU per message than the best mode a user could pick by hand, so "
      "there is no reason to change the active option for throughput. ", ?HELD_OUT>>;
meaning({modes, _}) ->
    <<"A client pipelining small frames: sluice's default delivery mode moves them as fast "
      "as the best mode a user could pick by hand, so there is no reason to change the "
      "active option for throughput. ", ?HELD_OUT>>;
meaning({peer, Sc}) ->
    iolist_to_binary(
      [peer_case(Sc), ", sluice's defaults against the best server a careful engineer writes "
       "on gen_tcp alone (without idle timeouts, limits, draining or counters): at 1.0 or "
       "above, taking the library costs nothing here; below, this is what its features cost."]);
meaning({backend, pipeline}) ->
    <<"Above 1.0, the socket backend moves pipelined frames faster than inet. inet stays the "
      "default because socket must not lose elsewhere: see the lock-step line and the memory "
      "per idle connection (bench/README.md, \"The socket backend\"); pick socket for "
      "pipelining-heavy listeners.">>;
meaning({backend, lockstep}) ->
    <<"Below 1.0, a request-response client waits longer per call on the socket backend (the "
      "VM's poll thread wakes the scheduler through a pipe): the reason inet stays the "
      "default.">>.

peer_case(lockstep) -> "For one request at a time (a user's round-trip latency)";
peer_case(pipeline) -> "For a client pipelining small frames on one connection";
peer_case('pipeline-counted') -> "For a client pipelining small frames, counted acks";
peer_case(conns200) -> "With many busy connections";
peer_case(flood) -> "For clients writing without waiting, by server CPU per message";
peer_case(paced) -> "For many clients sending small requests at a load the server keeps up with, "
                    "by server CPU per request";
peer_case(connrate) -> "For new connections";
peer_case(storm) -> "In a reconnect storm".

%% @doc Cells whose per-round ratio to C spreads wider than the limit.
-spec warnings([map()]) -> [map()].
warnings(Cells) ->
    [#{scenario => Sc, server => Sv, vs_c => VsC, spread_pct => P}
     || #{scenario := Sc, server := Sv, vs_c := VsC, wide_spread := true,
          spread_pct := P} <- Cells].

%% @doc The targets as `PASS'/`FAIL' lines with their spread, then the
%% spread warnings.
-spec text([map()], [map()]) -> iolist().
text(Targets, Warnings) ->
    [case Targets of
         [] -> [];
         _ ->
             ["speed targets (median of per-round ratios; rounds: their min-max):\n",
              [[io_lib:format("  ~s  ~s: ~s ~s ~s  (rounds ~s~s)~n",
                              [case P of true -> "PASS"; false -> "FAIL"; null -> "n/a " end,
                               Name, fmt_value(V, T), Rule, fmt(T), rounds(S),
                               case W of true -> ", WIDE"; false -> "" end]),
                vs_c(Tg)]
               || #{pass := P, name := Name, value := V, rule := Rule, threshold := T,
                    spread := S, wide_spread := W} = Tg <- Targets]]
     end,
     case Warnings of
         [] -> [];
         _ ->
             [io_lib:format("~nspread warnings (per-round ratio to C spans more than ~s of its "
                            "median: read with care, or rerun with more --rounds):~n",
                            [sluice_bench_report:fmt_pct(sluice_bench_stats:wide_limit())]),
              [io_lib:format("  WARN  ~s/~s: rounds ~s, median ~s (~s)~n",
                             [Sc, Sv, sluice_bench_report:fmt_spread(VsC),
                              fmt(maps:get(median, VsC)), sluice_bench_report:fmt_pct(P)])
               || #{scenario := Sc, server := Sv, vs_c := VsC, spread_pct := P} <- Warnings]]
     end].

rounds(null) -> "-";
rounds(#{min := Min, max := Max}) -> [fmt(Min), "-", fmt(Max)].

fmt(V) -> sluice_bench_report:fmt_ratio(V).

%% @doc A target's value beside its threshold: as every ratio, unless it
%% would print as the threshold while falling on one side of it (0.996
%% against 1.00 read "FAIL 1.00 >= 1.00"): then with three decimals.
-spec fmt_value(number() | null, number()) -> string().
fmt_value(V, T) when is_number(V), V /= T ->
    case fmt(V) =:= fmt(T) of
        true -> lists:flatten(io_lib:format("~.3f", [float(V)]));
        false -> fmt(V)
    end;
fmt_value(V, _T) ->
    fmt(V).

%% The mode lines' detail: each mode's median ratio to C, best first
%% (the flood's server CPU per message relative to C: lowest first).
vs_c(Target) ->
    case mode_detail(Target) of
        none -> [];
        {What, Known} -> ["        (", What, ": ",
                          lists:join(", ", [[atom_to_list(Sv), " ", fmt(R)] || {Sv, R} <- Known]),
                          ")\n"]
    end.

%% @doc A mode line's detail for the reports: what it lists and each
%% mode's figure, best first; `none' for the other targets.
-spec mode_detail(map()) -> {string(), [{atom(), number()}]} | none.
mode_detail(#{scenario := flood, modes := CpuVsC}) ->
    {"server CPU per message relative to C", lists:keysort(2, known(CpuVsC))};
mode_detail(#{modes := VsC}) ->
    {"rate relative to C", lists:reverse(lists:keysort(2, known(VsC)))};
mode_detail(_) ->
    none.

known(VsC) -> [{Sv, R} || {Sv, R} <- maps:to_list(VsC), is_number(R)].
