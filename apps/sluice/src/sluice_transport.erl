%% @doc The transport behaviour: everything a listener and a connection
%% process need from a socket layer. `inet' (gen_tcp on the inet driver),
%% `socket' (OTP's socket NIF) and `ssl' (OTP's TLS over gen_tcp) implement
%% it; any other module that does can be named in a listener's `transport'.
%%
%% Two kinds of value go through it:
%% <ul>
%%  <li>a raw socket (`socket()'): what accept/2 returns. Acceptors, the
%%      connection supervisors (handover, the idle sweep's byte count,
%%      parking) and the PROXY protocol reader only ever hold this;</li>
%%  <li>a connection's transport state (`tstate()'): what handshake/2
%%      makes of the raw socket in the connection process (for TLS, after
%%      the handshake). It is the transport's own term: the connection
%%      loop passes it back on every call and never looks inside.</li>
%% </ul>
%% Delivery is by messages to the connection process. The loop hands every
%% message it receives to classify/2, which says whether it was this
%% transport's and what it meant: data, passive (the grant ran out),
%% closed, an error, or nothing to act on (`ignore': an answer to an
%% asynchronous send, a wake-up of the transport's own). The loop never
%% matches a driver's or a NIF's messages itself.
%%
%% Flow control belongs to the loop: it grants chunks with activate/2 and
%% tops the grant up as it handles them (sluice_conn). A transport only
%% keeps the count the way its layer does (the inet driver and ssl count
%% themselves; the socket transport counts in its state).
-module(sluice_transport).

-export([module/1, name/1, is_transport/1, optional/4, family/1, tls/1]).
%% for the transports' handoff/2
-export([delivered/2]).

-export_type([socket/0, lsock/0, tstate/0, mode/0, listen_opts/0, conn_opts/0,
              classified/0, awaited/0, tls/0]).

-type socket() :: term().
-type lsock() :: term().
-type tstate() :: term().
%% A grant of chunks: `once' and `false' (one asynchronous read) grant
%% one; an integer adds that many to what is left (as inet:setopts/2 does
%% for `{active, N}'); `true' grants without end. (The listener option's
%% `adaptive' is the connection loop's: it grants integers.)
-type mode() :: false | once | true | pos_integer().
-type listen_opts() :: #{ip := inet:ip_address() | {local, binary()}, backlog := pos_integer(),
                         reuseport := boolean(), socket_opts := list(),
                         tls_opts => list()}.
%% What handshake/2 is given: the listener's options (socket_opts,
%% tls_opts, handshake_timeout) as validated by sluice_opts.
-type conn_opts() :: map().
-type classified() :: {data, binary(), tstate()}
                    | {passive, tstate()}
                    | {closed, tstate()}
                    | {error, term(), tstate()}
                    | {ignore, tstate()}
                    | other.
%% What a transport does with the listener's `tls_opts' (tls/0).
-type tls() :: handshake | starttls | none.
-type awaited() :: {data, binary(), tstate()}
                 | {closed, tstate()}
                 | {error, term(), tstate()}
                 | {timeout, tstate()}.

%%% The listening side: the listen-socket owner and the acceptors.

-callback listen(inet:port_number(), listen_opts()) -> {ok, lsock()} | {error, term()}.
-callback accept(lsock(), timeout()) -> {ok, socket()} | {error, term()}.
-callback listen_port(lsock()) -> {ok, inet:port_number()} | {error, term()}.
-callback close_listener(lsock()) -> ok.

%%% Raw sockets, between accept and the connection's handshake.

%% Make Pid the owner of a socket the caller owns, whatever its state.
-callback controlling_process(socket(), pid()) -> ok | {error, term()}.
%% The same for a socket that is passive and has nothing queued for the
%% caller (an acceptor's fresh socket): no safety steps, as cheap as the
%% layer allows.
-callback handover(socket(), pid()) -> ok | {error, term()}.
%% A passive read on a raw socket that nothing has armed (the PROXY header
%% before any handshake): Length 0 means whatever is there.
-callback recv(socket(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
%% Bytes received on the socket so far, read without disturbing its owner:
%% the idle sweep's measure of "nothing from the client".
-callback bytes_received(socket()) -> non_neg_integer().
-callback close_socket(socket()) -> ok.
%% The TCP addresses (under TLS too: the layer below it), or `{local,
%% Path}' on a Unix socket.
-callback peername(socket()) -> {ok, sluice:address()} | {error, term()}.
-callback sockname(socket()) -> {ok, sluice:address()} | {error, term()}.

%%% The connection process.

%% Called once by the connection process, which owns the socket: set up
%% what the transport needs (for TLS: the handshake, bounded by the
%% options' handshake_timeout). Nothing is armed yet. `{error,
%% peer_closed}' says the client closed without sending a byte (a load
%% balancer's TCP health check): counted as the client's close and not
%% logged; any other error is a failed handshake (`handshake_error').
-callback handshake(socket(), conn_opts()) -> {ok, tstate()} | {error, term()}.
-callback activate(tstate(), mode()) -> {ok, tstate()} | {error, term()}.
-callback classify(Msg :: term(), tstate()) -> classified().
%% A selective wait for this transport's own messages only, for the
%% moments when other messages must stay queued (flushing what was read
%% before a graceful close, discarding until the peer closes).
-callback await(tstate(), timeout()) -> awaited().
%% Stop delivery, synchronously: once it returns, every chunk the layer
%% had delivered is in the mailbox and no more come until activate/2.
-callback pause(tstate()) -> {ok, tstate()} | {error, term()}.
%% Queue data without waiting for the peer. Must not leave the caller
%% waiting longer than the listener's send_timeout.
-callback send(tstate(), iodata()) -> ok | {error, term()}.
%% Whether data sent earlier still waits on this side (the peer is not
%% reading its replies): the adaptive grant grows only while it does not.
-callback output_queued(tstate()) -> boolean().
-callback shutdown(tstate(), read | write | read_write) -> ok | {error, term()}.
-callback close(tstate()) -> ok.
%% What a handler may want to know of the connection beyond addresses
%% (for TLS: protocol version, cipher, ALPN, SNI); `#{}' if nothing.
-callback info(tstate()) -> map().
%% The raw socket under the state (for parking, for sluice:conn()).
-callback socket(tstate()) -> socket().

%%% Parking (optional): a connection supervisor holds a quiet
%%% connection's raw socket, armed to tell it of the next event.

-callback park(tstate()) -> ok | {error, term()}.
%% A message to the holder of parked sockets: which socket, and what
%% happened (`{data, Bin}', `closed', `{error, Reason}'), or `other'.
-callback parked_event(term()) -> {socket(), {data, binary()} | closed | {error, term()}} | other.
%% The state a woken connection resumes with, from the state it parked.
-callback unpark(tstate()) -> tstate().
%% The message this socket's sends are acknowledged with when they went
%% well, and which means nothing else, as `{Tag, Id}' for the message
%% `{Tag, Id, ok}' (inet: `{inet_reply, Sock}'): the connection drops it
%% without classifying it. In this shape the loop's receive matches it
%% element by element; a whole message bound to a variable is compared by
%% a call into the runtime for every message that arrives (callgrind: 180
%% instructions a lock-step round trip). Optional.
-callback sent_ack(tstate()) -> {atom(), term()}.
%% The message a running grant (`active' N or true) delivers a chunk in,
%% as `{Tag, Id}' for the message `{Tag, Id, Data}' (inet: `{tcp, Sock}'):
%% while a grant runs, the connection hands such a chunk to its handler
%% without classify/2, so the transport must need nothing from seeing it
%% (callgrind: classify/2 and the dispatch of its result are 450
%% instructions a lock-step round trip). Not used in the modes `once' and
%% `false', whose chunks still go through classify/2. Optional.
-callback data_tag(tstate()) -> {atom(), term()}.

%% Of the bytes send/2 took, how many never reached the kernel and never
%% will (a layer that queues sends itself and drops its queue on a
%% failure), read as the connection ends, before close/1: info/1's
%% `bytes_out' gives them back. Optional: without it, none.
-callback unsent(tstate()) -> non_neg_integer().

%% Whether a send or a re-arm that failed with `closed' failed because the
%% peer had closed: the connection then ends as the peer's close
%% (handle_close/1, `peer_closed'), not as a socket error. For a layer
%% that ends both directions at the peer's close (OTP 25's ssl, on its
%% close_notify or FIN), where a reply can lose the race with it.
%% Optional: without it, a socket error.
-callback closed_by_peer(tstate()) -> boolean().

%% The most bytes one send/2 should be given when a reply is a list: a
%% transport that makes one binary of what it sends (OTP's socket:send/3,
%% ssl's records) would otherwise hold every reply of a read at once
%% (sluice_conn_handler:send/2 slices longer lists). Optional: without
%% it, a list goes out in one send, as the inet driver takes it (it
%% queues references to the binaries).
-callback send_slice() -> pos_integer().

%% Send Bytes (more than 0) of the raw file Fd from Offset, behind
%% everything sent before, without the caller holding them (the kernel's
%% sendfile(2)): `{ok, Sent}', fewer than Bytes only at the file's end.
%% Must not leave the caller waiting longer than the listener's
%% send_timeout (`{error, timeout}'). Optional: without it, a file in a
%% reply is read and given to send/2 64 KiB at a time
%% (sluice_conn_sendfile).
-callback sendfile(tstate(), file:fd(), Offset :: non_neg_integer(), Bytes :: pos_integer()) ->
    {ok, non_neg_integer()} | {error, term()}.

%% Whether handshake/2 puts the bytes its options' `prefix' holds (read
%% after a PROXY header, before the handshake) back in front of the
%% socket's stream itself, for the first grant to deliver them as any
%% chunk: behind what init/2 queued for the connection (its own
%% sluice:send/2, a message to itself), as without the PROXY protocol.
%% Optional: without it (or `false'), the connection hands them to the
%% handler as the first chunk, before the first grant.
-callback delivers_prefix() -> boolean().

%% Whether handshake/2 may wait for the client (a TLS handshake does: up to
%% the options' handshake_timeout), blocked where a drain's message cannot
%% reach the connection: its connection supervisor then closes such
%% connections at a drain's deadline itself (sluice_conns_sup's gate).
%% Optional: without it, `true' (a gate costs a connection two ETS
%% operations; a missing one leaves a drain waiting).
-callback handshake_waits() -> boolean().

%% What the transport does with the listener's `tls_opts', which decides
%% how they are checked at start and whether they may change while it
%% runs:
%% <ul>
%%  <li>`handshake': handshake/2 runs TLS with them on every connection
%%      (`ssl'): a certificate and its key are required and checked at
%%      start (sluice_opts), as ssl will read them, and
%%      sluice:set_transport_opts/2 may change them;</li>
%%  <li>`starttls': a connection may be upgraded in-band by its handler
%%      (`inet'; sluice_conn_starttls): the same, when tls_opts are given.
%%      The upgrade works on the connection state of
%%      sluice_transport_inet: say it only for a transport whose state is
%%      that one (a wrapper of inet, as a test's faulty transport is);</li>
%%  <li>`none': the transport cannot run TLS (`socket': OTP 25's ssl runs
%%      over gen_tcp only): tls_opts are refused at start.</li>
%% </ul>
%% Optional: without it, tls_opts are handed to handshake/2 unchecked (a
%% transport of the user's may read them itself) and cannot change.
-callback tls() -> tls().

%%% A handler's synchronous read (optional): sluice:recv/3, from inside a
%%% callback, in the connection process (sluice_conn_recv). Without all
%%% three, recv/3 answers `{error, not_supported}'. recv_pause/1 and
%%% recv_read/2 are given the handler's `Conn' (sluice:conn(): its
%%% `socket', and what info/1 added to it, such as ssl's socket), not the
%%% loop's state, which a callback cannot reach; after a STARTTLS, a
%%% `Conn' of the upgraded connection.

%% Stop delivery synchronously, as pause/1, and take out of the mailbox,
%% in order, the chunks delivered meanwhile (and any bytes the transport
%% holds for the first grant, such as a PROXY header's leftover: once
%% taken, not delivered again), and the end of the stream if it came:
%% `closed' (the peer's close) or `{error, Reason}'. The acknowledgements
%% of sends stay for the loop. May be called again while paused.
-callback recv_pause(sluice:conn()) ->
    {[binary()], none | closed | {error, term()}}.
%% A read of the paused socket: whatever is there, at least one byte,
%% waiting up to Timeout (`{error, timeout}'); `{error, closed}' at the
%% peer's close. Bytes it returns are the caller's: nothing is kept back.
-callback recv_read(sluice:conn(), timeout()) -> {ok, binary()} | {error, term()}.
%% The connection loop's state after a recv: delivery stopped again
%% (synchronously: the loop may have granted more since), nothing of the
%% grant before pending, ready for a first grant.
-callback recv_resume(tstate()) -> tstate().

%%% A handler's socket options (optional).

%% Set socket options on a connection's raw socket (sluice:setopts/2),
%% from any process, the connection's or another: gen_tcp's names and
%% values, already checked to be the few a handler may set (the kernel's:
%% nodelay, keepalive, sndbuf, recbuf, priority, tos, linger), so a
%% transport need not check them again. Fails with the socket's reason
%% (`einval', `eperm'...), `closed' for a socket that has closed. Without
%% this callback sluice:setopts/2 answers `{error, not_supported}'.
-callback setopts(socket(), [sluice:sockopt()]) -> ok | {error, term()}.
%% Read them (sluice:getopts/2): the same names, the values as gen_tcp
%% gives them.
-callback getopts(socket(), [sluice:sockopt_name()]) ->
    {ok, [sluice:sockopt()]} | {error, term()}.

%%% A hand-off (optional).

%% Give the connection's socket to Pid, a local process that becomes its
%% owner (a handler's `{handoff, Reply, Pid, State}'): delivery stopped as
%% by pause/1, every chunk the layer had delivered to the caller taken out
%% of its mailbox, in order, and returned, and none of its messages left
%% to reach Pid that Pid did not ask for. Returns the socket Pid is to
%% use with the layer's own functions (gen_tcp's port, a `socket' socket,
%% an `ssl' sslsocket), passive. `{error, closed}' when the socket had
%% closed (the chunks before it are dropped: the connection ends as its
%% client's close). Without this callback a hand-off crashes the
%% connection with `{handoff_unavailable, {transport, Name}}'.
-callback handoff(tstate(), pid()) -> {ok, term(), [binary()]} | {error, term()}.

-optional_callbacks([park/1, parked_event/1, unpark/1, sent_ack/1, data_tag/1, unsent/1,
                     closed_by_peer/1, send_slice/0, sendfile/4, delivers_prefix/0,
                     handshake_waits/0, tls/0, setopts/2, getopts/2, handoff/2,
                     recv_pause/1, recv_read/2, recv_resume/1]).

%% @doc For a transport's handoff/2: delivery paused (pause/1) and the
%% chunks it had delivered taken out of the mailbox through await/2, in
%% order. `{error, closed}' (or the socket's error) if it ended first.
-spec delivered(module(), tstate()) -> {ok, [binary()], tstate()} | {error, term()}.
delivered(T, TS) ->
    case T:pause(TS) of
        {ok, TS2} -> collect(T, TS2, []);
        Error -> Error
    end.

collect(T, TS, Acc) ->
    case T:await(TS, 0) of
        {data, Data, TS2} -> collect(T, TS2, [Data | Acc]);
        {timeout, TS2} -> {ok, lists:reverse(Acc), TS2};
        {closed, _} -> {error, closed};
        {error, Reason, _} -> {error, Reason}
    end.

%% @doc The address family of a listener's `ip' as gen_tcp and socket name
%% it: a Unix socket (`{local, Path}') is `local'.
-spec family(inet:ip_address() | {local, binary() | string()}) -> inet | inet6 | local.
family({local, _}) -> local;
family(IP) when tuple_size(IP) =:= 4 -> inet;
family(IP) when tuple_size(IP) =:= 8 -> inet6.

%% @doc What transport T (a name or a module) does with `tls_opts', as
%% its tls/0 says, or `undefined' where it does not say.
-spec tls(atom()) -> tls() | undefined.
tls(T) ->
    optional(module(T), tls, [], undefined).

%% @doc The callback module for a transport name or module.
-spec module(inet | socket | ssl | module()) -> module().
module(inet) -> sluice_transport_inet;
module(socket) -> sluice_transport_socket;
module(ssl) -> sluice_transport_ssl;
module(M) when is_atom(M) -> M.

%% @doc The name a listener was given for its transport module.
-spec name(module()) -> atom().
name(sluice_transport_inet) -> inet;
name(sluice_transport_socket) -> socket;
name(sluice_transport_ssl) -> ssl;
name(M) -> M.

%% @doc What T's optional callback F returns for Args, or Default where T
%% does not have it.
-spec optional(module(), atom(), list(), term()) -> term().
optional(T, F, Args, Default) ->
    _ = code:ensure_loaded(T),
    case erlang:function_exported(T, F, length(Args)) of
        true -> apply(T, F, Args);
        false -> Default
    end.

%% @doc Whether `Name' names a transport: one of the three, or a loaded
%% module that exports every required callback of this behaviour.
-spec is_transport(term()) -> boolean().
is_transport(Name) when is_atom(Name) ->
    M = module(Name),
    _ = code:ensure_loaded(M),
    lists:all(fun({F, A}) -> erlang:function_exported(M, F, A) end, required());
is_transport(_) ->
    false.

required() ->
    ?MODULE:behaviour_info(callbacks) -- ?MODULE:behaviour_info(optional_callbacks).
