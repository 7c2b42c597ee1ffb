%% @doc The benchmark runner behind `bin/sluice bench': run the cells of
%% the matrix, print the progress, the table and the speed targets, and
%% write the results as JSON and as a self-contained HTML page.
%%
%% Order of the runs (plan/2): round by round, scenario by scenario, and
%% every C reference run between the two cells it serves (A C B, D C E,
%% ...), so that every figure has a C figure measured within seconds of it,
%% right before or right after, with half as many C runs as cells. Every run
%% starts a fresh server and a fresh engine. bench/README.md says what each
%% figure means and how to read it.
-module(sluice_bench).

-export([bench/1, list/1, plan/2, stop_on_signal/0]).

%%% ------------------------------------------------------------------
%%% Running the matrix
%%% ------------------------------------------------------------------

%% @doc Run the cells of `Config' (`cells', `rounds', `warmup', `duration',
%% `out', `quick', `command'); print the progress (stderr), the table and
%% the targets (stdout); write the files. Returns the result document with
%% `files' and `failed_runs' added.
-spec bench(map()) -> {ok, map()} | {error, string()}.
bench(Config0) ->
    case writable(maps:get(out, Config0)) of
        ok -> bench_prepared(Config0);
        {error, _} = E -> E
    end.

bench_prepared(Config0) ->
    case prepare(Config0) of
        {error, _} = E -> E;
        {ok, Config, Env, Plan} ->
            T0 = erlang:monotonic_time(millisecond),
            Tmp = tmpdir(),
            {Status, Runs} = try run_plan(Plan, length(Plan), Config, Env#{tmpdir => Tmp}, [])
                             after _ = file:del_dir_r(Tmp)
                             end,
            Elapsed = (erlang:monotonic_time(millisecond) - T0) / 1000,
            finish(Config, Env, {Status, Runs}, Elapsed)
    end.

%% @doc What bench/1 would run, without running it (`bin/sluice bench
%% --list'): the notes and the estimate as bench/1 prints them (stderr),
%% then the runs in order on stdout, one a line: round, scenario, server,
%% and for a C run the cells it serves.
-spec list(map()) -> ok | {error, string()}.
list(Config0) ->
    case prepare(Config0) of
        {error, _} = E -> E;
        {ok, _Config, _Env, Plan} ->
            _ = [io:format("~b ~s ~s~s~n", [Rd, Sc, Sv, serves(Role)])
                 || {Rd, Sc, Sv, Role} <- Plan],
            ok
    end.

serves(subject) -> "";
serves({reference, Servers}) -> [" for " | lists:join(",", [atom_to_list(S) || S <- Servers])].

%% The cells this machine can run (the engine's scenarios, the
%% certificates), the notes on those it cannot, and the plan, with the
%% notes and the estimate printed.
prepare(#{cells := Cells0, rounds := Rounds} = Config0) ->
    case environment() of
        {error, _} = E -> E;
        {ok, Env0 = #{paths := Paths, engine_scenarios := EngineScenarios}} ->
            Env = Env0#{paths := Paths#{backend => maps:get(backend, Config0, inet)}},
            {Cells1, Notes1} = sluice_bench_matrix:available(Cells0, EngineScenarios),
            {Cells, Notes2} = certs(Cells1, Paths),
            Notes = Notes1 ++ Notes2,
            Config = Config0#{cells := Cells, notes => Notes},
            [io:format(standard_error, "sluice bench: ~s~n", [N]) || N <- Notes],
            Plan = plan(Cells, Rounds),
            io:format(standard_error, "sluice bench: ~b cells x ~b rounds = ~b runs, about ~s~n",
                      [length(Cells), Rounds, length(Plan), minsec(estimate(Plan, Config))]),
            {ok, Config, Env, Plan}
    end.

%% @doc The runs, in order: `{Round, Scenario, Server, subject}' for a
%% cell, `{Round, Scenario, c, {reference, Cells}}' for a C run that
%% serves the one or two cells (their servers) beside it. Per round, the
%% cells go scenario by scenario (in the order the scenarios first appear),
%% and the cells that the same C run can serve (same scenario, same ack
%% mode) in pairs around one: A C B, and B C A every other round. A `c'
%% cell is a subject of its own.
-spec plan([sluice_bench_matrix:cell()], pos_integer()) ->
          [{pos_integer(), sluice_bench_matrix:scenario(), sluice_bench_matrix:server(),
            subject | {reference, [sluice_bench_matrix:server()]}}].
plan(Cells, Rounds) ->
    Keys = lists:usort([{first(Sc, Cells), Sc} || {Sc, _} <- Cells]),
    [{Rd, Sc, Sv, Role} || Rd <- lists:seq(1, Rounds), {Sc, Sv, Role} <- round(Rd, Keys, Cells)].

round(Rd, Keys, Cells) ->
    lists:append(
      [lists:append(
         [around(Sc, turn(Rd, Group))
          || Group <- groups(Sc, [Sv || {S, Sv} <- Cells, S =:= Sc, Sv =/= c])])
       ++ [{Sc, c, subject} || {S, c} <- Cells, S =:= Sc]
       || {_, Sc} <- Keys]).

%% Every other round a pair runs the other way round. The first run of a
%% scenario meets the machine as the scenario before it (or, in round 1,
%% the build) left it, and sluice, first in its pair, took that in every
%% round: on 2026-11-26 its round-1 lock-step run was the slowest of its
%% three in all five full runs, 59-89k round trips a second where the
%% hand-written server's, right after it, were 55-101k.
turn(Rd, [A, B]) when Rd rem 2 =:= 0 -> [B, A];
turn(_Rd, Group) -> Group.

first(Sc, Cells) ->
    length(lists:takewhile(fun({S, _}) -> S =/= Sc end, Cells)).

%% The servers of one scenario by ack mode (a C run serves only cells of
%% its own mode), in matrix order, two at a time.
groups(Sc, Servers) ->
    Acks = lists:usort([{first_ack(Sc, A, Servers), A}
                        || A <- [sluice_bench_matrix:ack(Sc, Sv) || Sv <- Servers]]),
    lists:append([pairs([Sv || Sv <- Servers, sluice_bench_matrix:ack(Sc, Sv) =:= A])
                  || {_, A} <- Acks]).

first_ack(Sc, A, Servers) ->
    length(lists:takewhile(fun(Sv) -> sluice_bench_matrix:ack(Sc, Sv) =/= A end, Servers)).

pairs([A, B | Rest]) -> [[A, B] | pairs(Rest)];
pairs([A]) -> [[A]];
pairs([]) -> [].

around(Sc, [A, B]) ->
    [{Sc, A, subject}, {Sc, c, {reference, [A, B]}}, {Sc, B, subject}];
around(Sc, [A]) ->
    [{Sc, A, subject}, {Sc, c, {reference, [A]}}].

environment() ->
    Taskset = os:find_executable("taskset"),
    Cores = erlang:system_info(logical_processors_available),
    case [sluice_build:program(P) || P <- ["sluice-load", "sluice-ref"]] of
        [{error, _} = E, _] -> E;
        [_, {error, _} = E] -> E;
        _ when Taskset =:= false ->
            {error, "taskset not found (Debian package util-linux): runs are pinned to cores"};
        _ when is_integer(Cores), Cores < 2 ->
            {error, "needs 2 cores (server on core 0, engine on core 1)"};
        [{ok, Engine}, _] ->
            {ok, #{paths => #{root => sluice_build:root(), priv => filename:dirname(Engine),
                              erl => sluice_build:erl(),
                              seed_ebin => filename:dirname(code:which(sluice_bench_seed_server))},
                   engine_scenarios => engine_scenarios(Engine),
                   taskset => Taskset, clk_tck => sluice_procfs:clk_tck()}}
    end.

