%% @doc The behaviour a protocol implements. The library owns the socket and
%% the receive loop (active modes and flow control, framing, the idle
%% timeout, counting, draining, TLS); a handler turns bytes into replies.
%%
%% A connection is one process, and a handler's callbacks all run in it:
%% `self()' is the connection's pid for its whole life, timers and monitors
%% a handler sets are its own. (Parking, which ends that process while the
%% connection is quiet, happens only on a listener that asks for it with
%% `park_after', and never to a handler with handle_info/2 or
%% handle_call/3.)
%%
%% == Results ==
%% handle_data/2, handle_info/2, handle_call/3, handle_timeout/1 and
%% handle_drain/1 return one of:
%% <ul>
%%  <li>`{ok, State}': nothing to send;</li>
%%  <li>`{reply, IoData, State}': send IoData (in order with every other
%%      reply);</li>
%%  <li>`{close, Reason, State}': close the connection; a Reason of
%%      `{protocol_error, Why}' is counted in the listener's
%%      `protocol_errors';</li>
%%  <li>`{reply_close, IoData, Reason, State}': send IoData, then close
%%      without a reset (FIN after the data; what the peer still sends is
%%      read and dropped for a moment) and without handing the handler
%%      anything more: e.g. the replies owed for the requests before a bad
%%      one.</li>
%%  <li>`{reply_shutdown, IoData, State}': send IoData, then shut the
%%      write side down (FIN: the client reads to its end) and go on
%%      reading: handle_data/2 gets what the client still sends, until it
%%      closes (handle_close/1, `peer_closed'), the handler closes, or a
%%      timeout. IoData may be `[]'. Nothing can be sent after it: a
%%      non-empty reply (or `reply_close''s) crashes the connection with
%%      `{reply_after_shutdown, Bytes}'; `{ok, ...}' and `{close, ...}'
%%      are fine.</li>
%% </ul>
%% handle_data/2, handle_info/2, handle_call/3, handle_timeout/1 (and
%% init/2) may also return `{starttls, IoData, State}' on a listener with
%% `transport => inet' and `tls_opts' (not handle_drain/1, and not
%% handle_starttls/2: the connection is on TLS already): send
%% IoData in plaintext (the protocol's "go ahead"), then upgrade the
%% connection to TLS on the same socket, as an `ssl' listener's handshake
%% (`handshake_timeout'; a failure closes it as `handshake_error', with
%% terminate/2). Bytes the client sent after the STARTTLS frame and before
%% the handshake (pipelined plaintext) are never handed over: the
%% connection closes as `{protocol_error, starttls_pipelined}'. On
%% `socket' or `ssl', or without `tls_opts', the connection crashes with
%% `{starttls_unavailable, Why}'. Once the handshake is done,
%% handle_starttls/2 gets the TLS facts.
%% They may also return `{handoff, IoData, To, State}' (not init/2 nor
%% handle_drain/1; `To' a local pid): send IoData, then give the socket to
%% `To', which gets `{sluice_handoff, Conn, Buffered}' (Conn with the
%% socket it now owns, Buffered the bytes read and not handled); the
%% connection ends as the listener's, counted as `handoff', with
%% terminate(handoff, State) (docs/handler.md, "Handing the socket off").
%% `{ok, State, Timeout}', `{reply, IoData, State, Timeout}',
%% `{reply_shutdown, IoData, State, Timeout}' and
%% `{starttls, IoData, State, Timeout}' also ask
%% for handle_timeout/1 if no other callback runs within Timeout ms
%% (`infinity': none). Every result replaces the timeout of the one before,
%% and one without a Timeout has none, unless a result gave
%% `{persistent, Ms}': from then on a result without a Timeout has Ms, one
%% with a Timeout has that one (for itself), until a result gives
%% `{persistent, infinity}'.
%% Anything else is a bug in the handler: the connection crashes with
%% `{bad_return_value, {Module, Callback, Value}}'.
%%
%% init/2 returns `{ok, State}', `{ok, State, Timeout}', `{reply, IoData,
%% State}' (the server speaks first, e.g. a greeting), `{reply, IoData,
%% State, Timeout}', `{reply_close, IoData, Reason, State}' (say it and
%% close: a banner, a daytime server; terminate/2 runs), `{close, Reason,
%% State}' (close without a word, after a look at the connection, with
%% the State terminate/2 runs with) or `{close, Reason}' (refuse: no
%% terminate/2). Both closes count Reason as any other close of the
%% handler's.
%%
%% == Sending a file ==
%% A reply list (of `reply' or `reply_close', from any callback) may hold
%% `{sendfile, File, Offset, Length}' pieces: `Length' bytes of `File' (a
%% filename, or a raw file the handler opened and keeps open until the
%% reply is out) from `Offset', `Length' 0 for the rest of the file, sent
%% in order with the bytes around them, e.g. `[Headers, {sendfile, Path,
%% 0, Size}]'. The connection never holds the file: the kernel sends it
%% (sendfile(2)) on `inet' and `socket', and on `ssl' it is read and sent
%% 64 KiB at a time. Each MiB of it must be taken within the listener's
%% `send_timeout', or the connection closes as a socket error. A file
%% that cannot be opened or read, or that ends before `Offset + Length',
%% crashes the connection with `{sendfile_failed, Why, Piece}'.
%%
%% == Ending ==
%% Close reasons the library counts by name in info/1's `close_reasons':
%% `{protocol_error, _}', `frame_timeout', `idle_timeout', `drained',
%% `handshake_error', `proxy_error', `peer_closed' (the client closed),
%% `socket_error'; any other reason a handler closes with counts as
%% `handler', and a handler that raises as `crashed'. Before terminate/2:
%% handle_close/1 when the client closed, handle_error/2 on a socket error
%% or when the handler raised.
-module(sluice_handler).

-type timeout_ms() :: non_neg_integer() | infinity.
%% A result's Timeout: ms (or `infinity') for this result only, or
%% `{persistent, Ms}' for every later result without one too, until
%% `{persistent, infinity}' (see Results above).
-type timeout_spec() :: timeout_ms() | {persistent, timeout_ms()}.
%% What a `reply' or `reply_close' sends: iodata, or a list that also
%% holds files (see Sending a file above).
-type reply() :: iodata() | reply_list().
-type reply_list() :: maybe_improper_list(byte() | binary() | reply_list() | sendfile(),
                                          binary() | []).
