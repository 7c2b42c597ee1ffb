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
%% as before, and the message is the only sign of a recv. What the loop
%% needs of a connection to read it here, its transport, the transport's
%% state (the parts of it that do not change: the socket; for TLS, ssl's
%% socket), the listener's counters and its sweep's table for wake
%% reports, is left in the process dictionary when the connection starts
%% (context/5), as proc_lib leaves its own.
%%
%% The idle timeout: a recv that waits blocks the process, and the
%% sweep's nudge to close an idle connection (`{sluice_sweep,
%% idle_timeout}') waits in the mailbox. If the client then sends and
%% recv reads it, that verdict is stale: taken by the loop after the
%% callback, it closed a connection whose client had just spoken, in the
%% middle of its protocol. So a recv that read bytes from the socket takes
%% such a nudge out and tells the sweep the connection is awake
%% (sluice_sweep:report_woke/1), which reads the byte count again at its
%% next tick. A recv that read nothing leaves it: the client was idle.
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

-export([recv/3, context/5, pending/0]).

%% The process dictionary's key for the connection's context (context/5).
-define(KEY, '$sluice_recv').
%% The message a recv leaves for the loop.
-define(MSG, '$sluice_recv').

-type ending() :: none | closed | {error, term()}.
-export_type([ending/0]).

%% @doc Keep what recv/3 needs of a connection: set when it starts, when
%% a parked one wakes and when it moves to TLS (STARTTLS). Nothing for a
%% transport without the optional callbacks (recv/3 answers
%% `{error, not_supported}'); `{framed, Socket}' for a framed connection.
-spec context(module(), sluice_transport:tstate(), sluice_stats:stats(),
              sluice_sweep:woke_table(), none | sluice_frame:state()) -> ok.
context(T, TS, Stats, Woke, none) ->
    %% (T is loaded: its handshake/2 has run)
    _ = case erlang:function_exported(T, recv_read, 2)
            andalso erlang:function_exported(T, recv_pause, 1)
            andalso erlang:function_exported(T, recv_resume, 1) of
            true -> put(?KEY, {T, TS, {Stats, Woke}});
            false -> erase(?KEY)
        end,
    ok;
context(T, TS, _Stats, _Woke, _Frame) ->
    _ = put(?KEY, {framed, T:socket(TS)}),
    ok.

%% @doc See sluice:recv/3. The caller is the connection's process if it
%% holds the context of the connection's socket: its pid may not be the
%% one `Conn' names, which a parked connection's new process does not
%% have (sluice_conn:unpark/5).
-spec recv(sluice:conn(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
recv(Conn = #{socket := Sock}, Length, Timeout) ->
    case get(?KEY) of
        {T, TS, Ctx} ->
            case T:socket(TS) of
                Sock -> read(Length, Timeout, T, TS, Ctx);
                _ -> {error, not_owner}
            end;
        {framed, Sock} ->
            {error, framed};
        _ ->
            case Conn of
                #{pid := Pid} when Pid =:= self() -> {error, not_supported};
                _ -> {error, not_owner}
            end
    end.

read(Length, Timeout, T, TS, Ctx) ->
    Deadline = sluice_deadline:at(Timeout),
    {Before, End0} = case pending() of
                         none -> {<<>>, none};
                         Pending -> Pending
                     end,
    {Chunks, End1, TS2} = T:recv_pause(TS),
    _ = TS2 =:= TS orelse put(?KEY, {T, TS2, Ctx}),
    Got = [Before | Chunks],
    {Result, Heard} = fill(Length, Got, iolist_size(Got), ended(End0, End1), Deadline, T,
                           TS2, Ctx, false),
    woke(Heard, Ctx),
    Result.

%% Heard: the recv read bytes from the socket. A nudge to close for
%% idleness waiting in the mailbox is then stale (see the module's doc).
woke(true, {_Stats, Woke}) ->
    receive
        {sluice_sweep, idle_timeout} -> ok = sluice_sweep:report_woke(Woke)
    after 0 -> ok
    end;
woke(false, _Ctx) ->
    ok.

%% The end recv saw before (a previous recv's) stands.
ended(none, End) -> End;
ended(End, _) -> End.

fill(Length, Got, Size, End, _Deadline, _T, _TS, Ctx, Heard)
  when Size >= Length, Size > 0 ->
    %% Length 0: all there is
    Take = case Length of
               0 -> Size;
               _ -> Length
           end,
    <<Out:Take/binary, Rest/binary>> = iolist_to_binary(Got),
    {give({ok, Out}, Rest, End, Ctx), Heard};
fill(_Length, Got, _Size, End, _Deadline, _T, _TS, Ctx, Heard) when End =/= none ->
    {give(reason(End), iolist_to_binary(Got), End, Ctx), Heard};
fill(Length, Got, Size, none, Deadline, T, TS, Ctx, Heard) ->
    case T:recv_read(TS, sluice_deadline:left(Deadline)) of
        {ok, Data} ->
            fill(Length, [Got, Data], Size + byte_size(Data), none, Deadline, T, TS, Ctx, true);
        {error, timeout} ->
            {give({error, timeout}, iolist_to_binary(Got), none, Ctx), Heard};
        {error, closed} ->
            {give({error, closed}, iolist_to_binary(Got), closed, Ctx), Heard};
        {error, Reason} ->
            {give({error, Reason}, iolist_to_binary(Got), {error, Reason}, Ctx), Heard}
    end.

reason(closed) -> {error, closed};
reason({error, Reason}) -> {error, Reason}.

%% What the caller gets is counted in bytes_in now; Rest when the loop
%% hands it to handle_data/2, as any chunk.
give(Result, Rest, End, {Stats, _Woke}) ->
    self() ! {?MSG, Rest, End},
    _ = case Result of
            {ok, Out} -> sluice_stats:received(Stats, byte_size(Out));
            _ -> ok
        end,
    Result.

%% @doc The message a recv left and the loop has not taken yet, taken:
%% the bytes it read past what it returned and the end of the stream if
%% it saw it; `none' if there is none.
-spec pending() -> {binary(), ending()} | none.
pending() ->
    receive
        {?MSG, Rest, End} -> {Rest, End}
    after 0 -> none
    end.
