%% @doc `bin/sluice soak' (`make soak'): minutes of mixed load and abuse
%% against one in-VM ack listener, then a check that the VM is back where it
%% started: memory, process, port and descriptor counts return to their
%% baseline, no connection is left, no well-behaved client lost an ack.
%%
%% Load: the C engine pipelining (restarted if it ends) and long-lived
%% bystander connections checked every round. Abuse, from the library's
%% test-support clients (sluice_abuse_client), in a few worker processes
%% picking at random: oversized Len, random bytes,
%% one-byte writes, a trickled frame, resets mid-frame, connect/close
%% storms, half-closed clients, silent clients, clients that never read.
-module(sluice_cmd_soak).

-export([run/1, check/1, specs/0]).
-export([halt_on_sigterm/1]).

-define(PROGRESS_MS, 30000).
-define(ABOUT, "Mixed load and abuse against an in-VM ack listener for N minutes; then\n"
        "check that memory, processes, ports and descriptors return to their baseline,\n"
        "and that no well-behaved client lost an ack.").

-define(NAME, sluice_soak).
-define(WORKERS, 4).
-define(BYSTANDERS, 8).
-define(MAX_FRAME, 65536).
-define(IDLE_MS, 2000).
-define(FRAME_MS, 1000).
%% Allowed drift between baseline and after: memory (bytes), processes, ports.
-define(MEM_SLACK, 16 * 1024 * 1024).

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    O = fun sluice_cli_args:opt/4,
    [(O(minutes, {integer, 1, 1440}, 10, "how long to run, in minutes"))#{meta => "MINUTES"},
     (O(seconds, {integer, 0, 86400}, 0, "how long to run, in seconds (overrides --minutes)"))
         #{meta => "SECONDS"},
     O(transport, {enum, [inet, socket]}, inet, "listener transport"),
     O(engine_conns, {integer, 0, 1000}, 4, "pipelining connections from the C engine (0: none)")].

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    sluice_cli_args:with_options("soak", ?ABOUT, specs(), Args, fun start/1).

