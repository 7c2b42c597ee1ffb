%% @doc A handler's half-close: `{reply_shutdown, IoData, State}' sends
%% IoData, then shuts the write side down (FIN) and goes on reading, so
%% the client, which sees the end of the replies, can still send (ranch's
%% `Transport:shutdown(S, write)', thousand_island's
%% `Socket.shutdown(socket, :write)').
%%
%% A half-closed connection is known by its send fun alone (shut/1): no
%% field is added to the loop's state, whose every copy (one a read) would
%% carry it, and no test to the per-read path. Every reply of the handler
%% goes through that fun (sluice_conn_handler:send/2), so a reply after
%% the shutdown, which could never reach the client, is refused there:
%% `{error, ?AFTER_SHUTDOWN(Bytes)}', which ends the connection as the
%% handler's crash `{reply_after_shutdown, Bytes}' (sluice_conn_close),
%% rather than as a socket error, or with the bytes dropped unseen.
%% @private
-module(sluice_conn_halfclose).

-include("sluice_conn.hrl").

-export([shutdown/2, is_shut/1, shut/1, refuse/2, refused_send/1]).
-export([parked/2, unparked/2]).

%% @doc Send `Out' (the result's reply behind the replies owed to earlier
%% frames of the same read), then the sends the handler's own
%% sluice:send/2 queued (as before a `reply_close''s FIN), then shut the
%% write side down. Again on a half-closed connection: `Out' is a reply
%% after the shutdown (refused, unless empty), and no second FIN (on TLS
%% it would be a second close_notify).
-spec shutdown(sluice_handler:reply(), #s{}) -> {ok, #s{}} | {error, term()}.
shutdown(Out, S = #s{t = T, ts = TS}) ->
    case send(Out, S) of
        ok ->
            case is_shut(S) of
                true -> {ok, S};
                false ->
                    ok = sluice_conn_close:send_queued(S),
                    case T:shutdown(TS, write) of
                        ok -> {ok, shut(S)};
                        {error, Reason} -> {error, Reason}
                    end
            end;
        Error ->
            Error
    end.

send([], _S) -> ok;
send(Out, S) -> sluice_conn_handler:send(Out, S).

%% @doc Whether the handler shut the connection's write side down.
-spec is_shut(#s{}) -> boolean().
is_shut(#s{send = Send}) ->
    Send =:= fun ?MODULE:refuse/2.

%% @doc The connection's state once its write side is shut down.
-spec shut(#s{}) -> #s{}.
shut(S) ->
    S#s{send = fun ?MODULE:refuse/2}.

%% @doc The send of a half-closed connection: nothing may go out. An
%% empty reply (`{reply, <<>>, S}') is nothing, and fine.
-spec refuse(sluice_transport:tstate(), iodata()) -> ok | {error, term()}.
refuse(_TS, Out) ->
    case iolist_size(Out) of
        0 -> ok;
        Bytes -> {error, ?AFTER_SHUTDOWN(Bytes)}
    end.

%% @doc sluice:send/2 on a half-closed connection: what gen_tcp:send/2
%% answers after shutdown(S, write), `{error, closed}', to a caller that
%% waits; the send of one that does not (a connection's handler) is
%% dropped, as after a `reply_close''s FIN (sluice_conn_close) and as to
%% a connection that is gone. The connection carries on: the bytes were
%% not the handler's reply.
-spec refused_send(none | sluice_handler:from()) -> ok.
refused_send(none) ->
    ok;
refused_send(From) ->
    gen:reply(From, {error, closed}),
    ok.

%% @doc What a parking connection hands its supervisor (Parked, the
%% handler's state and the rest), with the half-close: a woken connection
%% starts from its listener's template (sluice_conn:unpark/5), whose send
%% is the transport's. Parked as it was for a connection that did not
%% shut down, the same term as before this existed.
-spec parked(tuple(), #s{}) -> tuple().
parked(Parked, S) ->
    case is_shut(S) of
        true -> erlang:append_element(Parked, shut);
        false -> Parked
    end.

%% @doc The woken connection's state from what parked/2 made: `{Parked,
%% S}' with Parked as it was before parked/2 and S half-closed if it was.
-spec unparked(tuple(), #s{}) -> {tuple(), #s{}}.
unparked({HState, Frame, Started, LoggerMeta, shut}, S) ->
    {{HState, Frame, Started, LoggerMeta}, shut(S)};
unparked(Parked, S) ->
    {Parked, S}.
