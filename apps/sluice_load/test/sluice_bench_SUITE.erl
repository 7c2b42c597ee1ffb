%% Tests of `bin/sluice bench' (sluice_cmd_bench, sluice_bench*): the
%% statistics, the JSON codec, the reports built from a small fake result set, option validation,
%% and real cells run end to end on loopback. The real cells need the C
%% binaries (`make') and taskset; they take a few seconds.
-module(sluice_bench_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_group/2, end_per_group/2]).
-export([median_and_spread_of_known_inputs/1,
         paired_ratios_skip_missing_runs/1,
         interpolation_reads_a_counter_between_samples/1,
         json_round_trips/1,
         json_decodes_engine_output/1,
         cells_pair_each_run_with_its_c_run/1,
         targets_pass_and_fail/1,
         text_table_is_aligned/1,
         json_report_decodes/1,
         html_is_self_contained/1,
         bad_options_exit_2/1,
         help_exits_0/1,
         c_cell_has_a_positive_rate/1,
         seed_cell_against_c_has_ratio_and_cpu/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, stats}, {group, json}, {group, report}, {group, cli}, {group, real}].

groups() ->
    [{stats, [], [median_and_spread_of_known_inputs, paired_ratios_skip_missing_runs,
                  interpolation_reads_a_counter_between_samples]},
     {json, [], [json_round_trips, json_decodes_engine_output]},
     {report, [], [cells_pair_each_run_with_its_c_run, targets_pass_and_fail,
                   text_table_is_aligned, json_report_decodes, html_is_self_contained]},
     {cli, [], [bad_options_exit_2, help_exits_0]},
     {real, [], [c_cell_has_a_positive_rate, seed_cell_against_c_has_ratio_and_cpu]}].

init_per_group(real, Config) ->
    case os:find_executable("taskset") of
        false -> {skip, "taskset not installed (util-linux)"};
        _ -> Config
    end;
init_per_group(_, Config) ->
    Config.

end_per_group(_, _Config) ->
    ok.

%%% ------------------------------------------------------------------
%%% stats
%%% ------------------------------------------------------------------

%% Median of odd and even counts, spread, and the summary that skips
%% failed runs (null).
median_and_spread_of_known_inputs(_) ->
    ?assertEqual(2, sluice_bench_stats:median([3, 1, 2])),
    ?assertEqual(2.5, sluice_bench_stats:median([4, 1, 3, 2])),
    ?assertEqual(7, sluice_bench_stats:median([7])),
    ?assertEqual(null, sluice_bench_stats:median([])),
    ?assertEqual({1, 9}, sluice_bench_stats:spread([5, 9, 1])),
    ?assertEqual(null, sluice_bench_stats:spread([])),
    ?assertEqual(#{n => 2, median => 15.0, min => 10, max => 20},
                 sluice_bench_stats:summary([10, null, 20])),
    ?assertEqual(#{n => 0, median => null, min => null, max => null},
                 sluice_bench_stats:summary([null])).

%% Ratios are taken per pair; a pair with a missing side or a zero
%% reference drops out instead of poisoning the median.
paired_ratios_skip_missing_runs(_) ->
    ?assertEqual([0.5, 2.0], sluice_bench_stats:ratios([1, null, 4, 3], [2, 5, 2, 0])).

%% The CPU counter is read at the window's edges by linear interpolation,
%% exactly at a sample, and not at all outside the samples.
interpolation_reads_a_counter_between_samples(_) ->
    S = [{200, 30}, {0, 10}, {100, 20}],
    ?assertEqual({ok, 15.0}, sluice_bench_stats:interpolate(50, S)),
    ?assertEqual({ok, 20.0}, sluice_bench_stats:interpolate(100, S)),
    ?assertEqual({ok, 27.5}, sluice_bench_stats:interpolate(175, S)),
    ?assertEqual(error, sluice_bench_stats:interpolate(-1, S)),
    ?assertEqual(error, sluice_bench_stats:interpolate(201, S)).

%%% ------------------------------------------------------------------
%%% json
%%% ------------------------------------------------------------------

