%% Tests of the benchmark's peer servers (sluice_peer_gen_tcp): that they
%% answer every protocol correctly, so that what the benchmark compares
%% sluice with is a correct server. The parser on every split of a byte
%% stream (pure); then the servers on both backends over TCP, every ack
%% checked against the frames sent; then the C engine against them, which
%% checks every ack itself.
-module(sluice_peer_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_group/2, end_per_group/2]).
-export([ack_parse_on_every_split/1,
         ack_parse_on_every_three_way_split/1,
         ack_frame_too_large_closes_after_the_acks/1,
         ping_parse_on_every_split/1,
         each_acks_every_frame_in_order/1,
         last_acks_cumulatively/1,
         counted_counts_every_frame/1,
         too_large_frame_closes_the_connection/1,
         ping_answers_pong/1,
         echo_returns_every_byte/1,
         engine_checks_every_ack/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, parse}, {group, inet}, {group, socket}].

groups() ->
    Tcp = [each_acks_every_frame_in_order, last_acks_cumulatively, counted_counts_every_frame,
           too_large_frame_closes_the_connection, ping_answers_pong, echo_returns_every_byte,
           engine_checks_every_ack],
    [{parse, [], [ack_parse_on_every_split, ack_parse_on_every_three_way_split,
                  ack_frame_too_large_closes_after_the_acks, ping_parse_on_every_split]},
     {inet, [], Tcp},
     {socket, [], Tcp}].

init_per_group(parse, Config) -> Config;
init_per_group(Backend, Config) -> [{backend, Backend} | Config].

end_per_group(_, _Config) -> ok.

%%% ------------------------------------------------------------------
%%% The parser, on every split
%%% ------------------------------------------------------------------

