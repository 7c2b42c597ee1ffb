%% A handler for the lifecycle tests: echoes, crashes on request, and tells
%% the test process (option `test_pid') about init, drain and terminate.
%% `own_timer' starts a timer of its own named like the library's.
%% `on_drain': `close' (the default drain: finish and FIN) or
%% `{reply, Bin}' (say Bin and keep going until the deadline).
%% `hold_init': init/2 waits for the message `sluice_test_go' after
%% telling the test process.
-module(sluice_test_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_info/2, handle_drain/1, terminate/2]).

init(_Conn, Opts) when is_map(Opts) ->
    notify(Opts, {init, self()}),
    _ = maps:get(hold_init, Opts, false) andalso receive sluice_test_go -> true end,
    {ok, Opts}.

handle_data(<<"crash", _/binary>>, _State) ->
    error(crash_requested);
handle_data(<<"own_timer", _/binary>>, State) ->
    %% A timer of the handler's own, whose message is the library's
    %% result timer's but for the reference: it comes to handle_info/2.
    _ = erlang:start_timer(0, self(), sluice_timeout),
    {reply, <<"started\n">>, State};
handle_data(Data, State) ->
    {reply, Data, State}.

handle_info(Msg, State) ->
    notify(State, {info, self(), Msg}),
    {ok, State}.

handle_drain(State) ->
    notify(State, {drain, self()}),
    case maps:get(on_drain, State, close) of
        close -> {close, drained, State};
        {reply, Bin} -> {reply, Bin, State}
    end.

terminate(Reason, State) ->
    notify(State, {terminate, self(), Reason}).

notify(#{test_pid := Pid}, Msg) -> Pid ! {sluice_test_handler, Msg}, ok;
notify(_, _) -> ok.