%% What the encoder writes the decoder reads back (keys become binaries).
json_round_trips(_) ->
    T = #{a => 1, <<"b">> => [1.5, -2, <<"x\"y\\z\n\t">>, true, false, null],
          "c" => #{d => [], e => #{}}, f => some_atom, g => 3.0e-7, h => 12.0},
    {ok, D} = sluice_json:decode(sluice_json:encode(T)),
    ?assertEqual(#{<<"a">> => 1, <<"b">> => [1.5, -2, <<"x\"y\\z\n\t">>, true, false, null],
                   <<"c">> => #{<<"d">> => [], <<"e">> => #{}}, <<"f">> => <<"some_atom">>,
                   <<"g">> => 3.0e-7, <<"h">> => 12}, D),
    ?assertMatch({error, _}, sluice_json:decode(<<"{\"a\":1">>)),
    ?assertMatch({error, _}, sluice_json:decode(<<"[1] x">>)).

%% The shapes the load engine writes: exponents, \u escapes, nesting.
json_decodes_engine_output(_) ->
    Text = <<" {\"scenario\":\"pipeline\",\"rate\":83162834.500,\"messages\":166325669,"
             "\"latency_us\":{\"p50\":3104.767,\"max\":1E3},\"failures\":{},"
             "\"s\":\"a\\u0041\\/\",\"latency_hist\":{\"buckets\":[[1,2],[3,4]]}}\n">>,
    {ok, M} = sluice_json:decode(Text),
    ?assertEqual(83162834.5, maps:get(<<"rate">>, M)),
    ?assertEqual(166325669, maps:get(<<"messages">>, M)),
    ?assertEqual(1000.0, maps:get(<<"max">>, maps:get(<<"latency_us">>, M))),
    ?assertEqual(<<"aA/">>, maps:get(<<"s">>, M)),
    ?assertEqual([[1, 2], [3, 4]], maps:get(<<"buckets">>, maps:get(<<"latency_hist">>, M))).

%%% ------------------------------------------------------------------
%%% report, from a fake result set
%%% ------------------------------------------------------------------

%% Three rounds of: pipeline sluice/C, lockstep sluice/C, flood with two
%% active modes and their C runs (one of them failed in round 2).
fake_cells() ->
    [{pipeline, sluice}, {lockstep, sluice}, {flood, sluice},
     {flood, 'sluice-active-once'}, {flood, 'sluice-active-true'}].

fake_runs() ->
    Fig = #{{pipeline, sluice} => {[90, 100, 110], [100, 100, 100], [10, 11, 12]},
            {pipeline, c} => {[100, 100, 100], [], [5, 5, 5]},
            {lockstep, sluice} => {[45, 46, 47], [], [900, 1000, 1100]},
            {lockstep, c} => {[50, 50, 50], [], [800, 800, 800]},
            {flood, sluice} => {[180, 190, 200], [], [300, 310, 320]},
            {flood, 'sluice-active-once'} => {[170, 175, 180], [], [350, 360, 370]},
            {flood, 'sluice-active-true'} => {[160, 165, 170], [], [290, 295, 300]},
            {flood, c} => {[200, 200, 200], [], [100, 100, 100]}},
    lists:append(
      [[run(Rd, Sc, Sv, subject, Sv, Fig), run(Rd, Sc, c, reference, Sv, Fig)]
       || Rd <- [1, 2, 3], {Sc, Sv} <- fake_cells()]).

run(Rd, Sc, Server, Role, Pair, Fig) ->
    {Rates, _, Ns} = maps:get({Sc, Server}, Fig),
    Failed = Sc =:= flood andalso Server =:= 'sluice-active-once' andalso Rd =:= 2,
    Base = #{round => Rd, scenario => Sc, server => Server, role => Role, pair => Pair,
             ack => sluice_bench_matrix:ack(Sc, Pair), wall_s => 2.5,
             server_cmd => [<<"taskset">>, <<"-c">>, <<"0">>]},
    case Failed of
        true -> Base#{ok => false, error => <<"engine: exit 1, 3 errors">>};
        false -> Base#{ok => true, rate => lists:nth(Rd, Rates) * 1.0e6,
                       messages => 1000, errors => 0, server_ns_per_msg => lists:nth(Rd, Ns),
                       latency_us => #{<<"p50">> => 3.5}}
    end.

fake_doc() ->
    Cells = sluice_bench_report:cells(fake_cells(), fake_runs()),
    #{tool => <<"sluice bench">>, date => <<"2025-01-01T00:00:00Z">>,
      command => <<"bin/sluice bench --fake">>,
      machine => #{nproc => 2, cpu_model => <<"Test CPU <model> & co">>, otp_release => <<"25">>,
                   erts_version => <<"13">>, kernel => <<"linux 6">>, clk_tck => 100,
                   open_file_limit => 20000, erl_flags => <<>>},
      settings => #{rounds => 3, warmup_s => 1, duration_s => 1.25},
      runs => fake_runs(), cells => Cells, targets => sluice_bench_report:targets(Cells)}.

