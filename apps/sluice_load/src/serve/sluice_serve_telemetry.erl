%% @doc Where the `telemetry' application is on the code path, the `serve'
%% command's figures as telemetry events: every second, for each node and
%% for `all', event `[sluice, listener, stats]' with the measurements of
%% sluice_prometheus:series/0 (connections, accepted, ..., beam_memory,
%% resident_memory) plus `bytes_out' (sent: info/1's, which the series
%% give as `bytes_queued' and `bytes_unsent') and `accept_errors' summed
%% over reasons, and the metadata `#{listener => Name, node => Node |
%% all}'; `all''s also has
%% `missing', the nodes that did not answer (sluice_cluster): its sums lack
%% their share, and its counters may then be lower than the event before.
%%
%% telemetry is no dependency: it is called through erlang:apply/3, and
%% only when `code:which(telemetry)' finds it.
-module(sluice_serve_telemetry).

-export([start/1, start/2]).

-define(INTERVAL, 1000).

%% @doc Where `telemetry' is present, a process linked to the caller that
%% emits the events; otherwise nothing.
-spec start(sluice:name()) -> {ok, pid()} | ignore.
start(Name) ->
    start(Name, telemetry).

%% @doc start/1 with another module in telemetry's place (tests). The
%% module comes in as a value: xref then does not require telemetry.
-spec start(sluice:name(), module()) -> {ok, pid()} | ignore.
start(Name, Telemetry) ->
    case code:which(Telemetry) of
        non_existing -> ignore;
        _ -> {ok, spawn_link(fun() -> loop(Telemetry, Name) end)}
    end.

loop(Telemetry, Name) ->
    receive after ?INTERVAL -> ok end,
    case sluice_cluster:serving_info(Name) of
        All = #{nodes := PerNode} ->
            _ = [emit(Telemetry, Name, #{node => Node}, I) || {Node, I} <- maps:to_list(PerNode)],
            emit(Telemetry, Name, #{node => all, missing => maps:get(missing, All, [])}, All);
        {error, not_found} ->
            ok
    end,
    loop(Telemetry, Name).

emit(Telemetry, Name, Meta, I) ->
    %% Not max_connections: a setting, and `infinity' where there is none,
    %% where a measurement is a number.
    M = maps:with([bytes_out | [K || {_, K, _, _} <- sluice_prometheus:series(),
                                     K =/= max_connections]], I),
    Measurements = M#{accept_errors => lists:sum(maps:values(maps:get(accept_errors, I, #{})))},
    _ = erlang:apply(Telemetry, execute, [[sluice, listener, stats], Measurements,
                                          Meta#{listener => Name}]),
    ok.
