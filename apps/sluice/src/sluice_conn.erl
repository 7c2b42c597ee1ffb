%% @doc The connection process: owns one socket and drives a sluice_handler.
%%
%% It is a plain proc_lib process with its own receive loop rather than a
%% gen_server: every message costs one receive, one handler call and at most
%% one asynchronous send, nothing else. Delivery follows the listener's
%% `active' option:
%% <ul>
%%  <li>`N' (the default): the driver sends up to N messages, then
%%      `tcp_passive'; the loop re-arms. The mailbox never holds more than N
%%      chunks, so a flooding client is held back by TCP, not by memory.</li>
%%  <li>`once': re-armed after every chunk (a port call per chunk).</li>
%%  <li>`false': one asynchronous read at a time, answered by a message, so
%%      the process still sees drain requests and handle_info messages.</li>
%%  <li>`true': no flow control at all: a client that sends faster than the
%%      handler works grows this process's mailbox without bound.</li>
%% </ul>
-module(sluice_conn).

-include("sluice_counters.hrl").

-export([init/3]).
-export([system_continue/3, system_terminate/4, system_code_change/4]).

-record(s, {sock,
            transport :: module(),
            handler :: module(),
            hstate :: term(),
            active :: false | once | true | pos_integer(),
            idle :: timeout(),
            counters :: counters:counters_ref(),
            parent :: pid(),
            callbacks :: #{info := boolean(), drain := boolean(),
                           terminate := boolean()}}).

%% How long a new connection process waits for the acceptor to hand it the
%% socket; only an acceptor that died in between makes it wait that long.
-define(HANDOVER_TIMEOUT, 5000).

%% @doc Entry point, spawned (linked) by sluice_conns_sup. The acceptor
%% transfers the socket and then sends `{sluice_go, Sock}'.
-spec init(pid(), sluice_transport:socket(), map()) -> no_return().
init(Parent, Sock, #{name := Name, transport := T, handler := {H, HOpts},
                     active := Active, idle_timeout := Idle,
                     counters := C}) ->
    receive
        {sluice_go, Sock} -> ok
    after ?HANDOVER_TIMEOUT ->
            exit(normal)
    end,
    S0 = #s{sock = Sock, transport = T, handler = H, active = Active,
            idle = Idle, counters = C, parent = Parent,
            callbacks = #{info => erlang:function_exported(H, handle_info, 2),
                          drain => erlang:function_exported(H, handle_drain, 1),
                          terminate => erlang:function_exported(H, terminate, 2)}},
    Conn = #{listener => Name, socket => Sock, transport => T},
    case H:init(Conn, HOpts) of
        {ok, HState} ->
            S = S0#s{hstate = HState},
            case T:activate(Sock, Active) of
                ok -> loop(S);
                {error, R} -> finish({error, R}, S)
            end;
        {close, Reason} ->
            T:close(Sock),
            count_reason(Reason, C),
            exit(normal)
    end.

%% The messages matched here are the inet driver's: data (`tcp' in active
%% modes, `inet_async' for the asynchronous read of active=false), flow
%% control (`tcp_passive') and the answers to asynchronous sends
%% (`inet_reply').
loop(S = #s{sock = Sock, idle = Idle}) ->
    receive
        {tcp, Sock, Data} ->
            data(Data, S);
        {tcp_passive, Sock} ->
            rearm(S#s.active, S);
        {'$socket', Sock, select, _} ->
            %% socket backend: data has come; read it (sluice_transport_socket).
            rearm(S#s.active, S);
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
        {system, From, Req} ->
            sys:handle_system_msg(Req, From, S#s.parent, ?MODULE, [], S);
        Msg ->
            info(Msg, S)
    after Idle ->
            finish(idle_timeout, S)
    end.

data(Data, S = #s{handler = H, hstate = HState, counters = C}) ->
    counters:add(C, ?C_BYTES_IN, byte_size(Data)),
    handle(H:handle_data(Data, HState), S, true).

info(Msg, S = #s{callbacks = #{info := true}, handler = H, hstate = HState}) ->
    handle(H:handle_info(Msg, HState), S, false);
info(_Msg, S) ->
    %% No handle_info/2: a stray message must not stop the connection.
    loop(S).

handle({ok, HState}, S, Rearm) ->
    next(S#s{hstate = HState}, Rearm);
handle({reply, Out, HState}, S = #s{sock = Sock, transport = T, counters = C}, Rearm) ->
    case T:send_async(Sock, Out) of
        ok ->
            counters:add(C, ?C_BYTES_OUT, iolist_size(Out)),
            next(S#s{hstate = HState}, Rearm);
        {error, Reason} ->
            finish({error, Reason}, S#s{hstate = HState})
    end;
handle({close, Reason, HState}, S, _Rearm) ->
    finish(Reason, S#s{hstate = HState});
handle(Other, S, _Rearm) ->
    finish({bad_return, Other}, S).

%% After a chunk, `once' and `false' need a new port call to get the next
%% one; `N' re-arms only on tcp_passive and `true' never.
next(S = #s{active = once}, true) -> rearm(once, S);
next(S = #s{active = false}, true) -> rearm(false, S);
next(S, _) -> loop(S).

rearm(Mode, S = #s{sock = Sock, transport = T}) ->
    case T:activate(Sock, Mode) of
        ok -> loop(S);
        {error, Reason} -> finish({error, Reason}, S)
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
            _ = T:shutdown(Sock, write),
            %% Keep one read pending for discard/3, or the peer's close goes
            %% unseen until the deadline. With active=false the read that
            %% was pending may just have been consumed by flush/1; if it was
            %% not, this second one is refused (ealready), harmlessly.
            _ = T:activate(Sock, case S2#s.active of false -> false; _ -> once end),
            discard(Reason, Deadline, S2);
        {closed, S2} ->
            finish(Reason, S2)
    end.

flush(S = #s{sock = Sock, handler = H}) ->
    receive
        {tcp, Sock, Data} -> flush_result(H:handle_data(Data, S#s.hstate), S);
        {inet_async, Sock, _Ref, {ok, Data}} -> flush_result(H:handle_data(Data, S#s.hstate), S)
    after 0 ->
            {ok, S}
    end.

flush_result({ok, HState}, S) ->
    flush(S#s{hstate = HState});
flush_result({reply, Out, HState}, S = #s{sock = Sock, transport = T}) ->
    _ = T:send_async(Sock, Out),
    flush(S#s{hstate = HState});
flush_result({close, _Reason, HState}, S) ->
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
            _ = T:activate(Sock, once),
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

count_reason({protocol_error, _}, C) -> counters:add(C, ?C_PROTOCOL_ERRORS, 1);
count_reason(_, _) -> ok.

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
