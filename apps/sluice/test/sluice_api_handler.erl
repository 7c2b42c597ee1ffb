%% A handler for sluice_handler_api_SUITE that exports every optional
%% callback and reports each call to the test process (`Opts' of init/2:
%% `#{test => Pid, ...}'). Lines of its small protocol (one per
%% handle_data/2 call; with `framing => line' one frame is one line):
%%   "echo X"      -> "X\n"
%%   "wait N"      -> {ok, S, N}: handle_timeout/1 after N ms of nothing
%%   "crash"       -> raises
%%   "bad"         -> returns a value that is not a result
%%   "close"       -> {close, asked, S}
%%   "bye X"       -> {reply_close, "X\n", asked, S}
%%   "badio"       -> {reply, foo, S} (a reply that is not iodata)
%%   "badlist"     -> {reply, [<<"a">>, 256], S} (a list that is not iodata)
%%   "sendclose X" -> sluice:send/2 of "X1\n" and "X2\n", then {close, asked, S}
%%   "sendbye X"   -> sluice:send/2 of "X1\n", then {reply_close, "X\n", asked, S}
%% Anything else is echoed back as it came (chunks, without framing).
%% Calls `{setopts, Opts}' and `{getopts, Names}' answer what
%% sluice:setopts/2 and getopts/2 return in the connection process;
%% `state' answers the handler's state.
%% Opts also take `init => close | crash' (init/2 fails, after reporting),
%% `init => {reply_close, Bye}' (init/2 sends Bye, then closes),
%% `init => {close_with_state, Reason}' (init/2 returns `{close, Reason, S}')
%% and `trap_exit => true' (init/2 sets it); `global => Name' registers
%% the connection under Name with global (init/2; the first connection
%% only: the others find it taken).
-module(sluice_api_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_info/2, handle_call/3, handle_timeout/1,
         handle_drain/1, handle_close/1, handle_error/2, terminate/2]).

init(Conn, Opts = #{test := Test}) ->
    _ = is_map_key(global, Opts) andalso global:register_name(maps:get(global, Opts), self()),
    Test ! {init, self(), Conn},
    %% for handle_error/2 and terminate/2 called with a state init/2 did
    %% not return (they must not be)
    put(sluice_api_test, Test),
    S = Opts#{conn => Conn},
    _ = maps:get(trap_exit, Opts, false) andalso process_flag(trap_exit, true),
    case Opts of
        #{init := close} -> {close, refused};
        #{init := crash} -> error(init_crash);
        #{greeting := G} -> {reply, G, S};
        #{init := {reply_close, Bye}} -> {reply_close, Bye, said_goodbye, S};
        #{init := {close_with_state, Reason}} -> {close, Reason, S};
        _ -> {ok, S}
    end.

handle_data(Data, S = #{test := Test}) ->
    Test ! {data, self(), Data},
    case Data of
        <<"echo ", X/binary>> -> {reply, [X, $\n], S};
        <<"wait ", N/binary>> -> {ok, S, binary_to_integer(N)};
        <<"crash">> -> error(asked_to_crash);
        <<"bad">> -> {what, S};
        <<"close">> -> {close, asked, S};
        <<"bye ", X/binary>> -> {reply_close, [X, $\n], asked, S};
        <<"badio">> -> {reply, foo, S};
        <<"badlist">> -> {reply, [<<"a">>, 256], S};
        <<"sendclose ", X/binary>> ->
            ok = sluice:send(maps:get(conn, S), [X, <<"1\n">>]),
            ok = sluice:send(maps:get(conn, S), [X, <<"2\n">>]),
            {close, asked, S};
        <<"sendbye ", X/binary>> ->
            ok = sluice:send(maps:get(conn, S), [X, <<"1\n">>]),
            {reply_close, [X, $\n], asked, S};
        _ -> {reply, Data, S}
    end.

handle_info(Msg, S = #{test := Test}) ->
    Test ! {info, self(), Msg},
    case Msg of
        {say, X} -> {reply, X, S};
        {send_to, Other, X} -> Test ! {sent, self(), sluice:send(Other, X)}, {ok, S};
        _ -> {ok, S}
    end.

handle_call(Req, From, S = #{test := Test}) ->
    Test ! {call, self(), Req},
    case Req of
        later -> {ok, S#{later => From}};
        {answer_later, Reply} ->
            sluice:reply(maps:get(later, S), Reply),
            sluice:reply(From, ok),
            {ok, S};
        {say, X} ->
            sluice:reply(From, said),
            {reply, X, S};
        {setopts, Opts} ->
            sluice:reply(From, sluice:setopts(maps:get(conn, S), Opts)),
            {ok, S};
        state ->
            sluice:reply(From, S),
            {ok, S};
        {getopts, Names} ->
            sluice:reply(From, sluice:getopts(maps:get(conn, S), Names)),
            {ok, S};
        _ ->
            sluice:reply(From, {echo, Req}),
            {ok, S}
    end.

handle_timeout(S = #{test := Test}) ->
    Test ! {timeout, self()},
    {reply, <<"timeout\n">>, S}.

handle_drain(S = #{test := Test}) ->
    Test ! {drain, self()},
    {close, drained, S}.

handle_close(#{test := Test}) ->
    Test ! {peer_closed, self()}.

handle_error(Reason, #{test := Test}) ->
    Test ! {error, self(), Reason};
handle_error(Reason, State) ->
    get(sluice_api_test) ! {error, self(), {Reason, with_state, State}}.

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason};
terminate(Reason, State) ->
    get(sluice_api_test) ! {terminate, self(), {Reason, with_state, State}}.
