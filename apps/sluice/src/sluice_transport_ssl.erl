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
%% `tls_opts', passed to ssl:handshake/3 as they are, with one default:
%% `{log_level, none}' unless they set `log_level'. ssl would otherwise log
%% every failed handshake (an alert report per connection), which a flood
%% of bad clients turns into a flood of lines; the connection process
%% counts and logs them rate-limited instead (sluice_log:refused/3).
%% check_opts/1 checks them once, when the listener starts.
%%
%% After the handshake the connection is delivered as on the other
%% transports: ssl's active modes (`{ssl, S, Data}', `{ssl_passive, S}',
%% ...) with the same grant accounting as the inet driver's; `active =>
%% false' reads as `once' (ssl has no asynchronous read to start). A
%% graceful close (drain) sends `close_notify' before the TCP FIN
%% (shutdown/2).
%% @private
-module(sluice_transport_ssl).
-behaviour(sluice_transport).

-export([listen/2, accept/2, listen_port/1, close_listener/1]).
-export([controlling_process/2, handover/2, recv/3, bytes_received/1, close_socket/1,
         peername/1, sockname/1, setopts/2, getopts/2]).
-export([send_slice/0, delivers_prefix/0, tls/0]).
-export([handshake/2, activate/2, classify/2, await/2, pause/1, send/2, output_queued/1,
         shutdown/2, close/1, info/1, socket/1]).
-export([closed_by_peer/1, handoff/2]).
%% an established ssl socket given to a listener (sluice:adopt/3)
-export([adopted/1]).
-export([recv_pause/1, recv_read/2, recv_resume/1]).
-export([check_opts/1]).

-include_lib("public_key/include/public_key.hrl").
-include_lib("kernel/include/logger.hrl").

-define(INET, sluice_transport_inet).

%% One whole TLS record (2^14 bytes of plaintext, up to 2048 of expansion,
%% the 5-byte header): the smallest TCP read worth making under TLS.
-define(TLS_RECORD, (16384 + 2048 + 5)).
%% ssl's default for its `internal_active_n' (ssl's application docs).
-define(SSL_ACTIVE_N, 100).

-record(tls, {ssl :: ssl:sslsocket(),
              tcp :: gen_tcp:socket()}).

%%% Options

%% Options of the TCP socket under TLS and of the delivery the library owns:
%% ssl would take them from tls_opts as socket options and either ignore
%% them (the socket is open by then) or, for the delivery ones, hand the
%% handler lists or packets instead of binary chunks.
-define(SOCKET_KEYS, [active, mode, binary, list, packet, packet_size, header, deliver,
                      exit_on_close, buffer, recbuf, sndbuf, nodelay, keepalive, priority,
                      tos, linger, send_timeout, send_timeout_close, high_watermark,
                      low_watermark, high_msgq_watermark, low_msgq_watermark, delay_send,
                      raw, ip, ifaddr, port, fd, inet, inet6, backlog, reuseaddr]).
%% ssl options that ssl takes but does not keep under their own name.
-define(SSL_ALIASES, [log_alert, ssl_imp, cb_info]).

