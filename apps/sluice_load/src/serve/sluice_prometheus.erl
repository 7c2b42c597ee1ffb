%% @doc The `serve' command's figures as Prometheus text (exposition format
%% 0.0.4), per node and summed over its nodes (sluice_cluster), served at
%% /metrics by sluice_prometheus_httpd.
%%
%% Every series carries `node="<node name>"', and once more `node="all"'
%% with the sum. `sluice_accept_errors_total' also has `reason': one series
%% per reason seen and `reason="all"' with their sum (present even at 0).
%% `sluice_close_reasons_total' has `reason' too, one series for each of
%% info/1's `close_reasons' (every one, at 0 too), and no `reason="all"':
%% their sum is `sluice_closed_total', which keeps its labels, so that the
%% queries on it stay as they were.
%% `sluice_listen_overflows_total' and `sluice_listen_drops_total' are the
%% host's kernel counters (sluice_kernel), the same on every node of a host;
%% their `all' counts each host once (kernel_rows/2), and a figure a node
%% could not read has no sample.
%% `sluice_node_up' is 1 for each node that answered, 0 for each that did
%% not (sluice_cluster's `missing': down, or over the timeout); in such a
%% scrape the counters have no `node="all"' series (see format/1).
-module(sluice_prometheus).

-export([series/0, format/1, scrape/1]).

%% @doc The series: {Name, info key, type, help}. The telemetry events
%% carry the same figures (sluice_serve_telemetry).
-spec series() -> [{string(), atom(), gauge | counter, string()}].
series() ->
    [{"sluice_connections", connections, gauge, "Open connections."},
     %% What sluice_connections is graphed against at a limit. The sum is
     %% +Inf if one node's is.
     {"sluice_max_connections", max_connections, gauge,
      "The listener's max_connections (+Inf: none)."},
     {"sluice_parked_connections", parked, gauge,
      "Open connections parked while idle (no process of their own)."},
     {"sluice_uncounted_connections", uncounted, gauge,
      "Open connections that no longer count against max_connections "
      "(sluice:remove_connection/1)."},
     {"sluice_accepted_total", accepted, counter, "Connections accepted and admitted."},
     {"sluice_rejected_total", rejected, counter,
      "Connections accepted and closed at once: over max_connections, or shed when out of "
      "file descriptors."},
     {"sluice_closed_total", closed, counter, "Connections that ended."},
     {"sluice_protocol_errors_total", protocol_errors, counter,
      "Connections closed for a protocol error."},
     {"sluice_messages_total", messages, counter, "Chunks read from sockets and handled."},
     {"sluice_bytes_in_total", bytes_in, counter, "Bytes received."},
     %% Queued, not sent: sent is queued less unsent, which goes down when
     %% a connection ends with bytes it never sent, and a counter that
     %% goes down is a reset to Prometheus.
     {"sluice_bytes_out_total", bytes_queued, counter,
      "Bytes queued for clients: sent, or given up when their connection ended "
      "(sluice_bytes_unsent_total); sent is the difference."},
     {"sluice_bytes_unsent_total", bytes_unsent, counter,
      "Bytes queued for clients and never sent: their connection ended first "
      "(a send timeout, a failed write)."},
     {"sluice_beam_memory_bytes", beam_memory, gauge,
      "BEAM memory of the node (erlang:memory(total))."},
     {"sluice_resident_memory_bytes", resident_memory, gauge,
      "Resident set size of the node's OS process."}].

%% @doc Prometheus text of a sluice_cluster:info/2 result.
%%
%% When a node did not answer (`missing'), the `node="all"' series of the
%% counters are left out of the text: their sum would lack that node's
%% share and go down, which Prometheus takes for a counter reset (rate/1
%% and increase/1 then count the whole sum again as new). A node that died
%% stays missing, so from then on the counters' sums are gone; summing the
%% per-node series in the query survives it. The gauges keep their sum over
%% the nodes that answered (a gauge may go down).
-spec format(map() | {error, not_found}) -> iolist().
format({error, not_found}) ->
    [];
