%% An echo handler that parks (no handle_info/2, no handle_call/3) and
%% carries on through a drain (handle_drain/1 returns `{ok, S}'), for
%% sluice_park_SUITE. It reports init/2, handle_drain/1 and terminate/2 to
%% the test process (`Opts' of init/2: `#{test => Pid}', and
%% `trap_exit => true' to trap exits, as handler.md advises for
%% terminate/2 at a shutdown).
-module(sluice_park_drain_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_drain/1, terminate/2]).

init(_Conn, Opts = #{test := Test}) ->
    _ = maps:get(trap_exit, Opts, false) andalso process_flag(trap_exit, true),
    Test ! {init, self()},
    {ok, Opts}.

handle_data(Data, S) ->
    {reply, Data, S}.

handle_drain(S = #{test := Test}) ->
    Test ! {drain, self()},
    {ok, S}.

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason}.
