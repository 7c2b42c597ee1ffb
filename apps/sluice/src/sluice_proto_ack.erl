%% @doc The ack protocol of seed 001. Frames `Id:64, Len:32, Payload:Len'
%% are acknowledged by id:
%% <ul>
%%  <li>`each': one 8-byte ack per frame, in order;</li>
%%  <li>`last': one 8-byte ack per chunk read, with the id of the chunk's
%%      last complete frame (it covers every frame before it);</li>
%%  <li>`counted': like `last', plus a 32-bit count of the frames covered.</li>
%% </ul>
%% A Len above `max_frame' closes the connection as a protocol error before
%% anything is allocated for the frame; the frames before it in the same
%% read are acked first (`reply_close').
%%
%% `frame_timeout' (ms, default 30000, or infinity) bounds how long one frame
%% may take to arrive: a client trickling a frame a byte at a time (a
%% slowloris) is closed with reason `frame_timeout'. It costs no timer: when
%% a read ends inside a new frame the time is noted, and when a later read
%% completes no frame at all (the same frame is still partial) it is
%% checked; a client that stops sending altogether is the idle timeout's.
%%
%% The decoders never build a sub-binary per frame: the id is read as two
%% 32-bit integers (always immediates, unlike one 64-bit integer) and the
%% payload is skipped, so decoding a chunk allocates only the ack.
%%
%% Nor does a frame split across reads cost a copy: the protocol never needs
%% a payload, so what is kept between reads is either the few bytes of a
%% header (`{header, Bin}', under 12 bytes) or the id of the frame being read
%% and how many payload bytes are still to come (`{payload, Hi, Lo, Left}').
%% Joining the kept bytes to the next chunk instead would copy every chunk
%% of a pipelining client once more (a chunk almost always ends mid-frame),
%% and would pin a whole read buffer in memory for a large frame.
-module(sluice_proto_ack).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).
-export([decode/4]).

-export_type([mode/0]).

%% The small steps of every read, inlined (each was a call per read).
-compile({inline, [timed/2, result/2, partial/1, append/2]}).

