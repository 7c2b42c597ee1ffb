%% @doc The sluice application: starts the top supervisor under which every
%% listener started with sluice:start_listener/2 lives.
%% @private
-module(sluice_app).
-behaviour(application).
-export([start/2, stop/1]).

-spec start(application:start_type(), term()) -> {ok, pid()} | {error, term()}.
start(_Type, _Args) ->
    sluice_sup:start_link().

-spec stop(term()) -> ok.
stop(_State) ->
    ok.
