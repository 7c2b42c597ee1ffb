%% @doc STARTTLS: a connection of an `inet' listener upgraded to TLS
%% in-band, when its handler returns `{starttls, Reply, State}' (SMTP,
%% IMAP, POP3, XMPP, LDAP, PostgreSQL's SSLRequest...): Reply goes out in
%% plaintext, then the server side of the TLS handshake runs on the same
%% TCP socket with the listener's `tls_opts', bounded by its
%% `handshake_timeout', exactly as on an `ssl' listener
%% (sluice_transport_ssl:handshake/2); from then on the connection is on
%% the `ssl' transport.
%%
%% The one rule that makes it safe (the STARTTLS command injection of
%% CVE-2011-0411 and its kin): no byte the client sent before it could
%% have read Reply reaches the handler as if it had come over TLS. Those
%% are the frames after the STARTTLS one in the same read, what the framer
%% holds of a frame begun, and the chunks already delivered to the process
%% (a running grant's). The socket is made passive and those chunks taken
%% out of the mailbox BEFORE Reply is sent: until then the client cannot
%% have started its handshake, so whatever is there is plaintext it
%% pipelined (an attacker's, in the CVE); after it, the socket holds only
%% what the client sent since, which ssl reads as the TLS stream (where
%% plaintext fails the handshake). Pipelined plaintext closes the
%% connection as `{protocol_error, starttls_pipelined}' (counted), after
%% the replies owed to the frames before STARTTLS and without Reply: the
%% client was not told to go ahead. Closing rather than dropping those
%% bytes: a client that pipelines past STARTTLS breaks the protocol
%% (RFC 3207 4.), and one whose commands vanished would carry on out of
%% step.
%%
%% Only `inet' can be upgraded (or a transport of the user's whose tls/0
%% says `starttls': its connection state is inet's, which the upgrade
%% works on): OTP 25's ssl runs over gen_tcp, not over the `socket' NIF's
%% sockets, and an `ssl' connection is TLS already.
%% @private
-module(sluice_conn_starttls).

-include("sluice_conn.hrl").

-export([upgrade/5]).

%% @doc Upgrade the connection: send Owed (the replies to the frames before
%% STARTTLS), then Reply, then run the TLS handshake. ReadPending: a read
%% of mode `false' was started and is not answered (the STARTTLS came
%% from a callback other than handle_data/2). `{ok, Tls, S}' with the
%% connection on TLS, not armed yet, and `Tls' the TLS facts for the
%% handler; otherwise the outcome that ends it. A transport that cannot
%% upgrade, or a listener without `tls_opts', is the handler's mistake: it
%% crashes, as for a result it may not return.
-spec upgrade(sluice_handler:reply(), iodata(), boolean(), boolean(), #s{}) ->
          {ok, map(), #s{}} | sluice_conn_handler:outcome().
upgrade(Owed, Reply, Pipelined, ReadPending, S) ->
    case listener_opts(S) of
        {ok, Opts} ->
            case sluice_conn_halfclose:is_shut(S) of
                false ->
                    release(Owed, Reply, Pipelined, ReadPending, Opts, S);
                true ->
                    %% The handler shut the write side down
                    %% (sluice_conn_halfclose): no "go ahead" can be sent.
                    sluice_conn_close:crash(exit, {starttls_unavailable, write_shut_down},
                                            [], S)
            end;
        {error, Why} ->
            ok = sluice_conn_handler:owed(Owed, S),
            sluice_conn_close:crash(exit, {starttls_unavailable, Why}, [], S)
    end.

%% The listener's options (tls_opts, handshake_timeout, socket_opts,
%% active) as it published them: read at the upgrade, not kept in every
%% connection's state, which a connection that never upgrades would pay
%% for on every copy of it. Whether the transport can be upgraded is its
%% own to say (sluice_transport:tls/1, `starttls'): looked up here, at
%% the upgrade, and only then.
listener_opts(#s{t = T, listener = Name}) ->
    case sluice_transport:tls(T) of
        starttls ->
            case sluice_registry:lookup(Name) of
                {ok, #{opts := Opts = #{tls_opts := [_ | _]}}} -> {ok, Opts};
                {ok, _} -> {error, no_tls_opts};
                error -> {error, listener_stopped}
            end;
        handshake ->
            {error, already_tls};
        _NoneOrUnsaid ->
            {error, {transport, sluice_transport:name(T)}}
    end.

release(Owed, Reply, Pipelined, ReadPending, Opts, S) ->
    %% A sluice:recv/3 in the callback that asked (or before it, in the
    %% same one) left what it read past what it returned, and whether the
    %% client closed: plaintext pipelined too, or the client's close. It
    %% may also have taken the answer of a read of mode `false' that was
    %% pending: the go-ahead then reads as if one were (first_bytes/3).
    %% (counted: sluice_conn_recv:unhandled/2)
    Recv = sluice_conn_recv:unhandled(S#s.stats, S#s.woke),
    case recv_left(Recv, sluice_transport_inet:release(S#s.ts)) of
        {ok, Sock, Unread} ->
            case Pipelined orelse Unread =/= [] orelse framed(S) of
                true -> {stop_after, Owed, {protocol_error, starttls_pipelined}, S};
                false ->
                    case send_files(Owed, Sock, S) of
                        {ok, Owed2} ->
                            go_ahead(Sock, [Owed2, Reply], ReadPending orelse Recv =/= none,
                                     Opts, S);
                        {error, Reason} -> {stop, {error, Reason}, S}
                    end
            end;
        {error, closed} ->
            %% The client closed after STARTTLS: no upgrade. It may have
            %% closed only its side (the inet listener keeps half-closed
            %% connections open) and still read: the replies owed to the
            %% frames before STARTTLS go out, as they would without it.
            ok = sluice_conn_handler:owed(Owed, S),
            {stop, closed, S};
        {error, Reason} ->
            {stop, {error, Reason}, S}
    end.

recv_left({<<>>, none}, Released) -> Released;
recv_left({Rest, none}, {ok, Sock, Unread}) -> {ok, Sock, [Rest | Unread]};
recv_left({_Rest, closed}, {ok, _Sock, _Unread}) -> {error, closed};
recv_left({_Rest, {error, Reason}}, {ok, _Sock, _Unread}) -> {error, Reason};
recv_left(_Recv, Released) -> Released.

%% Replies owed with files in them (`sendfile' pieces, a request before
%% STARTTLS in the same read) go out here, through the connection's own
%% send (the kernel sends the files), since the go-ahead's
%% gen_tcp:send/2 takes only iodata: what it sends is then `Reply' alone.
%% The driver's acknowledgements of those sends (each sent as the driver
%% takes the data) are taken out, as release/1 took those of earlier
%% replies: the handshake would move them to ssl's connection process
%% (gen_tcp:controlling_process/2), which logs each as a message it did
%% not expect.
send_files(Owed, Sock, S) ->
    try iolist_size(Owed) of
        _ -> {ok, Owed}
    catch error:badarg ->
            case sluice_conn_handler:send(Owed, S) of
                ok -> ok = acknowledged(Sock), {ok, []};
                Error -> Error
            end
    end.

acknowledged(Sock) ->
    receive {inet_reply, Sock, _} -> acknowledged(Sock)
    after 0 -> ok
    end.

%% A frame begun after the STARTTLS one.
framed(#s{frame = none}) -> false;
framed(#s{frame = F}) -> sluice_frame:pending(F) > 0.

%% The reply in plaintext, waiting for the driver to take it
%% (gen_tcp:send/2): its acknowledgement is taken here, where one left in
%% the mailbox would reach the handler as a stray message once the
%% connection is on TLS.
go_ahead(Sock, Out, ReadPending, Opts = #{handshake_timeout := Timeout}, S) ->
    try iolist_size(Out) of
        Size ->
            case gen_tcp:send(Sock, Out) of
                ok ->
                    ok = sluice_stats:sent(S#s.stats, Size),
                    Deadline = sluice_deadline:at(Timeout),
                    case first_bytes(ReadPending, Deadline, S) of
                        {ok, Prefix, Drain} -> handshake(Sock, Prefix, Deadline, Drain, Opts, S);
                        Stop -> Stop
                    end;
                {error, Reason} ->
                    {stop, {error, Reason}, S}
            end
    catch error:badarg ->
            sluice_conn_close:crash(exit, {bad_iodata, Out}, [], S)
    end.

%% The first bytes the client sends after the reply, the start of its
%% ClientHello, which go back in front of the stream for ssl: waited for
%% here, where a drain's message is seen, rather than in ssl's handshake,
%% blocked where none is. Its handler has started, so no gate of its
%% supervisor's cuts such a connection at a drain's deadline
%% (sluice_conns_sup), and with an `infinity' handshake_timeout nothing
%% else ever closed a client that never starts its handshake. A drain
%% seen here, or one the handler carried on through before, closes the
%% connection at its deadline (`drained', with terminate/2); if the
%% ClientHello comes first, it bounds the handshake too, and one seen
%% here reaches the handler once on TLS (handshake/6). A read of mode
%% `false' that is pending cannot be called back: its answer is these
%% bytes (activate/2 of `false' then starts none); in any other mode the
%% socket is armed once.
first_bytes(ReadPending, Deadline, S = #s{ts = TS}) ->
    Drain = {running_drain(S), none},
    %% (`false' with a read pending is that read: the driver takes one)
    Mode = case ReadPending of
               true -> false;
               false -> once
           end,
    case sluice_transport_inet:activate(TS, Mode) of
        {ok, TS2} -> client_hello(Deadline, Drain, S#s{ts = TS2});
        {error, Reason} -> {stop, {handshake_error, Reason}, S}
    end.

%% `{Bound, Seen}': the earliest deadline of the drains the connection is
%% under (one its handler carried on through, whose timer's message would
%% wait behind the handshake too, and those seen here), and the deadline
%% of the drains seen here, whose message was taken out; `none' for none.
client_hello(Deadline, Drain = {Bound, Seen}, S = #s{ts = TS}) ->
    Sock = sluice_transport_inet:socket(TS),
    receive
        {sluice_drain, D} ->
            client_hello(Deadline, {earliest(D, Bound), earliest(D, Seen)}, S);
        Msg when element(2, Msg) =:= Sock ->
            case sluice_transport_inet:classify(Msg, TS) of
                {data, Data, _} -> {ok, Data, Drain};
                {closed, _} -> {stop, {handshake_error, closed}, S};
                {error, Reason, _} -> {stop, {handshake_error, Reason}, S};
                _AckOrPassive -> client_hello(Deadline, Drain, S)
            end
    after sluice_deadline:left(earliest(Deadline, Bound)) ->
            {stop, waited_out(Deadline, Bound, S), S}
    end.

running_drain(#s{drain = {_Timer, Deadline}}) -> Deadline;
running_drain(#s{drain = undefined}) -> none.

%% Why a wait bounded by both ended: the drain's deadline, if it came
%% first (or with the handshake's), else the handshake's timeout. The
%% drain's: the connection was open at its deadline, and its supervisor
%% counts it so (drain/2's figure; sluice_conns_sup:at_deadline/1).
waited_out(Deadline, Bound, S) when Bound =/= none, Bound =< Deadline ->
    ok = sluice_conns_sup:at_deadline(S#s.parent),
    drained;
waited_out(_Deadline, _Bound, _S) ->
    {handshake_error, timeout}.

earliest(A, none) -> A;
earliest(infinity, B) -> B;
earliest(A, B) -> min(A, B).

%% The handshake proper, bounded by the drains too; done, the connection
%% gets a drain seen meanwhile as any other does (its message, taken out
%% above, sent again).
handshake(Sock, Prefix, Deadline, {Bound, Seen}, Opts, S) ->
    End = earliest(Deadline, Bound),
    case sluice_transport_ssl:handshake(Sock, Opts#{prefix => Prefix,
                                                    handshake_timeout := sluice_deadline:left(End)}) of
        {ok, TS} ->
            ok = drain_again(Seen),
            Info = #{tls := Tls} = sluice_transport_ssl:info(TS),
            {ok, Tls, sluice_conn:on_tls(TS, Info, S)};
        {error, timeout} ->
            {stop, waited_out(Deadline, Bound, S), S};
        {error, Reason} ->
            {stop, {handshake_error, Reason}, S}
    end.

drain_again(none) -> ok;
drain_again(Deadline) -> self() ! {sluice_drain, Deadline}, ok.

