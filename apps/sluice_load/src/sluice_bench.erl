%% @doc `bin/sluice bench': run the benchmark matrix (or a part of it),
%% print the table and the speed targets, and write the results as JSON
%% and as a self-contained HTML page under bench/results/.
%%
%% Order of the runs: round by round, and in each round every cell's sluice
%% run immediately followed by its C reference run (A B A B ...), so that
%% every sluice figure has a C figure measured within seconds of it. Every
%% run starts a fresh server and a fresh engine. bench/README.md says what
%% each figure means and how to read it.
-module(sluice_bench).

-export([run/1, bench/1, specs/0]).

-define(ABOUT,
        "Run the benchmark matrix: every sluice figure beside the C reference server's,\n"
        "measured in the same round. Prints a table and the speed targets, and writes\n"
        "bench/results/<timestamp>.json and .html. Builds nothing: run `make' first.\n"
        "--scenario and --server pick cells: both together run that one cell.").

-define(DEFAULT_WARMUP, "1 (--quick: 0.5)").
-define(DEFAULT_DURATION, "1.25 (--quick: 1)").

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    [{quick, "quick", boolean, false, "the smaller matrix (make bench QUICK=1)"},
     {scenario, "scenario", string, "all",
      "only this scenario: " ++ names(sluice_bench_matrix:scenarios())},
     {server, "server", string, "all",
      "only this server: " ++ names(sluice_bench_matrix:servers())},
     {backend, "backend", {enum, [inet, socket]}, inet,
      "socket layer of every sluice server (the -socket servers always use socket)"},
     {rounds, "rounds", {integer, 1, 100}, 3, "rounds (each cell is measured once per round)"},
     {warmup, "warmup", string, ?DEFAULT_WARMUP, "seconds of load before each measurement"},
     {duration, "duration", string, ?DEFAULT_DURATION, "seconds measured per run"},
     {out, "out", string, "bench/results",
      "directory for the results (the default is in the repository)"}].

names(Atoms) -> lists:join("|", [atom_to_list(A) || A <- Atoms]).

