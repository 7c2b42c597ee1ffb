%% @doc `bin/sluice load': drive a server with the C load engine. The
%% engine's options come from the engine itself (`sluice-load
%% --options-json'), so its option table is their one description; this
%% module adds the coordinator's and parses, checks and documents both.
%%
%% One engine process: the engine runs in the foreground with the options
%% given (sluice_cprog). With --engines, --nodes or --server-metrics, or
%% the scale scenario, a coordinated run (sluice_load_run) splits the load
%% over several engine processes and nodes and merges their results.
-module(sluice_cmd_load).

-export([run/1, check/1, own_specs/0]).

-define(ABOUT,
        "Drive a server with the C load engine (sluice-load). By default one engine\n"
        "process runs. Any of --engines, --nodes, --server-metrics or --scenario scale\n"
        "runs a coordinator in the VM instead: several engine processes (--engines K\n"
        "per node), on Erlang nodes started with peer (--nodes N local, or --nodes\n"
        "host1,host2 over ssh), their hold started together and their results and\n"
        "histograms merged into one report; with --server-metrics URL the report gives\n"
        "the server's memory per connection from its Prometheus figures. In such a\n"
        "run --conns, --rate and --connect-concurrency are totals split over the\n"
        "engines (lockstep's and pipeline's --rate, frames/s per connection, is\n"
        "every connection's as given), --threads is per engine (1 when there are\n"
        "several), and --json, --quiet and --progress are the coordinator's.\n").

-define(ENGINE_HEADING,
        "engine options (one engine process takes them all; the coordinator gives\n"
        "every engine the others, and drives its engines itself with --progress-json,\n"
        "--go-stdin and --check):\n").

%% @doc The coordinator's options, and --source-ips, whose splitting it
%% adds to the engine's meaning (the engine's entry is replaced by this one).
-spec own_specs() -> [sluice_cli_args:spec()].
own_specs() ->
    O = fun sluice_cli_args:opt/4,
    [O(engines, {integer, 1, 1024}, undefined,
       "engine processes per node (none: one per 19,000 connections)"),
     O(nodes, string, undefined,
       "run the engines on Erlang nodes: N local ones, or host1,host2 (one per host, over ssh)"),
     (O(source_ips, string, undefined,
        "source addresses (A.B.C.X-Y, A.B.C.X-A.B.C.Y, an IPv6 P::X-P::Y (one /120) or a "
        "comma list, of --host's family), round-robin per connection; several engines "
        "share them out, and on IPv4 loopback past 12,000 connections each engine gets "
        "addresses of its own when none are given"))
         #{shown => "the kernel's choice"},
     O(server_metrics, string, undefined,
       "the server's Prometheus URL (http://HOST:P/metrics): memory per connection"),
     O(ssh, string, "ssh", "command that reaches a host for --nodes host,... (ssh HOST erl ...)"),
     O(erl, string, "erl", "the erl command on the remote hosts"),
     O(engine_bin, string, undefined,
       "path of sluice-load on every node (none: this build's, at the same path on remote hosts)")].

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    case sluice_cprog:table("sluice-load") of
        {ok, Bin, #{specs := EngineSpecs}} -> run(Bin, EngineSpecs, Args);
        {error, Msg} -> {error, 1, Msg}
    end.

run(Bin, EngineSpecs, Args) ->
    case sluice_cli_args:parse(specs(EngineSpecs), Args) of
        help ->
            io:put_chars(help(EngineSpecs)),
            0;
        {error, Msg} ->
            {error, 2, Msg};
        {ok, O} ->
            case coordinated(O) of
                false -> one_engine(Bin, EngineSpecs, O);
                true -> sluice_load_run:run(O, Bin, EngineSpecs)
            end
    end.

%% @doc The options of `Args', or run/1's usage error, without running
%% anything: the coordinator's checks when it would run, none of one
%% engine's (sluice-load makes them itself when it runs).
-spec check([string()]) -> {ok, map()} | help | {error, pos_integer(), string()}.
check(Args) ->
    case sluice_cprog:table("sluice-load") of
        {ok, _Bin, #{specs := EngineSpecs}} ->
            case sluice_cli_args:parse(specs(EngineSpecs), Args) of
                {ok, O} ->
                    case coordinated(O) andalso sluice_load_run:check(O) of
                        {error, _, _} = E -> E;
                        _ -> {ok, O}
                    end;
                help -> help;
                {error, Msg} -> {error, 2, Msg}
            end;
        {error, Msg} ->
            {error, 1, Msg}
    end.

%% Every option once: the coordinator's, then the engine's it does not
%% replace.
specs(EngineSpecs) ->
    own_specs() ++ engine_only(EngineSpecs).

%% The engine's options that the coordinator does not replace.
engine_only(EngineSpecs) ->
    Own = keys(own_specs()),
    [S || #{key := K} = S <- EngineSpecs, not lists:member(K, Own)].

keys(Specs) -> [K || #{key := K} <- Specs].

coordinated(O) ->
    lists:any(fun(K) -> maps:get(K, O) =/= undefined end, [engines, nodes, server_metrics])
        orelse maps:get(scenario, O, undefined) =:= "scale".

one_engine(Bin, EngineSpecs, O) ->
    Path = case maps:get(engine_bin, O) of
               undefined -> Bin;
               Given -> Given
           end,
    Engine = keys(EngineSpecs),
    Specs = [S || #{key := K} = S <- specs(EngineSpecs), lists:member(K, Engine)],
    sluice_cprog:run(Path, sluice_cli_args:to_args(Specs, O), []).

help(EngineSpecs) ->
    ["usage: bin/sluice load [options]\n\n", ?ABOUT, "\n",
     "coordinator options (several engines, nodes, server metrics):\n",
     sluice_cli_args:option_lines(own_specs()), "\n",
     ?ENGINE_HEADING, sluice_cli_args:option_lines(engine_only(EngineSpecs)),
     sluice_cli_args:help_line(), sluice_cli_exit:help("load")].
