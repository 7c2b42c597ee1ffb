%% @doc A connection handed to another process, when its handler returns
%% `{handoff, Reply, To, State}' (a WebSocket upgrade that another library
%% takes over; ranch's `controlling_process/2'): the replies owed, the
%% handler's own sluice:send/2 calls, then Reply, go out; the socket
%% stops delivering; every byte the connection
%% read and did not give its handler is collected in order (the frames
%% after the hand-off's in the same read and what the framer kept, passed
%% in as Rest; then the chunks already delivered to this process, taken
%% out of the mailbox by the transport's handoff/2, as a STARTTLS takes
%% them, sluice_transport_inet:release/1); `To' becomes the socket's owner
%% and gets one message, `{sluice_handoff, Conn, Buffered}'.
%%
%% The connection then ends as the listener's: counted closed (reason
%% `handoff'), terminate(handoff, State), its slot free. The socket is
%% `To''s from then on: no limit, drain, idle timeout or stop of the
%% listener sees it. Released rather than kept counted by a process left
%% behind to watch `To': that is how a ranch protocol that hands its
%% socket off and exits is counted, and a keeper would cost a process per
%% upgraded connection for a bound that `To''s own supervisor is better
%% placed to keep.
%% @private
-module(sluice_conn_handoff).

-include("sluice_conn.hrl").

-export([handoff/6, unhandled/3]).

%% @doc Hand the connection to `To', with Rest the bytes read and not
%% handled (`kept': the framer's). ReadPending: a read of mode `false'
%% was started and is not answered (the hand-off came from a callback
%% other than handle_data/2). Never returns: the process ends, or the
%% connection closes if the hand-off cannot be made (the client closed
%% first, `To' is gone).
-spec handoff(sluice_handler:reply(), sluice_handler:reply(), pid(), binary() | kept,
              boolean(), #s{}) -> no_return().
handoff(Owed, Reply, To, kept, ReadPending, S) ->
    handoff(Owed, Reply, To, kept(S), ReadPending, S);
handoff(Owed, Reply, To, Rest, ReadPending, S = #s{t = T}) ->
    case unavailable(T, ReadPending) of
        false ->
            %% In the order they were asked for: the replies to the frames
            %% before the hand-off's, then the handler's own sluice:send/2
            %% calls (queued in the mailbox meanwhile), then Reply.
            case send_owed(Owed, S) of
                ok ->
                    ok = sluice_conn_close:send_queued(S),
                    case sluice_conn_handler:send(Reply, S) of
                        ok -> transfer(To, Rest, S);
                        {error, Reason} -> sluice_conn_close:finish({error, Reason}, S)
                    end;
                {error, Reason} ->
                    sluice_conn_close:finish({error, Reason}, S)
            end;
        Why ->
            %% The handler's mistake (its listener's transport or mode):
            %% it crashes, as for a result it may not return, after the
            %% replies owed but without Reply.
            ok = sluice_conn_handler:owed(Owed, S),
            sluice_conn_close:crash(exit, {handoff_unavailable, Why}, [], S)
    end.

%% What the framer keeps of a frame begun, when the hand-off came from a
%% callback other than handle_data/2 (or from a chunk without framing).
kept(#s{frame = none}) -> <<>>;
kept(#s{frame = F}) -> sluice_frame:kept(F).

send_owed([], _S) -> ok;
send_owed(Owed, S) -> sluice_conn_handler:send(Owed, S).

%% A transport of the user's without handoff/2 cannot say which socket a
%% new owner is to use (ssl's is not its raw one). On `inet' a pending read
%% of mode `false' cannot be called back: its answer, the client's next
%% bytes, would come to this process after the hand-off and be lost.
unavailable(T, ReadPending) ->
    case erlang:function_exported(T, handoff, 2) of
        false -> {transport, sluice_transport:name(T)};
        true when ReadPending, T =:= sluice_transport_inet -> read_pending;
        true -> false
    end.

%% @doc What a frame's hand-off leaves unhandled of its chunk `Data':
%% the frames after it (`Left') and what the framer kept, found again in
%% `Data' from `F', the framer's state before it. The chunk is decoded
%% again here rather than its frames kept apart on every read for a
%% hand-off that may never come: the frames before Left are the first
%% ones, and the bytes after them are the client's as it sent them
%% (sluice_frame:rest/3).
-spec unhandled([term()], binary(), sluice_frame:state()) -> binary().
unhandled(Left, Data, F) ->
    Frames = case sluice_frame:decode(Data, F) of
                 {ok, Fs, _} -> Fs;
                 {error, _, Fs, _} -> Fs
             end,
    sluice_frame:rest(lists:sublist(Frames, length(Frames) - length(Left)), F, Data).

-spec transfer(pid(), binary(), #s{}) -> no_return().
transfer(To, Rest, S = #s{t = T, ts = TS}) ->
    %% The TLS facts are asked for while the socket is this process's.
    Info = T:info(TS),
    case is_process_alive(To) andalso T:handoff(TS, To) of
        {ok, Sock, Delivered} ->
            Conn = maps:merge(#{listener => S#s.listener, pid => self(), transport => T,
                                socket => Sock}, Info),
            %% A sluice:recv/3 in the callback left what it read past
            %% what it returned for the loop, which will not run again:
            %% those bytes came after Rest and before what the transport
            %% delivered since (recv stopped its delivery).
            Recv = case sluice_conn_recv:unhandled(S#s.stats, S#s.woke) of
                       {Bytes, _End} -> Bytes;
                       none -> <<>>
                   end,
            %% Read from the client, and counted so (bytes_in) as any
            %% chunk is when it is read: Rest was, with its chunk.
            _ = case iolist_size(Delivered) of
                    0 -> ok;
                    Unread -> sluice_stats:received(S#s.stats, Unread)
                end,
            To ! {sluice_handoff, Conn, iolist_to_binary([Rest, Recv | Delivered])},
            sluice_conn_close:handed_off(S);
        false ->
            sluice_conn_close:finish({handoff_failed, noproc}, S);
        {error, closed} ->
            %% The client closed (or the socket did) before it could be
            %% handed: as any connection its client closed.
            sluice_conn_close:finish(closed, S);
        {error, Reason} ->
            sluice_conn_close:finish({handoff_failed, Reason}, S)
    end.
