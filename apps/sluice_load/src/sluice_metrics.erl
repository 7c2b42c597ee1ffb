%% @doc The `serve' command's figures, per node and summed over its nodes
%% (sluice_cluster), as Prometheus text (served at /metrics by
%% sluice_metrics_httpd) and, where the `telemetry' application is on the
%% code path, as telemetry events.
%%
%% Every series carries `node="<node name>"', and once more `node="all"'
%% with the sum. `sluice_accept_errors_total' also has `reason': one series
%% per reason seen and `reason="all"' with their sum (present even at 0).
%%
%% Telemetry (no dependency: called through erlang:apply/3 only when
%% `code:which(telemetry)' finds it): every second, for each node and for
%% `all', event `[sluice, listener, stats]' with the measurements
%% `connections, accepted, rejected, closed, protocol_errors, accept_errors,
%% messages, bytes_in, bytes_out, beam_memory, resident_memory' and the
%% metadata `#{listener => Name, node => Node | all}'.
-module(sluice_metrics).

-export([set_nodes/1, nodes/0, gather/1, format/1, scrape/1, start_telemetry/1,
         start_telemetry/2]).

-define(NODES_KEY, {?MODULE, nodes}).
-define(TELEMETRY_INTERVAL, 1000).

%% {Series name, info key, type, help}
-define(SERIES,
        [{"sluice_connections", connections, gauge, "Open connections."},
         {"sluice_parked_connections", parked, gauge,
          "Open connections parked while idle (no process of their own)."},
         {"sluice_accepted_total", accepted, counter, "Connections accepted and admitted."},
         {"sluice_rejected_total", rejected, counter,
          "Connections accepted and closed at once: over max_connections."},
         {"sluice_closed_total", closed, counter, "Connections that ended."},
         {"sluice_protocol_errors_total", protocol_errors, counter,
          "Connections closed for a protocol error."},
         {"sluice_messages_total", messages, counter, "Chunks read from sockets and handled."},
         {"sluice_bytes_in_total", bytes_in, counter, "Bytes received."},
         {"sluice_bytes_out_total", bytes_out, counter, "Bytes sent."},
         {"sluice_beam_memory_bytes", beam_memory, gauge,
          "BEAM memory of the node (erlang:memory(total))."},
         {"sluice_resident_memory_bytes", resident_memory, gauge,
          "Resident set size of the node's OS process."}]).

%% @doc The nodes the figures are gathered from (default: this one).
-spec set_nodes([node()]) -> ok.
set_nodes(Nodes) ->
    persistent_term:put(?NODES_KEY, Nodes).

-spec nodes() -> [node()].
nodes() ->
    persistent_term:get(?NODES_KEY, [node()]).

%% @doc sluice_cluster:info/2 over nodes(), or `{error, not_found}'.
-spec gather(sluice:name()) -> map() | {error, not_found}.
gather(Name) ->
    sluice_cluster:info(Name, ?MODULE:nodes()).

%% @doc Prometheus text exposition (format 0.0.4) of a gather/1 result.
-spec format(map() | {error, not_found}) -> iolist().
format({error, not_found}) ->
    [];
format(All = #{nodes := PerNode}) ->
    Rows = [{atom_to_list(N), I} || {N, I} <- lists:sort(maps:to_list(PerNode))]
        ++ [{"all", All}],
    [[header(Metric, Type, Help),
      [sample(Metric, [{"node", Node}], maps:get(Key, I, 0)) || {Node, I} <- Rows]]
     || {Metric, Key, Type, Help} <- ?SERIES]
        ++ [header("sluice_accept_errors_total", counter, "Failed accept calls, by reason."),
            [[[sample("sluice_accept_errors_total", [{"node", Node}, {"reason", atom_to_list(R)}], C)
               || {R, C} <- lists:sort(maps:to_list(maps:get(accept_errors, I, #{})))],
              sample("sluice_accept_errors_total", [{"node", Node}, {"reason", "all"}],
                     lists:sum(maps:values(maps:get(accept_errors, I, #{}))))]
             || {Node, I} <- Rows]].

%% @doc gather/1 then format/1.
-spec scrape(sluice:name()) -> iolist().
scrape(Name) ->
    format(gather(Name)).

header(Metric, Type, Help) ->
    io_lib:format("# HELP ~s ~s~n# TYPE ~s ~s~n", [Metric, Help, Metric, Type]).

sample(Metric, Labels, Value) ->
    L = lists:join(",", [[K, "=\"", escape(V), "\""] || {K, V} <- Labels]),
    [Metric, "{", L, "} ", value(Value), "\n"].

value(infinity) -> "+Inf";
value(V) when is_integer(V) -> integer_to_list(V).

escape(S) ->
    lists:flatmap(fun($\\) -> "\\\\"; ($") -> "\\\""; ($\n) -> "\\n"; (C) -> [C] end, S).

%% @doc Where `telemetry' is present, a process that emits the figures as
%% telemetry events every second; otherwise nothing.
-spec start_telemetry(sluice:name()) -> {ok, pid()} | ignore.
start_telemetry(Name) ->
    start_telemetry(Name, telemetry).

%% @doc start_telemetry/1 with another module in telemetry's place (tests).
%% The module comes in as a value: xref then does not require telemetry.
-spec start_telemetry(sluice:name(), module()) -> {ok, pid()} | ignore.
start_telemetry(Name, Telemetry) ->
    case code:which(Telemetry) of
        non_existing -> ignore;
        _ -> {ok, spawn_link(fun() -> telemetry_loop(Telemetry, Name) end)}
    end.

telemetry_loop(Telemetry, Name) ->
    receive after ?TELEMETRY_INTERVAL -> ok end,
    case gather(Name) of
        All = #{nodes := PerNode} ->
            _ = [emit(Telemetry, Name, Node, I) || {Node, I} <- maps:to_list(PerNode)],
            emit(Telemetry, Name, all, All);
        {error, not_found} ->
            ok
    end,
    telemetry_loop(Telemetry, Name).

emit(Telemetry, Name, Node, I) ->
    Keys = [K || {_, K, _, _} <- ?SERIES],
    M = maps:with(Keys, I),
    Measurements = M#{accept_errors => lists:sum(maps:values(maps:get(accept_errors, I, #{})))},
    %% Through apply/3: telemetry is optional, and xref and dialyzer must not
    %% require it.
    _ = erlang:apply(Telemetry, execute, [[sluice, listener, stats], Measurements,
                                          #{listener => Name, node => Node}]),
    ok.