%% `Length' 0: from `Offset' to the file's end.
-type sendfile() :: {sendfile, File :: file:name_all() | file:fd(),
                     Offset :: non_neg_integer(), Length :: non_neg_integer()}.
-type result(State) :: {ok, State}
                     | {ok, State, timeout_spec()}
                     | {reply, reply(), State}
                     | {reply, reply(), State, timeout_spec()}
                     | {close, term(), State}
                     | {reply_close, reply(), term(), State}
                     | {reply_shutdown, reply(), State}
                     | {reply_shutdown, reply(), State, timeout_spec()}
                     | {starttls, iodata(), State}
                     | {starttls, iodata(), State, timeout_spec()}
                     | {handoff, reply(), pid(), State}.
-type init_result(State) :: {ok, State}
                          | {ok, State, timeout_spec()}
                          | {reply, reply(), State}
                          | {reply, reply(), State, timeout_spec()}
                          | {reply_close, reply(), term(), State}
                          | {reply_shutdown, reply(), State}
                          | {reply_shutdown, reply(), State, timeout_spec()}
                          | {close, term(), State}
                          | {starttls, iodata(), State}
                          | {starttls, iodata(), State, timeout_spec()}
                          | {close, term()}.
-type from() :: gen_server:from().
-export_type([result/1, init_result/1, from/0, timeout_ms/0, timeout_spec/0, reply/0,
              sendfile/0]).

-callback init(sluice:conn(), Opts :: term()) -> init_result(State :: term()).
%% A chunk as read from the socket or, with the listener's `framing'
%% option, one whole frame: a binary, but with `{split, Fun}' whatever
%% Fun cut (any term), so a handler matching tuples must not draw a
%% callback-type warning from Dialyzer.
-callback handle_data(Data :: binary() | term(), State) -> result(State).
%% Any message that is not the library's, e.g. from other processes.
-callback handle_info(term(), State) -> result(State).
%% sluice:call/3 from another process; answer with sluice:reply(From,
%% Reply), now or later. (The caller waits on the connection's pid: a
%% handler that has this callback never parks.)
-callback handle_call(Request :: term(), From :: from(), State) -> result(State).
%% No callback ran within the Timeout of the last result. Without this
%% callback the connection closes with reason `timeout'.
-callback handle_timeout(State) -> result(State).
%% The listener is draining (sluice:stop_listener/2, drain/2). `{close,
%% Reason, State}' (what happens when the callback is absent) makes the
%% library finish what it has read, send a FIN and wait for the peer to
%% close up to the drain deadline; `{ok, State}' keeps the connection
%% going until the handler closes it or the deadline passes, when the
%% library closes it with reason `drained' (what was read is answered,
%% then FIN). The deadline takes nothing from the handler: its own
%% timeout and timers run as before, and no message of the library's
%% reaches handle_info/2.
-callback handle_drain(State) -> result(State).
%% A STARTTLS result's handshake is done: the connection is on TLS, and
%% `Tls' is what init/2's `Conn' carries as `tls' on an `ssl' listener
%% (protocol, cipher, sni, alpn, peer_cert). Without this callback the
%% connection carries on with the state it had.
-callback handle_starttls(Tls :: map(), State) -> result(State).
%% The client closed the connection. The return value is ignored.
-callback handle_close(State :: term()) -> any().
%% The connection failed: `{socket_error, Why}', or `{crash, Class,
%% Reason, Stacktrace}' when a callback raised. The return value is
%% ignored.
-callback handle_error(Reason :: term(), State :: term()) -> any().
-callback terminate(Reason :: term(), State :: term()) -> any().
%% sys:change_code/4 on the connection, as a release upgrade makes it for
%% an appup's `{update, Handler, {advanced, Extra}}' (and, at their
%% supervisor, for the states of parked connections): the state in its
%% new shape, as a gen_server's code_change/3. Anything else is the
%% upgrade's error, and the state is kept. Without this callback the state
%% is kept as it is.
-callback code_change(OldVsn :: term() | {down, term()}, State, Extra :: term()) ->
    {ok, State} | {error, term()}.

-optional_callbacks([handle_info/2, handle_call/3, handle_timeout/1, handle_drain/1,
                     handle_starttls/2,
                     handle_close/1, handle_error/2, terminate/2, code_change/3]).
