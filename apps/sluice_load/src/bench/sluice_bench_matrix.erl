%% @doc The benchmark matrix: which scenarios, which servers, how each is
%% started and pinned, and the engine options of each scenario.
%%
%% A cell is `{Scenario, Server}'. Every cell whose server is a sluice
%% variant, a peer or the seed is measured against the C reference server
%% run with the same engine options in the same round.
%%
%% Peers: what a user would write instead of using sluice.
%% `handwritten' is sluice_peer_gen_tcp on the inet driver,
%% `gen_tcp-socket' the same module on `{inet_backend, socket}'; both
%% speak every protocol, in a VM of their own.
%%
%% Every server listens on 127.0.0.1 only: a benchmark opens nothing to
%% the network.
%%
%% Pinning (bench/README.md, "What runs"): the VM wakes a
%% process on the other core slowly, so a lock-step round trip between
%% cores measures the hypervisor. Lock-step pins server and engine to the
%% same core; every throughput scenario pins the server to core 0 and the
%% engine to core 1, so the server has one core to itself.
-module(sluice_bench_matrix).

-export([scenarios/0, servers/0, peers/0, default/0, quick/0, check_cell/2,
         default_active/0, scenario/1, ack/2, server_command/4, engine_args/3,
         describe_scenario/1, times/2, engine_scenario/1, available/2, tls/1, certs_dir/1]).

-export_type([scenario/0, server/0, cell/0, paths/0]).

-type scenario() :: lockstep | pipeline | 'pipeline-counted' | conns200 | flood | paced | connrate
                  | storm | 'tls-lockstep' | 'tls-pipeline' | 'tls-handshakes'.
-type server() :: sluice | 'sluice-active-false' | 'sluice-active-once'
                | 'sluice-active-10' | 'sluice-active-100' | 'sluice-active-1000'
                | 'sluice-active-true' | 'sluice-socket' | 'sluice-poll2'
                | 'sluice-socket-poll2' | handwritten | 'gen_tcp-socket' | seed | c.
-type cell() :: {scenario(), server()}.
%% `backend': bin/sluice bench --backend, for every sluice server;
%% `seed_ebin': where the seed's and the peers' modules are.
-type paths() :: #{root := file:filename(), priv := file:filename(),
                   erl := file:filename(), seed_ebin := file:filename(),
                   backend => inet | socket}.

-define(ACTIVE_MODES, ['sluice-active-false', 'sluice-active-once', 'sluice-active-10',
                       'sluice-active-100', 'sluice-active-1000', 'sluice-active-true']).
%% The modes of the default matrix: all but 100, which lies between 10 and
%% 1000 and was the best of neither scenario in any full run of 2026-11;
%% left out to keep `make bench' under 6 minutes with the paced cells
%% (`--server sluice-active-100' still runs it). In parentheses: `--' and
%% `++' bind alike and from the right, so `X ++ ?MATRIX_MODES ++ [seed]'
%% took the seed out too.
-define(MATRIX_MODES, (?ACTIVE_MODES -- ['sluice-active-100'])).

