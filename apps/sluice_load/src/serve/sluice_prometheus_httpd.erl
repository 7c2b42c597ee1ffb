%% @doc `--metrics-port': OTP's inets httpd serving sluice_prometheus' text at
%% GET /metrics (404 elsewhere). The figures are gathered from every node
%% at each request, so a scrape always sees the live values.
%%
%% This module is also the httpd callback (do/1): one module, no files to
%% serve, no document root in use.
-module(sluice_prometheus_httpd).

-export([start/3, port/1, do/1]).

-include_lib("inets/include/httpd.hrl").

-define(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8").

%% @doc Start inets and an httpd on IP:Port (0: any free port) serving the
%% metrics of listener `Name'.
-spec start(inet:ip_address(), inet:port_number(), sluice:name()) -> {ok, pid()} | {error, term()}.
start(IP, Port, Name) ->
    {ok, _} = application:ensure_all_started(inets),
    Root = filename:basedir(user_cache, "sluice"),
    Doc = filename:join(Root, "htdocs"),
    ok = filelib:ensure_path(Doc),
    persistent_term:put({?MODULE, listener}, Name),
    inets:start(httpd, [{port, Port}, {bind_address, IP}, {server_name, "sluice"},
                        {server_root, Root}, {document_root, Doc},
                        {modules, [?MODULE]}, {ipfamily, family(IP)}]).

family(IP) when tuple_size(IP) =:= 8 -> inet6;
family(_) -> inet.

%% @doc The port an httpd started by start/3 listens on.
-spec port(pid()) -> inet:port_number().
port(Pid) ->
    {port, Port} = lists:keyfind(port, 1, httpd:info(Pid, [port])),
    Port.

%% @doc httpd callback. GET /metrics is the text; HEAD is its headers
%% (what a monitor that checks the endpoint asks); any other method there
%% is 405, any other path 404.
-spec do(#mod{}) -> {proceed, list()}.
do(M = #mod{method = Method, request_uri = "/metrics" ++ Rest}) when Rest =:= ""; hd(Rest) =:= $? ->
    case Method of
        _ when Method =:= "GET"; Method =:= "HEAD" ->
            Body = unicode:characters_to_binary(
                     sluice_prometheus:scrape(persistent_term:get({?MODULE, listener}))),
            reply(M, 200, [], Body);
        _ ->
            reply(M, 405, [{allow, "GET, HEAD"}], <<"method not allowed: GET /metrics\n">>)
    end;
do(M = #mod{}) ->
    reply(M, 404, [], <<"not found: try /metrics\n">>).

%% httpd sends the body of a `response' whatever the method: a HEAD's
%% answer has the headers of the GET only (a body after them is taken by
%% the client for the start of the next response on the connection).
reply(#mod{method = Method}, Code, Extra, Body) ->
    Head = [{code, Code}, {content_type, ?CONTENT_TYPE},
            {content_length, integer_to_list(byte_size(Body))} | Extra],
    Sent = case Method of
               "HEAD" -> <<>>;
               _ -> Body
           end,
    {proceed, [{response, {response, Head, Sent}}]}.
