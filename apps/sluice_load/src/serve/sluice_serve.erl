%% @doc `bin/sluice serve' in this VM: one listener until SIGTERM (SIGINT
%% comes as SIGTERM through sluice-run), then drain and exit 0. Also what
%% the cluster needs of it: the metrics endpoint and listen errors in words.
-module(sluice_serve).

-export([run/2, start_metrics/3, describe_error/1, warn_if_open/1, connections/1]).

-define(LISTENER, sluice_cli).

%% @doc Serve `ListenerOpts' (the library options `O', the parsed command
%% line, stands for) until a signal; the exit code or an error.
-spec run(map(), map()) -> sluice_cli:result().
run(O, ListenerOpts) ->
    ok = tune_ssl(ListenerOpts),
    {ok, _} = application:ensure_all_started(sluice),
    ok = sluice_signal:install(self()),
    %% A failed start (eaddrinuse, ...) is reported on one line; the
    %% supervisor's multi-page report of it would only bury that line.
    ok = logger:add_primary_filter(sluice_cli_start, {fun drop_start_errors/2, []}),
    Started = sluice:start_listener(?LISTENER, ListenerOpts),
    ok = logger:remove_primary_filter(sluice_cli_start),
    case Started of
        {ok, _} ->
            #{ip := IP, port := Port} = sluice:info(?LISTENER),
            case start_metrics(O, IP, ?LISTENER) of
                ok -> serve(O, IP, Port);
                {error, _, _} = E -> E
            end;
        {error, Reason} ->
            %% (the listener's address: --unix stands for ip and port)
            {error, 1, lists:flatten(io_lib:format("cannot listen on ~ts: ~s",
                                                   [sluice_opts:format_address(
                                                      maps:get(ip, ListenerOpts),
                                                      maps:get(port, ListenerOpts)),
                                                    describe_error(Reason)]))}
    end.

%% This VM serves one listener: over TLS, let `ssl' arm its TCP socket for
%% 10 reads at a time instead of 100 (`internal_active_n', documented for
%% tuning), so that sluice's TLS transport can read whole buffers within
%% the same bound on what a flooding client parks in `ssl''s mailbox
%% (docs/backends.md, "TLS": about twice the pipelined throughput). The
%% library leaves the setting to the application, being VM-wide; here the
%% VM is ours. `-ssl internal_active_n N' in SLUICE_ERL_FLAGS wins.
tune_ssl(#{transport := ssl}) ->
    _ = application:load(ssl),
    case application:get_env(ssl, internal_active_n) of
        undefined -> application:set_env(ssl, internal_active_n, 10);
        {ok, _} -> ok
    end;
tune_ssl(_) ->
    ok.

serve(O, IP, Port) ->
    %% a --unix path may hold any character (`~s' failed on `日本.sock')
    sluice_cli:put_line(standard_io, ["listening on ", sluice_opts:format_address(IP, Port)]),
    ok = warn_if_open(IP),
    io:format(standard_error, "sluice: backend ~s~s~s; ~s~n",
              [maps:get(backend, O),
               case maps:get(tls, O) of true -> ", TLS"; false -> "" end,
               case maps:get(proxy_protocol, O) of true -> ", PROXY protocol"; false -> "" end,
               sluice_vm_flags:describe(O)]),
    wait_signal(),
    Left = case sluice:drain(?LISTENER, maps:get(drain_timeout, O)) of
               {ok, N} -> N;
               {error, _} -> 0
           end,
    %% What the handlers were given and what they sent, for a caller that
    %% checks nothing read went unanswered.
    #{bytes_in := In, bytes_out := Out} = sluice:info(?LISTENER),
    ok = sluice:stop_listener(?LISTENER),
    io:format(standard_error, "sluice: drained (~s closed at the deadline; "
              "~b bytes read, ~b bytes written)~n", [connections(Left), In, Out]),
    0.

%% @doc Once the listener accepts (on every node), before the listening
%% line: the telemetry events where telemetry is present, and the /metrics
%% endpoint if --metrics-port asks for it (where it is said on stderr).
-spec start_metrics(map(), inet:ip_address() | {local, binary()}, sluice:name()) -> ok | {error, 1, string()}.
start_metrics(O, IP, Name) ->
    _ = sluice_serve_telemetry:start(Name),
    case maps:get(metrics_port, O) of
        undefined ->
            ok;
        Port ->
            %% as for the listener: a port in use is one line, not
            %% inets' supervisor reports and its nested start error
            ok = logger:add_primary_filter(sluice_cli_metrics, {fun drop_start_errors/2, []}),
            Started = sluice_prometheus_httpd:start(metrics_ip(IP), Port, Name),
            ok = logger:remove_primary_filter(sluice_cli_metrics),
            case Started of
                {ok, Pid} ->
                    io:format(standard_error, "sluice: metrics at http://~s/metrics~n",
                              [sluice_opts:format_address(metrics_ip(IP),
                                                          sluice_prometheus_httpd:port(Pid))]);
                {error, Reason} ->
                    {error, 1, lists:flatten(io_lib:format("cannot serve metrics on port ~b: ~s",
                                                           [Port, httpd_error(Reason)]))}
            end
    end.

%% inets nests the listen error in its supervisors' start errors:
%% {listen, eaddrinuse} somewhere inside, said in words; anything else as
%% one line.
httpd_error(Reason) ->
    case listen_error(Reason) of
        {ok, R} -> describe_error(R);
        error -> lists:flatten(io_lib:format("~0p", [Reason]))
    end.

listen_error({listen, R}) when is_atom(R) -> {ok, R};
listen_error(T) when is_tuple(T) -> listen_error(tuple_to_list(T));
listen_error([H | T]) ->
    case listen_error(H) of
        {ok, _} = Found -> Found;
        error -> listen_error(T)
    end;
listen_error(_) -> error.

drop_start_errors(#{msg := {report, #{label := {supervisor, start_error}}}}, _) -> stop;
drop_start_errors(#{meta := #{mfa := {sluice, _, _}}}, _) -> stop;
drop_start_errors(Event, _) -> Event.

%% @doc "1 connection", "N connections": the drain's line (here and on
%% several nodes, sluice_serve_cluster).
-spec connections(non_neg_integer()) -> string().
connections(1) -> "1 connection";
connections(N) -> integer_to_list(N) ++ " connections".

%% @doc A server reachable from every network the host is on, where the
%% user may have meant loopback: said once on stderr.
-spec warn_if_open(inet:ip_address() | {local, binary()}) -> ok.
warn_if_open(IP) when IP =:= {0, 0, 0, 0}; IP =:= {0, 0, 0, 0, 0, 0, 0, 0} ->
    io:format(standard_error, "sluice: listening on all interfaces (--ip 127.0.0.1 for "
              "this host only)~n", []);
warn_if_open(_IP) ->
    ok.

%% The metrics are served over HTTP on the listener's address; a
%% listener on a Unix socket has none: this host only.
metrics_ip({local, _}) -> {127, 0, 0, 1};
metrics_ip(IP) -> IP.

%% @doc A listen error in words.
-spec describe_error(term()) -> string().
describe_error(eaddrinuse) -> "address in use";
describe_error(eacces) -> "permission denied";
describe_error(eaddrnotavail) -> "address not available";
describe_error(eexist) -> "the path holds a file that is not a socket";
describe_error(enoent) -> "no such directory";
describe_error(Reason) -> sluice:format_error(Reason).

wait_signal() ->
    receive
        {sluice_signal, sigterm} -> ok;
        {sluice_signal, _} -> wait_signal()
    end.
