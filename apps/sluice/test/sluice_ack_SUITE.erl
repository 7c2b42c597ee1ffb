%% The ack and ping codecs: PropEr properties that feed handle_data/2 a
%% stream cut at arbitrary places and compare with a model of the protocol,
%% the max_frame guard, and the same guard on the wire (one bad connection is
%% closed and counted, the others carry on).
-module(sluice_ack_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% PropEr's macros, spelled out: Debian's erlang-proper ships the beams but
%% not proper.hrl (that is erlang-proper-dev), and these are all the suite
%% needs. They expand exactly as proper.hrl's do.
-define(FORALL(X, RawType, Prop), proper:forall(RawType, fun(X) -> Prop end)).
-define(LET(X, RawType, Gen), proper_types:bind(RawType, fun(X) -> Gen end, false)).
-define(WHENFAIL(Action, Prop), proper:whenfail(fun() -> Action end, fun() -> Prop end)).
-import(proper_types, [binary/1, frequency/1, integer/2, list/1, non_empty/1,
                       oneof/1]).

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([each_acks_every_frame_in_order/1,
         each_treats_ids_as_opaque_bytes/1,
         last_acks_last_complete_frame_of_each_chunk/1,
         counted_counts_cover_every_frame/1,
         oversized_frame_is_protocol_error/1,
         oversized_frame_closes_only_its_connection/1,
         ping_split_at_every_boundary/1,
         ping_split_randomly/1,
         ping_other_line_is_protocol_error/1,
         ping_other_line_on_the_wire_is_counted/1]).

-define(NUMTESTS, 300).
-define(MAX_FRAME, 64).

suite() -> [{timetrap, {seconds, 60}}].

%% The codec once; the network cases on each backend.
all() -> [{group, codec}, {group, inet}, {group, socket}].

groups() ->
    [{codec, [],
      [each_acks_every_frame_in_order, each_treats_ids_as_opaque_bytes,
       last_acks_last_complete_frame_of_each_chunk,
       counted_counts_cover_every_frame, oversized_frame_is_protocol_error,
       ping_split_at_every_boundary, ping_split_randomly,
       ping_other_line_is_protocol_error]},
     {network, [],
      [oversized_frame_closes_only_its_connection,
       ping_other_line_on_the_wire_is_counted]}]
        ++ sluice_test_lib:backend_groups([{group, network}]).

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

check(Prop) ->
    ?assertEqual(true, proper:quickcheck(Prop, [{numtests, ?NUMTESTS}, {to_file, user}])).

%%% ------------------------------------------------------------------
%%% Generators
%%% ------------------------------------------------------------------

%% Frames with distinct ids (the index in the first four bytes, so a model
%% can tell which frame an ack names), payloads 0..max_frame bytes.
frames() ->
    ?LET(Payloads, list(payload()),
         [{<<I:32, R:32>>, P} || {I, {R, P}} <- lists:zip(lists:seq(1, length(Payloads)),
                                                            Payloads)]).

payload() ->
    {integer(0, 16#ffffffff),
     ?LET(N, frequency([{3, integer(0, 8)}, {1, integer(0, ?MAX_FRAME)}]), binary(N))}.

%% Chunk sizes for cutting a stream; 0 sizes are skipped (no empty reads).
cuts() ->
    list(oneof([integer(1, 3), integer(1, 20), integer(1, 200)])).

%% A stream: whole frames, then maybe the start of one more (a partial
%% frame must not be acked).
stream() ->
    ?LET({Frames, Partial}, {frames(), oneof([<<>>, ?LET(N, integer(1, 20), binary(N))])},
         {Frames, iolist_to_binary([encode(F) || F <- Frames]), partial(Partial)}).

%% A partial frame: fewer bytes than a whole header, or a header announcing
%% more payload than follows.
partial(<<>>) -> <<>>;
partial(B) when byte_size(B) < 12 -> B;
partial(<<Id:8/binary, _:32, Rest/binary>>) -> <<Id/binary, (byte_size(Rest) + 1):32, Rest/binary>>.

encode({Id, Payload}) -> sluice_test_lib:frame(Id, Payload).

split(Bin, []) -> [Bin || Bin =/= <<>>];
split(<<>>, _) -> [];
split(Bin, [N | _]) when N >= byte_size(Bin) -> [Bin];
split(Bin, [N | Ns]) ->
    <<Chunk:N/binary, Rest/binary>> = Bin,
    [Chunk | split(Rest, Ns)].

%% Feed chunks to the handler; returns the acks of each chunk (one entry per
%% chunk, <<>> when it sent nothing) and the final result.
feed(Mode, Chunks) ->
    {ok, St0} = sluice_proto_ack:init(conn(), #{ack => Mode, max_frame => ?MAX_FRAME}),
    feed(Chunks, St0, []).

feed([], _St, Acc) ->
    {lists:reverse(Acc), ok};
feed([C | Cs], St, Acc) ->
    case sluice_proto_ack:handle_data(C, St) of
        {ok, St2} -> feed(Cs, St2, [<<>> | Acc]);
        {reply, Out, St2} -> feed(Cs, St2, [iolist_to_binary(Out) | Acc]);
        {close, Reason, _} -> {lists:reverse([<<>> | Acc]), {close, Reason, length(Acc) + 1}};
        %% The acks owed before the bad frame go out with the close.
        {reply_close, Out, Reason, _} ->
            {lists:reverse([iolist_to_binary(Out) | Acc]), {close, Reason, length(Acc) + 1}}
    end.

conn() ->
    #{listener => test, socket => undefined, transport => sluice_transport_inet}.

%% For each chunk, the frames whose last byte it carries.
completed_per_chunk(Frames, Chunks) ->
    Ends = lists:foldl(fun(F, [Prev | _] = Acc) -> [Prev + byte_size(encode(F)) | Acc] end,
                       [0], Frames),
    FrameEnds = lists:zip(Frames, tl(lists:reverse(Ends))),
    {PerChunk, _} = lists:mapfoldl(
                      fun(C, Start) ->
                              End = Start + byte_size(C),
                              {[F || {F, E} <- FrameEnds, E > Start, E =< End], End}
                      end, 0, Chunks),
    PerChunk.

%%% ------------------------------------------------------------------
%%% Ack codec
%%% ------------------------------------------------------------------

%% ack => each: however the stream is cut, the acks concatenated are exactly
%% the ids of the whole frames, in order, each acked as soon as the chunk
%% completing it arrives; a trailing partial frame gets no ack.
each_acks_every_frame_in_order(_Config) ->
    check(?FORALL({{Frames, Stream, Partial}, Cuts}, {stream(), cuts()},
                  begin
                      Chunks = split(<<Stream/binary, Partial/binary>>, Cuts),
                      {Acks, ok} = feed(each, Chunks),
                      Expected = [iolist_to_binary([Id || {Id, _} <- Done])
                                  || Done <- completed_per_chunk(Frames, Chunks)],
                      ?WHENFAIL(ct:pal("chunks ~p~nacks ~p~nexpected ~p",
                                       [Chunks, Acks, Expected]),
                                Acks =:= Expected andalso
                                iolist_to_binary(Acks) =:=
                                    iolist_to_binary([Id || {Id, _} <- Frames]))
                  end)).

%% Ids are 8 opaque bytes: any bytes (zeros, repeats, all ones) come back
%% unchanged and in order.
each_treats_ids_as_opaque_bytes(_Config) ->
    check(?FORALL({Ids, Cuts}, {list(oneof([binary(8), <<0:64>>, <<-1:64>>])), cuts()},
                  begin
                      Stream = iolist_to_binary([encode({Id, <<>>}) || Id <- Ids]),
                      {Acks, ok} = feed(each, split(Stream, Cuts)),
                      iolist_to_binary(Acks) =:= iolist_to_binary(Ids)
                  end)).

%% ack => last: one 8-byte ack per chunk that completes at least one frame,
%% naming the last frame it completes; so the last ack is the id of the
%% last whole frame, and none is sent for chunks that complete nothing.
last_acks_last_complete_frame_of_each_chunk(_Config) ->
    check(?FORALL({{Frames, Stream, Partial}, Cuts}, {stream(), cuts()},
                  begin
                      Chunks = split(<<Stream/binary, Partial/binary>>, Cuts),
                      {Acks, ok} = feed(last, Chunks),
                      Expected = [case Done of
                                      [] -> <<>>;
                                      _ -> element(1, lists:last(Done))
                                  end || Done <- completed_per_chunk(Frames, Chunks)],
                      LastAck = lists:last([<<>> | [A || A <- Acks, A =/= <<>>]]),
                      LastId = case Frames of
                                   [] -> <<>>;
                                   _ -> element(1, lists:last(Frames))
                               end,
                      ?WHENFAIL(ct:pal("chunks ~p~nacks ~p~nexpected ~p",
                                       [Chunks, Acks, Expected]),
                                Acks =:= Expected andalso LastAck =:= LastId)
                  end)).

%% ack => counted: like last, 12 bytes `Id, Count'; the counts add up to the
%% number of whole frames and each ack names the last frame it covers.
counted_counts_cover_every_frame(_Config) ->
    check(?FORALL({{Frames, Stream, Partial}, Cuts}, {stream(), cuts()},
                  begin
                      Chunks = split(<<Stream/binary, Partial/binary>>, Cuts),
                      {Acks, ok} = feed(counted, Chunks),
                      Expected = [case Done of
                                      [] -> <<>>;
                                      _ -> <<(element(1, lists:last(Done)))/binary,
                                             (length(Done)):32>>
                                  end || Done <- completed_per_chunk(Frames, Chunks)],
                      Total = lists:sum([N || <<_:8/binary, N:32>> <- Acks]),
                      LastId = case [Id || <<Id:8/binary, _:32>> <- Acks] of
                                   [] -> <<>>;
                                   Ids -> lists:last(Ids)
                               end,
                      ?WHENFAIL(ct:pal("chunks ~p~nacks ~p~nexpected ~p",
                                       [Chunks, Acks, Expected]),
                                Acks =:= Expected
                                andalso Total =:= length(Frames)
                                andalso LastId =:= case Frames of
                                                      [] -> <<>>;
                                                      _ -> element(1, lists:last(Frames))
                                                  end)
                  end)).

%% The acks each chunk should get, per mode (as the three properties above
%% state them).
model(Mode, Frames, Chunks) ->
    [case {Mode, Done} of
         {_, []} -> <<>>;
         {each, _} -> iolist_to_binary([Id || {Id, _} <- Done]);
         {last, _} -> element(1, lists:last(Done));
         {counted, _} -> <<(element(1, lists:last(Done)))/binary, (length(Done)):32>>
     end || Done <- completed_per_chunk(Frames, Chunks)].

%% In every mode, a header with Len > max_frame closes the connection with
%% {protocol_error, frame_too_large} on the chunk that completes that header
%% (not before, whatever the cut: no waiting for a payload that is never
%% buffered), every chunk up to and including that one gets its usual acks
%% (the last one with the close: nothing owed is lost), and Len =
%% max_frame is accepted.
oversized_frame_is_protocol_error(_Config) ->
    check(?FORALL({Mode, {Frames, Stream, _}, Excess, Cuts},
                  {oneof([each, last, counted]), stream(), integer(1, 16#ffffffff - ?MAX_FRAME),
                   cuts()},
                  begin
                      Bad = <<"badframe", (?MAX_FRAME + Excess):32>>,
                      Chunks = split(<<Stream/binary, Bad/binary, "trailing bytes">>, Cuts),
                      %% The chunk that carries the last header byte.
                      HeaderEnd = byte_size(Stream) + 12,
                      Expected = chunk_index(Chunks, HeaderEnd),
                      {Acks, Result} = feed(Mode, Chunks),
                      ?WHENFAIL(ct:pal("mode ~p frames ~p~nchunks ~p~nresult ~p expected close on ~p",
                                       [Mode, length(Frames), Chunks, Result, Expected]),
                                Result =:= {close, {protocol_error, frame_too_large}, Expected}
                                andalso Acks =:= model(Mode, Frames,
                                                       lists:sublist(Chunks, Expected)))
                  end)),
    %% Exactly max_frame is fine.
    Max = sluice_test_lib:frame(<<"maxframe">>, binary:copy(<<0>>, ?MAX_FRAME)),
    ?assertEqual({[<<"maxframe">>], ok}, feed(each, [Max])).

chunk_index(Chunks, Offset) ->
    chunk_index(Chunks, Offset, 0, 1).

chunk_index([C | Cs], Offset, Pos, I) ->
    case Pos + byte_size(C) >= Offset of
        true -> I;
        false -> chunk_index(Cs, Offset, Pos + byte_size(C), I + 1)
    end.

%%% ------------------------------------------------------------------
%%% Ack guard on the wire
%%% ------------------------------------------------------------------

%% On a listener with max_frame 100, a connection announcing Len 1000 is
%% closed at once and counted in protocol_errors; a connection opened before
%% it keeps getting its acks, before and after.
oversized_frame_closes_only_its_connection(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ack,
                                                       #{ack => each, max_frame => 100}}}),
    Port = sluice_test_lib:port(Name),
    {ok, Good} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(Good, sluice_test_lib:frame(<<"good0001">>, binary:copy(<<1>>, 100))),
    ?assertEqual({ok, <<"good0001">>}, gen_tcp:recv(Good, 8, 2000)),
    {ok, Bad} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(Bad, <<"bad00001", 1000:32>>),
    sluice_test_lib:expect_closed(Bad, 2000),
    sluice_test_lib:wait_info(Name, protocol_errors, 1, 2000),
    ok = gen_tcp:send(Good, [sluice_test_lib:frame(<<"good0002">>, <<"x">>),
                             sluice_test_lib:frame(<<"good0003">>, <<>>)]),
    ?assertEqual({ok, <<"good0002good0003">>}, gen_tcp:recv(Good, 16, 2000)),
    %% (the bad one is gone from `connections' once its supervisor took its exit)
    ok = sluice_test_lib:wait_info(Name, connections, 1, 2000),
    ?assertMatch(#{connections := 1, protocol_errors := 1, accepted := 2}, sluice:info(Name)),
    ok = gen_tcp:close(Good).

%%% ------------------------------------------------------------------
%%% Ping codec
%%% ------------------------------------------------------------------

%% Three `Ping\n' lines cut at every possible set of boundaries (all 2^14
%% ways): each line gets exactly one `Pong\n', never early, never twice.
ping_split_at_every_boundary(_Config) ->
    Stream = binary:copy(<<"Ping\n">>, 3),
    Positions = lists:seq(1, byte_size(Stream) - 1),
    Bad = [Cuts || Mask <- lists:seq(0, (1 bsl length(Positions)) - 1),
                   Cuts <- [[P || P <- Positions, Mask band (1 bsl (P - 1)) =/= 0]],
                   not ping_ok(Stream, cut_at(Stream, Cuts))],
    ?assertEqual([], Bad).

%% Many lines cut at random places: one Pong per complete line, sent with
%% the chunk that completes it.
ping_split_randomly(_Config) ->
    check(?FORALL({N, Cuts}, {integer(0, 50), cuts()},
                  begin
                      Stream = binary:copy(<<"Ping\n">>, N),
                      ping_ok(Stream, split(Stream, Cuts))
                  end)).

ping_ok(Stream, Chunks) ->
    {ok, St0} = sluice_proto_ping:init(conn(), []),
    {Out, _} = lists:mapfoldl(
                 fun(C, {St, Seen}) ->
                         Seen2 = Seen + byte_size(C),
                         Lines = Seen2 div 5 - Seen div 5,
                         Expected = binary:copy(<<"Pong\n">>, Lines),
                         case sluice_proto_ping:handle_data(C, St) of
                             {ok, St2} -> {Expected =:= <<>>, {St2, Seen2}};
                             {reply, R, St2} -> {iolist_to_binary(R) =:= Expected, {St2, Seen2}};
                             Other -> {Other, {St, Seen2}}
                         end
                 end, {St0, 0}, Chunks),
    byte_size(Stream) =:= iolist_size(Chunks) andalso lists:all(fun(X) -> X =:= true end, Out).

cut_at(Bin, Cuts) ->
    {Chunks, Last} = lists:foldl(fun(P, {Acc, Prev}) ->
                                         {[binary:part(Bin, Prev, P - Prev) | Acc], P}
                                 end, {[], 0}, Cuts),
    lists:reverse([binary:part(Bin, Last, byte_size(Bin) - Last) | Chunks]).

%% Any other complete line (case, spaces, Pong, an empty line) closes with a
%% protocol error, wherever it is cut; so does a line longer than any ping
%% without a newline.
ping_other_line_is_protocol_error(_Config) ->
    check(?FORALL({Line, Cuts}, {oneof([<<"ping\n">>, <<"Ping \n">>, <<"Pong\n">>, <<"\n">>,
                                        <<"PING\n">>, <<"Ping\r\n">>,
                                        ?LET(B, non_empty(list(integer($a, $z))),
                                             <<(list_to_binary(B))/binary, "\n">>)]),
                                 cuts()},
                  begin
                      Chunks = split(<<"Ping\n", Line/binary>>, Cuts),
                      {ok, St0} = sluice_proto_ping:init(conn(), []),
                      Results = feed_ping(Chunks, St0),
                      ?WHENFAIL(ct:pal("~p -> ~p", [Chunks, Results]),
                                lists:last(Results) =:= {close, {protocol_error, not_ping}})
                  end)),
    {ok, St} = sluice_proto_ping:init(conn(), []),
    ?assertMatch({close, {protocol_error, line_too_long}, _},
                 sluice_proto_ping:handle_data(binary:copy(<<"P">>, 65), St)).

feed_ping([], _St) -> [];
feed_ping([C | Cs], St) ->
    case sluice_proto_ping:handle_data(C, St) of
        {ok, St2} -> [ok | feed_ping(Cs, St2)];
        {reply, _, St2} -> [reply | feed_ping(Cs, St2)];
        {close, Reason, _} -> [{close, Reason}];
        {reply_close, _, Reason, _} -> [{close, Reason}]
    end.

%% On the wire: a non-ping line closes that connection and is counted in
%% protocol_errors; a ping connection beside it still gets its Pong.
ping_other_line_on_the_wire_is_counted(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ping, []}}),
    Port = sluice_test_lib:port(Name),
    {ok, Good} = sluice_test_lib:connect(Port),
    {ok, Bad} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(Bad, <<"Hello\n">>),
    sluice_test_lib:expect_closed(Bad, 2000),
    sluice_test_lib:wait_info(Name, protocol_errors, 1, 2000),
    ok = gen_tcp:send(Good, <<"Ping\n">>),
    ?assertEqual({ok, <<"Pong\n">>}, gen_tcp:recv(Good, 0, 2000)),
    ok = gen_tcp:close(Good).