-type mode() :: each | last | counted.
-type partial() :: none
                 | {header, binary()}
                 | {payload, 0..16#ffffffff, 0..16#ffffffff, pos_integer()}.

-record(ack, {mode = last :: mode(),
              max = 1048576 :: non_neg_integer(),
              partial = none :: partial(),
              frame_timeout = 30000 :: pos_integer() | infinity,
              %% monotonic ms when the frame in `partial' began
              since = 0 :: integer()}).

%% @doc Options (a map or a proplist): `ack' (`each', `last' (the default)
%% or `counted'), `max_frame' (bytes, default 1048576) and `frame_timeout'
%% (ms, default 30000, or `infinity'). Bad options close the connection
%% with `{bad_handler_opts, Opts}'.
-spec init(sluice:conn(), map() | list()) -> {ok, #ack{}} | {close, term()}.
init(Conn, Opts) when is_list(Opts) ->
    %% Read as proplists and Elixir's Keyword read it, as the listener's
    %% own options are: the first of a repeated key wins (`[{ack, each} |
    %% Defaults]'; maps:from_list/1 kept the last). What is not a pair is a
    %% bad option, not a crash of every connection.
    case lists:all(fun(O) -> is_tuple(O) andalso tuple_size(O) =:= 2 end, Opts) of
        true -> init(Conn, maps:from_list(lists:reverse(Opts)));
        false -> {close, {bad_handler_opts, Opts}}
    end;
init(_Conn, Opts) when not is_map(Opts) ->
    {close, {bad_handler_opts, Opts}};
init(_Conn, Opts) ->
    Mode = maps:get(ack, Opts, last),
    Max = maps:get(max_frame, Opts, 1048576),
    FT = maps:get(frame_timeout, Opts, 30000),
    case lists:member(Mode, [each, last, counted]) andalso is_integer(Max) andalso Max >= 0
        andalso (FT =:= infinity orelse (is_integer(FT) andalso FT > 0)) of
        true -> {ok, #ack{mode = Mode, max = Max, frame_timeout = FT}};
        false -> {close, {bad_handler_opts, Opts}}
    end.

%% @doc Acks for the frames the chunk completes, as the mode says; a frame
%% over `max_frame', or one slower than `frame_timeout', closes the
%% connection after the acks owed.
-spec handle_data(binary(), #ack{}) -> sluice_handler:result(#ack{}).
handle_data(Data, St = #ack{frame_timeout = infinity}) ->
    frames(Data, St);
handle_data(Data, St = #ack{partial = Before}) ->
    timed(Before, frames(Data, St)).

%% A read that completed a frame acks it, so a partial frame after a reply
%% is a new one; after a read with no reply it is the same frame as before
%% (unless there was none).
timed(_Before, {reply, Acks, St = #ack{partial = P}}) when P =/= none ->
    {reply, Acks, St#ack{since = erlang:monotonic_time(millisecond)}};
timed(none, {ok, St = #ack{partial = P}}) when P =/= none ->
    {ok, St#ack{since = erlang:monotonic_time(millisecond)}};
timed(_Before, {ok, St = #ack{partial = P, since = Since, frame_timeout = T}}) when P =/= none ->
    case erlang:monotonic_time(millisecond) - Since > T of
        true -> {close, frame_timeout, St};
        false -> {ok, St}
    end;
timed(_Before, Result) ->
    Result.

frames(Data, St = #ack{partial = none, mode = Mode, max = Max}) ->
    result(decode(Mode, Data, Max, <<>>), St);
frames(Data, St = #ack{partial = {header, Part}, max = Max}) ->
    Need = 12 - byte_size(Part),
    case Data of
        <<More:Need/binary, Rest/binary>> ->
            case <<Part/binary, More/binary>> of
                <<_:64, Len:32>> when Len > Max ->
                    {close, {protocol_error, frame_too_large}, St#ack{partial = none}};
                <<Hi:32, Lo:32, Len:32>> ->
                    payload(Hi, Lo, Len, Rest, St)
            end;
        _ ->
            {ok, St#ack{partial = {header, <<Part/binary, Data/binary>>}}}
    end;
frames(Data, St = #ack{partial = {payload, Hi, Lo, Left}}) ->
    payload(Hi, Lo, Left, Data, St).

%% Skip the rest of a split frame's payload; once it is whole, decode the
%% chunk's remaining frames as if it had begun the chunk.
payload(Hi, Lo, Left, Data, St = #ack{mode = Mode, max = Max}) ->
    case Data of
        <<_:Left/binary, Rest/binary>> ->
            result(continue(Mode, Rest, Max, Hi, Lo), St);
        _ ->
            {ok, St#ack{partial = {payload, Hi, Lo, Left - byte_size(Data)}}}
    end.

continue(each, Buf, Max, Hi, Lo) -> each(Buf, Max, <<Hi:32, Lo:32>>);
continue(last, Buf, Max, Hi, Lo) -> last(Buf, Max, <<>>, Hi, Lo, 1);
continue(counted, Buf, Max, Hi, Lo) -> counted(Buf, Max, <<>>, Hi, Lo, 1).

result({ok, <<>>, Rest}, St) ->
    {ok, St#ack{partial = partial(Rest)}};
result({ok, Acks, Rest}, St) ->
    {reply, Acks, St#ack{partial = partial(Rest)}};
result({error, Reason, <<>>}, St) ->
    {close, {protocol_error, Reason}, St#ack{partial = none}};
result({error, Reason, Acks}, St) ->
    %% Ack what was whole before the bad header, then close.
    {reply_close, Acks, {protocol_error, Reason}, St#ack{partial = none}}.

%% What to keep of an incomplete frame at the end of a chunk (see above).
partial(<<>>) ->
    none;
partial(<<Hi:32, Lo:32, Len:32, Payload/binary>>) ->
    {payload, Hi, Lo, Len - byte_size(Payload)};
partial(Header) ->
    {header, binary:copy(Header)}.

%% @doc Decode every complete frame of `Buf'; returns the acks (appended to
%% `Acc'), and the bytes of the incomplete frame at the end.
-spec decode(mode(), binary(), non_neg_integer(), binary()) ->
          {ok, binary(), binary()} | {error, frame_too_large, binary()}.
decode(each, Buf, Max, Acc) -> each(Buf, Max, Acc);
decode(last, Buf, Max, Acc) -> last(Buf, Max, Acc, 0, 0, 0);
decode(counted, Buf, Max, Acc) -> counted(Buf, Max, Acc, 0, 0, 0).

%% Frames longer than Max must stop the decoding (tail/3 reports them),
%% but none can be whole in a Buf no longer than Max + 12, which is every
%% read at the default sizes (a read is at most `buffer', 256 KiB, and
%% `max_frame' is 1 MiB): those are decoded without comparing each Len to
%% Max (see walk/2).
each(Buf, Max, Acc) when byte_size(Buf) - 12 =< Max ->
    each_all(Buf, Max, Acc);
each(Buf, Max, Acc) ->
    each_max(Buf, Max, Acc).

%% (Max is only passed on to tail/3 here.)
each_all(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, <<>>) ->
    %% The first ack is made, not appended to <<>>: an appended binary is
    %% a writable one, which the port must make read-only (and trim) when
    %% it is sent; one made here is a small heap binary.
    each_all(R, Max, <<H:32, L:32>>);
each_all(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, Acc) ->
    each_all(R, Max, <<Acc/binary, H:32, L:32>>);
each_all(Buf, Max, Acc) ->
    tail(Buf, Max, Acc).

each_max(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, <<>>) when Len =< Max ->
    each_max(R, Max, <<H:32, L:32>>);
each_max(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, Acc) when Len =< Max ->
    each_max(R, Max, <<Acc/binary, H:32, L:32>>);
each_max(Buf, Max, Acc) ->
    tail(Buf, Max, Acc).

%% `last' and `counted' need only the last frame's id, so the walk over
%% the chunk reads nothing but each Len; the last whole frame's id is read
%% once at the end. The walk carries only the last Len: where that frame
%% begins follows from what is left after it, byte_size(Buf) -
%% byte_size(R) - 12 - LastLen, so no offset is summed per frame; and it
%% takes two frames per step. Each of these was measured faster on the
%% pipelined cells, where this walk is most of the server's work
%% (bench/README.md, "The ack codec's walk").
last(Buf, Max, Acc, Hi, Lo, N0) ->
    case walk(Buf, Max) of
        {-1, R} when N0 =:= 0 -> tail(R, Max, Acc);
        {-1, R} -> tail(R, Max, <<Acc/binary, Hi:32, Lo:32>>);
        {LastLen, R} ->
            At = byte_size(Buf) - byte_size(R) - 12 - LastLen,
            <<_:At/binary, Id:8/binary, _/binary>> = Buf,
            tail(R, Max, append(Acc, Id))
    end.

%% The one ack of a read is the frame's id as it is (see each/3: no
%% writable binary for the port to convert).
append(<<>>, Id) -> Id;
append(Acc, Id) -> <<Acc/binary, Id/binary>>.

counted(Buf, Max, Acc, Hi, Lo, N0) ->
    case walk_count(Buf, Max) of
        {_, 0, R} when N0 =:= 0 -> tail(R, Max, Acc);
        {_, 0, R} -> tail(R, Max, <<Acc/binary, Hi:32, Lo:32, N0:32>>);
        {LastLen, N, R} ->
            At = byte_size(Buf) - byte_size(R) - 12 - LastLen,
            <<_:At/binary, Id:8/binary, _/binary>> = Buf,
            tail(R, Max, case Acc of
                             <<>> -> <<Id/binary, (N0 + N):32>>;
                             _ -> <<Acc/binary, Id/binary, (N0 + N):32>>
                         end)
    end.

%% Returns the Len of the last whole frame (-1: none) and what follows the
%% whole frames. As in each/3, a Buf no longer than Max + 12 holds no whole
%% frame longer than Max, and is walked without comparing: 45.5 machine
%% instructions a 13-byte frame against 55.5 comparing each Len with Max,
%% a record field whose type the compiler cannot know (a literal bound
%% costs 49.4; callgrind, bench/README.md "The ack codec's walk").
walk(Buf, Max) when byte_size(Buf) - 12 =< Max -> walk_all(Buf, -1);
walk(Buf, Max) -> walk_max(Buf, Max, -1).

walk_all(<<_:64, L1:32, _:L1/binary, _:64, Len:32, _:Len/binary, R/binary>>, _Last) ->
    walk_all(R, Len);
walk_all(<<_:64, Len:32, _:Len/binary, R/binary>>, _Last) ->
    {Len, R};
walk_all(R, Last) ->
    {Last, R}.

walk_max(<<_:64, L1:32, _:L1/binary, _:64, Len:32, _:Len/binary, R/binary>>, Max, _Last)
  when L1 =< Max, Len =< Max ->
    walk_max(R, Max, Len);
walk_max(<<_:64, Len:32, _:Len/binary, R/binary>>, Max, _Last) when Len =< Max ->
    {Len, R};
walk_max(R, _Max, Last) ->
    {Last, R}.

%% The same, also counting the whole frames.
walk_count(Buf, Max) when byte_size(Buf) - 12 =< Max -> walk_count_all(Buf, -1, 0);
walk_count(Buf, Max) -> walk_count_max(Buf, Max, -1, 0).

walk_count_all(<<_:64, L1:32, _:L1/binary, _:64, Len:32, _:Len/binary, R/binary>>, _Last, N) ->
    walk_count_all(R, Len, N + 2);
walk_count_all(<<_:64, Len:32, _:Len/binary, R/binary>>, _Last, N) ->
    {Len, N + 1, R};
walk_count_all(R, Last, N) ->
    {Last, N, R}.

walk_count_max(<<_:64, L1:32, _:L1/binary, _:64, Len:32, _:Len/binary, R/binary>>, Max, _Last, N)
  when L1 =< Max, Len =< Max ->
    walk_count_max(R, Max, Len, N + 2);
walk_count_max(<<_:64, Len:32, _:Len/binary, R/binary>>, Max, _Last, N) when Len =< Max ->
    {Len, N + 1, R};
walk_count_max(R, _Max, Last, N) ->
    {Last, N, R}.

tail(<<_:64, Len:32, _/binary>>, Max, Acc) when Len > Max ->
    {error, frame_too_large, Acc};
tail(Buf, _Max, Acc) ->
    {ok, Acc, Buf}.
