%% @doc The connection process: owns one socket and drives a sluice_handler.
%%
%% A plain proc_lib process with its own receive loop rather than a
%% gen_server: every message costs one receive, one handler call and at
%% most one asynchronous send. Every message is first offered to the
%% transport (sluice_transport:classify/2), but two the receive knows by
%% the shape the transport named: the acknowledgement of a send (dropped)
%% and, under a running grant, a chunk (handed to the handler); what is
%% not the transport's is the library's (drain, the sweep's nudges, calls,
%% sys) or the handler's (handle_info/2).
%%
%% Delivery follows the listener's `active' option:
%% <ul>
%%  <li>`N': the loop keeps a credit, the chunks granted to the
%%      transport and not yet handled, and tops it up to N once half of it
%%      is used, so a connection that keeps up never goes passive and one
%%      that falls behind stops at N: the mailbox never holds more than N
%%      chunks, and a flooding client is held back by TCP. (On the inet
%%      driver a socket that is never deselected moves into the
%%      schedulers' own poll set, which saves a poll-thread wake-up per
%%      read; re-arming only on `passive' loses that.)</li>
%%  <li>`adaptive' (the default): as `N', with an N that moves between
%%      bounds (top_up/3).</li>
%%  <li>`once': re-armed after every chunk.</li>
%%  <li>`false': one asynchronous read at a time, answered by a message,
%%      so the process still sees drain requests and other messages.</li>
%%  <li>`true': no flow control: a client that sends faster than the
%%      handler works grows the mailbox without bound.</li>
%% </ul>
%% No timer is set on the per-message path: the idle timeout, hibernation
%% and parking are decided by the connection supervisor's sweep
%% (sluice_sweep), which sends a nudge; a handler's own timeout (a result
%% with a Timeout) costs a timer only while it asks for one, and a drain's
%% deadline one only while a handler carries on through a drain.
%% @private
-module(sluice_conn).

-include("sluice_conn.hrl").

%% On every read (next/3).
-compile({inline, [uncollected/2]}).

-export([template/3, template_opts/2, init/3, adopted/4, wake/1, unpark/5,
         code_change_parked/4]).
%% STARTTLS (sluice_conn_starttls)
-export([on_tls/3]).
%% the adaptive grant's rule, a pure function (sluice_conn_tests)
-export([adapt_grant/5]).

-export_type([template/0]).

%% What every connection of a listener starts from (template/3).
-opaque template() :: {#s{}, sluice_listener_sup:listener(), sluice_conns_sup:gate()}.
-export([system_continue/3, system_terminate/4, system_code_change/4,
         system_get_state/1, system_replace_state/2]).

%% @doc What every connection of `Listener' starts from, made once by its
%% connection supervisor: the parts of the state that do not depend on the
%% connection (which optional callbacks the handler has, and so on), the
%% supervisor's table for wake reports, and its gate between a
%% connection's start and its handler (sluice_conns_sup:pass_gate/1).
-spec template(sluice_listener_sup:listener(), sluice_sweep:woke_table(),
               sluice_conns_sup:gate()) -> template().
template(L = #{name := Name, transport := T, stats := Stats,
               opts := #{handler := {H, _}, active := Active, socket_opts := SocketOpts,
                         gc_after_bytes := GcAfter}}, Woke, Gate) ->
    {module, H} = code:ensure_loaded(H),
    {buffer, Buffer} = lists:keyfind(buffer, 1, SocketOpts),
    {Min, Max} = grant_bounds(Active, Buffer),
    {#s{t = T, handler = H, active = Active, stats = Stats, listener = Name, woke = Woke,
        classify = fun T:classify/2, send = fun T:send/2, activate = fun T:activate/2,
        handle_data = fun H:handle_data/2,
        grant = Min, grant_min = Min, grant_max = Max, small_read = small_read(T, Buffer),
        send_slice = sluice_transport:optional(T, send_slice, [], infinity),
        gc_after_bytes = GcAfter, timer_tag = make_ref(),
        has = sluice_conn_handler:optional(H)},
     L, Gate}.

%% @doc `Template' with other values for listener options that a
%% connection reads as it starts (init/3): the handler's options
%% (sluice:set_handler_opts/2; the module stays) and those
%% sluice_opts_change:per_connection/0 names
%% (sluice:set_transport_opts/2). None of them is in the state made from
%% the options (template/3), which stays as it is. A woken parked
%% connection does not start again: unpark/5 reads none of them.
-spec template_opts(template(), map()) -> template().
template_opts({S0, L = #{opts := Opts}, Gate}, Changes) ->
    {S0, L#{opts := maps:merge(Opts, Changes)}, Gate}.

%% `adaptive' (the default) starts where the mailbox of a client that
%% outruns its handler is small, and may grow while the client reads its
%% replies, to as many chunks as a pipelining client keeps in flight, up to
%% a number of bytes of reads (sluice_opts:adaptive_grant/0, top_up/2); a
%% fixed N stays N.
grant_bounds(adaptive, Buffer) ->
    #{min := Min, max_bytes := Bytes} = sluice_opts:adaptive_grant(),
    {Min, max(Min, Bytes div max(1, Buffer))};
grant_bounds(N, _Buffer) when is_integer(N) -> {N, N};
grant_bounds(_Mode, _Buffer) -> {0, 0}.

%% Below what size a chunk is a small read, for which an adaptive grant
%% grows (top_up/3): a quarter of a read on the transports whose chunks
%% are reads of up to `buffer'. Never on TLS: `ssl' delivers a record
%% (16 KiB at most) at a time, so a flooding client's chunks would look
%% small and its grant would grow past the mailbox bound.
small_read(sluice_transport_ssl, _Buffer) -> 0;
small_read(_T, Buffer) -> Buffer div 4.

