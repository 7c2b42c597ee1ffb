%% The ack protocol with two faults on request, for the abuse suite: a
%% chunk starting `crash!!!' makes the handler raise, one starting
%% `hang!!!!' makes it block for ever (a handler stuck in a call).
-module(sluice_fault_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).

init(Conn, Opts) ->
    sluice_proto_ack:init(Conn, Opts).

handle_data(<<"crash!!!", _/binary>>, _State) ->
    error(crash_requested);
handle_data(<<"hang!!!!", _/binary>>, State) ->
    receive never -> {ok, State} end;
handle_data(Data, State) ->
    sluice_proto_ack:handle_data(Data, State).
