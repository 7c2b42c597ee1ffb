%% @doc `bin/sluice load' across several engine processes, source addresses
%% and Erlang nodes (bin/sluice runs this instead of the C engine when given
%% `--engines', `--nodes', `--server-metrics' or `--scenario scale'), and
%% `bin/sluice load --help', which lists both its options and the engine's
%% (sluice_cli_load_help).
%%
%% The run is split by sluice_load_plan, run by sluice_load_coord on the
%% nodes from sluice_load_nodes, merged by sluice_load_merge and printed by
%% sluice_load_report. Options the coordinator does not split are handed to
%% every engine as given; all options are checked up front by the engine
%% itself (`--check'), so a bad one exits 2 before anything starts.
-module(sluice_cli_load).

-export([run/1, specs/0, engine_specs/1]).

-define(PASS, [duration, warmup, window, batch, payload, ack, interval, timeout,
               connect_timeout, probe]).
%% Options that mean to the coordinator what they mean to one engine: its
%% help leaves them (and ?PASS) to the engine's section, so each is
%% described once.
-define(SAME, [scenario, host, port, quiet, progress]).

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    %% in the order `load --help' shows them: the coordinator's own first
    [{engines, "engines", {integer, 1, 1024}, undefined,
      "engine processes per node (none: one per 19,000 connections)"},
     {nodes, "nodes", string, undefined,
      "run the engines on Erlang nodes: N local ones, or host1,host2 (one per host, over ssh)"},
     {source_ips, "source-ips", string, undefined,
      "source addresses (127.0.0.2-9, comma lists), split over the engines; on loopback, past 12,000 connections each engine gets addresses of its own"},
     {server_metrics, "server-metrics", string, undefined,
      "the server's Prometheus URL (http://HOST:P/metrics): memory per connection"},
     {ssh, "ssh", string, "ssh", "command that reaches a host for --nodes host,... (ssh HOST erl ...)"},
     {erl, "erl", string, "erl", "the erl command on the remote hosts"},
     {engine_bin, "engine-bin", string, undefined,
      "path of sluice-load on every node (none: this build's, at the same path on remote hosts)"},
     {scenario, "scenario", {enum, [lockstep, pipeline, flood, ping, connect, scale]}, lockstep,
      "what the engines run"},
     {host, "host", string, "127.0.0.1", "server address"},
     {port, "port", {integer, 1, 65535}, 8000, "server port"},
     {conns, "conns", {integer, 1, 100000000}, 1, "connections over all engines"},
     {rate, "rate", string, "0", "ping/connect/scale: connections opened per second over all engines (0: as fast as possible)"},
     {connect_concurrency, "connect-concurrency", {integer, 1, 1000000}, 256,
      "connects in progress at once over all engines"},
     {threads, "threads", {integer, 1, 1024}, undefined, "threads per engine (none: 1 with several engines, else the engine's own default)"},
     {json, "json", string, undefined, "write the merged results as one JSON object"},
     {quiet, "quiet", boolean, false, "no summary on stdout, no progress"},
     {progress, "progress", boolean, false, "progress line every second even when stderr is not a terminal"}]
        ++ engine_specs(?PASS).

%% @doc Options passed unchanged to every engine, checked by the engine.
-spec engine_specs([atom()]) -> [sluice_cli_args:spec()].
engine_specs(Keys) ->
    [{K, lists:flatten(string:replace(atom_to_list(K), "_", "-", all)), string, undefined,
      "given to every engine (none: sluice-load's default)"} || K <- Keys].

-spec run([string()]) -> non_neg_integer().
run(Args) ->
    %% --help anywhere: bin/sluice sends every `load --help' here (the C
    %% engine alone would not show the coordinator's options), so it wins
    %% even over an option only the engine knows.
    Help = lists:member("--help", Args) orelse lists:member("-h", Args),
    case Help of
        true -> help();
        false -> run_parsed(sluice_cli_args:parse(specs(), Args))
    end.

