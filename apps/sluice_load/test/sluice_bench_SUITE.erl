%% Tests of `bin/sluice bench' (sluice_cmd_bench, sluice_bench*): the
%% statistics, the JSON codec, option validation, and real cells run end
%% to end on loopback. The real cells need the C binaries (`make') and
%% taskset; they take a few seconds. The order of the runs and the reports
%% are sluice_bench_report_SUITE's, the peer servers' protocols
%% sluice_peer_SUITE's.
-module(sluice_bench_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_group/2, end_per_group/2]).
-export([median_and_spread_of_known_inputs/1,
         paired_ratios_skip_missing_runs/1,
         interpolation_reads_a_counter_between_samples/1,
         json_round_trips/1,
         json_decodes_engine_output/1,
         bad_options_exit_2/1,
         help_exits_0/1,
         list_shows_the_runs_of_the_cells_picked/1,
         unwritable_out_fails_before_any_run/1,
         c_cell_has_a_positive_rate/1,
         seed_cell_against_c_has_ratio_and_cpu/1,
         peer_cells_share_a_c_run/1,
         ab_script_compares_servers_by_rate_and_cpu/1,
         sigterm_reports_the_runs_done_as_interrupted/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, stats}, {group, json}, {group, cli}, {group, real}].

groups() ->
    [{stats, [], [median_and_spread_of_known_inputs, paired_ratios_skip_missing_runs,
                  interpolation_reads_a_counter_between_samples]},
     {json, [], [json_round_trips, json_decodes_engine_output]},
     {cli, [], [bad_options_exit_2, help_exits_0, list_shows_the_runs_of_the_cells_picked,
                unwritable_out_fails_before_any_run]},
     {real, [], [c_cell_has_a_positive_rate, seed_cell_against_c_has_ratio_and_cpu,
                 peer_cells_share_a_c_run, ab_script_compares_servers_by_rate_and_cpu,
                 sigterm_reports_the_runs_done_as_interrupted]}].

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
%%% cli
%%% ------------------------------------------------------------------

%% Bad usage is caught before anything runs, with exit status 2.
bad_options_exit_2(_) ->
    [?assertMatch({error, 2, _}, sluice_cmd_bench:run(Args))
     || Args <- [["--bogus"], ["--rounds", "0"], ["--rounds", "x"], ["--scenario", "nope"],
                 ["--server", "nope"], ["--duration", "0"], ["--duration", "abc"],
                 ["--warmup", "-1"], ["--scenario", "flood", "--server", "seed"],
                 ["--scenario", "connrate", "--server", "seed"], ["extra"],
                 ["--server", "seed", "--scenario"],
                 %% twice: the first used to be dropped in silence
                 ["--scenario", "flood", "--scenario", "lockstep"],
                 ["--server", "sluice", "--server=c"],
                 ["--scenario", "flood,nope"], ["--scenario", "flood,"],
                 ["--scenario", "connrate,flood", "--server", "seed"]]].

help_exits_0(_) ->
    ?assertEqual(0, sluice_cmd_bench:run(["--help"])).

%% --list prints the runs and runs none: comma lists pick cells, a scenario
%% alone its cells of the matrix, scenarios and servers together every
%% pair (a pair the server cannot run left out), each with its C run.
list_shows_the_runs_of_the_cells_picked(_) ->
    List = fun(Args) ->
                   {0, Out} = stdout(fun() -> sluice_cmd_bench:run(["--list" | Args]) end),
                   [list_to_tuple(string:lexemes(L, " ")) || L <- string:lexemes(Out, "\n")]
           end,
    %% (the seed speaks no echo: flood/seed left out)
    Pairs = List(["--scenario", "lockstep,flood", "--server", "handwritten,sluice,seed",
                  "--rounds", "1"]),
    ?assertEqual(lists:sort([{"1", "lockstep", "handwritten"}, {"1", "lockstep", "sluice"},
                             {"1", "lockstep", "seed"}, {"1", "flood", "handwritten"},
                             {"1", "flood", "sluice"}, {"1", "lockstep", "c", "for", "handwritten,sluice"},
                             {"1", "lockstep", "c", "for", "seed"},
                             {"1", "flood", "c", "for", "handwritten,sluice"}]),
                 lists:sort(Pairs)),
    %% A scenario alone: the matrix's cells of it, every round.
    Paced = List(["--scenario", "paced", "--rounds", "2"]),
    Matrix = [Sv || {paced, Sv} <- sluice_bench_matrix:default()],
    Names = lists:sort([atom_to_list(S) || S <- Matrix]),
    ?assertEqual(lists:sort(Names ++ Names), lists:sort([Sv || {_, "paced", Sv} <- Paced])),
    [?assertEqual(Names, lists:sort(lists:append([string:lexemes(For, ",")
                                                  || {Rd, "paced", "c", "for", For} <- Paced, Rd =:= R])))
     || R <- ["1", "2"]],
    %% Nothing ran: no results written.
    ?assertEqual(0, sluice_cmd_bench:run(["--list", "--scenario", "flood", "--server", "c",
                                          "--out", "/nonexistent/dir"])).

