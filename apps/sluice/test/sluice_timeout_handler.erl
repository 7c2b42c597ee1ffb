%% A handler that asks for a timeout in init/2 and has no handle_timeout/1:
%% the connection closes when the timeout passes (sluice_handler_api_SUITE).
-module(sluice_timeout_handler).
-behaviour(sluice_handler).
-export([init/2, handle_data/2]).

init(_Conn, Ms) -> {ok, no_state, Ms}.
handle_data(Data, S) -> {reply, Data, S}.