format(All = #{nodes := PerNode}) ->
    Missing = maps:get(missing, All, []),
    Nodes = [{atom_to_list(N), I} || {N, I} <- lists:sort(maps:to_list(PerNode))],
    WithAll = Nodes ++ [{"all", All}],
    Rows = fun(counter) when Missing =/= [] -> Nodes;
              (_) -> WithAll
           end,
    [[header(Metric, Type, Help),
      [sample(Metric, [{"node", Node}], maps:get(Key, I, 0)) || {Node, I} <- Rows(Type)]]
     || {Metric, Key, Type, Help} <- series()]
        ++ close_reasons(Rows(counter))
        ++ [header("sluice_accept_errors_total", counter, "Failed accept calls, by reason."),
            [[[sample("sluice_accept_errors_total", [{"node", Node}, {"reason", reason(R)}], C)
               || {R, C} <- lists:sort(maps:to_list(maps:get(accept_errors, I, #{})))],
              sample("sluice_accept_errors_total", [{"node", Node}, {"reason", "all"}],
                     lists:sum(maps:values(maps:get(accept_errors, I, #{}))))]
             || {Node, I} <- Rows(counter)]]
        %% The kernel's: `all' is each host's figure once, summed over
        %% the hosts (kernel_rows/2). A figure a node could not read is
        %% left out, not 0 (a node out of descriptors cannot open
        %% /proc/net/netstat: 0 there read as two counter resets).
        ++ [[header(Metric, counter, Help),
             [sample(Metric, [{"node", Node}], V)
              || {Node, Kernel} <- kernel_rows(Nodes, Missing),
                 {ok, V} <- [maps:find(Key, Kernel)]]]
            || {Metric, Key, Help} <- kernel_series()]
        ++ [header("sluice_node_up", gauge,
                   "1 if the node answered this scrape, 0 if it is down or did not answer "
                   "in time (then the counters have no node=\"all\" series)."),
            [sample("sluice_node_up", [{"node", N}], 1) || {N, _} <- Nodes],
            [sample("sluice_node_up", [{"node", atom_to_list(N)}], 0) || N <- Missing]].

%% Why connections ended, one series per reason of info/1's
%% `close_reasons' (sorted, for a stable text).
close_reasons(Rows) ->
    [header("sluice_close_reasons_total", counter,
            "Connections that ended, by why (info/1's close_reasons: peer_closed, "
            "idle_timeout, drained, handshake_error...); they add up to sluice_closed_total."),
     [[sample("sluice_close_reasons_total", [{"node", Node}, {"reason", atom_to_list(R)}], C)
       || {R, C} <- lists:sort(maps:to_list(maps:get(close_reasons, I, #{})))]
      || {Node, I} <- Rows]].

%% A reason label: accept(2)'s errno, or whatever else a transport's
%% accept/2 returned (its callback allows any term: `{invalid, What}' from
%% OTP's socket, a custom transport's own), written out: atom_to_list/1 of
%% a tuple raised, and every scrape failed with 500 for the listener's life.
reason(R) when is_atom(R) -> atom_to_list(R);
reason(R) -> lists:flatten(io_lib:format("~0tp", [R])).

%% Each node's kernel figures, and `all': every node of a host reads the
%% same host-wide figures, so `all' is each host's once (the largest its
%% nodes read, the last read), summed over the hosts (hosts_sum/2). (It
%% was the first node's: with `--hosts', one host's figure, and which
%% host's changed with the nodes that answered, so the series went down.)
%% A host none of whose nodes answered would lack its share and the sum
%% would go down, which Prometheus takes for a counter reset: no `all'
%% then, as for the counters. A node's host is what follows the `@' of
%% its name.
kernel_rows(Nodes, Missing) ->
    Kernels = [{Node, maps:get(kernel, I, #{})} || {Node, I} <- Nodes],
    Hosts = lists:usort([host(Node) || {Node, _} <- Nodes]),
    case [M || M <- Missing, not lists:member(host(atom_to_list(M)), Hosts)] of
        [] -> Kernels ++ [{"all", hosts_sum(Hosts, Kernels)}];
        _HostGone -> Kernels
    end.

hosts_sum(Hosts, Kernels) ->
    maps:from_list(
      [{Key, lists:sum(PerHost)}
       || {_, Key, _} <- kernel_series(),
          PerHost <- [[host_figure(Host, Key, Kernels) || Host <- Hosts]],
          not lists:member(unread, PerHost)]).

%% A host's figure: the largest its nodes read, `unread' when none of them
%% could (out of descriptors, or no /proc): then `all' is left out, whose
%% sum would lack that host's share and go down.
host_figure(Host, Key, Kernels) ->
    case [V || {Node, K} <- Kernels, host(Node) =:= Host, {ok, V} <- [maps:find(Key, K)]] of
        [] -> unread;
        Figures -> lists:max(Figures)
    end.

host(Node) ->
    lists:last(string:split(Node, "@")).

%% The host's listen-queue drops (info/1's `kernel', sluice_kernel): what
%% the clients saw that the listener never did. Host-wide and since boot,
%% so every node of a host shows the same figure (see kernel_rows/2 for
%% `all').
kernel_series() ->
    [{"sluice_listen_overflows_total", listen_overflows,
      "Connections the host's kernel dropped because an accept queue was full "
      "(ListenOverflows, every listener of the host, since boot): each such client "
      "waits a second or more for a SYN retransmit."},
     {"sluice_listen_drops_total", listen_drops,
      "Connections the host's kernel dropped at a listen socket, overflows included "
      "(ListenDrops, every listener of the host, since boot)."}].

%% @doc The text for listener `Name' over the nodes that serve it, gathered
%% now.
-spec scrape(sluice:name()) -> iolist().
scrape(Name) ->
    format(sluice_cluster:serving_info(Name)).

header(Metric, Type, Help) ->
    io_lib:format("# HELP ~s ~s~n# TYPE ~s ~s~n", [Metric, Help, Metric, Type]).

sample(Metric, Labels, Value) ->
    L = lists:join(",", [[K, "=\"", escape(V), "\""] || {K, V} <- Labels]),
    [Metric, "{", L, "} ", value(Value), "\n"].

value(infinity) -> "+Inf";
value(V) when is_integer(V) -> integer_to_list(V).

escape(S) ->
    lists:flatmap(fun($\\) -> "\\\\"; ($") -> "\\\""; ($\n) -> "\\n"; (C) -> [C] end, S).
