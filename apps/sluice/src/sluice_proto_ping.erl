%% @doc The ping protocol of seed 002 (connscale): each line `Ping\n' is
%% answered `Pong\n'. Any other line, or more than a line's worth of bytes
%% without a newline, is a protocol error.
-module(sluice_proto_ping).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).

-define(MAX_LINE, 64).

%% @doc The state is the incomplete line read so far; the options are
%% ignored.
-spec init(sluice:conn(), term()) -> {ok, binary()}.
init(_Conn, _Opts) ->
    {ok, <<>>}.

%% @doc One `Pong\n' for each `Ping\n' the chunk completes, all in one
%% reply; the Pongs owed before a bad line go out before the close.
-spec handle_data(binary(), binary()) -> sluice_handler:result(binary()).
handle_data(Data, <<>>) ->
    lines(Data, 0);
handle_data(Data, Tail) ->
    lines(<<Tail/binary, Data/binary>>, 0).

lines(<<"Ping\n", R/binary>>, N) ->
    lines(R, N + 1);
lines(Buf, N) ->
    case binary:match(Buf, <<"\n">>) of
        nomatch when byte_size(Buf) =< ?MAX_LINE, N =:= 0 ->
            {ok, binary:copy(Buf)};
        nomatch when byte_size(Buf) =< ?MAX_LINE ->
            {reply, pongs(N), binary:copy(Buf)};
        nomatch ->
            close(N, line_too_long, Buf);
        _ ->
            close(N, not_ping, Buf)
    end.

%% The Pongs owed for the lines before the bad one go out first.
close(0, Why, Buf) -> {close, {protocol_error, Why}, Buf};
close(N, Why, Buf) -> {reply_close, pongs(N), {protocol_error, Why}, Buf}.

pongs(1) -> <<"Pong\n">>;
pongs(N) -> binary:copy(<<"Pong\n">>, N).
