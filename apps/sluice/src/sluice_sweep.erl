%% @doc The idle sweep of one connection supervisor: it notices connections
%% that have been quiet, tells them to hibernate, and closes those quiet for
%% longer than the listener's `idle_timeout'.
%%
%% Why here and not in the connection: a per-connection timer (an `after'
%% clause in the receive loop) is set and cancelled on every message, which
%% the lock-step path pays per round trip, and it cannot make an idle process
%% give its heap back. One sweep per `sluice_conns_sup', every `tick/2' ms,
%% costs nothing on the per-message path:
%% <ul>
%%  <li>an awake connection is quiet when its reduction count has not moved
%%      since it was last seen to move (`process_info/2' reads it without waking or
%%      scheduling the process). A process only runs when it gets a message,
%%      so this is "no message for a tick", the idle timeout's old meaning,
%%      whatever the transport;</li>
%%  <li>quiet for `hibernate_after' ms: sent `{sluice_sweep, hibernate}'.
%%      From then on the sweep does not look at its reductions (handling the
%%      nudge ran it); the connection reports `{sluice_woke, Pid}' to its
%%      supervisor on the first message that wakes it;</li>
%%  <li>quiet (awake or asleep) for `park_after' ms (infinity unless the
%%      listener's connections can park, sluice_conns_sup:parkable/1): sent
%%      `{sluice_sweep, park}', once; the connection either hands its
%%      socket to the conns_sup or reports `{sluice_woke, Pid}';</li>
%%  <li>quiet (awake or asleep) for `idle_timeout' ms: sent
%%      `{sluice_sweep, idle_timeout}', once.</li>
%% </ul>
%% Activity is noticed at the tick after it, so the idle timeout fires
%% between `idle_timeout' and `idle_timeout' plus two ticks after the last
%% message, and a hibernated connection costs the
%% sweep nothing until it wakes.
-module(sluice_sweep).

-export([tick/2, new_entry/1, woke/3, sweep/3]).

-export_type([entry/0, children/0, config/0]).

%% {Baseline, Since}: Since is when the connection was last seen active
%% (erlang:monotonic_time(millisecond)); Baseline is the reduction count
%% seen then (awake), `unknown' (awake, not read yet), `asleep' (told to
%% hibernate, not woken since), `parking' (told to park) or `closing' (told
%% to close). A quiet
%% connection's entry does not change from tick to tick, so a sweep rewrites
%% only the entries of connections that did something: an idle listener's
%% map is not copied at every tick.
-type entry() :: {non_neg_integer() | unknown | asleep | parking | closing, integer()}.
-type children() :: #{pid() => entry()}.
-type config() :: #{idle := timeout(), hibernate_after := timeout(),
                    park_after := timeout()}.

%% Ticks are at least this long, so that a tiny idle_timeout cannot turn the
%% sweep into a busy loop; at most this long, so that hibernation and the
%% timeout stay reasonably prompt with large settings.
-define(MIN_TICK, 10).
-define(MAX_TICK, 5000).

%% @doc The sweep period for a listener, or `infinity' when there is
%% nothing to sweep for. A quarter of the idle timeout bounds how late the
%% timeout fires to 25 %.
-spec tick(timeout(), timeout()) -> pos_integer() | infinity.
tick(infinity, infinity) ->
    infinity;
tick(Idle, HibAfter) ->
    T = min(quarter(Idle), HibAfter),
    max(?MIN_TICK, min(?MAX_TICK, T)).

quarter(infinity) -> infinity;
quarter(Ms) -> Ms div 4.

%% @doc The entry of a connection started at `Now' (monotonic ms).
-spec new_entry(integer()) -> entry().
new_entry(Now) ->
    {unknown, Now}.

%% @doc A hibernated connection woke up (it had a message at `Now'): awake
%% again, quiet from now.
-spec woke(pid(), integer(), children()) -> children().
woke(Pid, Now, Children) ->
    case Children of
        #{Pid := {closing, _}} -> Children;
        #{Pid := _} -> Children#{Pid := {unknown, Now}};
        _ -> Children
    end.

%% @doc One tick over every connection at `Now' (monotonic ms); sends the
%% nudges and returns the updated entries.
-spec sweep(children(), integer(), config()) -> children().
sweep(Children, Now, Cfg) ->
    maps:fold(fun(Pid, Entry, Acc) ->
                      case step(Pid, Entry, Now, Cfg) of
                          Entry -> Acc;
                          New -> Acc#{Pid := New}
                      end
              end, Children, Children).

step(_Pid, Entry = {closing, _}, _Now, _Cfg) ->
    Entry;
%% Told to park: only the idle timeout is left to send.
step(Pid, Entry = {parking, Since}, Now, #{idle := Idle}) ->
    nudge(Pid, Entry, Now - Since, Idle, infinity, infinity);
%% Asleep: the sweep no longer reads its reductions (it ran to take the
%% nudge); it may still be told to park or to close.
step(Pid, Entry = {asleep, Since}, Now, #{idle := Idle, park_after := ParkAfter}) ->
    nudge(Pid, Entry, Now - Since, Idle, ParkAfter, infinity);
step(Pid, Entry = {Seen, Since}, Now, #{idle := Idle, hibernate_after := HibAfter,
                                        park_after := ParkAfter}) ->
    case erlang:process_info(Pid, reductions) of
        {reductions, Seen} ->
            nudge(Pid, Entry, Now - Since, Idle, ParkAfter, HibAfter);
        {reductions, Reds} ->
            {Reds, Now};
        undefined ->
            %% Dead; its 'EXIT' is on the way and removes it.
            Entry
    end.

%% The strongest nudge a connection quiet for Quiet ms is due, if any:
%% close, then park, then hibernate.
nudge(Pid, Entry = {_, Since}, Quiet, Idle, ParkAfter, HibAfter) ->
    case {over(Quiet, Idle), over(Quiet, ParkAfter), over(Quiet, HibAfter)} of
        {true, _, _} -> Pid ! {sluice_sweep, idle_timeout}, {closing, Since};
        {false, true, _} -> Pid ! {sluice_sweep, park}, {parking, Since};
        {false, false, true} -> Pid ! {sluice_sweep, hibernate}, {asleep, Since};
        {false, false, false} -> Entry
    end.

over(_Quiet, infinity) -> false;
over(Quiet, Limit) -> Quiet >= Limit.
