%% @doc Telemetry events, when the `telemetry' library is there; nothing
%% when it is not (sluice depends on no library outside OTP).
%%
%% Events (measurements; metadata):
%% <ul>
%%  <li>`[sluice, connection, start]': `#{system_time, monotonic_time}';
%%      `#{listener, pid, peer}'. When the connection's handler is about
%%      to start (after the TLS handshake and PROXY header, if any).
%%      `peer' is the client's address as sluice:peername/1 gives it
%%      (`{IP, Port}', `{local, Path}'; under the PROXY protocol the load
%%      balancer's, the client's being in the header), `undefined' if the
%%      socket could not tell (the client is gone already); read only
%%      when events are emitted.</li>
%%  <li>`[sluice, connection, stop]': `#{duration, monotonic_time}'
%%      (native time units; `monotonic_time' less `duration' is the start
%%      event's `monotonic_time'); `#{listener, pid, reason}'. When it
%%      ends, for any reason, which is the one terminate/2 gets: `closed'
%%      (the client closed), `idle_timeout', `drained' (a drain, or its
%%      deadline), `timeout' (a result's Timeout with no
%%      handle_timeout/1), `closed_by_api' (sluice:close/1),
%%      `{protocol_error, Why}', `{error, Why}' (a socket error),
%%      `{shutdown, Why}' (see below), what a handler closed with, as it
%%      gave it (a handler's `closed' looks like the client's: info/1's
%%      `close_reasons' tells them apart), or what it raised; also after an
%%      init/2 that raised or returned `{close, Reason}', which gets no
%%      terminate/2. The `pid' is the process
%%      that ended: for a connection that parked (`park_after'), not the
%%      one of its start event. Not when an exit signal ends the process
%%      without its handler's terminate/2: the listener's shutdown
%%      (stop_listener/1, or the deadline of stop_listener/2) of a
%%      handler that does not trap exits, a kill, and a parked
%%      connection closed by the shutdown (a handler that traps exits
%%      gets one, reason `{shutdown, Why}').</li>
%%  <li>`[sluice, listener, accept_error]': `#{count => 1}';
%%      `#{listener, reason}'.</li>
%%  <li>`[sluice, listener, rejected]': `#{count => 1}'; `#{listener,
%%      reason}'. A connection accepted and closed at once, counted in
%%      info/1's `rejected', reason `max_connections' (over the limit
%%      after `max_connections_wait'), `suspended' (the listener stopped
%%      accepting while it waited for a slot) or `shedding' (out of
%%      descriptors, closed to free one). It never reached a handler: no
%%      connection event goes with it.</li>
%% </ul>
%% Whether `telemetry' is there is looked up when a listener starts
%% (refresh/0) and kept in a persistent term, so an event costs one
%% lookup when it is absent. The term holds the module to call, so no call
%% to a module that may not exist is written out here (xref and dialyzer
%% would flag it).
-module(sluice_telemetry).

-export([refresh/0, enabled/0, connection_start/3, connection_stop/4, accept_error/2,
         rejected/2]).

-define(KEY, {?MODULE, enabled}).

%% @doc Look up (again) whether `telemetry:execute/3' can be called.
%% Every listener does when it starts; call it after loading `telemetry'
%% into a node whose listeners are already running.
-spec refresh() -> boolean().
refresh() ->
    Mod = telemetry,
    On = case code:ensure_loaded(Mod) of
             {module, Mod} -> erlang:function_exported(Mod, execute, 3) andalso Mod;
             _ -> false
         end,
    case persistent_term:get(?KEY, undefined) of
        On -> ok;
        %% Only written when it changes: a persistent term update costs
        %% a scan of every process.
        _ -> persistent_term:put(?KEY, On)
    end,
    On =/= false.

%% @doc Whether events are being emitted (as the last refresh/0 found).
-spec enabled() -> boolean().
enabled() ->
    persistent_term:get(?KEY, false) =/= false.

execute(Event, Measurements, Metadata) ->
    case persistent_term:get(?KEY, false) of
        false -> ok;
        Mod -> _ = Mod:execute(Event, Measurements, Metadata), ok
    end.

%% @private A connection of `Listener' starts; returns its start time,
%% which connection_stop/4 wants back. The event is made (its clock read,
%% the peer's address asked for: a system call) only when telemetry is
%% there: with it off a connection pays the lookup alone, where it made a
%% closure and read the system clock for nothing.
-spec connection_start(sluice:name(), pid(), sluice:conn()) -> integer().
connection_start(Listener, Pid, Conn) ->
    Now = erlang:monotonic_time(),
    case persistent_term:get(?KEY, false) of
        false ->
            Now;
        Mod ->
            Measurements = #{system_time => erlang:system_time(), monotonic_time => Now},
            _ = Mod:execute([sluice, connection, start], Measurements,
                            #{listener => Listener, pid => Pid, peer => peer(Conn)}),
            Now
    end.

peer(Conn) ->
    case sluice:peername(Conn) of
        {ok, Address} -> Address;
        {error, _} -> undefined
    end.

%% @private The connection started at `Started' ends. As at its start,
%% nothing is made (the clock read, two maps) with telemetry off.
-spec connection_stop(sluice:name(), pid(), integer(), term()) -> ok.
connection_stop(Listener, Pid, Started, Reason) ->
    case persistent_term:get(?KEY, false) of
        false ->
            ok;
        Mod ->
            Now = erlang:monotonic_time(),
            _ = Mod:execute([sluice, connection, stop],
                            #{duration => Now - Started, monotonic_time => Now},
                            #{listener => Listener, pid => Pid, reason => Reason}),
            ok
    end.

%% @private An accept on `Listener' failed.
-spec accept_error(sluice:name(), term()) -> ok.
accept_error(Listener, Reason) ->
    execute([sluice, listener, accept_error], #{count => 1},
            #{listener => Listener, reason => Reason}).

%% @private A connection accepted on `Listener' is closed at once, for
%% `Why': `max_connections', `suspended' or `shedding'.
-spec rejected(sluice:name(), max_connections | suspended | shedding) -> ok.
rejected(Listener, Why) ->
    execute([sluice, listener, rejected], #{count => 1}, #{listener => Listener, reason => Why}).
