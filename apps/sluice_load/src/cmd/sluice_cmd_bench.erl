%% @doc `bin/sluice bench': its options, and from them the cells, rounds
%% and timings that sluice_bench runs. Exit codes: 0 every run succeeded,
%% 1 some run failed or the benchmark could not start (or, with --list, could
%% not be planned), 2 bad usage, 130
%% interrupted (the runs done are reported and written all the same).
%% Speed targets that fail do not change the exit code: benchmarks are not
%% tests.
-module(sluice_cmd_bench).

-export([run/1, check/1, specs/0]).

-define(ABOUT,
        "Run the benchmark matrix: every sluice figure beside the C reference server's,\n"
        "measured in the same round. Prints a table and the speed targets, and writes\n"
        "bench/results/<timestamp>.json and .html. Builds nothing: run `make' first.\n"
        "--scenario and --server pick cells (each one name or a comma list): a scenario\n"
        "alone runs its cells of the matrix, both together every pair of them.").

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    O = fun sluice_cli_args:opt/4,
    [O(quick, boolean, false, "the smaller matrix (make bench QUICK=1)"),
     O(list, boolean, false, "print the runs it would make and their time, run nothing"),
     O(scenario, {enum_list, [all | sluice_bench_matrix:scenarios()]}, [all],
       "only these scenarios"),
     O(server, {enum_list, [all | sluice_bench_matrix:servers()]}, [all], "only these servers"),
     O(backend, {enum, [inet, socket]}, inet,
       "socket layer of every sluice server (the -socket servers always use socket)"),
     O(rounds, {integer, 1, 100}, 3, "rounds (each cell is measured once per round)"),
     (O(warmup, {number, 0, 60}, undefined, "seconds of load before each measurement"))
         #{shown => "0.4", meta => "SECONDS"},
     (O(duration, {number, 0.1, 600}, undefined, "seconds measured per run"))
         #{shown => "1 (--quick: 0.75)", meta => "SECONDS"},
     O(out, string, "bench/results", "directory for the results (the default is in the repository)")].

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    sluice_cli_args:with_options("bench", ?ABOUT, specs(), Args,
                                 fun(Opts) -> bench(Opts, Args) end).

%% @doc The options of `Args', or run/1's usage error (cells that cannot
%% be run included); nothing runs, nothing is printed.
-spec check([string()]) -> {ok, map()} | help | {error, 2, string()}.
check(Args) ->
    sluice_cli_args:check(specs(), Args,
                          fun(Opts) ->
                                  case cells(Opts, quiet) of
                                      {ok, _} -> ok;
                                      {error, _} = E -> E
                                  end
                          end).

bench(Opts = #{list := List}, Args) ->
    case cells(Opts, say) of
        {error, Msg} ->
            {error, 2, Msg};
        {ok, Cells} when List ->
            case sluice_bench:list(config(Opts, Cells, Args)) of
                ok -> 0;
                {error, Msg} -> {error, 1, Msg}
            end;
        {ok, Cells} ->
            sluice_bench:stop_on_signal(),
            case sluice_bench:bench(config(Opts, Cells, Args)) of
                {ok, #{interrupted := true}} -> 130;
                {ok, #{failed_runs := 0}} -> 0;
                {ok, _} -> 1;
                {error, Msg} -> {error, 1, Msg}
            end
    end.

config(#{quick := Quick} = O, Cells, Args) ->
    Pick = fun(K, Normal, Short) ->
                   case {maps:get(K, O), Quick} of
                       {undefined, false} -> Normal;
                       {undefined, true} -> Short;
                       {V, _} -> V
                   end
           end,
    #{cells => Cells, rounds => maps:get(rounds, O),
      %% the warmup and the windows were trimmed to keep make bench under 6
      %% minutes and QUICK=1 under 2 with the peer and storm cells
      %% (bench/README.md, "What runs")
      warmup => Pick(warmup, 0.4, 0.4), duration => Pick(duration, 1.0, 0.75),
      backend => maps:get(backend, O), quick => Quick,
      out => case maps:get(out, O) of
                 "bench/results" -> filename:join([sluice_build:root(), "bench", "results"]);
                 Dir -> filename:absname(Dir)
             end,
      command => iolist_to_binary(lists:join(" ", ["bin/sluice", "bench" | Args]))}.

%% `say': a cell left out is a line on stderr (`quiet': for check/1).
cells(#{scenario := Scs0, server := Svs0, quick := Quick}, Say) ->
    case {named(Scs0), named(Svs0)} of
        {all, all} ->
            {ok, matrix(Quick)};
        {Scs, all} ->
            in_matrix(Quick, fun({Sc, _}) -> lists:member(Sc, Scs) end,
                      "no cell of the matrix has that scenario: name a server as well");
        {all, Svs} ->
            in_matrix(Quick, fun({_, Sv}) -> lists:member(Sv, Svs) end,
                      "no cell of the matrix has that server: "
                      "name a scenario as well (--scenario S --server X)");
        {Scs, Svs} ->
            pairs([{Sc, Sv} || Sc <- Scs, Sv <- Svs], Say)
    end.

%% `all' among the names stands for every one.
named(Names) ->
    case lists:member(all, Names) of
        true -> all;
        false -> Names
    end.

matrix(true) -> sluice_bench_matrix:quick();
matrix(false) -> sluice_bench_matrix:default().

%% The matrix's cells that `Pick' keeps; the default matrix's when the
%% quick one has none (`--quick --scenario paced').
in_matrix(Quick, Pick, None) ->
    case {lists:filter(Pick, matrix(Quick)), lists:filter(Pick, matrix(false))} of
        {[_ | _] = Cells, _} -> {ok, Cells};
        {[], [_ | _] = Cells} -> {ok, Cells};
        {[], []} -> {error, None}
    end.

%% Named scenarios and servers: every pair of them, in or out of the
%% matrix, except those the server cannot run. One pair that cannot run is
%% an error; among several, it is left out with a line saying so.
pairs([{Sc, Sv} = Cell], _Say) ->
    case sluice_bench_matrix:check_cell(Sc, Sv) of
        ok -> {ok, [Cell]};
        {error, _} = E -> E
    end;
pairs(Cells, Say) ->
    Checked = [{Cell, sluice_bench_matrix:check_cell(Sc, Sv)} || {Sc, Sv} = Cell <- Cells],
    case [Cell || {Cell, ok} <- Checked] of
        [] ->
            {error, "none of those servers can run those scenarios"};
        Runnable ->
            _ = [io:format(standard_error, "sluice bench: leaving out ~s/~s: ~s~n", [Sc, Sv, Why])
                 || Say =:= say, {{Sc, Sv}, {error, Why}} <- Checked],
            {ok, Runnable}
    end.
