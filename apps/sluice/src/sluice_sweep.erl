%% @doc The idle sweep of one connection supervisor: it notices connections
%% that have been quiet, tells them to hibernate or park, and closes those
%% that have received nothing from their client for `idle_timeout'.
%%
%% Why here and not in the connection: a per-connection timer (an `after'
%% clause in the receive loop) is set and cancelled on every message, which
%% the lock-step path pays per round trip, and it cannot make an idle
%% process give its heap back. One sweep per `sluice_conns_sup', every
%% tick/2 ms, costs nothing on the per-message path.
%%
%% Two measures of quiet, for two different questions:
%% <ul>
%%  <li>Idle (the idle timeout): no bytes from the client. The socket's own
%%      count of bytes received (sluice_transport:bytes_received/1) is read
%%      without involving the connection process. A process only runs when
%%      it has a message, and a byte from the client always brings one, so
%%      the count is read only after the process has been seen running:
%%      a quiet connection costs one cheap read a tick. Messages from other
%%      processes, sys calls and observer reads do not make a connection
%%      any less idle.</li>
%%  <li>Quiet (hibernation, parking): the process has not run. Its
%%      reduction count is read (`process_info/2', which neither wakes nor
%%      schedules it); a connection quiet for `hibernate_after' is sent
%%      `{sluice_sweep, hibernate}', one quiet for `park_after' (infinity
%%      unless the listener's connections can park) `{sluice_sweep, park}'.
%%      A hibernated connection is not read at all until it reports that
%%      it woke (report_woke/1), but for one read of its byte count at the
%%      tick after the nudge (a byte may have come just before it).</li>
%% </ul>
%% A connection reports waking by writing its pid into a table of its
%% supervisor's, which each slice of a tick reads (take_woken/3), not by a
%% message: a message woke the supervisor for every connection that woke
%% (2.5 us of the 12 us a quiet spell added to a Ping, bench/wake_cost.sh
%% and bench/README.md), and sat in the mailbox where the acceptors'
%% requests wait. Only a tick decides anything on an entry, so reading the
%% reports at the start of each of its slices is as prompt as the message
%% was.
%%
%% Activity is noticed at the tick after it, so the idle timeout fires
%% between `idle_timeout' and `idle_timeout' plus two ticks after the last
%% byte. (Bytes that came while the process could not run are noticed when
%% the timeout is due, see nudge/4: never early, possibly later.)
%% @private
-module(sluice_sweep).

-export([config/2, tick/1, new_entry/3, new_entry/4, sweep/3, start/1, continue/4, idle_since/1,
         closing/1, woke_table/0, report_woke/1, take_woken/3]).

-export_type([entry/0, children/0, config/0, progress/0, woke_table/0]).

%% What the process was last seen doing, or was last told to do
%% (`dozing': told to hibernate at the last tick, see step/4).
-type run() :: awake | dozing | asleep | parking | closing.

-record(entry, {sock :: sluice_transport:socket(),
                run = awake :: run(),
                %% awake: the reduction count when last seen running
                reds = unread :: non_neg_integer() | unread,
                %% when the process was last seen running (monotonic ms)
                quiet_since :: integer(),
                %% the socket's bytes received when last read
                bytes = 0 :: non_neg_integer(),
                %% when that count last moved (monotonic ms)
                idle_since :: integer()}).
-opaque entry() :: #entry{}.
-type children() :: #{pid() => entry()}.
-type config() :: #{transport := module(), idle := timeout(),
                    hibernate_after := timeout(), park_after := timeout()}.
%% Where a supervisor's hibernated connections report waking.
-type woke_table() :: ets:tid().
%% A tick in progress: what is left to look at.
-opaque progress() :: maps:iterator(pid(), entry()).

%% Entries looked at per slice of a tick (continue/4): between slices the
%% connection supervisor answers its messages, so an acceptor waiting for
%% a connection to start never waits for a whole tick over many entries.
-define(SLICE, 256).

%% Ticks are at least this long, so that a tiny idle_timeout cannot turn the
%% sweep into a busy loop; at most this long, so that hibernation and the
%% timeout stay reasonably prompt with large settings.
-define(MIN_TICK, 10).
-define(MAX_TICK, 5000).

%% @doc The sweep's settings for a listener; `park_after' only applies when
%% its connections can park (`Parkable').
-spec config(sluice_listener_sup:listener(), boolean()) -> config().
config(#{transport := T, opts := Opts}, Parkable) ->
    #{idle_timeout := Idle, hibernate_after := HibAfter, park_after := ParkAfter} = Opts,
    #{transport => T, idle => Idle, hibernate_after => HibAfter,
      park_after => case Parkable of
                        true -> ParkAfter;
                        false -> infinity
                    end}.

%% @doc The sweep period, or `infinity' when there is nothing to sweep for.
%% A quarter of the idle timeout bounds how late the timeout fires to 25 %.
-spec tick(config()) -> pos_integer() | infinity.
tick(#{idle := infinity, hibernate_after := infinity, park_after := infinity}) ->
    infinity;
tick(#{idle := Idle, hibernate_after := HibAfter, park_after := ParkAfter}) ->
    T = lists:min([quarter(Idle), HibAfter, ParkAfter]),
    max(?MIN_TICK, min(?MAX_TICK, T)).

quarter(infinity) -> infinity;
quarter(Ms) -> Ms div 4.

%% @doc The entry of a connection on `Sock' started at `Now' (monotonic
%% ms), idle since `IdleSince' (`Now' for a new connection; a connection
%% woken from parking carries its own).
-spec new_entry(sluice_transport:socket(), integer(), integer()) -> entry().
new_entry(Sock, Now, IdleSince) ->
    new_entry(Sock, Now, IdleSince, 0).

%% @doc As new_entry/3, for a socket that has received `Bytes' already (a
%% parked connection woken by something other than its client).
-spec new_entry(sluice_transport:socket(), integer(), integer(), non_neg_integer()) -> entry().
new_entry(Sock, Now, IdleSince, Bytes) ->
    #entry{sock = Sock, quiet_since = Now, idle_since = IdleSince, bytes = Bytes}.

%% @doc When the connection last received a byte (monotonic ms).
-spec idle_since(entry()) -> integer().
idle_since(#entry{idle_since = Since}) ->
    Since.

%% @doc Whether the connection has been told to close (idle timeout).
-spec closing(entry()) -> boolean().
closing(#entry{run = Run}) ->
    Run =:= closing.

%% A hibernated connection reported by `Now' that it woke: awake
%% again. What woke it may not have been the client, so the idle clock
%% is left alone; the next tick reads the byte count. One told to close
%% reports itself awake only when it did not close (sluice_conn_recv: a
%% recv read what the client sent meanwhile) or on its way to closing:
%% watched again either way (an entry left closing was never nudged
%% again, so that connection would never have idled out); the next tick
%% finds the bytes the recv read, or the process gone.
woke(Pid, Now, Children) ->
    case Children of
        #{Pid := E} -> Children#{Pid := E#entry{run = awake, reds = unread, quiet_since = Now}};
        _ -> Children
    end.

%% @doc A table for the wake reports of one supervisor's connections,
%% owned by the calling process. One row a connection at most (its pid),
%% so it stays bounded whenever it is read.
-spec woke_table() -> woke_table().
woke_table() ->
    %% One size counter (not one a scheduler): take_woken/3 reads the
    %% size at every slice of a tick, and it is 0 most of the time.
    ets:new(sluice_woke, [set, public, {write_concurrency, true},
                          {decentralized_counters, false}]).

%% @doc Called by a connection process woken from hibernation.
-spec report_woke(woke_table()) -> ok.
report_woke(Tab) ->
    true = ets:insert(Tab, {self()}),
    ok.

%% @doc The reports in `Tab' (report_woke/1) at `Now', applied to the
%% entries (woke/3) and taken out of the table.
-spec take_woken(woke_table(), integer(), children()) -> children().
take_woken(Tab, Now, Children) ->
    case ets:info(Tab, size) of
        0 ->
            Children;
        _ ->
            %% A row written again between the read and its delete would
            %% go with it, but none can be: a connection reports once a
            %% nudge, and this process sends the next only after this.
            lists:foldl(fun({Pid} = Row, Acc) ->
                                true = ets:delete_object(Tab, Row),
                                woke(Pid, Now, Acc)
                        end, Children, ets:tab2list(Tab))
    end.

%% @doc One whole tick over every connection at `Now' (monotonic ms);
%% sends the nudges and returns the updated entries.
-spec sweep(children(), integer(), config()) -> children().
sweep(Children, Now, Cfg) ->
    finish(continue(start(Children), Children, Now, Cfg), Now, Cfg).

finish({done, Children, _}, _Now, _Cfg) -> Children;
finish({more, P, Children, _}, Now, Cfg) -> finish(continue(P, Children, Now, Cfg), Now, Cfg).

%% @doc A tick over the connections there are now, to be done in slices
%% (continue/4).
-spec start(children()) -> progress().
start(Children) ->
    maps:iterator(Children).

%% @doc The next slice of a tick: returns the entries updated so far,
%% what is left (`more') or `done', and whether this slice changed any
%% entry. Connections that ended since the tick
%% began are skipped; those started since wait for the next tick. A quiet
%% connection's entry does not change from tick to tick, so only the
%% entries of connections that did something are rewritten: an idle
%% listener's map is not copied.
-spec continue(progress(), children(), integer(), config()) ->
          {more, progress(), children(), boolean()} | {done, children(), boolean()}.
continue(P, Children, Now, Cfg) ->
    slice(P, ?SLICE, Children, Now, Cfg, false).

slice(P, 0, Children, _Now, _Cfg, Changed) ->
    {more, P, Children, Changed};
slice(P, N, Children, Now, Cfg, Changed) ->
    case maps:next(P) of
        none ->
            {done, Children, Changed};
        {Pid, _, P2} ->
            case Children of
                #{Pid := Entry} ->
                    %% The entry as it is now: woke/3 may have changed it
                    %% since the tick began.
                    case step(Pid, Entry, Now, Cfg) of
                        Entry -> slice(P2, N - 1, Children, Now, Cfg, Changed);
                        New -> slice(P2, N - 1, Children#{Pid := New}, Now, Cfg, true)
                    end;
                _ ->
                    slice(P2, N - 1, Children, Now, Cfg, Changed)
            end
    end.

step(_Pid, E = #entry{run = closing}, _Now, _Cfg) ->
    E;
step(Pid, E = #entry{run = awake, reds = Seen}, Now, Cfg) ->
    case erlang:process_info(Pid, reductions) of
        {reductions, Seen} ->
            nudge(Pid, E, Now, Cfg);
        {reductions, Reds} ->
            nudge(Pid, bytes(E#entry{reds = Reds, quiet_since = Now}, Now, Cfg), Now, Cfg);
        undefined ->
            %% Dead; its 'EXIT' is on the way and removes it.
            E
    end;
step(Pid, E = #entry{run = dozing}, Now, Cfg) ->
    %% Told to hibernate at the last tick, because its reduction count had
    %% not moved; but a byte that came just after that read was handled
    %% before the nudge, and the process then hibernated without a report.
    %% The byte count is read once more, as the tick after a byte does.
    nudge(Pid, bytes(E#entry{run = asleep}, Now, Cfg), Now, Cfg);
step(Pid, E, Now, Cfg) ->
    %% asleep or parking: not running, so nothing from the client either
    %% (its first byte would have woken it).
    nudge(Pid, E, Now, Cfg).

%% The process ran: was it the client?
bytes(E = #entry{sock = Sock, bytes = Before}, Now, #{transport := T}) ->
    case T:bytes_received(Sock) of
        Before -> E;
        After -> E#entry{bytes = After, idle_since = Now}
    end.

%% The strongest nudge a connection is due, if any: close, then park, then
%% hibernate. Parking and hibernating only concern a process that is not
%% already doing so.
nudge(Pid, E = #entry{idle_since = Idle}, Now, Cfg = #{idle := IdleTimeout}) ->
    case over(Now - Idle, IdleTimeout) of
        true ->
            %% Before closing, the byte count is read once more whatever
            %% the process did: a byte brings a message, but a process does
            %% not run while it is blocked (in a send to a client that does
            %% not read, in a handler's call to another process) and the
            %% message waits; nor does one that hibernated on a nudge that
            %% was queued behind it (the sweep stops reading a hibernated
            %% connection). Either way the client did send, and the
            %% connection is not idle: its clock restarts now, when that was
            %% noticed (bytes/3). One read per timeout, not per tick.
            case bytes(E, Now, Cfg) of
                E ->
                    Pid ! {sluice_sweep, idle_timeout},
                    E#entry{run = closing};
                E2 ->
                    quiet(Pid, E2, Now, Cfg)
            end;
        false ->
            quiet(Pid, E, Now, Cfg)
    end.

%% Not idle: park or hibernate, if due. Parking and hibernating only
%% concern a process that is not already doing so.
quiet(_Pid, E = #entry{run = parking}, _Now, _Cfg) ->
    E;
quiet(Pid, E = #entry{run = Run, quiet_since = Quiet}, Now,
      #{park_after := ParkAfter, hibernate_after := HibAfter}) ->
    case {over(Now - Quiet, ParkAfter), Run =:= awake andalso over(Now - Quiet, HibAfter)} of
        {true, _} ->
            Pid ! {sluice_sweep, park},
            E#entry{run = parking};
        {false, true} ->
            Pid ! {sluice_sweep, hibernate},
            E#entry{run = dozing};
        {false, false} ->
            E
    end.

over(_For, infinity) -> false;
over(For, Limit) -> For >= Limit.
