%% A handler for the TLS and PROXY suites: tells the test process
%% (option `test_pid') what its init/2 was given (sluice:conn()), and the
%% logger metadata of its process, then echoes every byte; or, with
%% option `then => {Module, Opts}', hands the connection to that handler
%% (an ack handler, say) once it has reported. With `send_in_init =>
%% Data', init/2 also sends Data with sluice:send/2 (the data goes out
%% after init/2, before any reply to the client's bytes).
-module(sluice_conn_report_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).

init(Conn, Opts = #{test_pid := Pid}) ->
    Meta = case logger:get_process_metadata() of
               undefined -> #{};
               M -> M
           end,
    Pid ! {sluice_conn, self(), Conn, Meta},
    ok = case Opts of
             #{send_in_init := Data} -> sluice:send(Conn, Data);
             _ -> ok
         end,
    case Opts of
        #{then := {Mod, ModOpts}} -> wrap(Mod, Mod:init(Conn, ModOpts));
        _ -> {ok, Opts}
    end.

handle_data(Data, {then, Mod, State}) ->
    wrap(Mod, Mod:handle_data(Data, State));
handle_data(Data, State) ->
    {reply, Data, State}.

%% The inner handler's result, its state kept with its module.
wrap(Mod, {ok, S}) -> {ok, {then, Mod, S}};
wrap(Mod, {ok, S, T}) -> {ok, {then, Mod, S}, T};
wrap(Mod, {reply, D, S}) -> {reply, D, {then, Mod, S}};
wrap(Mod, {reply, D, S, T}) -> {reply, D, {then, Mod, S}, T};
wrap(Mod, {close, R, S}) -> {close, R, {then, Mod, S}};
wrap(Mod, {reply_close, D, R, S}) -> {reply_close, D, R, {then, Mod, S}};
wrap(_Mod, {close, R}) -> {close, R}.
