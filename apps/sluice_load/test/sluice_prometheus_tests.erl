%% EUnit tests of `serve --metrics-port': the text sluice_prometheus makes
%% of an info map whatever reasons its accept errors have, and how
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
