%% @doc TLS (`transport => ssl'): OTP's `ssl' over gen_tcp.
%%
%% The listening side is plain TCP (sluice_transport_inet's): acceptors
%% accept TCP connections and hand them over as they would any other. The
%% handshake runs in the connection process (handshake/2), bounded by the
%% listener's `handshake_timeout', so a client that stalls mid-handshake
%% holds up nobody but its own connection; a failed or slow handshake ends
%% the connection as `handshake_error' (counted in info/1's
%% `close_reasons').
%%
%% Certificates and every other `ssl' server option are the listener's
%% `tls_opts', passed to ssl:handshake/3 unchanged. After the handshake the
%% connection is delivered as on the other transports: ssl's active modes
%% (`{ssl, S, Data}', `{ssl_passive, S}', ...) with the same grant
%% accounting as the inet driver's; `active => false' reads as `once' (ssl
%% has no asynchronous read to start). A graceful close (drain) sends
%% `close_notify' before the TCP FIN (shutdown/2).
%% @private
-module(sluice_transport_ssl).
-behaviour(sluice_transport).

-export([listen/2, accept/2, listen_port/1, close_listener/1]).
-export([controlling_process/2, handover/2, recv/3, bytes_received/1, close_socket/1,
         peername/1, sockname/1]).
-export([handshake/2, activate/2, classify/2, await/2, pause/1, send/2, output_queued/1,
         shutdown/2, close/1, info/1, socket/1]).

-define(INET, sluice_transport_inet).

-record(tls, {ssl :: ssl:sslsocket(),
              tcp :: gen_tcp:socket()}).

%%% Listening and raw sockets: TCP, as the inet transport does it.

-spec listen(inet:port_number(), sluice_transport:listen_opts()) ->
          {ok, gen_tcp:socket()} | {error, term()}.
listen(Port, Opts) ->
    case application:ensure_all_started(ssl) of
        {ok, _} -> ?INET:listen(Port, Opts);
        {error, Reason} -> {error, {ssl_not_started, Reason}}
    end.

-spec accept(gen_tcp:socket(), timeout()) -> {ok, gen_tcp:socket()} | {error, term()}.
accept(LSock, Timeout) -> ?INET:accept(LSock, Timeout).

-spec listen_port(gen_tcp:socket()) -> {ok, inet:port_number()} | {error, term()}.
listen_port(LSock) -> ?INET:listen_port(LSock).

-spec close_listener(gen_tcp:socket()) -> ok.
close_listener(LSock) -> ?INET:close_listener(LSock).

-spec controlling_process(gen_tcp:socket(), pid()) -> ok | {error, term()}.
controlling_process(Sock, Pid) -> ?INET:controlling_process(Sock, Pid).

-spec handover(gen_tcp:socket(), pid()) -> ok | {error, term()}.
handover(Sock, Pid) -> ?INET:handover(Sock, Pid).

-spec recv(gen_tcp:socket(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
recv(Sock, Length, Timeout) -> ?INET:recv(Sock, Length, Timeout).

%% @doc Bytes of the TLS stream received (records, not plaintext): the
%% idle sweep only asks whether the count moved.
-spec bytes_received(gen_tcp:socket()) -> non_neg_integer().
bytes_received(Sock) -> ?INET:bytes_received(Sock).

-spec close_socket(gen_tcp:socket()) -> ok.
close_socket(Sock) -> ?INET:close_socket(Sock).

-spec peername(gen_tcp:socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
peername(Sock) -> ?INET:peername(Sock).

-spec sockname(gen_tcp:socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
sockname(Sock) -> ?INET:sockname(Sock).

%%% The connection

%% @doc The TLS handshake, in the connection process. Bytes already read
%% from the socket (`prefix': what followed a PROXY header) belong to the
%% TLS stream and are put back in front of it first.
-spec handshake(gen_tcp:socket(), sluice_transport:conn_opts()) ->
          {ok, #tls{}} | {error, term()}.
handshake(Sock, Opts = #{tls_opts := TlsOpts, handshake_timeout := Timeout}) ->
    _ = case maps:get(prefix, Opts, <<>>) of
            <<>> -> ok;
            Prefix -> gen_tcp:unrecv(Sock, Prefix)
        end,
    case ssl:handshake(Sock, TlsOpts, Timeout) of
        {ok, SslSock} -> {ok, #tls{ssl = SslSock, tcp = Sock}};
        {ok, SslSock, _Ext} -> {ok, #tls{ssl = SslSock, tcp = Sock}};
        {error, Reason} -> {error, Reason}
    end.

-spec activate(#tls{}, sluice_transport:mode()) -> {ok, #tls{}} | {error, term()}.
activate(T, false) ->
    activate(T, once);
activate(T = #tls{ssl = S}, Mode) ->
    case ssl:setopts(S, [{active, Mode}]) of
        ok -> {ok, T};
        Error -> Error
    end.

-spec classify(term(), #tls{}) -> sluice_transport:classified().
classify({ssl, S, Data}, T = #tls{ssl = S}) -> {data, Data, T};
classify({ssl_passive, S}, T = #tls{ssl = S}) -> {passive, T};
classify({ssl_closed, S}, T = #tls{ssl = S}) -> {closed, T};
classify({ssl_error, S, Reason}, T = #tls{ssl = S}) -> {error, Reason, T};
classify(_, _) -> other.

-spec await(#tls{}, timeout()) -> sluice_transport:awaited().
await(T = #tls{ssl = S}, Timeout) ->
    receive
        {ssl, S, Data} -> {data, Data, T};
        {ssl_closed, S} -> {closed, T};
        {ssl_error, S, Reason} -> {error, Reason, T}
    after Timeout ->
            {timeout, T}
    end.

%% @doc A call to the TLS connection process: whatever it delivered before
%% answering is in the mailbox when this returns.
-spec pause(#tls{}) -> {ok, #tls{}} | {error, term()}.
pause(T = #tls{ssl = S}) ->
    case ssl:setopts(S, [{active, false}]) of
        ok -> {ok, T};
        Error -> Error
    end.

%% @doc Encrypts and queues in the TLS sender process; it waits on the TCP
%% socket, bounded by its send_timeout, not the caller.
-spec send(#tls{}, iodata()) -> ok | {error, term()}.
send(#tls{ssl = S}, Data) ->
    ssl:send(S, Data).

%% @doc What the TLS sender process could not write waits in the TCP
%% socket's driver queue.
-spec output_queued(#tls{}) -> boolean().
output_queued(#tls{tcp = Sock}) ->
    ?INET:queued(Sock).

%% @doc `write' sends close_notify, then the TCP FIN.
-spec shutdown(#tls{}, read | write | read_write) -> ok | {error, term()}.
shutdown(#tls{ssl = S}, How) ->
    ssl:shutdown(S, How).

-spec close(#tls{}) -> ok.
close(#tls{ssl = S}) ->
    _ = ssl:close(S),
    ok.

%% @doc What a handler gets in its conn() under `tls': protocol version,
%% cipher suite, the client's SNI host name and the ALPN protocol agreed
%% (`undefined' when there is none).
-spec info(#tls{}) -> #{tls := map()}.
info(#tls{ssl = S}) ->
    Info = case ssl:connection_information(S, [protocol, selected_cipher_suite, sni_hostname]) of
               {ok, L} -> maps:from_list(L);
               {error, _} -> #{}
           end,
    Alpn = case ssl:negotiated_protocol(S) of
               {ok, P} -> P;
               {error, _} -> undefined
           end,
    #{tls => #{protocol => maps:get(protocol, Info, undefined),
               cipher => maps:get(selected_cipher_suite, Info, undefined),
               sni => maps:get(sni_hostname, Info, undefined),
               alpn => Alpn}}.

-spec socket(#tls{}) -> gen_tcp:socket().
socket(#tls{tcp = Sock}) ->
    Sock.
