%% sluice_socket against OTP's gen_tcp on `{inet_backend, socket}', with
%% gen_tcp on the inet driver as the reference: the same echo server on
%% each API, in three receive modes (`{active, once}', `{active, 100}',
%% passive `recv(S, 0)'). Not a test; socket_bench.escript runs it and
%% RESULTS.md has the figures and the commands.
%%
%% Three measurements, each in its own fresh OS processes:
%% <ul>
%%  <li>lockstep: one Erlang client (gen_tcp, inet) sends 17 bytes and
%%      waits for their echo, again and again; client and server both on
%%      core 0. Round trips per second, and the server's CPU time per
%%      round trip (from /proc, so the client's share is left out).</li>
%%  <li>pipeline: one Erlang client on core 1 writes 17-byte messages
%%      964 at a time and keeps at most 16 such writes unanswered; the
%%      server on core 0. Echoed bytes per second, and the server's CPU
%%      time per echoed MiB. The servers read with `{buffer, 8192}'
%%      (`--buffer'; the socket backends' default): inet's default, 1460
%%      bytes, would decide the result on its own.</li>
%%  <li>idle: an Erlang client opens N connections and leaves them idle;
%%      the server's BEAM memory (erlang:memory(total), after a GC of every
%%      process), its process count and its RSS, per connection.</li>
%% </ul>
%% Each round runs every cell once per API, the APIs in a rotating order;
%% the table gives the median over the rounds and each API's ratio to
%% gen_tcp on the socket backend.
-module(socket_bench).

-export([main/2, server/3, rtt_client/4, pipe_client/5, idle_client/2]).

-define(LOOPBACK, {127, 0, 0, 1}).
-define(APIS, [inet, gen_tcp_socket, sluice_socket]).
-define(MODES, [once, n, passive]).
-define(ACTIVE_N, 100).
-define(RTT_SIZE, 17).
%% Pipeline: 17-byte messages written 964 at a time (16,388 bytes), at
%% most 16 writes' worth unanswered.
-define(PIPE_WRITE, 964).
-define(PIPE_WINDOW, 16).
-define(LISTEN_OPTS, [binary, {active, false}, {reuseaddr, true}, {nodelay, true},
                      {backlog, 4096}, {ip, ?LOOPBACK}]).

%%% ------------------------------------------------------------------
%%% The echo server (runs in its own BEAM)
%%% ------------------------------------------------------------------

%% @doc Listens on a free port with Api (`{buffer, Buffer}' unless
%% default), echoes in Mode, prints `port P'; on the line `mem' from stdin
%% prints `mem Total Procs Conns RssKiB' (after a GC of every process);
%% stops at the end of stdin.
-spec server(atom(), atom(), default | pos_integer()) -> no_return().
server(Api, Mode, Buffer) ->
    Conns = atomics:new(1, []),
    {ok, L} = listen(Api, case Buffer of
                              default -> ?LISTEN_OPTS;
                              _ -> [{buffer, Buffer} | ?LISTEN_OPTS]
                          end),
    Self = self(),
    spawn_link(fun() -> accept_loop(Api, Mode, L, Conns, Self) end),
    io:format("port ~b~n", [port(Api, L)]),
    commands(Conns).

commands(Conns) ->
    case io:get_line("") of
        "mem\n" ->
            _ = [erlang:garbage_collect(P) || P <- processes()],
            io:format("mem ~b ~b ~b ~b~n", [erlang:memory(total), erlang:system_info(process_count),
                                            atomics:get(Conns, 1), rss_kib()]),
            commands(Conns);
        _ ->
            erlang:halt(0)
    end.

rss_kib() ->
    {ok, Status} = file:read_file("/proc/self/status"),
    {match, [Kb]} = re:run(Status, "VmRSS:\\s+(\\d+)", [{capture, all_but_first, binary}]),
    binary_to_integer(Kb).

listen(inet, Opts) -> gen_tcp:listen(0, Opts);
listen(gen_tcp_socket, Opts) -> gen_tcp:listen(0, [{inet_backend, socket} | Opts]);
listen(sluice_socket, Opts) -> sluice_socket:listen(0, Opts).

port(sluice_socket, L) -> {ok, {_, P}} = sluice_socket:sockname(L), P;
port(_, L) -> {ok, {_, P}} = inet:sockname(L), P.

mod(sluice_socket) -> sluice_socket;
mod(_) -> gen_tcp.

setopts(sluice_socket, S, Opts) -> sluice_socket:setopts(S, Opts);
setopts(_, S, Opts) -> inet:setopts(S, Opts).

accept_loop(Api, Mode, L, Conns, Owner) ->
    Mod = mod(Api),
    {ok, S} = Mod:accept(L),
    Pid = spawn(fun() ->
                        receive {go, S} -> ok end,
                        atomics:add(Conns, 1, 1),
                        echo(Mode, Api, Mod, S),
                        atomics:sub(Conns, 1, 1)
                end),
    ok = Mod:controlling_process(S, Pid),
    Pid ! {go, S},
    accept_loop(Api, Mode, L, Conns, Owner).

echo(once, Api, Mod, S) ->
    ok = setopts(Api, S, [{active, once}]),
    receive
        {tcp, S, Data} -> ok = Mod:send(S, Data), echo(once, Api, Mod, S);
        {tcp_closed, S} -> ok;
        {tcp_error, S, _} -> ok
    end;
echo(n, Api, Mod, S) ->
    ok = setopts(Api, S, [{active, ?ACTIVE_N}]),
    echo_n(Api, Mod, S);
echo(passive, Api, Mod, S) ->
    case Mod:recv(S, 0) of
        {ok, Data} -> ok = Mod:send(S, Data), echo(passive, Api, Mod, S);
        {error, _} -> ok
    end.

echo_n(Api, Mod, S) ->
    receive
        {tcp, S, Data} -> ok = Mod:send(S, Data), echo_n(Api, Mod, S);
        {tcp_passive, S} -> echo(n, Api, Mod, S);
        {tcp_closed, S} -> ok;
        {tcp_error, S, _} -> ok
    end.

%%% ------------------------------------------------------------------
%%% Clients (each in its own BEAM)
%%% ------------------------------------------------------------------

%% @doc Lock-step round trips of ?RTT_SIZE bytes: Warmup ms, then prints
%% `go', then Duration ms, then prints `done Count Microseconds'.
-spec rtt_client(inet:port_number(), pos_integer(), pos_integer(), pos_integer()) ->
          no_return().
rtt_client(Port, Warmup, Duration, Size) ->
    {ok, S} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}, {nodelay, true}]),
    Msg = binary:copy(<<"x">>, Size),
    _ = rtts(S, Msg, Size, Warmup),
    io:format("go~n"),
    {N, Us} = rtts(S, Msg, Size, Duration),
    io:format("done ~b ~b~n", [N, Us]),
    erlang:halt(0).

