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

%% @doc httpd callback.
-spec do(#mod{}) -> {proceed, list()}.
do(#mod{method = "GET", request_uri = "/metrics" ++ Rest}) when Rest =:= ""; hd(Rest) =:= $? ->
    Body = unicode:characters_to_binary(
             sluice_prometheus:scrape(persistent_term:get({?MODULE, listener}))),
    reply(200, Body);
do(#mod{}) ->
    reply(404, <<"not found: try /metrics\n">>).

reply(Code, Body) ->
    Head = [{code, Code}, {content_type, ?CONTENT_TYPE},
            {content_length, integer_to_list(byte_size(Body))}],
    {proceed, [{response, {response, Head, Body}}]}.
