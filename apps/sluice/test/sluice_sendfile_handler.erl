%% A handler for sluice_sendfile_SUITE: one request a line (`framing =>
%% line'), answered with a head, a file and a trailer in one reply:
%%   "get Path Offset Length"  -> ["<<Path Offset Length\n", {sendfile,
%%                                 Path, Offset, Length}, ">>\n"]
%%   "fd Path Offset Length"   -> the same from a raw file the handler
%%                                opened, kept open in its state
%%   "closed Path Offset Length" -> the same from a raw file the handler
%%                                opened and closed (its mistake)
%%   "bye Path"                -> {reply_close, [{sendfile, Path, 0, 0}],
%%                                asked, S}
%%   "bad"                     -> a piece with a negative offset
%%   "later Path"              -> the reply of "get Path 0 0" from
%%                                handle_timeout/1, asked by {ok, S, 0}
%%   "starttls"                -> {starttls, "go\n", S}
%% Reports `{terminate, Pid, Reason}' and `{handle_error, Pid, Reason}' to
%% the test process (`Opts' of init/2: `#{test => Pid}'). Without
%% handle_info/2 or handle_call/3: its connections can park.
-module(sluice_sendfile_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_timeout/1, handle_error/2, terminate/2]).

init(_Conn, #{test := Test}) ->
    {ok, #{test => Test, fds => []}}.

handle_data(<<"get ", Args/binary>>, S) ->
    {Path, Offset, Length} = args(Args),
    {reply, reply(Args, {sendfile, Path, Offset, Length}), S};
handle_data(<<"fd ", Args/binary>>, S = #{fds := Fds}) ->
    {Path, Offset, Length} = args(Args),
    {ok, Fd} = file:open(Path, [read, raw, binary]),
    {reply, reply(Args, {sendfile, Fd, Offset, Length}), S#{fds := [Fd | Fds]}};
handle_data(<<"closed ", Args/binary>>, S) ->
    {Path, Offset, Length} = args(Args),
    {ok, Fd} = file:open(Path, [read, raw, binary]),
    ok = file:close(Fd),
    {reply, reply(Args, {sendfile, Fd, Offset, Length}), S};
handle_data(<<"bye ", Path/binary>>, S) ->
    {reply_close, [{sendfile, Path, 0, 0}], asked, S};
handle_data(<<"bad">>, S) ->
    {reply, [<<"x">>, {sendfile, <<"f">>, -1, 0}], S};
handle_data(<<"starttls">>, S) ->
    {starttls, <<"go\n">>, S};
handle_data(<<"later ", Path/binary>>, S) ->
    {ok, S#{later => Path}, 0}.

handle_timeout(S = #{later := Path}) ->
    Args = <<Path/binary, " 0 0">>,
    {reply, reply(Args, {sendfile, Path, 0, 0}), maps:remove(later, S)}.

handle_error(Reason, #{test := Test}) ->
    Test ! {handle_error, self(), Reason}.

terminate(Reason, #{test := Test, fds := Fds}) ->
    _ = [file:close(Fd) || Fd <- Fds],
    Test ! {terminate, self(), Reason}.

args(Args) ->
    [Path, Offset, Length] = binary:split(Args, <<" ">>, [global]),
    {Path, binary_to_integer(Offset), binary_to_integer(Length)}.

reply(Args, Piece) ->
    [<<"<<">>, Args, $\n, Piece, <<">>\n">>].
