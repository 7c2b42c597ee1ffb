%% @doc Echo: every byte back, as read (seed 000's flood target).
-module(sluice_proto_echo).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).

%% @doc No state; the options are ignored.
-spec init(sluice:conn(), term()) -> {ok, undefined}.
init(_Conn, _Opts) ->
    {ok, undefined}.

%% @doc The chunk back, as it came.
-spec handle_data(binary(), State) -> {reply, binary(), State}.
handle_data(Data, State) ->
    {reply, Data, State}.
