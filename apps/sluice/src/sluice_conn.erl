%% @doc The connection process: owns one socket and drives a sluice_handler.
%%
%% It is a plain proc_lib process with its own receive loop rather than a
%% gen_server: every message costs one receive, one handler call and at most
%% one asynchronous send, nothing else. Delivery follows the listener's
%% `active' option:
%% <ul>
%%  <li>`N' (the default, 10): the driver sends up to N messages, then
%%      goes passive. The loop keeps a count of the messages it has granted
%%      and not yet handled, and tops the grant up to N once half of it is
%%      used, so a connection that keeps up never goes passive; one that
%%      falls behind stops at N. The mailbox never holds more than N chunks,
%%      so a flooding client is held back by TCP, not by memory. (Never
%%      going passive matters: the VM moves a descriptor that is never
%%      deselected into the schedulers' own poll set, which saves a poll
%%      thread wake-up and an epoll_ctl per read. Re-arming only on
%%      tcp_passive took lock-step round trips from 0.80 of C to 0.64 at
%%      N = 10.)</li>
%%  <li>`once': re-armed after every chunk (a port call per chunk).</li>
%%  <li>`false': one asynchronous read at a time, answered by a message, so
%%      the process still sees drain requests and handle_info messages.</li>
%%  <li>`true': no flow control at all: a client that sends faster than the
%%      handler works grows this process's mailbox without bound.</li>
%% </ul>
-module(sluice_conn).

-include("sluice_counters.hrl").

-export([init/4, wake/1, unpark/4]).
-export([system_continue/3, system_terminate/4, system_code_change/4]).

-record(s, {sock,
            transport :: module(),
            handler :: module(),
            hstate :: term(),
            active :: false | once | true | pos_integer(),
            %% active=N: messages granted to the driver and not yet handled
            credit = 0 :: non_neg_integer(),
            counters :: counters:counters_ref(),
            parent :: pid(),
            callbacks :: #{info := boolean(), drain := boolean(),
                           terminate := boolean()}}).

%% How long a new connection process waits for the acceptor to hand it the
%% socket; only an acceptor that died in between makes it wait that long.
-define(HANDOVER_TIMEOUT, 5000).

%% After `reply_close' (e.g. acks owed before a protocol error) the replies
%% go out, then FIN, and the connection reads and drops what the peer still
%% sends for at most this long: closing with unread bytes would send RST,
%% and an RST can make the peer's kernel throw away replies it has not read.
-define(CLOSE_LINGER_MS, 1000).

