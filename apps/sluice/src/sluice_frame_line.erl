%% @doc sluice_frame's line framer (see sluice_frame for the contract).
%% Kept between chunks: the pieces of the unterminated line
%% (`{line, Pieces, Size}', newest first); a new chunk is searched for the
%% delimiter, the pieces never again, and they are joined once.
%%
%% A chunk's lines are cut by one binary:split/3 call. Its last element is
%% the unterminated rest, which would have to be taken off the list (a
%% second pass over it); instead the chunk's last delimiter is found first
%% by looking back from its end (a few bytes, usually), and only the part
%% before it is split. A chunk whose end has no delimiter within ?LOOKBACK
%% bytes takes the general way.
%% @private
-module(sluice_frame_line).

-export([params/2, decode/3, encode/2, pending/1, kept/2, skip/3]).

-export_type([params/0]).

-define(LOOKBACK, 256).

-type params() :: {lf | crlf, binary:cp(), non_neg_integer()}.
-type partial() :: none | {line, [binary(), ...], pos_integer()}.

%% @doc The framer's parameters.
-spec params(lf | crlf, non_neg_integer()) -> params().
params(Delim, Max) ->
    {Delim, binary:compile_pattern(delimiter(Delim)), Max}.

delimiter(lf) -> <<"\n">>;
delimiter(crlf) -> <<"\r\n">>.

%% @doc Lines completed by `Chunk' (see sluice_frame:decode/2).
-spec decode(binary(), params(), partial()) ->
          {ok, [binary()], partial()} | {error, sluice_frame:reason(), [binary()]}.
decode(Chunk, P, none) ->
    chunk(Chunk, P, []);
decode(<<"\n", Rest/binary>>, P = {crlf, _, Max}, {line, Pieces = [Last | _], Size})
  when binary_part(Last, byte_size(Last) - 1, 1) =:= <<"\r">> ->
    %% The kept part ended with the `\r' of a `\r\n'.
    Line = join(Pieces, <<>>),
    complete(binary:part(Line, 0, Size - 1), Rest, P, Max);
decode(Chunk, P = {Delim, Pattern, Max}, {line, Pieces, Size}) ->
    case find(Chunk, Delim, Pattern) of
        {At, Len} ->
            <<End:At/binary, _:Len/binary, Rest/binary>> = Chunk,
            complete(join(Pieces, End), Rest, P, Max);
        nomatch ->
            unterminated([Chunk | Pieces], Size + byte_size(Chunk), Chunk, P, [])
    end.

complete(Line, _Rest, _P, Max) when byte_size(Line) > Max ->
    {error, {line_too_long, byte_size(Line), Max}, []};
complete(Line, Rest, P, _Max) ->
    chunk(Rest, P, [Line]).

join(Pieces, Last) ->
    iolist_to_binary(lists:reverse(Pieces, [Last])).

%% The lines of a chunk (after the line completed from kept pieces, if
%% any: Before).
chunk(<<>>, _P, Before) ->
    {ok, Before, none};
chunk(Chunk, P = {Delim, _, _}, Before) ->
    case last_delimiter(Chunk, Delim) of
        {Whole, Tail} -> lines(Whole, Tail, P, Before);
        far -> general(Chunk, P, Before)
    end.

%% The chunk up to its last delimiter and what follows it, when that
%% delimiter is among the last ?LOOKBACK bytes; `far' otherwise.
last_delimiter(Chunk, Delim) ->
    Size = byte_size(Chunk),
    last_delimiter(Chunk, Delim, Size - 1, max(0, Size - ?LOOKBACK)).

last_delimiter(Chunk, Delim, Pos, Stop) when Pos >= Stop ->
    case binary:at(Chunk, Pos) of
        $\n when Delim =:= lf ->
            <<Whole:Pos/binary, _, Tail/binary>> = Chunk,
            {Whole, Tail};
        $\n when Pos > 0 ->
            case binary:at(Chunk, Pos - 1) of
                $\r ->
                    WholeSize = Pos - 1,
                    <<Whole:WholeSize/binary, _:2/binary, Tail/binary>> = Chunk,
                    {Whole, Tail};
                _ ->
                    last_delimiter(Chunk, Delim, Pos - 1, Stop)
            end;
        _ ->
            last_delimiter(Chunk, Delim, Pos - 1, Stop)
    end;
last_delimiter(_Chunk, _Delim, _Pos, _Stop) ->
    far.

%% Whole holds only whole lines (its last delimiter cut off with Tail).
lines(Whole, Tail, P = {Delim, Pattern, Max}, Before) ->
    Lines = split(Whole, Delim, Pattern),
    Frames = Before ++ Lines,
    case byte_size(Whole) > Max andalso too_long(Lines, Max, 0) of
        {N, Size} -> {error, {line_too_long, Size, Max}, Before ++ lists:sublist(Lines, N)};
        _ -> rest(Tail, P, Frames)
    end.

%% The index (0-based) and size of the first line over Max, or false.
too_long([], _Max, _N) -> false;
too_long([L | _], Max, N) when byte_size(L) > Max -> {N, byte_size(L)};
too_long([_ | Ls], Max, N) -> too_long(Ls, Max, N + 1).

%% A chunk without a delimiter near its end: split it all, the last part
%% is the unterminated rest.
general(Chunk, P = {_, Pattern, Max}, Before) ->
    case binary:split(Chunk, Pattern, [global]) of
        [Chunk] ->
            unterminated([Chunk], byte_size(Chunk), Chunk, P, Before);
        Parts ->
            general(Parts, P, Max, lists:reverse(Before))
    end.

general([Tail], P, _Max, Acc) ->
    rest(Tail, P, lists:reverse(Acc));
general([L | _], _P, Max, Acc) when byte_size(L) > Max ->
    {error, {line_too_long, byte_size(L), Max}, lists:reverse(Acc)};
general([L | Ls], P, Max, Acc) ->
    general(Ls, P, Max, [L | Acc]).

%% binary:match/2 and binary:split/3 are slow on a subject of fewer than 8
%% bytes that holds no match (OTP 25; bench/frame/README.md), as the one
%% line of a lock-step client's chunk is once its delimiter is cut off:
%% parts that short are searched by these loops instead.
-define(SHORT, 7).

find(Bin, Delim, _Pattern) when byte_size(Bin) =< ?SHORT ->
    case scan(Bin, Delim, 0) of
        none -> nomatch;
        At when Delim =:= lf -> {At, 1};
        At -> {At, 2}
    end;
find(Bin, _Delim, Pattern) ->
    binary:match(Bin, Pattern).

split(Bin, Delim, _Pattern) when byte_size(Bin) =< ?SHORT ->
    split_short(Bin, Delim, []);
split(Bin, _Delim, Pattern) ->
    binary:split(Bin, Pattern, [global]).

split_short(Bin, Delim, Acc) ->
    case scan(Bin, Delim, 0) of
        none ->
            lists:reverse(Acc, [Bin]);
        At ->
            Skip = case Delim of lf -> 1; crlf -> 2 end,
            <<Line:At/binary, _:Skip/binary, Rest/binary>> = Bin,
            split_short(Rest, Delim, [Line | Acc])
    end.

%% The offset of the first delimiter, or none.
scan(<<"\n", _/binary>>, lf, N) -> N;
scan(<<"\r\n", _/binary>>, crlf, N) -> N;
scan(<<_, Rest/binary>>, Delim, N) -> scan(Rest, Delim, N + 1);
scan(<<>>, _Delim, _N) -> none.

rest(<<>>, _P, Frames) -> {ok, Frames, none};
rest(Tail, P, Frames) -> unterminated([Tail], byte_size(Tail), Tail, P, Frames).

%% Kept bytes of a line, unless they already make it too long. With
%% `crlf', a last `\r' may be the start of the delimiter.
unterminated(Pieces, Size, Newest, {Delim, _, Max}, Frames) ->
    Seen = case Delim of
               crlf when binary_part(Newest, byte_size(Newest) - 1, 1) =:= <<"\r">> -> Size - 1;
               _ -> Size
           end,
    case Seen > Max of
        true ->
            {error, {line_too_long, Seen, Max}, Frames};
        false ->
            [_ | Older] = Pieces,
            {ok, Frames, {line, sluice_frame:push(Newest, Older), Size}}
    end.

%% @doc `Line' with its delimiter (see sluice_frame:encode/2).
-spec encode(iodata(), params()) -> iodata().
encode(Line, {Delim, Pattern, Max}) ->
    Bin = iolist_to_binary(Line),
    if
        byte_size(Bin) > Max -> error({line_too_long, byte_size(Bin), Max});
        true -> ok
    end,
    case binary:match(Bin, Pattern) of
        nomatch -> [Bin, delimiter(Delim)];
        _ -> error(delimiter_in_line)
    end.

%% @doc The bytes kept, as the client sent them: a line begun.
-spec kept(partial(), params()) -> iodata().
kept(none, _P) -> [];
kept({line, Pieces, _Size}, _P) -> lists:reverse(Pieces).

%% @doc What follows `Lines' in `Buffer', which starts with the first of
%% them: each took its bytes and its delimiter.
-spec skip([binary()], binary(), params()) -> binary().
skip(Lines, Buffer, {Delim, _Pattern, _Max}) ->
    D = byte_size(delimiter(Delim)),
    Used = lists:sum([byte_size(L) + D || L <- Lines]),
    binary:part(Buffer, Used, byte_size(Buffer) - Used).

%% @doc Bytes kept.
-spec pending(partial()) -> non_neg_integer().
pending(none) -> 0;
pending({line, _, Size}) -> Size.
