%% @doc `bin/sluice serve': run one listener with a built-in protocol until
%% SIGTERM (or SIGINT, forwarded by the script), then drain and exit 0.
-module(sluice_cli_serve).

-export([run/1, specs/0, listener_opts/1, started/3, describe/1]).

-define(ABOUT, "Serve the ack, ping or echo protocol until SIGTERM or SIGINT, then drain\n"
        "and exit. Prints one line \"listening on IP:PORT\" once it accepts.").

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    D = sluice_opts:defaults(),
    [{ip, "ip", ip, {0, 0, 0, 0}, "address to listen on"},
     {port, "port", {integer, 0, 65535}, 8000, "port to listen on (0: any free port)"},
     {protocol, "protocol", {enum, [ack, ping, echo]}, ack, "protocol to serve"},
     {ack, "ack", {enum, [each, last, counted]}, each,
      "ack protocol: one ack per frame (each), one per read (last), or one per read with a count (counted)"},
     {max_frame, "max-frame", {integer, 0, 16#ffffffff}, 1048576,
      "ack protocol: largest frame payload accepted; a larger Len closes the connection"},
     {frame_timeout, "frame-timeout", timeout, 30000,
      "ack protocol: close a connection whose partial frame does not complete in this many ms"},
     {active, "active", active, maps:get(active, D),
      "socket delivery: false (recv), once, N (flow control every N reads) or true (unbounded mailbox)"},
     {acceptors, "acceptors", {integer, 1, 65535}, maps:get(num_acceptors, D), "acceptor processes"},
     {listen_sockets, "listen-sockets", {integer, 1, 1024}, maps:get(num_listen_sockets, D),
      "listen sockets on the port (SO_REUSEPORT when more than one)"},
     {max_connections, "max-connections", {integer, 0, infinity}, maps:get(max_connections, D),
      "connection limit for the listener (default: the VM's descriptor limit less a reserve)"},
     {idle_timeout, "idle-timeout", timeout, maps:get(idle_timeout, D),
      "close a connection that receives nothing for this long"},
     {backlog, "backlog", {integer, 1, 65535}, maps:get(backlog, D), "listen backlog"},
     {buffer, "buffer", {integer, 0, infinity}, 0,
      "read buffer in bytes, inet driver or socket recv (0: the library's default, 256 KiB)"},
     {drain_timeout, "drain-timeout", {integer, 0, 60000}, 5000,
      "on SIGTERM/SIGINT, how long connections get to end before they are closed"},
     {hibernate_after, "hibernate-after", timeout, maps:get(hibernate_after, D),
      "hibernate a connection quiet for this long"},
     {park_after, "park-after", timeout, maps:get(park_after, D),
      "park an inet connection quiet for this long: its process exits, its socket waits in its supervisor"},
     {backend, "backend", {enum, [inet, socket]}, maps:get(transport, D),
      "socket layer: inet (gen_tcp, the inet driver) or socket (OTP's socket NIF)"}]
        ++ sluice_cli_cluster_opts:specs() ++ sluice_cli_vm:specs().

-spec run([string()]) -> non_neg_integer().
run(Args) ->
    case sluice_cli_args:parse(specs(), Args) of
        help ->
            io:put_chars(sluice_cli_args:usage("serve", ?ABOUT, specs())),
            0;
        {error, Msg} ->
            sluice_cli:fail(2, Msg);
        {ok, Opts} ->
            case sluice_cli_vm:check(Opts) of
                ok -> serve(Opts);
                {error, Msg} -> sluice_cli:fail(2, Msg)
            end
    end.

%% @doc The library options that the CLI options stand for.
-spec listener_opts(map()) -> map().
listener_opts(O) ->
    Handler = case maps:get(protocol, O) of
                  ack -> {sluice_proto_ack, #{ack => maps:get(ack, O),
                                              max_frame => maps:get(max_frame, O),
                                              frame_timeout => maps:get(frame_timeout, O)}};
                  ping -> {sluice_proto_ping, []};
                  echo -> {sluice_proto_echo, []}
              end,
    SocketOpts = case maps:get(buffer, O) of
                     0 -> [];
                     B -> [{buffer, B}]
                 end,
    #{ip => maps:get(ip, O), port => maps:get(port, O), handler => Handler,
      active => maps:get(active, O), num_acceptors => maps:get(acceptors, O),
      num_listen_sockets => maps:get(listen_sockets, O),
      max_connections => maps:get(max_connections, O),
      idle_timeout => maps:get(idle_timeout, O), backlog => maps:get(backlog, O),
      hibernate_after => maps:get(hibernate_after, O),
      park_after => maps:get(park_after, O),
      socket_opts => SocketOpts, transport => maps:get(backend, O)}.

serve(O) ->
    {ok, _} = application:ensure_all_started(sluice),
    ok = sluice_cli_signal:install(self()),
    case maps:get(nodes, O) of
        0 -> serve_here(O);
        _ -> sluice_cli_cluster:serve(O, listener_opts(O))
    end.

%% @doc Called once the listener accepts (on every node), before the
%% listening line: starts what --metrics-port asks for.
-spec started(map(), inet:ip_address(), inet:port_number()) -> ok.
started(O, IP, _Port) ->
    sluice_cli_cluster_opts:start_metrics(O, IP, sluice_cli).

serve_here(O) ->
    %% A failed start (eaddrinuse, ...) is reported on one line below; the
    %% supervisor's multi-page report of it would only bury that line.
    ok = logger:add_primary_filter(sluice_cli_start, {fun drop_start_errors/2, []}),
    Started = sluice:start_listener(sluice_cli, listener_opts(O)),
    ok = logger:remove_primary_filter(sluice_cli_start),
    case Started of
        {ok, _} ->
            #{ip := IP, port := Port} = sluice:info(sluice_cli),
            ok = started(O, IP, Port),
            io:format("listening on ~s:~b~n", [inet:ntoa(IP), Port]),
            io:format(standard_error, "sluice: backend ~s; ~s~n",
                      [maps:get(backend, O), sluice_cli_vm:describe(O)]),
            wait_signal(),
            Left = case sluice:drain(sluice_cli, maps:get(drain_timeout, O)) of
                       {ok, N} -> N;
                       {error, _} -> 0
                   end,
            %% What the handlers were given and what they sent, for a
            %% caller that checks nothing read went unanswered.
            #{bytes_in := In, bytes_out := Out} = sluice:info(sluice_cli),
            ok = sluice:stop_listener(sluice_cli),
            io:format(standard_error, "sluice: drained (~b connections closed at the deadline; "
                      "~b bytes read, ~b bytes written)~n", [Left, In, Out]),
            0;
        {error, Reason} ->
            sluice_cli:fail(1, lists:flatten(
                                 io_lib:format("cannot listen on ~s:~b: ~s",
                                               [inet:ntoa(maps:get(ip, O)), maps:get(port, O),
                                                describe(Reason)])))
    end.

drop_start_errors(#{msg := {report, #{label := {supervisor, start_error}}}}, _) -> stop;
drop_start_errors(Event, _) -> Event.

-spec describe(term()) -> string().
describe(eaddrinuse) -> "address in use";
describe(eacces) -> "permission denied";
describe(eaddrnotavail) -> "address not available";
describe(Reason) -> sluice:format_error(Reason).

wait_signal() ->
    receive
        {sluice_signal, sigterm} -> ok;
        {sluice_signal, _} -> wait_signal()
    end.
