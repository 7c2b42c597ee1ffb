%% @doc sluice:recv/3: a synchronous read from inside a handler's callback
%% (ranch's `Transport:recv/3', thousand_island's `Socket.recv/3'), for a
%% handshake or a length-prefixed body read in one go.
%%
%% The connection process owns the socket and reads it with a grant
%% (sluice_conn). A recv stops that delivery first (the transport's
%% recv_pause/1: synchronous, so every chunk the grant delivered is in the
%% mailbox by then) and takes those chunks out of the mailbox: they are the
%% client's next bytes, and come first. Then it reads the socket itself
%% (recv_read/2, whatever is there, at least a byte) until it has Length
%% bytes. What it read past them, or all it read if it times out, is not
%% lost: it goes back to the loop in a message to this process,
%% `{'$sluice_recv', Rest, End}', with the end of the stream if recv saw
%% it. The loop takes that message among the library's (sluice_conn:
%% control/2), hands Rest to handle_data/2, ends the connection if the
%% stream ended, and otherwise grants anew as after a parking called off
%% (sluice_conn's resume/1): the credit of the grant recv stopped is void,
%% and the chunks a top-up granted before the message was taken (the
%% callback that called recv returned first) are handled in order, behind
%% Rest. A second recv in the same callback takes that message back first.
%%
%% Nothing of this is on the loop's path for a read: the loop's receive is
%% as before, and the message is the only sign of a recv. What recv needs
%% of a connection, it finds without the loop (a callback cannot reach the
%% loop's state): the socket in the handler's `Conn' (with ssl's socket in
%% its `tls'), the listener's counters and whether it frames in the
%% listener's row of sluice_registry, read at each recv. Nothing is left in
%% the process of a connection that never calls recv, whose handler would
%% see it (its dictionary, `get/0'). Only where `Conn' no longer says the
%% truth does the connection keep what recv needs in its process
%% dictionary (context/5): after a STARTTLS (`Conn' names the plaintext
%% socket, the reads are ssl's) and in a parked connection's new process
%% (`Conn' names the pid that parked), both asked for by the handler or
%% the listener's options.
%%
%% The idle timeout: a recv that waits blocks the process, and the
%% sweep's nudge to close an idle connection (`{sluice_sweep,
%% idle_timeout}') waits in the mailbox. If the client then sends and
%% recv reads it, that verdict is stale: taken by the loop after the
%% callback, it closed a connection whose client had just spoken, in the
%% middle of its protocol. So a recv that read bytes from the socket takes
%% such a nudge out and says so in the message it leaves; the loop, which
%% knows its sweep's table, then tells the sweep the connection is awake
%% (sluice_sweep:report_woke/1), which reads the byte count again at its
%% next tick (pending/1). Until then the sweep leaves the connection
%% alone, as it leaves one it told to close. A recv that read nothing
%% leaves the nudge: the client was idle.
%%
%% Framing: refused (`{error, framed}'). A framed connection hands
%% handle_data/2 one frame of a read at a time, and the frames after it
%% are split already and waiting in the loop's stack (sluice_conn_handler:
%% frames/3), with the framer holding a frame begun: a recv would have to
%% give their raw bytes back and the loop to drop those frames, a check
%% after every frame of every read. A framed protocol reads its body as a
%% frame anyway (`{length, N}', `{split, Fun}').
%% @private
-module(sluice_conn_recv).

-export([recv/3, context/5, pending/1, unhandled/2, taken/2, leftover/1]).

%% The process dictionary's key for the connection's context (context/5).
-define(KEY, '$sluice_recv').
%% The message a recv leaves for the loop.
-define(MSG, '$sluice_recv').

-type ending() :: none | closed | {error, term()}.
-export_type([ending/0]).

