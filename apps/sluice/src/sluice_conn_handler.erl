%% @doc A connection's calls into its handler, and the one reader of what
%% they return (see sluice_handler for the results).
%%
%% Every function here calls one callback (or, with framing, handle_data/2
%% once per frame), sends what the handler asked to send, and returns an
%% outcome for sluice_conn to act on: carry on, stop, or send and then
%% close gracefully. A callback that raises, or returns what is not a
%% result, never returns here: the connection crashes (sluice_conn_close).
%% @private
-module(sluice_conn_handler).

-include("sluice_conn.hrl").

-define(IS_TIMEOUT(T), (T =:= infinity orelse (is_integer(T) andalso T >= 0))).
%% A persistent Timeout, `{persistent, Ms}' (sluice_conn_timeout).
-define(IS_PERSISTENT(T), (tuple_size(T) =:= 2 andalso element(1, T) =:= persistent
                           andalso ?IS_TIMEOUT(element(2, T)))).
%% Any result's Timeout: a plain one passes at its first tests, so a
%% result with one pays nothing for the persistent kind.
-define(IS_TIMEOUT_SPEC(T), (?IS_TIMEOUT(T) orelse ?IS_PERSISTENT(T))).
%% What a reply may be at a glance (a type test, no walk): a list's
%% elements are checked when it is sent (send/2).
-define(IS_IODATA(D), (is_binary(D) orelse is_list(D))).
%% The longest result Timeout that gets a timer (timer/2): 2^42 ms, about
%% 139 years, within what erlang:start_timer/3 takes on any VM (its
%% range, about 292 years of nanoseconds, less the VM's uptime).
-define(MAX_TIMER, (1 bsl 42)).

-export([init/3, data/2, chunk/3, info/2, call/3, timeout/1, drain/1, closed/1, failed/2,
         terminate/2, send/2]).
-export([optional/1, code_change/3, code_change_state/4]).
-export([starttls_done/2, owed/2]).

-export_type([outcome/0]).

%% The small steps of every read, inlined where they are used (each was a
%% call on the per-read path).
-compile({inline, [add/2, outcome/1, timer/2]}).

%% @doc init/2. The reply of a server that speaks first is sent at once.
-spec init(sluice:conn(), term(), #s{}) -> outcome().
init(Conn, HOpts, S = #s{handler = H}) ->
    try H:init(Conn, HOpts) of
        {close, Reason} -> {stop, ?BY_HANDLER(Reason), uninitialised(S)};
        Result -> outcome(read(init, Result, [], S))
    catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, uninitialised(S))
    end.

%% init/2 gave no state: the handler has none for handle_error/2 or
%% terminate/2, which are not called (as a gen_server's terminate/2 is
%% not after its init/1 fails), rather than called with one it never
%% returned.
uninitialised(S = #s{has = Has}) ->
    S#s{has = Has#{handle_error := false, terminate := false, handle_close := false}}.

%% @doc A chunk from the client: counted, then handed over as it is or, with
%% framing, as the whole frames it completes. The replies to the frames of
%% one chunk go out in one send.
-spec data(binary(), #s{}) -> outcome().
data(Data, S) ->
    case chunk(Data, byte_size(Data), S) of
        {handled, HState} -> {continue, S#s{hstate = HState}};
        Outcome -> Outcome
    end.

%% @doc data/2 for the connection loop, with the chunk's size at hand: where the handler's result changed
%% nothing but its state (its reply, if any, is sent), that state alone,
%% `{handled, HState}', so that the loop makes the one copy of its state a
%% read needs, with the credit, instead of a second one here.
-spec chunk(binary(), non_neg_integer(), #s{}) -> {handled, term()} | outcome().
chunk(Data, Size, S = #s{stats = Stats, frame = none, handle_data = HandleData, hstate = HState}) ->
    sluice_stats:received(Stats, Size),
    try HandleData(Data, HState) of
        %% The results of nearly every read, with no handler timer to
        %% clear: read/4 gives them the same meaning, through a tuple more.
        {reply, Out, HState2} when is_binary(Out), S#s.timer =:= undefined ->
            case send(Out, S) of
                ok -> {handled, HState2};
                {error, Reason} -> {stop, {error, Reason}, S#s{hstate = HState2}}
            end;
        {ok, HState2} when S#s.timer =:= undefined ->
            {handled, HState2};
        Result ->
            outcome(read(handle_data, Result, [], S))
    catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, S)
    end;
chunk(Data, Size, S = #s{stats = Stats, frame = F}) ->
    sluice_stats:received(Stats, Size),
    case sluice_frame:decode(Data, F) of
        {ok, Frames, F2} ->
            case frames(Frames, [], S#s{frame = F2}) of
                {handoff, Out, Reply, To, {frames, Left}, S2} ->
                    {handoff, Out, Reply, To, sluice_conn_handoff:unhandled(Left, Data, F), S2};
                Done ->
                    outcome(Done)
            end;
        {error, Why, Frames, F2} ->
            case frames(Frames, [], S#s{frame = F2}) of
                {continue, Out, S2} -> bad_frame(Why, Out, S2);
                %% The bytes the framer refused came after the STARTTLS
                %% frame, in plaintext: pipelined (sluice_conn_starttls)
                {starttls, Out, Reply, _, S2} -> {starttls, Out, Reply, true, S2};
                %% They came after the hand-off's frame: they are the
                %% new owner's, not an error
                {handoff, Out, Reply, To, {frames, Left}, S2} ->
                    {handoff, Out, Reply, To, sluice_conn_handoff:unhandled(Left, Data, F), S2};
                Stop -> outcome(Stop)
            end
    end.

%% The framer refused the client's bytes: a protocol error, after the
%% replies owed. Unless the handler's split fun raised or returned what
%% is not one of its results: that is its code failing, not the client,
%% and the connection crashes as when a callback raises or returns a bad
%% value (handle_error/2, terminate/2, a crash report), after the same
%% replies.
bad_frame({split_raised, Class, Reason, Stack}, Out, S) ->
    ok = owed(Out, S),
    sluice_conn_close:crash(Class, Reason, Stack, S);
bad_frame({bad_split_result, Fun, Value}, Out, S) ->
    ok = owed(Out, S),
    sluice_conn_close:crash(exit, {bad_return_value, {{split, Fun}, Value}}, [], S);
bad_frame(Why, Out, S) ->
    outcome({stop, Out, {protocol_error, Why}, S}).

frames([], Out, S) ->
    {continue, Out, S};
frames([Frame | Rest], Out, S = #s{handle_data = HandleData, hstate = HState}) ->
    try HandleData(Frame, HState) of
        Result ->
            case read(handle_data, Result, Out, S) of
                {continue, Out2, S2} -> frames(Rest, Out2, S2);
                %% Frames after the STARTTLS one came in the same read, in
                %% plaintext: never handed over (sluice_conn_starttls)
                {starttls, Out2, Reply, S2} -> {starttls, Out2, Reply, Rest =/= [], S2};
                %% The frames after it, and what the framer kept, are
                %% the new owner's: found in the chunk by chunk/3
                %% (sluice_conn_handoff:unhandled/3)
                {handoff, Out2, Reply, To, S2} -> {handoff, Out2, Reply, To, {frames, Rest}, S2};
                Stop -> Stop
            end
    catch Class:Reason:Stack ->
            %% The replies to the frames before this one are owed first:
            %% what the client gets must not depend on how TCP cut the
            %% bytes into chunks.
            ok = owed(Out, S),
            sluice_conn_close:crash(Class, Reason, Stack, S)
    end.

%% @doc A message that is neither the transport's nor the library's.
-spec info(term(), #s{}) -> outcome().
info(Msg, S = #s{has = #{handle_info := true}, handler = H, hstate = HState}) ->
    try H:handle_info(Msg, HState) of
        Result -> outcome(read(handle_info, Result, [], S))
    catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, S)
    end;
info(_Msg, S) ->
    %% No handle_info/2: a stray message must not stop the connection.
    {continue, S}.

%% @doc sluice:call/3. A handler without handle_call/3 cannot answer: the
%% caller gets `{error, not_supported}' at once.
-spec call(term(), sluice_handler:from(), #s{}) -> outcome().
call(Req, From, S = #s{has = #{handle_call := true}, handler = H, hstate = HState}) ->
    try H:handle_call(Req, From, HState) of
        Result -> outcome(read(handle_call, Result, [], S))
    catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, S)
    end;
call(_Req, From, S) ->
    gen:reply(From, {error, not_supported}),
    {continue, S}.

%% @doc The Timeout of the last result passed: handle_timeout/1, or a
%% close with reason `timeout'. `S' has the timer that fired taken out
%% (sluice_conn:control/2): none for a plain Timeout, a persistent one's
%% without a running timer (sluice_conn_timeout:fired/1).
-spec timeout(#s{}) -> outcome().
timeout(S = #s{has = #{handle_timeout := true}, handler = H, hstate = HState}) ->
    try H:handle_timeout(HState) of
        Result -> outcome(read(handle_timeout, Result, [], S))
    catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, S)
    end;
timeout(S) ->
    {stop, timeout, S}.

%% @doc The listener drains: handle_drain/1, or a graceful close with
%% reason `drained'.
-spec drain(#s{}) -> outcome().
drain(S = #s{has = #{handle_drain := true}, handler = H, hstate = HState}) ->
    try H:handle_drain(HState) of
        Result -> outcome(read(handle_drain, Result, [], S))
    catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, S)
    end;
drain(S) ->
    {stop, drained, S}.

%% @doc The TLS handshake of a STARTTLS is done: handle_starttls/2, if the
%% handler has it, with what init/2's `Conn' carries as `tls' on an `ssl'
%% listener. Looked up here rather than with the other optional callbacks
%% (optional/1): a connection that never upgrades pays nothing for it.
-spec starttls_done(map(), #s{}) -> outcome().
starttls_done(Tls, S = #s{handler = H, hstate = HState}) ->
    case erlang:function_exported(H, handle_starttls, 2) of
        true ->
            try H:handle_starttls(Tls, HState) of
                Result -> outcome(read(handle_starttls, Result, [], S))
            catch Class:Reason:Stack -> sluice_conn_close:crash(Class, Reason, Stack, S)
            end;
        false ->
            {continue, S}
    end.

%% @doc The client closed: handle_close/1, if the handler has it.
-spec closed(#s{}) -> ok.
closed(#s{has = #{handle_close := true}, handler = H, hstate = HState}) ->
    quietly(fun() -> H:handle_close(HState) end);
closed(_S) ->
    ok.

%% @doc The connection failed (a socket error, or the handler raised):
%% handle_error/2, if the handler has it.
-spec failed(term(), #s{}) -> ok.
failed(Reason, #s{has = #{handle_error := true}, handler = H, hstate = HState}) ->
    quietly(fun() -> H:handle_error(Reason, HState) end);
failed(_Reason, _S) ->
    ok.

-spec terminate(term(), #s{}) -> ok.
terminate(Reason, #s{has = #{terminate := true}, handler = H, hstate = HState}) ->
    quietly(fun() -> H:terminate(Reason, HState) end);
terminate(_Reason, _S) ->
    ok.

%% @doc Which optional callbacks handler `H' exports now. Read when a
%% connection starts or wakes and at a code change, not once for a
%% listener: a handler reloaded meanwhile is called as it now is (a
%% quarter of a microsecond a connection).
-spec optional(module()) -> #{atom() => boolean()}.
optional(H) ->
    #{handle_info => erlang:function_exported(H, handle_info, 2),
      handle_call => erlang:function_exported(H, handle_call, 3),
      handle_timeout => erlang:function_exported(H, handle_timeout, 1),
      handle_drain => erlang:function_exported(H, handle_drain, 1),
      handle_close => erlang:function_exported(H, handle_close, 1),
      handle_error => erlang:function_exported(H, handle_error, 2),
      terminate => erlang:function_exported(H, terminate, 2)}.

%% @doc sys:change_code/4 on a connection (a release upgrade makes it):
%% the handler's state through its code_change/3, and its optional
%% callbacks read again. An error (what code_change/3 returned if not
%% `{ok, State}', or what it raised) is sys's answer, and the connection
%% keeps its state, as a gen_server does.
-spec code_change(term(), term(), #s{}) -> {ok, #s{}} | term().
code_change(OldVsn, Extra, S = #s{handler = H, hstate = HState}) ->
    case code_change_state(H, OldVsn, HState, Extra) of
        {ok, HState2} -> {ok, S#s{hstate = HState2, has = optional(H)}};
        Error -> Error
    end.

%% @doc A handler state through `H:code_change/3' if `H' has it (as it is
%% if not: the callback is optional, as a gen_server's). For a live
%% connection and for a parked one's state alike (sluice_conns_sup).
-spec code_change_state(module(), term(), term(), term()) -> {ok, term()} | term().
code_change_state(H, OldVsn, HState, Extra) ->
    case erlang:function_exported(H, code_change, 3) of
        true -> catch H:code_change(OldVsn, HState, Extra);
        false -> {ok, HState}
    end.

%% The last callbacks of a connection that is ending anyway: what they
%% raise must not keep it from ending the way it was going to.
quietly(Fun) ->
    try Fun() catch _:_ -> ok end,
    ok.

%% @doc Queue Out on the socket; what was queued counts as written. A list
%% longer than the transport's send_slice/0 goes out a slice at a time
%% (send_slices/2); one with files in it (`{sendfile, File, Offset,
%% Length}' pieces) goes out in parts, files from the kernel
%% (sluice_conn_sendfile).
-spec send(sluice_handler:reply(), #s{}) -> ok | {error, term()}.
send(Out, #s{send = Send, ts = TS, stats = Stats}) when is_binary(Out) ->
    case Send(TS, Out) of
        ok -> sluice_stats:sent(Stats, byte_size(Out));
        Error -> Error
    end;
send(Out, S) ->
    %% The size the count needs anyway, taken before the send rather than
    %% after it. A list it refuses is not iodata: a reply with files, or
    %% one sluice_conn_sendfile refuses in turn (a crash, bad_iodata), so
    %% that a reply without files pays nothing for them.
    try iolist_size(Out) of
        Size when Size > S#s.send_slice ->
            send_slices(erlang:iolist_to_iovec(Out), S);
        Size -> send_whole(Out, Size, S)
    catch error:badarg -> sluice_conn_sendfile:send(Out, S)
    end.

send_whole(Out, Size, #s{send = Send, ts = TS, stats = Stats}) ->
    case Send(TS, Out) of
        ok -> sluice_stats:sent(Stats, Size);
        Error -> Error
    end.

%% The replies to the frames of one read go out in one send, and the
%% `socket' and `ssl' transports make one binary of what they send (OTP's
%% socket:send/3 and ssl's records): a read of a few hundred pipelined
%% GETs of a 100 KB value made the server hold every reply at once, a
%% 100 MB binary from 23 KB of requests, where the inet driver queues
%% references to the value (it has no send_slice/0 and still gets one
%% send: its behaviour with a client that stops reading stays gen_tcp's).
%% Sent in slices of about send_slice/0 bytes (the binaries
%% iolist_to_iovec/1 gives, a large one as it is), a send holds a slice,
%% and what waits is the references of the handler's iolist.
send_slices([], _S) ->
    ok;
send_slices(Bins, S) ->
    {Slice, Size, Rest} = slice(Bins, [], 0, S#s.send_slice),
    case send_whole(Slice, Size, S) of
        ok -> send_slices(Rest, S);
        Error -> Error
    end.

slice([Bin | Bins], Acc, Size, Max) when Size < Max ->
    slice(Bins, [Bin | Acc], Size + byte_size(Bin), Max);
slice(Bins, Acc, Size, _Max) ->
    {lists:reverse(Acc), Size, Bins}.

%% @doc Send the replies owed before a crash, whatever becomes of them.
-spec owed(sluice_handler:reply(), #s{}) -> ok.
owed([], _S) -> ok;
owed(Out, S) -> _ = send(Out, S), ok.

%% The one reader of a handler's return value. Out is what earlier results
%% of the same chunk asked to send; the caller sends it once (outcome/1).
read(_Cb, {ok, HState}, Out, S) ->
    {continue, Out, timer(none, S#s{hstate = HState})};
read(_Cb, {reply, More, HState}, Out, S) when ?IS_IODATA(More) ->
    {continue, add(Out, More), timer(none, S#s{hstate = HState})};
read(_Cb, {ok, HState, Timeout}, Out, S) when ?IS_TIMEOUT_SPEC(Timeout) ->
    {continue, Out, timer(Timeout, S#s{hstate = HState})};
read(_Cb, {reply, More, HState, Timeout}, Out, S) when ?IS_IODATA(More), ?IS_TIMEOUT_SPEC(Timeout) ->
    {continue, add(Out, More), timer(Timeout, S#s{hstate = HState})};
read(_Cb, {close, Reason, HState}, Out, S) ->
    {stop, Out, ?BY_HANDLER(Reason), S#s{hstate = HState}};
read(_Cb, {reply_close, More, Reason, HState}, Out, S) when ?IS_IODATA(More) ->
    {stop, add(Out, More), ?BY_HANDLER(Reason), S#s{hstate = HState}};
%% STARTTLS (sluice_conn_starttls): the reply is kept apart from the
%% replies owed before it (Out), which go out even when the upgrade is
%% refused, where the reply ("go ahead") must not. Not while draining:
%% the connection is about to close.
read(Cb, {starttls, Reply, HState}, Out, S) when ?IS_IODATA(Reply), Cb =/= handle_drain ->
    {starttls, Out, Reply, timer(none, S#s{hstate = HState})};
read(Cb, {starttls, Reply, HState, Timeout}, Out, S)
  when ?IS_IODATA(Reply), ?IS_TIMEOUT_SPEC(Timeout), Cb =/= handle_drain ->
    {starttls, Out, Reply, timer(Timeout, S#s{hstate = HState})};
%% A half-close (sluice_conn_halfclose): the replies owed to earlier frames
%% of the read, then this one, go out now, then FIN, so that the frames
%% after it, whose replies could not reach the client, find the
%% connection half-closed. Replies after it: sluice_conn_halfclose.
read(_Cb, {reply_shutdown, More, HState}, Out, S) when ?IS_IODATA(More) ->
    half_close(add(Out, More), none, S#s{hstate = HState});
read(_Cb, {reply_shutdown, More, HState, Timeout}, Out, S)
  when ?IS_IODATA(More), ?IS_TIMEOUT_SPEC(Timeout) ->
    half_close(add(Out, More), Timeout, S#s{hstate = HState});
%% A hand-off (sluice_conn_handoff): Reply goes out behind the replies
%% owed (Out, kept apart: they go out even when the hand-off cannot be
%% made, where Reply must not), then the socket is another process's. Not from init/2 (nothing is
%% armed yet: there is nothing to hand but the socket, which a handler
%% wanting that can take after a first message to itself), nor while
%% draining. `To' a local pid: a socket has an owner on its own node; not
%% this process, which ends with the hand-off and would close the socket
%% with it.
read(Cb, {handoff, Reply, To, HState}, Out, S)
  when ?IS_IODATA(Reply), is_pid(To), node(To) =:= node(), To =/= self(),
       Cb =/= init, Cb =/= handle_drain ->
    {handoff, Out, Reply, To, timer(infinity, S#s{hstate = HState})};
read(Cb, Other, Out, S = #s{handler = H}) ->
    ok = owed(Out, S),
    S2 = case Cb of
             init -> uninitialised(S);
             _ -> S
         end,
    sluice_conn_close:crash(exit, {bad_return_value, {H, Cb, Other}}, [], S2).

half_close(Out, Timeout, S) ->
    case sluice_conn_halfclose:shutdown(Out, S) of
        {ok, S2} -> {continue, [], timer(Timeout, S2)};
        {error, Reason} -> {stop, [], {error, Reason}, S}
    end.

add([], More) -> More;
add(Out, More) -> [Out, More].

outcome({continue, [], S}) ->
    {continue, S};
outcome({continue, Out, S}) ->
    case send(Out, S) of
        ok -> {continue, S};
        {error, Reason} -> {stop, {error, Reason}, S}
    end;
outcome({stop, [], Reason, S}) ->
    {stop, Reason, S};
outcome({stop, Out, Reason, S}) ->
    {stop_after, Out, Reason, S};
outcome({starttls, Out, Reply, S}) ->
    {starttls, Out, Reply, false, S};
outcome(Starttls = {starttls, _Out, _Reply, _Pipelined, _S}) ->
    Starttls;
outcome({handoff, Out, Reply, To, S}) ->
    %% Not from a chunk (or from one without framing, which was the
    %% handler's whole): what the framer keeps of a frame begun, looked
    %% up by sluice_conn_handoff (no call here: this function is inlined
    %% into the read path, where a call would make every read save its
    %% result across it).
    {handoff, Out, Reply, To, kept, S}.

%% A result's Timeout replaces the one before; no Timeout (`none') clears
%% it. One longer than ?MAX_TIMER never fires: no timer (start_timer/3
%% refuses what is past its range, about 2^43 ms, and the connection
%% crashed in it, with no handle_error/2 or terminate/2 and its replies
%% lost). A persistent Timeout, one set or one running, is a tuple, which
%% is sluice_conn_timeout's: a handler that never sets one stays on the
%% first two clauses.
timer(none, S = #s{timer = undefined}) ->
    S;
timer(Timeout, S = #s{timer = Old}) when not is_tuple(Timeout), not is_tuple(Old) ->
    _ = Old =:= undefined orelse erlang:cancel_timer(Old, [{async, true}, {info, false}]),
    case Timeout of
        none -> S#s{timer = undefined};
        infinity -> S#s{timer = undefined};
        _ when Timeout > ?MAX_TIMER -> S#s{timer = undefined};
        _ -> S#s{timer = erlang:start_timer(Timeout, self(), S#s.timer_tag)}
    end;
timer(Timeout, S) ->
    sluice_conn_timeout:result(Timeout, S, ?MAX_TIMER).
