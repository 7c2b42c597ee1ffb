%% @doc `bin/sluice idle-memory': what an idle connection costs on each
%% backend. In this VM it starts a ping listener on the backend, has the C
%% load engine (another OS process, so its sockets are not counted here)
%% open N connections that each get one Pong and then stay silent, and
%% reads the VM's memory before and after: erlang:memory/0, the
%% connection processes, the driver allocator (the inet driver's state of
%% each port, the socket NIF's own allocations), and the VM's resident
%% set (which also holds what the socket NIF allocates outside the Erlang
%% allocators' view). Per connection = (after - before) / N, read once every
%% connection has gone to sleep as an idle connection does: parked on inet
%% (quiet for `--park-after': the process exits, its socket waits in its
%% supervisor), hibernated on socket (quiet for ?HIBERNATE_MS). Both are
%% short here so that the measurement does not wait for the library's
%% defaults.
-module(sluice_cmd_idle_memory).

-export([run/1, check/1, specs/0, measure/4, allocator_in_use/1]).

-define(HIBERNATE_MS, 200).
%% Descriptors kept free beside the connections: the engine's port, the
%% shell os:cmd/1 starts, files the code server opens.
-define(FD_SPARE, 16).
%% RSS grows and shrinks by whole pages.
-define(PAGE, 4096).
-define(ABOUT, "Memory per idle connection on the inet and the socket backend: a ping\n"
        "listener in this VM, N connections from the C load engine, each idle after\n"
        "one Ping/Pong; the VM's memory before and after, divided by N.").

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    O = fun sluice_cli_args:opt/4,
    [O(conns, {integer, 1, 15000}, 1000, "idle connections per backend"),
     O(backend, {enum, [both, inet, socket]}, both, "backend(s) to measure"),
     O(park_after, timeout, 300,
       "park inet connections quiet this long (infinity: they hibernate, as on socket)")].

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    sluice_cli_args:with_options("idle-memory", ?ABOUT, specs(), Args,
                                 fun(Opts) ->
                                         case sluice_build:program("sluice-load") of
                                             {ok, Engine} -> measure_all(Opts, Engine);
                                             {error, Msg} -> {error, 1, Msg}
                                         end
                                 end).

