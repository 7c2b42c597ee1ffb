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
%% slowloris) is closed with reason `frame_timeout'. It costs no timer: the
%% time a partial frame began is noted when a read ends inside a new frame,
%% and checked when the next read still has not completed it; a client that
%% stops sending altogether is the idle timeout's business.
%%
%% The decoders never build a sub-binary per frame: the id is read as two
%% 32-bit integers (always immediates, unlike one 64-bit integer) and the
%% payload is skipped, so decoding a chunk allocates only the ack.
-module(sluice_proto_ack).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).
-export([decode/4]).

-export_type([mode/0]).

-type mode() :: each | last | counted.

-record(ack, {mode = last :: mode(),
              max = 1048576 :: non_neg_integer(),
              tail = <<>> :: binary(),
              frame_timeout = 30000 :: pos_integer() | infinity,
              %% monotonic ms when the partial frame in `tail' began
              since = 0 :: integer()}).

%% A partial frame this small is copied out of the chunk it came in, so that
%% an idle connection does not pin a whole read buffer.
-define(COPY_TAIL_BELOW, 4096).

-spec init(sluice:conn(), map() | list()) -> {ok, #ack{}} | {close, term()}.
init(_Conn, Opts) when is_list(Opts) ->
    init(_Conn, maps:from_list(Opts));
init(_Conn, Opts) ->
    Mode = maps:get(ack, Opts, last),
    Max = maps:get(max_frame, Opts, 1048576),
    FT = maps:get(frame_timeout, Opts, 30000),
    case lists:member(Mode, [each, last, counted]) andalso is_integer(Max) andalso Max >= 0
        andalso (FT =:= infinity orelse (is_integer(FT) andalso FT > 0)) of
        true -> {ok, #ack{mode = Mode, max = Max, frame_timeout = FT}};
        false -> {close, {bad_handler_opts, Opts}}
    end.

-spec handle_data(binary(), #ack{}) -> sluice_handler:result(#ack{}).
handle_data(Data, St = #ack{mode = Mode, max = Max, tail = Tail}) ->
    Buf = case Tail of
              <<>> -> Data;
              _ -> <<Tail/binary, Data/binary>>
          end,
    case decode(Mode, Buf, Max, <<>>) of
        {ok, Acks, <<>>} ->
            reply(Acks, St#ack{tail = <<>>});
        {ok, Acks, Rest} ->
            %% A partial frame is left: is it a new one, or the old one
            %% still not complete?
            New = Tail =:= <<>> orelse byte_size(Rest) < byte_size(Buf),
            case partial(New, St) of
                {ok, St2} -> reply(Acks, St2#ack{tail = keep(Rest)});
                timeout -> {close, frame_timeout, St}
            end;
        {error, Reason, <<>>} ->
            {close, {protocol_error, Reason}, St};
        {error, Reason, Acks} ->
            %% Ack what was whole before the bad header, then close.
            {reply_close, Acks, {protocol_error, Reason}, St}
    end.

reply(<<>>, St) -> {ok, St};
reply(Acks, St) -> {reply, Acks, St}.

partial(_New, St = #ack{frame_timeout = infinity}) ->
    {ok, St};
partial(true, St) ->
    {ok, St#ack{since = erlang:monotonic_time(millisecond)}};
partial(false, St = #ack{since = Since, frame_timeout = T}) ->
    case erlang:monotonic_time(millisecond) - Since > T of
        true -> timeout;
        false -> {ok, St}
    end.

keep(Rest) when byte_size(Rest) < ?COPY_TAIL_BELOW, byte_size(Rest) > 0 ->
    binary:copy(Rest);
keep(Rest) ->
    Rest.

%% @doc Decode every complete frame of `Buf'; returns the acks (appended to
%% `Acc'), and the bytes of the incomplete frame at the end.
-spec decode(mode(), binary(), non_neg_integer(), binary()) ->
          {ok, binary(), binary()} | {error, frame_too_large, binary()}.
decode(each, Buf, Max, Acc) -> each(Buf, Max, Acc);
decode(last, Buf, Max, Acc) -> last(Buf, Max, Acc, 0, 0, 0);
decode(counted, Buf, Max, Acc) -> counted(Buf, Max, Acc, 0, 0, 0).

each(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, Acc) when Len =< Max ->
    each(R, Max, <<Acc/binary, H:32, L:32>>);
each(Buf, Max, Acc) ->
    tail(Buf, Max, Acc).

last(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, Acc, _, _, N) when Len =< Max ->
    last(R, Max, Acc, H, L, N + 1);
last(Buf, Max, Acc, _H, _L, 0) ->
    tail(Buf, Max, Acc);
last(Buf, Max, Acc, H, L, _N) ->
    tail(Buf, Max, <<Acc/binary, H:32, L:32>>).

counted(<<H:32, L:32, Len:32, _:Len/binary, R/binary>>, Max, Acc, _, _, N) when Len =< Max ->
    counted(R, Max, Acc, H, L, N + 1);
counted(Buf, Max, Acc, _H, _L, 0) ->
    tail(Buf, Max, Acc);
counted(Buf, Max, Acc, H, L, N) ->
    tail(Buf, Max, <<Acc/binary, H:32, L:32, N:32>>).

tail(<<_:64, Len:32, _/binary>>, Max, Acc) when Len > Max ->
    {error, frame_too_large, Acc};
tail(Buf, _Max, Acc) ->
    {ok, Acc, Buf}.
