%% @doc A listener's shared figures: the one place that knows their layout.
%%
%% Two arrays, made once per listener by sluice_listener_sup and published
%% in the registry, so that they survive the restart of any process below
%% it:
%% <ul>
%%  <li>`counters' (write_concurrency): events that only ever go up:
%%      accepted, rejected, closed, bytes, chunks, why connections ended;</li>
%%  <li>`atomics': live state that goes up and down or is compared:
%%      connections (whole listener, and per connection supervisor so that
%%      a killed one's count can be given back), parked connections per
%%      connection supervisor, the connection limit, the shedding and
%%      suspended flags and the log throttles.</li>
%% </ul>
%% Acceptors, connection supervisors and connection processes update them
%% through the functions below; sluice:info/1 reads them with read/1.
%% @private
-module(sluice_stats).

-export([new/2, num_conns_sups/1]).
%% connections
-export([received/2, sent/2, unsent/2, ended/2, ended_by_handler/2]).
%% admission (acceptors)
-export([admit/1, admit_within/2, release/1, withdraw/1, rejected/1, shedding/1, set_shedding/2,
         set_max_connections/2, max_connections/1, set_suspended/2, suspended/1, log_due/4]).
%% alarms (sluice_alarms)
-export([arm_alarms/2, disarm_alarms/1]).
%% connection supervisors
-export([of_sup/2, sup_claim/2, sup_unclaim/3, sup_withdraw/3, sup_reset/2, sup_gone/2, parked/3,
         parked_reset/2, uncount/2, uncounted_gone/2]).
%% tests
-export([die_at/2]).
%% reading
-export([live/1, read/1, close_reason/1, handler_close_reason/1, marks/1]).

-export_type([stats/0, close_reason/0, die_point/0]).

-record(stats, {c :: counters:counters_ref(),
                a :: atomics:atomics_ref(),
                sups :: pos_integer(),
                %% in a connection's copy (of_sup/2): its supervisor's
                %% index and the generation of its marks; 0 in every other
                sup = 0 :: 0 | {pos_integer(), non_neg_integer()},
                %% a test's (die_at/2): where in sup_gone/2 the supervisor
                %% holding this copy kills itself; `none' everywhere else
                die = none :: none | die_point()}).
-opaque stats() :: #stats{}.

%% Why a connection ended, as info/1's `close_reasons' names it.
-type close_reason() :: peer_closed | idle_timeout | frame_timeout | socket_error
                      | protocol_error | drained | handler | crashed
                      | handshake_error | proxy_error | handoff.

%% Where a test has a connection supervisor killed in the middle of its
%% count of a connection's end (sup_gone/2): before it, after the live
%% count, after the slot.
-type die_point() :: start | conns | slot.

%% counters
-define(ACCEPTED, 1).
-define(REJECTED, 2).
-define(CLOSED, 3).
-define(BYTES_IN, 4).
-define(BYTES_OUT, 5).
-define(CHUNKS, 6).
%% Of ?BYTES_OUT, what never reached the kernel (unsent/2): kept apart,
%% not taken off ?BYTES_OUT, so that both only go up (a counter exported
%% to Prometheus must: a decrease reads as a reset).
-define(BYTES_UNSENT, 7).
%% Close reasons: one slot each, from ?REASON_BASE + 1 in the order of
%% ?REASONS. Each is bumped once per connection, never per message.
-define(REASONS, [peer_closed, idle_timeout, frame_timeout, socket_error, protocol_error,
                  drained, handler, crashed, handshake_error, proxy_error, handoff]).
-define(REASON_BASE, 7).
-define(NUM_COUNTERS, (?REASON_BASE + length(?REASONS))).

%% atomics; after the fixed slots, NumSups slots of connection
%% supervisors (below), then NumSups slots of parked connections per
%% supervisor, then NumSups slots of uncounted ones (uncount/2), then
%% NumSups slots of the connections each supervisor has seen gone
%% (sup_gone/2), a total kept over its restarts.
%%
%% A supervisor's slot is one word, so that what a supervisor killed at
%% any moment leaves in it is whole: its generation (bumped by each
%% incarnation, sup_reset/2), the connections it holds (claimed by the
%% acceptors, sup_claim/2, until it has seen them gone), the marks of
%% those that have counted their close reason (reasoned/1), and how
%% many it has seen gone, modulo 4, which its total (the gone slot, added
%% to right after) catches up with. A claim can tell whether a restart
%% has taken the slot over (sup_claim/2, sup_unclaim/3), a connection
%% whether its supervisor's successor has counted it already
%% (reasoned/1), and sup_gone/2 takes a connection off the slot, with its
%% mark, and counts it closed in one step: those were three, and a
%% supervisor killed between taking the mark off and the connection had
%% its successor count it `crashed' as well as by the reason it had
%% counted (close_reasons summed to closed + 1).
-define(CONNS, 1).
-define(MAX_CONNS, 2).
-define(SHEDDING, 3).
%% The log throttle of each kind of repeated fault (sluice_log): when its
%% last line was written, and how many were not written since (the next
%% slot): 4-5, 6-7 and 10-11.
-define(LAST_LOG(Kind), case Kind of accept -> 4; refused -> 6; full -> 10 end).
-define(SUPPRESSED(Kind), (?LAST_LOG(Kind) + 1)).
%% monotonic ms since when the listener has admitted nothing over its
%% limit (0: it is not full)
-define(FULL_SINCE, 8).
%% 1 while the listener is suspended (or being suspended): a connection
%% waiting for a slot is closed at once (retry_admit/2)
-define(SUSPENDED, 9).
%% Live connections that do not count against the limit
%% (sluice:remove_connection/1): among ?CONNS, which stays the live count
%% info/1 reports (accepted = closed + connections), and taken off it
%% where admission compares it with the limit.
-define(UNCOUNTED, 12).
%% The live count at which admit/1 says `alarm': the lowest threshold of
%% the listener's alarms that are not cooling down (sluice_alarms), the
%% largest value when none is armed (no alarms, or all cooling down, or
%% one reported and not yet seen to).
-define(ALARM_AT, 13).
-define(FIXED_ATOMICS, 13).
%% A supervisor's slot: live connections in bits 0-23 (16.7 million per
%% supervisor), their marks in bits 24-47 (never more than them), the
%% gone ones modulo 4 in bits 48-49, the generation in bits 50-62 (the
%% sign bit stays 0). A generation is only compared with one read a
%% moment before (a claim in flight, a connection that outlived its
%% supervisor): 8192 restarts before one comes round again.
-define(LIVE_MASK, 16#ffffff).
-define(MARK_SHIFT, 24).
-define(MARK, (1 bsl ?MARK_SHIFT)).
-define(GONE_SHIFT, 48).
-define(GONE, (1 bsl ?GONE_SHIFT)).
-define(GONE_MOD, 3).
-define(GEN_SHIFT, 50).
-define(GEN_MASK, 16#1fff).
%% atomics are signed 64-bit; `infinity' is stored as the largest.
-define(INFINITY, 16#7fffffffffffffff).

%% @doc Fresh figures for a listener with `NumSups' connection supervisors
%% and the given connection limit.
-spec new(pos_integer(), non_neg_integer() | infinity) -> stats().
new(NumSups, Max) ->
    St = #stats{c = counters:new(?NUM_COUNTERS, [write_concurrency]),
                a = atomics:new(?FIXED_ATOMICS + 4 * NumSups, [{signed, true}]),
                sups = NumSups},
    ok = set_max_connections(St, Max),
    atomics:put(St#stats.a, ?ALARM_AT, ?INFINITY),
    %% The first fault of each kind is always logged.
    Long = erlang:monotonic_time(millisecond) - 3600000,
    _ = [atomics:put(St#stats.a, ?LAST_LOG(K), Long) || K <- [accept, refused, full]],
    St.

-spec num_conns_sups(stats()) -> pos_integer().
num_conns_sups(#stats{sups = N}) -> N.

%%% Connections -------------------------------------------------------

%% @doc A chunk of `Bytes' bytes read from a client.
-spec received(stats(), non_neg_integer()) -> ok.
received(#stats{c = C}, Bytes) ->
    counters:add(C, ?BYTES_IN, Bytes),
    counters:add(C, ?CHUNKS, 1).

%% @doc `Bytes' bytes queued for a client.
-spec sent(stats(), non_neg_integer()) -> ok.
sent(#stats{c = C}, Bytes) ->
    counters:add(C, ?BYTES_OUT, Bytes).

%% @doc Of the bytes counted by sent/2, `Bytes' never reached the
%% kernel (sluice_transport's unsent/1): not sent after all (read/1's
%% `bytes_out' leaves them out), counted as `bytes_unsent'.
-spec unsent(stats(), non_neg_integer()) -> ok.
unsent(_St, 0) ->
    ok;
unsent(#stats{c = C}, Bytes) ->
    counters:add(C, ?BYTES_UNSENT, Bytes).

%% @doc A connection ended for `Reason' (a close reason, or the reason a
%% connection was closed with, see close_reason/1).
-spec ended(stats(), term()) -> ok.
ended(St = #stats{c = C}, Reason) ->
    case reasoned(St) of
        true -> counters:add(C, reason_slot(close_reason(Reason)), 1);
        false -> ok
    end.

%% @doc A connection ended because its handler closed it with `Reason'
%% (see handler_close_reason/1).
-spec ended_by_handler(stats(), term()) -> ok.
ended_by_handler(St = #stats{c = C}, Reason) ->
    case reasoned(St) of
        true -> counters:add(C, reason_slot(handler_close_reason(Reason)), 1);
        false -> ok
    end.

%% Whether a connection counts its own close reason (of_sup/2): marked in
%% its supervisor's slot until the supervisor sees it gone (sup_gone/2),
%% if that supervisor's generation of marks is still the slot's. If not,
%% its supervisor was killed and the successor's reset (sup_reset/2) has
%% counted it `crashed' already: a connection that outlived its
%% supervisor for a moment (the kill on its way, or a handler that traps
%% exits) and counted its reason after the reset was counted twice, and
%% left its mark to the successor, which then took one of its own
%% crashed connections for one with a reason. Either the mark and the
%% count, or neither: one reason per connection.
reasoned(#stats{sup = 0}) ->
    true;
reasoned(St = #stats{a = A, sup = {I, Gen}}) ->
    Slot = sup_slot(St, I),
    mark(A, Slot, Gen, atomics:get(A, Slot)).

mark(A, Slot, Gen, Old) when Old bsr ?GEN_SHIFT =:= Gen ->
    case atomics:compare_exchange(A, Slot, Old, Old + ?MARK) of
        ok -> true;
        Now -> mark(A, Slot, Gen, Now)
    end;
mark(_A, _Slot, _Gen, _Old) ->
    false.

%% @doc How a reason a connection ended with is counted.
-spec close_reason(term()) -> close_reason().
close_reason({protocol_error, _}) -> protocol_error;
close_reason(closed) -> peer_closed;
close_reason(peer_closed) -> peer_closed;
close_reason(idle_timeout) -> idle_timeout;
close_reason(frame_timeout) -> frame_timeout;
close_reason({error, _}) -> socket_error;
close_reason(drained) -> drained;
%% The library's own shutdowns: a handler that traps exits and is shut
%% down by its supervisor, sys:terminate/2, terminate_child. A handler
%% that closes with `{shutdown, _}' is counted by handler_close_reason/1.
close_reason({shutdown, _}) -> drained;
close_reason(crashed) -> crashed;
close_reason({handshake_error, _}) -> handshake_error;
close_reason({proxy_error, _}) -> proxy_error;
close_reason(handoff) -> handoff;
close_reason(_) -> handler.

%% @doc How a reason a handler closed with (`{close, Reason, S}',
%% `{reply_close, _, Reason, S}', init/2's `{close, Reason}') is counted:
%% `{protocol_error, _}' and the name of a close reason (`drained',
%% `idle_timeout', `frame_timeout', ...) as themselves, anything else as
%% `handler' (docs/handler.md): `closed', `{error, _}' and `{shutdown, _}'
%% from a handler are its own reasons, not the client's close, a socket
%% error or a drain.
-spec handler_close_reason(term()) -> close_reason().
handler_close_reason({protocol_error, _}) ->
    protocol_error;
handler_close_reason(Reason) ->
    case lists:member(Reason, ?REASONS) of
        true -> Reason;
        false -> handler
    end.

reason_slot(Reason) ->
    ?REASON_BASE + index(Reason, ?REASONS, 1).

index(X, [X | _], I) -> I;
index(X, [_ | T], I) -> index(X, T, I + 1).

%%% Admission ---------------------------------------------------------

%% @doc Count a new connection in unless the limit is reached or the
%% listener is shedding. Increment first, then compare: a burst of accepts
%% on many acceptors can never admit more than the limit. The uncounted
%% connections (uncount/2) are read after the increment: one that ends
%% meanwhile is taken off ?UNCOUNTED before ?CONNS (uncounted_gone/2 comes
%% before sup_gone/2), so that a race can only refuse, never admit one
%% too many. `alarm': admitted, and the live count with it has reached
%% an armed alarm's threshold (arm_alarms/2): the one read an admission
%% costs for alarms, whether the listener has any or not.
-spec admit(stats()) -> admitted | alarm | over_limit | shedding.
admit(#stats{a = A, c = C}) ->
    case atomics:get(A, ?SHEDDING) of
        0 ->
            Live = atomics:add_get(A, ?CONNS, 1),
            case Live - atomics:get(A, ?UNCOUNTED) =< atomics:get(A, ?MAX_CONNS) of
                true ->
                    counters:add(C, ?ACCEPTED, 1),
                    case Live >= atomics:get(A, ?ALARM_AT) of
                        false -> admitted;
                        true -> alarm
                    end;
                false ->
                    atomics:sub(A, ?CONNS, 1),
                    over_limit
            end;
        _ ->
            shedding
    end.

%% @doc admit/1, and over the limit, retry every millisecond for up to
%% Wait ms counted from when the listener became full: in a reconnect
%% storm the clients are back before their old connections have closed on
%% this side, and a slot frees within moments. A listener that has stayed
%% full for longer than Wait closes newcomers at once again (so a
%% sustained overload costs no waiting acceptors); any admission ends it.
-spec admit_within(stats(), non_neg_integer()) ->
          admitted | alarm | over_limit | shedding | suspended.
admit_within(St = #stats{a = A}, Wait) ->
    case admit(St) of
        over_limit when Wait > 0 -> retry_admit(St, full_since(A) + Wait);
        Result -> not_full(A, Result)
    end.

retry_admit(St = #stats{a = A}, Deadline) ->
    %% A listener that stops accepting closes the waiting connection at
    %% once: its suspend (and a drain, which suspends first) waits for
    %% this acceptor to end, and waited out max_connections_wait (up to an
    %% hour) before a drain told any connection. Said apart from the limit
    %% (`suspended'): the acceptor logs only the limit's.
    Suspended = atomics:get(A, ?SUSPENDED) =:= 1,
    case Suspended orelse erlang:monotonic_time(millisecond) >= Deadline of
        true when Suspended ->
            suspended;
        true ->
            over_limit;
        false ->
            receive after 1 -> ok end,
            case admit(St) of
                over_limit -> retry_admit(St, Deadline);
                Result -> not_full(A, Result)
            end
    end.

%% When the listener became full: now, unless an earlier newcomer found it
%% full already.
full_since(A) ->
    Now = erlang:monotonic_time(millisecond),
    case atomics:compare_exchange(A, ?FULL_SINCE, 0, Now) of
        ok -> Now;
        Earlier -> Earlier
    end.

%% An admission ends the full spell.
not_full(A, Admitted) when Admitted =:= admitted; Admitted =:= alarm ->
    _ = atomics:get(A, ?FULL_SINCE) =:= 0 orelse atomics:put(A, ?FULL_SINCE, 0),
    Admitted;
not_full(_A, Result) ->
    Result.

%% @doc Give back an admitted connection that never reached a connection
%% supervisor.
-spec release(stats()) -> ok.
release(#stats{a = A}) ->
    atomics:sub(A, ?CONNS, 1).

%% @doc Give back an admission (admit/1) whose socket stayed with its
%% owner (sluice:adopt/3 failed after it): not a connection at all, so
%% `accepted' is taken back with the live count.
-spec withdraw(stats()) -> ok.
withdraw(#stats{a = A, c = C}) ->
    counters:sub(C, ?ACCEPTED, 1),
    atomics:sub(A, ?CONNS, 1).

%% @doc A connection accepted and closed at once (over the limit, shed).
-spec rejected(stats()) -> ok.
rejected(#stats{c = C}) ->
    counters:add(C, ?REJECTED, 1).

-spec shedding(stats()) -> boolean().
shedding(#stats{a = A}) ->
    atomics:get(A, ?SHEDDING) > 0.

%% @doc One acceptor starts (true) or stops (false) shedding. A count, not
%% a flag: each listen socket has an acceptor that sheds its queue, and
%% one that is done must not end the shedding of another still reopening
%% its spare descriptor (the others' closes are what free one for it).
-spec set_shedding(stats(), boolean()) -> ok.
set_shedding(#stats{a = A}, true) ->
    atomics:add(A, ?SHEDDING, 1);
set_shedding(#stats{a = A}, false) ->
    stop_shedding(A, atomics:get(A, ?SHEDDING)).

stop_shedding(_A, N) when N =< 0 ->
    ok;
stop_shedding(A, N) ->
    case atomics:compare_exchange(A, ?SHEDDING, N, N - 1) of
        ok -> ok;
        Now -> stop_shedding(A, Now)
    end.

%% @doc The listener stops accepting (true: sluice:suspend/1, before its
%% listen sockets close) or accepts again (false: its acceptors start,
%% sluice_acceptors_sup). While it is suspended, a connection that an
%% acceptor holds waiting for a slot is closed (counted rejected) instead
%% of waiting out max_connections_wait.
-spec set_suspended(stats(), boolean()) -> ok.
set_suspended(#stats{a = A}, true) -> atomics:put(A, ?SUSPENDED, 1);
set_suspended(#stats{a = A}, false) -> atomics:put(A, ?SUSPENDED, 0).

%% @doc Whether the listener is suspended or being suspended (an acceptor
%% on a listen socket that suspend/1 does not close looks: sluice_acceptor).
-spec suspended(stats()) -> boolean().
suspended(#stats{a = A}) -> atomics:get(A, ?SUSPENDED) =:= 1.

%% @doc Set the connection limit, checked as the `max_connections' option
%% is at start (sluice_opts): sluice:set_max_connections/2 comes here, and
%% a limit that does not fit the atomic is an error, not a badarg.
-spec set_max_connections(stats(), non_neg_integer() | infinity) ->
          ok | {error, sluice_opts:error()}.
set_max_connections(St, Max) ->
    case sluice_opts:check_max_connections(Max) of
        ok -> put_max_connections(St, Max);
        {error, _} = E -> E
    end.

put_max_connections(#stats{a = A}, infinity) -> atomics:put(A, ?MAX_CONNS, ?INFINITY);
put_max_connections(#stats{a = A}, Max) -> atomics:put(A, ?MAX_CONNS, Max).

%% @doc The connection limit now.
-spec max_connections(stats()) -> non_neg_integer() | infinity.
max_connections(#stats{a = A}) ->
    case atomics:get(A, ?MAX_CONNS) of
        ?INFINITY -> infinity;
        Max -> Max
    end.

%% @doc Whether a log line about a fault of `Kind' is due at `Now' (ms): at
%% most one per `Interval' per listener however many processes see it,
%% with the number of faults not logged since the last line. A caller told
%% `false' has been counted among those.
-spec log_due(stats(), accept | refused | full, integer(), pos_integer()) ->
          {true, non_neg_integer()} | false.
log_due(#stats{a = A}, Kind, Now, Interval) ->
    Last = atomics:get(A, ?LAST_LOG(Kind)),
    case Now - Last >= Interval andalso
        atomics:compare_exchange(A, ?LAST_LOG(Kind), Last, Now) =:= ok of
        true ->
            {true, atomics:exchange(A, ?SUPPRESSED(Kind), 0)};
        false ->
            atomics:add(A, ?SUPPRESSED(Kind), 1),
            false
    end.

%%% Alarms ------------------------------------------------------------

%% @doc admit/1 says `alarm' from now on when the live count reaches
%% `Threshold' (`infinity': never).
-spec arm_alarms(stats(), pos_integer() | infinity) -> ok.
arm_alarms(#stats{a = A}, infinity) -> atomics:put(A, ?ALARM_AT, ?INFINITY);
arm_alarms(#stats{a = A}, Threshold) -> atomics:put(A, ?ALARM_AT, Threshold).

%% @doc An acceptor told `alarm' takes the alarms off until sluice_alarms
%% arms them again: true for the one acceptor that did (the one to tell
%% it), false for others told `alarm' at the same moment.
-spec disarm_alarms(stats()) -> boolean().
disarm_alarms(#stats{a = A}) ->
    case atomics:get(A, ?ALARM_AT) of
        ?INFINITY -> false;
        Armed -> atomics:compare_exchange(A, ?ALARM_AT, Armed, ?INFINITY) =:= ok
    end.

%%% Connection supervisors --------------------------------------------

%% @doc `St' as the connections of supervisor `I' count with: a close
%% reason they count (ended/2, ended_by_handler/2) is also
%% marked in the supervisor's slot until it sees them gone (sup_gone/2),
%% so that if it is killed in between its successor does not count them
%% `crashed' as well (sup_reset/2). A connection counts its reason and
%% then ends normally; its supervisor counts the others, with the same
%% copy, before it takes them off (so that its own kill in between
%% counts none twice either).
%% Called by supervisor `I' itself, after its reset: the generation of
%% the marks it reads is its own.
-spec of_sup(stats(), pos_integer()) -> stats().
of_sup(St = #stats{a = A}, I) ->
    St#stats{sup = {I, atomics:get(A, sup_slot(St, I)) bsr ?GEN_SHIFT}}.

%% @doc Connection supervisor `I' starts (or restarts): a new generation
%% of its slot. A predecessor that was killed left its connections counted
%% (those it had started died with it, being linked; parked ones are
%% closed by the registry; sockets handed to it and not yet started closed
%% with it): its count is given back, whatever acceptors claimed before
%% this moment included. Those connections ended with it: each is counted
%% closed and, unless it had counted its own close reason before it ended
%% (it closed, but the supervisor was killed before it saw it go: its mark
%% is still in the slot), as `crashed' (a killed connection process is,
%% see sluice_conns_sup), so that `accepted' stays `closed' plus the live
%% ones and every closed one has one reason. (Until 2026-11 those were
%% counted twice: their own reason and `crashed'.)
-spec sup_reset(stats(), pos_integer()) -> ok.
sup_reset(St = #stats{a = A}, I) ->
    Slot = sup_slot(St, I),
    %% A new generation, with its live count and marks in the same step:
    %% a connection of the old one that outlived it no longer counts its
    %% reason (reasoned/1).
    Old = reset_slot(A, Slot, atomics:get(A, Slot)),
    %% Its uncounted connections ended with it too: taken off before the
    %% live count (admit/1).
    atomics:sub(A, ?UNCOUNTED, atomics:exchange(A, uncounted_slot(St, I), 0)),
    %% One it took off the slot and was killed before it added to its
    %% total (sup_gone/2).
    GSlot = gone_slot(St, I),
    atomics:add(A, GSlot, ((Old bsr ?GONE_SHIFT) - atomics:get(A, GSlot)) band ?GONE_MOD),
    lost(St, Old band ?LIVE_MASK, (Old bsr ?MARK_SHIFT) band ?LIVE_MASK),
    atomics:put(A, parked_slot(St, I), 0).

%% N counted connections that ended with a dead supervisor, of which
%% Reasoned had counted their own reason.
lost(_St, 0, _Reasoned) ->
    ok;
lost(#stats{a = A, c = C}, N, Reasoned) ->
    atomics:sub(A, ?CONNS, N),
    counters:add(C, ?CLOSED, N),
    counters:add(C, reason_slot(crashed), N - min(N, Reasoned)).

%% One counted connection that did not start, with its dead supervisor.
lost(St, 1) ->
    lost(St, 1, 0).

%% The next generation, no connections nor marks, the gone ones modulo 4
%% kept (they stay in step with the gone slot's total).
reset_slot(A, Slot, Old) ->
    New = ((((Old bsr ?GEN_SHIFT) + 1) band ?GEN_MASK) bsl ?GEN_SHIFT)
        bor (Old band (?GONE_MOD bsl ?GONE_SHIFT)),
    case atomics:compare_exchange(A, Slot, Old, New) of
        ok -> Old;
        Now -> reset_slot(A, Slot, Now)
    end.

%% @doc An acceptor counts an admitted connection in supervisor `I''s slot
%% before handing the socket to it, and gets the slot's generation.
-spec sup_claim(stats(), pos_integer()) -> non_neg_integer().
sup_claim(St = #stats{a = A}, I) ->
    Slot = sup_slot(St, I),
    atomics:add_get(A, Slot, 1) bsr ?GEN_SHIFT.

%% @doc The handover of a claimed connection failed (the supervisor was
%% gone): the claim is given back, with the listener's live count, unless
%% a new generation of the supervisor has started since the claim, in
%% which case its reset gave them back already. True if this did. Either
%% way the connection is counted closed once, as `crashed' (sup_reset/2).
-spec sup_unclaim(stats(), pos_integer(), non_neg_integer()) -> boolean().
sup_unclaim(St = #stats{a = A}, I, Gen) ->
    unclaim(St, sup_slot(St, I), Gen, atomics:get(A, sup_slot(St, I)), fun lost/2).

%% @doc sup_unclaim/3 for a socket that stayed with its owner
%% (sluice:adopt/3, whose handover to the supervisor failed): not a
%% connection at all, so its admission is withdrawn (withdraw/1) rather
%% than counted closed. A supervisor restarted since the claim counted it
%% `crashed' already (sup_reset/2): false, as sup_unclaim/3.
-spec sup_withdraw(stats(), pos_integer(), non_neg_integer()) -> boolean().
sup_withdraw(St = #stats{a = A}, I, Gen) ->
    unclaim(St, sup_slot(St, I), Gen, atomics:get(A, sup_slot(St, I)),
            fun(S, 1) -> withdraw(S) end).

unclaim(St = #stats{a = A}, Slot, Gen, Old, Count)
  when Old bsr ?GEN_SHIFT =:= Gen, Old band ?LIVE_MASK > 0 ->
    case atomics:compare_exchange(A, Slot, Old, Old - 1) of
        ok -> Count(St, 1), true;
        Now -> unclaim(St, Slot, Gen, Now, Count)
    end;
unclaim(_St, _Slot, _Gen, _Old, _Count) ->
    false.

%% @doc A connection of supervisor `I' is gone (however it ended), its
%% close reason counted through of_sup/2's copy, by itself or by the
%% supervisor: called by the supervisor, it is taken off the live count,
%% then off the slot with its mark and counted closed in one step
%% (gone/3). Killed before that step, the supervisor leaves the
%% connection to its successor's reset, which counts it closed and, its
%% mark being there, not `crashed'; killed after it, nothing. Between the
%% two, the reset takes it off the live count a second time: the live
%% count is shared with admission (admit/1's one add per accept), and no
%% single step can both take a connection off it and tell a successor
%% so. Taken off first, as before, so that a `closed' one has always left
%% `connections' (a test that waits for one reads the other).
-spec sup_gone(stats(), pos_integer()) -> ok.
sup_gone(St = #stats{a = A, die = Die}, I) ->
    ok = died(Die, start),
    atomics:sub(A, ?CONNS, 1),
    ok = died(Die, conns),
    Slot = sup_slot(St, I),
    ok = gone(A, Slot, atomics:get(A, Slot)),
    ok = died(Die, slot),
    %% the total catches up with the slot's count (read/1 adds what it
    %% lags by, as the successor's reset does)
    atomics:add(A, gone_slot(St, I), 1).

%% Off the live ones and off the marks (never below none), one more gone.
gone(A, Slot, Old) ->
    Mark = case Old band (?LIVE_MASK bsl ?MARK_SHIFT) of
               0 -> 0;
               _ -> ?MARK
           end,
    Live = case Old band ?LIVE_MASK of
               0 -> 0;
               _ -> 1
           end,
    New = ((Old - Mark - Live) band bnot (?GONE_MOD bsl ?GONE_SHIFT))
        bor ((Old + ?GONE) band (?GONE_MOD bsl ?GONE_SHIFT)),
    case atomics:compare_exchange(A, Slot, Old, New) of
        ok -> ok;
        Now -> gone(A, Slot, Now)
    end.

%% @doc For tests: `St' as a connection supervisor holds it, which kills
%% itself at `Point' of its next count of a connection's end (sup_gone/2),
%% as a kill landing there would.
-spec die_at(stats(), die_point()) -> stats().
die_at(St, Point) ->
    St#stats{die = Point}.

died(none, _Point) -> ok;
died(Point, Point) -> exit(self(), kill);
died(_Die, _Point) -> ok.

%% @doc Supervisor `I' holds `Delta' more parked connections.
-spec parked(stats(), pos_integer(), integer()) -> ok.
parked(St = #stats{a = A}, I, Delta) ->
    atomics:add(A, parked_slot(St, I), Delta).

-spec parked_reset(stats(), pos_integer()) -> ok.
parked_reset(St = #stats{a = A}, I) ->
    atomics:put(A, parked_slot(St, I), 0).

%% @doc A live connection of supervisor `I' no longer counts against the
%% limit (sluice:remove_connection/1): a newcomer can take its place. It
%% stays among the live connections (info/1's `connections', and
%% `uncounted'), and its end is counted as any other's (sup_gone/2, after
%% uncounted_gone/2). Called by the supervisor, once per connection.
-spec uncount(stats(), pos_integer()) -> ok.
uncount(St = #stats{a = A}, I) ->
    atomics:add(A, uncounted_slot(St, I), 1),
    atomics:add(A, ?UNCOUNTED, 1).

%% @doc An uncounted connection of supervisor `I' is gone; called before
%% sup_gone/2 (admit/1 says why).
-spec uncounted_gone(stats(), pos_integer()) -> ok.
uncounted_gone(St = #stats{a = A}, I) ->
    atomics:sub(A, ?UNCOUNTED, 1),
    atomics:sub(A, uncounted_slot(St, I), 1).

sup_slot(#stats{}, I) -> ?FIXED_ATOMICS + I.
parked_slot(#stats{sups = NS}, I) -> ?FIXED_ATOMICS + NS + I.
uncounted_slot(#stats{sups = NS}, I) -> ?FIXED_ATOMICS + 2 * NS + I.
gone_slot(#stats{sups = NS}, I) -> ?FIXED_ATOMICS + 3 * NS + I.

%% The connections supervisor `I' has seen gone, over all its
%% generations: its slot's count modulo 4 is ahead of the total by the
%% one it is counting (or was killed counting, until its successor's
%% reset). The total is read again after the slot: unchanged, the slot
%% was read while it was at most one ahead (a reader held up between
%% the two reads while several ends were counted would have misread it
%% modulo 4).
gone_total(St = #stats{a = A}, I) ->
    GSlot = gone_slot(St, I),
    gone_total(A, GSlot, sup_slot(St, I), atomics:get(A, GSlot)).

gone_total(A, GSlot, Slot, Total) ->
    Mod = atomics:get(A, Slot) bsr ?GONE_SHIFT,
    case atomics:get(A, GSlot) of
        Total -> Total + ((Mod - Total) band ?GONE_MOD);
        Now -> gone_total(A, GSlot, Slot, Now)
    end.

%%% Reading -----------------------------------------------------------

%% @doc Live connections of the whole listener.
-spec live(stats()) -> integer().
live(#stats{a = A}) ->
    atomics:get(A, ?CONNS).

%% @doc Per connection supervisor, the marks of connections that counted
%% their own close reason and whose end it has not seen (of_sup/2): none
%% once every connection that ended is gone. For probes and tests.
-spec marks(stats()) -> [integer()].
marks(St = #stats{a = A, sups = NS}) ->
    [(atomics:get(A, sup_slot(St, I)) bsr ?MARK_SHIFT) band ?LIVE_MASK
     || I <- lists:seq(1, NS)].

%% @doc Every figure, as info/1 reports them.
-spec read(stats()) -> map().
read(St = #stats{c = C, a = A, sups = NS}) ->
    Reasons = maps:from_list([{R, counters:get(C, reason_slot(R))} || R <- ?REASONS]),
    %% Unsent bytes are counted after they were queued: read first, they
    %% are never more than the queued ones read after them.
    Unsent = counters:get(C, ?BYTES_UNSENT),
    Queued = counters:get(C, ?BYTES_OUT),
    #{max_connections => max_connections(St),
      connections => atomics:get(A, ?CONNS),
      uncounted => atomics:get(A, ?UNCOUNTED),
      parked => lists:sum([atomics:get(A, parked_slot(St, I)) || I <- lists:seq(1, NS)]),
      accepted => counters:get(C, ?ACCEPTED),
      rejected => counters:get(C, ?REJECTED),
      %% those the supervisors have seen gone, and those counted
      %% otherwise (lost/3)
      closed => counters:get(C, ?CLOSED)
          + lists:sum([gone_total(St, I) || I <- lists:seq(1, NS)]),
      protocol_errors => maps:get(protocol_error, Reasons),
      messages => counters:get(C, ?CHUNKS),
      close_reasons => Reasons,
      bytes_in => counters:get(C, ?BYTES_IN),
      bytes_out => Queued - Unsent,
      bytes_unsent => Unsent}.