%% @doc The options of `Args', or run/1's usage error; nothing starts.
-spec check([string()]) -> {ok, map()} | help | {error, 2, string()}.
check(Args) ->
    sluice_cli_args:check(specs(), Args, fun(_) -> ok end).

measure_all(#{conns := N, backend := B, park_after := Park}, Engine) ->
    {ok, _} = application:ensure_all_started(sluice),
    ok = sluice_signal:install(self()),
    Backends = case B of both -> [inet, socket]; _ -> [B] end,
    try ok = room_for(N, sluice_procfs:open_fds(), sluice_procfs:open_file_limit()),
        [measure(Backend, N, Engine, Park) || Backend <- Backends] of
        Results -> print(Results, N)
    catch
        throw:interrupted ->
            say("interrupted: nothing measured"),
            130;
        throw:{failed, Msg} ->
            {error, 1, Msg}
    end.

print(Results, N) ->
    Cols = [total, processes, processes_used, conn_procs, socket_registry, system,
            driver_alloc, rss],
    io:format("~-8s ~6s~s~n", ["backend", "conns",
                               [io_lib:format(" ~15s", [C]) || C <- Cols]]),
    [io:format("~-8s ~6b~s~n", [Bk, C, [io_lib:format(" ~15s", [cell(maps:get(K, R))])
                                         || K <- Cols]])
     || #{backend := Bk, conns := C} = R <- Results],
    io:format("bytes per idle connection, after a garbage collection of every process:~n"
              "total, processes, processes_used, system: erlang:memory/0 (processes less "
              "processes_used: freed process\nstructures the allocator keeps for reuse; "
              "parked connections leave theirs there); conn_procs: the connection "
              "processes;~nsocket_registry: OTP's registry of socket NIF sockets;~n"
              "driver_alloc: the driver allocator's blocks in use (each inet port's driver "
              "state, the socket NIF's\nallocations), part of system; rss: the VM's resident set "
              "(/proc/self/status VmRSS), which also sees the NIF's own allocations~n"),
    Noise = [F || R <- Results, {below, F, _} <- maps:values(R)],
    Noise =/= [] andalso
        io:format("<X: this run cannot tell the change from noise (two snapshots of the idle VM "
                  "before the connections\nalready differed by up to ~b bytes; RSS moves in "
                  "pages): a connection costs less than X bytes of it.\nMore --conns than ~b "
                  "resolve it.~n", [lists:max(Noise), N]),
    0.

%% `ok' when this VM, with `Open' descriptors open, can accept `N' more
%% under its limit (with a few to spare for the engine's pipes and the
%% shell that stops it); else throws `{failed, Message}'. Found out before the
%% connections: past the limit, accepts fail with emfile and the run
%% waits for connections that never come (a shell's default `ulimit -n'
%% is 1024, less than the default --conns 1000 needs with the VM's own).
room_for(N, Open, Limit) when is_integer(Limit), Open + N + ?FD_SPARE > Limit ->
    throw({failed, lists:flatten(
                     io_lib:format("--conns ~b needs ~b descriptors beside the ~b this VM has "
                                   "open, over its limit of ~b (ulimit -n): raise the limit "
                                   "or lower --conns", [N, N + ?FD_SPARE, Open, Limit]))});
room_for(_, _, _) ->
    ok.

cell({bytes, B}) -> integer_to_list(B);
cell({below, _Floor, PerConn}) -> "<" ++ integer_to_list(PerConn).

%% @doc Measure one backend: a map of bytes per connection, each
%% `{bytes, B}' or, when the change is within the run's noise, `{below,
%% Noise, B}' (less than B bytes per connection). Throws `interrupted' on
%% SIGTERM and `{failed, Message}'.
-spec measure(inet | socket, pos_integer(), file:filename(), timeout()) -> map().
measure(Backend, N, Engine, Park) ->
    Name = {?MODULE, Backend},
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0,
                                            transport => Backend, idle_timeout => infinity,
                                            hibernate_after => ?HIBERNATE_MS,
                                            park_after => Park,
                                            max_connections => infinity,
                                            handler => {sluice_proto_ping, []}}),
    #{port := Port} = sluice:info(Name),
    try
        settle(),
        Before0 = snapshot(Name),
        settle(),
        Before = snapshot(Name),
        say("~s: opening ~b connections to 127.0.0.1:~b", [Backend, N, Port]),
        T0 = erlang:monotonic_time(millisecond),
        Eng = start_engine(Engine, N, Port),
        try
            wait_connections(Name, N, 30000),
            say("~s: ~b connections up in ~.1f s; waiting for them to ~s", [Backend, N,
                (erlang:monotonic_time(millisecond) - T0) / 1000,
                case Backend =:= inet andalso Park =/= infinity of
                    true -> io_lib:format("park (--park-after ~b ms)", [Park]);
                    false -> io_lib:format("hibernate (after ~b ms)", [?HIBERNATE_MS])
                end]),
            pause(1000),
            wait_asleep(Name, N, Backend =:= inet andalso Park =/= infinity, 10000),
            settle(),
            After = snapshot(Name),
            say("~s: measured", [Backend]),
            maps:merge(#{backend => Backend, conns => N},
                       maps:map(fun(K, V) -> per_conn(V - maps:get(K, Before),
                                                      noise(K, Before0, Before), N)
                                end, After))
        after
            stop_engine(Eng)
        end
    after
        ok = sluice:stop_listener(Name)
    end.

%% A change no larger than twice what two snapshots of the same idle VM
%% differ by (or than a page, for RSS) cannot be told from noise: the
%% cost is below it, not negative.
per_conn(Delta, Noise, N) ->
    Floor = 2 * Noise,
    if
        Delta > Floor -> {bytes, round(Delta / N)};
        Floor =:= 0 -> {bytes, 0};
        true -> {below, Noise, max(1, ceil(Floor / N))}
    end.

noise(rss, A, B) -> max(?PAGE, abs(maps:get(rss, B) - maps:get(rss, A)));
noise(K, A, B) -> abs(maps:get(K, B) - maps:get(K, A)).

%% The engine holds the connections until it is stopped (once the memory
%% is read), so that the run takes no longer than the measurement.
start_engine(Engine, N, Port) ->
    Args = ["--scenario", "connect", "--conns", integer_to_list(N), "--probe", "ping",
            "--rate", "0", "--threads", "1", "--port", integer_to_list(Port),
            "--duration", "3600", "--quiet", "--source-ips", "127.0.0.2-127.0.0.9",
            "--go-stdin"],
    P = open_port({spawn_executable, Engine}, [{args, Args}, exit_status, binary,
                                               stderr_to_stdout, hide]),
    %% --go-stdin: the engine also ends when its standard input closes
    %% (port_close/1, or this VM gone), not only on SIGTERM
    true = port_command(P, "go\n"),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    {P, OsPid}.

%% SIGTERM through a shell, which needs descriptors this VM may not have
%% left (the connections that failed with emfile): then closing the port
%% ends the engine (--go-stdin), and the run's own error is the one told.
stop_engine({P, OsPid}) ->
    try os:cmd("kill -TERM " ++ integer_to_list(OsPid)) of
        _ -> receive {P, {exit_status, _}} -> ok after 10000 -> catch port_close(P), ok end
    catch error:_ ->
            _ = (catch port_close(P)),
            ok
    end.

wait_connections(Name, N, Timeout) when Timeout > 0 ->
    case sluice:info(Name) of
        #{connections := C} when C >= N -> ok;
        _ -> pause(50), wait_connections(Name, N, Timeout - 50)
    end;
wait_connections(Name, N, _) ->
    #{connections := C} = sluice:info(Name),
    throw({failed, lists:flatten(io_lib:format("only ~b of ~b connections came up in 30 s",
                                               [C, N]))}).

%% Every connection parked (AllParked) or hibernated.
wait_asleep(Name, N, AllParked, Timeout) when Timeout > 0 ->
    case asleep(Name, AllParked) >= N of
        true -> ok;
        false -> pause(1000), wait_asleep(Name, N, AllParked, Timeout - 1000)
    end;
wait_asleep(Name, N, AllParked, _) ->
    throw({failed, lists:flatten(io_lib:format("only ~b of ~b connections ~s in 10 s",
                                               [asleep(Name, AllParked), N,
                                                case AllParked of
                                                    true -> "parked";
                                                    false -> "hibernated"
                                                end]))}).

asleep(Name, true) ->
    maps:get(parked, sluice:info(Name));
asleep(Name, false) ->
    %% Reading a process's current function runs that process, which the
    %% sweep takes for activity: look much less often than hibernate_after.
    length([P || P <- sluice:connections(Name),
                 process_info(P, current_function) =:= {current_function, {erlang, hibernate, 3}}]).

%% @doc Bytes in blocks an allocator has handed out and not had back, over
%% all its instances and carriers. What the inet driver allocates for a
%% port (about 1,490 bytes on OTP 25: its descriptor and buffers) is
%% here, where erlang:port_info(P, memory) sees only the port's own
%% structure (40 bytes) and erlang:memory/0 puts it in `system' with
%% everything else.
-spec allocator_in_use(atom()) -> non_neg_integer().
allocator_in_use(Alloc) ->
    case erlang:system_info({allocator, Alloc}) of
        Instances when is_list(Instances) ->
            lists:sum([Size || {instance, _, Props} <- Instances,
                               {Carriers, Cs} <- Props, Carriers =:= mbcs orelse Carriers =:= sbcs,
                               {blocks, Types} <- Cs, {_Type, Stats} <- Types,
                               {size, Size, _, _} <- Stats]);
        false ->
            0
    end.

settle() ->
    pause(500),
    _ = [erlang:garbage_collect(P) || P <- processes(), P =/= self()],
    pause(200).

%% A sleep that SIGTERM cuts short.
pause(Ms) ->
    receive {sluice_signal, sigterm} -> throw(interrupted) after Ms -> ok end.

say(Msg) -> say(Msg, []).
say(Fmt, Args) -> io:format(standard_error, "idle-memory: " ++ Fmt ++ "~n", Args).

snapshot(Name) ->
    M = erlang:memory(),
    Conns = sluice:connections(Name),
    #{total => proplists:get_value(total, M),
      processes => proplists:get_value(processes, M),
      processes_used => proplists:get_value(processes_used, M),
      conn_procs => lists:sum([B || P <- Conns, {memory, B} <- [process_info(P, memory)]]),
      socket_registry => case whereis(socket_registry) of
                             undefined -> 0;
                             Reg -> element(2, process_info(Reg, memory))
                         end,
      system => proplists:get_value(system, M),
      driver_alloc => allocator_in_use(driver_alloc),
      rss => sluice_procfs:rss_bytes()}.