%% @doc Entry point, spawned (linked) by sluice_conns_sup. The acceptor
%% transfers the socket and then sends `{sluice_go, Sock}'. An acceptor can
%% be killed in between (suspend/1 and drain/2 stop the acceptors with
%% brutal_kill): then the socket is closed or is this process's, and
%% waiting out the handover timeout would hold a drain up to its deadline
%% for a connection that will never run (seen as "1 connection closed at
%% the deadline" in sluice_drain_load_SUITE).
-spec init(pid(), sluice_transport:socket(), pid(), map()) -> no_return().
init(Parent, Sock, Acceptor, L = #{name := Name, transport := T, handler := {H, HOpts},
                                   active := Active}) ->
    MRef = erlang:monitor(process, Acceptor),
    receive
        {sluice_go, Sock} -> erlang:demonitor(MRef, [flush]);
        {'DOWN', MRef, process, _, _} -> exit(normal)
    after ?HANDOVER_TIMEOUT ->
            exit(normal)
    end,
    S0 = state(Parent, Sock, L),
    Conn = #{listener => Name, socket => Sock, transport => T},
    case H:init(Conn, HOpts) of
        {ok, HState} ->
            S = S0#s{hstate = HState},
            case T:activate(Sock, Active) of
                ok when is_integer(Active) -> loop(S#s{credit = Active});
                ok -> loop(S);
                {error, R} -> finish({error, R}, S)
            end;
        {close, Reason} ->
            T:close(Sock),
            count_reason(Reason, S0#s.counters),
            exit(normal)
    end.

state(Parent, Sock, #{transport := T, handler := {H, _}, active := Active,
                      counters := C}) ->
    #s{sock = Sock, transport = T, handler = H, active = Active,
       counters = C, parent = Parent,
       callbacks = #{info => erlang:function_exported(H, handle_info, 2),
                     drain => erlang:function_exported(H, handle_drain, 1),
                     terminate => erlang:function_exported(H, terminate, 2)}}.

%% @doc Entry point of a parked connection's new process, spawned (linked)
%% by sluice_conns_sup when the parked socket has an event: it transfers
%% the socket and then sends `{sluice_go, Sock, Event}'. The socket is in
%% `once' mode, and passive if the event is data.
-spec unpark(pid(), sluice_transport:socket(), term(), map()) -> no_return().
unpark(Parent, Sock, HState, L) ->
    receive
        {sluice_go, Sock, Event} ->
            resumed(Event, (state(Parent, Sock, L))#s{hstate = HState})
    after ?HANDOVER_TIMEOUT ->
            exit(normal)
    end.

resumed({data, Data}, S = #s{active = true, sock = Sock, transport = T}) ->
    case T:activate(Sock, true) of
        ok -> data(Data, S);
        {error, R} -> finish({error, R}, S)
    end;
resumed({data, Data}, S = #s{active = N}) when is_integer(N) ->
    %% This chunk was the one message granted: handling it re-arms to N.
    data(Data, S#s{credit = 1});
resumed({data, Data}, S) ->
    data(Data, S);
resumed({sluice_drain, Deadline}, S) ->
    drain(Deadline, S);
resumed(Reason, S) ->
    %% closed, {error, _}, idle_timeout
    finish(Reason, S).

%% The messages matched here are the inet driver's: data (`tcp' in active
%% modes, `inet_async' for the asynchronous read of active=false), flow
%% control (`tcp_passive') and the answers to asynchronous sends
%% (`inet_reply'). There is no `after': the idle timeout and hibernation
%% come from the conns_sup's sweep (sluice_sweep), so the per-message path
%% sets no timer.
loop(S = #s{sock = Sock}) ->
    receive
        {tcp, Sock, Data} ->
            data(Data, S);
        {tcp_passive, Sock} ->
            passive(S);
        {'$socket', Sock, select, _} ->
            %% socket backend: data has come; read it (sluice_transport_socket).
            rearm(ready, S);
        {'$socket', Sock, abort, {_, Reason}} ->
            finish({error, Reason}, S);
        {inet_reply, Sock, ok} ->
            loop(S);
        {inet_async, Sock, _Ref, {ok, Data}} ->
            data(Data, S);
        {tcp_closed, Sock} ->
            finish(closed, S);
        {inet_async, Sock, _Ref, {error, closed}} ->
            finish(closed, S);
        {tcp_error, Sock, Reason} ->
            finish({error, Reason}, S);
        {inet_async, Sock, _Ref, {error, Reason}} ->
            finish({error, Reason}, S);
        {inet_reply, Sock, {error, Reason}} ->
            finish({error, Reason}, S);
        {sluice_drain, Deadline} ->
            drain(Deadline, S);
        {sluice_sweep, hibernate} ->
            %% Quiet for hibernate_after: give the heap back (a full GC
            %% down to the live state) until the next message.
            proc_lib:hibernate(?MODULE, wake, [S]);
        {sluice_sweep, park} ->
            park(S);
        {sluice_sweep, idle_timeout} ->
            finish(idle_timeout, S);
        {system, From, Req} ->
            sys:handle_system_msg(Req, From, S#s.parent, ?MODULE, [], S);
        Msg ->
            info(Msg, S)
    end.

%% Hand the socket and the handler state to the conns_sup and exit: an
%% idle connection then holds no process (3.4 KB hibernated on inet; its
%% socket alone is about 1.9 KB). Delivery is stopped first (synchronous:
%% every chunk the driver sent before is in the mailbox by then), and the
%% connection parks only if nothing at all is waiting for it; otherwise it
%% re-arms and carries on (and tells the conns_sup it is awake). The sweep
%% sends `park' only to a connection of a parkable listener.
park(S = #s{sock = Sock, transport = T, parent = Parent, hstate = HState}) ->
    case T:setopts(Sock, [{active, false}]) of
        ok ->
            case erlang:process_info(self(), message_queue_len) of
                {message_queue_len, 0} ->
                    %% Passive, nothing queued: a plain change of owner.
                    case T:handover(Sock, Parent) of
                        ok ->
                            Parent ! {sluice_park, self(), Sock, HState},
                            exit(normal);
                        {error, Reason} ->
                            finish({error, Reason}, S)
                    end;
                _ ->
                    Parent ! {sluice_woke, self()},
                    unstop(S)
            end;
        {error, Reason} ->
            finish({error, Reason}, S)
    end.

%% Parking was called off: turn delivery back on. The driver's grant went
%% with `{active, false}'; the data chunks already queued were granted
%% before and are still owed their top-up.
unstop(S = #s{sock = Sock, active = N}) when is_integer(N) ->
    {messages, Queued} = erlang:process_info(self(), messages),
    Chunks = length([x || {tcp, S1, _} <- Queued, S1 =:= Sock]),
    rearm(N, S#s{credit = N + Chunks});
unstop(S = #s{active = Mode}) ->
    rearm(Mode, S).

%% @doc Where a hibernated connection resumes when a message arrives: the
%% sweep stops watching a hibernated connection, so tell it this one is
%% awake before handling the message.
-spec wake(#s{}) -> no_return().
wake(S = #s{parent = Parent}) ->
    receive
        {sluice_sweep, park} ->
            %% Woken by the sweep to park: no activity to report.
            park(S)
    after 0 ->
            Parent ! {sluice_woke, self()},
            loop(S)
    end.

data(Data, S = #s{handler = H, hstate = HState, counters = C}) ->
    counters:add(C, ?C_BYTES_IN, byte_size(Data)),
    counters:add(C, ?C_MESSAGES, 1),
    handle(H:handle_data(Data, HState), S, true).

info(Msg, S = #s{callbacks = #{info := true}, handler = H, hstate = HState}) ->
    handle(H:handle_info(Msg, HState), S, false);
info(_Msg, S) ->
    %% No handle_info/2: a stray message must not stop the connection.
    loop(S).

handle({ok, HState}, S, Rearm) ->
    next(S#s{hstate = HState}, Rearm);
handle({reply, Out, HState}, S, Rearm) ->
    case send(Out, S) of
        ok -> next(S#s{hstate = HState}, Rearm);
        {error, Reason} -> finish({error, Reason}, S#s{hstate = HState})
    end;
handle({close, Reason, HState}, S, _Rearm) ->
    finish(Reason, S#s{hstate = HState});
handle({reply_close, Out, Reason, HState}, S, _Rearm) ->
    linger_close(Out, Reason, S#s{hstate = HState});
handle(Other, S, _Rearm) ->
    finish({bad_return, Other}, S).

%% After a chunk, `once' and `false' need a new port call to get the next
%% one; `N' tops its grant up once half of it is used; `true' never.
next(S = #s{active = N, credit = C}, true) when is_integer(N) ->
    case C - 1 of
        Left when Left > N div 2 -> loop(S#s{credit = Left});
        %% `{active, K}' adds K to the driver's count (inet:setopts/2).
        Left -> rearm(N - Left, S#s{credit = N})
    end;
next(S = #s{active = once}, true) -> rearm(once, S);
next(S = #s{active = false}, true) -> rearm(false, S);
next(S, _) -> loop(S).

%% Every chunk sent before tcp_passive has been handled by now, so the
%% credit left is what a top-up granted after the driver went passive: the
%% driver is active again with it. Only when none is left must it re-arm.
passive(S = #s{active = N, credit = 0}) ->
    rearm(N, S#s{credit = N});
passive(S) ->
    loop(S).

rearm(Mode, S = #s{sock = Sock, transport = T}) ->
    case T:activate(Sock, Mode) of
        ok -> loop(S);
        {error, Reason} -> finish({error, Reason}, S)
    end.

%% Queue Out on the socket; what was queued counts as written.
send(Out, #s{sock = Sock, transport = T, counters = C}) ->
    case T:send_async(Sock, Out) of
        ok -> counters:add(C, ?C_BYTES_OUT, iolist_size(Out));
        Error -> Error
    end.

%% Draining: the listener has stopped accepting and asks every connection to
%% end before a deadline.
drain(Deadline, S = #s{callbacks = #{drain := true}, handler = H, hstate = HState}) ->
    case H:handle_drain(HState) of
        {close, Reason, HState2} -> graceful_close(Reason, Deadline, S#s{hstate = HState2});
        Result -> handle(Result, S, false)
    end;
drain(Deadline, S) ->
    graceful_close(drained, Deadline, S).

%% Close without losing what was read and without a reset: stop delivery
%% (synchronous, so no chunk is in flight afterwards), hand every chunk
%% already in the mailbox to the handler so that its replies go out, send FIN
%% behind them, then read and discard until the peer closes or the deadline
%% passes (closing with unread bytes would make the kernel send RST).
graceful_close(Reason, Deadline, S = #s{sock = Sock, transport = T}) ->
    _ = case S#s.active of
            false -> ok;
            _ -> T:setopts(Sock, [{active, false}])
        end,
    case flush(S) of
        {ok, S2} ->
            fin_then_discard(Reason, Deadline, S2);
        {closed, S2} ->
            finish(Reason, S2)
    end.

%% Replies already queued, then FIN behind them, then drop whatever the
%% peer still sends until it closes or the deadline passes.
fin_then_discard(Reason, Deadline, S = #s{sock = Sock, transport = T}) ->
    _ = T:shutdown(Sock, write),
    %% Keep one read pending for discard/3, or the peer's close goes unseen
    %% until the deadline. With active=false the read that was pending may
    %% just have been consumed by flush/1; if it was not, this second one
    %% is refused (ealready), harmlessly.
    _ = T:activate(Sock, case S#s.active of false -> false; _ -> once end),
    discard(Reason, Deadline, S).

%% The handler asked to say something and close (a protocol error after
%% frames that are owed their acks): nothing more is handed to it.
linger_close(Out, Reason, S) ->
    case send(Out, S) of
        ok -> fin_then_discard(Reason, erlang:monotonic_time(millisecond) + ?CLOSE_LINGER_MS, S);
        {error, _} -> finish(Reason, S)
    end.

flush(S = #s{sock = Sock}) ->
    receive
        {tcp, Sock, Data} -> flush_data(Data, S);
        {inet_async, Sock, _Ref, {ok, Data}} -> flush_data(Data, S)
    after 0 ->
            {ok, S}
    end.

flush_data(Data, S = #s{handler = H, counters = C}) ->
    counters:add(C, ?C_BYTES_IN, byte_size(Data)),
    flush_result(H:handle_data(Data, S#s.hstate), S).

flush_result({ok, HState}, S) ->
    flush(S#s{hstate = HState});
flush_result({reply, Out, HState}, S) ->
    _ = send(Out, S),
    flush(S#s{hstate = HState});
flush_result({close, _Reason, HState}, S) ->
    {ok, S#s{hstate = HState}};
flush_result({reply_close, Out, _Reason, HState}, S) ->
    _ = send(Out, S),
    {ok, S#s{hstate = HState}};
flush_result(_Other, S) ->
    {closed, S}.

discard(Reason, Deadline, S = #s{sock = Sock, transport = T}) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {tcp, Sock, _} ->
            _ = T:activate(Sock, once),
            discard(Reason, Deadline, S);
        {inet_async, Sock, _Ref, {ok, _}} ->
            _ = T:activate(Sock, false),
            discard(Reason, Deadline, S);
        {inet_reply, Sock, _} ->
            discard(Reason, Deadline, S);
        {'$socket', Sock, select, _} ->
            _ = T:activate(Sock, ready),
            discard(Reason, Deadline, S);
        {tcp_closed, Sock} ->
            finish(Reason, S);
        {tcp_error, Sock, _} ->
            finish(Reason, S);
        {inet_async, Sock, _Ref, {error, _}} ->
            finish(Reason, S)
    after Left ->
            finish(Reason, S)
    end.

-spec finish(term(), #s{}) -> no_return().
finish(Reason, #s{sock = Sock, transport = T, handler = H, hstate = HState,
                      counters = C, callbacks = CBs}) ->
    T:close(Sock),
    count_reason(Reason, C),
    _ = case CBs of
            #{terminate := true} -> H:terminate(Reason, HState);
            _ -> ok
        end,
    exit(normal).

%% Once per connection, so that info/1 can say why connections ended.
count_reason(Reason, C) ->
    counters:add(C, reason_slot(Reason), 1).

reason_slot({protocol_error, _}) -> ?C_PROTOCOL_ERRORS;
reason_slot(closed) -> ?C_CLOSE_PEER;
reason_slot(idle_timeout) -> ?C_CLOSE_IDLE;
reason_slot(frame_timeout) -> ?C_CLOSE_FRAME_TIMEOUT;
reason_slot({error, _}) -> ?C_CLOSE_ERROR;
reason_slot(drained) -> ?C_CLOSE_DRAINED;
reason_slot({shutdown, _}) -> ?C_CLOSE_DRAINED;
reason_slot(_) -> ?C_CLOSE_HANDLER.

%% sys callbacks, so that sys:get_state/1 and friends work on a connection.

-spec system_continue(pid(), [sys:dbg_opt()], #s{}) -> no_return().
system_continue(_Parent, _Debug, S) ->
    loop(S).

-spec system_terminate(term(), pid(), [sys:dbg_opt()], #s{}) -> no_return().
system_terminate(Reason, _Parent, _Debug, S) ->
    finish({shutdown, Reason}, S).

-spec system_code_change(#s{}, module(), term(), term()) -> {ok, #s{}}.
system_code_change(S, _Module, _OldVsn, _Extra) ->
    {ok, S}.