%% @doc The command line; returns the exit code: 0 every run succeeded, 1
%% some run failed or the benchmark could not start, 2 bad usage, 130
%% interrupted (the runs done are reported and written all the same). Speed
%% targets that fail do not change the exit code: benchmarks are not tests.
-spec run([string()]) -> non_neg_integer().
run(Args) ->
    case sluice_cli_args:parse(specs(), Args) of
        help ->
            io:put_chars(sluice_cli_args:usage("bench", ?ABOUT, specs())),
            0;
        {error, Msg} ->
            usage_error(Msg);
        {ok, Opts} ->
            case config(Opts, Args) of
                {error, Msg} ->
                    usage_error(Msg);
                {ok, Config} ->
                    install_interrupt(),
                    case bench(Config) of
                        {ok, #{interrupted := true}} -> 130;
                        {ok, #{failed_runs := 0}} -> 0;
                        {ok, _} -> 1;
                        {error, Msg} ->
                            io:format(standard_error, "sluice bench: ~ts~n", [Msg]),
                            1
                    end
            end
    end.

usage_error(Msg) ->
    io:format(standard_error, "sluice bench: ~ts (try bin/sluice bench --help)~n", [Msg]),
    2.

%%% ------------------------------------------------------------------
%%% Options
%%% ------------------------------------------------------------------

config(#{quick := Quick, rounds := Rounds} = O, Args) ->
    try
        Warmup = seconds(warmup, maps:get(warmup, O), ?DEFAULT_WARMUP,
                         if Quick -> 0.5; true -> 1 end, 0, 60),
        Duration = seconds(duration, maps:get(duration, O), ?DEFAULT_DURATION,
                           if Quick -> 1; true -> 1.25 end, 0.1, 600),
        Cells = cells(Quick, pick(scenario, maps:get(scenario, O)),
                      pick(server, maps:get(server, O))),
        {ok, #{cells => Cells, rounds => Rounds, warmup => Warmup, duration => Duration,
               backend => maps:get(backend, O),
               quick => Quick, out => out_dir(maps:get(out, O)),
               command => iolist_to_binary(lists:join(" ", ["bin/sluice", "bench" | Args]))}}
    catch throw:{usage, Msg} -> {error, Msg}
    end.

seconds(_Key, Default, Default, Value, _Min, _Max) -> Value;
seconds(Key, S, _Default, _Value, Min, Max) ->
    V = case {string:to_float(S), string:to_integer(S)} of
            {{F, []}, _} -> F;
            {_, {I, []}} -> I;
            _ -> bad(Key, S, Min, Max)
        end,
    case V >= Min andalso V =< Max of
        true -> V;
        false -> bad(Key, S, Min, Max)
    end.

-spec bad(atom(), string(), number(), number()) -> no_return().
bad(Key, S, Min, Max) ->
    throw({usage, lists:flatten(io_lib:format("bad value for --~s: ~s (expected seconds, ~p..~p)",
                                              [Key, S, Min, Max]))}).

pick(_, "all") -> all;
pick(Key, Name) ->
    All = case Key of
              scenario -> sluice_bench_matrix:scenarios();
              server -> sluice_bench_matrix:servers()
          end,
    case [A || A <- All, atom_to_list(A) =:= Name] of
        [A] -> A;
        [] -> throw({usage, lists:flatten(io_lib:format("unknown ~s ~s (one of ~s)",
                                                        [Key, Name, names(All)]))})
    end.

cells(_Quick, Sc, Sv) when Sc =/= all, Sv =/= all ->
    case sluice_bench_matrix:check_cell(Sc, Sv) of
        ok -> [{Sc, Sv}];
        {error, Msg} -> throw({usage, Msg})
    end;
cells(Quick, Sc, Sv) ->
    Match = fun(Cells) -> [C || {S, V} = C <- Cells, Sc =:= all orelse S =:= Sc,
                                Sv =:= all orelse V =:= Sv] end,
    Base = case Quick of
               true -> sluice_bench_matrix:quick();
               false -> sluice_bench_matrix:default()
           end,
    case {Match(Base), Match(sluice_bench_matrix:default())} of
        {[_ | _] = Cells, _} -> Cells;
        {[], [_ | _] = Cells} -> Cells;
        {[], []} -> throw({usage, "no cell of the matrix has that server: "
                                  "name a scenario as well (--scenario S --server X)"})
    end.

out_dir("bench/results") -> filename:join([root(), "bench", "results"]);
out_dir(Dir) -> filename:absname(Dir).

%% The repository: this module lives in ROOT/_build/PROFILE/lib/sluice_load/ebin.
root() ->
    Beam = code:which(?MODULE),
    filename:join(lists:sublist(filename:split(Beam), length(filename:split(Beam)) - 6)).

%%% ------------------------------------------------------------------
%%% Running the matrix
%%% ------------------------------------------------------------------

%% @doc Run the cells of `Config' (`cells', `rounds', `warmup', `duration',
%% `out', `quick', `command'); print the progress (stderr), the table and
%% the targets (stdout); write the files. Returns the result document with
%% `files' and `failed_runs' added.
-spec bench(map()) -> {ok, map()} | {error, string()}.
bench(#{cells := Cells, rounds := Rounds} = Config) ->
    case environment() of
        {error, _} = E -> E;
        {ok, Env0 = #{paths := Paths}} ->
            Env = Env0#{paths := Paths#{backend => maps:get(backend, Config, inet)}},
            Plan = [{Rd, Sc, Sv, Role}
                    || Rd <- lists:seq(1, Rounds), {Sc, Sv} <- Cells,
                       Role <- case Sv of c -> [subject]; _ -> [subject, reference] end],
            io:format(standard_error, "sluice bench: ~b cells x ~b rounds = ~b runs, about ~s~n",
                      [length(Cells), Rounds, length(Plan), minsec(estimate(Plan, Config))]),
            T0 = erlang:monotonic_time(millisecond),
            Tmp = tmpdir(),
            {Status, Runs} = try run_plan(Plan, length(Plan), Config, Env#{tmpdir => Tmp}, [])
                             after _ = file:del_dir_r(Tmp)
                             end,
            Elapsed = (erlang:monotonic_time(millisecond) - T0) / 1000,
            finish(Config, Env, {Status, Runs}, Elapsed)
    end.

environment() ->
    Root = root(),
    Priv = filename:join([Root, "apps", "sluice_load", "priv"]),
    Missing = [F || F <- ["sluice-load", "sluice-ref"],
                    not filelib:is_regular(filename:join(Priv, F))],
    Taskset = os:find_executable("taskset"),
    Cores = erlang:system_info(logical_processors_available),
    if Missing =/= [] ->
           {error, "not built: " ++ lists:join(", ", Missing) ++ " missing in " ++ Priv
                   ++ " (run make)"};
       Taskset =:= false ->
           {error, "taskset not found (Debian package util-linux): runs are pinned to cores"};
       is_integer(Cores), Cores < 2 ->
           {error, "needs 2 cores (server on core 0, engine on core 1)"};
       true ->
           {ok, #{paths => #{root => Root, priv => Priv,
                             erl => filename:join([code:root_dir(), "bin", "erl"]),
                             seed_ebin => filename:dirname(code:which(sluice_bench_seed_server))},
                  taskset => Taskset, clk_tck => sluice_bench_proc:clk_tck()}}
    end.

tmpdir() ->
    Dir = filename:join(case os:getenv("TMPDIR") of
                            false -> "/tmp";
                            "" -> "/tmp";
                            T -> T
                        end,
                        "sluice-bench-" ++ os:getpid() ++ "-"
                        ++ integer_to_list(erlang:unique_integer([positive]))),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Dir.

estimate(Plan, #{warmup := W, duration := D}) ->
    lists:sum([case Sc of
                   connrate -> 2.0;
                   _ -> W + D + case Role of subject -> 0.4; reference -> 0.15 end
               end || {_, Sc, _, Role} <- Plan]).

minsec(S) ->
    io_lib:format("~bm~2..0bs", [trunc(S) div 60, trunc(S) rem 60]).

run_plan([], _N, _Config, _Env, Acc) ->
    {done, lists:reverse(Acc)};
run_plan([{Rd, Sc, Sv, Role} | Rest], N, #{rounds := Rounds} = Config, Env, Acc) ->
    case interrupted() of
        true ->
            io:format(standard_error, "sluice bench: interrupted: reporting the ~b runs done~n",
                      [length(Acc)]),
            {interrupted, lists:reverse(Acc)};
        false ->
            Server = case Role of subject -> Sv; reference -> c end,
            Spec = Env#{scenario => Sc, server => Server,
                        ack => sluice_bench_matrix:ack(Sc, Sv),
                        warmup => maps:get(warmup, Config),
                        duration => maps:get(duration, Config)},
            R = (sluice_bench_run:run(Spec))#{round => Rd, role => Role, pair => Sv},
            progress(length(Acc) + 1, N, Rd, Rounds, R),
            run_plan(Rest, N, Config, Env, [R | Acc])
    end.

progress(I, N, Rd, Rounds, #{scenario := Sc, server := Sv, wall_s := Wall} = R) ->
    Unit = maps:get(unit, sluice_bench_matrix:scenario(Sc)),
    What = case R of
               #{ok := true, rate := Rate} ->
                   io_lib:format("~10s ~s  ~8s ns/~s", [sluice_bench_report:fmt_rate(Rate), Unit,
                                                        sluice_bench_report:fmt_ns(
                                                          maps:get(server_ns_per_msg, R)),
                                                        msg_word(Sc)]);
               _ -> ["FAILED: ", maps:get(error, R, <<"?">>)]
           end,
    W = length(integer_to_list(N)),
    io:format(standard_error, "[~*b/~b] round ~b/~b  ~-16s ~-20s ~ts  (~.1f s)~n",
              [W, I, N, Rd, Rounds, Sc, Sv, What, float(Wall)]).

msg_word(connrate) -> "conn";
msg_word(_) -> "msg".

%%% ------------------------------------------------------------------
%%% Results
%%% ------------------------------------------------------------------

finish(#{cells := Cells} = Config, #{paths := #{root := Root}}, {Status, Runs}, Elapsed) ->
    %% cells without a run: the benchmark was interrupted before them
    Summaries = [C || #{rounds := N} = C <- sluice_bench_report:cells(Cells, Runs), N > 0],
    Targets = sluice_bench_report:targets(Summaries),
    Failed = length([R || #{ok := false} = R <- Runs]),
    Doc = #{tool => <<"sluice bench">>,
            date => list_to_binary(calendar:system_time_to_rfc3339(
                                     erlang:system_time(second), [{offset, "Z"}])),
            command => maps:get(command, Config),
            machine => sluice_bench_proc:machine(),
            settings => #{rounds => maps:get(rounds, Config),
                          warmup_s => maps:get(warmup, Config),
                          duration_s => maps:get(duration, Config),
                          quick => maps:get(quick, Config),
                          backend => maps:get(backend, Config, inet),
                          default_active => sluice_bench_matrix:default_active(),
                          order => <<"per round: each cell's sluice run, then its C reference run">>,
                          cpu => <<"server utime+stime of the whole process tree over the "
                                   "engine's measurement window (connrate: whole engine run)">>,
                          ratio => <<"median of the per-round sluice/C ratios">>},
            scenarios => maps:from_list([{Sc, #{description => sluice_bench_matrix:describe_scenario(Sc),
                                                settings => engine_settings(Sc)}}
                                         || Sc <- lists:usort([S || {S, _} <- Cells])]),
            matrix => [iolist_to_binary([atom_to_list(Sc), "/", atom_to_list(Sv)])
                       || {Sc, Sv} <- Cells],
            runs => Runs, cells => Summaries, targets => Targets,
            interrupted => Status =:= interrupted,
            failed_runs => Failed, elapsed_s => round(Elapsed)},
    Table = sluice_bench_report:table(Summaries),
    io:put_chars([Table, "\n", sluice_bench_report:legend(), "\n",
                  sluice_bench_report:targets_text(Targets)]),
    case write_files(maps:get(out, Config), Doc) of
        {ok, Files} ->
            io:format("~nresults: ~ts~n         ~ts~n",
                      [relative(F, Root) || F <- Files]),
            io:format("~b runs in ~s~ts~n",
                      [length(Runs), minsec(Elapsed),
                       case Failed of
                           0 -> "";
                           _ -> io_lib:format(", ~b FAILED (see the runs' \"error\" in the JSON)",
                                              [Failed])
                       end]),
            {ok, Doc#{files => Files}};
        {error, Why} ->
            {error, Why}
    end.

engine_settings(Sc) ->
    S = sluice_bench_matrix:scenario(Sc),
    #{engine => [list_to_binary(A) || A <- maps:get(engine, S)],
      server_core => list_to_binary(maps:get(server_core, S)),
      engine_core => list_to_binary(maps:get(engine_core, S))}.

write_files(Dir, Doc) ->
    Base = filename:join(Dir, unique_stamp(Dir)),
    Json = Base ++ ".json",
    Html = Base ++ ".html",
    case filelib:ensure_dir(Json) of
        ok ->
            case {file:write_file(Json, sluice_bench_json:encode(Doc)),
                  file:write_file(Html, sluice_bench_html:page(Doc))} of
                {ok, ok} -> {ok, [Json, Html]};
                {E, _} when E =/= ok -> {error, io_lib:format("cannot write ~ts: ~p", [Json, E])};
                {_, E} -> {error, io_lib:format("cannot write ~ts: ~p", [Html, E])}
            end;
        {error, Why} ->
            {error, io_lib:format("cannot create ~ts: ~p", [Dir, Why])}
    end.

unique_stamp(Dir) ->
    {{Y, Mo, D}, {H, Mi, S}} = calendar:local_time(),
    Stamp = lists:flatten(io_lib:format("~4..0b-~2..0b-~2..0bT~2..0b~2..0b~2..0b",
                                        [Y, Mo, D, H, Mi, S])),
    hd([N || N <- [Stamp | [Stamp ++ "-" ++ integer_to_list(I) || I <- lists:seq(2, 99)]],
             not filelib:is_file(filename:join(Dir, N ++ ".json"))]).

relative(File, Root) ->
    case string:prefix(File, Root ++ "/") of
        nomatch -> File;
        Rest -> Rest
    end.

%%% ------------------------------------------------------------------
%%% Ctrl-C: bin/sluice turns SIGINT into SIGTERM for the VM. The run in
%%% progress ends normally (its server is stopped), then the results so
%%% far are reported.
%%% ------------------------------------------------------------------

install_interrupt() ->
    Main = self(),
    Watcher = spawn_link(fun() -> watch(Main) end),
    sluice_cli_signal:install(Watcher).

watch(Main) ->
    receive
        {sluice_signal, sigterm} ->
            io:format(standard_error, "~nsluice bench: stopping after the current run~n", []),
            Main ! {?MODULE, interrupt},
            watch(Main);
        _ -> watch(Main)
    end.

interrupted() ->
    receive {?MODULE, interrupt} -> true
    after 0 -> false
    end.
