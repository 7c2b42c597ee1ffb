%% @doc A listen socket of the user's (the listener option
%% `listen_socket'): whether the listener can listen on it, who owns it,
%% and the options the listener sets on it before its first accept.
%%
%% Its kind is the transport's: a gen_tcp listen socket (a port of the
%% inet driver) for `inet' and `ssl' (whose TLS runs over accepted TCP
%% sockets: an `ssl:listen/2' socket is refused, its TCP socket is what
%% ssl would accept on), a `socket:socket()' for `socket'. It must listen,
%% on TCP (IPv4 or IPv6). A transport of one's own opens its sockets in
%% its own listen/2: it takes none.
%%
%% The listener is its owner (controlling process) from the start on
%% (sluice:start_listener/2 hands it to the listener's supervisor, which
%% lives as long as the listener): it then closes when the listener
%% stops, as ranch 1's did, and stays open while the processes below the
%% supervisor are restarted, or the listener suspended.
%% @private
-module(sluice_listen_socket).

-export([check/2, owner/2, give/3, prepare/3, format_error/1]).

%% @doc Whether transport `T' can listen on `LSock': `ok' or why not.
-spec check(module(), term()) -> ok | {error, term()}.
check(T, LSock) when T =:= sluice_transport_inet; T =:= sluice_transport_ssl ->
    check_inet(LSock);
check(sluice_transport_socket, LSock) ->
    check_socket(LSock);
check(T, _LSock) ->
    {error, {transport, sluice_transport:name(T)}}.

check_inet(LSock) when is_port(LSock) ->
    case erlang:port_info(LSock, name) of
        {name, "tcp_inet"} ->
            case prim_inet:getstatus(LSock) of
                {ok, States} ->
                    case lists:member(listen, States) of
                        true -> tcp_family(inet:sockname(LSock));
                        false -> {error, not_listening}
                    end;
                {error, _} ->
                    {error, closed}
            end;
        {name, Other} ->
            {error, {not_tcp, Other}};
        undefined ->
            {error, closed}
    end;
check_inet(LSock) when element(1, LSock) =:= sslsocket ->
    {error, ssl_listen_socket};
check_inet({'$inet', gen_tcp_socket, _}) ->
    {error, inet_backend_socket};
check_inet(LSock = {'$socket', _}) ->
    case is_socket(LSock) of
        true -> {error, {for_transport, socket}};
        false -> {error, not_a_socket}
    end;
check_inet(_) ->
    {error, not_a_socket}.

check_socket(LSock) when is_port(LSock) ->
    {error, {for_transport, inet}};
check_socket(LSock) ->
    case is_socket(LSock) of
        true ->
            case socket:getopt(LSock, {socket, acceptconn}) of
                {ok, true} -> tcp_family(socket:sockname(LSock));
                {ok, false} -> {error, not_listening};
                {error, closed} -> {error, closed};
                {error, Why} -> {error, Why}
            end;
        false when element(1, LSock) =:= sslsocket ->
            {error, ssl_listen_socket};
        false ->
            {error, not_a_socket}
    end.

%% A socket:socket() (OTP 25 has no socket:is_socket/1).
is_socket(LSock) ->
    try socket:info(LSock) of
        Info -> is_map(Info)
    catch error:_ -> false
    end.

%% Only TCP over IP for now: the listener reads its `ip' to know a Unix
%% socket's connections (sluice_socket_opts), and an own socket's `ip' is
%% its address (sluice_opts), never a path.
tcp_family({ok, {IP, _Port}}) when is_tuple(IP) -> ok;
tcp_family({ok, #{family := F}}) when F =:= inet; F =:= inet6 -> ok;
tcp_family({ok, _}) -> {error, not_tcp_ip};
tcp_family({error, closed}) -> {error, closed};
tcp_family({error, einval}) -> {error, closed};
tcp_family({error, Why}) -> {error, Why}.

%% @doc The socket's owner (controlling process), `undefined' once it is
%% closed.
-spec owner(module(), term()) -> pid() | undefined.
owner(sluice_transport_socket, LSock) ->
    %% (`undefined' once closed, which the spec of socket:info/1 leaves out)
    try maps:find(owner, socket:info(LSock)) of
        {ok, Pid} when is_pid(Pid) -> Pid;
        _ -> undefined
    catch error:_ -> undefined
    end;
owner(_T, LSock) ->
    case erlang:port_info(LSock, connected) of
        {connected, Pid} -> Pid;
        undefined -> undefined
    end.

%% @doc Make `Pid' the socket's owner; only its owner may (as
%% gen_tcp:controlling_process/2 and the socket NIF say).
-spec give(module(), term(), pid()) -> ok | {error, term()}.
give(T, LSock, Pid) ->
    T:controlling_process(LSock, Pid).

%% @doc The options the listener's own listen sockets are opened with,
%% set on the user's: the library's (binary, raw, passive, no close on
%% the client's FIN: sluice_transport_inet:listen_options/1) and the
%% listener's `socket_opts', which the accepted sockets inherit from it
%% as from the sockets the listener opens.
-spec prepare(module(), term(), sluice_opts:opts()) -> ok | {error, term()}.
prepare(sluice_transport_socket, LSock, #{socket_opts := SocketOpts}) ->
    sluice_socket_opts:set(LSock, SocketOpts);
prepare(sluice_transport_ssl, LSock, Opts) ->
    %% what the transport's listen/2 would have started, for the handshakes
    case application:ensure_all_started(ssl) of
        {ok, _} -> prepare(sluice_transport_inet, LSock, Opts);
        {error, Reason} -> {error, {ssl_not_started, Reason}}
    end;
prepare(_T, LSock, #{socket_opts := SocketOpts}) ->
    inet:setopts(LSock, SocketOpts ++ [binary, {packet, raw}, {active, false},
                                       {exit_on_close, false}]).

%% @doc What is wrong with a `listen_socket', in words.
-spec format_error(term()) -> string().
format_error(closed) ->
    "the socket is closed";
format_error(not_listening) ->
    "the socket does not listen (call gen_tcp:listen/2, or socket:bind/2 and "
        "socket:listen/2, before giving it)";
format_error(not_a_socket) ->
    "not a socket: a gen_tcp listen socket for transport inet or ssl, a socket:socket() "
        "for transport socket";
format_error({not_tcp, Driver}) ->
    sluice_syntax:format("a port of driver ~s, not a TCP socket", [Driver]);
format_error(not_tcp_ip) ->
    "the socket is not on TCP over IPv4 or IPv6 (a Unix socket's path goes in ip => "
        "{local, Path})";
format_error(ssl_listen_socket) ->
    "an ssl listen socket: sluice runs TLS over the TCP sockets it accepts, so give the "
        "gen_tcp listen socket (gen_tcp:listen/2) with transport => ssl";
format_error(inet_backend_socket) ->
    "a gen_tcp socket on {inet_backend, socket}: give a gen_tcp socket of the inet driver "
        "(the default backend), or a socket:socket() with transport => socket";
format_error({for_transport, T}) ->
    sluice_syntax:format("a socket of the kind transport ~w takes (~s), not this "
                         "listener's transport's", [T, kind(T)]);
format_error({transport, T}) ->
    sluice_syntax:format("transport ~p takes no listen_socket: a transport of one's "
                         "own opens its sockets in its listen/2", [T]);
format_error(not_owner) ->
    "the caller does not own the socket: call start_listener/2 from its owner (the process "
        "that opened it, or that it was given to with controlling_process), which hands it "
        "to the listener";
format_error(Other) ->
    sluice_syntax:format("~0p", [Other]).

kind(socket) -> "a socket:socket()";
kind(_) -> "a gen_tcp listen socket".
