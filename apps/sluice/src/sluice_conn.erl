%% @doc The connection process: owns one socket and drives a sluice_handler.
%%
%% A plain proc_lib process with its own receive loop rather than a
%% gen_server: every message costs one receive, one handler call and at
%% most one asynchronous send. Every message is first offered to the
%% transport (sluice_transport:classify/2); what is not the transport's is
%% the library's (drain, the sweep's nudges, sys) or the handler's
%% (handle_info/2).
%%
%% Delivery follows the listener's `active' option:
%% <ul>
%%  <li>`N' (the default): the loop keeps a credit, the chunks granted to
%%      the transport and not yet handled, and tops it up to N once half
%%      of it is used, so a connection that keeps up never goes passive
%%      and one that falls behind stops at N: the mailbox never holds more
%%      than N chunks, and a flooding client is held back by TCP. (On the
%%      inet driver a socket that is never deselected moves into the
%%      schedulers' own poll set, which saves a poll-thread wake-up per
%%      read; re-arming only on `passive' loses that.)</li>
%%  <li>`once': re-armed after every chunk.</li>
%%  <li>`false': one asynchronous read at a time, answered by a message,
%%      so the process still sees drain requests and other messages.</li>
%%  <li>`true': no flow control: a client that sends faster than the
%%      handler works grows the mailbox without bound.</li>
%% </ul>
%% Timers: none on the per-message path. The idle timeout, hibernation and
%% parking are decided by the connection supervisor's sweep (sluice_sweep),
%% which sends a nudge.
-module(sluice_conn).

-export([init/4, wake/1, unpark/5]).
-export([system_continue/3, system_terminate/4, system_code_change/4]).

-record(s, {t :: module(),
            ts :: sluice_transport:tstate(),
            handler :: module(),
            hstate :: term(),
            active :: sluice_transport:mode(),
            %% active=N: chunks granted to the transport and not yet handled
            credit = 0 :: non_neg_integer(),
            stats :: sluice_stats:stats(),
            parent :: pid(),
            %% which optional callbacks the handler exports
            has_info :: boolean(),
            has_drain :: boolean(),
            has_terminate :: boolean()}).

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
%% for a connection that will never run.
-spec init(pid(), sluice_transport:socket(), pid(), sluice_listener_sup:listener()) -> no_return().
init(Parent, Sock, Acceptor, L = #{transport := T, opts := Opts, stats := Stats}) ->
    MRef = erlang:monitor(process, Acceptor),
    receive
        {sluice_go, Sock} -> erlang:demonitor(MRef, [flush]);
        {'DOWN', MRef, process, _, _} -> exit(normal)
    after ?HANDOVER_TIMEOUT ->
            exit(normal)
    end,
    case T:handshake(Sock, Opts) of
        {ok, TS} ->
            #{handler := {_, HOpts}} = Opts,
            start(state(Parent, TS, L), conn(L, Sock), HOpts);
        {error, Reason} ->
            T:close_socket(Sock),
            sluice_stats:ended(Stats, {handshake_error, Reason}),
            exit(normal)
    end.

start(S = #s{handler = H, t = T, ts = TS, active = Active}, Conn, HOpts) ->
    try H:init(Conn, HOpts) of
        {ok, HState} ->
            S2 = S#s{hstate = HState},
            case T:activate(TS, Active) of
                {ok, TS2} when is_integer(Active) -> loop(S2#s{ts = TS2, credit = Active});
                {ok, TS2} -> loop(S2#s{ts = TS2});
                {error, R} -> finish({error, R}, S2)
            end;
        {close, Reason} ->
            T:close(TS),
            sluice_stats:ended(S#s.stats, Reason),
            exit(normal);
        Other ->
            crash(exit, {bad_return_value, {H, init, Other}}, [], S)
    catch Class:Reason:Stack ->
            crash(Class, Reason, Stack, S)
    end.

%% What a handler's init/2 is given (sluice:conn()).
conn(#{name := Name, transport := T}, Sock) ->
    #{listener => Name, pid => self(), transport => T, socket => Sock}.

state(Parent, TS, #{transport := T, opts := #{handler := {H, _}, active := Active},
                    stats := Stats}) ->
    #s{t = T, ts = TS, handler = H, active = Active, stats = Stats, parent = Parent,
       has_info = erlang:function_exported(H, handle_info, 2),
       has_drain = erlang:function_exported(H, handle_drain, 1),
       has_terminate = erlang:function_exported(H, terminate, 2)}.

%% @doc Entry point of a parked connection's new process, spawned (linked)
%% by sluice_conns_sup when the parked socket has an event: it hands the
%% socket over and then sends `{sluice_go, Sock, Event}'. The socket was
%% parked in `once' mode, and is passive if the event is data.
-spec unpark(pid(), sluice_transport:socket(), term(), sluice_transport:tstate(),
             sluice_listener_sup:listener()) -> no_return().
unpark(Parent, Sock, HState, TS, L = #{transport := T}) ->
    receive
        {sluice_go, Sock, Event} ->
            resumed(Event, (state(Parent, T:unpark(TS), L))#s{hstate = HState})
    after ?HANDOVER_TIMEOUT ->
            exit(normal)
    end.

resumed({data, Data}, S = #s{active = true}) ->
    case activate(true, S) of
        {ok, S2} -> data(Data, S2);
        {error, R} -> finish({error, R}, S)
    end;
resumed({data, Data}, S = #s{active = N}) when is_integer(N) ->
    %% This chunk was the one granted: handling it re-arms to N.
    data(Data, S#s{credit = 1});
resumed({data, Data}, S) ->
    data(Data, S);
resumed({sluice_drain, Deadline}, S) ->
    drain(Deadline, S);
resumed(Reason, S) ->
    %% closed, {error, _}, idle_timeout
    finish(Reason, S).

%%% The loop -----------------------------------------------------------

loop(S = #s{t = T, ts = TS}) ->
    receive
        Msg ->
            %% A transport whose state did not change returns the same
            %% term: matching it bound saves rebuilding the loop's state.
            case T:classify(Msg, TS) of
                {data, Data, TS} -> data(Data, S);
                {ignore, TS} -> loop(S);
                {data, Data, TS2} -> data(Data, S#s{ts = TS2});
                {ignore, TS2} -> loop(S#s{ts = TS2});
                {passive, TS2} -> passive(S#s{ts = TS2});
                {closed, TS2} -> finish(closed, S#s{ts = TS2});
                {error, Reason, TS2} -> finish({error, Reason}, S#s{ts = TS2});
                other -> control(Msg, S)
            end
    end.

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
    finish(idle_timeout, S);
control({'$sluice_send', Data}, S) ->
    case send(Data, S) of
        ok -> loop(S);
        {error, Reason} -> finish({error, Reason}, S)
    end;
control({system, From, Req}, S) ->
    sys:handle_system_msg(Req, From, S#s.parent, ?MODULE, [], S);
control(Msg, S = #s{has_info = true, handler = H, hstate = HState}) ->
    try H:handle_info(Msg, HState) of
        Result -> after_info(result(handle_info, Result, S))
    catch Class:Reason:Stack -> crash(Class, Reason, Stack, S)
    end;
control(_Msg, S) ->
    %% No handle_info/2: a stray message must not stop the connection.
    loop(S).

after_info({continue, S}) -> loop(S);
after_info({stop, Reason, S}) -> finish(Reason, S);
after_info({stop_after, Out, Reason, S}) -> linger_close(Out, Reason, S).

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

data(Data, S) ->
    case handle_data(Data, S) of
        {continue, S2} -> next(S2);
        {stop, Reason, S2} -> finish(Reason, S2);
        {stop_after, Out, Reason, S2} -> linger_close(Out, Reason, S2)
    end.

handle_data(Data, S = #s{handler = H, hstate = HState, stats = Stats}) ->
    sluice_stats:received(Stats, byte_size(Data)),
    try H:handle_data(Data, HState) of
        Result -> result(handle_data, Result, S)
    catch Class:Reason:Stack -> crash(Class, Reason, Stack, S)
    end.

%% The one reader of a handler's return value: replies go out here, and
%% the caller decides what to do next from what comes back. A value that
%% is not a result is the handler's bug: the connection crashes with its
%% name, the callback and the value.
result(_Callback, {ok, HState}, S) ->
    {continue, S#s{hstate = HState}};
result(_Callback, {reply, Out, HState}, S) ->
    S2 = S#s{hstate = HState},
    case send(Out, S2) of
        ok -> {continue, S2};
        {error, Reason} -> {stop, {error, Reason}, S2}
    end;
result(_Callback, {close, Reason, HState}, S) ->
    {stop, Reason, S#s{hstate = HState}};
result(_Callback, {reply_close, Out, Reason, HState}, S) ->
    {stop_after, Out, Reason, S#s{hstate = HState}};
result(Callback, Other, S = #s{handler = H}) ->
    crash(exit, {bad_return_value, {H, Callback, Other}}, [], S).

%%% Flow control -------------------------------------------------------

%% After a chunk, `once' and `false' need a new grant to get the next
%% one; `N' tops its grant up once half of it is used; `true' never.
next(S = #s{active = N, credit = C}) when is_integer(N) ->
    case C - 1 of
        Left when Left > N div 2 -> loop(S#s{credit = Left});
        %% An integer grant adds to what the transport has left.
        Left -> rearm(N - Left, S#s{credit = N})
    end;
next(S = #s{active = true}) -> loop(S);
next(S = #s{active = Mode}) -> rearm(Mode, S).

%% Every chunk sent before `passive' has been handled by now, so the credit
%% left is what a top-up granted after the transport went passive: it is
%% active again with it. Only when none is left must it re-arm.
passive(S = #s{active = N, credit = 0}) when is_integer(N) ->
    rearm(N, S#s{credit = N});
passive(S) ->
    loop(S).

rearm(Mode, S) ->
    case activate(Mode, S) of
        {ok, S2} -> loop(S2);
        {error, Reason} -> finish({error, Reason}, S)
    end.

activate(Mode, S = #s{t = T, ts = TS}) ->
    case T:activate(TS, Mode) of
        {ok, TS} -> {ok, S};
        {ok, TS2} -> {ok, S#s{ts = TS2}};
        Error -> Error
    end.

%% Queue Out on the socket; what was queued counts as written.
send(Out, #s{t = T, ts = TS, stats = Stats}) ->
    case T:send(TS, Out) of
        ok -> sluice_stats:sent(Stats, iolist_size(Out));
        Error -> Error
    end.

%%% Parking ------------------------------------------------------------

%% Hand the socket and the handler state to the conns_sup and exit: an
%% idle connection then holds no process. Delivery is paused first
%% (synchronous: every chunk the transport delivered is in the mailbox by
%% then), and the connection parks only if nothing at all is waiting for
%% it; otherwise it handles what was delivered, re-arms and carries on
%% (and tells the conns_sup it is awake). The sweep sends `park' only to a
%% connection of a parkable listener (sluice_parking:parkable/1).
park(S = #s{t = T, parent = Parent, hstate = HState}) ->
    case T:pause(S#s.ts) of
        {ok, TS} ->
            S2 = S#s{ts = TS},
            case erlang:process_info(self(), message_queue_len) of
                {message_queue_len, 0} ->
                    Sock = T:socket(TS),
                    case T:handover(Sock, Parent) of
                        ok ->
                            Parent ! {sluice_park, self(), Sock, HState, TS},
                            exit(normal);
                        {error, Reason} ->
                            finish({error, Reason}, S2)
                    end;
                _ ->
                    Parent ! {sluice_woke, self()},
                    resume(S2)
            end;
        {error, Reason} ->
            finish({error, Reason}, S)
    end.

%% Parking was called off: handle what the transport delivered before the
%% pause, then grant anew (the pause withdrew what was left of the grant).
resume(S = #s{t = T, ts = TS}) ->
    case T:await(TS, 0) of
        {data, Data, TS2} ->
            case handle_data(Data, S#s{ts = TS2}) of
                {continue, S2} -> resume(S2);
                {stop, Reason, S2} -> finish(Reason, S2);
                {stop_after, Out, Reason, S2} -> linger_close(Out, Reason, S2)
            end;
        {timeout, TS2} ->
            #s{active = Mode} = S,
            rearm(Mode, S#s{ts = TS2, credit = case Mode of
                                                    N when is_integer(N) -> N;
                                                    _ -> 0
                                                end});
        {closed, TS2} ->
            finish(closed, S#s{ts = TS2});
        {error, Reason, TS2} ->
            finish({error, Reason}, S#s{ts = TS2})
    end.

%%% Closing ------------------------------------------------------------

%% Draining: the listener has stopped accepting and asks every connection to
%% end before a deadline. A handler with handle_drain/1 decides; without,
%% the connection closes gracefully.
drain(Deadline, S = #s{has_drain = true, handler = H, hstate = HState}) ->
    try H:handle_drain(HState) of
        Result ->
            case result(handle_drain, Result, S) of
                {continue, S2} -> loop(S2);
                {stop, Reason, S2} -> graceful_close(Reason, Deadline, S2);
                {stop_after, Out, Reason, S2} -> linger_close(Out, Reason, S2)
            end
    catch Class:Reason:Stack -> crash(Class, Reason, Stack, S)
    end;
drain(Deadline, S) ->
    graceful_close(drained, Deadline, S).

%% Close without losing what was read and without a reset: pause delivery,
%% hand every chunk already delivered to the handler so that its replies
%% go out, send FIN behind them, then read and discard until the peer
%% closes or the deadline passes (closing with unread bytes would make the
%% kernel send RST).
graceful_close(Reason, Deadline, S = #s{t = T}) ->
    S2 = case T:pause(S#s.ts) of
             {ok, TS} -> S#s{ts = TS};
             {error, _} -> S
         end,
    flush(Reason, Deadline, S2).

flush(Reason, Deadline, S = #s{t = T, ts = TS}) ->
    case T:await(TS, 0) of
        {data, Data, TS2} ->
            case handle_data(Data, S#s{ts = TS2}) of
                {continue, S2} -> flush(Reason, Deadline, S2);
                {stop, _, S2} -> fin_then_discard(Reason, Deadline, S2);
                {stop_after, Out, _, S2} ->
                    _ = send(Out, S2),
                    fin_then_discard(Reason, Deadline, S2)
            end;
        {timeout, TS2} ->
            fin_then_discard(Reason, Deadline, S#s{ts = TS2});
        {_Closed, TS2} ->
            finish(Reason, S#s{ts = TS2});
        {error, _, TS2} ->
            finish(Reason, S#s{ts = TS2})
    end.

%% The handler asked to say something and close (a protocol error after
%% frames that are owed their replies): nothing more is handed to it.
linger_close(Out, Reason, S) ->
    case send(Out, S) of
        ok -> fin_then_discard(Reason, erlang:monotonic_time(millisecond) + ?CLOSE_LINGER_MS, S);
        {error, _} -> finish(Reason, S)
    end.

%% Replies already queued, then FIN behind them, then drop whatever the
%% peer still sends until it closes or the deadline passes. One read is
%% kept armed, or the peer's close would go unseen until the deadline.
%% (With active=false a read may still be pending; a second is refused,
%% harmlessly.)
fin_then_discard(Reason, Deadline, S = #s{t = T}) ->
    _ = T:shutdown(S#s.ts, write),
    discard(Reason, Deadline, S).

discard(Reason, Deadline, S = #s{t = T}) ->
    Mode = case S#s.active of false -> false; _ -> once end,
    case T:activate(S#s.ts, Mode) of
        {ok, TS} ->
            Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
            case T:await(TS, Left) of
                {data, _, TS2} -> discard(Reason, Deadline, S#s{ts = TS2});
                {timeout, TS2} -> finish(Reason, S#s{ts = TS2});
                {closed, TS2} -> finish(Reason, S#s{ts = TS2});
                {error, _, TS2} -> finish(Reason, S#s{ts = TS2})
            end;
        {error, _} ->
            finish(Reason, S)
    end.

-spec finish(term(), #s{}) -> no_return().
finish(Reason, S = #s{t = T, ts = TS, stats = Stats}) ->
    T:close(TS),
    sluice_stats:ended(Stats, Reason),
    terminate(Reason, S),
    exit(normal).

%% The handler raised, or returned something that is not a result: as a
%% gen_server does, terminate/2 is called with the reason and the process
%% exits with it (a crash report names the handler; the conns_sup counts
%% it as crashed).
-spec crash(error | exit | throw, term(), list(), #s{}) -> no_return().
crash(Class, Reason, Stack, S = #s{t = T, ts = TS}) ->
    T:close(TS),
    terminate(Reason, S),
    erlang:raise(Class, Reason, Stack).

terminate(Reason, #s{has_terminate = true, handler = H, hstate = HState}) ->
    try H:terminate(Reason, HState)
    catch _:_ -> ok
    end;
terminate(_Reason, _S) ->
    ok.

%%% sys callbacks, so that sys:get_state/1 and friends work on a connection.

-spec system_continue(pid(), [sys:dbg_opt()], #s{}) -> no_return().
system_continue(_Parent, _Debug, S) ->
    loop(S).

-spec system_terminate(term(), pid(), [sys:dbg_opt()], #s{}) -> no_return().
system_terminate(Reason, _Parent, _Debug, S) ->
    finish({shutdown, Reason}, S).

-spec system_code_change(#s{}, module(), term(), term()) -> {ok, #s{}}.
system_code_change(S, _Module, _OldVsn, _Extra) ->
    {ok, S}.
