%% A handler that takes calls and has no handle_info/2 (sluice_park_SUITE,
%% sluice_handler_api_SUITE): `later' is answered from a later callback,
%% when the client sends "answer" (the client then gets "done"); it reports
%% init/2 and handle_call/3 to the test process (`Opts' of init/2:
%% `#{test => Pid}'). Other data is echoed back.
-module(sluice_call_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_call/3]).

init(_Conn, Opts = #{test := Test}) ->
    Test ! {init, self()},
    {ok, Opts}.

handle_data(<<"answer">>, S = #{from := From}) ->
    sluice:reply(From, answered),
    {reply, <<"done">>, maps:remove(from, S)};
handle_data(Data, S) ->
    {reply, Data, S}.

handle_call(later, From, S = #{test := Test}) ->
    Test ! {call, self(), later},
    {ok, S#{from => From}}.