run_parsed(Parsed) ->
    case Parsed of
        help -> help();
        {error, Msg} -> sluice_cli:fail(2, Msg);
        {ok, O} -> load(O#{pass => pass_args(O)})
    end.

help() ->
    Bin = engine_bin(#{engine_bin => undefined}),
    Port = open_port({spawn_executable, Bin}, [{args, ["--help"]}, exit_status, binary, hide]),
    case collect(Port, []) of
        {0, EngineHelp} ->
            Own = [S || {K, _, _, _, _} = S <- specs(), not lists:member(K, ?PASS ++ ?SAME)],
            io:put_chars(sluice_cli_load_help:text(Own, EngineHelp)),
            0;
        {St, Out} ->
            sluice_cli:fail(1, lists:flatten(io_lib:format("~s --help exited ~b: ~s", [Bin, St, Out])))
    end.

pass_args(O) ->
    lists:append([["--" ++ lists:flatten(string:replace(atom_to_list(K), "_", "-", all)), V]
                  || K <- ?PASS, V <- [maps:get(K, O)], V =/= undefined]).

load(O) ->
    Rate = number(maps:get(rate, O), "--rate"),
    Bin = engine_bin(O),
    NodeSpec = case maps:get(nodes, O) of
                   undefined -> none;
                   NS -> case sluice_load_nodes:parse(NS) of
                             {ok, Spec} -> Spec;
                             error -> sluice_cli:fail(2, "bad value for --nodes: " ++ NS ++
                                                          " (expected N or host1,host2)")
                         end
               end,
    Url = maps:get(server_metrics, O),
    (Url =:= undefined orelse lists:prefix("http://", Url))
        orelse sluice_cli:fail(2, "bad value for --server-metrics: " ++ Url ++ " (expected http://HOST:PORT/metrics)"),
    Ips = case maps:get(source_ips, O) of
              undefined -> none;
              S -> case sluice_load_plan:parse_ips(S) of
                       {ok, L} -> L;
                       error -> sluice_cli:fail(2, "bad value for --source-ips: " ++ S ++
                                                    " (expected A.B.C.X-Y, A.B.C.X-A.B.C.Y or a comma list)")
                   end
          end,
    NNodes = case NodeSpec of
                 none -> 1;
                 {local, N} -> N;
                 {hosts, Hs} -> length(Hs)
             end,
    Conns = maps:get(conns, O),
    PerNode = case maps:get(engines, O) of
                  undefined -> ceil_div(max(NNodes, sluice_load_plan:engines_needed(Conns)), NNodes);
                  K -> K
              end,
    Shares = sluice_load_plan:split(#{conns => Conns, rate => Rate,
                                      connect_concurrency => maps:get(connect_concurrency, O)},
                                    PerNode * NNodes),
    IpSets = source_sets(Ips, O, Shares, NodeSpec),
    Threads = case {maps:get(threads, O), length(Shares) > 1} of
                  {undefined, true} -> ["--threads", "1"];
                  {undefined, false} -> [];
                  {T, _} -> ["--threads", integer_to_list(T)]
              end,
    Engines = [#{id => I, conns => C, args => engine_args(O, Share, Set, Threads)}
               || {#{index := I, conns := C} = Share, Set} <- lists:zip(Shares, IpSets)],
    check(Bin, maps:get(args, hd(Engines))),
    {Nodes, Refs} = start_nodes(NodeSpec, O),
    Placed = [E#{node => lists:nth(I rem length(Nodes) + 1, Nodes)} || #{id := I} = E <- Engines],
    Outcome = try sluice_load_coord:run(#{bin => Bin, engines => Placed, server_metrics => Url,
                                          progress => not maps:get(quiet, O) andalso
                                              (maps:get(progress, O) orelse is_tty())})
              after sluice_load_nodes:stop(Refs)
              end,
    finish(O, Outcome, Placed, length(Nodes)).

source_sets(none, O, Shares, NodeSpec) when NodeSpec =:= none; element(1, NodeSpec) =:= local ->
    case inet:getaddr(maps:get(host, O), inet) of
        {ok, HostIp} ->
            case sluice_load_plan:auto_source_ips(HostIp, Shares, true) of
                none -> [none || _ <- Shares];
                Sets -> Sets
            end;
        {error, _} -> sluice_cli:fail(2, "cannot resolve --host " ++ maps:get(host, O))
    end;
source_sets(none, _O, Shares, {hosts, _}) ->
    %% other hosts have their own addresses and port ranges
    [none || _ <- Shares];
source_sets(Ips, O, Shares, _) ->
    Per = maps:get(conns, O) / length(Ips),
    Per > sluice_load_plan:conns_per_address() andalso
        io:format(standard_error, "sluice: warning: ~b connections per source address "
                  "(connect() slows down past ~~14,000: half the port range)~n", [round(Per)]),
    sluice_load_plan:assign_ips(Ips, length(Shares)).

engine_args(O, #{conns := C, rate := R, connect_concurrency := CC}, Set, Threads) ->
    ["--scenario", atom_to_list(maps:get(scenario, O)), "--host", maps:get(host, O),
     "--port", integer_to_list(maps:get(port, O)), "--conns", integer_to_list(C),
     "--connect-concurrency", integer_to_list(CC)]
        ++ case R == 0 of
               true -> [];
               false -> ["--rate", float_to_list(float(R), [{decimals, 3}, compact])]
           end
        ++ case Set of
               none -> [];
               _ -> ["--source-ips", sluice_load_plan:format_ips(Set)]
           end
        ++ Threads ++ maps:get(pass, O).

%% The engine judges its own options: one line and exit 2 if it objects.
check(Bin, Args) ->
    Port = open_port({spawn_executable, Bin}, [{args, Args ++ ["--check"]}, exit_status,
                                               stderr_to_stdout, binary, hide]),
    case collect(Port, []) of
        {0, _} -> ok;
        {2, Out} ->
            Line = string:trim(lists:last(string:lexemes(binary_to_list(Out), "\n"))),
            sluice_cli:fail(2, case Line of
                                   "sluice-load: " ++ Rest -> Rest;
                                   _ -> Line
                               end);
        {St, Out} -> sluice_cli:fail(1, lists:flatten(io_lib:format("~s --check exited ~b: ~s", [Bin, St, Out])))
    end.

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, [D | Acc]);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    end.

start_nodes(none, _O) ->
    {[node()], []};
start_nodes(Spec, O) ->
    case sluice_load_nodes:start(Spec, #{ssh => maps:get(ssh, O), erl => maps:get(erl, O)}) of
        {ok, Refs} -> {[N || #{node := N} <- Refs], Refs};
        {error, Msg} -> sluice_cli:fail(1, Msg)
    end.

finish(O, #{results := Results} = Out, Placed, NNodes) ->
    Good = [R || {_, St, J} <- Results, is_binary(J), St =/= lost,
                 {ok, R} <- [sluice_bench_json:decode(J)]],
    Bad = [{Id, St} || {Id, St, J} <- Results, not is_binary(J) orelse not lists:member(St, [0, 1, 3])],
    _ = [io:format(standard_error, "sluice: engine ~b ended with ~p and no result~n", [Id, St])
         || {Id, St} <- Bad],
    Good =:= [] andalso sluice_cli:fail(1, "no engine produced a result"),
    Merged = sluice_load_merge:merge(Good),
    Mem = case Out of
              #{baseline := B, held := H, held_all := All} when is_map(B), is_map(H) ->
                  (sluice_load_metrics:per_conn(B, H))#{range => sluice_load_metrics:range(B, All)};
              _ -> none
          end,
    case maps:get(metrics_error, Out) of
        none -> ok;
        E -> io:format(standard_error, "sluice: server metrics: ~s~n", [E])
    end,
    Info = #{engines => length(Placed), nodes => NNodes, memory => Mem,
             placement => [#{id => I, node => N, conns => C, args => [list_to_binary(A) || A <- As]}
                           || #{id := I, node := N, conns := C, args := As} <- Placed],
             server_metrics => maps:get(server_metrics, O), engine_results => Good},
    maps:get(interrupted, Out) andalso
        io:format(standard_error, "sluice: interrupted, reporting what was measured~n", []),
    maps:get(quiet, O) orelse io:put_chars(sluice_load_report:text(Merged, Info)),
    case maps:get(json, O) of
        undefined -> ok;
        Path -> case file:write_file(Path, sluice_load_report:json(Merged, Info)) of
                    ok -> ok;
                    {error, R} -> sluice_cli:fail(1, lists:flatten(io_lib:format("cannot write ~s: ~p", [Path, R])))
                end
    end,
    case {Bad, maps:get(<<"exit_code">>, Merged)} of
        {[], C} -> C;
        {_, 0} -> 1;
        {_, C} -> C
    end.

engine_bin(O) ->
    case maps:get(engine_bin, O) of
        undefined ->
            Priv = filename:join(filename:dirname(filename:dirname(code:which(?MODULE))), "priv"),
            Candidates = [filename:join(Priv, "sluice-load")
                          | [filename:join([D, "apps", "sluice_load", "priv", "sluice-load"])
                             || D <- ancestors(filename:dirname(code:which(?MODULE)))]],
            case [C || C <- Candidates, filelib:is_regular(C)] of
                [C | _] -> filename:absname(C);
                [] -> sluice_cli:fail(1, "sluice-load not found: run make")
            end;
        B -> B
    end.

ancestors(Dir) ->
    case filename:dirname(Dir) of
        Dir -> [Dir];
        Parent -> [Dir | ancestors(Parent)]
    end.

number(S, Flag) ->
    case string:to_float(S) of
        {F, []} when F >= 0 -> F;
        _ -> case string:to_integer(S) of
                 {I, []} when I >= 0 -> I;
                 _ -> sluice_cli:fail(2, "bad value for " ++ Flag ++ ": " ++ S ++ " (expected a number >= 0)")
             end
    end.

is_tty() ->
    %% stderr is a terminal: the C engine's rule for its own progress line
    %% (a child of the VM does not share its stderr, so ask /proc)
    case file:read_link("/proc/" ++ os:getpid() ++ "/fd/2") of
        {ok, "/dev/pts/" ++ _} -> true;
        {ok, "/dev/tty" ++ _} -> true;
        _ -> false
    end.

ceil_div(A, B) -> (A + B - 1) div B.