%% @doc Keep what recv/3 needs of a connection whose handler's `Conn' no
%% longer says it (see the module's doc): when it moves to TLS (STARTTLS),
%% and in a parked connection's new process.
%% `Info': what the transport's info/1 said of the connection now (for
%% TLS, ssl's socket in it), which the caller has.
-spec context(module(), sluice_transport:tstate(), map(), sluice_stats:stats(),
              none | sluice_frame:state()) -> ok.
context(T, TS, Info, Stats, Frame) ->
    Conn = maps:merge(#{transport => T, socket => T:socket(TS)}, Info),
    _ = put(?KEY, {Conn, Stats, Frame =/= none}),
    ok.

%% @doc Bytes the client sent before the connection's process had the
%% socket (an established TLS socket's `buffered', sluice:adopt/3), left
%% as a recv's leftover would be, before init/2: a recv of init/2 reads
%% them first (left/0), and otherwise the loop hands them to
%% handle_data/2 as its first chunk, ahead of anything init/2 sent the
%% process. Handed to the handler after init/2 instead, a recv of init/2
%% read the client's later bytes before them.
-spec leftover(binary()) -> ok.
leftover(<<>>) ->
    ok;
leftover(Bytes) ->
    self() ! {?MSG, Bytes, none, false},
    ok.

%% @doc See sluice:recv/3. The caller is the connection's process if
%% `Conn' names it, or if it holds the context of `Conn''s socket: the
%% pid in `Conn' is not a woken parked connection's (sluice_conn:unpark/5).
-spec recv(sluice:conn(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
recv(Conn = #{socket := Sock}, Length, Timeout) ->
    case get(?KEY) of
        undefined ->
            own(Conn, Length, Timeout);
        {Ctx = #{socket := Sock}, Stats, Framed} ->
            start(Ctx, Stats, Framed, Length, Timeout);
        _ ->
            {error, not_owner}
    end.

own(Conn = #{pid := Pid, listener := Name}, Length, Timeout) when Pid =:= self() ->
    case sluice_registry:recv_facts(Name) of
        {ok, Stats, Framed} -> start(Conn, Stats, Framed, Length, Timeout);
        %% The listener is gone: its connections are being shut down
        error -> {error, closed}
    end;
own(_Conn, _Length, _Timeout) ->
    {error, not_owner}.

start(_Conn, _Stats, true, _Length, _Timeout) ->
    {error, framed};
start(Conn = #{transport := T}, Stats, false, Length, Timeout) ->
    %% (T is loaded: its handshake/2 has run)
    case erlang:function_exported(T, recv_read, 2)
        andalso erlang:function_exported(T, recv_pause, 1)
        andalso erlang:function_exported(T, recv_resume, 1) of
        true -> read(Length, Timeout, T, Conn, Stats);
        false -> {error, not_supported}
    end.

read(Length, Timeout, T, Conn, Stats) ->
    Deadline = sluice_deadline:at(Timeout),
    %% A recv before this one in the same callback left its message
    {Before, End0, Woke0} = case left() of
                                none -> {<<>>, none, false};
                                Left -> Left
                            end,
    {Chunks, End1} = T:recv_pause(Conn),
    Got = [Before | Chunks],
    {Result, Rest, End, Heard} = fill(Length, Got, iolist_size(Got), ended(End0, End1),
                                      Deadline, T, Conn, false),
    self() ! {?MSG, Rest, End, Woke0 orelse woke(Heard)},
    _ = case Result of
            %% What the caller gets is counted in bytes_in now; Rest when
            %% the loop hands it to handle_data/2, as any chunk
            {ok, Out} -> sluice_stats:received(Stats, byte_size(Out));
            _ -> ok
        end,
    Result.

%% Heard: the recv read bytes from the socket. A nudge to close for
%% idleness waiting in the mailbox is then stale (see the module's doc):
%% taken out, and the loop told.
woke(true) ->
    receive
        {sluice_sweep, idle_timeout} -> true
    after 0 -> false
    end;
woke(false) ->
    false.

%% The end recv saw before (a previous recv's) stands.
ended(none, End) -> End;
ended(End, _) -> End.

fill(Length, Got, Size, End, _Deadline, _T, _Conn, Heard)
  when Size >= Length, Size > 0 ->
    %% Length 0: all there is
    Take = case Length of
               0 -> Size;
               _ -> Length
           end,
    <<Out:Take/binary, Rest/binary>> = iolist_to_binary(Got),
    {{ok, Out}, Rest, End, Heard};
fill(_Length, Got, _Size, End, _Deadline, _T, _Conn, Heard) when End =/= none ->
    {reason(End), iolist_to_binary(Got), End, Heard};
fill(Length, Got, Size, none, Deadline, T, Conn, Heard) ->
    case T:recv_read(Conn, sluice_deadline:left(Deadline)) of
        {ok, Data} ->
            fill(Length, [Got, Data], Size + byte_size(Data), none, Deadline, T, Conn, true);
        {error, timeout} ->
            {{error, timeout}, iolist_to_binary(Got), none, Heard};
        {error, closed} ->
            {{error, closed}, iolist_to_binary(Got), closed, Heard};
        {error, Reason} ->
            {{error, Reason}, iolist_to_binary(Got), {error, Reason}, Heard}
    end.

reason(closed) -> {error, closed};
reason({error, Reason}) -> {error, Reason}.

%% @doc The message a recv left and the loop has not taken yet, taken:
%% the bytes it read past what it returned and the end of the stream if
%% it saw it; `none' if there is none. If the recv took the sweep's
%% nudge to close for idleness, the sweep is told the connection is
%% awake (`Woke', the connection's sweep table).
-spec pending(sluice_sweep:woke_table()) -> {binary(), ending()} | none.
pending(Woke) ->
    receive
        {?MSG, _, _, _} = Msg -> taken(Msg, Woke)
    after 0 -> none
    end.

%% @doc pending/1 where the bytes will not reach handle_data/2, whose
%% read counts them: the connection closes (they are dropped with it), is
%% handed off (they go to the new owner) or refuses a STARTTLS they came
%% behind. Read from the client all the same, they are counted in
%% bytes_in here, once, whichever way the connection goes.
-spec unhandled(sluice_stats:stats(), sluice_sweep:woke_table()) ->
          {binary(), ending()} | none.
unhandled(Stats, Woke) ->
    case pending(Woke) of
        {Rest, _End} = Left when Rest =/= <<>> ->
            ok = sluice_stats:received(Stats, byte_size(Rest)),
            Left;
        Left ->
            Left
    end.

%% @doc What pending/1 makes of a recv's message the loop took itself.
-spec taken({?MSG, binary(), ending(), boolean()}, sluice_sweep:woke_table()) ->
          {binary(), ending()}.
taken({?MSG, Rest, End, Woke}, Tab) ->
    _ = Woke andalso sluice_sweep:report_woke(Tab),
    {Rest, End}.

left() ->
    receive
        {?MSG, Rest, End, Woke} -> {Rest, End, Woke}
    after 0 -> none
    end.