%% @doc Checks a listener's `tls_opts' as ssl will read them at every
%% handshake, so that a mistake is named when the listener starts rather
%% than failing every connection: each is an ssl server option with a
%% value ssl accepts (ssl's own check), none is a socket option (those
%% belong in `socket_opts', or to the library), `handshake' is not
%% `hello' (the library runs the whole handshake: a paused one would
%% leave every connection hanging), `session_tickets' is `disabled' (see
%% check_tickets/1), the PEM files hold what their option
%% says (a certificate, a private key), the private key can be read (with
%% `password' if it is encrypted), it is the certificate's, and, where
%% TLS 1.3 is offered, it can sign a TLS 1.3 handshake (sluice_tls_key).
-spec check_opts(term()) -> ok | {error, term()}.
check_opts(TlsOpts) when is_list(TlsOpts) ->
    case [O || O <- TlsOpts, not (is_tuple(O) andalso tuple_size(O) =:= 2
                                  andalso is_atom(element(1, O)))] of
        [Bad | _] -> {error, {not_an_option, Bad}};
        [] -> check_keys(TlsOpts)
    end;
check_opts(TlsOpts) ->
    {error, {not_a_list, TlsOpts}}.

check_keys(TlsOpts) ->
    case [K || {K, _} <- TlsOpts, lists:member(K, ?SOCKET_KEYS)] of
        [K | _] -> {error, {socket_option, K}};
        [] ->
            case {lists:keyfind(handshake, 1, TlsOpts), lists:keyfind(versions, 1, TlsOpts)} of
                {{handshake, hello}, _} -> {error, {handshake, {not_supported, hello}}};
                %% OTP 25's ssl:handle_options/2 never returns on an empty
                %% list of versions (it loops choosing cipher suites for
                %% none): start_listener/2 hung, and set_transport_opts/2
                %% with the listener's lock. Refused before ssl sees it.
                {_, {versions, []}} -> {error, {versions, []}};
                _ -> check_tickets(TlsOpts)
            end
    end.

%% TLS 1.3 session tickets need the ticket store that ssl:listen/2 starts
%% for its listen socket; ssl:handshake/3 on an accepted gen_tcp socket,
%% as here, starts none (ssl 10.8: ssl:handshake/3 passes only a
%% session_id_tracker), and every TLS 1.3 handshake then crashes in ssl
%% as it issues the ticket (a gen_server call to `undefined' in
%% tls_handshake_1_3:maybe_send_session_ticket/2): the client is told the
%% handshake succeeded, then closed, and each connection leaves three
%% crash reports. Refused at start instead. (`reuse_sessions', TLS 1.2's
%% session IDs, is not concerned: ssl:handshake/3 starts a store for it.)
check_tickets(TlsOpts) ->
    case lists:keyfind(session_tickets, 1, TlsOpts) of
        {session_tickets, Mode} when Mode =/= disabled ->
            {error, {session_tickets, {not_supported, Mode}}};
        _ ->
            check_ssl(TlsOpts)
    end.

check_ssl(TlsOpts) ->
    case application:ensure_all_started(ssl) of
        {ok, _} ->
            try ssl:handle_options(TlsOpts, server) of
                {ok, Config} -> check_known(TlsOpts, Config)
            catch
                throw:{error, {options, Why}} -> {error, Why};
                throw:{error, Why} -> {error, Why};
                Class:Why -> {error, {Class, Why}}
            end;
        {error, Reason} ->
            {error, {ssl_not_started, Reason}}
    end.

%% ssl takes any key it does not know as a socket option and, on a socket
%% that is already open, ignores it: a misspelt option would go unnoticed.
%% What ssl kept is the map in its config record (ssl's internal shape: if
%% it is not there, this check is skipped).
check_known(TlsOpts, Config) when is_tuple(Config), tuple_size(Config) >= 2,
                                  is_map(element(2, Config)) ->
    Kept = element(2, Config),
    case [K || {K, _} <- TlsOpts, not maps:is_key(K, Kept),
               not lists:member(K, ?SSL_ALIASES)] of
        [K | _] -> {error, {unknown_option, K}};
        [] -> check_files(TlsOpts, TlsOpts, Kept)
    end;
check_known(TlsOpts, _Config) ->
    check_files(TlsOpts, TlsOpts, #{}).

%% The listener's certificates (and each sni_hosts host's), once their
%% files are good: can at least one key sign a TLS 1.3 handshake with the
%% schemes ssl will offer (sluice_tls_key; `Ssl' is ssl's resolved
%% options, `#{}' where their shape is not known, which checks nothing)?
check_files(TlsOpts, All, Ssl) ->
    case check_files(TlsOpts, All) of
        ok -> sluice_tls_key:check(Ssl);
        Error -> Error
    end.

check_files(TlsOpts, All) ->
    case check_files(TlsOpts) of
        ok ->
            Cert = decoded(certificate(All)),
            case check_key_pair(All, Cert) of
                ok -> warn_validity(Cert, cert_source(All), calendar:universal_time());
                Error -> Error
            end;
        Error ->
            Error
    end.

%% ssl serves a certificate that has expired, or is not valid yet, without
%% a word, and then every client that verifies refuses the handshake (and
%% one that does not verify is served): said at start, as a warning, not
%% an error (a listener for clients that do not verify, or one started
%% just before a renewal lands, still works as ssl has it).
warn_validity({ok, Cert}, Source, Now) ->
    NowS = calendar:datetime_to_gregorian_seconds(Now),
    case validity(Cert) of
        {_, NotAfter} when NowS > NotAfter ->
            ?LOG_WARNING("sluice: the TLS certificate (~s) expired on ~s: "
                         "clients that verify it will refuse every handshake",
                         [Source, utc(NotAfter)]);
        {NotBefore, _} when NowS < NotBefore ->
            ?LOG_WARNING("sluice: the TLS certificate (~s) is not valid before ~s: clients "
                         "that verify it will refuse every handshake until then",
                         [Source, utc(NotBefore)]);
        _ ->
            ok
    end;
warn_validity(_NoCertificate, _Source, _Now) ->
    ok.

%% The server certificate decoded once, for check_key_pair/2 and
%% warn_validity/3: `{ok, #'OTPCertificate'{}}', `none' (tls_opts have
%% none), or `undecodable' (ssl will say so at the first handshake).
decoded({ok, Der}) ->
    try {ok, public_key:pkix_decode_cert(Der, otp)}
    catch _:_ -> undecodable
    end;
decoded(none) ->
    none.

%% A certificate's validity in gregorian seconds (UTC), or `unknown'.
validity(#'OTPCertificate'{tbsCertificate = #'OTPTBSCertificate'{
                                               validity = {'Validity', From, To}}}) ->
    try {pubkey_cert:time_str_2_gregorian_sec(From), pubkey_cert:time_str_2_gregorian_sec(To)}
    catch _:_ -> unknown
    end.

