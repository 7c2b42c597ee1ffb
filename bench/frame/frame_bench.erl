%% sluice_frame's cost per frame, beside the ack protocol's own decoder.
%% Not a test: frame_bench.escript compiles and runs it, and
%% bench/frame/README.md has the figures and what they mean.
%%
%% Each case decodes the same chunk over and over in its own process and
%% reports ns per frame (or per call, or per KiB); the cases run in turn,
%% one round after another, and the table gives each case's median and
%% range over the rounds.
-module(frame_bench).

-export([main/1]).

-define(CHUNK, 262144).

%% @doc Runs every case Rounds times, in turn; prints the table.
-spec main(pos_integer()) -> ok.
main(Rounds) ->
    Cases = cases(),
    Results = lists:foldl(fun(R, Acc) ->
                                  io:format(standard_error, "round ~b/~b~n", [R, Rounds]),
                                  [{Name, measure(Fun)} || {Name, _, Fun} <- Cases] ++ Acc
                          end, [], lists:seq(1, Rounds)),
    io:format("~-62s ~10s ~18s~n", ["case", "median", "min-max"]),
    [begin
         Vs = lists:sort([V || {N, V} <- Results, N =:= Name]),
         io:format("~-62s ~7.1f ~s ~6.1f-~.1f~n",
                   [Name, median(Vs), Unit, hd(Vs), lists:last(Vs)])
     end || {Name, Unit, _} <- Cases],
    ok.

median(Vs) -> lists:nth((length(Vs) + 1) div 2, Vs).