%% TLS (issue 13): sluice's `transport => ssl' beside the C reference
%% server with OpenSSL, both with the certificates of `make certs'. No
%% peer or seed row: neither terminates TLS.
-define(TLS_SCENARIOS, ['tls-lockstep', 'tls-pipeline', 'tls-handshakes']).

-spec scenarios() -> [scenario()].
scenarios() -> [lockstep, pipeline, 'pipeline-counted', conns200, flood, paced, connrate, storm]
               ++ ?TLS_SCENARIOS.

%% The socket backend, and 2 poll threads with 2 poll sets (+IOt 2 +IOp 2)
%% on each backend (issue 5, seed 003).
-define(IO_VARIANTS, ['sluice-socket', 'sluice-poll2', 'sluice-socket-poll2']).

-define(PEERS, [handwritten, 'gen_tcp-socket']).


-spec servers() -> [server()].
servers() -> [sluice | ?ACTIVE_MODES] ++ ?IO_VARIANTS ++ ?PEERS ++ [seed, c].

%% @doc The peers: servers a user would write instead (not sluice, not C).
-spec peers() -> [server()].
peers() -> ?PEERS.

%% @doc The default matrix (`make bench'), scenario by scenario: the
%% active modes (?MATRIX_MODES) on the pipelined connection and on the
%% flood (the two scenarios where the delivery mode decides the cost), the
%% peers wherever sluice is judged against them (the paced load too), the
%% seed's handler where its own
%% lock-step client and a pipelined client meet it, the socket backend
%% beside the inet one. The poll-set rows (issue 5: no gain on a server
%% pinned to one core) are left out to keep the run under 6 minutes;
%% `--server sluice-poll2' still runs them. The storm cells are run only
%% by an engine that has the storm scenario (available/2).
%% bench/README.md gives how long it takes.
%%
%% The order matters: cells next to each other share a C run
%% (sluice_bench:plan/2), so each scenario starts with sluice and the
%% hand-written peer, then the two socket-backend servers: the ratio of
%% sluice to that peer then divides out one C run instead of carrying the
%% noise of two.
-spec default() -> [cell()].
default() ->
    Front = [sluice, handwritten, 'sluice-socket', 'gen_tcp-socket'],
    dedupe([{lockstep, S} || S <- Front ++ [seed]]
           ++ [{pipeline, S} || S <- Front ++ ?MATRIX_MODES ++ [seed]]
           ++ [{'pipeline-counted', sluice}]
           ++ [{conns200, S} || S <- Front]
           ++ [{flood, S} || S <- Front ++ ?MATRIX_MODES]
           ++ [{paced, S} || S <- [sluice | ?PEERS]]
           ++ [{connrate, sluice}, {connrate, 'sluice-socket'}]
           ++ [{storm, S} || S <- [sluice | ?PEERS]]
           ++ [{Sc, sluice} || Sc <- ?TLS_SCENARIOS]).

%% @doc The quick matrix (`make bench QUICK=1'): sluice's defaults on every
%% scenario, the hand-written peer on lock-step, pipeline, conns200 and the
%% flood (gen_tcp-socket and the storm's peers only in the full matrix, to
%% stay under 2 minutes), on the flood two other active modes, and the
%% socket backend on lock-step and pipeline. The TLS cells and the paced
%% load only in the full matrix (with paced, 1 min 54 s: too close to 2).
-spec quick() -> [cell()].
quick() ->
    dedupe([{lockstep, sluice}, {lockstep, handwritten}, {lockstep, 'sluice-socket'},
            {pipeline, sluice}, {pipeline, handwritten}, {pipeline, 'sluice-socket'},
            {conns200, sluice}, {conns200, handwritten},
            {flood, sluice}, {flood, handwritten}, {flood, 'sluice-active-once'},
            {flood, 'sluice-active-true'}, {connrate, sluice}, {storm, sluice}]).

%% @doc The cells that this engine can run, and a note for each scenario
%% left out. `EngineScenarios' is the engine's `--scenario' choices (its
%% option table). The hook for the storm scenario (issue 15), which the C
%% engine gains on another branch: until then its cells are skipped with
%% a note, and once the engine has it they run with no change here.
-spec available([cell()], [binary()]) -> {[cell()], [string()]}.
available(Cells, EngineScenarios) ->
    Missing = lists:usort([Sc || {Sc, _} <- Cells,
                                 not lists:member(engine_scenario(Sc), EngineScenarios)]),
    {[C || {Sc, _} = C <- Cells, not lists:member(Sc, Missing)],
     [lists:flatten(io_lib:format("~s: skipped, this sluice-load has no --scenario ~s",
                                  [Sc, engine_scenario(Sc)])) || Sc <- Missing]}.

%% @doc The engine's `--scenario' for a cell's scenario.
-spec engine_scenario(scenario()) -> binary().
engine_scenario(Sc) ->
    [_, Name | _] = maps:get(engine, scenario(Sc)),
    list_to_binary(Name).

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

%% @doc Whether a server can run a scenario (the peers speak every
%% protocol; the seed only the ack protocol).
-spec check_cell(scenario(), server()) -> ok | {error, string()}.
check_cell(Sc, seed) when Sc =/= 'tls-lockstep', Sc =/= 'tls-pipeline',
                          Sc =/= 'tls-handshakes' ->
    case maps:get(protocol, scenario(Sc)) of
        ack -> ok;
        P -> {error, lists:flatten(
                       io_lib:format("the seed server speaks only the ack protocol; "
                                     "scenario ~s needs ~s", [Sc, P]))}
    end;
check_cell(Sc, Sv) ->
    case tls(Sc) =/= none andalso (Sv =:= seed orelse lists:member(Sv, ?PEERS)) of
        true -> {error, lists:flatten(
                          io_lib:format("~s speaks no TLS; scenario ~s needs it", [Sv, Sc]))};
        false -> ok
    end.