utc(Seconds) ->
    {{Y, Mo, D}, {H, Mi, S}} = calendar:gregorian_seconds_to_datetime(Seconds),
    io_lib:format("~4..0b-~2..0b-~2..0b ~2..0b:~2..0b:~2..0b UTC", [Y, Mo, D, H, Mi, S]).

check_files([]) ->
    ok;
check_files([{sni_hosts, Hosts} | Rest]) when is_list(Hosts) ->
    %% Each host's own certificate and key, as the listener's: a missing
    %% file would fail every handshake for that name.
    case [{sni_hosts, Host, Why} || {Host, HostOpts} <- Hosts, is_list(HostOpts),
                                     {error, Why} <- [check_files(HostOpts, HostOpts)]] of
        [Error | _] -> {error, Error};
        [] -> check_files(Rest)
    end;
check_files([{K, File} | Rest]) when K =:= certfile; K =:= keyfile; K =:= cacertfile ->
    case pem_entries(File) of
        {ok, Types} ->
            case has_pem(K, Types) of
                true -> check_files(Rest);
                false -> {error, {K, File, {no_pem_entry, pem_wanted(K)}}}
            end;
        {error, Why} ->
            {error, {K, File, Why}}
    end;
check_files([_ | Rest]) ->
    check_files(Rest).

pem_entries(File) ->
    case file:read_file(File) of
        {ok, Bin} ->
            try public_key:pem_decode(Bin) of
                Entries -> {ok, [element(1, E) || E <- Entries]}
            catch _:_ -> {error, not_pem}
            end;
        {error, Why} ->
            {error, Why}
    end.

has_pem(keyfile, Types) ->
    lists:any(fun(T) -> lists:member(T, pem_wanted(keyfile)) end, Types);
has_pem(K, Types) ->
    lists:member(hd(pem_wanted(K)), Types).

