%% @doc The `serve' options for several nodes and for metrics, kept apart
%% from sluice_cli_serve so that its own table stays about one listener:
%% `--nodes', `--hosts' and `--metrics-port'.
-module(sluice_cli_cluster_opts).

-export([specs/0, hosts/1, start_metrics/3]).

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    [{nodes, "nodes", {integer, 0, 64}, 0,
      "run the listener on this many BEAM nodes (peer), one OS process each, on one port "
      "(SO_REUSEPORT); 0: in this VM"},
     {hosts, "hosts", string, "local",
      "with --nodes: comma-separated hosts to start the nodes on, round-robin, over ssh "
      "(the same checkout path on each); local: this host"},
     {metrics_port, "metrics-port", {integer, 0, 65535}, undefined,
      "serve Prometheus text at http://IP:PORT/metrics (0: any free port, printed on stderr)"}].

%% @doc The hosts of --hosts, [] for this host only.
-spec hosts(map()) -> [string()].
hosts(O) ->
    case string:lexemes(maps:get(hosts, O), ", ") of
        ["local"] -> [];
        Hosts -> Hosts
    end.

%% @doc Start the metrics httpd if --metrics-port was given (and, where
%% telemetry is present, the telemetry events); says where on stderr.
-spec start_metrics(map(), inet:ip_address(), sluice:name()) -> ok.
start_metrics(O, IP, Name) ->
    _ = sluice_metrics:start_telemetry(Name),
    case maps:get(metrics_port, O) of
        undefined ->
            ok;
        Port ->
            case sluice_metrics_httpd:start(IP, Port, Name) of
                {ok, Pid} ->
                    io:format(standard_error, "sluice: metrics at http://~s:~b/metrics~n",
                              [inet:ntoa(IP), sluice_metrics_httpd:port(Pid)]);
                {error, Reason} ->
                    sluice_cli:fail(1, lists:flatten(io_lib:format(
                                                        "cannot serve metrics on port ~b: ~p",
                                                        [Port, Reason])))
            end
    end.
