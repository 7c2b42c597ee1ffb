%% EUnit tests of `serve --metrics-port': the text sluice_prometheus makes
%% of an info map whatever reasons its accept errors have or whichever
%% nodes did not answer, its max_connections and close reasons, and how
%% sluice_prometheus_httpd answers methods other than GET.
-module(sluice_prometheus_tests).

-include_lib("eunit/include/eunit.hrl").

-define(NAME, sluice_prometheus_tests).

%% A transport's accept/2 may fail with any term (OTP's socket has
%% `{invalid, What}', a custom transport its own): its reason label is the
%% term written out, escaped, and the text is made (atom_to_list/1 of a
%% tuple raised: every scrape was a 500 for the listener's life).
accept_error_reasons_that_are_not_atoms_test() ->
    I = #{connections => 1, accept_errors => #{emfile => 2, {invalid, "a\"b"} => 3}},
    Text = iolist_to_binary(sluice_prometheus:format(I#{nodes => #{'n@h' => I}})),
    Lines = binary:split(Text, <<"\n">>, [global]),
    ?assert(lists:member(<<"sluice_accept_errors_total{node=\"n@h\",reason=\"emfile\"} 2">>,
                         Lines)),
    ?assert(lists:member(<<"sluice_accept_errors_total{node=\"all\",",
                           "reason=\"{invalid,\\\"a\\\\\\\"b\\\"}\"} 3">>, Lines)),
    ?assert(lists:member(<<"sluice_accept_errors_total{node=\"all\",reason=\"all\"} 5">>,
                         Lines)).

%% A scrape in which a node did not answer (down, or over erpc's 5 s): no
%% counter's node="all" series goes down from the scrape before, which
%% Prometheus would take for a counter reset (the sum lacked that node's
%% share: 20 accepted, then 9). The counters' `all' series are left out,
%% the gauges' stay (over the nodes that answered), and sluice_node_up
%% names the node that is missing.
counters_all_never_goes_down_when_a_node_is_missing_test() ->
    A = #{connections => 2, accepted => 9, bytes_in => 90, accept_errors => #{emfile => 1}},
    B = #{connections => 3, accepted => 11, bytes_in => 110, accept_errors => #{emfile => 2}},
    Both = samples(sluice_prometheus:format(cluster(#{'a@h' => A, 'b@h' => B}, []))),
    OnlyA = samples(sluice_prometheus:format(cluster(#{'a@h' => A}, ['b@h']))),
    ?assertEqual(20, maps:get({"sluice_accepted_total", "all"}, Both)),
    Counters = [M || {M, _, counter, _} <- sluice_prometheus:series()]
        ++ ["sluice_accept_errors_total"],
    [?assert(maps:get({M, "all"}, OnlyA, infinity) >= maps:get({M, "all"}, Both), M)
     || M <- Counters],
    ?assertEqual([], [K || K = {_, "all", _} <- maps:keys(by_reason(
                                                           sluice_prometheus:format(
                                                             cluster(#{'a@h' => A}, ['b@h']))))]),
    ?assertEqual(error, maps:find({"sluice_accepted_total", "all"}, OnlyA)),
    ?assertEqual(error, maps:find({"sluice_accept_errors_total", "all"}, OnlyA)),
    ?assertEqual(9, maps:get({"sluice_accepted_total", "a@h"}, OnlyA)),
    ?assertEqual(2, maps:get({"sluice_connections", "all"}, OnlyA)),
    ?assertEqual(#{"a@h" => 1, "b@h" => 1},
                 maps:from_list([{N, V} || {{"sluice_node_up", N}, V} <- maps:to_list(Both)])),
    ?assertEqual(#{"a@h" => 1, "b@h" => 0},
                 maps:from_list([{N, V} || {{"sluice_node_up", N}, V} <- maps:to_list(OnlyA)])).

%% A connection that ends with bytes it never sent (a send timeout on
%% inet) takes them out of info/1's `bytes_out', which then goes down;
%% the exported sluice_bytes_out_total counts what was queued and does
%% not (it did: Prometheus took it for a counter reset and rate() and
%% increase() counted every byte again), and sluice_bytes_unsent_total
%% counts what was given up. Every counter of the scrape after is at
%% least what it was in the one before.
bytes_out_total_never_goes_down_when_bytes_go_unsent_test() ->
    {ok, _} = application:ensure_all_started(sluice),
    Name = {?MODULE, unsent},
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0,
                                            handler => {sluice_proto_echo, []}}),
    try
        Stats = sluice_registry:lookup(Name, stats),
        Scrape = fun() -> samples(sluice_prometheus:format(sluice_cluster:info(Name, [node()]))) end,
        ok = sluice_stats:sent(Stats, 100),
        Before = Scrape(),
        ok = sluice_stats:unsent(Stats, 40),
        After = Scrape(),
        Counters = [M || {M, _, counter, _} <- sluice_prometheus:series()],
        ?assertEqual([], [{M, N} || {M, N} = K <- maps:keys(Before), lists:member(M, Counters),
                                    maps:get(K, After) < maps:get(K, Before)]),
        ?assertEqual({100, 0}, {maps:get({"sluice_bytes_out_total", "all"}, Before),
                                maps:get({"sluice_bytes_unsent_total", "all"}, Before)}),
        ?assertEqual({100, 40}, {maps:get({"sluice_bytes_out_total", "all"}, After),
                                 maps:get({"sluice_bytes_unsent_total", "all"}, After)}),
        ?assertMatch(#{bytes_out := 60, bytes_unsent := 40}, sluice:info(Name))
    after
        sluice:stop_listener(Name)
    end.

%% sluice_max_connections, the gauge sluice_connections is graphed
%% against at a limit: each node's, and their sum, +Inf where a node has
%% none (`infinity'); with a node missing, the sum over those that
%% answered, as the other gauges.
max_connections_gauge_test() ->
    A = #{connections => 2, max_connections => 100},
    B = #{connections => 3, max_connections => 50},
    Unbounded = #{connections => 1, max_connections => infinity},
    Max = fun(PerNode, Missing) ->
                  S = samples(sluice_prometheus:format(
                                (cluster(PerNode, Missing))#{max_connections =>
                                                                 sum_max(PerNode)})),
                  maps:from_list([{N, V} || {{"sluice_max_connections", N}, V} <- maps:to_list(S)])
          end,
    ?assertEqual(#{"a@h" => 100, "b@h" => 50, "all" => 150},
                 Max(#{'a@h' => A, 'b@h' => B}, [])),
    ?assertEqual(#{"a@h" => 100, "c@h" => infinity, "all" => infinity},
                 Max(#{'a@h' => A, 'c@h' => Unbounded}, [])),
    ?assertEqual(#{"a@h" => 100, "all" => 100}, Max(#{'a@h' => A}, ['b@h'])),
    Text = iolist_to_binary(sluice_prometheus:format(
                              (cluster(#{'c@h' => Unbounded}, []))#{max_connections => infinity})),
    ?assertNotEqual(nomatch, binary:match(Text, <<"# TYPE sluice_max_connections gauge\n">>)),
    ?assertNotEqual(nomatch, binary:match(Text, <<"sluice_max_connections{node=\"all\"} +Inf\n">>)).

sum_max(PerNode) ->
    Values = [maps:get(max_connections, I) || I <- maps:values(PerNode)],
    case lists:member(infinity, Values) of
        true -> infinity;
        false -> lists:sum(Values)
    end.

%% sluice_close_reasons_total: info/1's close_reasons, per node and summed
%% (node="all"), one series a reason with a `reason' label, 0s included;
%% left out of `all' when a node is missing, as every counter. The
%% unlabelled-by-reason sluice_closed_total stays as it was, their sum.
%% Through a real listener: its reasons add up to its closed.
close_reasons_by_reason_test() ->
    R = fun(Peer, Drained) -> #{peer_closed => Peer, drained => Drained, crashed => 0} end,
    A = #{closed => 3, close_reasons => R(1, 2)},
    B = #{closed => 4, close_reasons => R(4, 0)},
    Both = (cluster(#{'a@h' => A, 'b@h' => B}, []))#{closed => 7, close_reasons => R(5, 2)},
    ByReason = by_reason(sluice_prometheus:format(Both)),
    ?assertEqual(#{{"a@h", "peer_closed"} => 1, {"a@h", "drained"} => 2, {"a@h", "crashed"} => 0,
                   {"b@h", "peer_closed"} => 4, {"b@h", "drained"} => 0, {"b@h", "crashed"} => 0,
                   {"all", "peer_closed"} => 5, {"all", "drained"} => 2, {"all", "crashed"} => 0},
                 maps:from_list([{{N, Why}, V}
                                 || {{"sluice_close_reasons_total", N, Why}, V}
                                        <- maps:to_list(ByReason)])),
    ?assertEqual(7, maps:get({"sluice_closed_total", "all"}, samples(sluice_prometheus:format(Both)))),
    Text = iolist_to_binary(sluice_prometheus:format(Both)),
    ?assertNotEqual(nomatch, binary:match(Text, <<"# TYPE sluice_close_reasons_total counter\n">>)),
    ?assertNotEqual(nomatch, binary:match(Text, <<"sluice_closed_total{node=\"all\"} 7\n">>)),
    OnlyA = by_reason(sluice_prometheus:format(
                        (cluster(#{'a@h' => A}, ['b@h']))#{close_reasons => R(1, 2)})),
    ?assertEqual([], [K || K = {_, "all", _} <- maps:keys(OnlyA)]),
    ?assertEqual(2, maps:get({"sluice_close_reasons_total", "a@h", "drained"}, OnlyA)),
    {ok, _} = application:ensure_all_started(sluice),
    Name = {?MODULE, reasons},
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0,
                                            handler => {sluice_proto_echo, []}}),
    try
        #{port := Port} = sluice:info(Name),
        {ok, C} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
        ok = gen_tcp:close(C),
        ok = closed(Name, 1, 500),
        Real = sluice_cluster:info(Name, [node()]),
        Text2 = sluice_prometheus:format(Real),
        Reasons = [V || {{"sluice_close_reasons_total", "all", _}, V}
                            <- maps:to_list(by_reason(Text2))],
        ?assertEqual(length(maps:keys(maps:get(close_reasons, sluice:info(Name)))),
                     length(Reasons)),
        ?assertEqual(1, lists:sum(Reasons)),
        ?assertEqual(1, maps:get({"sluice_closed_total", "all"}, samples(Text2)))
    after
        sluice:stop_listener(Name)
    end.

%% Wait (Tries times 10 ms at most) for listener Name to count N closed.
closed(Name, N, Tries) ->
    case sluice:info(Name) of
        #{closed := N} -> ok;
        _ when Tries > 0 -> receive after 10 -> closed(Name, N, Tries - 1) end;
        Info -> {not_closed, Info}
    end.

%% {Metric, Node, Reason} => value of a text's samples that have a reason
%% other than "all".
by_reason(Text) ->
    maps:from_list(
      [{{Metric, proplists:get_value("node", Labels), Why}, list_to_integer(V)}
       || {Metric, Labels, V} <- parsed(Text),
          Why <- [proplists:get_value("reason", Labels, "all")], Why =/= "all"]).

%% The kernel's figures are a host's (every node of it reads the same
%% /proc/net/netstat): `all' counts each host once. With nodes on two
%% hosts (`--hosts') it is the sum of the two hosts' figures, not the
%% first node's (it was 10, host h1's, where the hosts had 10 and 20; and
%% 20 once h1's node was left out, then 10 again: a counter that went
%% down); two nodes of one host, that host's figure; a scrape in which no
%% node of a host answered has no `all', whose sum would go down.
kernel_all_counts_each_host_once_test() ->
    K = fun(O, D) -> #{accepted => 1, kernel => #{listen_overflows => O, listen_drops => D}} end,
    All = fun(PerNode, Missing) ->
                  S = samples(sluice_prometheus:format(cluster(PerNode, Missing))),
                  {maps:find({"sluice_listen_overflows_total", "all"}, S),
                   maps:find({"sluice_listen_drops_total", "all"}, S)}
          end,
    ?assertEqual({{ok, 30}, {ok, 37}}, All(#{'a@h1' => K(10, 12), 'b@h2' => K(20, 25)}, [])),
    %% the nodes of a host read it a moment apart: the latest figure
    ?assertEqual({{ok, 31}, {ok, 38}},
                 All(#{'a@h1' => K(10, 12), 'c@h1' => K(11, 13), 'b@h2' => K(20, 25)}, [])),
    ?assertEqual({{ok, 11}, {ok, 13}}, All(#{'a@h1' => K(10, 12), 'c@h1' => K(11, 13)}, [])),
    %% a node missing, another of its host answered: the host is counted
    ?assertEqual({{ok, 30}, {ok, 37}},
                 All(#{'a@h1' => K(10, 12), 'b@h2' => K(20, 25)}, ['c@h1'])),
    ?assertEqual({error, error}, All(#{'a@h1' => K(10, 12)}, ['b@h2'])),
    ?assertEqual({error, error}, All(#{'b@h2' => K(20, 25)}, ['a@h1'])),
    %% each node's own series stays
    S = samples(sluice_prometheus:format(cluster(#{'a@h1' => K(10, 12)}, ['b@h2']))),
    ?assertEqual(10, maps:get({"sluice_listen_overflows_total", "a@h1"}, S)).

%% A node out of descriptors (a listener at its limits) cannot read
%% /proc/net/netstat: its info/1 has `kernel => #{}'. Its kernel series
%% are left out of that scrape, and so is `all' when no node of a host
%% read them: they were written as 0, a counter that fell from its
%% figure since boot to 0 and back, which Prometheus takes for two resets
%% (increase/1 then counts the whole figure again, just when an operator
%% looks at an overload).
kernel_figures_not_read_are_left_out_test() ->
    K = fun(O, D) -> #{accepted => 1, kernel => #{listen_overflows => O, listen_drops => D}} end,
    Blind = #{accepted => 1, kernel => #{}},
    Alone = samples(sluice_prometheus:format(cluster(#{'a@h1' => Blind}, []))),
    ?assertEqual([], [Key || Key = {"sluice_listen_" ++ _, _} <- maps:keys(Alone)]),
    %% another node of the host read them: its figure is the host's
    Shared = samples(sluice_prometheus:format(cluster(#{'a@h1' => Blind, 'c@h1' => K(10, 12)}, []))),
    ?assertEqual(error, maps:find({"sluice_listen_overflows_total", "a@h1"}, Shared)),
    ?assertEqual(10, maps:get({"sluice_listen_overflows_total", "c@h1"}, Shared)),
    ?assertEqual(10, maps:get({"sluice_listen_overflows_total", "all"}, Shared)),
    %% no node of host h1 read them: `all' would lack its share
    Partial = samples(sluice_prometheus:format(cluster(#{'a@h1' => Blind, 'b@h2' => K(20, 25)}, []))),
    ?assertEqual(20, maps:get({"sluice_listen_overflows_total", "b@h2"}, Partial)),
    ?assertEqual(error, maps:find({"sluice_listen_overflows_total", "all"}, Partial)),
    ?assertEqual(error, maps:find({"sluice_listen_drops_total", "all"}, Partial)).

%% Through sluice_cluster: a serving node that cannot be reached is
%% missing from the scrape, and once node_down/1 took it out of the nodes
%% asked (bin/sluice serve's loop, on nodedown) it stays missing: the
%% counters' `all' series do not come back lower than they were.
a_node_down_stays_missing_test_() ->
    {setup, fun start/0, fun stop/1,
     fun(_) ->
             [fun() ->
                      Gone = 'sluice_gone@nowhere.invalid',
                      ok = sluice_cluster:set_serving_nodes([node(), Gone]),
                      try
                          Asked = samples(sluice_prometheus:scrape(?NAME)),
                          ok = sluice_cluster:node_down(Gone),
                          ?assertEqual([node()], sluice_cluster:serving_nodes()),
                          Later = samples(sluice_prometheus:scrape(?NAME)),
                          [begin
                               ?assertEqual(error, maps:find({"sluice_accepted_total", "all"}, S)),
                               ?assertEqual(0, maps:get({"sluice_node_up", atom_to_list(Gone)}, S)),
                               ?assertEqual(1, maps:get({"sluice_node_up", atom_to_list(node())}, S)),
                               ?assert(maps:is_key({"sluice_connections", "all"}, S))
                           end || S <- [Asked, Later]]
                      after
                          sluice_cluster:set_serving_nodes([node()])
                      end
              end]
     end}.

cluster(PerNode, Missing) ->
    {ok, All} = maps:find(nodes, #{nodes => PerNode}),
    Sum = fun(K) -> lists:sum([maps:get(K, I, 0) || I <- maps:values(All)]) end,
    %% as sluice_cluster:info/2 builds it: the first node's map (its
    %% kernel figures among them) under the sums
    [First | _] = maps:values(All),
    First#{connections => Sum(connections), accepted => Sum(accepted), bytes_in => Sum(bytes_in),
           accept_errors => #{emfile => lists:sum([maps:get(emfile, maps:get(accept_errors, I, #{}),
                                                            0)
                                                   || I <- maps:values(All)])},
           nodes => PerNode, missing => Missing}.

%% {Metric, Node} => value of a text's samples (those with a reason:
%% reason="all"); +Inf is `infinity'.
samples(Text) ->
    maps:from_list(
      [{{Metric, proplists:get_value("node", Labels)}, value(V)}
       || {Metric, Labels, V} <- parsed(Text),
          proplists:get_value("reason", Labels, "all") =:= "all"]).

value("+Inf") -> infinity;
value(V) -> list_to_integer(V).

%% [{Metric, Labels, Value}] of a text's samples.
parsed(Text) ->
    Lines = string:lexemes(unicode:characters_to_list(iolist_to_binary(Text)), "\n"),
    [{Metric, Labels, V}
     || L <- Lines, hd(L) =/= $#,
        [Series, V] <- [string:split(L, " ", trailing)],
        [Metric, LabelText] <- [string:split(string:trim(Series, trailing, "}"), "{")],
        Labels <- [[list_to_tuple(string:split(string:trim(KV, both, "\""), "=\""))
                    || KV <- string:lexemes(LabelText, ",")]]].

%% HEAD /metrics is GET's status and headers with no body (it was a 404,
%% with a body, which a client on a kept-alive connection reads as the
%% start of its next response); another method is 405 naming the ones
%% allowed; another path 404.
methods_test_() ->
    {setup, fun start/0, fun stop/1,
     fun({Port, _Httpd}) ->
             [fun() ->
                      {Get, GetHead, GetBody} = request(Port, "GET /metrics"),
                      ?assertMatch("HTTP/1.1 200 " ++ _, Get),
                      ?assertNotEqual(<<>>, GetBody),
                      %% A HEAD then a GET on one connection: the GET's
                      %% answer comes right after the HEAD's headers.
                      {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port,
                                                [binary, {active, false}, {packet, http_bin}]),
                      ok = gen_tcp:send(S, ["HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                                            "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n"]),
                      {Head, HeadHeaders} = response_head(S),
                      ?assertMatch("HTTP/1.1 200 " ++ _, Head),
                      ?assertEqual(header("content-length", GetHead),
                                   header("content-length", HeadHeaders)),
                      {Next, _} = response_head(S),
                      ?assertMatch("HTTP/1.1 404 " ++ _, Next),
                      ok = gen_tcp:close(S),
                      {Post, PostHead, _} = request(Port, "POST /metrics"),
                      ?assertMatch("HTTP/1.1 405 " ++ _, Post),
                      ?assertEqual("GET, HEAD", header("allow", PostHead)),
                      {Other, _, _} = request(Port, "GET /metricz"),
                      ?assertMatch("HTTP/1.1 404 " ++ _, Other)
              end]
     end}.

start() ->
    {ok, _} = application:ensure_all_started(sluice),
    {ok, _} = sluice:start_listener(?NAME, #{ip => {127, 0, 0, 1}, port => 0,
                                             handler => {sluice_proto_echo, []}}),
    {ok, Pid} = sluice_prometheus_httpd:start({127, 0, 0, 1}, 0, ?NAME),
    {sluice_prometheus_httpd:port(Pid), Pid}.

stop({_Port, Httpd}) ->
    ok = inets:stop(httpd, Httpd),
    ok = sluice:stop_listener(?NAME).

%% One request on its own connection (closed by the server after it):
%% the status line, the headers and the body.
request(Port, Line) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {packet, http_bin}]),
    ok = gen_tcp:send(S, [Line, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",
                          "Content-Length: 0\r\n\r\n"]),
    {Status, Headers} = response_head(S),
    ok = inet:setopts(S, [{packet, raw}]),
    Body = rest(S, <<>>),
    {Status, Headers, Body}.

response_head(S) ->
    {ok, {http_response, {1, 1}, Code, Phrase}} = gen_tcp:recv(S, 0, 5000),
    Status = lists:flatten(io_lib:format("HTTP/1.1 ~b ~s", [Code, Phrase])),
    {Status, headers(S, [])}.

headers(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, {http_header, _, Field, _, Value}} ->
            headers(S, [{string:lowercase(to_list(Field)), binary_to_list(Value)} | Acc]);
        {ok, http_eoh} ->
            Acc
    end.

to_list(A) when is_atom(A) -> atom_to_list(A);
to_list(B) when is_binary(B) -> binary_to_list(B).

header(Name, Headers) ->
    proplists:get_value(Name, Headers).

rest(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, B} -> rest(S, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc
    end.
