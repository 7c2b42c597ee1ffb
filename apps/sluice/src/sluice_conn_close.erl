%% @doc The ways a connection ends.
%%
%% <ul>
%%  <li>graceful_close/3 (a drain, or a handler that closes while the
%%      listener drains): nothing read is lost and the client sees FIN,
%%      not a reset;</li>
%%  <li>linger_close/3 (`reply_close'): the last replies, then FIN;</li>
%%  <li>finish/2: close now (the client closed, an error, the idle
%%      timeout, a handler's `close');</li>
%%  <li>crash/4: the handler raised or returned nonsense;</li>
%%  <li>handed_off/1: the socket is another process's now
%%      (sluice_conn_handoff).</li>
%% </ul>
%% Each runs the handler's last callbacks, then counts the connection's
%% close reason once, emits the telemetry stop event and ends the
%% process (counted_end/3,4).
%% @private
-module(sluice_conn_close).

-include("sluice_conn.hrl").

-export([graceful_close/3, linger_close/3, finish/2, crash/4, handed_off/1]).
%% a half-close (sluice_conn_halfclose), a hand-off (sluice_conn_handoff)
-export([send_queued/1]).
%% a connection that ends before its handler (sluice_conn)
-export([counted_end/3]).

%% After `reply_close' the replies go out, then FIN, and the connection
%% reads and drops what the peer still sends for at most this long: closing
%% with unread bytes would send RST, and an RST can make the peer's kernel
%% throw away replies it has not read.
-define(CLOSE_LINGER_MS, 1000).

%% @doc Close by `Deadline' (monotonic ms) without losing what was read and
%% without a reset: pause delivery, hand every chunk already delivered to
%% the handler so that its replies go out, send FIN behind them, then read
%% and discard until the peer closes or the deadline passes (closing with
%% unread bytes would make the kernel send RST). Its callers are drains:
%% a connection still waiting for its client at the deadline tells its
%% supervisor it was open then (discard_wait/4).
-spec graceful_close(term(), integer(), #s{}) -> no_return().
graceful_close(Reason, Deadline, S = #s{t = T}) ->
    S2 = case T:pause(S#s.ts) of
             {ok, TS} -> S#s{ts = TS};
             {error, _} -> S
         end,
    flush(Reason, {drain, Deadline}, S2).

flush(Reason, Until, S = #s{t = T, ts = TS}) ->
    case T:await(TS, 0) of
        {data, Data, TS2} ->
            case sluice_conn_handler:data(Data, S#s{ts = TS2}) of
                {continue, S2} -> flush(Reason, Until, S2);
                {stop, {error, ?AFTER_SHUTDOWN(_)} = Refused, S2} -> finish(Refused, S2);
                {stop, _, S2} -> fin_then_discard(Reason, Until, S2);
                {stop_after, Out, _, S2} ->
                    _ = sluice_conn_handler:send(Out, S2),
                    fin_then_discard(Reason, Until, S2);
                {starttls, Owed, _Reply, _, S2} ->
                    %% Closing: no upgrade, and no "go ahead" for it
                    _ = sluice_conn_handler:send(Owed, S2),
                    fin_then_discard(Reason, Until, S2);
                {handoff, Owed, _Reply, _To, _Rest, S2} ->
                    %% Closing: the socket is not handed off either
                    _ = sluice_conn_handler:send(Owed, S2),
                    fin_then_discard(Reason, Until, S2)
            end;
        {timeout, TS2} ->
            fin_then_discard(Reason, Until, S#s{ts = TS2});
        {closed, TS2} ->
            finish(Reason, S#s{ts = TS2});
        {error, _, TS2} ->
            finish(Reason, S#s{ts = TS2})
    end.

%% @doc Send Out, then close gracefully, giving the peer a moment to take
%% it: nothing more is handed to the handler.
-spec linger_close(sluice_handler:reply(), term(), #s{}) -> no_return().
linger_close(Out, Reason, S) ->
    case sluice_conn_handler:send(Out, S) of
        ok -> fin_then_discard(Reason, {linger, erlang:monotonic_time(millisecond) + ?CLOSE_LINGER_MS}, S);
        %% A reply after a half-close: not lost unseen (finish/2)
        {error, ?AFTER_SHUTDOWN(_)} = Refused -> finish(Refused, S);
        {error, _} -> finish(Reason, S)
    end.

%% Replies already queued, then FIN behind them, then drop whatever the
%% peer still sends until it closes or the deadline passes. One read is
%% kept armed, or the peer's close would go unseen until the deadline.
fin_then_discard(Reason, Until, S = #s{t = T}) ->
    ok = queued_sends(Reason, S),
    %% A handler's half-close sent the FIN already (on TLS a second
    %% shutdown would be a second close_notify).
    _ = sluice_conn_halfclose:is_shut(S) orelse T:shutdown(S#s.ts, write),
    discard(Reason, Until, S, []).

discard(Reason, Until, S = #s{t = T}, Kept) ->
    Mode = case S#s.active of false -> false; _ -> once end,
    case T:activate(S#s.ts, Mode) of
        {ok, TS} -> discard_wait(Reason, Until, S#s{ts = TS}, Kept);
        {error, _} -> kept_finish(Reason, S, Kept)
    end.

%% The wait for the peer's close takes every message, not only the
%% transport's: a sluice:send/2 that comes meanwhile is told
%% `{error, closed}' at once (after the FIN nothing more can go out, and
%% its caller, who waits for the send to be queued, waited for the
%% connection's end, up to a drain's whole deadline, where gen_tcp:send/2
%% after a shutdown fails at once; a connection's own handler does not
%% wait, and its send is dropped). Any other message is kept, in order,
%% and put back for terminate/2 before the end (kept_finish/3).
%% `Until' is `{drain, Deadline}' or `{linger, Deadline}'.
discard_wait(Reason, Until = {Why, Deadline}, S = #s{t = T}, Kept) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {'$sluice', none, {send, _}} ->
            discard_wait(Reason, Until, S, Kept);
        {'$sluice', From, {send, _}} ->
            gen:reply(From, {error, closed}),
            discard_wait(Reason, Until, S, Kept);
        Msg ->
            case T:classify(Msg, S#s.ts) of
                {data, _, TS} -> discard(Reason, Until, S#s{ts = TS}, Kept);
                {passive, TS} -> discard(Reason, Until, S#s{ts = TS}, Kept);
                {ignore, TS} -> discard_wait(Reason, Until, S#s{ts = TS}, Kept);
                {closed, TS} -> kept_finish(Reason, S#s{ts = TS}, Kept);
                {error, _, TS} -> kept_finish(Reason, S#s{ts = TS}, Kept);
                other ->
                    Kept2 = case librarys(Msg, S) of
                                true -> Kept;
                                false -> [Msg | Kept]
                            end,
                    discard_wait(Reason, Until, S, Kept2)
            end
    after Left ->
            ok = case Why of
                     drain -> sluice_conns_sup:at_deadline(S#s.parent);
                     linger -> ok
                 end,
            kept_finish(Reason, S, Kept)
    end.

%% The library's own messages (the sweep's nudges, a drain's, the timers
%% of a result and of a drain's deadline): dropped, not put back for the
%% handler.
librarys({sluice_sweep, _}, _S) -> true;
librarys({sluice_drain, _}, _S) -> true;
librarys({'$sluice', none, uncount}, _S) -> true;
librarys({timeout, _, Tag}, #s{timer_tag = Tag}) -> true;
librarys({timeout, Ref, sluice_drain}, #s{drain = {Ref, _}}) -> true;
librarys(_Msg, _S) -> false.

-spec kept_finish(term(), #s{}, [term()]) -> no_return().
kept_finish(Reason, S, Kept) ->
    _ = [self() ! Msg || Msg <- lists:reverse(Kept)],
    finish(Reason, S).

%% @doc Close now, count why, and run the handler's last callbacks: the
%% client closed (`closed': handle_close/1), a socket error (`{error, _}':
%% handle_error/2), anything else: terminate/2 only. A reason the handler
%% closed with (?BY_HANDLER) is its own, whatever it looks like: a handler
%% that closes with `{error, bad_request}' or `{shutdown, Why}' did not
%% see a socket error or a drain, so it is counted by the name it gave
%% (sluice_stats:ended_by_handler/2) and gets terminate/2 only.
-spec finish(term(), #s{}) -> no_return().
finish({error, ?AFTER_SHUTDOWN(Bytes)}, S) ->
    %% A reply after the handler shut the write side down
    %% (sluice_conn_halfclose): its bytes cannot reach the client, which
    %% is the handler's bug, reported as a crash of its own (handle_error/2,
    %% terminate/2, a crash report, `crashed'), not as the socket's error.
    crash(exit, {reply_after_shutdown, Bytes}, [], S);
finish(?BY_HANDLER(Reason) = ByHandler, S = #s{t = T, ts = TS, stats = Stats}) ->
    ok = queued_sends(ByHandler, S),
    T:close(TS),
    terminated(Reason, S),
    counted_end(ended_by_handler, Stats, Reason, {Reason, S});
finish({error, closed}, S = #s{t = T, ts = TS}) ->
    case sluice_transport:optional(T, closed_by_peer, [TS], false) of
        true -> finish(closed, S);
        false -> failed({error, closed}, S)
    end;
finish(Reason, S) ->
    failed(Reason, S).

%% finish/2 for a reason that is the library's (the client's close, a
%% socket error, a timeout, a drain...).
-spec failed(term(), #s{}) -> no_return().
failed(Reason, S = #s{t = T, ts = TS, stats = Stats}) ->
    ok = case Reason of
             {error, _} -> unsent(S);
             _ -> ok
         end,
    T:close(TS),
    case Reason of
        closed -> sluice_conn_handler:closed(S);
        {error, Why} -> sluice_conn_handler:failed({socket_error, Why}, S);
        _ -> ok
    end,
    terminated(Reason, S),
    counted_end(ended, Stats, Reason, {Reason, S}).

%% @doc The handler raised, or returned something that is not a result: as
%% a gen_server does, the handler is told (handle_error/2, terminate/2) and
%% the process exits with the reason, so a crash report names the handler
%% and the connection supervisor counts it as `crashed'; the same crash
%% in a line of sluice's for the logs that keep no crash report
%% (sluice_log:handler_crashed/6, Elixir's Logger). Except
%% `exit(normal)', which ends the process normally: the supervisor counts
%% no crash, so it is counted here.
-spec crash(error | exit | throw, term(), list(), #s{}) -> no_return().
crash(Class, Reason, Stack, S = #s{t = T, ts = TS}) ->
    Peer = T:peername(T:socket(TS)),
    T:close(TS),
    sluice_conn_handler:failed({crash, Class, Reason, Stack}, S),
    terminated(Reason, S),
    %% The stop event as the others come, once the reason is counted: by
    %% this process for `exit(normal)', else by the supervisor when it
    %% sees the exit (after the event, as ever).
    Normal = {Class, Reason} =:= {exit, normal},
    _ = Normal orelse stop_event(Reason, S),
    label(S#s.listener, Peer),
    sluice_log:handler_crashed(S#s.listener, S#s.handler, Peer, Class, Reason, Stack),
    case Normal of
        true -> counted_end(ended, S#s.stats, crashed, {Reason, S});
        false -> erlang:raise(Class, Reason, Stack)
    end.

%% @doc The socket has been handed to another process
%% (sluice_conn_handoff), which was told: the connection ends here without
%% closing it, counted as `handoff', with terminate(handoff, S).
-spec handed_off(#s{}) -> no_return().
handed_off(S = #s{stats = Stats}) ->
    terminated(handoff, S),
    counted_end(ended, Stats, handoff, {handoff, S}).

%% @doc Count the connection's close reason (sluice_stats:ended/2 or
%% ended_by_handler/2) and end normally, which its supervisor takes for
%% an end that counted its own reason (sluice_conns_sup). Last, once the
%% handler's last callbacks have returned, and with exits trapped (no
%% handler code runs any more to see it): an exit signal (a shutdown from
%% supervisor:terminate_child/2 or a stop, a linked process's end) that
%% comes during those callbacks ends the process uncounted, for its
%% supervisor to count, and one that comes after the count is a message
%% no one reads. (Counted before the callbacks, a shutdown during them
%% had the connection counted twice, its reason and `drained', and left
%% its mark in the supervisor's slot.) Only a `kill', which cannot be
%% trapped, landing between the count and the end still counts twice.
%% Once per connection, nothing per read.
-spec counted_end(ended | ended_by_handler, sluice_stats:stats(), term()) -> no_return().
counted_end(How, Stats, Reason) ->
    counted_end(How, Stats, Reason, none).

%% The same, and then the telemetry stop event of a connection that had
%% its start event: after the count, as it was before the count moved
%% after the handler's callbacks, so that a telemetry handler (it runs
%% here) that reads info/1 on the event finds this connection's reason
%% counted (it found none). Exits are trapped while it runs: one that
%% came then would have the supervisor count the connection again.
-spec counted_end(ended | ended_by_handler, sluice_stats:stats(), term(),
                  none | {term(), #s{}}) -> no_return().
counted_end(How, Stats, Reason, Stop) ->
    _ = process_flag(trap_exit, true),
    ok = sluice_stats:How(Stats, Reason),
    _ = case Stop of
            {Why, S} -> stop_event(Why, S);
            none -> ok
        end,
    exit(normal).

%% A handler that closes (a `close' or `reply_close' result) right after
%% sluice:send/2 calls of its own in the same callback: they go out before
%% the close, behind the result's reply, as they would have without the
%% close, and as gen_tcp:send/2 then close/1 deliver in a ranch protocol
%% (they were dropped). So do the sends of other connections' handlers
%% already queued here, which were told `ok' (a sluice:close/1 from
%% elsewhere is not the handler's close: what is queued behind it goes
%% as before). Sends that come after the FIN are refused as they were
%% (discard_wait/4). Taken out of the mailbox in order; the rest of it is
%% left as it is.
queued_sends(?BY_HANDLER(_), S) ->
    send_queued(S);
queued_sends(_Reason, _S) ->
    ok.

%% @doc Send what the handler's own sluice:send/2 (and other connections'
%% handlers) queued for this connection, in order: before a FIN.
-spec send_queued(#s{}) -> ok.
send_queued(S) ->
    receive
        {'$sluice', none, {send, Data}} ->
            _ = sluice_conn_handler:send(Data, S),
            send_queued(S)
    after 0 ->
            ok
    end.

%% A connection that ends with a socket error: `bytes_out' counted every
%% send the transport took, and what it took and then dropped (the inet
%% driver after a send timeout) is given back, before the close, while
%% the transport can still tell. Only then: the question costs about a
%% microsecond, and a connection that ends otherwise had no send refused.
unsent(#s{t = T, ts = TS, stats = Stats}) ->
    ok = sluice_stats:unsent(Stats, sluice_transport:optional(T, unsent, [TS], 0)).

%% The crash report names the listener and the client: proc_lib's report
%% has the reason and stacktrace but only sluice_conn:init/3 and a pid
%% for where they came from. It carries the process's logger metadata
%% (and prints it with the process dictionary), which is set here, once
%% the handler has had its last callback: a live connection pays nothing
%% for it, and no handler sees it.
label(Listener, Peer) ->
    logger:update_process_metadata(#{sluice_listener => Listener,
                                     sluice_peer => case Peer of
                                                        {ok, Address} -> Address;
                                                        Error -> Error
                                                    end}).

%% The handler's terminate/2, its last callback (what a sluice:recv/3 left
%% unhandled counted first).
terminated(Reason, S) ->
    ok = recv_left(S),
    ok = sluice_conn_handler:terminate(Reason, S).

stop_event(Reason, #s{listener = Name, started = Started}) ->
    sluice_telemetry:connection_stop(Name, self(), Started, Reason).

%% A sluice:recv/3 in the callback that closed (`close', `reply_close', a
%% drain's graceful close after it, a crash) left what it read past what
%% it returned for the loop, which will not run again: dropped with the
%% connection, counted (sluice_conn_recv:unhandled/2). Once per
%% connection, at its end: the read path does not look for it.
recv_left(#s{stats = Stats, woke = Woke}) ->
    _ = sluice_conn_recv:unhandled(Stats, Woke),
    ok.
