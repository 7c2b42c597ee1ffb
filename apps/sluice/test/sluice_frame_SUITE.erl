%% sluice_frame's framers as PropEr properties: any list of frames, encoded
%% and cut into chunks at any places (random cuts, one byte a chunk, and
%% each single place in turn), decodes to the same frames, each delivered
%% with the chunk that completes it; a frame over the limit is refused on
%% the chunk that makes its size known, with the frames before it, however
%% the stream is cut; any bytes give a result, never an exception.
-module(sluice_frame_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% PropEr's macros, spelled out as in sluice_ack_SUITE (Debian's
%% erlang-proper ships no proper.hrl).
-define(FORALL(X, RawType, Prop), proper:forall(RawType, fun(X) -> Prop end)).
-define(LET(X, RawType, Gen), proper_types:bind(RawType, fun(X) -> Gen end, false)).
-define(SUCHTHAT(X, RawType, Cond), proper_types:add_constraint(RawType, fun(X) -> Cond end, true)).
-define(WHENFAIL(Action, Prop), proper:whenfail(fun() -> Action end, fun() -> Prop end)).
-import(proper_types, [binary/0, binary/1, boolean/0, frequency/1, integer/2, list/1,
                       oneof/1, vector/2]).

-export([all/0, suite/0]).
-export([length_any_cut_decodes_the_same/1,
         length_too_large_at_any_cut/1,
         line_any_cut_decodes_the_same/1,
         line_too_long_at_any_cut/1,
         split_any_cut_decodes_the_same/1,
         split_too_large_at_any_cut/1,
         any_bytes_give_a_result/1]).

-define(NUMTESTS, 300).
-define(MAX, 40).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [length_any_cut_decodes_the_same, length_too_large_at_any_cut,
     line_any_cut_decodes_the_same, line_too_long_at_any_cut,
     split_any_cut_decodes_the_same, split_too_large_at_any_cut,
     any_bytes_give_a_result].

check(Prop) ->
    ?assertEqual(true, proper:quickcheck(Prop, [{numtests, ?NUMTESTS}, {to_file, user}])).

%%% ------------------------------------------------------------------
%%% Generators and the model
%%% ------------------------------------------------------------------