%% What `Fun' writes on standard output, and what it returns.
%% A results directory that cannot be written is found before the runs
%% (the whole benchmark used to run, then lose its JSON and HTML): one
%% line, and no run started.
unwritable_out_fails_before_any_run(Config) ->
    File = filename:join(?config(priv_dir, Config), "a_file"),
    ok = file:write_file(File, <<>>),
    T0 = erlang:monotonic_time(millisecond),
    R = sluice_bench:bench(#{cells => [{pipeline, c}], rounds => 1, warmup => 0.3, duration => 1,
                             quick => false, out => filename:join(File, "results"),
                             command => <<"sluice_bench_SUITE">>}),
    ?assertMatch({error, _}, R),
    {error, Msg} = R,
    ct:log("~ts", [Msg]),
    ?assertNotEqual(nomatch, string:find(lists:flatten(Msg), "cannot create")),
    ?assert(erlang:monotonic_time(millisecond) - T0 < 1000).

stdout(Fun) ->
    Collector = spawn_link(fun() -> collect([]) end),
    Old = group_leader(),
    group_leader(Collector, self()),
    Result = try Fun() after group_leader(Old, self()) end,
    Collector ! {done, self()},
    receive {output, Out} -> {Result, Out} end.

collect(Acc) ->
    receive
        {io_request, From, Ref, Req} ->
            From ! {io_reply, Ref, ok},
            collect([chars(Req) | Acc]);
        {done, Pid} ->
            Pid ! {output, unicode:characters_to_list(lists:reverse(Acc))}
    end.

chars({put_chars, _Enc, Chars}) -> Chars;
chars({put_chars, _Enc, M, F, A}) -> apply(M, F, A);
chars(_) -> [].

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

%% Both peers in the VM the benchmark starts for them, pipelined around
%% one C run (the engine checks every ack): both succeed, both are paired
%% with that C run, and the report compares sluice's absence gracefully
%% (no sluice cell: no peer target).
peer_cells_share_a_c_run(Config) ->
    {ok, #{cells := Cells, runs := Runs, targets := Ts}} =
        real([{pipeline, handwritten}, {pipeline, 'gen_tcp-socket'}], Config),
    ?assertMatch([#{ok := true, server := handwritten},
                  #{ok := true, server := c, pairs := [handwritten, 'gen_tcp-socket']},
                  #{ok := true, server := 'gen_tcp-socket'}], Runs),
    [?assert(maps:get(median, maps:get(vs_c, C)) > 0) || C <- Cells],
    ct:pal("pipeline peers vs C: ~p", [[{S, maps:get(median, maps:get(vs_c, C))}
                                        || #{server := S} = C <- Cells]]),
    ?assertEqual([], Ts).

%% bench/ab.escript (by hand, for differences of a few percent): two
%% sluice servers on the flood, two short rounds: every round has a rate
%% and a CPU per message for both, the summary line compares them, and the
%% servers it started are gone (their sessions were killed). They run in
%% sessions of their own, out of this test's process tree, so they are
%% known by a variable of their environment that this run alone gives
%% them: a `pgrep -f' of their command line counted another run's servers
%% too (a helper's, CI's), as the decoy here, and waited them out.
ab_script_compares_servers_by_rate_and_cpu(_Config) ->
    {ok, Root} = sluice_load_test_lib:repo_root(),
    Serve = filename:join([Root, "bin", "sluice"]) ++ " serve --ip 127.0.0.1 --port 0 --protocol echo",
    Mark = "SLUICE_AB_SUITE=" ++ os:getpid() ++ "." ++ integer_to_list(erlang:unique_integer([positive])),
    Decoy = string:trim(os:cmd("setsid sh -c 'sleep 60; :' decoy --protocol echo --active 100 "
                               "</dev/null >/dev/null 2>&1 & echo $!")),
    try
        Out = os:cmd(lists:flatten(
                       io_lib:format("~s escript ~s 2 0.3 'a=~s' 'b=~s --active 100' -- "
                                     "--scenario flood --conns 2 --threads 1 2>&1",
                                     [Mark, filename:join([Root, "bench", "ab.escript"]), Serve, Serve]))),
        ct:log("~s", [Out]),
        Rounds = [L || L <- string:split(Out, "\n", all), string:prefix(L, "round ") =/= nomatch],
        ?assertEqual(2, length(Rounds), Out),
        [?assertMatch({match, [_, _, _, _]},
                      re:run(R, "a ([0-9.e+]+) \\(([0-9.e+]+) ns/msg\\)  b ([0-9.e+]+) \\(([0-9.e+]+) ns/msg",
                             [{capture, all_but_first, list}]), R)
         || R <- Rounds],
        ?assertMatch({match, _}, re:run(Out, "b/a: rate median [0-9.]+ .* CPU per message \\(a's / b's\\) median [0-9.]+")),
        ?assertEqual(ok, wait_for(fun() -> marked(Mark) =:= [] end, 50)),
        %% the decoy, outside the run, was there all along
        ?assertNotEqual("", os:cmd("pgrep -f 'protocol ech[o] --active 100'"))
    after
        os:cmd("kill -TERM -" ++ Decoy ++ " 2>/dev/null")
    end.