rtts(S, Msg, Size, Ms) ->
    T0 = erlang:monotonic_time(microsecond),
    rtts(S, Msg, Size, T0, T0 + Ms * 1000, 0).

rtts(S, Msg, Size, T0, End, N) ->
    ok = gen_tcp:send(S, Msg),
    {ok, _} = gen_tcp:recv(S, Size),
    case N band 63 of
        63 ->
            Now = erlang:monotonic_time(microsecond),
            case Now >= End of
                true -> {N + 1, Now - T0};
                false -> rtts(S, Msg, Size, T0, End, N + 1)
            end;
        _ ->
            rtts(S, Msg, Size, T0, End, N + 1)
    end.

%% @doc Pipelined 17-byte messages, Count a write, at most Window writes
%% unanswered: Warmup ms, then prints `go', then Duration ms, then prints
%% `done EchoedBytes Microseconds'.
-spec pipe_client(inet:port_number(), pos_integer(), pos_integer(), pos_integer(),
                  pos_integer()) -> no_return().
pipe_client(Port, Warmup, Duration, Count, Window) ->
    {ok, S} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}, {nodelay, true}]),
    Write = binary:copy(<<"0123456789abcdef\n">>, Count),
    Max = Window * byte_size(Write),
    T0 = erlang:monotonic_time(microsecond),
    {InFlight, _} = pipe(S, Write, Max, 0, T0 + Warmup * 1000, 0),
    io:format("go~n"),
    T1 = erlang:monotonic_time(microsecond),
    {_, Echoed} = pipe(S, Write, Max, InFlight, T1 + Duration * 1000, 0),
    io:format("done ~b ~b~n", [Echoed, erlang:monotonic_time(microsecond) - T1]),
    erlang:halt(0).