%% The TLS cells need the throwaway certificates of `make certs': made
%% here if missing (bench/certs.sh keeps valid ones), else those cells are
%% left out with a note.
certs(Cells, #{root := Root}) ->
    case [C || {Sc, _} = C <- Cells, sluice_bench_matrix:tls(Sc) =/= none] of
        [] -> {Cells, []};
        Tls ->
            Script = filename:join([Root, "bench", "certs.sh"]),
            case sluice_cprog:output(Script, [sluice_bench_matrix:certs_dir(Root)]) of
                {0, _} -> {Cells, []};
                {Code, Out} ->
                    {Cells -- Tls,
                     [lists:flatten(io_lib:format("TLS cells skipped: bench/certs.sh exited ~p: ~ts",
                                                  [Code, string:trim(Out)]))]}
            end
    end.

%% The engine's --scenario choices, from its own option table.
engine_scenarios(Engine) ->
    {_, Out} = sluice_cprog:output(Engine, ["--options-json"]),
    case sluice_json:decode(Out) of
        {ok, #{<<"options">> := Options}} ->
            hd([Choices || #{<<"name">> := <<"scenario">>, <<"choices">> := Choices} <- Options]
               ++ [[]]);
        _ ->
            []
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

%% Seconds: the engine's warmup and window, plus starting and stopping
%% the server (a VM takes longer than the C server).
estimate(Plan, Config) ->
    lists:sum([case {Sc, Sv} of
                   {connrate, c} -> 1.5;
                   {connrate, _} -> 2.8;
                   {storm, _} -> 3.0;
                   {'tls-handshakes', _} -> 2.0;
                   {_, c} -> window(Sc, Config) + 0.05;
                   _ -> window(Sc, Config) + 0.25
               end || {_, Sc, Sv, _} <- Plan]).

window(Sc, Config) ->
    case sluice_bench_matrix:times(Sc, Config) of
        {none, D} -> D;
        {W, D} -> W + D
    end.

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
            {Served, Tag} = case Role of
                                subject -> {Sv, #{role => subject, pair => Sv}};
                                {reference, Pairs} -> {hd(Pairs), #{role => reference,
                                                                    pairs => Pairs}}
                            end,
            Spec = Env#{scenario => Sc, server => Sv,
                        ack => sluice_bench_matrix:ack(Sc, Served),
                        warmup => maps:get(warmup, Config),
                        duration => maps:get(duration, Config)},
            R = maps:merge(sluice_bench_run:run(Spec), Tag#{round => Rd}),
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
msg_word(storm) -> "conn";
msg_word('tls-handshakes') -> "conn";
msg_word(_) -> "msg".

%%% ------------------------------------------------------------------
%%% Results
%%% ------------------------------------------------------------------

finish(#{cells := Cells} = Config, #{paths := #{root := Root}}, {Status, Runs}, Elapsed) ->
    %% cells without a run: the benchmark was interrupted before them
    Summaries = [C || #{rounds := N} = C <- sluice_bench_report:cells(Cells, Runs), N > 0],
    Targets = sluice_bench_targets:targets(Summaries),
    Warnings = sluice_bench_targets:warnings(Summaries),
    Failed = length([R || #{ok := false} = R <- Runs]),
    Doc = #{tool => <<"sluice bench">>,
            date => list_to_binary(calendar:system_time_to_rfc3339(
                                     erlang:system_time(second), [{offset, "Z"}])),
            command => maps:get(command, Config),
            machine => machine(),
            settings => #{rounds => maps:get(rounds, Config),
                          warmup_s => maps:get(warmup, Config),
                          duration_s => maps:get(duration, Config),
                          quick => maps:get(quick, Config),
                          backend => maps:get(backend, Config, inet),
                          default_active => sluice_bench_matrix:default_active(),
                          order => <<"per round, scenario by scenario: two cells around "
                                     "the C reference run they share (A C B, B C A every "
                                     "other round)">>,
                          cpu => <<"server utime+stime of the whole process tree over the "
                                   "engine's measurement window (connrate: whole engine run)">>,
                          ratio => iolist_to_binary(
                                     ["median of the per-round ratios to the C run beside "
                                      "(vs_c: by rate; ", sluice_bench_report:cpu_judged(),
                                      ": by server CPU per message)"]),
                          wide_spread => sluice_bench_stats:wide_limit()},
            scenarios => maps:from_list([{Sc, #{description => sluice_bench_matrix:describe_scenario(Sc),
                                                settings => engine_settings(Sc, Config)}}
                                         || Sc <- lists:usort([S || {S, _} <- Cells])]),
            matrix => [iolist_to_binary([atom_to_list(Sc), "/", atom_to_list(Sv)])
                       || {Sc, Sv} <- Cells],
            runs => Runs, cells => Summaries, targets => Targets, warnings => Warnings,
            interrupted => Status =:= interrupted,
            planned_runs => length(plan(Cells, maps:get(rounds, Config))),
            notes => [list_to_binary(N) || N <- maps:get(notes, Config, [])],
            failed_runs => Failed, elapsed_s => round(Elapsed)},
    Table = sluice_bench_report:table(Summaries),
    io:put_chars([Table, "\n", sluice_bench_report:legend(), "\n",
                  sluice_bench_storm:text(Runs),
                  sluice_bench_targets:text(Targets, Warnings),
                  [["note: ", N, "\n"] || N <- maps:get(notes, Config, [])]]),
    case write_files(maps:get(out, Config), Doc) of
        {ok, Files} ->
            io:format("~nresults: ~ts~n         ~ts~n",
                      [relative(F, Root) || F <- Files]),
            io:format("~b runs in ~s~ts~ts~n",
                      [length(Runs), minsec(Elapsed),
                       case Failed of
                           0 -> "";
                           _ -> io_lib:format(", ~b FAILED (see the runs' \"error\" in the JSON)",
                                              [Failed])
                       end,
                       %% on stdout too: the table above is then a partial one
                       case Status of
                           interrupted -> io_lib:format("; interrupted: ~b of ~b runs done",
                                                        [length(Runs),
                                                         maps:get(planned_runs, Doc)]);
                           done -> ""
                       end]),
            {ok, Doc#{files => Files}};
        {error, Why} ->
            {error, Why}
    end.

%% What the engine ran for a scenario, with the warmup and duration it
%% was given (a scenario's own or the bench's), and whether the server CPU
%% is over the measured window or the whole run.
engine_settings(Sc, Config) ->
    S = sluice_bench_matrix:scenario(Sc),
    {W, D} = sluice_bench_matrix:times(Sc, Config),
    #{engine => [list_to_binary(A) || A <- maps:get(engine, S)],
      server_core => list_to_binary(maps:get(server_core, S)),
      engine_core => list_to_binary(maps:get(engine_core, S)),
      warmup_s => case W of none -> 0; _ -> W end, duration_s => D,
      cpu_window => maps:get(cpu_window, S)}.

%% The results' directory can be written: found out before the runs (the
%% whole benchmark ran, then its JSON and HTML were lost).
writable(Dir) ->
    Probe = filename:join(Dir, ".sluice-bench-" ++ os:getpid()),
    case filelib:ensure_dir(Probe) of
        ok ->
            case file:write_file(Probe, <<>>) of
                ok -> _ = file:delete(Probe), ok;
                {error, Why} -> {error, io_lib:format("cannot write in ~ts: ~ts", [Dir, file:format_error(Why)])}
            end;
        {error, Why} ->
            {error, io_lib:format("cannot create ~ts: ~ts", [Dir, file:format_error(Why)])}
    end.

write_files(Dir, Doc) ->
    Base = filename:join(Dir, unique_stamp(Dir)),
    Json = Base ++ ".json",
    Html = Base ++ ".html",
    case filelib:ensure_dir(Json) of
        ok ->
            case {file:write_file(Json, sluice_json:encode(Doc)),
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

%% The machine, for the reports.
machine() ->
    {Family, Name} = os:type(),
    #{nproc => erlang:system_info(logical_processors_available),
      nproc_online => erlang:system_info(logical_processors_online),
      cpu_model => sluice_procfs:cpu_model(),
      otp_release => list_to_binary(erlang:system_info(otp_release)),
      erts_version => list_to_binary(erlang:system_info(version)),
      kernel => iolist_to_binary([atom_to_list(Family), "/", atom_to_list(Name), " ",
                                  sluice_procfs:kernel_release()]),
      clk_tck => sluice_procfs:clk_tck(),
      open_file_limit => sluice_procfs:open_file_limit(),
      erl_flags => list_to_binary(os:getenv("SLUICE_ERL_FLAGS", ""))}.

%%% ------------------------------------------------------------------
%%% Ctrl-C: bin/sluice turns SIGINT into SIGTERM for the VM. The run in
%%% progress ends normally (its server is stopped), then the results so
%%% far are reported.
%%% ------------------------------------------------------------------

%% @doc From now on SIGTERM makes bench/1, called from this process, stop
%% after the run in progress and report what it has.
-spec stop_on_signal() -> ok.
stop_on_signal() ->
    Main = self(),
    Watcher = spawn_link(fun() -> watch(Main) end),
    sluice_signal:install(Watcher).

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