%% @doc The options of `Args', or run/1's usage error; nothing starts.
-spec check([string()]) -> {ok, map()} | help | {error, 2, string()}.
check(Args) ->
    sluice_cli_args:check(specs(), Args, fun(_) -> ok end).

start(O) ->
    Secs = case maps:get(seconds, O) of 0 -> 60 * maps:get(minutes, O); S -> S end,
    case engine(maps:get(engine_conns, O)) of
        {ok, Exe} -> soak(Secs, O#{engine => Exe});
        {error, Msg} -> {error, 1, Msg}
    end.

engine(0) -> {ok, none};
engine(_) -> sluice_build:program("sluice-load").

soak(Secs, O) ->
    {ok, _} = application:ensure_all_started(sluice),
    ok = halt_on_signal(erlang:monotonic_time(millisecond)),
    {ok, _} = sluice:start_listener(?NAME, #{ip => {127, 0, 0, 1}, port => 0,
                                             transport => maps:get(transport, O),
                                             idle_timeout => ?IDLE_MS,
                                             handler => {sluice_proto_ack,
                                                         #{ack => each, max_frame => ?MAX_FRAME,
                                                           frame_timeout => ?FRAME_MS}}}),
    #{port := Port} = sluice:info(?NAME),
    %% A first round of each kind, so that every module is loaded and every
    %% table exists before the baseline is taken.
    _ = [abuse(K, Port) || K <- kinds()],
    ok = wait_no_connections(?IDLE_MS * 3),
    Base = snapshot(),
    say("soak: ~b s on 127.0.0.1:~b (~p); baseline ~s", [Secs, Port, maps:get(transport, O),
                                                         show(Base)]),
    Deadline = erlang:monotonic_time(millisecond) + Secs * 1000,
    Self = self(),
    Workers = [spawn_link(fun() -> Self ! {worker, self(), worker(Port, Deadline, #{})} end)
               || _ <- lists:seq(1, ?WORKERS)],
    _ = spawn_link(fun() -> Self ! {bystanders, bystanders(Port, Deadline)} end),
    Started = erlang:monotonic_time(millisecond),
    _ = spawn_link(fun() -> progress(Started, Deadline) end),
    Engine = engine_loop(maps:get(engine, O), Port, Deadline, maps:get(engine_conns, O)),
    Counts = [receive {worker, W, C} -> C end || W <- Workers],
    BystanderResult = receive {bystanders, B} -> B end,
    EngineResult = stop_engine(Engine),
    Left = case wait_no_connections(?IDLE_MS * 3 + 5000) of ok -> 0; {left, N} -> N end,
    Info = sluice:info(?NAME),
    %% Compared with the listener still up, as the baseline was.
    After = snapshot(),
    ok = sluice:stop_listener(?NAME),
    Abuse = lists:foldl(fun add_counts/2, #{}, Counts),
    Checks = [{"no connection left", Left =:= 0},
              {"bystanders got every ack", element(1, BystanderResult) =:= ok},
              {"engine saw no ack error", EngineResult =/= protocol_error},
              {"memory back to baseline (+16 MB)",
               maps:get(memory, After) - maps:get(memory, Base) < ?MEM_SLACK},
              {"processes back to baseline", maps:get(processes, After) =< maps:get(processes, Base)},
              {"ports back to baseline", maps:get(ports, After) =< maps:get(ports, Base)},
              {"descriptors back to baseline", maps:get(fds, After) =< maps:get(fds, Base)}],
    say("soak: done after ~b s~n"
        "  baseline: ~s~n  after:    ~s~n"
        "  listener: accepted ~b, closed ~b, rejected ~b, ~b MB read, ~b MB written~n"
        "  close reasons: ~p~n  accept errors: ~p~n"
        "  abuse rounds: ~p~n  bystanders: ~p~n  engine: ~p",
        [Secs, show(Base), show(After), maps:get(accepted, Info), maps:get(closed, Info),
         maps:get(rejected, Info), maps:get(bytes_in, Info) bsr 20, maps:get(bytes_out, Info) bsr 20,
         maps:get(close_reasons, Info), maps:get(accept_errors, Info), Abuse, BystanderResult,
         EngineResult]),
    _ = [say("  ~s: ~s", [What, case Ok of true -> "ok"; false -> "FAILED" end]) || {What, Ok} <- Checks],
    case lists:all(fun({_, Ok}) -> Ok end, Checks) of
        true -> 0;
        false -> 1
    end.

%% SIGTERM (Ctrl-C) mid-run: what was running is abandoned, so nothing can
%% be checked; exit 130 rather than OTP's default stop, which exits 0 as
%% if the soak had passed. The C engine this VM started is stopped first.
halt_on_signal(T0) ->
    sluice_signal:install(spawn(?MODULE, halt_on_sigterm, [T0])).

%% @private The process halt_on_signal/1 starts.
-spec halt_on_sigterm(integer()) -> no_return().
halt_on_sigterm(T0) ->
    receive {sluice_signal, sigterm} -> ok end,
    io:format(standard_error, "soak: interrupted after ~b s: nothing checked~n",
              [(erlang:monotonic_time(millisecond) - T0) div 1000]),
    _ = [os:cmd("kill -TERM " ++ integer_to_list(OsPid))
         || P <- erlang:ports(), {os_pid, OsPid} <- [erlang:port_info(P, os_pid)],
            {name, Name} <- [erlang:port_info(P, name)],
            filename:basename(Name) =:= "sluice-load"],
    timer:sleep(200),
    erlang:halt(130, [{flush, true}]).

add_counts(C, Acc) ->
    maps:fold(fun(K, V, A) -> maps:update_with(K, fun(X) -> X + V end, V, A) end, Acc, C).

%% A line every 30 s on a long run: time left, connections now, what the
%% listener has seen so far and the VM's memory.
progress(Started, Deadline) ->
    Left = Deadline - erlang:monotonic_time(millisecond),
    case Left > ?PROGRESS_MS of
        false -> ok;
        true ->
            timer:sleep(?PROGRESS_MS),
            #{connections := C, accepted := A, bytes_in := In} = sluice:info(?NAME),
            say("soak: ~b s of ~b: ~b connections, ~b accepted, ~b MB read; VM ~b MB, ~b processes",
                [(erlang:monotonic_time(millisecond) - Started) div 1000,
                 (Deadline - Started) div 1000, C, A, In bsr 20,
                 erlang:memory(total) bsr 20, erlang:system_info(process_count)]),
            progress(Started, Deadline)
    end.

say(Fmt, Args) ->
    io:format(Fmt ++ "~n", Args).

%%% ------------------------------------------------------------------
%%% What the VM holds
%%% ------------------------------------------------------------------

snapshot() ->
    _ = [erlang:garbage_collect(P) || P <- processes()],
    timer:sleep(200),
    #{memory => erlang:memory(total), processes => erlang:system_info(process_count),
      ports => erlang:system_info(port_count), fds => sluice_procfs:open_fds()}.

show(#{memory := M, processes := P, ports := Po, fds := F}) ->
    io_lib:format("memory ~.1f MB, ~b processes, ~b ports, ~b descriptors", [M / 1048576, P, Po, F]).

wait_no_connections(Ms) when Ms =< 0 ->
    {left, maps:get(connections, sluice:info(?NAME))};
wait_no_connections(Ms) ->
    case sluice:info(?NAME) of
        #{connections := 0} -> ok;
        _ -> timer:sleep(100), wait_no_connections(Ms - 100)
    end.

%%% ------------------------------------------------------------------
%%% Abuse and bystanders
%%% ------------------------------------------------------------------

kinds() ->
    [oversize, random_bytes, one_byte_writes, trickle, reset_mid_frame, storm, half_close,
     silent, never_read].

worker(Port, Deadline, Counts) ->
    case erlang:monotonic_time(millisecond) < Deadline of
        false ->
            Counts;
        true ->
            Kinds = kinds(),
            K = lists:nth(rand:uniform(length(Kinds)), Kinds),
            Outcome = try abuse(K, Port) of R -> R catch C:E -> {crashed, C, E} end,
            Key = case Outcome of ok -> K; _ -> {K, Outcome} end,
            worker(Port, Deadline, maps:update_with(Key, fun(N) -> N + 1 end, 1, Counts))
    end.

%% One round of one kind; `ok' when the server behaved as it should.
abuse(oversize, Port) ->
    case sluice_abuse_client:oversize(Port, 10, ?MAX_FRAME) of
        #{acks := A, expected := A, ending := closed} -> ok;
        #{ending := E} -> {unexpected, E}
    end;
