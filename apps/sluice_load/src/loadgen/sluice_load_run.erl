%% @doc One coordinated load run (`bin/sluice load' with --engines, --nodes,
%% --server-metrics or the scale scenario), from the parsed options to the
%% exit code: split by sluice_load_plan, checked by the engine itself
%% (`--check', so a bad combination exits 2 before anything starts), run by
%% sluice_load_coord on the nodes from sluice_load_nodes, merged by
%% sluice_load_merge and reported by sluice_load_report.
-module(sluice_load_run).

-export([run/3, check/1]).

%% Engine options the coordinator sets for each engine itself (the rest
%% pass unchanged to every engine); the last three it drives them with.
-define(OWN, [scenario, host, port, conns, rate, connect_concurrency, source_ips, threads,
              json, quiet, progress, progress_json, go_stdin, check]).
-define(DRIVEN, [progress_json, go_stdin]).

%% @doc Run with the parsed options `O'; `Bin' is this build's engine,
%% `EngineSpecs' its option table (its defaults are the run's).
-spec run(map(), file:filename(), [sluice_cli_args:spec()]) -> sluice_cli:result().
run(O, Bin, EngineSpecs) ->
    case check(O) of
        ok -> plan(O#{bin => engine_bin(O, Bin)}, EngineSpecs);
        {error, _, _} = E -> E
    end.

%% @doc The usage errors of a coordinated run's own options, found before
%% anything starts (the engines' --check finds the rest, once planned).
-spec check(map()) -> ok | {error, 2, string()}.
check(O) ->
    Driven = [{error, 2, "--" ++ flag(K) ++ " is for one engine process: the coordinator "
                         "drives its engines with it itself"}
              || K <- ?DRIVEN, maps:get(K, O) =:= true],
    Checked = [node_spec(maps:get(nodes, O)), url(maps:get(server_metrics, O)),
               ips(maps:get(source_ips, O))],
    case Driven ++ [E || {error, _, _} = E <- Checked] of
        [E | _] -> E;
        [] -> ok
    end.

plan(O, EngineSpecs) ->
    V = fun(K) -> value(K, O, EngineSpecs) end,
    Checked = [{nodes, node_spec(maps:get(nodes, O))},
               {url, url(maps:get(server_metrics, O))},
               {ips, ips(maps:get(source_ips, O))}],
    case [E || {_, {error, _, _} = E} <- Checked] of
        [E | _] -> E;
        [] ->
            [{nodes, {ok, NodeSpec}}, {url, {ok, Url}}, {ips, {ok, Ips}}] = Checked,
            NNodes = case NodeSpec of
                         none -> 1;
                         {local, N} -> N;
                         {hosts, Hs} -> length(Hs)
                     end,
            Conns = V(conns),
            PerNode = case maps:get(engines, O) of
                          undefined -> ceil_div(max(NNodes, sluice_load_plan:engines_needed(Conns)),
                                                NNodes);
                          K -> K
                      end,
            Shares = sluice_load_plan:split(#{conns => Conns, rate => V(rate),
                                              connect_concurrency => V(connect_concurrency)},
                                            PerNode * NNodes, V(scenario)),
            case source_sets(Ips, V(host), V(scenario), Shares, NodeSpec) of
                {error, _, _} = E -> E;
                {ok, IpSets} ->
                    Pass = sluice_cli_args:to_args(
                             [S || #{key := K} = S <- EngineSpecs, not lists:member(K, ?OWN)], O),
                    Threads = case {maps:get(threads, O), length(Shares) > 1} of
                                  {undefined, true} -> ["--threads", "1"];
                                  {undefined, false} -> [];
                                  {T, _} -> ["--threads", integer_to_list(T)]
                              end,
                    Engines = [#{id => I, conns => C,
                                 args => engine_args(V, Share, Set) ++ Threads ++ Pass}
                               || {#{index := I, conns := C} = Share, Set} <- lists:zip(Shares, IpSets)],
                    go(O#{scenario := V(scenario)}, Engines, NodeSpec, Url)
            end
    end.

go(#{bin := Bin} = O, Engines, NodeSpec, Url) ->
    case check(Bin, maps:get(args, hd(Engines))) of
        ok when map_get(check, O) =:= true ->
            0;
        ok ->
            case writable(maps:get(json, O)) of
                ok -> start(O, Engines, NodeSpec, Url);
                {error, _, _} = E -> E
            end;
        {error, _, _} = E ->
            E
    end.

%% A --json that cannot be written is bad usage, said before the run (as
%% the engine does), not after it.
writable(undefined) ->
    ok;
writable(Path) ->
    case file:open(Path, [append]) of
        {ok, F} -> file:close(F);
        {error, R} -> {error, 2, lists:flatten(io_lib:format("--json ~s: ~s",
                                                             [Path, file:format_error(R)]))}
    end.

start(#{bin := Bin} = O, Engines, NodeSpec, Url) ->
    %% Before the nodes, which take seconds to start: a SIGTERM meanwhile
    %% stopped the VM (OTP's default handler), and the node being started
    %% was reported unreachable ("epmd and the distribution ports must be
    %% open"), exit 1. It now waits for sluice_load_coord, which ends the
    %% run at once with what was measured, as in the ramp.
    ok = sluice_signal:install(self()),
    case start_nodes(NodeSpec, O) of
        {ok, Nodes, Refs} ->
            Placed = [E#{node => lists:nth(I rem length(Nodes) + 1, Nodes)}
                      || #{id := I} = E <- Engines],
            Progress = not maps:get(quiet, O) andalso
                (maps:get(progress, O) orelse sluice_procfs:stderr_is_tty()),
            Outcome = try sluice_load_coord:run(#{bin => Bin, engines => Placed,
                                                  server_metrics => Url,
                                                  progress => Progress,
                                                  scenario => maps:get(scenario, O)})
                      after sluice_load_nodes:stop(Refs)
                      end,
            finish(O, Outcome, Placed, length(Nodes));
        {error, Msg} ->
            {error, 1, Msg}
    end.

%% An engine option's value: as given, else the engine's own default.
value(K, O, EngineSpecs) ->
    case maps:get(K, O, undefined) of
        undefined -> engine_default(K, EngineSpecs);
        V -> V
    end.

engine_default(K, EngineSpecs) ->
    [#{shown := Shown} = Spec] = [S || #{key := Key} = S <- EngineSpecs, Key =:= K],
    case sluice_cli_args:parse([Spec], ["--" ++ maps:get(flag, Spec), Shown]) of
        {ok, #{K := D}} -> D;
        _ -> undefined
    end.

node_spec(undefined) -> {ok, none};
node_spec(S) ->
    case sluice_load_nodes:parse(S) of
        {ok, Spec} -> {ok, Spec};
        error -> {error, 2, "bad value for --nodes: " ++ S ++ " (expected N or host1,host2)"}
    end.

url(undefined) -> {ok, undefined};
url("http://" ++ _ = Url) ->
    %% a URL that does not parse (`http://[::1') failed only after the run,
    %% as `invalid_uri', exit 3
    case uri_string:parse(Url) of
        #{host := [_ | _]} -> {ok, Url};
        _ -> bad_url(Url)
    end;
url(Url) ->
    bad_url(Url).

bad_url(Url) ->
    {error, 2, "bad value for --server-metrics: " ++ Url ++ " (expected http://HOST:PORT/metrics)"}.

ips(undefined) -> {ok, none};
ips(S) ->
    case sluice_load_plan:parse_ips(S) of
        {ok, L} -> {ok, L};
        error -> {error, 2, "bad value for --source-ips: " ++ S
                            ++ " (expected A.B.C.X-Y, A.B.C.X-A.B.C.Y, an IPv6 P::X-P::Y"
                               " (one /120) or a comma list)"};
        %% here, not by the engine's --check: that sees the first engine's
        %% share of the addresses only
        {error, mixed} -> {error, 2, "--source-ips '" ++ S ++ "' mixes IPv4 and IPv6 addresses"}
    end.

%% On loopback, past what one address holds, each engine gets addresses of
%% its own (a storm engine left without would pick 127.0.0.2 and up
%% itself, the same ones in every engine); storm takes two ports a
%% connection.
source_sets(none, Host, Scenario, Shares, NodeSpec) when NodeSpec =:= none;
                                                         element(1, NodeSpec) =:= local ->
    Ports = case Scenario of
                "storm" -> 2;
                _ -> 1
            end,
    case getaddr(Host) of
        {ok, HostIp} ->
            case sluice_load_plan:auto_source_ips(HostIp, Shares, true, Ports) of
                none -> {ok, [none || _ <- Shares]};
                Sets -> {ok, Sets}
            end;
        {error, _} -> {error, 2, "cannot resolve --host " ++ Host}
    end;
source_sets(none, _Host, _Scenario, Shares, {hosts, _}) ->
    %% other hosts have their own addresses and port ranges
    {ok, [none || _ <- Shares]};
source_sets(Ips, _Host, _Scenario, Shares, _) ->
    Per = lists:sum([C || #{conns := C} <- Shares]) / length(Ips),
    Per > sluice_load_plan:conns_per_address() andalso
        io:format(standard_error, "sluice: warning: ~b connections per source address "
                  "(connect() slows down past half the port range)~n", [round(Per)]),
    {ok, sluice_load_plan:assign_ips(Ips, length(Shares))}.

%% As the engine resolves it without --source-ips: IPv4 first (a name
%% with both), else IPv6 (::1, an IPv6-only name).
getaddr(Host) ->
    case inet:getaddr(Host, inet) of
        {ok, Ip} -> {ok, Ip};
        {error, _} -> inet:getaddr(Host, inet6)
    end.

engine_args(V, #{conns := C, rate := R, connect_concurrency := CC}, Set) ->
    ["--scenario", V(scenario), "--host", V(host), "--port", integer_to_list(V(port)),
     "--conns", integer_to_list(C), "--connect-concurrency", integer_to_list(CC)]
        ++ case R == 0 of
               true -> [];
               %% every digit: 3 decimals made an engine's share of
               %% --rate 0.0004 "0.0", as fast as possible
               false -> ["--rate", float_to_list(float(R), [short])]
           end
        ++ case Set of
               none -> [];
               _ -> ["--source-ips", sluice_load_plan:format_ips(Set)]
           end.

%% The engine judges its own options: one line and exit 2 if it objects.
check(Bin, Args) ->
    case sluice_cprog:output(Bin, Args ++ ["--check"]) of
        {0, _} ->
            ok;
        {2, Out} ->
            Line = string:trim(lists:last(string:lexemes(binary_to_list(Out), "\n"))),
            {error, 2, case Line of
                           "sluice-load: " ++ Rest -> Rest;
                           _ -> Line
                       end};
        {St, Out} ->
            {error, 1, lists:flatten(io_lib:format("~s --check exited ~p: ~s", [Bin, St, Out]))}
    end.

start_nodes(none, _O) ->
    {ok, [node()], []};
start_nodes(Spec, O) ->
    case sluice_load_nodes:start(Spec, #{ssh => maps:get(ssh, O), erl => maps:get(erl, O)}) of
        {ok, Refs} -> {ok, [N || #{node := N} <- Refs], Refs};
        {error, _} = E -> E
    end.

finish(O, #{results := Results} = Out, Placed, NNodes) ->
    Good = [R || {_, St, J} <- Results, is_binary(J), St =/= lost,
                 {ok, R} <- [sluice_json:decode(J)]],
    Bad = [{Id, St} || {Id, St, J} <- Results, not is_binary(J) orelse not lists:member(St, [0, 1, 3, 4])],
    _ = [io:format(standard_error, "sluice: engine ~b ended with ~p and no result~n", [Id, St])
         || {Id, St} <- Bad],
    case Good of
        [] -> {error, 1, "no engine produced a result"};
        _ -> report(O, Out, Placed, NNodes, Good, Bad)
    end.

report(O, Out, Placed, NNodes, Good, Bad) ->
    Merged0 = sluice_load_merge:merge(Good),
    %% a lost engine's part of the run is missing: the whole is a failure
    Code = case Bad of
               [] -> maps:get(<<"exit_code">>, Merged0);
               _ -> 1
           end,
    Interrupted = maps:get(interrupted, Out)
        orelse lists:any(fun(R) -> maps:get(<<"interrupted">>, R, false) =:= true end, Good),
    Merged = Merged0#{<<"exit_code">> => Code, <<"engines_lost">> => length(Bad),
                      <<"interrupted">> => Interrupted},
    Mem = sluice_server_metrics:memory(maps:get(baseline, Out), maps:get(held_all, Out), Good),
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
    Written = case maps:get(json, O) of
                  undefined -> ok;
                  Path -> file:write_file(Path, sluice_load_report:json(Merged, Info))
              end,
    case Written of
        {error, R} ->
            {error, 1, lists:flatten(io_lib:format("cannot write ~s: ~p", [maps:get(json, O), R]))};
        ok ->
            Code
    end.

engine_bin(O, Bin) ->
    case maps:get(engine_bin, O) of
        undefined -> Bin;
        Given -> Given
    end.

flag(K) -> lists:flatten(string:replace(atom_to_list(K), "_", "-", all)).

ceil_div(A, B) -> (A + B - 1) div B.