pipe(S, Write, Max, InFlight, End, Echoed) when InFlight + byte_size(Write) =< Max ->
    ok = gen_tcp:send(S, Write),
    pipe(S, Write, Max, InFlight + byte_size(Write), End, Echoed);
pipe(S, Write, Max, InFlight, End, Echoed) ->
    {ok, Data} = gen_tcp:recv(S, 0),
    case erlang:monotonic_time(microsecond) >= End of
        true -> {InFlight - byte_size(Data), Echoed + byte_size(Data)};
        false -> pipe(S, Write, Max, InFlight - byte_size(Data), End, Echoed + byte_size(Data))
    end.

%% @doc Opens N idle connections, prints `ready N', holds them until the
%% end of stdin.
-spec idle_client(inet:port_number(), pos_integer()) -> no_return().
idle_client(Port, N) ->
    Socks = [begin
                 {ok, S} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
                 S
             end || _ <- lists:seq(1, N)],
    io:format("ready ~b~n", [length(Socks)]),
    _ = io:get_line(""),
    erlang:halt(0).

%%% ------------------------------------------------------------------
%%% The runner
%%% ------------------------------------------------------------------

%% @doc Runs the measurements; Opts: rounds, warmup and duration (ms),
%% conns (idle), ebin (sluice's), dir (this module's beam).
-spec main(map(), [lockstep | pipeline | idle]) -> ok.
main(Opts, Scenarios) ->
    Rounds = maps:get(rounds, Opts),
    Cells = [{Sc, Mode} || Sc <- Scenarios, Mode <- modes(Sc)],
    Results = lists:append(
                [begin
                     progress("round ~b/~b", [R, Rounds]),
                     [{Sc, Mode, Api, R, run(Sc, Mode, Api, Opts)}
                      || {Sc, Mode} <- Cells, Api <- rotate(?APIS, R)]
                 end || R <- lists:seq(1, Rounds)]),
    report(Scenarios, Results, Opts).

modes(idle) -> [once, passive];
modes(_) -> ?MODES.

rotate(L, R) ->
    K = R rem length(L),
    lists:nthtail(K, L) ++ lists:sublist(L, K).

progress(Fmt, Args) ->
    io:format(standard_error, Fmt ++ "~n", Args).

run(Sc, Mode, Api, Opts) ->
    Buffer = case Sc of
                 pipeline -> maps:get(buffer, Opts);
                 _ -> default
             end,
    Server = start_server(Api, Mode, Buffer, Opts),
    try measure(Sc, Server, Opts) of
        Result ->
            progress("  ~s ~s ~s: ~p", [Sc, Mode, Api, Result]),
            Result
    after
        stop(Server)
    end.

measure(lockstep, {_, Port, OsPid}, Opts = #{warmup := W, duration := D}) ->
    Client = start("0", erl(Opts, io_lib:format("socket_bench:rtt_client(~b, ~b, ~b, ~b)",
                                                [Port, W, D, ?RTT_SIZE]))),
    "go" = line(Client, W + 10000),
    Cpu0 = cpu_ticks(OsPid),
    Done = line(Client, D + 10000),
    Cpu1 = cpu_ticks(OsPid),
    stop(Client),
    ["done", N, Us] = string:lexemes(Done, " "),
    Rate = list_to_integer(N) / (list_to_integer(Us) / 1.0e6),
    Cpu = (Cpu1 - Cpu0) / clk_tck(),
    #{rate => Rate,
      cpu_us => Cpu * 1.0e6 / list_to_integer(N),
      cpu_share => Cpu / (list_to_integer(Us) / 1.0e6)};
measure(pipeline, {_, Port, OsPid}, Opts = #{warmup := W, duration := D}) ->
    Client = start("1", erl(Opts, io_lib:format("socket_bench:pipe_client(~b, ~b, ~b, ~b, ~b)",
                                                [Port, W, D, ?PIPE_WRITE, ?PIPE_WINDOW]))),
    {os_pid, ClientPid} = erlang:port_info(Client, os_pid),
    "go" = line(Client, W + 10000),
    Cpu0 = cpu_ticks(OsPid),
    ClientCpu0 = cpu_ticks(ClientPid),
    Done = line(Client, D + 10000),
    Cpu1 = cpu_ticks(OsPid),
    ClientCpu1 = cpu_ticks(ClientPid),
    stop(Client),
    ["done", Bytes, Us] = string:lexemes(Done, " "),
    Secs = list_to_integer(Us) / 1.0e6,
    Cpu = (Cpu1 - Cpu0) / clk_tck(),
    #{rate => list_to_integer(Bytes) / Secs,
      cpu_us => Cpu * 1.0e6 / (list_to_integer(Bytes) / 1048576),
      cpu_share => Cpu / Secs,
      client_share => (ClientCpu1 - ClientCpu0) / clk_tck() / Secs};
measure(idle, {_, Port, _} = Server, Opts = #{conns := N}) ->
    Base = mem(Server),
    Client = start("1", erl(Opts, io_lib:format("socket_bench:idle_client(~b, ~b)", [Port, N]))),
    "ready " ++ _ = line(Client, 60000),
    Held = wait_conns(Server, N, 100),
    stop(Client),
    [T0, P0, _, R0] = Base,
    [T1, P1, _, R1] = Held,
    #{bytes => (T1 - T0) / N, procs => (P1 - P0) / N, rss => (R1 - R0) * 1024 / N}.

wait_conns(Server, N, 0) ->
    error({connections_not_up, N, mem(Server)});
wait_conns(Server, N, Tries) ->
    case mem(Server) of
        [_, _, N, _] = M -> M;
        _ -> timer:sleep(100), wait_conns(Server, N, Tries - 1)
    end.

mem({Port, _, _}) ->
    true = port_command(Port, "mem\n"),
    "mem " ++ Rest = line(Port, 30000),
    [list_to_integer(X) || X <- string:lexemes(Rest, " ")].

%% The server, pinned to core 0.
start_server(Api, Mode, Buffer, Opts) ->
    Port = start("0", erl(Opts, io_lib:format("socket_bench:server(~s, ~s, ~p)",
                                              [Api, Mode, Buffer]))),
    "port " ++ P = line(Port, 10000),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    {Port, list_to_integer(P), OsPid}.

erl(#{ebin := Ebin, dir := Dir, erl_flags := Flags}, Eval) ->
    [os:find_executable("erl"), "-noshell" | string:lexemes(Flags, " ")]
        ++ ["-pa", Ebin, "-pa", Dir, "-eval", lists:flatten(Eval)].

start(Core, Cmd) ->
    open_port({spawn_executable, taskset()},
              [{args, ["-c", Core | Cmd]}, {line, 1024}, use_stdio, exit_status, binary]).

taskset() -> os:find_executable("taskset").

stop({Port, _, _}) -> stop(Port);
stop(Port) ->
    catch port_close(Port),
    ok.

line(Port, Timeout) ->
    receive
        {Port, {data, {eol, Line}}} -> binary_to_list(Line);
        {Port, {exit_status, S}} -> error({exited, S})
    after Timeout -> error(timeout)
    end.

%% utime + stime of an OS process, in clock ticks.
cpu_ticks(OsPid) ->
    {ok, Stat} = file:read_file(["/proc/", integer_to_list(OsPid), "/stat"]),
    %% The fields after the command name (which may hold spaces).
    [_, After] = binary:split(Stat, <<") ">>),
    Fields = binary:split(After, <<" ">>, [global]),
    binary_to_integer(lists:nth(12, Fields)) + binary_to_integer(lists:nth(13, Fields)).

clk_tck() ->
    list_to_integer(string:trim(os:cmd("getconf CLK_TCK"))).

%%% ------------------------------------------------------------------
%%% The table
%%% ------------------------------------------------------------------

report(Scenarios, Results, Opts) ->
    io:format("~n~b rounds; warmup ~b ms, window ~b ms; pipeline servers' buffer: ~p; "
              "idle: ~b connections; emulator flags: \"~s\"~n~n",
              [maps:get(rounds, Opts), maps:get(warmup, Opts), maps:get(duration, Opts),
               maps:get(buffer, Opts), maps:get(conns, Opts), maps:get(erl_flags, Opts)]),
    [report(Sc, Results) || Sc <- Scenarios],
    ok.

report(idle, Results) ->
    io:format("| idle | API | BEAM bytes/conn | processes/conn | RSS bytes/conn "
              "| bytes vs gen_tcp_socket |~n"
              "|---|---|---:|---:|---:|---:|~n"),
    [begin
         Med = fun(A, K) -> median([maps:get(K, R) || {idle, M, A2, _, R} <- Results,
                                                      M =:= Mode, A2 =:= A]) end,
         Ref = Med(gen_tcp_socket, bytes),
         [io:format("| ~s | ~s | ~s | ~.2f | ~s | ~.2f |~n",
                    [Mode, A, fmt(Med(A, bytes)), Med(A, procs), fmt(Med(A, rss)),
                     Med(A, bytes) / Ref])
          || A <- ?APIS]
     end || Mode <- modes(idle)],
    io:format("~n");
report(Sc, Results) ->
    {Unit, CpuUnit} = case Sc of
                          lockstep -> {"round trips/s", "server CPU us/round trip"};
                          pipeline -> {"echoed MB/s", "server CPU ms/MiB"}
                      end,
    io:format("| ~s | API | ~s (median, range) | ~s | server CPU share | rate vs gen_tcp_socket "
              "(per round) | CPU vs gen_tcp_socket |~n|---|---|---:|---:|---:|---:|---:|~n",
              [Sc, Unit, CpuUnit]),
    {Scale, CpuScale} = case Sc of lockstep -> {1, 1}; pipeline -> {1.0e-6, 1.0e-3} end,
    [begin
         Runs = fun(A) -> lists:sort([{R, Res} || {S2, M, A2, R, Res} <- Results,
                                                   S2 =:= Sc, M =:= Mode, A2 =:= A]) end,
         Ref = Runs(gen_tcp_socket),
         [begin
              Mine = Runs(A),
              Rates = [maps:get(rate, X) * Scale || {_, X} <- Mine],
              Pairs = lists:zip(Mine, Ref),
              Ratios = [maps:get(rate, X) / maps:get(rate, Y) || {{_, X}, {_, Y}} <- Pairs],
              Cpus = [maps:get(cpu_us, X) * CpuScale || {_, X} <- Mine],
              CpuRatios = [maps:get(cpu_us, X) / maps:get(cpu_us, Y) || {{_, X}, {_, Y}} <- Pairs],
              Shares = [maps:get(cpu_share, X) || {_, X} <- Mine],
              io:format("| ~s | ~s | ~s (~s-~s) | ~.2f | ~.2f | ~.2f (~s) | ~.2f |~n",
                        [Mode, A, fmt(median(Rates)), fmt(lists:min(Rates)), fmt(lists:max(Rates)),
                         median(Cpus), median(Shares), median(Ratios),
                         lists:join(" ", [io_lib:format("~.2f", [X]) || X <- Ratios]),
                         median(CpuRatios)])
          end || A <- ?APIS]
     end || Mode <- ?MODES],
    io:format("~n").

fmt(X) when X >= 100 -> float_to_list(float(X), [{decimals, 0}]);
fmt(X) -> float_to_list(float(X), [{decimals, 1}]).

median(Xs) ->
    S = lists:sort(Xs),
    N = length(S),
    case N rem 2 of
        1 -> lists:nth((N + 1) div 2, S);
        0 -> (lists:nth(N div 2, S) + lists:nth(N div 2 + 1, S)) / 2
    end.
