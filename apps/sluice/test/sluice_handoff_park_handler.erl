%% sluice_handoff_handler without handle_info/2, so that its listener may
%% park (sluice_handoff_SUITE: a parked connection woken by data hands
%% off).
-module(sluice_handoff_park_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).

init(Conn, Test) ->
    sluice_handoff_handler:init(Conn, Test).

handle_data(Data, S) ->
    sluice_handoff_handler:upgrade(Data, S).