%% Median, spread, paired C median and median of per-round ratios; a
%% failed run leaves its round out of the cell.
cells_pair_each_run_with_its_c_run(_) ->
    [P, L, F, FOnce, _FTrue] = sluice_bench_report:cells(fake_cells(), fake_runs()),
    ?assertMatch(#{scenario := pipeline, server := sluice, rounds := 3, failed_runs := 0}, P),
    ?assertEqual(#{n => 3, median => 100.0e6, min => 90.0e6, max => 110.0e6}, maps:get(rate, P)),
    ?assertEqual(100.0e6, maps:get(median, maps:get(c_rate, P))),
    ?assertEqual(1.0, maps:get(median, maps:get(ratio, P))),
    ?assertEqual(0.92, maps:get(median, maps:get(ratio, L))),
    ?assertEqual(11, maps:get(median, maps:get(ns_per_msg, P))),
    ?assertEqual(5, maps:get(median, maps:get(c_ns_per_msg, P))),
    ?assertEqual(310, maps:get(median, maps:get(ns_per_msg, F))),
    ?assertMatch(#{failed_runs := 1, rate := #{n := 2, min := 170.0e6, max := 180.0e6}}, FOnce),
    ?assertEqual(2, maps:get(n, maps:get(ratio, FOnce))).

%% pipeline 1.0 >= 0.95 passes, lock-step 0.92 fails, and the flood's
%% defaults (310 ns) lose to active,true (295 ns); no line for the
%% scenarios not measured.
targets_pass_and_fail(_) ->
    #{targets := Ts} = fake_doc(),
    ?assertEqual([{pipeline, ratio, true}, {lockstep, ratio, false}, {flood, ns_per_msg, false}],
                 [{Sc, M, P} || #{scenario := Sc, measure := M, pass := P} <- Ts]),
    [_, _, #{threshold := Best, value := V}] = Ts,
    ?assertEqual({295, 310}, {Best, V}),
    Text = lists:flatten(io_lib:format("~s", [sluice_bench_report:targets_text(Ts)])),
    ?assertMatch({match, _}, re:run(Text, "PASS  pipelined")),
    ?assertMatch({match, _}, re:run(Text, "FAIL  lock-step.*0.92 >= 0.95")),
    ?assertMatch({match, _}, re:run(Text, "FAIL  flood.*active-true.*310 <= 295")),
    ?assertMatch({match, _}, re:run(Text, "relative to C in the same round: sluice-active-true 2.95, "
                                          "sluice 3.10, sluice-active-once 3.60")).

%% Every line of the table is as wide as the header's columns: each column
%% starts at the same offset on every line.
text_table_is_aligned(_) ->
    #{cells := Cells} = fake_doc(),
    Lines = string:split(string:trim(lists:flatten(io_lib:format("~ts",
                                         [sluice_bench_report:table(Cells)]))), "\n", all),
    ?assertEqual(2 + length(Cells), length(Lines)),
    [Header, Rule | Rows] = Lines,
    ?assertMatch({match, _}, re:run(Header, "^scenario +server +median rate +spread")),
    ?assertMatch(nomatch, re:run(Rule, "[^- ]")),
    %% the ratio column ends at the same place on every row
    RatioEnd = string:str(Header, "ratio") + length("ratio") - 1,
    [?assertEqual($\s, lists:nth(RatioEnd + 1, R)) || R <- Rows],
    ?assertMatch({match, _}, re:run(hd(Rows), "pipeline +sluice +100M msg/s +90.0M-110M +100M msg/s +1.00 +11.0 +5.0")),
    ?assertMatch({match, _}, re:run(lists:nth(4, Rows), "sluice-active-once \\(1 failed\\)")).

%% The JSON file form of the fake result decodes, with the raw runs and the
%% per-cell figures.
json_report_decodes(_) ->
    {ok, D} = sluice_json:decode(sluice_json:encode(fake_doc())),
    ?assertMatch(#{<<"machine">> := #{<<"nproc">> := 2}, <<"date">> := <<"2025", _/binary>>}, D),
    ?assertEqual(30, length(maps:get(<<"runs">>, D))),
    [P | _] = maps:get(<<"cells">>, D),
    ?assertMatch(#{<<"scenario">> := <<"pipeline">>, <<"server">> := <<"sluice">>,
                   <<"ratio">> := #{<<"median">> := 1}, <<"per_round">> := [_, _, _]}, P),
    ?assertEqual(3, length(maps:get(<<"targets">>, D))).

%% The page stands alone: no script, nothing fetched (the only URL is the
%% SVG namespace), one chart per scenario plus the flood's ns/msg chart,
%% and the machine's text escaped.
html_is_self_contained(_) ->
    Html = iolist_to_binary(sluice_bench_html:page(fake_doc())),
    ?assertEqual(nomatch, binary:match(Html, [<<"<script">>, <<"<SCRIPT">>, <<"https://">>])),
    Urls = [U || [U] <- element(2, re:run(Html, "(http://[^\"]*)", [global, {capture, all_but_first, binary}]))],
    ?assertEqual([<<"http://www.w3.org/2000/svg">>], lists:usort(Urls)),
    ?assertEqual(nomatch, binary:match(Html, [<<" src=">>, <<"<link">>, <<"@import">>, <<"url(">>])),
    ?assertEqual(4, length(binary:matches(Html, <<"<svg ">>))),
    ?assertMatch({_, _}, binary:match(Html, <<"Test CPU &lt;model&gt; &amp; co">>)),
    ?assertMatch({_, _}, binary:match(Html, <<"<title>sluice benchmark">>)),
    ?assertMatch({_, _}, binary:match(Html, <<"FAIL">>)),
    ?assertMatch({_, _}, binary:match(Html, <<"1.00&#215; C">>)),
    ?assertMatch({_, _}, binary:match(Html, <<"relative to C in the same round">>)).

%%% ------------------------------------------------------------------
%%% cli
%%% ------------------------------------------------------------------

%% Bad usage is caught before anything runs, with exit status 2.
bad_options_exit_2(_) ->
    [?assertMatch({error, 2, _}, sluice_cmd_bench:run(Args))
     || Args <- [["--bogus"], ["--rounds", "0"], ["--rounds", "x"], ["--scenario", "nope"],
                 ["--server", "nope"], ["--duration", "0"], ["--duration", "abc"],
                 ["--warmup", "-1"], ["--scenario", "flood", "--server", "seed"],
                 ["--scenario", "connrate", "--server", "seed"], ["extra"],
                 ["--server", "seed", "--scenario"]]].

help_exits_0(_) ->
    ?assertEqual(0, sluice_cmd_bench:run(["--help"])).

%%% ------------------------------------------------------------------
%%% real cells
%%% ------------------------------------------------------------------

%% `--scenario pipeline --server c --rounds 1 --duration 1': the C server
%% alone, a positive rate, CPU per message, and both files written.
c_cell_has_a_positive_rate(Config) ->
    {ok, Doc} = real([{pipeline, c}], Config),
    #{cells := [Cell], runs := [Run], files := [Json, Html]} = Doc,
    ?assertMatch(#{ok := true, server := c, role := subject}, Run),
    Rate = maps:get(median, maps:get(rate, Cell)),
    ct:pal("pipeline/c: ~p msg/s, ~p ns/msg", [Rate, maps:get(server_ns_per_msg, Run)]),
    ?assert(Rate > 0),
    ?assert(maps:get(server_ns_per_msg, Run) > 0),
    {ok, Text} = file:read_file(Json),
    ?assertMatch({ok, #{<<"cells">> := [_]}}, sluice_json:decode(Text)),
    ?assert(filelib:is_regular(Html)).

%% The seed server (an Erlang VM of its own) against C, lock-step on one
%% core: both runs succeed, the cell has a ratio, and the server's CPU was
%% read from its process tree.
seed_cell_against_c_has_ratio_and_cpu(Config) ->
    {ok, #{cells := [Cell], runs := Runs}} = real([{lockstep, seed}], Config),
    ?assertMatch([#{ok := true, server := seed}, #{ok := true, server := c}], Runs),
    Ratio = maps:get(median, maps:get(ratio, Cell)),
    ct:pal("lockstep/seed: ratio ~p, ~p ns/msg", [Ratio, maps:get(median, maps:get(ns_per_msg, Cell))]),
    ?assert(Ratio > 0),
    ?assert(maps:get(median, maps:get(ns_per_msg, Cell)) > 0).

real(Cells, Config) ->
    sluice_bench:bench(#{cells => Cells, rounds => 1, warmup => 0.3, duration => 1,
                         quick => false, out => ?config(priv_dir, Config),
                         command => <<"sluice_bench_SUITE">>}).
