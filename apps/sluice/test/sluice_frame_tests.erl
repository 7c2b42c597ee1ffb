%% EUnit examples of sluice_frame's three framers: what new/1 accepts and
%% refuses, frames cut from one chunk and across chunks, the size limits
%% (reported as soon as they are known), what is kept between chunks, and
%% encode/2. The PropEr properties (any cut of any stream) are in
%% sluice_frame_SUITE.
-module(sluice_frame_tests).
-include_lib("eunit/include/eunit.hrl").

new(Spec) ->
    {ok, St} = sluice_frame:new(Spec),
    St.

%% Decode the chunks in turn; the frames of each and the final result.
feed(Spec, Chunks) ->
    feed_state(new(Spec), Chunks, []).

feed_state(St, [], Acc) ->
    {lists:reverse(Acc), {ok, sluice_frame:pending(St)}};
feed_state(St, [C | Cs], Acc) ->
    case sluice_frame:decode(C, St) of
        {ok, Frames, St2} -> feed_state(St2, Cs, [Frames | Acc]);
        {error, Reason, Frames, _} -> {lists:reverse([Frames | Acc]), {error, Reason}}
    end.

%%% ------------------------------------------------------------------
%%% new/1
%%% ------------------------------------------------------------------

new_accepts_every_framer_test() ->
    Split = fun(B) -> erlang:decode_packet(1, B, []) end,
    [?assertMatch({ok, _}, sluice_frame:new(S))
     || S <- [{length, 1}, {length, 2}, {length, 4},
              {length, 2, #{endian => little, includes_header => true, max => 100}},
              line, {line, #{delimiter => crlf, max => 0}},
              {split, Split}, {split, Split, #{max => 10}}]].

new_says_what_is_wrong_test() ->
    ?assertEqual({error, {bad_spec, {length, 3}}}, sluice_frame:new({length, 3})),
    ?assertEqual({error, {bad_spec, lines}}, sluice_frame:new(lines)),
    ?assertEqual({error, {bad_spec, {split, fun erlang:length/1, [bogus]}}},
                 sluice_frame:new({split, fun erlang:length/1, [bogus]})),
    ?assertEqual({error, {bad_spec, {split, fun erlang:max/2}}},
                 sluice_frame:new({split, fun erlang:max/2})),
    ?assertEqual({error, {bad_option, endian, native}},
                 sluice_frame:new({length, 4, #{endian => native}})),
    ?assertEqual({error, {bad_option, max, -1}}, sluice_frame:new({line, #{max => -1}})),
    ?assertEqual({error, {bad_option, delimiter, cr}},
                 sluice_frame:new({line, #{delimiter => cr}})),
    ?assertEqual({error, {bad_option, includes_header, yes}},
                 sluice_frame:new({length, 1, #{includes_header => yes}})),
    ?assertEqual({error, {unknown_option, packet}}, sluice_frame:new({length, 4, #{packet => 4}})).

%%% ------------------------------------------------------------------
%%% Length-prefixed
%%% ------------------------------------------------------------------

length_every_header_size_and_byte_order_test() ->
    [begin
         Spec = {length, Bytes, #{endian => Endian}},
         Bits = Bytes * 8,
         H = fun(N) when Endian =:= big -> <<N:Bits/big>>;
                (N) -> <<N:Bits/little>>
             end,
         Chunk = <<(H(3))/binary, "abc", (H(0))/binary, (H(2))/binary, "de", (H(5))/binary, "fg">>,
         ?assertMatch({ok, [<<"abc">>, <<>>, <<"de">>], _}, sluice_frame:decode(Chunk, new(Spec))),
         {ok, _, St} = sluice_frame:decode(Chunk, new(Spec)),
         ?assertEqual(2, sluice_frame:pending(St))
     end || Bytes <- [1, 2, 4], Endian <- [big, little]].

length_including_header_test() ->
    St = new({length, 2, #{includes_header => true}}),
    ?assertMatch({ok, [<<"abc">>, <<>>], _}, sluice_frame:decode(<<5:16, "abc", 2:16>>, St)),
    %% A length smaller than the header it includes cannot be a frame.
    ?assertMatch({error, {bad_length, 1}, [<<"x">>], _},
                 sluice_frame:decode(<<3:16, "x", 1:16, "yz">>, St)).

%% Frames cut from one chunk are sub-binaries of it, not copies.
length_frames_are_sub_binaries_test() ->
    Chunk = iolist_to_binary([sluice_frame:encode(binary:copy(<<"x">>, 100), {length, 4})
                              || _ <- lists:seq(1, 10)]),
    {ok, Frames, _} = sluice_frame:decode(Chunk, new({length, 4})),
    ?assertEqual(10, length(Frames)),
    [?assertEqual(byte_size(Chunk), binary:referenced_byte_size(F)) || F <- Frames].

%% A header split across chunks, a body in many pieces, then frames whole
%% in the chunk that ends it.
length_across_chunks_test() ->
    Big = list_to_binary([I rem 256 || I <- lists:seq(1, 3000)]),
    Stream = iolist_to_binary([sluice_frame:encode(F, {length, 4})
                               || F <- [<<"a">>, Big, <<"bc">>]]),
    <<C1:3/binary, C2:3/binary, C3:1000/binary, C4:1000/binary, C5/binary>> = Stream,
    ?assertEqual({[[], [<<"a">>], [], [], [Big, <<"bc">>]], {ok, 0}},
                 feed({length, 4}, [C1, C2, C3, C4, C5])),
    %% pending/1 counts what is kept: the body so far.
    {ok, _, St1} = sluice_frame:decode(<<C1/binary, C2/binary, C3/binary>>, new({length, 4})),
    ?assertEqual(3 + 3 + 1000 - 5 - 4, sluice_frame:pending(St1)).

%% max is checked on the header: the error comes with the chunk that
%% completes the header, not after the body, with the frames before it.
length_too_large_at_the_header_test() ->
    Spec = {length, 4, #{max => 10}},
    ?assertEqual({[[<<"ok">>]], {error, {frame_too_large, 11, 10}}},
                 feed(Spec, [<<2:32, "ok", 11:32>>])),
    ?assertEqual({[[], [], [<<"ok">>]], {error, {frame_too_large, 1000000, 10}}},
                 feed(Spec, [<<2:32>>, <<"o">>, <<"k", 1000000:32>>])),
    ?assertEqual({[[], []], {error, {frame_too_large, 11, 10}}},
                 feed(Spec, [<<0, 0>>, <<0, 11>>])),
    ?assertEqual({[[binary:copy(<<"x">>, 10)]], {ok, 0}},
                 feed(Spec, [<<10:32, (binary:copy(<<"x">>, 10))/binary>>])).

%% The header limits max: 1 byte says at most 255 (254 when it counts
%% itself), whatever max asks.
length_max_is_capped_by_the_header_test() ->
    ?assertEqual([<<255>>, <<0:2040>>],
                 sluice_frame:encode(<<0:2040>>, {length, 1, #{max => 1000}})),
    ?assertError({frame_too_large, 256, 255}, sluice_frame:encode(<<0:2048>>, {length, 1})),
    ?assertError({frame_too_large, 255, 254},
                 sluice_frame:encode(<<0:2040>>, {length, 1, #{includes_header => true}})).

length_encode_test() ->
    ?assertEqual(<<0, 3, "abc">>, iolist_to_binary(sluice_frame:encode(<<"abc">>, {length, 2}))),
    ?assertEqual(<<3, 0, 0, 0, "abc">>,
                 iolist_to_binary(sluice_frame:encode([<<"a">>, "bc"],
                                                      {length, 4, #{endian => little}}))),
    ?assertEqual(<<5:16, "abc">>,
                 iolist_to_binary(sluice_frame:encode(<<"abc">>,
                                                      new({length, 2, #{includes_header => true}})))),
    ?assertError({frame_too_large, 4, 3},
                 sluice_frame:encode(<<"abcd">>, {length, 2, #{max => 3}})).

%% After an error every chunk gets the same error and nothing is kept.
errors_stick_test() ->
    {error, R, [], St} = sluice_frame:decode(<<2:8, 255>>, new({length, 1, #{max => 1}})),
    ?assertEqual({frame_too_large, 2, 1}, R),
    ?assertMatch({error, R, [], _}, sluice_frame:decode(<<0>>, St)),
    ?assertEqual(0, sluice_frame:pending(St)).

%%% ------------------------------------------------------------------
%%% What is kept between chunks
%%% ------------------------------------------------------------------

%% A few bytes of a large binary are copied, a large part is kept as it
%% is: either way what is kept holds at most twice its size alive.
keep_copies_only_small_parts_test() ->
    Big = binary:copy(<<"x">>, 100000),
    <<_:99990/binary, Small/binary>> = Big,
    <<_:10/binary, Large/binary>> = Big,
    ?assertEqual(10, binary:referenced_byte_size(sluice_frame:keep(Small))),
    ?assertEqual(100000, binary:referenced_byte_size(sluice_frame:keep(Large))),
    ?assertEqual(Small, sluice_frame:keep(Small)).

%% The few bytes after the last whole frame of a read do not keep the read
%% alive: decode then look at what a frame completed from them refers to.
kept_tail_does_not_pin_the_chunk_test() ->
    Chunk = <<(binary:copy(<<3:32, "abc">>, 1000))/binary, 3:32, "a">>,
    {ok, _, St} = sluice_frame:decode(Chunk, new({length, 4})),
    ?assertEqual(1, sluice_frame:pending(St)),
    {ok, [F], _} = sluice_frame:decode(<<"bc">>, St),
    ?assertEqual(<<"abc">>, F),
    ?assert(binary:referenced_byte_size(F) < 100).

%% A frame trickled a byte per read holds about its size, whichever the
%% framer: 20,000 one-byte chunks of a frame not yet whole leave the
%% decoding process with well under 3 bytes of memory (heap and the
%% binaries it refers to) per byte kept, where each byte cost a list cell
%% and a binary (about 48 bytes) before; the frame still comes out whole.
trickled_frame_holds_about_its_size_test_() ->
    N = 20000,
    Body = << <<($a + I rem 26)>> || I <- lists:seq(1, N) >>,
    Split = fun(B) -> erlang:decode_packet(4, B, []) end,
    [{atom_to_list(element(1, Spec)),
      fun() ->
              {Held, Frame} = trickled(Spec, Head, Body, Last),
              ?assertEqual(Body, Frame),
              ?assert(Held < 3 * N, {held, Held, for, N})
      end}
     || {Spec, Head, Last} <- [{{length, 4}, <<N:32>>, <<>>},
                               {{line, #{max => 2 * N}}, <<>>, <<"\n">>},
                               {{split, Split}, <<N:32>>, <<>>}]].

%% In a process of its own: Head, then Body but its last byte a byte per
%% chunk (each a new binary, as reads are); then the memory this process
%% holds once collected, less what it held before the first byte, and the
%% frame that the last byte and Last complete.
trickled(Spec, Head, Body, Last) ->
    {Pid, Ref} =
        spawn_monitor(
          fun() ->
                  {ok, [], St0} = sluice_frame:decode(Head, new(Spec)),
                  Before = held(),
                  Size = byte_size(Body) - 1,
                  <<Most:Size/binary, LastByte>> = Body,
                  St = lists:foldl(fun(B, S) ->
                                           {ok, [], S2} = sluice_frame:decode(<<B>>, S),
                                           S2
                                   end, St0, binary_to_list(Most)),
                  Held = held() - Before,
                  {ok, [Frame], _} = sluice_frame:decode(<<LastByte, Last/binary>>, St),
                  exit({done, Held, Frame})
          end),
    receive
        {'DOWN', Ref, process, Pid, {done, Held, Frame}} -> {Held, Frame};
        {'DOWN', Ref, process, Pid, Reason} -> error(Reason)
    end.

held() ->
    erlang:garbage_collect(),
    {memory, Mem} = process_info(self(), memory),
    {binary, Bins} = process_info(self(), binary),
    Mem + lists:sum([Size || {_, Size, _} <- Bins]).

%%% ------------------------------------------------------------------
%%% Lines
%%% ------------------------------------------------------------------

line_lf_test() ->
    ?assertEqual({[[<<"a">>, <<>>, <<"bc">>]], {ok, 1}}, feed(line, [<<"a\n\nbc\nd">>])),
    %% \r is part of an lf line.
    ?assertEqual({[[<<"a\r">>]], {ok, 0}}, feed(line, [<<"a\r\n">>])),
    ?assertEqual({[[], [], [<<"abc">>, <<"d">>]], {ok, 0}},
                 feed(line, [<<"a">>, <<"b">>, <<"c\nd\n">>])).

line_crlf_test() ->
    Spec = {line, #{delimiter => crlf}},
    ?assertEqual({[[<<"a">>, <<>>, <<"b\nc">>]], {ok, 1}}, feed(Spec, [<<"a\r\n\r\nb\nc\r\nd">>])),
    %% The delimiter split across chunks, and a \r that is not one.
    ?assertEqual({[[], [<<"ab">>], [], [<<"c\rd">>]], {ok, 0}},
                 feed(Spec, [<<"ab\r">>, <<"\nc\r">>, <<"d">>, <<"\r\n">>])),
    ?assertEqual({[[], [<<"a\r">>]], {ok, 0}}, feed(Spec, [<<"a\r">>, <<"\r\n">>])).

%% (The VM copies a binary part of 64 bytes or less onto the process heap:
%% smaller than a sub-binary.)
line_frames_are_sub_binaries_test() ->
    Chunk = binary:copy(<<(binary:copy(<<"0123456789">>, 7))/binary, "\n">>, 100),
    {ok, Lines, _} = sluice_frame:decode(Chunk, new(line)),
    ?assertEqual(100, length(Lines)),
    [?assertEqual(byte_size(Chunk), binary:referenced_byte_size(L)) || L <- Lines].

%% A line longer than max is refused as soon as max + 1 of its bytes have
%% come; a line of exactly max is fine.
line_too_long_test() ->
    Spec = {line, #{max => 4}},
    ?assertEqual({[[<<"abcd">>]], {ok, 0}}, feed(Spec, [<<"abcd\n">>])),
    ?assertEqual({[[<<"ab">>]], {error, {line_too_long, 5, 4}}}, feed(Spec, [<<"ab\nabcde\n">>])),
    ?assertEqual({[[], [<<"ab">>]], {error, {line_too_long, 5, 4}}},
                 feed(Spec, [<<"ab">>, <<"\nabcde">>])),
    ?assertEqual({[[], []], {error, {line_too_long, 5, 4}}}, feed(Spec, [<<"abc">>, <<"de">>])),
    ?assertEqual({[[], [], []], {error, {line_too_long, 6, 4}}},
                 feed(Spec, [<<"abc">>, <<"d">>, <<"ef\n">>])),
    %% crlf: max bytes and a \r may still be a line of max.
    Crlf = {line, #{delimiter => crlf, max => 4}},
    ?assertEqual({[[], [<<"abcd">>]], {ok, 0}}, feed(Crlf, [<<"abcd\r">>, <<"\n">>])),
    ?assertEqual({[[]], {error, {line_too_long, 5, 4}}}, feed(Crlf, [<<"abcd\r\r">>])).

%% Lines that end far from the end of a chunk (the general way), and
%% one long line in many chunks.
line_long_tail_and_long_line_test() ->
    Tail = binary:copy(<<"t">>, 1000),
    ?assertEqual({[[<<"a">>, <<"b">>], [<<Tail/binary, "u">>]], {ok, 0}},
                 feed(line, [<<"a\nb\n", Tail/binary>>, <<"u\n">>])),
    Xs = binary:copy(<<"x">>, 300),
    ?assertEqual({[[<<"a">>, Xs], []], {error, {line_too_long, 9000, 8192}}},
                 feed(line, [<<"a\n", Xs/binary, "\n">>, <<0:72000>>])),
    Long = list_to_binary([$a + I rem 26 || I <- lists:seq(1, 5000)]),
    Pieces = [binary:part(Long, I, 100) || I <- lists:seq(0, 4900, 100)],
    {Out, {ok, 0}} = feed(line, Pieces ++ [<<"\n">>]),
    ?assertEqual([Long], lists:append(Out)).

line_encode_test() ->
    ?assertEqual(<<"abc\n">>, iolist_to_binary(sluice_frame:encode(<<"abc">>, line))),
    ?assertEqual(<<"abc\r\n">>,
                 iolist_to_binary(sluice_frame:encode("abc", {line, #{delimiter => crlf}}))),
    ?assertError(delimiter_in_line, sluice_frame:encode(<<"a\nb">>, line)),
    ?assertError({line_too_long, 3, 2}, sluice_frame:encode(<<"abc">>, {line, #{max => 2}})).

%%% ------------------------------------------------------------------
%%% A split function
%%% ------------------------------------------------------------------

packet2() ->
    {split, fun(B) -> erlang:decode_packet(2, B, []) end, #{max => 100}}.

%% erlang:decode_packet/3 is a split function as it is.
split_decode_packet_test() ->
    ?assertEqual({[[<<"ab">>, <<>>], [], [<<"cde">>]], {ok, 0}},
                 feed(packet2(), [<<0, 2, "ab", 0, 0, 0>>, <<3, "c">>, <<"de">>])),
    %% Frames are what the function returns: sub-binaries here.
    Chunk = binary:copy(<<0, 3, "abc">>, 10),
    {ok, Frames, _} = sluice_frame:decode(Chunk, new(packet2())),
    [?assertEqual(50, binary:referenced_byte_size(F)) || F <- Frames].

%% {more, Total} over max is refused at once; a function that cannot tell
%% the size is refused once more than max bytes are waiting.
split_too_large_test() ->
    ?assertEqual({[[<<"a">>]], {error, {frame_too_large, 202, 100}}},
                 feed(packet2(), [<<0, 1, "a", 0, 200>>])),
    Blank = {split, fun blank_line/1, #{max => 10}},
    ?assertEqual({[[], []], {error, {frame_too_large, 11, 10}}},
                 feed(Blank, [<<"abcde">>, <<"fghij">>])),
    ?assertEqual({[[], [<<"abcdefghi">>]], {ok, 0}}, feed(Blank, [<<"abcde">>, <<"fghi\n">>])).

%% A function that says only `more': it is called on the whole frame so
%% far (as little of a new chunk as it takes), and what follows the frame
%% in the chunk is cut from the chunk.
split_plain_more_test() ->
    Blank = {split, fun blank_line/1},
    E = binary:copy(<<"e">>, 100),
    Chunk2 = <<"d\n", (binary:copy(<<E/binary, "\n">>, 1000))/binary>>,
    {[[], Frames], {ok, 0}} = feed(Blank, [<<"abc">>, Chunk2]),
    ?assertEqual([<<"abcd">> | lists:duplicate(1000, E)], Frames),
    [?assertEqual(byte_size(Chunk2), binary:referenced_byte_size(F)) || F <- tl(Frames)].

blank_line(B) ->
    case binary:match(B, <<"\n">>) of
        nomatch -> more;
        {At, 1} -> <<L:At/binary, _, R/binary>> = B, {ok, L, R}
    end.

split_errors_test() ->
    Bad = {split, fun(<<"x", _/binary>>) -> {error, no_x};
                     (<<C, R/binary>>) -> {ok, C, R};
                     (_) -> more end},
    ?assertEqual({[[$a, $b]], {error, no_x}}, feed(Bad, [<<"abxc">>])),
    %% A result that is not one names the function: the handler's bug.
    SillyFun = fun(B) -> {ok, frame, B} end,
    ?assertMatch({[[]], {error, {bad_split_result, SillyFun, {ok, frame, <<"a">>}}}},
                 feed({split, SillyFun}, [<<"a">>])),
    ?assertError(badarg, sluice_frame:encode(<<"a">>, Bad)).

%% A frame's Rest must be a binary shorter than the buffer the function
%% was given (a longer one, or none, would make the framer go back or
%% loop); anything else is not a result, on one chunk's bytes and on
%% kept bytes joined to a new one, after the frames cut before it.
split_rest_not_a_shorter_binary_test() ->
    Fun = fun(B) when byte_size(B) < 2 -> {more, 2};
             (<<"L", _/binary>> = B) -> {ok, long, <<B/binary, "x">>};
             (<<"N", _/binary>>) -> {ok, none, rest};
             (<<C, R/binary>>) -> {ok, C, R} end,
    ?assertEqual({[[$a, $b]], {error, {bad_split_result, Fun, {ok, long, <<"Lcx">>}}}},
                 feed({split, Fun}, [<<"abLc">>])),
    ?assertEqual({[[$a]], {error, {bad_split_result, Fun, {ok, none, rest}}}},
                 feed({split, Fun}, [<<"aNc">>])),
    ?assertEqual({[[], []], {error, {bad_split_result, Fun, {ok, long, <<"Lcx">>}}}},
                 feed({split, Fun}, [<<"L">>, <<"c">>])).

%% A function that raises (a RESP parser's binary_to_integer/1 on a
%% client's garbage): an error that comes with the frames it cut before
%% in the same chunk, not an exception that loses them; on the bytes of
%% one chunk and on kept bytes joined to a new one.
split_raises_test() ->
    Buggy = {split, fun(B) when byte_size(B) < 2 -> {more, 2};
                       (<<"!", _/binary>>) -> error(bang);
                       (<<C, R/binary>>) -> {ok, C, R} end},
    ?assertMatch({[[$a, $b]], {error, {split_raised, error, bang, [_ | _]}}},
                 feed(Buggy, [<<"ab!c">>])),
    ?assertMatch({[[], []], {error, {split_raised, error, bang, [_ | _]}}},
                 feed(Buggy, [<<"!">>, <<"c">>])).

%% A function's answers when called on kept bytes joined to a new chunk:
%% an error, a nonsense result, a frame over max, a `{more, N}' naming no
%% more than it has (taken as `more'), and a frame that ends within the
%% kept bytes (it asked for more than it needed).
split_on_joined_bytes_test() ->
    Fussy = fun(B) when byte_size(B) < 3 -> {more, 3};
               (<<"!", _/binary>>) -> {error, bang};
               (<<"?", _/binary>>) -> what;
               (<<"=", _/binary>>) -> {more, 2};
               (<<"+", _/binary>> = B) when byte_size(B) < 5 -> more;
               (<<"+", _/binary>>) -> {ok, all, <<>>};
               (<<C, R/binary>>) -> {ok, C, R}
            end,
    Spec = {split, Fussy, #{max => 4}},
    ?assertEqual({[[], []], {error, bang}}, feed(Spec, [<<"!a">>, <<"bc">>])),
    ?assertEqual({[[], []], {error, {bad_split_result, Fussy, what}}},
                 feed(Spec, [<<"?a">>, <<"bc">>])),
    ?assertEqual({[[], []], {error, {frame_too_large, 6, 4}}}, feed(Spec, [<<"+a">>, <<"bcdef">>])),
    ?assertEqual({[[]], {error, {frame_too_large, 5, 4}}}, feed(Spec, [<<"+abcd">>])),
    ?assertEqual({[[], [$a, $b, $c, $d]], {ok, 2}}, feed(Spec, [<<"ab">>, <<"cdef">>])),
    ?assertEqual({[[], [], []], {ok, 5}}, feed({split, Fussy}, [<<"=">>, <<"abc">>, <<"d">>])).

%% A hand-off's bytes (sluice_conn_handoff): what a framer keeps comes
%% back as the client sent it (a length header made again, a line begun,
%% a split frame begun), and the bytes of a chunk after its first frames
%% likewise, also when the first frame began in an earlier chunk and when
%% the framer refused what followed.
kept_and_rest_are_the_bytes_as_sent_test() ->
    Split = fun(B) ->
                    case binary:split(B, <<";">>) of
                        [F, R] -> {ok, F, R};
                        [_] -> more
                    end
            end,
    Cases = [{{length, 2}, <<0, 5, "ab">>, <<"cde", 0, 1, "x", 0, 3, "y">>},
             {{length, 4, #{endian => little, includes_header => true}},
              <<9, 0, 0, 0, "a">>, <<"bcde", 6, 0, 0, 0, "zz", 7, 0>>},
             {{length, 2}, <<0>>, <<3, "abc", 0>>},
             {{line, #{delimiter => crlf}}, <<"ab\r">>, <<"\ncd\r\nef">>},
             {line, <<"ab">>, <<"c\nd\ne">>},
             {{split, Split}, <<"ab">>, <<"c;d;e">>}],
    [begin
         {ok, F0} = sluice_frame:new(Spec),
         {ok, [], F1} = sluice_frame:decode(First, F0),
         ?assertEqual({Spec, First}, {Spec, sluice_frame:kept(F1)}),
         Sent = <<First/binary, Second/binary>>,
         case sluice_frame:decode(Second, F1) of
             {ok, [Frame1 | _], _} ->
                 %% After the first frame: the rest as sent, from the
                 %% state before the chunk
                 {ok, [Frame1 | More], FAll} = sluice_frame:decode(Sent, F0),
                 Rest = sluice_frame:rest([Frame1], F1, Second),
                 {ok, More, FAll2} = sluice_frame:decode(Rest, F0),
                 ?assertEqual({Spec, sluice_frame:kept(FAll)},
                              {Spec, sluice_frame:kept(FAll2)});
             {ok, [], _} ->
                 ?assertEqual(<<>>, Second)
         end
     end || {Spec, First, Second} <- Cases],
    %% Refused bytes after the frame are handed as they came
    {ok, L0} = sluice_frame:new({line, #{max => 3}}),
    {error, {line_too_long, _, 3}, [<<"ab">>], _} = sluice_frame:decode(<<"ab\ntoolong">>, L0),
    ?assertEqual(<<"toolong">>, sluice_frame:rest([<<"ab">>], L0, <<"ab\ntoolong">>)).
