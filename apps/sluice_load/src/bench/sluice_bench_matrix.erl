%% @doc The benchmark matrix: which scenarios, which servers, how each is
%% started and pinned, and the engine options of each scenario.
%%
%% A cell is `{Scenario, Server}'. Every cell whose server is a sluice
%% variant (or the seed) is measured against the C reference server run
%% with the same engine options in the same round.
%%
%% Pinning (DESIGN.md, "Measuring on these machines"): the VM wakes a
%% process on the other core slowly, so a lock-step round trip between
%% cores measures the hypervisor. Lock-step pins server and engine to the
%% same core; every throughput scenario pins the server to core 0 and the
%% engine to core 1, so the server has one core to itself.
-module(sluice_bench_matrix).

-export([scenarios/0, servers/0, default/0, quick/0, check_cell/2, default_active/0,
         scenario/1, ack/2, server_command/4, engine_args/3,
         describe_scenario/1]).

-export_type([scenario/0, server/0, cell/0, paths/0]).

-type scenario() :: lockstep | pipeline | 'pipeline-counted' | conns200 | flood | connrate.
-type server() :: sluice | 'sluice-active-false' | 'sluice-active-once'
                | 'sluice-active-10' | 'sluice-active-100' | 'sluice-active-1000'
                | 'sluice-active-true' | 'sluice-socket' | 'sluice-poll2'
                | 'sluice-socket-poll2' | seed | c.
-type cell() :: {scenario(), server()}.
%% `backend': bin/sluice bench --backend, for every sluice server.
-type paths() :: #{root := file:filename(), priv := file:filename(),
                   erl := file:filename(), seed_ebin := file:filename(),
                   backend => inet | socket}.

-define(ACTIVE_MODES, ['sluice-active-false', 'sluice-active-once', 'sluice-active-10',
                       'sluice-active-100', 'sluice-active-1000', 'sluice-active-true']).

-spec scenarios() -> [scenario()].
scenarios() -> [lockstep, pipeline, 'pipeline-counted', conns200, flood, connrate].

%% The socket backend, and 2 poll threads with 2 poll sets (+IOt 2 +IOp 2)
%% on each backend (issue 5, seed 003).
-define(IO_VARIANTS, ['sluice-socket', 'sluice-poll2', 'sluice-socket-poll2']).

-spec servers() -> [server()].
servers() -> [sluice | ?ACTIVE_MODES] ++ ?IO_VARIANTS ++ [seed, c].