%% {Name, Unit, fun() -> {Calls, UnitsPerCall} with the work to time}.
cases() ->
    Max = 1048576,
    %% 17-byte frames, as the ack protocol's seed (Id:64, Len:32, 5 bytes).
    Ack = binary:copy(<<"idid", "idid", 5:32, "hello">>, ?CHUNK div 17),
    AckN = byte_size(Ack) div 17,
    %% 17-byte length-prefixed frames: 4-byte header, 13 bytes.
    Len = binary:copy(<<13:32, "hello, world!">>, ?CHUNK div 17),
    LenN = byte_size(Len) div 17,
    {ok, L4} = sluice_frame:new({length, 4}),
    AckSplit = fun(<<_:64, L:32, _:L/binary, R/binary>> = B) when L =< Max ->
                       At = 12 + L,
                       <<F:At/binary, _/binary>> = B,
                       {ok, F, R};
                  (<<_:64, L:32, _/binary>>) when L > Max -> {error, frame_too_large};
                  (_) -> more
               end,
    {ok, AckFramer} = sluice_frame:new({split, AckSplit}),
    %% Short lines, as the ping protocol's (seed 002): 5 and 15 bytes.
    Ping = binary:copy(<<"Ping\n">>, ?CHUNK div 5),
    PingN = byte_size(Ping) div 5,
    Line15 = binary:copy(<<"GET /key/12345\n">>, ?CHUNK div 15),
    Line15N = byte_size(Line15) div 15,
    {ok, Lf} = sluice_frame:new(line),
    NlPattern = binary:compile_pattern(<<"\n">>),
    {ok, Crlf} = sluice_frame:new({line, #{delimiter => crlf}}),
    Line15Crlf = binary:copy(<<"GET /key/1234\r\n">>, ?CHUNK div 15),
    %% One frame a chunk: a lock-step client's reads.
    OneLen = <<13:32, "hello, world!">>,
    %% A 4 MiB frame in 1 KiB and in 64 KiB pieces: the cost per byte must
    %% not depend on the number of pieces.
    Big = binary:copy(<<"0123456789abcdef">>, 4 * 1048576 div 16),
    BigStream = <<(byte_size(Big)):32, Big/binary>>,
    Pieces1K = pieces(BigStream, 1024),
    Pieces64K = pieces(BigStream, 65536),
    {ok, L4Big} = sluice_frame:new({length, 4, #{max => 8 * 1048576}}),
    [{"ack protocol's own walk (last), 17-byte frames, 256 KiB chunk", "ns/frame",
      fun() -> {AckN, fun() -> sluice_proto_ack:decode(last, Ack, Max, <<>>) end} end},
     {"ack protocol's own walk (each), 17-byte frames, 256 KiB chunk", "ns/frame",
      fun() -> {AckN, fun() -> sluice_proto_ack:decode(each, Ack, Max, <<>>) end} end},
     {"{length,4}, 17-byte frames, 256 KiB chunk", "ns/frame",
      fun() -> {LenN, fun() -> sluice_frame:decode(Len, L4) end} end},
     {"{split,Fun} cutting ack frames, 17-byte frames, 256 KiB chunk", "ns/frame",
      fun() -> {AckN, fun() -> sluice_frame:decode(Ack, AckFramer) end} end},
     {"line (lf), 5-byte lines (Ping), 256 KiB chunk", "ns/frame",
      fun() -> {PingN, fun() -> sluice_frame:decode(Ping, Lf) end} end},
     {"line (lf), 15-byte lines, 256 KiB chunk", "ns/frame",
      fun() -> {Line15N, fun() -> sluice_frame:decode(Line15, Lf) end} end},
     {"line (crlf), 15-byte lines, 256 KiB chunk", "ns/frame",
      fun() -> {Line15N, fun() -> sluice_frame:decode(Line15Crlf, Crlf) end} end},
     {"{length,4}, one 17-byte frame a chunk", "ns/call",
      fun() -> {1, fun() -> sluice_frame:decode(OneLen, L4) end} end},
     {"line (lf), one Ping a chunk", "ns/call",
      fun() -> {1, fun() -> sluice_frame:decode(<<"Ping\n">>, Lf) end} end},
     {"(binary:split/3, global, 7 bytes, no match)", "ns/call",
      fun() -> {1, fun() -> binary:split(<<"Ping 12">>, NlPattern, [global]) end} end},
     {"(binary:split/3, global, 8 bytes, no match)", "ns/call",
      fun() -> {1, fun() -> binary:split(<<"Ping 123">>, NlPattern, [global]) end} end},
     {"(binary:split/3, global, 15 bytes, one match)", "ns/call",
      fun() -> {1, fun() -> binary:split(<<"Ping 12\nPing 3">>, NlPattern, [global]) end} end},
     {"{length,4}, a 4 MiB frame in 1 KiB chunks", "ns/KiB",
      fun() -> {4096, fun() -> feed(Pieces1K, L4Big) end} end},
     {"{length,4}, a 4 MiB frame in 64 KiB chunks", "ns/KiB",
      fun() -> {4096, fun() -> feed(Pieces64K, L4Big) end} end}].

%% Each piece its own binary, as each read is.
pieces(Bin, Size) when byte_size(Bin) =< Size -> [binary:copy(Bin)];
pieces(Bin, Size) -> <<P:Size/binary, R/binary>> = Bin, [binary:copy(P) | pieces(R, Size)].

feed([], St) -> St;
feed([C | Cs], St) -> {ok, _, St2} = sluice_frame:decode(C, St), feed(Cs, St2).

%% Runs the case's work for about 0.3 s in a new process; ns per unit.
measure(Case) ->
    Self = self(),
    Pid = spawn(fun() ->
                        {Units, Work} = Case(),
                        _ = Work(),
                        Reps = reps(Work, 1),
                        {T, ok} = timer:tc(fun() -> loop(Work, Reps) end),
                        Self ! {self(), T * 1000 / (Reps * Units)}
                end),
    receive {Pid, V} -> V end.

%% Enough repetitions to take about 0.3 s.
reps(Work, N) ->
    {T, ok} = timer:tc(fun() -> loop(Work, N) end),
    case T < 30000 of
        true -> reps(Work, N * 2);
        false -> max(1, N * 10)
    end.

loop(_Work, 0) -> ok;
loop(Work, N) -> _ = Work(), loop(Work, N - 1).
