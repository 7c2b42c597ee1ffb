%% @doc Log lines for faults that every client can cause at once (a
%% listener out of descriptors or full, a flood of failed TLS handshakes):
%% at most one line a second per listener and kind, with the number of
%% others since the last line. Every occurrence is still counted (info/1).
%% @private
-module(sluice_log).

-export([accept_failed/3, over_limit/2, refused/3]).

-include_lib("kernel/include/logger.hrl").

-define(INTERVAL_MS, 1000).

%% @doc accept(2) failed on a listen socket.
-spec accept_failed(sluice:name(), sluice_stats:stats(), term()) -> ok.
accept_failed(Name, Stats, Reason) ->
    case due(Stats, accept) of
        {true, Others} ->
            ?LOG_WARNING("sluice listener ~p: accept failed: ~p "
                         "(~b more accept errors since the last report)",
                         [Name, Reason, Others]);
        false ->
            ok
    end.

%% @doc A connection over the listener's `max_connections' was closed
%% (after `max_connections_wait'): the operator's one sign in the log
%% that clients are turned away, as they are when descriptors run out.
-spec over_limit(sluice:name(), sluice_stats:stats()) -> ok.
over_limit(Name, Stats) ->
    case due(Stats, full) of
        {true, Others} ->
            ?LOG_WARNING("sluice listener ~p: connection closed: max_connections (~p) "
                         "reached (~b more since the last report)",
                         [Name, sluice_stats:max_connections(Stats), Others]);
        false ->
            ok
    end.

%% @doc A connection ended before its handler started: a failed or slow
%% TLS handshake, a missing or bad PROXY header.
-spec refused(sluice:name(), sluice_stats:stats(), term()) -> ok.
refused(Name, Stats, Reason) ->
    case due(Stats, refused) of
        {true, Others} ->
            ?LOG_NOTICE("sluice listener ~p: connection closed before its handler "
                        "started: ~0p (~b more since the last report)",
                        [Name, Reason, Others]);
        false ->
            ok
    end.

due(Stats, Kind) ->
    sluice_stats:log_due(Stats, Kind, erlang:monotonic_time(millisecond), ?INTERVAL_MS).