%% The certificate and the private key ssl will use (the first
%% certificate of `certfile' or `cert', the first key of `keyfile' or
%% `key'), read as ssl reads them: an encrypted key with `password'. A key
%% that cannot be read, or whose public half is not the certificate's,
%% fails every handshake (ssl reads them then): named here instead.
%% Keys given another way (`certs_keys', an engine) are left to ssl.
check_key_pair(TlsOpts, Cert) ->
    case {private_key(TlsOpts), Cert} of
        {{error, _} = Error, _} ->
            Error;
        {{ok, Where, Key}, {ok, OtpCert}} ->
            case key_matches(Key, OtpCert) of
                false -> {error, key_error(Where, {key_does_not_match, cert_source(TlsOpts)})};
                _TrueOrUnknown -> ok
            end;
        _NoKeyOrNoCert ->
            ok
    end.

private_key(TlsOpts) ->
    case lists:keyfind(keyfile, 1, TlsOpts) of
        {keyfile, File} ->
            {ok, Bin} = file:read_file(File),
            case [E || E <- public_key:pem_decode(Bin),
                       lists:member(element(1, E), pem_wanted(keyfile))] of
                [Entry | _] ->
                    case decode_key(Entry, password(TlsOpts)) of
                        {ok, Key} -> {ok, {keyfile, File}, Key};
                        error -> {error, key_error({keyfile, File}, bad_password(Entry, TlsOpts))}
                    end;
                [] ->
                    none
            end;
        false ->
            case lists:keyfind(key, 1, TlsOpts) of
                {key, {Type, Der}} when is_atom(Type), is_binary(Der) ->
                    try {ok, key, public_key:der_decode(Type, Der)}
                    catch _:_ -> none
                    end;
                _ ->
                    none
            end
    end.

key_error({keyfile, File}, Why) -> {keyfile, File, Why};
key_error(key, Why) -> {key, Why}.

%% The password as ssl takes it: a string, or a fun returning one.
password(TlsOpts) ->
    case lists:keyfind(password, 1, TlsOpts) of
        {password, F} when is_function(F, 0) ->
            try F() catch _:_ -> "" end;
        {password, P} ->
            P;
        false ->
            ""
    end.

bad_password({_, _, not_encrypted}, _TlsOpts) -> not_a_key;
bad_password(_Encrypted, TlsOpts) ->
    case lists:keymember(password, 1, TlsOpts) of
        true -> {encrypted, wrong_password};
        false -> {encrypted, no_password}
    end.

decode_key({_, _, not_encrypted} = Entry, _Password) ->
    try {ok, public_key:pem_entry_decode(Entry)}
    catch _:_ -> error
    end;
decode_key(Entry, Password) ->
    try public_key:pem_entry_decode(Entry, Password) of
        Key when is_tuple(Key) -> {ok, Key};
        _ -> error
    catch _:_ -> error
    end.

certificate(TlsOpts) ->
    case lists:keyfind(certfile, 1, TlsOpts) of
        {certfile, File} ->
            {ok, Bin} = file:read_file(File),
            case [Der || {'Certificate', Der, _} <- public_key:pem_decode(Bin)] of
                [Der | _] -> {ok, Der};
                [] -> none
            end;
        false ->
            case lists:keyfind(cert, 1, TlsOpts) of
                {cert, Der} when is_binary(Der) -> {ok, Der};
                {cert, [Der | _]} when is_binary(Der) -> {ok, Der};
                _ -> none
            end
    end.

cert_source(TlsOpts) ->
    case lists:keymember(certfile, 1, TlsOpts) of
        true -> certfile;
        false -> cert
    end.

%% Whether the private key's public half is the certificate's public key:
%% `true', `false', or `unknown' (a kind of key not compared here).
key_matches(Key, #'OTPCertificate'{tbsCertificate = #'OTPTBSCertificate'{
                                         subjectPublicKeyInfo = #'OTPSubjectPublicKeyInfo'{
                                                                   subjectPublicKey = Public}}}) ->
    same_key(Key, Public).

same_key({#'RSAPrivateKey'{} = Key, _PssParams}, Public) ->
    same_key(Key, Public);
same_key(#'RSAPrivateKey'{modulus = N, publicExponent = E}, #'RSAPublicKey'{} = Public) ->
    Public#'RSAPublicKey'.modulus =:= N andalso Public#'RSAPublicKey'.publicExponent =:= E;
same_key(#'ECPrivateKey'{publicKey = <<4, _/binary>> = Point},
         #'ECPoint'{point = <<4, _/binary>> = Point2}) ->
    %% Both uncompressed points, as keys and certificates write them.
    Point =:= Point2;
same_key(#'DSAPrivateKey'{y = Y}, Y2) when is_integer(Y2) ->
    Y =:= Y2;
same_key(Key, Public) ->
    %% A key of one kind for a certificate of another.
    case {key_kind(Key), key_kind(Public)} of
        {K1, K2} when K1 =/= other, K2 =/= other, K1 =/= K2 -> false;
        _ -> unknown
    end.

key_kind(#'RSAPrivateKey'{}) -> rsa;
key_kind(#'RSAPublicKey'{}) -> rsa;
key_kind(#'ECPrivateKey'{}) -> ec;
key_kind(#'ECPoint'{}) -> ec;
key_kind(#'DSAPrivateKey'{}) -> dsa;
key_kind(Y) when is_integer(Y) -> dsa;
key_kind(_) -> other.

pem_wanted(keyfile) ->
    ['PrivateKeyInfo', 'RSAPrivateKey', 'ECPrivateKey', 'DSAPrivateKey',
     'EncryptedPrivateKeyInfo'];
pem_wanted(_) ->
    ['Certificate'].

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

-spec peername(gen_tcp:socket() | ssl:sslsocket()) -> {ok, sluice:address()} | {error, term()}.
peername(Sock) when is_port(Sock) -> ?INET:peername(Sock);
%% The sslsocket of a connection handed to another process (handoff/2)
peername(Ssl) -> ssl:peername(Ssl).

-spec sockname(gen_tcp:socket() | ssl:sslsocket()) -> {ok, sluice:address()} | {error, term()}.
sockname(Sock) when is_port(Sock) -> ?INET:sockname(Sock);
sockname(Ssl) -> ssl:sockname(Ssl).

%% @doc A handler's socket options are the TCP socket's, as ssl:setopts/2
%% sets them for an ssl socket. (Those ssl and the library own on it,
%% active, packet, mode, buffer, exit_on_close..., sluice:setopts/2 has
%% refused.)
-spec setopts(gen_tcp:socket(), [sluice:sockopt()]) -> ok | {error, term()}.
setopts(Sock, Opts) -> ?INET:setopts(Sock, Opts).

-spec getopts(gen_tcp:socket(), [sluice:sockopt_name()]) ->
          {ok, [sluice:sockopt()]} | {error, term()}.
getopts(Sock, Names) -> ?INET:getopts(Sock, Names).

%%% The connection

%% @doc Every connection runs the TLS handshake with the listener's
%% tls_opts: they are required.
-spec tls() -> handshake.
tls() ->
    handshake.

%% @doc handshake/2 puts the `prefix' back in front of the TCP stream
%% (gen_tcp:unrecv/2): it is the start of the TLS stream.
-spec delivers_prefix() -> true.
delivers_prefix() ->
    true.

%% @doc The TLS handshake, in the connection process. Bytes already read
%% from the socket (`prefix': what followed a PROXY header) belong to the
%% TLS stream and are put back in front of it first. `{error,
%% peer_closed}' if the client closed without sending a byte of it.
-spec handshake(gen_tcp:socket(), sluice_transport:conn_opts()) ->
          {ok, #tls{}} | {error, term()}.
handshake(Sock, Opts = #{tls_opts := TlsOpts, handshake_timeout := Timeout,
                         socket_opts := SocketOpts}) ->
    Deadline = sluice_deadline:at(Timeout),
    {buffer, Buffer} = lists:keyfind(buffer, 1, SocketOpts),
    %% exit_on_close goes back to gen_tcp's default under TLS (the listen
    %% socket, the inet transport's, has it false, for plain TCP's half-close).
    %% ssl sees the client's FIN (one without close_notify: ssl:shutdown(S,
    %% write), a client that dies, or one that closes its socket without
    %% SSL_shutdown) as the TCP socket's one `tcp_closed'. When that comes
    %% while the ssl socket is passive (active once or false between chunks,
    %% a grant used up, or before the first one), ssl waits for the next
    %% arming and expects the TCP socket to be closed by then, so that
    %% re-arming it fails and it closes. With exit_on_close false the socket
    %% is still open, re-arming succeeds, no second `tcp_closed' ever comes,
    %% and the connection waited for the idle timeout with the client waiting
    %% for its close (ssl 10.8, OTP 25). TLS has no half-close without
    %% close_notify anyway: ssl ends the connection on that FIN whenever it
    %% is active.
    _ = inet:setopts(Sock, [{buffer, tls_read(Buffer, maps:get(active, Opts, adaptive))},
                            {exit_on_close, true} | not_inherited(Opts)]),
    case first_bytes(Sock, maps:get(prefix, Opts, <<>>), Timeout) of
        {ok, First} ->
            ok = gen_tcp:unrecv(Sock, First),
            tls_handshake(Sock, TlsOpts, sluice_deadline:left(Deadline));
        {error, closed} ->
            {error, peer_closed};
        {error, econnreset} ->
            {error, peer_closed};
        {error, Reason} ->
            {error, Reason}
    end.

%% The stream's first bytes, read here rather than by ssl: ssl says
%% `closed' for a client that closes before its first byte (a load
%% balancer's TCP health check: no fault) as for one that closes
%% mid-handshake (a fault), and by then the socket it closed can no
%% longer say how much it received. They go back in front of the stream
%% (put back by the caller), as a PROXY header's prefix does; a stalled
%% client's `timeout' is the handshake's, as ssl would have said.
first_bytes(Sock, <<>>, Timeout) ->
    ?INET:recv(Sock, 0, Timeout);
