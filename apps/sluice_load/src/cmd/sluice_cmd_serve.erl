%% @doc `bin/sluice serve': its options, and the choice of where the
%% listener runs: in this VM (sluice_serve), in a VM started with the
%% emulator flags asked for when this one lacks them (sluice_vm_flags), or
%% on several nodes (sluice_serve_cluster).
-module(sluice_cmd_serve).

-export([run/1, check/1, specs/0, listener_opts/1]).

-define(ABOUT, "Serve the ack, ping or echo protocol until SIGTERM or SIGINT, then drain\n"
        "and exit. Prints one line \"listening on IP:PORT\" once it accepts.").

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    D = sluice_opts:defaults(),
    O = fun sluice_cli_args:opt/4,
    %% an option that applies only with another: no default here, so that
    %% check_applies/1 can tell it was given (listener_opts/1 fills it in)
    U = fun(K, Type, Help) -> (O(K, Type, undefined, Help))#{shown => shown(K)} end,
    %% --ip and --port too, so that check_unix/1 refuses them with --unix
    %% even at their defaults
    [U(ip, ip, "address to listen on"),
     U(port, {integer, 0, 65535}, "port to listen on (0: any free port)"),
     (O(unix, string, undefined,
        "listen on a Unix domain socket at this path instead of --ip and --port (a stale "
        "socket file there is replaced; the file is removed at exit)"))#{meta => "PATH"},
     O(protocol, {enum, [ack, ping, echo]}, ack, "protocol to serve"),
     U(ack, {enum, [each, last, counted]},
       "ack protocol: one ack per frame (each), one per read (last), or one per read with a count (counted)"),
     U(max_frame, {integer, 0, 16#ffffffff},
       "ack protocol: largest frame payload accepted; a larger Len closes the connection"),
     U(frame_timeout, timeout,
       "ack protocol: close a connection whose partial frame does not complete in this many ms"),
     O(active, active, maps:get(active, D),
       "socket delivery: adaptive (a grant of reads that grows while the client reads its replies), "
       "false (recv), once, N (a fixed grant of N reads) or true (unbounded mailbox)"),
     O(acceptors, {integer, 1, 65535}, maps:get(num_acceptors, D), "acceptor processes"),
     O(listen_sockets, {integer, 1, 1024}, maps:get(num_listen_sockets, D),
       "listen sockets on the port (SO_REUSEPORT when more than one)"),
     (O(max_connections, {integer, 0, infinity}, maps:get(max_connections, D),
        "connection limit for the listener"))
         #{shown => integer_to_list(maps:get(max_connections, D))
                    ++ ", the VM's descriptor limit less a reserve"},
     (O(max_connections_wait, {integer, 0, 3600000}, maps:get(max_connections_wait, D),
        "how long a connection over the limit waits for a slot before it is closed "
        "(a reconnect storm's clients are back before their old connections have closed)"))
         #{meta => "MS"},
     O(idle_timeout, timeout, maps:get(idle_timeout, D),
       "close a connection that receives nothing for this long"),
     O(backlog, {integer, 1, 65535}, maps:get(backlog, D), "listen backlog"),
     O(buffer, {integer, 0, 64 * 1024 * 1024}, 0,
       "read buffer in bytes, inet driver or socket recv (0: the library's default)"),
     (O(drain_timeout, {integer, 0, 60000}, 5000,
        "on SIGTERM/SIGINT, how many ms connections get to end before they are closed"))
         #{meta => "MS"},
     O(hibernate_after, timeout, maps:get(hibernate_after, D),
       "hibernate a connection quiet for this long"),
     U(park_after, timeout,
       "park an inet connection quiet for this long: its process exits, its socket waits in its supervisor"),
     O(gc_after_bytes, bytes, maps:get(gc_after_bytes, D),
       "a connection collects its garbage once it has read this many bytes since the last "
       "time (infinity: when the VM would)"),
     O(backend, {enum, [inet, socket]}, maps:get(transport, D),
       "socket layer: inet (gen_tcp, the inet driver) or socket (OTP's socket NIF)"),
     O(tls, boolean, false, "serve over TLS (OTP ssl on the inet backend); needs --certfile and --keyfile"),
     O(certfile, string, undefined, "with --tls: the server's certificate chain (PEM)"),
     O(keyfile, string, undefined, "with --tls: the certificate's private key (PEM)"),
     O(cacertfile, string, undefined, "with --tls: CA certificates to verify clients against (PEM)"),
     U(handshake_timeout, timeout,
       "with --tls: close a connection whose handshake is not done in this many ms"),
     O(proxy_protocol, boolean, false,
       "expect a PROXY protocol header (v1 or v2) from a load balancer before anything else"),
     U(proxy_timeout, timeout,
       "with --proxy-protocol: close a connection whose header is not in after this many ms"),
     O(nodes, {integer, 0, 64}, 0,
       "run the listener on this many BEAM nodes (peer), one OS process each, on one port "
       "(SO_REUSEPORT); 0: in this VM"),
     O(hosts, string, "local",
       "with --nodes: comma-separated hosts to start the nodes on, round-robin, over ssh "
       "(the same checkout path on each); local: this host"),
     O(metrics_port, {integer, 0, 65535}, undefined,
       "serve Prometheus text at http://IP:PORT/metrics (0: any free port, printed on stderr)")]
        ++ sluice_vm_flags:specs().

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    sluice_cli_args:with_options("serve", ?ABOUT, specs(), Args, fun checks/1,
                                 fun(Opts) -> serve(Opts, Args) end).

%% @doc The options of `Args' as run/1 would serve with them, or its usage
%% error; nothing starts.
-spec check([string()]) -> {ok, map()} | help | {error, 2, string()}.
check(Args) ->
    sluice_cli_args:check(specs(), Args, fun checks/1).

