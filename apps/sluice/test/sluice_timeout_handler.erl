%% A handler that asks for a timeout in init/2 and has no handle_timeout/1:
%% the connection closes when the timeout passes (sluice_handler_api_SUITE).
%% Opts: the timeout in ms, or `{Ms, TestPid}' to have terminate/2's reason
%% sent to TestPid as `{terminate, Pid, Reason}'.
-module(sluice_timeout_handler).
-behaviour(sluice_handler).
-export([init/2, handle_data/2, terminate/2]).

init(_Conn, {Ms, Test}) -> {ok, {test, Test}, Ms};
init(_Conn, Ms) -> {ok, no_state, Ms}.
handle_data(Data, S) -> {reply, Data, S}.

terminate(Reason, {test, Test}) -> Test ! {terminate, self(), Reason}, ok;
terminate(_Reason, _S) -> ok.