first_bytes(_Sock, Prefix, _Timeout) ->
    {ok, Prefix}.


tls_handshake(Sock, TlsOpts, Timeout) ->
    try ssl:handshake(Sock, quiet(TlsOpts), Timeout) of
        {ok, SslSock} -> {ok, #tls{ssl = SslSock, tcp = Sock}};
        {ok, SslSock, _Ext} -> {ok, #tls{ssl = SslSock, tcp = Sock}};
        {error, Reason} -> {error, Reason}
    catch
        %% ssl's connection process died in the handshake (an `sni_fun'
        %% that raises for the name a client sent, say): ssl reports that
        %% crash itself, and its call exits here. A failed handshake,
        %% counted and logged as one (rate-limited): a client that can
        %% make it happen must not also crash this process, one more crash
        %% report per connection, counted as a handler's `crashed'.
        exit:{Why, {gen_statem, call, _}} -> {error, {ssl_crashed, Why}}
    end.

%% A Unix socket's accepted sockets inherit less than TCP's
%% (sluice_socket_opts): set with the options above, in the same call.
not_inherited(#{ip := {local, _}, socket_opts := SocketOpts}) ->
    sluice_socket_opts:not_inherited_on_local(SocketOpts);
not_inherited(_) ->
    [].

%% The most one TCP read under TLS brings. ssl's connection process arms
%% the TCP socket for `internal_active_n' reads at a time (100 unless the
%% ssl application is configured otherwise) and does not take them back
%% when the handler falls behind: that many reads can wait in its mailbox
%% whatever the listener's `active'. With the listener's read buffer (256
%% KiB by default, sized for plaintext) a client that floods without
%% reading could park 25 MiB in every connection. So reads are sized to
%% keep ssl's backlog at the bound the inet transport keeps (the grant,
%% `active' reads of `buffer' bytes; an adaptive grant's floor), and never
%% below one TLS record (ssl
%% joins the records of one read into one chunk for the handler): with
%% the defaults, 26 KiB reads. Setting ssl's internal_active_n lower (it
%% is documented for tuning) buys bigger reads at the same bound, and
%% bigger reads cost less CPU per byte (docs/backends.md, "TLS").
tls_read(Buffer, Active) ->
    ActiveN = case application:get_env(ssl, internal_active_n) of
                  {ok, N} when is_integer(N), N > 0 -> N;
                  _ -> ?SSL_ACTIVE_N
              end,
    Grant = case Active of
                A when is_integer(A) -> A;
                %% What an adaptive grant falls back to when replies back up.
                adaptive -> maps:get(min, sluice_opts:adaptive_grant());
                _ -> 1
            end,
    min(Buffer, max(?TLS_RECORD, Grant * Buffer div ActiveN)).