%% @doc The certificate a TLS scenario's servers use (`none': no TLS).
%% ECDSA P-256 for the traffic; RSA 2048 for the handshakes, as most web
%% servers have (with ECDSA the engine's own half of each handshake bounds
%% the rate, bench/README.md "TLS").
-spec tls(scenario()) -> none | ecdsa | rsa.
tls(Sc) -> maps:get(tls, scenario(Sc), none).

%% @doc Where `make certs' (bench/certs.sh) writes the certificates.
-spec certs_dir(file:filename()) -> file:filename().
certs_dir(Root) -> filename:join([Root, "_build", "certs"]).

%% @doc What a scenario runs. `figure', where present, is the path in the
%% engine's JSON of the rate to report instead of its headline `rate'.
%% `cpu_window' says which server CPU figure is
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
scenario(paced) ->
    %% The flood's question at a load the server keeps up with, which is
    %% how servers run: 100 connections each sending one frame per write
    %% at 400 frames/s (open loop: on schedule whatever the replies do),
    %% 40,000 frames/s in all, a fifth of the 200,000/s every server here
    %% carried (bench/README.md, "The flood at a given load"). Every server
    %% then carries the same load, so the rate says nothing and the figure
    %% is server CPU per frame; the saturated flood ranks servers by how
    %% few packets they make the client handle, not by what they spend.
    %% Steady from the first frame (nothing to ramp up), hence a short
    %% warmup and window: the CPU a frame of a round moved by 2-4% with a
    %% second measured (bench/ab.escript, 12 rounds).
    #{protocol => ack, ack => each, server_core => "0", engine_core => "1",
      cpu_window => measured, unit => <<"msg/s">>, warmup => 0.2, duration => 0.5,
      engine => ["--scenario", "pipeline", "--conns", "100", "--rate", "400",
                 "--batch", "1", "--window", "1000", "--threads", "1"]};
scenario(storm) ->
    %% The reconnect storm (issue 15): 15,000 connections open, are held
    %% 0.5 s, closed by the client, and all reopened at once; the figure
    %% is wave 2's, connections back (Ping answered) per second, and the
    %% report shows its connect latencies and the kernel's listen-queue
    %% overflows (a SYN dropped there costs its client a second). 15,000
    %% is what one engine can hold under the descriptor limit with the
    %% server's old connections still closing. No warmup (the engine
    %% refuses one). Its own 32 source addresses, apart from connrate's:
    %% each run leaves 30,000 client ports in TIME_WAIT for a minute, and
    %% a round's runs on too few addresses would run out of ports
    %% (connect() then crawls, whatever the server).
    #{protocol => ping, server_core => "0", engine_core => "1",
      cpu_window => whole_run, unit => <<"conn/s">>,
      warmup => none, duration => 0.5,
      figure => [<<"storm">>, <<"reopen">>, <<"rate_per_s">>],
      engine => ["--scenario", "storm", "--conns", "15000",
                 "--source-ips", "127.0.1.1-127.0.1.32", "--threads", "1"]};
scenario('tls-lockstep') ->
    with_tls(scenario(lockstep), ecdsa);
scenario('tls-pipeline') ->
    with_tls(scenario(pipeline), ecdsa);
scenario('tls-handshakes') ->
    %% Full handshakes (the engine offers no session to resume), each
    %% connection established when Ping got Pong over TLS; 1,000 of them
    %% from addresses of their own (TIME_WAIT, as for storm).
    #{protocol => ping, server_core => "0", engine_core => "1", tls => rsa,
      cpu_window => whole_run, unit => <<"conn/s">>,
      warmup => 0, duration => 0,
      engine => ["--scenario", "connect", "--conns", "1000",
                 "--source-ips", "127.0.0.30-127.0.0.33", "--probe", "ping",
                 "--rate", "0", "--threads", "1", "--tls"]};
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

with_tls(S = #{engine := E}, Cert) ->
    S#{tls => Cert, engine => E ++ ["--tls"]}.

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
describe_scenario(paced) ->
    #{warmup := Warmup, duration := Measured} = scenario(paced),
    iolist_to_binary(
      io_lib:format("ack protocol, 100 connections each writing one 17-byte frame at 400 "
                    "frames/s (40,000 frames/s in all, open loop), ack each; judged by server "
                    "CPU per frame; ~p s warmup, ~p s measured; server core 0, engine core 1",
                    [Warmup, Measured]));
describe_scenario(storm) ->
    <<"15,000 connections open, held 0.5 s, closed by the client, then all reopened at once; "
      "rate = wave 2's connections back (Ping answered) per second; "
      "server core 0, engine core 1">>;
describe_scenario('tls-lockstep') ->
    <<"as lockstep, over TLS (1.3, ECDSA P-256 certificate)">>;
describe_scenario('tls-pipeline') ->
    <<"as pipeline, over TLS (1.3, ECDSA P-256 certificate)">>;
describe_scenario('tls-handshakes') ->
    <<"1,000 TLS connects from 127.0.0.30-33, each a full handshake (1.3, RSA 2048 "
      "certificate) established when Ping got Pong; rate = handshakes/s; "
      "server core 0, engine core 1">>;
describe_scenario(connrate) ->
    <<"15,000 connects from 127.0.0.2-9, each established when Ping got Pong; "
      "rate = connections/s; server core 0, engine core 1">>.

%% @doc The ack mode a cell runs with: the scenario's, except for the seed,
%% which only acks each frame (its C reference then does the same);
%% `none' for the protocols without acks.
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
server_command(c, Sc, Ack, #{priv := Priv} = Paths) ->
    {filename:join(Priv, "sluice-ref"),
     ["--threads", "1", "--ip", "127.0.0.1", "--port", "0" | proto_args(Sc, Ack)]
     ++ tls_args(Sc, Paths)};
server_command(seed, _Sc, _Ack, Paths) ->
    own_vm("sluice_bench_seed_server", ["0"], Paths);
server_command(Peer, Sc, Ack, Paths) when Peer =:= handwritten; Peer =:= 'gen_tcp-socket' ->
    Backend = case Peer of handwritten -> "inet"; _ -> "socket" end,
    own_vm("sluice_peer_gen_tcp",
           [Backend, atom_to_list(maps:get(protocol, scenario(Sc))), atom_to_list(Ack)], Paths);
server_command(Sv, Sc, Ack, #{root := Root} = Paths) ->
    Active = case active(Sv) of
                 none -> [];
                 A -> ["--active", atom_or_int(A)]
             end,
    {filename:join([Root, "bin", "sluice"]),
     ["serve", "--ip", "127.0.0.1", "--port", "0" | proto_args(Sc, Ack)] ++ Active
     ++ io_args(Sv, maps:get(backend, Paths, inet)) ++ tls_args(Sc, Paths)}.

%% The same options for bin/sluice serve and sluice-ref.
tls_args(Sc, #{root := Root}) ->
    case tls(Sc) of
        none -> [];
        Cert ->
            Base = filename:join(certs_dir(Root), case Cert of
                                                     ecdsa -> "server";
                                                     rsa -> "server-rsa"
                                                 end),
            ["--tls", "--certfile", Base ++ ".pem", "--keyfile", Base ++ ".key"]
    end.

%% A server module in a VM of its own, with the same VM and the same
%% extra flags as bin/sluice serve gets.
own_vm(Module, Args, #{erl := Erl, seed_ebin := Ebin}) ->
    {Erl, ["+Bi", "-noshell", "-noinput" | erl_flags()]
          ++ ["-pa", Ebin, "-run", Module, "main" | Args]}.

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

%% @doc A scenario's warmup and duration in seconds: its own where it sets
%% them, else the bench's (`Settings' `warmup', `duration'). Warmup `none':
%% the engine takes no --warmup. (For the `whole_run' scenarios the
%% duration is how long the connections are held, not a measured window.)
-spec times(scenario(), #{warmup := number(), duration := number(), _ => _}) ->
          {number() | none, number()}.
times(Sc, #{warmup := W, duration := D}) ->
    S = scenario(Sc),
    {maps:get(warmup, S, W), maps:get(duration, S, D)}.

%% @doc The engine's arguments for a scenario (without the pinning).
%% `Settings' holds `warmup' and `duration' in seconds and `json', the
%% engine's output file; a scenario's own warmup/duration wins (warmup
%% `none': the engine takes no --warmup).
-spec engine_args(scenario(), each | last | counted | none, map()) -> [string()].
engine_args(Sc, Ack, #{port := Port, json := Json} = Settings) ->
    S = scenario(Sc),
    {Warmup, Duration} = case times(Sc, Settings) of
                             {none, D} -> {[], D};
                             {W, D} -> {["--warmup", num(W)], D}
                         end,
    AckArgs = case Ack of
                  none -> [];
                  _ -> ["--ack", atom_to_list(Ack)]
              end,
    maps:get(engine, S) ++ AckArgs
        ++ ["--host", "127.0.0.1", "--port", integer_to_list(Port)] ++ Warmup
        ++ ["--duration", num(Duration), "--quiet", "--json", Json].

num(N) when is_integer(N) -> integer_to_list(N);
num(F) -> float_to_list(F, [{decimals, 3}, compact]).
