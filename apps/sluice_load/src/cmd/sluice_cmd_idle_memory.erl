%% @doc `bin/sluice idle-memory': what an idle connection costs on each
%% backend. In this VM it starts a ping listener on the backend, has the C
%% load engine (another OS process, so its sockets are not counted here)
%% open N connections that each get one Pong and then stay silent, and
%% reads the VM's memory before and after: erlang:memory/0, the
%% connection processes, the inet driver's ports, and the VM's resident
%% set (which also holds what the socket NIF allocates outside the Erlang
%% allocators' view). Per connection = (after - before) / N, read once every
%% connection has gone to sleep as an idle connection does: parked on inet
%% (quiet for `--park-after': the process exits, its socket waits in its
%% supervisor), hibernated on socket (quiet for ?HIBERNATE_MS). Both are
%% short here so that the measurement does not wait for the library's
%% defaults.
-module(sluice_cmd_idle_memory).

-export([run/1, specs/0, measure/4]).

-define(HIBERNATE_MS, 200).
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

measure_all(#{conns := N, backend := B, park_after := Park}, Engine) ->
    {ok, _} = application:ensure_all_started(sluice),
    Backends = case B of both -> [inet, socket]; _ -> [B] end,
    Results = [measure(Backend, N, Engine, Park) || Backend <- Backends],
    Cols = [total, processes, processes_used, conn_procs, socket_registry, system,
            ports, rss],
    io:format("~-8s ~6s~s~n", ["backend", "conns",
                               [io_lib:format(" ~15s", [C]) || C <- Cols]]),
    [io:format("~-8s ~6b~s~n", [Bk, C, [io_lib:format(" ~15b", [maps:get(K, R)])
                                         || K <- Cols]])
     || #{backend := Bk, conns := C} = R <- Results],
    io:format("bytes per idle connection, after a garbage collection of every process:~n"
              "total, processes, processes_used, system: erlang:memory/0 (processes less "
              "processes_used: freed process\nstructures the allocator keeps for reuse; "
              "parked connections leave theirs there); conn_procs: the connection "
              "processes;~nsocket_registry: OTP's registry of socket NIF sockets; "
              "ports: inet driver ports;~nrss: the VM's resident set "
              "(/proc/self/status VmRSS), which also sees the NIF's own allocations~n"),
    0.

%% @doc Measure one backend: a map of bytes per connection.
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
    settle(),
    Before = snapshot(Name),
    %% The engine holds the connections long enough to read the memory.
    Cmd = io_lib:format("~s --scenario connect --conns ~b --probe ping --rate 0 --threads 1 "
                        "--port ~b --duration 15 --quiet --source-ips 127.0.0.2-127.0.0.9",
                        [Engine, N, Port]),
    Self = self(),
    spawn_link(fun() -> Self ! {engine, os:cmd(lists:flatten(Cmd))} end),
    ok = wait_connections(Name, N, 30000),
    timer:sleep(1000),
    ok = wait_asleep(Name, N, Backend =:= inet andalso Park =/= infinity, 10000),
    settle(),
    After = snapshot(Name),
    receive {engine, _} -> ok after 30000 -> ok end,
    ok = sluice:stop_listener(Name),
    maps:merge(#{backend => Backend, conns => N},
               maps:map(fun(K, V) -> round((V - maps:get(K, Before)) / N) end, After)).

wait_connections(Name, N, Timeout) when Timeout > 0 ->
    case sluice:info(Name) of
        #{connections := C} when C >= N -> ok;
        _ -> timer:sleep(50), wait_connections(Name, N, Timeout - 50)
    end;
wait_connections(Name, N, _) ->
    error({connections_not_reached, N, sluice:info(Name)}).

%% Every connection parked (AllParked) or hibernated.
wait_asleep(Name, N, AllParked, Timeout) when Timeout > 0 ->
    case asleep(Name, AllParked) >= N of
        true -> ok;
        false -> timer:sleep(1000), wait_asleep(Name, N, AllParked, Timeout - 1000)
    end;
wait_asleep(Name, N, _, _) ->
    error({connections_not_asleep, N, sluice:info(Name)}).

asleep(Name, true) ->
    maps:get(parked, sluice:info(Name));
asleep(Name, false) ->
    %% Reading a process's current function runs that process, which the
    %% sweep takes for activity: look much less often than hibernate_after.
    length([P || P <- sluice:connections(Name),
                 process_info(P, current_function) =:= {current_function, {erlang, hibernate, 3}}]).

settle() ->
    timer:sleep(500),
    _ = [erlang:garbage_collect(P) || P <- processes(), P =/= self()],
    timer:sleep(200).

snapshot(Name) ->
    M = erlang:memory(),
    Ports = lists:sum([Bytes || P <- erlang:ports(),
                                {memory, Bytes} <- [erlang:port_info(P, memory)]]),
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
      ports => Ports,
      rss => sluice_procfs:rss_bytes()}.