%% @doc Entry point, spawned (linked) by sluice_conns_sup, which hands the
%% socket over and then sends `{sluice_go, Sock}' (if it dies first, the
%% link ends this process too).
%%
%% Before the handler sees anything: the PROXY header (if the listener
%% expects one), then the transport's handshake (TLS). Either failing ends
%% the connection with a counted reason. Either may wait for the client
%% (up to `proxy_timeout', `handshake_timeout'), blocked where a drain's
%% message cannot reach it: whatever came of them, the connection goes on
%% only through its supervisor's gate, which a drain closes at its
%% deadline on the connections still waiting (it kills them: they have no
%% handler to tell). Once through, the connection is its own, and a
%% drain reaches its handler as any other's.
-spec init(pid(), sluice_transport:socket(), template()) -> no_return().
init(Parent, Sock, {S0, L = #{transport := T, opts := Opts}, Gate}) ->
    receive
        {sluice_go, Sock} -> ok
    end,
    Before = before_handler(T, Sock, Opts),
    case sluice_conns_sup:pass_gate(Gate) of
        true -> through_gate(Before, Parent, Sock, S0, L);
        %% Cut by a drain, whose kill is on its way: the supervisor
        %% counts it (`drained').
        false -> exit(normal)
    end.

%% @doc Entry point of an adopted socket's connection (sluice:adopt/3),
%% spawned (linked) by sluice_conns_sup as init/3 is, and from then on the
%% same connection but for what comes before its handler: no PROXY header
%% is read (the socket was not accepted from a proxy: its owner read what
%% came first), and the bytes its owner had read (`buffered') are the
%% client's first, put back in front of the stream as a PROXY header's
%% leftover is (handshake/2's `prefix'): on `ssl' they are then the start
%% of the TLS handshake, as after an accept. An established TLS socket
%% (an ssl listener's hand-off gave it) has no handshake to run: its
%% buffered bytes are plaintext, left as a recv/3 leftover for init/2 and
%% then the loop (sluice_conn_recv:leftover/1).
-spec adopted(pid(), sluice_transport:socket(), sluice_adopt:adopted(), template()) ->
          no_return().
adopted(Parent, Sock, Adopted, {S0, L = #{transport := T, opts := Opts}, Gate}) ->
    receive
        {sluice_go, Sock} -> ok
    end,
    Before = adopted_before(T, Sock, Opts, Adopted),
    case sluice_conns_sup:pass_gate(Gate) of
        true -> through_gate(Before, Parent, Sock, S0, L);
        false -> exit(normal)
    end.

adopted_before(T, Sock, Opts, #{tls := none, buffered := Buffered}) ->
    handshake(T, Sock, Opts, none, Buffered);
adopted_before(sluice_transport_ssl, _Sock, _Opts, #{tls := Ssl, buffered := Buffered}) ->
    %% Its supervisor holds it (ssl lets any process name the owner).
    case ssl:controlling_process(Ssl, self()) of
        ok ->
            %% The plaintext its owner read: the client's first bytes for
            %% a recv of init/2 too (sluice_conn_recv:leftover/1).
            ok = sluice_conn_recv:leftover(Buffered),
            {handed, none, <<>>, sluice_transport_ssl:adopted(Ssl)};
        {error, _} ->
            {error, peer_closed}
    end.

%% The PROXY header, then the handshake. A client that closes before
%% sending a byte (a load balancer's TCP health check) is the client's
%% close, `peer_closed' from either, not a failure of theirs.
before_handler(T, Sock, Opts) ->
    case sluice_proxy:read(T, Sock, Opts) of
        {ok, Proxy, Prefix} ->
            handshake(T, Sock, Opts, Proxy, Prefix);
        {error, peer_closed} ->
            {error, peer_closed};
        {error, Reason} ->
            {error, {proxy_error, Reason}}
    end.

%% The transport's handshake, with the bytes already read from the client
%% (after a PROXY header, or an adopted socket's owner's) put back in
%% front of its stream.
handshake(T, Sock, Opts, Proxy, Prefix) ->
    case T:handshake(Sock, Opts#{prefix => Prefix}) of
        {ok, TS} -> {ok, Proxy, Prefix, TS};
        {error, peer_closed} -> {error, peer_closed};
        {error, Reason} -> {error, {handshake_error, Reason}}
    end.

through_gate({ok, Proxy, Prefix, TS}, Parent, Sock, S0, L = #{transport := T}) ->
    through_gate({handed, Proxy, prefix(T, Prefix), TS}, Parent, Sock, S0, L);
through_gate({handed, Proxy, Prefix, TS}, Parent, Sock, S0, L = #{transport := T, opts := Opts}) ->
    S = S0#s{parent = Parent, ts = TS, frame = frame(Opts),
             sent_ack = sent_ack(T, TS), data_tag = data_tag(S0, TS),
             %% Read again, not the template's: a handler reloaded since
             %% the listener started may have gained or lost one (l(Mod),
             %% a release upgrade), as a gen_server's would
             has = sluice_conn_handler:optional(S0#s.handler)},
    start(S, L, conn(L, Sock, Proxy, TS), Prefix);
through_gate({error, peer_closed}, _Parent, Sock, _S0, L) ->
    probed(Sock, L);
through_gate({error, Reason}, _Parent, Sock, _S0, L) ->
    refuse(Sock, L, Reason).

%% The shapes the loop's receive takes without classifying (see loop/1):
%% the transport's name for them, or a fresh reference as the tag, which
%% no message has.
sent_ack(T, TS) ->
    named(T, sent_ack, TS).

%% Chunks that need no classifying: those of a running grant.
data_tag(#s{t = T, active = Mode}, TS) when is_integer(Mode); Mode =:= adaptive; Mode =:= true ->
    named(T, data_tag, TS);
data_tag(_S, _TS) ->
    unnamed().

named(T, Callback, TS) ->
    sluice_transport:optional(T, Callback, [TS], unnamed()).

unnamed() ->
    {make_ref(), none}.

%% What a handler's init/2 is given (sluice:conn()).
conn(#{name := Name, transport := T}, Sock, Proxy, TS) ->
    Conn = #{listener => Name, pid => self(), transport => T, socket => Sock},
    maps:merge(case Proxy of
                   none -> Conn;
                   _ -> Conn#{proxy => Proxy}
               end, T:info(TS)).

%% Bytes read after a PROXY header are the client's first data. A
%% transport that puts them back in front of its stream (handshake/2's
%% `prefix', sluice_transport's delivers_prefix/0: the library's three)
%% has the first grant deliver them behind what init/2 queued: handed to
%% the handler here, before the loop, they overtook the handler's own
%% sluice:send/2 (and messages to itself) of init/2, whose data then went
%% out after the reply to the client's first request, unlike without the
%% PROXY protocol. Any other transport's connection hands them over
%% (first/2). Asked only when there are such bytes.
prefix(_T, <<>>) ->
    <<>>;
prefix(T, Prefix) ->
    case sluice_transport:optional(T, delivers_prefix, [], false) of
        true -> <<>>;
        false -> Prefix
    end.

%% A client that connected and closed without a byte: what a load
%% balancer's TCP health check does every few seconds. Counted as the
%% client's close and not logged: it is no fault, and logged it drowned
%% the notices of real ones.
-spec probed(sluice_transport:socket(), sluice_listener_sup:listener()) -> no_return().
probed(Sock, #{transport := T, stats := Stats}) ->
    T:close_socket(Sock),
    sluice_conn_close:counted_end(ended, Stats, peer_closed).

%% A connection that never reached its handler: counted and, because the
%% same fault can come from every client, logged at most once a second.
%% Whether it is logged is decided before the socket closes, so that of
%% refusals one after the other (each client waiting for the close of the
%% one before) the first is the one logged, not whichever got there first.
-spec refuse(sluice_transport:socket(), sluice_listener_sup:listener(), term()) -> no_return().
refuse(Sock, #{name := Name, transport := T, stats := Stats}, Reason) ->
    sluice_log:refused(Name, Stats, Reason),
    T:close_socket(Sock),
    sluice_conn_close:counted_end(ended, Stats, Reason).

start(S, #{opts := #{handler := {_, HOpts}}}, Conn, Prefix) ->
    Started = sluice_telemetry:connection_start(S#s.listener, self(), Conn),
    case sluice_conn_handler:init(Conn, HOpts, S#s{started = Started}) of
        {continue, S2} ->
            first(Prefix, S2);
        {stop, Reason, S2} ->
            sluice_conn_close:finish(Reason, S2);
        {stop_after, Out, Reason, S2} ->
            sluice_conn_close:linger_close(Out, Reason, S2);
        {starttls, Owed, Reply, Pipelined, S2} ->
            starttls(Owed, Reply, Pipelined, false, S2)
    end.

%% Bytes that came in the PROXY header's read, on a transport of the
%% user's (the library's put them back, prefix/2), were not delivered by
%% a grant: they go to the handler before the first one, which is then
%% whole. (Granting first and handling them as a chunk would count a
%% chunk the transport never sent, and with `false' start a second read
%% beside the first: the inet driver refuses it and the connection died.)
first(<<>>, S) ->
    arm(S);
first(Prefix, S) ->
    case sluice_conn_handler:data(Prefix, S) of
        {continue, S2} -> arm(S2);
        {stop, Reason, S2} -> sluice_conn_close:finish(Reason, S2);
        {stop_after, Out, Reason, S2} -> sluice_conn_close:linger_close(Out, Reason, S2);
        {starttls, Owed, Reply, Pipelined, S2} -> starttls(Owed, Reply, Pipelined, false, S2);
        {handoff, Owed, Reply, To, Rest, S2} ->
            sluice_conn_handoff:handoff(Owed, Reply, To, Rest, false, S2)
    end.

arm(S) ->
    case activate(first_grant(S), S) of
        {ok, S2} -> loop(armed(S2));
        {error, Reason} -> sluice_conn_close:finish({error, Reason}, S)
    end.

%% What the transport is armed with first: N (or the adaptive grant's
%% start) chunks, which are the whole credit.
first_grant(#s{active = Mode, grant = G}) when is_integer(Mode); Mode =:= adaptive -> G;
first_grant(#s{active = Mode}) -> Mode.

armed(S = #s{active = Mode, grant = G}) when is_integer(Mode); Mode =:= adaptive ->
    S#s{credit = G};
armed(S) -> S.

frame(#{framing := none}) -> none;
frame(#{framing := Spec}) -> {ok, F} = sluice_frame:new(Spec), F;
frame(_) -> none.

%% @doc Entry point of a parked connection's new process, spawned (linked)
%% by sluice_conns_sup when the parked socket has an event, with the
%% handler's and the framer's states the connection parked with (and its
%% telemetry start time, so that its stop event has the whole duration, and
%% its logger metadata): it hands
%% the socket over and then sends `{sluice_go, Sock, Event}'. The socket was
%% parked in `once' mode, and is passive if the event is data.
-spec unpark(pid(), sluice_transport:socket(), term(), sluice_transport:tstate(),
             template()) -> no_return().
unpark(Parent, Sock, Parked, TS, {S00, _L, _Gate}) ->
    %% A half-closed connection parks with a mark that it is
    %% (sluice_conn_halfclose:parked/2).
    {{HState, Frame, Started, LoggerMeta}, S0 = #s{t = T}} =
        sluice_conn_halfclose:unparked(Parked, S00),
    %% The process's logger metadata (the PROXY header's addresses,
    %% sluice_proxy:label/1) is the woken process's too.
    _ = LoggerMeta =:= undefined orelse logger:set_process_metadata(LoggerMeta),
    receive
        {sluice_go, Sock, Event} ->
            TS2 = T:unpark(TS),
            %% The handler's Conn names the pid that parked (sluice:recv/3)
            ok = sluice_conn_recv:context(T, TS2, T:info(TS2), S0#s.stats, Frame),
            resumed(Event, S0#s{parent = Parent, ts = TS2, hstate = HState, frame = Frame,
                                started = Started,
                                has = sluice_conn_handler:optional(S0#s.handler),
                                sent_ack = sent_ack(T, TS2), data_tag = data_tag(S0, TS2)})
    end.

resumed({data, Data}, S = #s{active = true}) ->
    case activate(true, S) of
        {ok, S2} -> data(Data, S2);
        {error, R} -> sluice_conn_close:finish({error, R}, S)
    end;
resumed({data, Data}, S = #s{active = N}) when is_integer(N); N =:= adaptive ->
    %% This chunk was the one granted: handling it re-arms to the grant.
    data(Data, S#s{credit = 1});
resumed({data, Data}, S) ->
    data(Data, S);
resumed({sluice_drain, Deadline}, S = #s{active = true}) ->
    %% Woken for a drain, the socket is still armed `once' as it parked:
    %% a handler that carries on through the drain would read one chunk,
    %% then nothing more (`true' never re-arms).
    case activate(true, S) of
        {ok, S2} -> drain(Deadline, S2);
        {error, R} -> sluice_conn_close:finish({error, R}, S)
    end;
resumed({sluice_drain, Deadline}, S = #s{active = N}) when is_integer(N); N =:= adaptive ->
    %% The read the socket is still armed with is the credit: the chunk
    %% that uses it re-arms to the grant, as a woken chunk does (with none,
    %% the grant was one chunk larger than the mailbox bound for good).
    drain(Deadline, S#s{credit = 1});
resumed({sluice_drain, Deadline}, S) ->
    drain(Deadline, S);
resumed(Reason, S) ->
    %% closed, {error, _}, idle_timeout
    sluice_conn_close:finish(Reason, S).

%%% The loop -----------------------------------------------------------

loop(S = #s{classify = Classify, ts = TS, sent_ack = {AckTag, AckId},
            data_tag = {DataTag, DataId}}) ->
    receive
        {AckTag, AckId, ok} -> loop(S);
        {DataTag, DataId, Data} -> data(Data, S);
        Msg -> dispatch(Classify(Msg, TS), Msg, S)
    end.

%% A transport whose state did not change returns the same term: matching
%% it bound saves rebuilding the loop's state.
dispatch({data, Data, TS}, _Msg, S = #s{ts = TS}) -> data(Data, S);
dispatch({ignore, TS}, _Msg, S = #s{ts = TS}) -> loop(S);
dispatch({data, Data, TS2}, _Msg, S) -> data(Data, S#s{ts = TS2});
dispatch({ignore, TS2}, _Msg, S) -> loop(S#s{ts = TS2});
dispatch({passive, TS2}, _Msg, S) -> passive(S#s{ts = TS2});
dispatch({closed, TS2}, _Msg, S) -> sluice_conn_close:finish(closed, S#s{ts = TS2});
dispatch({error, Reason, TS2}, _Msg, S) -> sluice_conn_close:finish({error, Reason}, S#s{ts = TS2});
dispatch(other, Msg, S) -> control(Msg, S).

%% Messages that are not the transport's: the library's, then the
%% handler's.
control({sluice_drain, Deadline}, S) ->
    drain(Deadline, S);
control({sluice_sweep, hibernate}, S) ->
    %% Quiet for hibernate_after: give the heap back (a full GC down to
    %% the live state) until the next message.
    proc_lib:hibernate(?MODULE, wake, [S]);
control({sluice_sweep, park}, S) ->
    park(S);
control({sluice_sweep, idle_timeout}, S) ->
    sluice_conn_close:finish(idle_timeout, S);
control({timeout, Ref, Tag}, S = #s{timer = Ref, timer_tag = Tag}) ->
    continue(sluice_conn_handler:timeout(S#s{timer = undefined}));
control({timeout, Ref, Tag}, S = #s{timer = {persistent, _, Ref, _, _}, timer_tag = Tag}) ->
    %% A persistent Timeout's timer (sluice_conn_timeout): due, or
    %% started again for what is left after the callbacks since.
    case sluice_conn_timeout:fired(S) of
        {due, S2} -> continue(sluice_conn_handler:timeout(S2));
        {later, S2} -> loop(S2)
    end;
control({timeout, Ref, sluice_drain}, S = #s{drain = {Ref, _}}) ->
    %% The deadline of a drain the handler carried on through
    %% (draining/2). Matched by its reference: a handler's own timer
    %% with the same message still goes to handle_info/2.
    drained(S);
control({'$sluice_recv', _, _, _} = Recv, S) ->
    {Rest, End} = sluice_conn_recv:taken(Recv, S#s.woke),
    recv_done(Rest, End, S);
control({'$sluice', From, {send, Data}}, S) ->
    case sluice_conn_halfclose:is_shut(S) of
        false -> api_send(From, Data, S);
        true ->
            %% The handler shut the write side down (sluice_conn_halfclose).
            ok = sluice_conn_halfclose:refused_send(From),
            loop(S)
    end;
control({'$sluice', none, uncount}, S = #s{parent = Parent}) ->
    %% sluice:remove_connection/1: the supervisor counts (sluice_conns_sup).
    Parent ! {sluice_uncount, self()},
    loop(S);
control({'$sluice', From, close}, S) ->
    reply(From, ok),
    sluice_conn_close:linger_close([], closed_by_api, S);
control({'$sluice', From, {call, Req}}, S) ->
    continue(sluice_conn_handler:call(Req, From, S));
control({'EXIT', Parent, Reason}, S = #s{parent = Parent}) ->
    %% Only a handler that traps exits gets this as a message (otherwise
    %% the signal ends the process): its connection supervisor is shutting
    %% it down, or died. As a gen_server does, and as a sys terminate
    %% does (system_terminate/4): end, with terminate/2. Handed to
    %% handle_info/2 instead, the connection lived on after its supervisor.
    sluice_conn_close:finish({shutdown, Reason}, S);
control({system, From, Req}, S) ->
    sys:handle_system_msg(Req, From, S#s.parent, ?MODULE, [], S);
control({timeout, _StaleRef, Tag}, S = #s{timer_tag = Tag}) ->
    %% A result's timer that had fired when a later result cancelled it
    %% (sluice_conn_handler:timer/2). Known by its tag, which is the
    %% library's alone: a handler's own timer whose message is the same
    %% term but for the reference (it was the atom `sluice_timeout') still
    %% goes to handle_info/2.
    loop(S);
control(Msg, S) ->
    continue(sluice_conn_handler:info(Msg, S)).

api_send(From, Data, S) ->
    case sluice_conn_handler:send(Data, S) of
        ok ->
            reply(From, ok),
            loop(S);
        {error, Reason} ->
            reply(From, {error, Reason}),
            sluice_conn_close:finish({error, Reason}, S)
    end.

reply(none, _Reply) -> ok;
reply(From, Reply) -> gen:reply(From, Reply).

%% After a callback that was not about data: the grant is unchanged.
continue({continue, S}) -> loop(S);
continue({stop, Reason, S}) -> sluice_conn_close:finish(Reason, S);
continue({stop_after, Out, Reason, S}) -> sluice_conn_close:linger_close(Out, Reason, S);
continue({starttls, Owed, Reply, Pipelined, S}) ->
    %% Mode `false' has a read pending between chunks.
    starttls(Owed, Reply, Pipelined, S#s.active =:= false, S);
continue({handoff, Owed, Reply, To, Rest, S}) ->
    sluice_conn_handoff:handoff(Owed, Reply, To, Rest, S#s.active =:= false, S).

%% @doc Where a hibernated connection resumes when a message arrives. The
%% sweep stops watching a hibernated connection, so it is told when this
%% one is awake again, unless the message ends the connection: after a
%% storm, thousands of hibernated connections wake for their clients'
%% close at once, and their supervisor has their exits to handle as it is.
-spec wake(#s{}) -> no_return().
wake(S = #s{t = T, ts = TS}) ->
    receive
        {sluice_sweep, park} ->
            %% Woken by the sweep to park: no activity to report.
            park(S);
        Msg ->
            %% (The ending cases call finish/2 themselves: through
            %% dispatch/3, whose clauses for them never return, dialyzer
            %% takes these calls for ones that cannot succeed.)
            case T:classify(Msg, TS) of
                {closed, TS2} -> sluice_conn_close:finish(closed, S#s{ts = TS2});
                {error, Reason, TS2} -> sluice_conn_close:finish({error, Reason}, S#s{ts = TS2});
                Classified ->
                    ok = sluice_sweep:report_woke(S#s.woke),
                    dispatch(Classified, Msg, S)
            end
    end.

data(Data, S) ->
    Size = byte_size(Data),
    case sluice_conn_handler:chunk(Data, Size, S) of
        {handled, HState} -> next(Size, HState, S);
        {continue, S2} -> next(Size, S2#s.hstate, S2);
        {stop, Reason, S2} -> sluice_conn_close:finish(Reason, S2);
        {stop_after, Out, Reason, S2} -> sluice_conn_close:linger_close(Out, Reason, S2);
        {starttls, Owed, Reply, Pipelined, S2} -> starttls(Owed, Reply, Pipelined, false, S2);
        {handoff, Owed, Reply, To, Rest, S2} ->
            %% No read of mode `false' is pending: it brought this chunk
            sluice_conn_handoff:handoff(Owed, Reply, To, Rest, false, S2)
    end.

%%% sluice:recv/3 -------------------------------------------------------

%% A callback read the socket itself (sluice_conn_recv) and left what it
%% read past what it returned (Rest) and the end of the stream if it saw
%% it. Its delivery was stopped, and the grant's credit is void: paused
%% again (the callback's result may have topped the grant up since), Rest
%% goes to the handler, then the end ends the connection (the peer's
%% close: handle_close/1, `peer_closed'), or the chunks a top-up delivered
%% meanwhile are handled and a first grant is made, as when a parking is
%% called off (resume/1). A recv in the callbacks that get Rest leaves
%% its own message: taken here before anything is granted, which would
%% put the socket's next bytes in front of its Rest.
recv_done(Rest, End, S = #s{t = T, ts = TS}) ->
    S2 = S#s{ts = T:recv_resume(TS)},
    case Rest of
        <<>> -> recv_end(End, S2);
        _ ->
            case sluice_conn_handler:data(Rest, S2) of
                {continue, S3} -> recv_end(End, S3);
                {stop, Reason, S3} -> sluice_conn_close:finish(Reason, S3);
                {stop_after, Out, Reason, S3} -> sluice_conn_close:linger_close(Out, Reason, S3);
                {starttls, Owed, Reply, Pipelined, S3} ->
                    %% Whatever else recv or a grant delivered is
                    %% plaintext pipelined past STARTTLS
                    starttls(Owed, Reply, Pipelined, false, S3);
                {handoff, Owed, Reply, To, Rest2, S3} ->
                    %% What a grant delivered meanwhile is in the mailbox
                    %% still: the hand-off takes it, behind Rest2
                    sluice_conn_handoff:handoff(Owed, Reply, To, Rest2, false, S3)
            end
    end.

recv_end(none, S) ->
    case sluice_conn_recv:pending(S#s.woke) of
        {Rest, End} -> recv_done(Rest, End, S);
        none -> resume(S)
    end;
recv_end(closed, S) ->
    sluice_conn_close:finish(closed, S);
recv_end({error, Reason}, S) ->
    sluice_conn_close:finish({error, Reason}, S).

%%% STARTTLS -----------------------------------------------------------

%% The handler asked for TLS (sluice_conn_starttls). Once the handshake is
%% done the transport's delivery starts anew, whichever callback asked:
%% the grant of the plaintext socket was withdrawn (its chunks, if any,
%% closed the connection), so the credit is a first grant's. The chunk
%% that carried STARTTLS is not counted against the new grant.
starttls(Owed, Reply, Pipelined, ReadPending, S) ->
    case sluice_conn_starttls:upgrade(Owed, Reply, Pipelined, ReadPending, S) of
        {ok, Tls, S2} -> upgraded(sluice_conn_handler:starttls_done(Tls, S2));
        Ending -> upgraded(Ending)
    end.

upgraded({continue, S}) -> arm(S);
upgraded({stop, Reason, S}) -> sluice_conn_close:finish(Reason, S);
upgraded({stop_after, Out, Reason, S}) -> sluice_conn_close:linger_close(Out, Reason, S);
upgraded({starttls, Owed, Reply, Pipelined, S}) -> starttls(Owed, Reply, Pipelined, false, S);
upgraded({handoff, Owed, Reply, To, Rest, S}) ->
    sluice_conn_handoff:handoff(Owed, Reply, To, Rest, false, S).

%% @doc The connection's state once it is on TLS (sluice_conn_starttls),
%% `TS' the ssl transport's: the calls it makes through its transport and
%% the shapes of its messages, as template/3 and init/3 set them for a
%% connection of an `ssl' listener. Nothing is armed. `Info': the ssl
%% transport's info/1 of it, which STARTTLS asked for already (recv's
%% context is made from it, not asked for again).
-spec on_tls(sluice_transport:tstate(), map(), #s{}) -> #s{}.
on_tls(TS, Info, S) ->
    T = sluice_transport_ssl,
    S2 = S#s{t = T, ts = TS, classify = fun T:classify/2, send = fun T:send/2,
             activate = fun T:activate/2, small_read = small_read(T, 0),
             send_slice = T:send_slice(), credit = 0, exhausted = false},
    %% The handler's Conn names the plaintext socket (sluice:recv/3)
    ok = sluice_conn_recv:context(T, TS, Info, S#s.stats, S#s.frame),
    S2#s{sent_ack = sent_ack(T, TS), data_tag = data_tag(S2, TS)}.

%% The listener drains. A handler that closes then closes gracefully:
%% what was read is still answered, and the client sees FIN. One that
%% carries on does so until it closes or the deadline passes (draining/2).
drain(Deadline, S) ->
    case sluice_conn_handler:drain(S) of
        {continue, S2} -> draining(Deadline, S2);
        {stop, Reason, S2} -> sluice_conn_close:graceful_close(Reason, Deadline, S2);
        {stop_after, Out, Reason, S2} -> sluice_conn_close:linger_close(Out, Reason, S2)
    end.

%% A handler that carries on through a drain is closed at its deadline
%% all the same (sluice_handler's handle_drain/1 promises it): a timer of
%% the connection's own, whose message the loop takes among the library's
%% (control/2), so the per-chunk path is the same, the handler never sees
%% it, and its own timer (`timer') is left alone. A timer rather than the
%% sweep: a hibernated connection is woken by its message, and the drain's
%% deadline is kept to the millisecond. While it runs the connection does
%% not park (park/1): the new process would be handed the drain again
%% (sluice_conns_sup), and its handler asked a second time.
%%
%% A second drain (say drain/2, then stop_listener/2 with less time) asks
%% handle_drain/1 again; the earlier of the two deadlines stands. A timer
%% that can no longer be cancelled has fired: its deadline, later than the
%% new one, has passed.
draining(Deadline, S = #s{drain = undefined}) ->
    loop(S#s{drain = drain_timer(Deadline)});
draining(Deadline, S = #s{drain = {_, Set}}) when Set =< Deadline ->
    loop(S);
draining(Deadline, S = #s{drain = {Ref, _}}) ->
    case erlang:cancel_timer(Ref) of
        false -> drained(S);
        _Left -> loop(S#s{drain = drain_timer(Deadline)})
    end.

drain_timer(Deadline) ->
    {erlang:start_timer(Deadline, self(), sluice_drain, [{abs, true}]), Deadline}.

%% The drain's deadline has passed: close as a drain does, with reason
%% `drained' (what a handler without handle_drain/1 is closed with). By
%% now there is no time left to wait for the client's close, but what was
%% read is still answered and the client sees FIN, as when a drain's
%% graceful close reaches its deadline (sluice_conn_close:graceful_close/3).
%% Its supervisor counts it among those open at the deadline (drain/2's
%% figure), as the graceful close does one still waiting for its client.
drained(S = #s{parent = Parent}) ->
    ok = sluice_conns_sup:at_deadline(Parent),
    sluice_conn_close:graceful_close(drained, erlang:monotonic_time(millisecond), S).

%%% Flow control -------------------------------------------------------

%% After a chunk of Size bytes, `once' and `false' need a new grant to get
%% the next one; `N' and `adaptive' top the grant up once half of it is
%% used; `true' never.
%%
%% (Until 2026-11 `adaptive' granted a chunk shorter than 512 bytes alone,
%% `once': re-arming a passive inet socket reads at once when the client's
%% next request is there, which saved a lock-step round trip its poll. It
%% did not pay: a client on another core or host is never there yet, and
%% one sharing the server's core was there only when the re-arm came a
%% microsecond or more after the reply, not right after it; a read that
%% waits costs more than a running grant, and where requests did wait (the
%% flood) a grant was as cheap. bench/README.md, "Lock-step: single reads,
%% removed" and "Lock-step: what the seed's passive loop shows", has the
%% measurements.)
%% HState is the handler's state after the chunk: it goes into the loop's
%% state in the same copy as the credit and the bytes read since the last
%% collection (uncollected/2).
next(Size, HState, S = #s{active = Mode, credit = C, grant = G})
  when is_integer(Mode); Mode =:= adaptive ->
    Read = uncollected(Size, S),
    case C - 1 of
        Left when Left > G div 2 -> loop(S#s{credit = Left, hstate = HState, uncollected = Read});
        Left -> top_up(Left, Size, S#s{hstate = HState, uncollected = Read})
    end;
next(Size, HState, S = #s{active = true}) ->
    loop(S#s{hstate = HState, uncollected = uncollected(Size, S)});
next(Size, HState, S = #s{active = Mode}) ->
    rearm(Mode, S#s{hstate = HState, uncollected = uncollected(Size, S)}).

%% The bytes read since the last collection, after a read of Size: 0 if
%% this read makes it time to collect, which it does (collect/0).
uncollected(Size, #s{uncollected = U, gc_after_bytes = After}) ->
    case U + Size of
        Read when Read >= After -> collect(), 0;
        Read -> Read
    end.

%% Every read is a new binary, which the process holds until its next
%% collection; left to the VM, that comes once a few hundred KiB of them
%% have piled up (its min_bin_vheap_size), so every busy connection holds
%% a score of dead reads, and the next read is written to memory the
%% caches lost long ago. A minor collection once `gc_after_bytes' have
%% been read frees them while they are still in the caches, and the next
%% read (this connection's or another's) gets the same memory back: 200
%% busy connections ran up to 10-13% faster (bench/README.md, "Reads
%% freed at once"). The handled chunk is garbage by now (not even the
%% stack refers to it), and a minor collection of a connection's small
%% young heap costs about 0.2 us. The handler sees no difference: its pid,
%% mailbox and timers are untouched.
collect() ->
    erlang:garbage_collect(self(), [{type, minor}]).

%% The transport ran out of grant. Every chunk sent before `passive' has
%% been handled by now, so the credit left is what a top-up granted after
%% it went passive: it is active again with it. Only when none is left
%% must it re-arm.
passive(S = #s{active = Mode, credit = 0}) when is_integer(Mode); Mode =:= adaptive ->
    top_up(0, 0, S#s{exhausted = true});
passive(S) ->
    loop(S#s{exhausted = true}).

%% Grant again, up to the grant, which an adaptive one first adjusts. It
%% doubles, up to the maximum, for a client that reads its replies
%% (nothing backed up on the output) and either keeps more chunks coming
%% than the grant allows (the transport ran out: each time it does, the
%% inet driver takes the socket out of the schedulers' poll set and a poll
%% thread has to put it back) or sends small reads (Size bytes, the last
%% one: a lock-step client, whose top-ups then come every many round
%% trips; small reads cannot fill memory). A client whose replies back up
%% (it does not read them) is back to the minimum, which bounds what it can
%% make this process hold. An integer grant adds to what the transport has
%% left.
top_up(Left, Size, S = #s{t = T, ts = TS, grant = G, grant_min = Min, grant_max = Max}) ->
    G2 = case Min =:= Max of
             true -> G;
             false -> adapt_grant(G, Min, Max, T:output_queued(TS),
                                  S#s.exhausted orelse Size < S#s.small_read)
         end,
    case G2 > Left of
        true ->
            rearm(G2 - Left, S#s{credit = G2, grant = G2, exhausted = false});
        false ->
            %% Shrunk below what is still outstanding: grant nothing until
            %% the credit falls under the new grant's half.
            loop(S#s{credit = Left, grant = G2, exhausted = false})
    end.

%% @doc The adaptive grant after `G' (top_up/3): the minimum when the
%% connection's output has backed up, twice `G' (up to the maximum) when
%% the client wants more (the grant ran out, or its reads are small),
%% otherwise `G'.
-spec adapt_grant(pos_integer(), pos_integer(), pos_integer(), boolean(), boolean()) ->
          pos_integer().
adapt_grant(_G, Min, _Max, true, _WantsMore) -> Min;
adapt_grant(G, _Min, Max, false, true) -> min(2 * G, Max);
adapt_grant(G, _Min, _Max, false, false) -> G.

rearm(Mode, S) ->
    case activate(Mode, S) of
        {ok, S2} -> loop(S2);
        {error, Reason} -> sluice_conn_close:finish({error, Reason}, S)
    end.

activate(Mode, S = #s{activate = Activate, ts = TS}) ->
    case Activate(TS, Mode) of
        {ok, TS} -> {ok, S};
        {ok, TS2} -> {ok, S#s{ts = TS2}};
        Error -> Error
    end.

%%% Parking ------------------------------------------------------------

%% Hand the socket and the handler state to the conns_sup and exit: an
%% idle connection then holds no process. Delivery is paused first
%% (synchronous: every chunk the transport delivered has been sent to this
%% process by then), and the connection parks only if nothing at all is
%% waiting for it (queued/0); otherwise it handles what was delivered,
%% re-arms and carries on (and tells the conns_sup it is awake). The sweep
%% sends `park' only to a connection of a listener that parks
%% (sluice_parking:parkable/1).
park(S = #s{timer = undefined, drain = undefined,
            has = #{handle_info := false, handle_call := false}}) ->
    %% A handler that traps exits does so to get terminate/2 when its
    %% supervisor shuts it down (docs/handler.md): parked, it would get no
    %% callback at a shutdown, and woken, its new process would not trap.
    case erlang:process_info(self(), trap_exit) of
        {trap_exit, false} -> parks(S);
        {trap_exit, true} -> stay(S)
    end;
park(S) ->
    %% A handler's timer, or a drain's deadline (draining/2), is running:
    %% the process it would fire in must stay. Or the handler has gained
    %% handle_info/2 or handle_call/3 since the listener started
    %% (reloaded): it is reached at its pid, which parking would change
    %% (sluice_parking:parkable/1).
    stay(S).

%% A connection upgraded by STARTTLS is on the `ssl' transport, which
%% cannot hold a socket armed for its supervisor: its state is ssl's
%% connection process, not the socket (and the supervisor would arm it as
%% its listener's plain socket). It hibernates instead, without reporting
%% itself awake: the sweep then leaves it as one told to park until a
%% message wakes it (wake/1 reports that). Reported awake (stay/1), it was
%% told to park again at every tick of a quiet spell, each time woken and
%% kept out of hibernation: with `park_after' no longer than
%% `hibernate_after' it never hibernated.
parks(S = #s{t = T}) ->
    case erlang:function_exported(T, park, 1) of
        true -> hand_over(S);
        false -> proc_lib:hibernate(?MODULE, wake, [S])
    end.

%% Not parking: awake, as the sweep is told.
stay(S) ->
    ok = sluice_sweep:report_woke(S#s.woke),
    loop(S).

%% @doc A parked connection's state (what hand_over/1 gives its
%% supervisor) at a code change of its handler `H': the handler's part
%% through its code_change/3 (sluice_conns_sup:system_code_change/4).
-spec code_change_parked(term(), module(), term(), term()) -> {ok, term()} | term().
code_change_parked(Parked, H, OldVsn, Extra) ->
    case sluice_conn_handler:code_change_state(H, OldVsn, element(1, Parked), Extra) of
        {ok, HState2} -> {ok, setelement(1, Parked, HState2)};
        Error -> Error
    end.

hand_over(S = #s{t = T, parent = Parent, hstate = HState}) ->
    case T:pause(S#s.ts) of
        {ok, TS} ->
            S2 = S#s{ts = TS},
            case queued() of
                0 ->
                    Sock = T:socket(TS),
                    case T:handover(Sock, Parent) of
                        ok ->
                            %% The framer's state too: a frame may be half in;
                            %% when the connection started, for the telemetry
                            %% stop event's duration; its logger metadata.
                            %% Whether it is half-closed, too.
                            Parked = {HState, S#s.frame, S#s.started,
                                      logger:get_process_metadata()},
                            Parent ! {sluice_park, self(), Sock,
                                      sluice_conn_halfclose:parked(Parked, S), TS},
                            exit(normal);
                        {error, Reason} ->
                            sluice_conn_close:finish({error, Reason}, S2)
                    end;
                _ ->
                    ok = sluice_sweep:report_woke(S#s.woke),
                    resume(S2)
            end;
        {error, Reason} ->
            sluice_conn_close:finish({error, Reason}, S)
    end.

%% How many messages are waiting for this process, every one that has
%% arrived counted. process_info(self(), message_queue_len) alone counts
%% only the messages a receive has already taken in (OTP 25): a chunk the
%% port sent while this process was running, between the receive that
%% brought `park' and the pause, waits uncounted in the signal queue, and
%% parking would drop it with the process: the client's request lost and
%% its connection silent (bench/park_stress.escript: about 1 Ping in
%% 100,000 before this). A receive, even one that matches nothing, takes
%% in everything that has arrived.
queued() ->
    receive '$sluice_conn_nothing' -> ok after 0 -> ok end,
    {message_queue_len, N} = erlang:process_info(self(), message_queue_len),
    N.

%% Parking was called off, or a handler's sluice:recv/3 stopped delivery
%% (recv_done/3): handle what the transport delivered before the pause,
%% then grant anew (the pause withdrew what was left of the grant).
resume(S = #s{t = T, ts = TS}) ->
    case T:await(TS, 0) of
        {data, Data, TS2} ->
            case sluice_conn_handler:data(Data, S#s{ts = TS2}) of
                {continue, S2} -> resume(S2);
                {stop, Reason, S2} -> sluice_conn_close:finish(Reason, S2);
                {stop_after, Out, Reason, S2} -> sluice_conn_close:linger_close(Out, Reason, S2);
                {starttls, Owed, Reply, Pipelined, S2} ->
                    %% What is still delivered after this chunk was sent
                    %% before the reply: plaintext pipelined past STARTTLS
                    starttls(Owed, Reply, Pipelined, false, S2);
                {handoff, Owed, Reply, To, Rest, S2} ->
                    sluice_conn_handoff:handoff(Owed, Reply, To, Rest, false, S2)
            end;
        {timeout, TS2} ->
            S2 = armed(S#s{ts = TS2}),
            rearm(first_grant(S2), S2);
        {closed, TS2} ->
            sluice_conn_close:finish(closed, S#s{ts = TS2});
        {error, Reason, TS2} ->
            sluice_conn_close:finish({error, Reason}, S#s{ts = TS2})
    end.

%%% sys callbacks, so that sys:get_state/1 and friends work on a connection.

-spec system_continue(pid(), [sys:dbg_opt()], #s{}) -> no_return().
system_continue(_Parent, _Debug, S) ->
    loop(S).

-spec system_terminate(term(), pid(), [sys:dbg_opt()], #s{}) -> no_return().
system_terminate(Reason, _Parent, _Debug, S) ->
    sluice_conn_close:finish({shutdown, Reason}, S).

%% sys:change_code/4, as a release upgrade makes it on every process whose
%% child spec names the module (sluice_conns_sup lists the handler's):
%% the handler's code_change/3, as a gen_server's, whatever the module
%% (the loop's own record needs none).
-spec system_code_change(#s{}, module(), term(), term()) -> {ok, #s{}} | term().
system_code_change(S, _Module, OldVsn, Extra) ->
    sluice_conn_handler:code_change(OldVsn, Extra, S).

%% sys:get_state/1 and sys:replace_state/2 see the handler's state, as a
%% gen_server's show its callback module's: without these they saw the
%% loop's record, and a replace_state fun written for the handler's state
%% either failed or gave the loop a state it crashed on. (The loop's own
%% state is still in sys:get_status/1.)
-spec system_get_state(#s{}) -> {ok, term()}.
system_get_state(#s{hstate = HState}) ->
    {ok, HState}.

-spec system_replace_state(fun((term()) -> term()), #s{}) -> {ok, term(), #s{}}.
system_replace_state(StateFun, S = #s{hstate = HState}) ->
    HState2 = StateFun(HState),
    {ok, HState2, S#s{hstate = HState2}}.
