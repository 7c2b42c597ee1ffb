%% @doc sluice_frame's framer for a user's split function (see sluice_frame
%% for the contract). Kept between chunks: the pieces of the incomplete
%% frame and the size the function said it needs before it is worth
%% calling again (`{split, Pieces, Size, Need}', Pieces newest first).
%%
%% When a chunk brings enough, only as much of it as the frame needs is
%% joined to the kept pieces (not the whole chunk, whose other frames are
%% then cut from the chunk itself). When the function cannot tell what it
%% needs (`more'), the part of the chunk joined grows by doubling, so that
%% finding the frame's end costs a multiple of its size, not of the
%% chunk's.
%% @private
-module(sluice_frame_split).

-export([params/2, decode/3, pending/1, kept/2, skip/3]).

-export_type([params/0]).

-type params() :: {sluice_frame:split_fun(), non_neg_integer()}.
-type partial() :: none | {split, [binary(), ...], pos_integer(), pos_integer()}.

%% @doc The framer's parameters.
-spec params(sluice_frame:split_fun(), non_neg_integer()) -> params().
params(Fun, Max) ->
    {Fun, Max}.

%% @doc Frames completed by `Chunk' (see sluice_frame:decode/2).
-spec decode(binary(), params(), partial()) ->
          {ok, [term()], partial()} | {error, sluice_frame:reason(), [term()]}.
decode(Chunk, P, none) ->
    run(Chunk, P, []);
decode(Chunk, P, {split, Pieces, Size, Need}) when Size + byte_size(Chunk) < Need ->
    pend(Chunk, Pieces, Size + byte_size(Chunk), Need, P, []);
decode(Chunk, P, {split, Pieces, Size, Need}) ->
    try_join(Chunk, Need - Size, Pieces, Size, P).

%% The frames at the start of Buf, one call of Fun each. A frame's Rest
%% must be a binary shorter than what Fun was given (a guard, as cheap as
%% the size the loop needs anyway); that it is Buf's own suffix is not
%% checked, which would compare the rest of the chunk at every frame.
run(<<>>, _P, Acc) ->
    {ok, lists:reverse(Acc), none};
run(Buf, P = {Fun, Max}, Acc) ->
    Size = byte_size(Buf),
    case call(Fun, Buf) of
        {ok, Frame, Rest} when is_binary(Rest), byte_size(Rest) < Size ->
            case Size - byte_size(Rest) of
                Used when Used > Max ->
                    {error, {frame_too_large, Used, Max}, lists:reverse(Acc)};
                _ ->
                    run(Rest, P, [Frame | Acc])
            end;
        {error, Reason} ->
            {error, Reason, lists:reverse(Acc)};
        More ->
            case need(More, Size) of
                error -> {error, {bad_split_result, Fun, More}, lists:reverse(Acc)};
                {_, Need} -> pend(Buf, [], Size, Need, P, Acc)
            end
    end.

%% Fun's answer. What it raises is an error like the ones it returns,
%% `{split_raised, Class, Reason, Stacktrace}', so that the frames it cut
%% before in the same chunk are not lost with it: their replies go out
%% before the connection crashes (sluice_conn_handler), as they would
%% have if the bad bytes had come in a later read.
call(Fun, Buf) ->
    try Fun(Buf)
    catch Class:Reason:Stack -> {error, {split_raised, Class, Reason, Stack}}
    end.

%% What a `more' answer asks for: the total the function named, or (when
%% it cannot tell, or names no more than it was given) one byte more.
need(more, Size) -> {unknown, Size + 1};
need({more, undefined}, Size) -> {unknown, Size + 1};
need({more, N}, Size) when is_integer(N), N > Size -> {known, N};
need({more, N}, Size) when is_integer(N) -> {unknown, Size + 1};
need(_, _) -> error.

pend(_Newest, _Older, _Size, Need, {_, Max}, Acc) when Need > Max ->
    {error, {frame_too_large, Need, Max}, lists:reverse(Acc)};
pend(Newest, Older, Size, Need, _P, Acc) ->
    {ok, lists:reverse(Acc), {split, sluice_frame:push(Newest, Older), Size, Need}}.

%% Join the kept pieces and the first Take bytes of Chunk, and ask Fun.
try_join(Chunk, Take, Pieces, Size, P = {Fun, Max}) ->
    ChunkSize = byte_size(Chunk),
    <<Head:Take/binary, _/binary>> = Chunk,
    Joined = iolist_to_binary(lists:reverse(Pieces, [Head])),
    JoinedSize = Size + Take,
    case call(Fun, Joined) of
        {ok, Frame, Rest} when is_binary(Rest), byte_size(Rest) < JoinedSize ->
            case JoinedSize - byte_size(Rest) of
                Used when Used > Max ->
                    {error, {frame_too_large, Used, Max}, []};
                Used when Used >= Size ->
                    %% What follows the frame is the rest of the chunk.
                    From = Used - Size,
                    <<_:From/binary, After/binary>> = Chunk,
                    run(After, P, [Frame]);
                _ ->
                    %% The frame ended within the kept pieces (the function
                    %% asked for more than it needed).
                    <<_:Take/binary, After/binary>> = Chunk,
                    run(<<Rest/binary, After/binary>>, P, [Frame])
            end;
        {error, Reason} ->
            {error, Reason, []};
        More ->
            case need(More, JoinedSize) of
                error ->
                    {error, {bad_split_result, Fun, More}, []};
                {_, Need} when Need > Size + ChunkSize ->
                    pend(Chunk, Pieces, Size + ChunkSize, Need, P, []);
                {known, Need} ->
                    try_join(Chunk, Need - Size, Pieces, Size, P);
                {unknown, _} ->
                    %% Twice as much as was joined, or the whole chunk.
                    try_join(Chunk, min(ChunkSize, Size + 2 * Take), Pieces, Size, P)
            end
    end.

%% @doc The bytes kept: a frame begun.
-spec kept(partial(), params()) -> iodata().
kept(none, _P) -> [];
kept({split, Pieces, _Size, _Need}, _P) -> lists:reverse(Pieces).

%% @doc What follows `Frames' in `Buffer', which starts with the first of
%% them: the function's frames carry no size, so it is called again, once
%% per frame, and its last `Rest' is the answer (it said so the first
%% time, on the same bytes).
-spec skip([term()], binary(), params()) -> binary().
skip([], Buffer, _P) ->
    Buffer;
skip([_ | Frames], Buffer, P = {Fun, _Max}) ->
    {ok, _, Rest} = Fun(Buffer),
    skip(Frames, Rest, P).

%% @doc Bytes kept.
-spec pending(partial()) -> non_neg_integer().
pending(none) -> 0;
pending({split, _, Size, _}) -> Size.
