%% @doc One run of the benchmark: start a server pinned with taskset, wait
%% for its `listening on' line, run the C load engine pinned against it,
%% sample the server's CPU time meanwhile, stop the server, and return the
%% engine's figures with the server's CPU per message.
%%
%% Server CPU per message: utime+stime of the server's process tree,
%% sampled every 100 ms with a wall-clock stamp while the engine runs. For
%% `measured' scenarios the counter is read at the start and the end of the
%% engine's measurement window (the engine reports when it started and how
%% long it lasted) by interpolating between the samples around each instant,
%% so ramp, warmup and shutdown are not charged; the figure is divided by
%% the messages of that same window. For `whole_run' scenarios (connrate)
%% it is the CPU from just before the engine started to just after it
%% exited, divided by the connections established.
-module(sluice_bench_run).

-export([run/1]).

-define(SAMPLE_MS, 100).
-define(LISTEN_TIMEOUT_MS, 20000).
-define(STOP_TIMEOUT_MS, 10000).

%% @doc Run `Server' for `Scenario' once. `Spec' holds `scenario', `server',
%% `ack', `paths' (sluice_bench_matrix:paths()), `warmup', `duration',
%% `tmpdir', `taskset' and `clk_tck'.
-spec run(map()) -> map().
run(#{scenario := Sc, server := Sv, ack := Ack, paths := Paths} = Spec) ->
    T0 = erlang:monotonic_time(millisecond),
    S = sluice_bench_matrix:scenario(Sc),
    {Exe, Args} = sluice_bench_matrix:server_command(Sv, Sc, Ack, Paths),
    ServerCmd = ["taskset", "-c", maps:get(server_core, S), Exe | Args],
    Base = #{scenario => Sc, server => Sv, ack => Ack,
             server_cmd => [list_to_binary(A) || A <- ServerCmd],
             server_core => list_to_binary(maps:get(server_core, S)),
             engine_core => list_to_binary(maps:get(engine_core, S))},
    Result = case start_server(Spec, tl(ServerCmd)) of
                 {ok, Server} ->
                     try measure(Spec, S, Server, Base)
                     after stop_server(Server)
                     end;
                 {error, Why} ->
                     Base#{ok => false, error => iolist_to_binary(Why)}
             end,
    Result#{wall_s => (erlang:monotonic_time(millisecond) - T0) / 1000}.

%%% ------------------------------------------------------------------
%%% The server
%%% ------------------------------------------------------------------

start_server(#{taskset := Taskset}, Args) ->
    Port = open_port({spawn_executable, Taskset},
                     [{args, Args}, {line, 4096}, binary, exit_status,
                      stderr_to_stdout, use_stdio]),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    Deadline = erlang:monotonic_time(millisecond) + ?LISTEN_TIMEOUT_MS,
    case wait_listening(Port, Deadline, []) of
        {ok, TcpPort} ->
            {ok, #{port => Port, os_pid => OsPid, tcp_port => TcpPort,
                   tree => sluice_procfs:process_tree(OsPid)}};
        {error, Why} ->
            kill(OsPid, "KILL"),
            _ = wait_exit(Port, 1000),
            {error, Why}
    end.

wait_listening(Port, Deadline, Seen) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, {eol, <<"listening on ", Addr/binary>>}}} ->
            [_, P] = string:split(Addr, ":", trailing),
            {ok, binary_to_integer(string:trim(P))};
        {Port, {data, {_, Line}}} ->
            wait_listening(Port, Deadline, [Line | Seen]);
        {Port, {exit_status, Code}} ->
            {error, io_lib:format("server exited with status ~b before listening: ~s",
                                  [Code, output(Seen)])}
    after Left ->
            {error, io_lib:format("server did not print 'listening on' in ~b s: ~s",
                                  [?LISTEN_TIMEOUT_MS div 1000, output(Seen)])}
    end.

output(Seen) -> lists:join(" | ", lists:reverse(Seen)).

%% SIGTERM drains: sluice-run forwards it to the VM, the VM of the seed
%% server stops on it, sluice-ref exits. SIGKILL the tree if that hangs.
stop_server(#{port := Port, os_pid := OsPid, tree := Tree}) ->
    kill(OsPid, "TERM"),
    case wait_exit(Port, ?STOP_TIMEOUT_MS) of
        ok -> ok;
        timeout ->
            [kill(P, "KILL") || P <- lists:reverse(Tree)],
            _ = wait_exit(Port, 2000),
            catch port_close(Port),
            ok
    end.

wait_exit(Port, Timeout) ->
    receive
        {Port, {exit_status, _}} -> ok;
        {Port, {data, _}} -> wait_exit(Port, Timeout)
    after Timeout -> timeout
    end.

%% Only processes this module started, by their pid.
kill(OsPid, Sig) ->
    _ = os:cmd("kill -" ++ Sig ++ " " ++ integer_to_list(OsPid) ++ " 2>/dev/null"),
    ok.

%%% ------------------------------------------------------------------
%%% The engine and the CPU samples
%%% ------------------------------------------------------------------

measure(#{scenario := Sc, ack := Ack, paths := #{priv := Priv}, tmpdir := Tmp,
          taskset := Taskset} = Spec, S, Server, Base) ->
    #{tcp_port := TcpPort, tree := Tree} = Server,
    Json = filename:join(Tmp, "engine-" ++ integer_to_list(erlang:unique_integer([positive]))
                         ++ ".json"),
    EArgs = sluice_bench_matrix:engine_args(Sc, Ack, Spec#{port => TcpPort, json => Json}),
    Engine = filename:join(Priv, "sluice-load"),
    EngineCmd = ["taskset", "-c", maps:get(engine_core, S), Engine | EArgs],
    Timeout = round((maps:get(warmup, Spec) + maps:get(duration, Spec)) * 1000) + 60000,
    First = sample(Tree),
    EPort = open_port({spawn_executable, Taskset},
                      [{args, tl(EngineCmd)}, binary, exit_status, stderr_to_stdout,
                       use_stdio, stream]),
    {Code, Out, Samples} = engine_loop(EPort, Tree, erlang:monotonic_time(millisecond) + Timeout,
                                       [], [First]),
    Base1 = Base#{engine_cmd => [list_to_binary(A) || A <- EngineCmd],
                  engine_exit => Code, server_pids => Tree},
    Decoded = case file:read_file(Json) of
                  {ok, Text} -> _ = file:delete(Json), sluice_json:decode(Text);
                  {error, E} -> {error, E}
              end,
    case Decoded of
        {ok, #{<<"rate">> := _} = R} ->
            figures(Spec, S, R, Samples, Base1#{engine_output => trimmed(Out)});
        _ ->
            Base1#{ok => false,
                   error => iolist_to_binary(io_lib:format("engine exited ~p without a result: ~s",
                                                           [Code, trimmed(Out)]))}
    end.

engine_loop(EPort, Tree, Deadline, Out, Samples) ->
    receive
        {EPort, {data, D}} ->
            engine_loop(EPort, Tree, Deadline, [D | Out], Samples);
        {EPort, {exit_status, Code}} ->
            {Code, lists:reverse(Out), [sample(Tree) | Samples]}
    after ?SAMPLE_MS ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true ->
                    {os_pid, P} = erlang:port_info(EPort, os_pid),
                    kill(P, "TERM"),
                    engine_loop(EPort, Tree, Deadline + 10000, Out, Samples);
                false ->
                    engine_loop(EPort, Tree, Deadline, Out, [sample(Tree) | Samples])
            end
    end.

%% {wall clock in microseconds, cumulative ticks}
sample(Tree) ->
    {os:system_time(microsecond), sluice_procfs:cpu_ticks(Tree)}.

trimmed(Out) ->
    B = string:trim(iolist_to_binary(Out)),
    case byte_size(B) > 2000 of
        true -> <<(binary:part(B, 0, 2000))/binary, "...">>;
        false -> B
    end.

figures(#{clk_tck := Hz}, S, R, Samples, Base) ->
    Messages = maps:get(<<"messages">>, R, 0),
    Errors = maps:get(<<"errors">>, R, 0),
    Exit = maps:get(<<"exit_code">>, R, 0),
    Secs = maps:get(<<"duration_s">>, R, 0),
    Cpu = server_cpu(maps:get(cpu_window, S), R, Samples),
    CpuS = case Cpu of
               null -> null;
               Ticks -> Ticks / Hz
           end,
    NsPerMsg = case {CpuS, Messages} of
                   {null, _} -> null;
                   {_, 0} -> null;
                   _ -> CpuS * 1.0e9 / Messages
               end,
    Rate = rate(maps:get(figure, S, [<<"rate">>]), R),
    Ok = Errors =:= 0 andalso Exit =:= 0 andalso Messages > 0 andalso is_number(Rate),
    Base#{ok => Ok,
          rate => Rate,
          messages => Messages,
          measured_s => Secs,
          errors => Errors,
          latency_us => maps:remove(<<"samples">>, maps:get(<<"latency_us">>, R, #{})),
          failures => maps:get(<<"failures">>, R, #{}),
          server_cpu_s => CpuS,
          server_ns_per_msg => NsPerMsg,
          cpu_window => maps:get(cpu_window, S),
          cpu_samples => length(Samples)}
        #{storm => sluice_bench_storm:figures(R)}
        #{error => if Ok -> null;
                      not is_number(Rate) ->
                          iolist_to_binary(io_lib:format("engine's JSON has no ~s",
                                                         [lists:join(".", maps:get(figure, S, [<<"rate">>]))]));
                      true -> iolist_to_binary(io_lib:format("engine: exit ~p, ~p errors",
                                                             [Exit, Errors]))
                   end}.

%% The scenario's figure, where the engine's JSON has it.
rate([], V) when is_number(V) -> V;
rate([K | Path], #{} = M) -> rate(Path, maps:get(K, M, null));
rate(_, _) -> null.

server_cpu(whole_run, _R, Samples) ->
    {_, Last} = hd(Samples),
    {_, First} = lists:last(Samples),
    Last - First;
server_cpu(measured, #{<<"window_start_unix_ms">> := StartMs, <<"duration_s">> := Secs},
           Samples) ->
    Start = StartMs * 1000,
    End = Start + Secs * 1.0e6,
    case {sluice_bench_stats:interpolate(Start, Samples),
          sluice_bench_stats:interpolate(End, Samples)} of
        {{ok, A}, {ok, B}} -> B - A;
        _ -> null
    end;
server_cpu(measured, _R, _Samples) ->
    null.
