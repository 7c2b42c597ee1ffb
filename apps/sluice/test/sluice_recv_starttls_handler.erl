%% STARTTLS after sluice:recv/3, for sluice_recv_SUITE: a one-byte
%% command, whose 4-byte argument the handler reads with recv/3 (it tells
%% the test `{cmd, Pid}' first, so that the test sends the argument while
%% it waits): `S' upgrades to TLS (`{starttls, <<"GO">>, _}'), `R' echoes
%% the argument.
-module(sluice_recv_starttls_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_starttls/2, terminate/2]).

init(Conn, #{test := Test}) ->
    Test ! {init, self(), Conn},
    {ok, #{test => Test, conn => Conn}}.

handle_data(<<"S">>, S) ->
    {ok, <<"TLS!">>} = argument(S),
    {starttls, <<"GO">>, S};
handle_data(<<"R">>, S) ->
    {ok, Arg} = argument(S),
    {reply, Arg, S}.

handle_starttls(_Tls, S = #{test := Test}) ->
    Test ! {starttls, self()},
    {ok, S}.

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason},
    ok.

argument(#{test := Test, conn := Conn}) ->
    Test ! {cmd, self()},
    sluice:recv(Conn, 4, 5000).
