%% @doc One listener name on several Erlang nodes, seen as one: the
%% figures of sluice:info/1 summed over the nodes that run it, and each
%% node's own memory figures (what memory per connection is computed from).
%%
%% Which nodes: by default this node and every node it is connected to
%% (`nodes()'); a node that has no listener of that name is left out, one
%% that does not answer within the timeout (or is unreachable) is left out
%% and named under `missing'. That needs no registration step
%% and stays right when a node dies, and is what `bin/sluice serve --nodes'
%% sets up (its peers are connected to the CLI node). Pass the list
%% explicitly when other nodes are connected too.
-module(sluice_cluster).

-export([info/2, node_stats/1, set_serving_nodes/1, serving_nodes/0, serving_info/1,
         node_down/1]).

%% Figures that are summed; the rest of info/1 (ip, port, options) is
%% taken from the first node.
-define(SUMMED, [connections, parked, uncounted, accepted, rejected, closed, protocol_errors,
                 messages, bytes_in, bytes_out, bytes_unsent, bytes_queued, max_connections]).
-define(TIMEOUT, 5000).
-define(SERVING_KEY, {?MODULE, serving_nodes}).

%% @doc The listener's figures summed over `Nodes', with each node's own
%% under `nodes' (node => info map with `beam_memory' and
%% `resident_memory' added), and under `missing' the nodes that did not
%% answer (down, unreachable, over the timeout): the sums lack their
%% share. `{error, not_found}' when no node runs it.
-spec info(sluice:name(), [node()]) -> map() | {error, not_found}.
info(Name, Nodes) ->
    Results = lists:zip(Nodes, erpc:multicall(Nodes, ?MODULE, node_stats, [Name], ?TIMEOUT)),
    PerNode = maps:from_list([{N, Stats} || {N, {ok, Stats = #{}}} <- Results]),
    Missing = lists:usort([N || {N, R} <- Results, element(1, R) =/= ok]),
    case maps:values(PerNode) of
        [] -> {error, not_found};
        [First | _] = All -> (sum(First, All, PerNode))#{missing => Missing}
    end.

sum(First, All, PerNode) ->
    Summed = maps:from_list([{K, add([maps:get(K, I, 0) || I <- All])} || K <- ?SUMMED]),
    AcceptErrors = add_maps(accept_errors, All),
    CloseReasons = add_maps(close_reasons, All),
    Memory = maps:from_list([{K, add([maps:get(K, I, 0) || I <- All])}
                             || K <- [beam_memory, resident_memory]]),
    maps:merge(First, maps:merge(Summed, Memory#{accept_errors => AcceptErrors,
                                                  close_reasons => CloseReasons,
                                                  nodes => PerNode})).

%% A map of counts under Key in each info, summed key by key.
add_maps(Key, All) ->
    lists:foldl(fun(I, Acc) ->
                        maps:fold(fun(R, N, A) -> maps:update_with(R, fun(V) -> V + N end, N, A) end,
                                  Acc, maps:get(Key, I, #{}))
                end, #{}, All).

add(Values) ->
    case lists:member(infinity, Values) of
        true -> infinity;
        false -> lists:sum([V || V <- Values, is_integer(V)])
    end.

%% @doc This node's figures for listener `Name': sluice:info/1 plus the
%% node's BEAM memory (erlang:memory(total)) and resident set size in bytes
%% (0 where there is no /proc), and `bytes_queued': every byte queued for
%% the clients, `bytes_out' and `bytes_unsent', which only goes up (where
%% `bytes_out' goes down when a connection ends with bytes it never sent:
%% no counter for Prometheus). Called on each node by info/2.
-spec node_stats(sluice:name()) -> map() | {error, not_found}.
node_stats(Name) ->
    case sluice:info(Name) of
        Info = #{bytes_out := Out} ->
            Info#{bytes_queued => Out + maps:get(bytes_unsent, Info, 0),
                  beam_memory => erlang:memory(total),
                  resident_memory => sluice_procfs:rss_bytes()};
        Error ->
            Error
    end.

%% @doc The nodes `bin/sluice serve' runs its listener on (default: this
%% one); what /metrics and the telemetry events sum over. A node that dies
%% is taken out by the cluster's loop (node_down/1).
-spec set_serving_nodes([node()]) -> ok.
set_serving_nodes(Nodes) ->
    persistent_term:put(?SERVING_KEY, {Nodes, []}).

-spec serving_nodes() -> [node()].
serving_nodes() ->
    element(1, serving()).

%% @doc A serving node is down: no longer asked (a call to a host that is
%% gone could take the whole timeout at every scrape), and named under
%% `missing' by serving_info/1 from now on: its figures are gone from the
%% sums for good.
-spec node_down(node()) -> ok.
node_down(Node) ->
    {Serving, Down} = serving(),
    persistent_term:put(?SERVING_KEY, {Serving -- [Node], lists:usort([Node | Down])}).

serving() ->
    persistent_term:get(?SERVING_KEY, {[node()], []}).

%% @doc info/2 over serving_nodes(); `missing' also names the nodes that
%% went down.
-spec serving_info(sluice:name()) -> map() | {error, not_found}.
serving_info(Name) ->
    {Serving, Down} = serving(),
    case info(Name, Serving) of
        #{missing := Missing} = Info -> Info#{missing := lists:usort(Missing ++ Down)};
        Error -> Error
    end.