checks(Opts) ->
    Checks = [sluice_vm_flags:check(Opts), check_tls(Opts), check_hosts(Opts),
              check_unix(Opts), check_applies(Opts), check_listener(Opts)],
    case [Msg || {error, Msg} <- Checks] of
        [] -> ok;
        [Msg | _] -> {error, Msg}
    end.

%% --tls needs its two files, and the files options need --tls; the
%% library checks that the files exist.
check_tls(#{tls := true, certfile := C, keyfile := K}) when C =:= undefined; K =:= undefined ->
    {error, "--tls needs --certfile and --keyfile"};
check_tls(#{tls := true, backend := socket}) ->
    {error, "--tls runs on the inet backend (OTP's ssl); leave out --backend socket"};
check_tls(#{tls := false} = O) ->
    case [F || F <- [certfile, keyfile, cacertfile], maps:get(F, O) =/= undefined] of
        [] -> ok;
        [F | _] -> {error, "--" ++ atom_to_list(F) ++ " is for --tls"}
    end;
check_tls(_) ->
    ok.

%% --hosts places the nodes of --nodes: without them it would be ignored
%% (the server ran here, in this VM, in silence).
check_hosts(#{nodes := 0, hosts := H}) when H =/= "local" ->
    {error, "--hosts is for --nodes N (the nodes to start on those hosts)"};
check_hosts(#{hosts := H}) ->
    %% `--hosts ,' names no host: the nodes started here, as without it
    case H =/= "local" andalso string:lexemes(H, ", ") =:= [] of
        true -> {error, "bad value for --hosts: " ++ H
                        ++ " (expected local or a comma list of hosts)"};
        false -> ok
    end.

%% --unix replaces the TCP address: an --ip or --port given with it would
%% be ignored in silence (one equal to the default was, when only other
%% values were refused), and the nodes of --nodes share a port, which a
%% path cannot be (one socket binds it).
check_unix(#{unix := undefined}) ->
    ok;
check_unix(#{nodes := N}) when N > 0 ->
    {error, "--unix is for one node: a socket path cannot be shared by --nodes"};
check_unix(#{ip := IP, port := Port}) when IP =/= undefined; Port =/= undefined ->
    {error, "--unix listens on a path: leave out --ip and --port"};
check_unix(_) ->
    ok.

%% Options that apply only with another are refused without it, as `load'
%% refuses its own (`--ack applies to lockstep and pipeline only'): the
%% server ran without them, in silence. Parking is for the inet transport
%% with an active mode (docs/listener-options.md).
check_applies(O) ->
    Given = fun(K) -> maps:get(K, O) =/= undefined end,
    Parks = not maps:get(tls, O) andalso maps:get(backend, O) =:= inet
        andalso maps:get(active, O) =/= false,
    Rules = [{[ack, max_frame, frame_timeout], maps:get(protocol, O) =:= ack,
              "applies to --protocol ack only"},
             {[proxy_timeout], maps:get(proxy_protocol, O), "is for --proxy-protocol"},
             {[handshake_timeout], maps:get(tls, O), "is for --tls"},
             {[park_after], Parks,
              "parks inet connections only: not with --tls, --backend socket or --active false"}],
    case [{K, Why} || {Keys, false, Why} <- Rules, K <- Keys, Given(K)] of
        [] -> ok;
        [{K, Why} | _] -> {error, "--" ++ flag(K) ++ " " ++ Why}
    end.

%% The defaults of the options check_applies/1 and check_unix/1 look at.
default(ip) -> {0, 0, 0, 0};
default(port) -> 8000;
default(ack) -> each;
default(max_frame) -> 1048576;
default(frame_timeout) -> 30000;
default(K) -> maps:get(K, sluice_opts:defaults()).

shown(ip) -> inet:ntoa(default(ip));
shown(K) -> lists:flatten(io_lib:format("~w", [default(K)])).

%% An option's value, its default when not given.
value(K, O) ->
    case maps:get(K, O) of
        undefined -> default(K);
        V -> V
    end.

%% The library's own bounds on what the options stand for (a time is at
%% most 2^32 - 1 ms, max_connections at most 2^63 - 2): a value past them
%% is bad usage, exit 2 with the option's flag, before any VM or node
%% starts. The listener's start refused it as "cannot listen on IP:PORT"
%% and exit 1, the status of a port in use. The TLS files are left to the
%% start, which reads them (exit 1, as docs/cli.md says).
check_listener(O) ->
    case sluice_opts:validate((listener_opts(O))#{transport := maps:get(backend, O),
                                                  tls_opts := []}) of
        {ok, _} ->
            ok;
        {error, {bad_option, ip, {local, Path}}} ->
            %% --unix's, not a term: the library's own sentence is for
            %% {local, Path}
            {error, lists:flatten(
                      io_lib:format("bad value for --unix: ~ts (expected a path of at most 107 "
                                    "bytes once made absolute: a Unix socket's limit)", [Path]))};
        {error, {bad_option, K, _} = Why} ->
            {error, "--" ++ flag(K) ++ ": " ++ sluice_opts:format_error(Why)};
        {error, Why} ->
            {error, sluice_opts:format_error(Why)}
    end.

%% The flag that sets a listener option.
flag(num_acceptors) -> "acceptors";
flag(num_listen_sockets) -> "listen-sockets";
flag(socket_opts) -> "buffer";
flag(handler) -> "protocol";
flag(K) -> lists:flatten(string:replace(atom_to_list(K), "_", "-", all)).

%% Emulator flags this VM lacks: the same command in a VM that has them
%% (once: a relaunched VM serves with what it got, and says so).
serve(#{nodes := 0} = O, Args) ->
    Relaunched = sluice_vm_flags:relaunched(),
    case sluice_vm_flags:missing(O) of
        [_ | _] when not Relaunched -> sluice_vm_flags:relaunch(O, Args);
        _ -> sluice_serve:run(O, listener_opts(O))
    end;
serve(O, _Args) ->
    sluice_serve_cluster:run(O, listener_opts(O)).

%% @doc The library options that the CLI options stand for.
-spec listener_opts(map()) -> map().
listener_opts(O) ->
    Handler = case maps:get(protocol, O) of
                  ack -> {sluice_proto_ack, #{ack => value(ack, O),
                                              max_frame => value(max_frame, O),
                                              frame_timeout => value(frame_timeout, O)}};
                  ping -> {sluice_proto_ping, []};
                  echo -> {sluice_proto_echo, []}
              end,
    SocketOpts = case maps:get(buffer, O) of
                     0 -> [];
                     B -> [{buffer, B}]
                 end,
    {IP, Port} = case maps:get(unix, O) of
                     undefined -> {value(ip, O), value(port, O)};
                     Path -> {{local, Path}, 0}
                 end,
    #{ip => IP, port => Port, handler => Handler,
      active => maps:get(active, O), num_acceptors => maps:get(acceptors, O),
      num_listen_sockets => maps:get(listen_sockets, O),
      max_connections => maps:get(max_connections, O),
      max_connections_wait => maps:get(max_connections_wait, O),
      idle_timeout => maps:get(idle_timeout, O), backlog => maps:get(backlog, O),
      hibernate_after => maps:get(hibernate_after, O),
      park_after => value(park_after, O),
      gc_after_bytes => maps:get(gc_after_bytes, O),
      socket_opts => SocketOpts, transport => transport(O),
      tls_opts => tls_opts(O), handshake_timeout => value(handshake_timeout, O),
      proxy_protocol => maps:get(proxy_protocol, O),
      proxy_timeout => value(proxy_timeout, O)}.

transport(#{tls := true}) -> ssl;
transport(#{backend := B}) -> B.

tls_opts(#{tls := false}) ->
    [];
tls_opts(O = #{certfile := C, keyfile := K}) ->
    [{certfile, C}, {keyfile, K}]
        ++ case maps:get(cacertfile, O) of
               undefined -> [];
               CA -> [{cacertfile, CA}, {verify, verify_peer}, {fail_if_no_peer_cert, true}]
           end.
