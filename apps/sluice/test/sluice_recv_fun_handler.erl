%% A handler whose callbacks are funs given in its options, for
%% sluice_recv_edges_SUITE: each case says what its callbacks do (which
%% call sluice:recv/3 where the case needs it). Options: `test' (told
%% `{init, Pid, Conn}' and `{terminate, Pid, Reason}'), and any of
%% `init', `data', `info', `call', `timeout', `drain', `close': funs of the
%% callback's arguments and the state (a map with `conn', `test', `opts').
-module(sluice_recv_fun_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_info/2, handle_call/3, handle_timeout/1,
         handle_drain/1, handle_close/1, terminate/2]).

init(Conn, Opts = #{test := Test}) ->
    Test ! {init, self(), Conn},
    S = #{conn => Conn, test => Test, opts => Opts},
    case Opts of
        #{init := F} -> F(S);
        _ -> {ok, S}
    end.

handle_data(Data, S) -> call(data, [Data, S], {ok, S}).
handle_info(Msg, S) -> call(info, [Msg, S], {ok, S}).
handle_call(Req, From, S) -> call(call, [Req, From, S], {reply, unexpected, S}).
handle_timeout(S) -> call(timeout, [S], {close, timeout, S}).
handle_drain(S) -> call(drain, [S], {close, drained, S}).
handle_close(S) -> call(close, [S], {ok, S}).

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason},
    ok.

call(Name, Args, Default) ->
    #{opts := Opts} = lists:last(Args),
    case Opts of
        #{Name := F} -> apply(F, Args);
        _ -> Default
    end.