length_spec() ->
    ?LET({Bytes, Endian, Incl}, {oneof([1, 2, 4]), oneof([big, little]), boolean()},
         {length, Bytes, #{endian => Endian, includes_header => Incl, max => ?MAX}}).

line_spec() ->
    ?LET(Delim, oneof([lf, crlf]), {line, #{delimiter => Delim, max => ?MAX}}).

payload() ->
    ?LET(N, frequency([{3, integer(0, 6)}, {1, integer(0, ?MAX)}]), binary(N)).

%% Lines of bytes that are often delimiter characters, without the
%% delimiter itself.
line({line, #{delimiter := Delim}}) ->
    ?SUCHTHAT(L, ?LET(N, frequency([{3, integer(0, 6)}, {1, integer(0, ?MAX)}]),
                      ?LET(Cs, vector(N, oneof([$a, $\r, $\n, integer(0, 255)])),
                           list_to_binary(Cs))),
              binary:match(L, delimiter(Delim)) =:= nomatch).

delimiter(lf) -> <<"\n">>;
delimiter(crlf) -> <<"\r\n">>.

%% Chunk sizes for cutting a stream.
cuts() ->
    list(oneof([integer(1, 3), integer(1, 20), integer(1, 200), integer(1, 2000)])).

%% Mostly a few frames, sometimes many (long chunks take other ways
%% through the line framer than short ones).
some(Gen) ->
    frequency([{4, list(Gen)}, {1, ?LET(N, integer(50, 150), vector(N, Gen))}]).

split(Bin, []) -> [Bin || Bin =/= <<>>];
split(<<>>, _) -> [];
split(Bin, [N | _]) when N >= byte_size(Bin) -> [Bin];
split(Bin, [N | Ns]) ->
    <<Chunk:N/binary, Rest/binary>> = Bin,
    [Chunk | split(Rest, Ns)].

%% The stream cut in every way the properties try: the random cuts, a
%% byte a chunk, and in two at each place.
cuttings(Stream, Cuts) ->
    Size = byte_size(Stream),
    [split(Stream, Cuts), split(Stream, lists:duplicate(Size, 1))
     | [split(Stream, [P]) || P <- lists:seq(1, max(Size - 1, 0))]].

%% Decode the chunks in turn: the frames of each chunk, then `{ok,
%% Pending}' or `{error, Reason}' (the error's frames are the last
%% entry).
feed(Spec, Chunks) ->
    {ok, St0} = sluice_frame:new(Spec),
    feed(St0, Chunks, []).

feed(St, [], Acc) ->
    {lists:reverse(Acc), {ok, sluice_frame:pending(St)}};
feed(St, [C | Cs], Acc) ->
    case sluice_frame:decode(C, St) of
        {ok, Frames, St2} -> feed(St2, Cs, [Frames | Acc]);
        {error, Reason, Frames, _} -> {lists:reverse([Frames | Acc]), {error, Reason}}
    end.

%% For each chunk, the frames whose last byte (Ends: each frame's end
%% offset in the stream) it carries.
per_chunk(Frames, Ends, Chunks) ->
    FrameEnds = lists:zip(Frames, Ends),
    {PerChunk, _} = lists:mapfoldl(
                      fun(C, Start) ->
                              End = Start + byte_size(C),
                              {[F || {F, E} <- FrameEnds, E > Start, E =< End], End}
                      end, 0, Chunks),
    PerChunk.

ends(Encoded) ->
    tl(lists:reverse(lists:foldl(fun(E, [P | _] = Acc) -> [P + iolist_size(E) | Acc] end,
                                 [0], Encoded))).

%% The 1-based index of the chunk holding byte Offset (1-based).
chunk_index(Chunks, Offset) ->
    chunk_index(Chunks, Offset, 0, 1).

chunk_index([C | Cs], Offset, Pos, I) ->
    case Pos + byte_size(C) >= Offset of
        true -> {I, Pos + byte_size(C)};
        false -> chunk_index(Cs, Offset, Pos + byte_size(C), I + 1)
    end.

%% Every cutting of the stream of Frames decodes to Frames, each with the
%% chunk that completes it, and nothing is left over.
same_frames(Spec, Frames, Encoded, Cuts) ->
    Stream = iolist_to_binary(Encoded),
    Ends = ends(Encoded),
    Bad = [{Chunks, Got} || Chunks <- cuttings(Stream, Cuts),
                            Got <- [feed(Spec, Chunks)],
                            Got =/= {per_chunk(Frames, Ends, Chunks), {ok, 0}}],
    ?WHENFAIL(ct:pal("spec ~p~nframes ~p~nfirst bad cutting ~p", [Spec, Frames, hd(Bad)]),
              Bad =:= []).

%% Every cutting of Good's stream followed by Bad fails on the chunk that
%% holds byte ErrorAt of the stream (Bad starts at byte Start + 1), with
%% Reason(ChunkEnd - Start); every chunk before it and that one get their
%% frames.
fails_at(Spec, Good, Bad, ErrorAt, Reason, Cuts) ->
    Encoded = [sluice_frame:encode(F, Spec) || F <- Good],
    Start = iolist_size(Encoded),
    Stream = iolist_to_binary([Encoded, Bad]),
    Ends = ends(Encoded),
    Wrong = [{Chunks, Got, Expected}
             || Chunks <- cuttings(Stream, Cuts),
                {I, ChunkEnd} <- [chunk_index(Chunks, Start + ErrorAt)],
                Expected <- [{per_chunk(Good, Ends, lists:sublist(Chunks, I)),
                              {error, Reason(ChunkEnd - Start)}}],
                Got <- [feed(Spec, Chunks)],
                Got =/= Expected],
    ?WHENFAIL(ct:pal("spec ~p~ngood ~p~nfirst wrong cutting ~p", [Spec, Good, hd(Wrong)]),
              Wrong =:= []).

%%% ------------------------------------------------------------------
%%% Properties
%%% ------------------------------------------------------------------

length_any_cut_decodes_the_same(_Config) ->
    check(?FORALL({Spec, Frames, Cuts}, {length_spec(), some(payload()), cuts()},
                  same_frames(Spec, Frames, [sluice_frame:encode(F, Spec) || F <- Frames], Cuts))).

%% A header announcing more than max (or, counting itself, less than
%% itself) fails as soon as its last byte arrives, whatever follows.
length_too_large_at_any_cut(_Config) ->
    check(?FORALL({Spec = {length, Bytes, #{endian := Endian, includes_header := Incl}},
                   Good, Excess, Junk, Cuts},
                  {length_spec(), list(payload()), integer(1, 200), binary(), cuts()},
                  begin
                      Adj = case Incl of true -> Bytes; false -> 0 end,
                      {L, Reason} = case Incl andalso Excess > 180 of
                                        true -> {Excess rem Bytes, {bad_length, Excess rem Bytes}};
                                        false -> {?MAX + Adj + Excess,
                                                  {frame_too_large, ?MAX + Excess, ?MAX}}
                                    end,
                      Bits = Bytes * 8,
                      Header = case Endian of
                                   big -> <<L:Bits/big>>;
                                   little -> <<L:Bits/little>>
                               end,
                      fails_at(Spec, Good, <<Header/binary, Junk/binary>>, Bytes,
                               fun(_) -> Reason end, Cuts)
                  end)).

line_any_cut_decodes_the_same(_Config) ->
    check(?FORALL({Spec, Lines, Cuts},
                  ?LET(Spec, line_spec(), {Spec, some(line(Spec)), cuts()}),
                  same_frames(Spec, Lines, [sluice_frame:encode(L, Spec) || L <- Lines], Cuts))).

%% A line longer than max fails on the chunk holding its byte max + 1,
%% saying how much of it that chunk showed (all of it when its delimiter
%% came too).
line_too_long_at_any_cut(_Config) ->
    check(?FORALL({Spec = {line, #{delimiter := Delim}}, Good, Extra, Cuts},
                  ?LET(Spec, line_spec(), {Spec, some(line(Spec)), integer(1, 300), cuts()}),
                  begin
                      Long = binary:copy(<<"x">>, ?MAX + Extra),
                      fails_at(Spec, Good, <<Long/binary, (delimiter(Delim))/binary, "more">>,
                               ?MAX + 1,
                               fun(Seen) -> {line_too_long, min(Seen, byte_size(Long)), ?MAX} end,
                               Cuts)
                  end)).

%% Two split functions: one that names the size it needs (decode_packet's
%% 2-byte packets), one that cannot (lines, with `more').
split_specs() ->
    oneof([{split, fun(B) -> erlang:decode_packet(2, B, []) end, #{max => ?MAX + 2}},
           {split, fun line_split/1, #{max => ?MAX + 1}}]).

line_split(B) ->
    case binary:match(B, <<"\n">>) of
        nomatch -> more;
        {At, 1} -> <<L:At/binary, _, R/binary>> = B, {ok, L, R}
    end.

split_encode({split, _, #{max := M}}, F) when M =:= ?MAX + 2 -> [<<(byte_size(F)):16>>, F];
split_encode(_, F) -> [F, $\n].

split_any_cut_decodes_the_same(_Config) ->
    check(?FORALL({Spec, Frames, Cuts},
                  {split_specs(), some(line({line, #{delimiter => lf}})), cuts()},
                  same_frames(Spec, Frames, [split_encode(Spec, F) || F <- Frames], Cuts))).

%% A split function's {more, Total} over max fails as soon as it is said:
%% when the 2-byte header has come.
split_too_large_at_any_cut(_Config) ->
    Spec = {split, fun(B) -> erlang:decode_packet(2, B, []) end, #{max => ?MAX + 2}},
    check(?FORALL({Good, Excess, Junk, Cuts},
                  {list(line({line, #{delimiter => lf}})), integer(1, 1000), binary(), cuts()},
                  begin
                      Len = ?MAX + Excess,
                      Encoded = [split_encode(Spec, F) || F <- Good],
                      Start = iolist_size(Encoded),
                      Stream = iolist_to_binary([Encoded, <<Len:16>>, Junk]),
                      Ends = ends(Encoded),
                      Wrong = [{Chunks, Got}
                               || Chunks <- cuttings(Stream, Cuts),
                                  {I, _} <- [chunk_index(Chunks, Start + 2)],
                                  Got <- [feed(Spec, Chunks)],
                                  Got =/= {per_chunk(Good, Ends, lists:sublist(Chunks, I)),
                                           {error, {frame_too_large, Len + 2, ?MAX + 2}}}],
                      ?WHENFAIL(ct:pal("first wrong ~p", [hd(Wrong)]), Wrong =:= [])
                  end)).

%% Random chunks never make decode/2 raise.
any_bytes_give_a_result(_Config) ->
    check(?FORALL({Spec, Chunks},
                  {oneof([length_spec(), line_spec(), split_specs()]), list(binary())},
                  begin
                      {_, Result} = feed(Spec, Chunks),
                      element(1, Result) =:= ok orelse element(1, Result) =:= error
                  end)).