%% @doc The default matrix (`make bench'): every active mode on the
%% pipelined connection and on the flood (the two scenarios where the
%% delivery mode decides the cost), the seed's handler where its own
%% lock-step client and a pipelined client meet it, sluice's defaults on
%% the rest; the socket backend beside the inet one where the issue 5
%% targets judge them (pipeline, lockstep) and on flood and connrate, and
%% the poll-set rows on 200 connections. bench/README.md gives how long it
%% takes.
-spec default() -> [cell()].
default() ->
    dedupe([{lockstep, sluice}, {lockstep, seed}]
           ++ [{pipeline, S} || S <- [sluice | ?ACTIVE_MODES]] ++ [{pipeline, seed}]
           ++ [{'pipeline-counted', sluice}, {conns200, sluice}]
           ++ [{flood, S} || S <- [sluice | ?ACTIVE_MODES]]
           ++ [{connrate, sluice}]
           ++ [{lockstep, 'sluice-socket'}, {pipeline, 'sluice-socket'},
               {flood, 'sluice-socket'}, {connrate, 'sluice-socket'}]
           ++ [{conns200, S} || S <- ?IO_VARIANTS]).

%% @doc The quick matrix (`make bench QUICK=1'): sluice's defaults on every
%% scenario, and on the flood two other active modes to hold them against.
-spec quick() -> [cell()].
quick() ->
    dedupe([{lockstep, sluice}, {pipeline, sluice}, {conns200, sluice},
            {flood, sluice}, {flood, 'sluice-active-once'}, {flood, 'sluice-active-true'},
            {connrate, sluice}, {lockstep, 'sluice-socket'}, {pipeline, 'sluice-socket'}]).

%% A `sluice-active-N' variant with the same N as `bin/sluice serve''s
%% default would measure the `sluice' cell twice: leave it out.
dedupe(Cells) ->
    Default = default_active(),
    [C || {_, Sv} = C <- Cells, active(Sv) =:= none orelse active(Sv) =/= Default].

%% @doc The `--active' that `bin/sluice serve' uses when given none.
-spec default_active() -> false | once | true | pos_integer() | adaptive.
default_active() -> maps:get(active, sluice_opts:defaults()).

active('sluice-active-false') -> false;
active('sluice-active-once') -> once;
active('sluice-active-true') -> true;
active('sluice-active-10') -> 10;
active('sluice-active-100') -> 100;
active('sluice-active-1000') -> 1000;
active(_) -> none.

%% @doc Whether a server can run a scenario.
-spec check_cell(scenario(), server()) -> ok | {error, string()}.
check_cell(Sc, seed) ->
    case maps:get(protocol, scenario(Sc)) of
        ack -> ok;
        P -> {error, lists:flatten(
                       io_lib:format("the seed server speaks only the ack protocol; "
                                     "scenario ~s needs ~s", [Sc, P]))}
    end;
check_cell(_, _) ->
    ok.

%% @doc What a scenario runs. `window' says which server CPU figure is
%% honest for it: `measured' (the engine's measurement window, read by
%% interpolating samples taken every 100 ms) or `whole_run' (from the
%% engine's start to its exit: a connect burst has no warmup).
-spec scenario(scenario()) -> map().
scenario(lockstep) ->
    #{protocol => ack, ack => each, server_core => "0", engine_core => "0",
      cpu_window => measured, unit => <<"msg/s">>,
      engine => ["--scenario", "lockstep", "--conns", "1", "--threads", "1"]};
scenario(pipeline) ->
    #{protocol => ack, ack => last, server_core => "0", engine_core => "1",
      cpu_window => measured, unit => <<"msg/s">>,
      engine => ["--scenario", "pipeline", "--conns", "1", "--threads", "1"]};
scenario('pipeline-counted') ->
    (scenario(pipeline))#{ack => counted};
scenario(conns200) ->
    #{protocol => ack, ack => last, server_core => "0", engine_core => "1",
      cpu_window => measured, unit => <<"msg/s">>,
      engine => ["--scenario", "pipeline", "--conns", "200", "--window", "1000",
                 "--threads", "1"]};
scenario(flood) ->
    #{protocol => echo, server_core => "0", engine_core => "1",
      cpu_window => measured, unit => <<"msg/s">>,
      engine => ["--scenario", "flood", "--conns", "4", "--threads", "1"]};
scenario(connrate) ->
    %% 15,000 connects over 8 source addresses (the ephemeral ports of one
    %% address would last only ~2 runs in TIME_WAIT); the connections are
    %% held 0.5 s after the last one is up.
    #{protocol => ping, server_core => "0", engine_core => "1",
      cpu_window => whole_run, unit => <<"conn/s">>,
      warmup => 0, duration => 0.5,
      engine => ["--scenario", "connect", "--conns", "15000",
                 "--source-ips", "127.0.0.2-127.0.0.9", "--probe", "ping",
                 "--rate", "0", "--threads", "1"]}.

%% @doc One line saying what a scenario measures, for the reports.
-spec describe_scenario(scenario()) -> binary().
describe_scenario(lockstep) ->
    <<"1 connection, one frame in flight, ack each; server and engine both on core 0">>;
describe_scenario(pipeline) ->
    <<"1 connection, pipelined 17-byte frames (engine's default window and batch), ack last; "
      "server core 0, engine core 1">>;
describe_scenario('pipeline-counted') ->
    <<"as pipeline, with counted acks">>;
describe_scenario(conns200) ->
    <<"200 connections, window 1000 frames each, ack last; server core 0, engine core 1">>;
describe_scenario(flood) ->
    <<"echo protocol, 4 connections writing 6-byte messages without waiting (seed 000); "
      "rate = echoed messages/s; server core 0, engine core 1">>;
describe_scenario(connrate) ->
    <<"15,000 connects from 127.0.0.2-9, each established when Ping got Pong; "
      "rate = connections/s; server core 0, engine core 1">>.

%% @doc The ack mode a cell runs with: the scenario's, except for the seed,
%% which only acks each frame (its C reference then does the same).
-spec ack(scenario(), server()) -> each | last | counted | none.
ack(Sc, Sv) ->
    case scenario(Sc) of
        #{protocol := ack} when Sv =:= seed -> each;
        #{protocol := ack, ack := A} -> A;
        _ -> none
    end.

%% @doc `{Executable, Args}' that start `Server' for `Scenario' on any free
%% port, printing `listening on IP:PORT' once ready; the caller puts
%% `taskset -c Core' in front.
-spec server_command(server(), scenario(), each | last | counted | none, paths()) ->
          {file:filename(), [string()]}.
server_command(c, Sc, Ack, #{priv := Priv}) ->
    {filename:join(Priv, "sluice-ref"),
     ["--threads", "1", "--port", "0" | proto_args(Sc, Ack)]};
server_command(seed, _Sc, _Ack, #{erl := Erl, seed_ebin := Ebin}) ->
    %% The same VM and the same extra flags as bin/sluice serve gets.
    {Erl, ["+Bi", "-noshell", "-noinput" | erl_flags()]
          ++ ["-pa", Ebin, "-run", "sluice_bench_seed_server", "main", "0"]};
server_command(Sv, Sc, Ack, #{root := Root} = Paths) ->
    Active = case active(Sv) of
                 none -> [];
                 A -> ["--active", atom_or_int(A)]
             end,
    {filename:join([Root, "bin", "sluice"]),
     ["serve", "--port", "0" | proto_args(Sc, Ack)] ++ Active
     ++ io_args(Sv, maps:get(backend, Paths, inet))}.

%% The backend (the server's own, else bench --backend) and the poll flags.
io_args(Sv, Backend) ->
    Name = atom_to_list(Sv),
    B = case string:find(Name, "-socket") of
            nomatch -> Backend;
            _ -> socket
        end,
    ["--backend", atom_to_list(B)]
        ++ case lists:suffix("-poll2", Name) of
               true -> ["--io-poll-threads", "2", "--io-poll-sets", "2"];
               false -> []
           end.

proto_args(Sc, Ack) ->
    P = maps:get(protocol, scenario(Sc)),
    ["--protocol", atom_to_list(P)] ++ case Ack of
                                          none -> [];
                                          _ -> ["--ack", atom_to_list(Ack)]
                                      end.

atom_or_int(A) when is_atom(A) -> atom_to_list(A);
atom_or_int(N) -> integer_to_list(N).

erl_flags() -> string:lexemes(os:getenv("SLUICE_ERL_FLAGS", ""), " \t").

%% @doc The engine's arguments for a scenario (without the pinning).
%% `Settings' holds `warmup' and `duration' in seconds and `json', the
%% engine's output file; a scenario's own warmup/duration wins.
-spec engine_args(scenario(), each | last | counted | none, map()) -> [string()].
engine_args(Sc, Ack, #{port := Port, json := Json} = Settings) ->
    S = scenario(Sc),
    Warmup = maps:get(warmup, S, maps:get(warmup, Settings)),
    Duration = maps:get(duration, S, maps:get(duration, Settings)),
    AckArgs = case Ack of
                  none -> [];
                  _ -> ["--ack", atom_to_list(Ack)]
              end,
    maps:get(engine, S) ++ AckArgs
        ++ ["--host", "127.0.0.1", "--port", integer_to_list(Port),
            "--warmup", num(Warmup), "--duration", num(Duration),
            "--quiet", "--json", Json].

num(N) when is_integer(N) -> integer_to_list(N);
num(F) -> float_to_list(F, [{decimals, 3}, compact]).