%% The processes whose environment has `Name=Value' (this user's: others'
%% environments cannot be read).
marked(Mark) ->
    M = list_to_binary(Mark),
    {ok, Names} = file:list_dir("/proc"),
    [N || N <- Names, lists:all(fun(C) -> C >= $0 andalso C =< $9 end, N),
          {ok, Env} <- [file:read_file(filename:join(["/proc", N, "environ"]))],
          lists:member(M, binary:split(Env, <<0>>, [global]))].

%% `bin/sluice bench' stopped by SIGTERM after its first run: exit 130,
%% the runs done written, and the output's last line, the JSON and the
%% page all say the benchmark was interrupted and after how many of its
%% runs (the table and page read as a complete benchmark before); every
%% process it started is gone.
sigterm_reports_the_runs_done_as_interrupted(Config0) ->
    Config = sluice_load_test_lib:start_reaper(Config0),
    try
        {ok, Root} = sluice_load_test_lib:repo_root(),
        Out = filename:join(?config(priv_dir, Config), "interrupted"),
        {Port, OsPid} = sluice_load_test_lib:run_lines(
                          Config, filename:join([Root, "bin", "sluice"]),
                          ["bench", "--scenario", "lockstep", "--server", "c", "--rounds", "5",
                           "--warmup", "0", "--duration", "0.5", "--out", Out]),
        {_, _} = sluice_load_test_lib:wait_line(Port, "^\\[1/5\\]", 20000),
        Tree = sluice_procfs:process_tree(OsPid),
        ok = sluice_load_test_lib:signal("TERM", OsPid),
        {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 20000),
        ct:log("~p~n~p", [Status, Lines]),
        ?assertEqual(130, Status),
        ?assertMatch({match, _}, re:run(lists:last(Lines), "; interrupted: [12] of 5 runs done$")),
        [Json] = filelib:wildcard(filename:join(Out, "*.json")),
        {ok, Text} = file:read_file(Json),
        ?assertMatch({ok, #{<<"interrupted">> := true, <<"planned_runs">> := 5}},
                     sluice_json:decode(Text)),
        {ok, Html} = file:read_file(filename:rootname(Json) ++ ".html"),
        ?assertMatch({match, _}, re:run(Html, "Interrupted \\(SIGTERM or Ctrl-C\\) after [12] of 5 runs")),
        ?assertEqual(ok, wait_for(fun() -> not lists:any(fun running/1, Tree) end, 50))
    after
        sluice_load_test_lib:stop_reaper(Config)
    end.

%% An OS process that exists and is not a zombie (a zombie waits for its
%% reaper, which in a container may be slow to come).
running(OsPid) ->
    case file:read_file("/proc/" ++ integer_to_list(OsPid) ++ "/stat") of
        {ok, Stat} -> binary:part(hd(tl(binary:split(Stat, <<") ">>))), 0, 1) =/= <<"Z">>;
        {error, _} -> false
    end.

%% Fun() true within N tries 100 ms apart.
wait_for(Fun, 0) -> {gave_up, Fun()};
wait_for(Fun, N) ->
    case Fun() of
        true -> ok;
        false -> timer:sleep(100), wait_for(Fun, N - 1)
    end.

real(Cells, Config) ->
    sluice_bench:bench(#{cells => Cells, rounds => 1, warmup => 0.3, duration => 1,
                         quick => false, out => ?config(priv_dir, Config),
                         command => <<"sluice_bench_SUITE">>}).
