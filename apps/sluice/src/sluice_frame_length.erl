%% @doc sluice_frame's length-prefixed framer (see sluice_frame for the
%% contract). Kept between chunks: fewer bytes than a header
%% (`{header, Bin}'), or, once the header is read, how many body bytes are
%% still to come and the body's pieces so far (`{body, Left, Pieces,
%% Size}', Pieces newest first, Size their bytes), joined once when the last one arrives.
%% @private
-module(sluice_frame_length).

-export([params/4, decode/3, encode/2, pending/1, kept/2, skip/3]).

-export_type([params/0]).

%% {HeaderBytes, Endian, Adj, Max}: Adj is what the length counts beyond
%% the body (the header's own size when it includes it).
-type params() :: {1 | 2 | 4, big | little, non_neg_integer(), non_neg_integer()}.
-type partial() :: none
                 | {header, binary()}
                 | {body, pos_integer(), [binary()], non_neg_integer()}.

%% @doc The framer's parameters; `max' is capped at what the header can
%% say.
-spec params(1 | 2 | 4, big | little, boolean(), non_neg_integer()) -> params().
params(Bytes, Endian, Incl, Max) ->
    Adj = case Incl of true -> Bytes; false -> 0 end,
    Cap = (1 bsl (8 * Bytes)) - 1 - Adj,
    {Bytes, Endian, Adj, min(Max, Cap)}.

%% @doc Frames completed by `Chunk' (see sluice_frame:decode/2).
-spec decode(binary(), params(), partial()) ->
          {ok, [binary()], partial()} | {error, sluice_frame:reason(), [binary()]}.
decode(Chunk, P, none) ->
    walk(Chunk, P, []);
decode(Chunk, P = {Bytes, _, _, _}, {header, Part}) ->
    Need = Bytes - byte_size(Part),
    case Chunk of
        <<More:Need/binary, Rest/binary>> ->
            header(<<Part/binary, More/binary>>, Rest, P);
        _ ->
            {ok, [], {header, <<Part/binary, Chunk/binary>>}}
    end;
decode(Chunk, P, {body, Left, Pieces, Size}) ->
    body(Chunk, Left, Pieces, Size, P).

%% A whole header from the kept bytes and the chunk's first ones.
header(Header, Rest, P = {Bytes, Endian, Adj, Max}) ->
    case body_size(len(Header, Bytes * 8, Endian), Adj, Max) of
        {ok, Size} -> body(Rest, Size, [], 0, P);
        {error, Reason} -> {error, Reason, []}
    end.

body(Chunk, Left, Pieces, _Size, P) when byte_size(Chunk) >= Left ->
    <<Last:Left/binary, Rest/binary>> = Chunk,
    Frame = case Pieces of
                [] -> Last;
                _ -> iolist_to_binary(lists:reverse(Pieces, [Last]))
            end,
    walk(Rest, P, [Frame]);
body(Chunk, Left, Pieces, Size, _P) ->
    {ok, [], {body, Left - byte_size(Chunk), sluice_frame:push(Chunk, Pieces),
              Size + byte_size(Chunk)}}.

%% Every whole frame of the chunk, then what to keep of the rest. One
%% loop per header size and byte order: the size and the endianness of a
%% binary match must be known when it is compiled for the match to be
%% fast. A length that does not fit (too large, or smaller than the header
%% it includes) ends the loop; tail/3 tells which.
walk(Buf, P = {4, big, Adj, Max}, Acc) -> tail(b32(Buf, Adj, Max, Acc), P);
walk(Buf, P = {2, big, Adj, Max}, Acc) -> tail(b16(Buf, Adj, Max, Acc), P);
walk(Buf, P = {1, _, Adj, Max}, Acc) -> tail(b8(Buf, Adj, Max, Acc), P);
walk(Buf, P = {4, little, Adj, Max}, Acc) -> tail(l32(Buf, Adj, Max, Acc), P);
walk(Buf, P = {2, little, Adj, Max}, Acc) -> tail(l16(Buf, Adj, Max, Acc), P).

b32(Buf, Adj, Max, Acc) ->
    case Buf of
        <<L:32, F:(L - Adj)/binary, R/binary>> when L - Adj =< Max -> b32(R, Adj, Max, [F | Acc]);
        _ -> {Acc, Buf}
    end.

b16(Buf, Adj, Max, Acc) ->
    case Buf of
        <<L:16, F:(L - Adj)/binary, R/binary>> when L - Adj =< Max -> b16(R, Adj, Max, [F | Acc]);
        _ -> {Acc, Buf}
    end.

b8(Buf, Adj, Max, Acc) ->
    case Buf of
        <<L:8, F:(L - Adj)/binary, R/binary>> when L - Adj =< Max -> b8(R, Adj, Max, [F | Acc]);
        _ -> {Acc, Buf}
    end.

l32(Buf, Adj, Max, Acc) ->
    case Buf of
        <<L:32/little, F:(L - Adj)/binary, R/binary>> when L - Adj =< Max ->
            l32(R, Adj, Max, [F | Acc]);
        _ -> {Acc, Buf}
    end.

l16(Buf, Adj, Max, Acc) ->
    case Buf of
        <<L:16/little, F:(L - Adj)/binary, R/binary>> when L - Adj =< Max ->
            l16(R, Adj, Max, [F | Acc]);
        _ -> {Acc, Buf}
    end.

%% What follows the whole frames: nothing, part of a header, a bad header,
%% or a header and part of its body.
tail({Acc, <<>>}, _P) ->
    {ok, lists:reverse(Acc), none};
tail({Acc, Buf}, {Bytes, _, _, _}) when byte_size(Buf) < Bytes ->
    {ok, lists:reverse(Acc), {header, binary:copy(Buf)}};
tail({Acc, Buf}, {Bytes, Endian, Adj, Max}) ->
    Bits = Bytes * 8,
    <<_:Bits, Body/binary>> = Buf,
    case body_size(len(Buf, Bits, Endian), Adj, Max) of
        {ok, Size} ->
            Kept = case Body of
                       <<>> -> [];
                       _ -> [sluice_frame:keep(Body)]
                   end,
            {ok, lists:reverse(Acc), {body, Size - byte_size(Body), Kept, byte_size(Body)}};
        {error, Reason} ->
            {error, Reason, lists:reverse(Acc)}
    end.

len(Buf, Bits, big) -> <<L:Bits/big, _/binary>> = Buf, L;
len(Buf, Bits, little) -> <<L:Bits/little, _/binary>> = Buf, L.

body_size(L, Adj, _Max) when L < Adj -> {error, {bad_length, L}};
body_size(L, Adj, Max) when L - Adj > Max -> {error, {frame_too_large, L - Adj, Max}};
body_size(L, Adj, _Max) -> {ok, L - Adj}.

%% @doc `Frame' with its header (see sluice_frame:encode/2).
-spec encode(iodata(), params()) -> iodata().
encode(Frame, {Bytes, Endian, Adj, Max}) ->
    case iolist_size(Frame) of
        Size when Size > Max ->
            error({frame_too_large, Size, Max});
        Size ->
            Bits = Bytes * 8,
            L = Size + Adj,
            Header = case Endian of
                         big -> <<L:Bits/big>>;
                         little -> <<L:Bits/little>>
                     end,
            [Header, Frame]
    end.

%% @doc The bytes kept, as the client sent them: a header begun, or a
%% header (its length, made again) and the body's pieces so far.
-spec kept(partial(), params()) -> iodata().
kept(none, _P) -> [];
kept({header, Part}, _P) -> Part;
kept({body, Left, Pieces, Size}, {Bytes, Endian, Adj, _Max}) ->
    L = Left + Size + Adj,
    Bits = Bytes * 8,
    Header = case Endian of
                 big -> <<L:Bits/big>>;
                 little -> <<L:Bits/little>>
             end,
    [Header | lists:reverse(Pieces)].

%% @doc What follows `Frames' in `Buffer', which starts with the first of
%% them: each took its header and its body.
-spec skip([binary()], binary(), params()) -> binary().
skip(Frames, Buffer, {Bytes, _Endian, _Adj, _Max}) ->
    Used = lists:sum([Bytes + byte_size(F) || F <- Frames]),
    binary:part(Buffer, Used, byte_size(Buffer) - Used).

%% @doc Bytes kept.
-spec pending(partial()) -> non_neg_integer().
pending(none) -> 0;
pending({header, Part}) -> byte_size(Part);
pending({body, _, _, Size}) -> Size.
