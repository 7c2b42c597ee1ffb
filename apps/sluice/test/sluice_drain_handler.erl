%% A handler for sluice_handler_api_SUITE that carries on through a drain
%% (handle_drain/1 returns `{ok, S}', or `{ok, S, Ms}' with
%% `drain_timeout => Ms' in its options) and reports every callback to the
%% test process (`Opts' of init/2: `#{test => Pid, ...}'). It exports
%% handle_info/2, so that a message the library should have taken (the
%% drain's deadline) would show. Its data:
%%   "timer N" -> starts a timer of its own, erlang:start_timer(N, self(),
%%                sluice_drain) (the message the drain's deadline comes
%%                in), and replies "set\n"
%% Anything else is echoed back.
-module(sluice_drain_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_info/2, handle_timeout/1, handle_drain/1,
         terminate/2]).

init(_Conn, Opts = #{test := Test}) ->
    Test ! {init, self()},
    {ok, Opts}.

handle_data(<<"timer ", N/binary>>, S) ->
    _ = erlang:start_timer(binary_to_integer(N), self(), sluice_drain),
    {reply, <<"set\n">>, S};
handle_data(Data, S) ->
    {reply, Data, S}.

handle_info(Msg, S = #{test := Test}) ->
    Test ! {info, self(), Msg},
    {ok, S}.

handle_timeout(S = #{test := Test}) ->
    Test ! {timeout, self()},
    {ok, S}.

handle_drain(S = #{test := Test}) ->
    Test ! {drain, self()},
    case S of
        #{drain_timeout := Ms} -> {ok, S, Ms};
        _ -> {ok, S}
    end.

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason}.