%% Frames with opaque ids (not in order, some with the top bit set) and
%% payloads of 0, 1, 5 and 30 bytes.
frames() ->
    [{<<255, 1, 2, 3, 4, 5, 6, 7>>, 5}, {<<0:64>>, 0}, {<<1:64>>, 30},
     {<<128, 0:56>>, 1}, {<<"abcdefgh">>, 5}, {<<16#7fffffffffffffff:64>>, 0}].

encode(Frames) ->
    << <<Id/binary, Len:32, (binary:copy(<<"x">>, Len))/binary>> || {Id, Len} <- Frames >>.

%% The frames whose last byte is in [From, To) of the stream.
completed(Frames, From, To) ->
    {Done, _} = lists:mapfoldl(fun({Id, Len}, At) ->
                                       End = At + 12 + Len,
                                       {{Id, End}, End}
                               end, 0, Frames),
    [Id || {Id, End} <- Done, End > From, End =< To].

%% What the peer must answer to one read that completed `Ids'.
expected(_, []) -> <<>>;
expected(each, Ids) -> iolist_to_binary(Ids);
expected(last, Ids) -> lists:last(Ids);
expected(counted, Ids) -> <<(lists:last(Ids))/binary, (length(Ids)):32>>.

%% Feed the stream in chunks cut at `Cuts'; every read's reply must be
%% what the frames it completed call for.
check_chunks(Mode, Stream, Cuts) ->
    Bounds = [0 | Cuts] ++ [byte_size(Stream)],
    lists:foldl(
      fun({From, To}, St) ->
              Chunk = binary:part(Stream, From, To - From),
              {Reply, St2} = sluice_peer_gen_tcp:handle(Chunk, St),
              ?assertEqual({Mode, From, To, expected(Mode, completed(frames(), From, To))},
                           {Mode, From, To, Reply}),
              St2
      end, sluice_peer_gen_tcp:init_state(ack, Mode), lists:zip(lists:droplast(Bounds), tl(Bounds))).

%% Two reads, cut at every byte: each mode answers exactly the frames each
%% read completed.
ack_parse_on_every_split(_) ->
    Stream = encode(frames()),
    [check_chunks(Mode, Stream, [Cut]) || Mode <- [each, last, counted],
                                          Cut <- lists:seq(1, byte_size(Stream) - 1)],
    ok.

%% Three reads, cut at every pair of bytes (the middle read may complete
%% nothing: a split payload or header carried on).
ack_parse_on_every_three_way_split(_) ->
    Stream = encode(frames()),
    N = byte_size(Stream),
    [check_chunks(Mode, Stream, [A, B]) || Mode <- [each, last, counted],
                                           A <- lists:seq(1, N - 2), B <- lists:seq(A + 1, N - 1)],
    ok.

%% A Len above 1 MiB ends the connection, after the acks of the frames
%% before it in the same read; also when its header was split.
ack_frame_too_large_closes_after_the_acks(_) ->
    Good = encode([{<<1:64>>, 2}, {<<2:64>>, 3}]),
    Bad = <<9:64, (1048577):32>>,
    ?assertEqual({close, <<1:64, 2:64>>},
                 sluice_peer_gen_tcp:handle(<<Good/binary, Bad/binary>>,
                                            sluice_peer_gen_tcp:init_state(ack, each))),
    ?assertEqual({close, <<2:64, 2:32>>},
                 sluice_peer_gen_tcp:handle(<<Good/binary, Bad/binary>>,
                                            sluice_peer_gen_tcp:init_state(ack, counted))),
    {<<2:64>>, St} = sluice_peer_gen_tcp:handle(<<Good/binary, (binary:part(Bad, 0, 5))/binary>>,
                                                sluice_peer_gen_tcp:init_state(ack, last)),
    ?assertEqual({close, <<>>}, sluice_peer_gen_tcp:handle(binary:part(Bad, 5, 7), St)),
    %% exactly 1 MiB is allowed
    {<<>>, _} = sluice_peer_gen_tcp:handle(<<3:64, 1048576:32, 0>>,
                                           sluice_peer_gen_tcp:init_state(ack, last)).

%% Ping: a Pong per whole `Ping\n', whatever the reads; any other line,
%% or more than 64 bytes without a newline, closes after the Pongs owed;
%% a line still waiting for its newline is kept, as sluice keeps it.
ping_parse_on_every_split(_) ->
    Stream = <<"Ping\nPing\nPing\n">>,
    [begin
         S0 = sluice_peer_gen_tcp:init_state(ping, none),
         {R1, S1} = sluice_peer_gen_tcp:handle(binary:part(Stream, 0, Cut), S0),
         {R2, _} = sluice_peer_gen_tcp:handle(binary:part(Stream, Cut, 15 - Cut), S1),
         ?assertEqual({Cut, binary:copy(<<"Pong\n">>, Cut div 5)}, {Cut, R1}),
         ?assertEqual(<<"Pong\nPong\nPong\n">>, <<R1/binary, R2/binary>>)
     end || Cut <- lists:seq(1, 14)],
    S = sluice_peer_gen_tcp:init_state(ping, none),
    ?assertEqual({close, <<"Pong\n">>}, sluice_peer_gen_tcp:handle(<<"Ping\nPong\n">>, S)),
    ?assertEqual({close, <<>>}, sluice_peer_gen_tcp:handle(<<"Pingx\n">>, S)),
    {<<"Pong\n">>, Px} = sluice_peer_gen_tcp:handle(<<"Ping\nPx">>, S),
    ?assertEqual({close, <<>>}, sluice_peer_gen_tcp:handle(<<"\n">>, Px)),
    {<<>>, Long} = sluice_peer_gen_tcp:handle(binary:copy(<<"x">>, 64), S),
    ?assertEqual({close, <<>>}, sluice_peer_gen_tcp:handle(<<"x">>, Long)).

%%% ------------------------------------------------------------------
%%% Over TCP, on the group's backend
%%% ------------------------------------------------------------------

start(Config, Protocol, Ack) ->
    {ok, #{port := Port} = Server} =
        sluice_peer_gen_tcp:start(#{backend => ?config(backend, Config), protocol => Protocol,
                                    ack => Ack}),
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {nodelay, true}]),
    {Server, S}.

%% 2,000 frames with random ids and payloads, written in random pieces.
tcp_frames() ->
    rand:seed(exsss, {1, 2, 3}),
    [{rand:bytes(8), rand:uniform(40) - 1} || _ <- lists:seq(1, 2000)].

send_in_pieces(S, <<>>) -> ok = gen_tcp:shutdown(S, write);
send_in_pieces(S, Bin) ->
    N = min(byte_size(Bin), rand:uniform(3000)),
    <<Piece:N/binary, Rest/binary>> = Bin,
    ok = gen_tcp:send(S, Piece),
    send_in_pieces(S, Rest).

%% Every reply until the server closes after our FIN.
recv_all(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, B} -> recv_all(S, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc
    end.

exchange(Config, Ack) ->
    {Server, S} = start(Config, ack, Ack),
    Frames = tcp_frames(),
    send_in_pieces(S, encode(Frames)),
    Acks = recv_all(S, <<>>),
    sluice_peer_gen_tcp:stop(Server),
    {[Id || {Id, _} <- Frames], Acks}.

%% each: one ack per frame, the frames' ids in order.
each_acks_every_frame_in_order(Config) ->
    {Ids, Acks} = exchange(Config, each),
    ?assertEqual(iolist_to_binary(Ids), Acks).

%% last: every ack is the id of a frame sent after the one the previous
%% ack named, and the final ack names the last frame.
last_acks_cumulatively(Config) ->
    {Ids, Acks} = exchange(Config, last),
    Got = [Id || <<Id:8/binary>> <= Acks],
    ?assertEqual(lists:last(Ids), lists:last(Got)),
    positions(Got, Ids, 0),
    ct:pal("~p frames, ~p acks", [length(Ids), length(Got)]).

%% counted: every ack's count is how many frames it covers, so the running
%% sum lands on the position of the id it carries; all counted once.
counted_counts_every_frame(Config) ->
    {Ids, Acks} = exchange(Config, counted),
    Got = [{Id, N} || <<Id:8/binary, N:32>> <= Acks],
    Sum = lists:foldl(fun({Id, N}, Before) ->
                              ?assert(N > 0),
                              ?assertEqual(Id, lists:nth(Before + N, Ids)),
                              Before + N
                      end, 0, Got),
    ?assertEqual(length(Ids), Sum).

%% Each id acked is found after the position of the previous one (ids are
%% random, so a match is the frame's).
positions([], _, _) -> ok;
positions([Id | Rest], Ids, From) ->
    Tail = lists:nthtail(From, Ids),
    case lists:splitwith(fun(X) -> X =/= Id end, Tail) of
        {_, []} -> ct:fail({ack_not_after_previous, Id, From});
        {Skipped, _} -> positions(Rest, Ids, From + length(Skipped) + 1)
    end.

%% A frame above 1 MiB: the frames before it acked, then the connection
%% closed, and the server still serves the next connection.
too_large_frame_closes_the_connection(Config) ->
    {Server = #{port := Port}, S} = start(Config, ack, each),
    ok = gen_tcp:send(S, <<(encode([{<<1:64>>, 3}]))/binary, 2:64, 1048577:32, 0, 0>>),
    ?assertEqual(<<1:64>>, recv_all(S, <<>>)),
    {ok, S2} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    ok = gen_tcp:send(S2, encode([{<<7:64>>, 1}])),
    ?assertEqual({ok, <<7:64>>}, gen_tcp:recv(S2, 8, 5000)),
    sluice_peer_gen_tcp:stop(Server).

ping_answers_pong(Config) ->
    {Server, S} = start(Config, ping, none),
    ok = gen_tcp:send(S, <<"Ping\nPi">>),
    ?assertEqual({ok, <<"Pong\n">>}, gen_tcp:recv(S, 5, 5000)),
    ok = gen_tcp:send(S, <<"ng\nPing\n">>),
    ?assertEqual({ok, <<"Pong\nPong\n">>}, gen_tcp:recv(S, 10, 5000)),
    ok = gen_tcp:send(S, <<"Pong\n">>),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 5000)),
    sluice_peer_gen_tcp:stop(Server).

echo_returns_every_byte(Config) ->
    {Server, S} = start(Config, echo, none),
    Data = rand:bytes(1000000),
    send_in_pieces(S, Data),
    ?assertEqual(Data, recv_all(S, <<>>)),
    sluice_peer_gen_tcp:stop(Server).

%% The C engine, which stops at the first wrong ack (exit 1), against
%% each protocol and mode.
engine_checks_every_ack(Config) ->
    {ok, Engine} = sluice_build:program("sluice-load"),
    Runs = [{ack, each, ["--scenario", "lockstep", "--ack", "each"]},
            {ack, last, ["--scenario", "pipeline", "--ack", "last", "--conns", "3"]},
            {ack, counted, ["--scenario", "pipeline", "--ack", "counted", "--payload", "300"]},
            {ack, each, ["--scenario", "pipeline", "--ack", "each", "--window", "100"]},
            {echo, none, ["--scenario", "flood", "--conns", "2"]},
            {ping, none, ["--scenario", "connect", "--conns", "200", "--probe", "ping"]}],
    [begin
         {ok, #{port := Port} = Server} =
             sluice_peer_gen_tcp:start(#{backend => ?config(backend, Config),
                                         protocol => Proto, ack => Ack}),
         Json = filename:join(?config(priv_dir, Config),
                              io_lib:format("engine-~p.json", [erlang:unique_integer([positive])])),
         {Status, Out} = run(Engine, Args ++ ["--port", integer_to_list(Port), "--duration", "0.3",
                                              "--quiet", "--json", Json]),
         sluice_peer_gen_tcp:stop(Server),
         {ok, Text} = file:read_file(Json),
         {ok, #{<<"messages">> := Messages, <<"errors">> := Errors}} = sluice_json:decode(Text),
         ct:pal("~p ~p ~p: exit ~p, ~p messages, ~p errors", [Proto, Ack, Args, Status, Messages,
                                                             Errors]),
         ?assertEqual({0, 0}, {Status, Errors}, Out),
         ?assert(Messages > 0)
     end || {Proto, Ack, Args} <- Runs],
    ok.

run(Exe, Args) ->
    P = open_port({spawn_executable, Exe}, [{args, Args}, binary, exit_status, stderr_to_stdout]),
    collect(P, []).

collect(P, Acc) ->
    receive
        {P, {data, D}} -> collect(P, [Acc, D]);
        {P, {exit_status, S}} -> {S, iolist_to_binary(Acc)}
    after 30000 -> {timeout, iolist_to_binary(Acc)}
    end.