abuse(random_bytes, Port) ->
    ending(sluice_abuse_client:random_bytes(Port, 12 + rand:uniform(4000), ?IDLE_MS + 3000));
abuse(one_byte_writes, Port) ->
    case sluice_abuse_client:one_byte_writes(Port, 5) of
        #{acks := A, expected := A} -> ok;
        _ -> lost_acks
    end;
abuse(trickle, Port) ->
    %% 100 ms a byte: the 1 s frame timeout ends it after about 10 bytes.
    ending(sluice_abuse_client:trickle(Port, 50, 100));
abuse(reset_mid_frame, Port) ->
    sluice_abuse_client:reset_mid_frame(Port);
abuse(storm, Port) ->
    #{connected := _} = sluice_abuse_client:storm(Port, 100, 4),
    ok;
abuse(half_close, Port) ->
    case sluice_abuse_client:half_close(Port, 500) of
        #{acks := A, expected := A, ending := closed} -> ok;
        #{ending := E} -> {unexpected, E}
    end;
abuse(silent, Port) ->
    ending(sluice_abuse_client:silent(Port, ?IDLE_MS + 3000));
abuse(never_read, Port) ->
    {S, _} = sluice_abuse_client:never_read(Port, 8 * 1024 * 1024, 4, 1000),
    ok = inet:setopts(S, [{linger, {true, 0}}]),
    gen_tcp:close(S).

ending(#{ending := closed}) -> ok;
ending(#{ending := E}) -> {unexpected, E}.

%% Long-lived well-behaved connections: a pipelined batch on each every
%% 200 ms (well inside the idle timeout) for the whole run.
bystanders(Port, Deadline) ->
    Socks = [sluice_abuse_client:connect(Port) || _ <- lists:seq(1, ?BYSTANDERS)],
    bystander_rounds(Socks, Deadline, 0).

bystander_rounds(Socks, Deadline, Rounds) ->
    case erlang:monotonic_time(millisecond) < Deadline of
        false ->
            [gen_tcp:close(S) || S <- Socks],
            {ok, Rounds};
        true ->
            case lists:usort([sluice_abuse_client:pipeline(S, 50, 20) || S <- Socks]) of
                [ok] -> timer:sleep(200), bystander_rounds(Socks, Deadline, Rounds + 1);
                Errors -> {failed, Rounds, Errors}
            end
    end.

%%% ------------------------------------------------------------------
%%% The C engine
%%% ------------------------------------------------------------------

%% Runs the engine for the whole soak in a process of its own, restarting
%% it if it ends early; returns that process.
engine_loop(none, _Port, _Deadline, _Conns) ->
    none;
engine_loop(Exe, Port, Deadline, Conns) ->
    spawn_link(fun() -> engine_runs(Exe, Port, Deadline, Conns, []) end).

engine_runs(Exe, Port, Deadline, Conns, Results) ->
    Secs = (Deadline - erlang:monotonic_time(millisecond)) div 1000,
    case Secs >= 1 of
        false ->
            receive {stop, From} -> From ! {engine, self(), lists:reverse(Results)} end;
        true ->
            P = open_port({spawn_executable, Exe},
                          [{args, ["--scenario", "pipeline", "--port", integer_to_list(Port),
                                   "--conns", integer_to_list(Conns), "--duration",
                                   integer_to_list(Secs), "--ack", "each", "--threads", "1",
                                   "--window", "4096", "--batch", "256", "--quiet"]},
                           exit_status, binary, stderr_to_stdout, hide]),
            Status = engine_wait(P, []),
            engine_runs(Exe, Port, Deadline, Conns, [Status | Results])
    end.

engine_wait(P, Out) ->
    receive
        {P, {data, D}} -> engine_wait(P, [D | Out]);
        {P, {exit_status, 0}} -> ok;
        {P, {exit_status, 1}} -> {protocol_error, iolist_to_binary(lists:reverse(Out))};
        {P, {exit_status, S}} -> {exit, S, iolist_to_binary(lists:reverse(Out))}
    end.

stop_engine(none) ->
    none;
stop_engine(Pid) ->
    Pid ! {stop, self()},
    receive
        {engine, Pid, Results} ->
            case [R || {protocol_error, _} = R <- Results] of
                [] -> Results;
                _ -> protocol_error
            end
    after 60000 -> engine_stuck
    end.