%% ssl's own log lines off unless the listener asks for them (see the
%% module doc); `log_alert' is ssl's older name for the same.
quiet(TlsOpts) ->
    case lists:keymember(log_level, 1, TlsOpts) orelse lists:keymember(log_alert, 1, TlsOpts) of
        true -> TlsOpts;
        false -> [{log_level, none} | TlsOpts]
    end.

-spec activate(#tls{}, sluice_transport:mode()) -> {ok, #tls{}} | {error, term()}.
activate(T, false) ->
    activate(T, once);
activate(T = #tls{ssl = S}, Mode) ->
    case ssl:setopts(S, [{active, Mode}]) of
        ok -> {ok, T};
        Error -> Error
    end.

%% @doc sluice_transport's handoff/2: the new owner gets the sslsocket (the
%% TCP socket under it stays ssl's connection process's).
-spec handoff(#tls{}, pid()) -> {ok, ssl:sslsocket(), [binary()]} | {error, term()}.
handoff(T = #tls{ssl = S}, Pid) ->
    case sluice_transport:delivered(?MODULE, T) of
        {ok, Unread, _} ->
            case ssl:controlling_process(S, Pid) of
                ok -> {ok, S, Unread};
                Error -> Error
            end;
        Error ->
            Error
    end.

%% @doc The connection state of an established ssl socket that a
%% listener adopts (sluice:adopt/3, sluice_adopt checked its shape): its
%% TCP socket, which ssl's connection process owns, is the raw socket the
%% idle sweep and sluice:conn() see, as after a handshake here.
-spec adopted(ssl:sslsocket()) -> #tls{}.
adopted(Ssl) ->
    {gen_tcp, Tcp, _, _} = element(2, Ssl),
    #tls{ssl = Ssl, tcp = Tcp}.

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

%% @doc sluice:recv/3 (sluice_transport): delivery stopped (a call to
%% ssl's connection process, which has sent what it delivered before it
%% answers), and the chunks, the end of a grant and the end taken out of
%% the mailbox.
-spec recv_pause(sluice:conn()) -> {[binary()], sluice_conn_recv:ending()}.
recv_pause(#{tls := #{socket := S}}) ->
    %% ssl that has closed says so when read
    _ = ssl:setopts(S, [{active, false}]),
    taken(S, []).

taken(S, Acc) ->
    receive
        {ssl, S, Data} -> taken(S, [Data | Acc]);
        {ssl_passive, S} -> taken(S, Acc);
        {ssl_closed, S} -> {lists:reverse(Acc), closed};
        {ssl_error, S, Reason} -> {lists:reverse(Acc), {error, Reason}}
    after 0 ->
            {lists:reverse(Acc), none}
    end.

%% @doc ssl:recv/3 for whatever is there.
-spec recv_read(sluice:conn(), timeout()) -> {ok, binary()} | {error, term()}.
recv_read(#{socket := Tcp, tls := #{socket := S}}, Timeout) ->
    case ssl:recv(S, 0, Timeout) of
        {ok, Data} when is_binary(Data) -> {ok, Data};
        Error -> tcp_closed(Error, Tcp)
    end.

%% @doc Paused again, and the end of a grant given meanwhile dropped: the
%% loop grants anew.
-spec recv_resume(#tls{}) -> #tls{}.
recv_resume(T = #tls{ssl = S}) ->
    _ = pause(T),
    receive {ssl_passive, S} -> ok after 0 -> ok end,
    T.

%% @doc A list reply longer than this goes out in slices
%% (sluice_conn_handler:send/2): ssl makes records, one binary, of a list, and
%% the replies to a read of pipelined requests for a large value were held
%% whole.
-spec send_slice() -> pos_integer().
send_slice() ->
    1048576.

%% @doc Encrypts and queues in the TLS sender process; it waits on the TCP
%% socket, bounded by its send_timeout, not the caller.
%% A TCP socket that has closed is `closed' (tcp_closed/2).
-spec send(#tls{}, iodata()) -> ok | {error, term()}.
send(#tls{ssl = S, tcp = Tcp}, Data) ->
    case ssl:send(S, Data) of
        ok -> ok;
        Error -> tcp_closed(Error, Tcp)
    end.

%% ssl's `einval' when the TCP socket under it has closed (exit_on_close,
%% at the client's FIN: prim_inet's answer for a port that is gone) is
%% `closed', as the inet transport says it; any other error stands.
tcp_closed({error, einval} = Error, Tcp) ->
    case erlang:port_info(Tcp, id) of
        undefined -> {error, closed};
        _ -> Error
    end;
tcp_closed(Error, _Tcp) ->
    Error.

%% @doc What the TLS sender process could not write waits in the TCP
%% socket's driver queue.
-spec output_queued(#tls{}) -> boolean().
output_queued(#tls{tcp = Sock}) ->
    ?INET:queued(Sock).

%% @doc `write': close_notify, then the TCP FIN; the connection can still
%% read (and drop) what the peer sends until it closes.
%%
%% ssl:shutdown(S, write) alone sends the FIN without close_notify (ssl
%% sends it only for `read_write', which ends reading too, or on close,
%% which ends the connection), and a peer that checks for truncation sees
%% a cut connection rather than a clean end. So the close_notify alert is
%% handed to the connection's TLS sender process first, synchronously, as
%% ssl itself does before closing: it is on the socket before the FIN.
%% That is ssl's internal interface (tls_sender, the #alert{} record of
%% ssl_alert.hrl); on an ssl whose socket or sender does not look as
%% expected only the FIN goes out, and sluice_tls_SUITE's close_notify
%% case says so.
%%
%% Unless the client is not reading the replies already queued: the
%% sender would wait on the busy TCP socket, and the connection on the
%% sender, for ssl's 5 s call timeout, past a drain's deadline and deaf
%% to the client's close. Then the alert is handed over without waiting
%% (it goes out behind those replies when the client reads them) and the
%% FIN is left to close/1: sent now, it could overtake the alert.
-spec shutdown(#tls{}, read | write | read_write) -> ok | {error, term()}.
shutdown(#tls{ssl = S, tcp = Tcp}, write) ->
    case ?INET:queued(Tcp) of
        false ->
            _ = close_notify(S),
            ssl:shutdown(S, write);
        true ->
            close_notify(S, send_alert)
    end;
shutdown(#tls{ssl = S}, How) ->
    ssl:shutdown(S, How).

%% #alert{level = ?WARNING, description = ?CLOSE_NOTIFY, role = server}
-define(CLOSE_NOTIFY_ALERT, {alert, 1, 0, undefined, server, undefined}).

%% The alert through the connection's sender: `send_and_ack_alert' waits
%% for it to be written, `send_alert' (a cast) queues it behind the sends
%% before it.
close_notify(S) ->
    close_notify(S, send_and_ack_alert).

close_notify({sslsocket, _, [_Connection, Sender]}, How) when is_pid(Sender) ->
    try tls_sender:How(Sender, ?CLOSE_NOTIFY_ALERT)
    catch _:_ -> {error, no_close_notify}
    end;
close_notify(_, _How) ->
    {error, no_close_notify}.

%% @doc ssl:close/1 sends its own close_notify, waiting on the sender (5 s
%% at most), then waits for the peer's close (5 s more) before the socket
%% closes. When the client is not reading what is queued, neither can
%% come: the TCP socket is closed first, as the inet transport closes
%% one (what is queued gets as long as it takes while it moves, 5 s if
%% it does not), and ssl then finds it closed. A connection that ends
%% (an idle timeout, a drain's deadline) is held no longer than on inet.
-spec close(#tls{}) -> ok.
close(#tls{ssl = S, tcp = Tcp}) ->
    _ = ?INET:queued(Tcp) andalso ?INET:close_socket(Tcp),
    _ = ssl:close(S),
    ok.

%% @doc What a handler gets in its conn() under `tls': protocol version,
%% cipher suite, the client's SNI host name, the ALPN protocol agreed and
%% the client's certificate (DER; with `{verify, verify_peer}' in
%% tls_opts, verified) (`undefined' when there is none).
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
    PeerCert = case ssl:peercert(S) of
                   {ok, Der} -> Der;
                   {error, _} -> undefined
               end,
    #{tls => #{protocol => maps:get(protocol, Info, undefined),
               cipher => maps:get(selected_cipher_suite, Info, undefined),
               sni => maps:get(sni_hostname, Info, undefined),
               alpn => Alpn,
               peer_cert => PeerCert,
               %% ssl's own calls that neither read nor write
               %% (connection_information/2, export_key_materials/4) and
               %% sluice:recv/3, which finds it here
               socket => S}}.

%% @doc Whether ssl ended the connection at the client's close: OTP 25's
%% ssl has no half-close. A client's close_notify ends it in both
%% directions, TLS 1.3 included (ssl_gen_statem:handle_alert/3 stops the
%% connection process at any close_notify; terminate/3 answers with its
%% own and closes the socket), and so does a FIN without one (ssl's
%% `tcp_closed' clause in tls_gen_connection:handle_info/3; or, passive,
%% the TCP socket that exit_on_close closed at the FIN, handshake/2). A
%% reply that comes after that fails with `closed' where one just before
%% got through: either way the client closed. The sign is ssl's own
%% `{ssl_closed, S}', or the TCP socket closed (by ssl as it ended, or
%% by exit_on_close at the FIN) with no `{ssl_error, S, _}' waiting (ssl
%% tells a passive socket neither). Either message is taken: the
%% connection ends now.
-spec closed_by_peer(#tls{}) -> boolean().
closed_by_peer(#tls{ssl = S, tcp = Tcp}) ->
    receive
        {ssl_closed, S} -> true;
        {ssl_error, S, _} -> false
    after 0 ->
            erlang:port_info(Tcp, id) =:= undefined
    end.

-spec socket(#tls{}) -> gen_tcp:socket().
socket(#tls{tcp = Sock}) ->
    Sock.
