%% @doc Hostile and well-behaved clients of the ack protocol, for the abuse
%% suites and `bin/sluice soak': each opens its own loopback connection,
%% does one thing a server must survive, and says how the server ended the
%% connection. `closed' is a FIN (every byte the server sent was readable),
%% `econnreset' a reset, `timeout' nothing within the time given.
%%
%% Frames are `Id:64, Len:32, Payload'; with `ack => each' the server
%% answers each frame with its Id, so a client can tell exactly which of its
%% frames were processed.
-module(sluice_abuse_client).

-export([connect/1, connect/2, frame/2, ids/2, frames/2, recv_until_end/2,
         pipeline/3, oversize/3, random_bytes/3, one_byte_writes/2, trickle/3,
         reset_mid_frame/1, storm/3, half_close/2, silent/2, never_read/4]).

-export_type([ending/0]).

-type ending() :: closed | econnreset | timeout | {error, term()}.
-type port_spec() :: inet:port_number() | {inet:ip_address(), inet:port_number()}.

-define(SERVER, {127, 0, 0, 1}).

%% @doc A passive binary connection to the server (loopback unless a
%% {IP, Port} is given).
-spec connect(port_spec()) -> gen_tcp:socket().
connect(Port) ->
    connect(Port, []).

-spec connect(port_spec(), [gen_tcp:connect_option()]) -> gen_tcp:socket().
connect({IP, Port}, Extra) ->
    {ok, S} = gen_tcp:connect(IP, Port, Extra ++ [binary, {active, false}, {packet, raw},
                                                  {nodelay, true}], 5000),
    S;
connect(Port, Extra) ->
    connect({?SERVER, Port}, Extra).

-spec frame(binary(), binary()) -> binary().
frame(Id, Payload) when byte_size(Id) =:= 8 ->
    <<Id/binary, (byte_size(Payload)):32, Payload/binary>>.

%% @doc N distinct ids starting at First (the number is in the last bytes).
-spec ids(non_neg_integer(), pos_integer()) -> [binary()].
ids(First, N) ->
    [<<"id", I:48>> || I <- lists:seq(First, First + N - 1)].

%% @doc One frame per id, all with the same payload size.
-spec frames([binary()], non_neg_integer()) -> binary().
frames(Ids, PayloadSize) ->
    Payload = binary:copy(<<"p">>, PayloadSize),
    iolist_to_binary([frame(Id, Payload) || Id <- Ids]).

%% @doc Everything the server sends until it ends the connection (or
%% nothing comes for Timeout ms); closes the socket.
-spec recv_until_end(gen_tcp:socket(), timeout()) -> {binary(), ending()}.
recv_until_end(S, Timeout) ->
    recv_until_end(S, Timeout, []).

recv_until_end(S, Timeout, Acc) ->
    case gen_tcp:recv(S, 0, Timeout) of
        {ok, Data} ->
            recv_until_end(S, Timeout, [Data | Acc]);
        {error, Why} ->
            _ = gen_tcp:close(S),
            {iolist_to_binary(lists:reverse(Acc)), ending(Why)}
    end.

ending(closed) -> closed;
ending(econnreset) -> econnreset;
ending(timeout) -> timeout;
ending(Why) -> {error, Why}.

%% @doc A well-behaved client on an open socket: N frames in one write, all
%% N acks back in order. The bystander check of the abuse tests.
-spec pipeline(gen_tcp:socket(), pos_integer(), non_neg_integer()) -> ok | {error, term()}.
pipeline(S, N, PayloadSize) ->
    Ids = ids(erlang:unique_integer([positive]) band 16#ffffff * 1000, N),
    case gen_tcp:send(S, frames(Ids, PayloadSize)) of
        ok ->
            Expected = iolist_to_binary(Ids),
            case gen_tcp:recv(S, byte_size(Expected), 5000) of
                {ok, Expected} -> ok;
                {ok, Other} -> {error, {wrong_acks, byte_size(Other)}};
                {error, _} = E -> E
            end;
        {error, _} = E ->
            E
    end.

%% @doc Good frames, then a header announcing Len = Max + 1 and some of its
%% payload. The server should ack the good frames and close with FIN.
-spec oversize(port_spec(), non_neg_integer(), non_neg_integer()) ->
          #{acks := binary(), expected := binary(), ending := ending()}.
oversize(Port, Good, Max) ->
    S = connect(Port),
    Ids = ids(1, Good),
    _ = gen_tcp:send(S, [frames(Ids, 3), <<"oversize", (Max + 1):32>>,
                         binary:copy(<<"x">>, 1000)]),
    {Acks, End} = recv_until_end(S, 5000),
    #{acks => Acks, expected => iolist_to_binary(Ids), ending => End}.

%% @doc N random bytes; the server should end the connection with FIN.
-spec random_bytes(port_spec(), pos_integer(), timeout()) -> #{acks := binary(), ending := ending()}.
random_bytes(Port, N, Timeout) ->
    S = connect(Port),
    _ = gen_tcp:send(S, crypto_free_random(N)),
    {Acks, End} = recv_until_end(S, Timeout),
    #{acks => Acks, ending => End}.

%% rand:bytes/1 is OTP 24+; keep the dependency to stdlib.
crypto_free_random(N) ->
    rand:bytes(N).

%% @doc N frames written one byte per write (as fast as the socket takes
%% them): legal, so every frame must be acked; then close.
-spec one_byte_writes(port_spec(), pos_integer()) -> #{acks := binary(), expected := binary()}.
one_byte_writes(Port, N) ->
    S = connect(Port),
    Ids = ids(1, N),
    Stream = frames(Ids, 2),
    _ = [gen_tcp:send(S, <<B>>) || <<B>> <= Stream],
    Expected = iolist_to_binary(Ids),
    Acks = case gen_tcp:recv(S, byte_size(Expected), 5000) of
               {ok, A} -> A;
               {error, _} -> <<>>
           end,
    _ = gen_tcp:close(S),
    #{acks => Acks, expected => Expected}.

%% @doc One frame trickled a byte every IntervalMs (a slowloris): returns
%% how many bytes went out before the server ended it, and after how long.
-spec trickle(port_spec(), non_neg_integer(), pos_integer()) ->
          #{sent := non_neg_integer(), ms := integer(), acks := binary(), ending := ending()}.
trickle(Port, PayloadSize, IntervalMs) ->
    S = connect(Port),
    T0 = erlang:monotonic_time(millisecond),
    Stream = frame(<<"trickled">>, binary:copy(<<"t">>, PayloadSize)),
    %% Then whatever else comes within a second (the ack of a completed
    %% frame, or the server's close); a server that keeps the connection
    %% open ends as `timeout'.
    {Sent, Got, {Acks, End}} = trickle_bytes(S, Stream, IntervalMs, 0, []),
    #{sent => Sent, ms => erlang:monotonic_time(millisecond) - T0,
      acks => iolist_to_binary([lists:reverse(Got), Acks]), ending => End}.

trickle_bytes(S, <<>>, _Interval, Sent, Got) ->
    {Sent, Got, recv_until_end(S, 1000)};
trickle_bytes(S, <<B, Rest/binary>>, Interval, Sent, Got) ->
    case gen_tcp:send(S, <<B>>) of
        ok ->
            %% Waiting on the socket rather than sleeping sees a close (or
            %% an ack) from the server at once.
            case gen_tcp:recv(S, 0, Interval) of
                {error, timeout} -> trickle_bytes(S, Rest, Interval, Sent + 1, Got);
                {ok, Data} -> trickle_bytes(S, Rest, Interval, Sent + 1, [Data | Got]);
                {error, Why} -> _ = gen_tcp:close(S), {Sent + 1, Got, {<<>>, ending(Why)}}
            end;
        {error, Why} ->
            _ = gen_tcp:close(S),
            {Sent, Got, {<<>>, ending(Why)}}
    end.

%% @doc Half a frame, then a reset (SO_LINGER 0 close).
-spec reset_mid_frame(port_spec()) -> ok.
reset_mid_frame(Port) ->
    S = connect(Port),
    _ = gen_tcp:send(S, <<"resetme!", 100:32, "half">>),
    timer:sleep(10),
    ok = inet:setopts(S, [{linger, {true, 0}}]),
    gen_tcp:close(S).

%% @doc N connects closed at once, every other one with a reset.
-spec storm(port_spec(), pos_integer(), pos_integer()) -> #{connected := non_neg_integer()}.
storm(Port, N, Parallel) ->
    Parent = self(),
    Per = N div Parallel,
    Pids = [spawn_link(fun() -> Parent ! {storm, self(), storm_loop(Port, Per, 0)} end)
            || _ <- lists:seq(1, Parallel)],
    #{connected => lists:sum([receive {storm, P, C} -> C end || P <- Pids])}.

storm_loop(_Port, 0, Connected) ->
    Connected;
storm_loop(Port, N, Connected) ->
    case catch connect(Port) of
        S when is_port(S) ->
            _ = case N rem 2 of
                    0 -> inet:setopts(S, [{linger, {true, 0}}]);
                    1 -> ok
                end,
            _ = gen_tcp:close(S),
            storm_loop(Port, N - 1, Connected + 1);
        _ ->
            storm_loop(Port, N - 1, Connected)
    end.

%% @doc N frames, then shutdown(write) before reading anything: a half-
%% closed client is owed every ack, then FIN.
-spec half_close(port_spec(), pos_integer()) ->
          #{acks := binary(), expected := binary(), ending := ending()}.
half_close(Port, N) ->
    S = connect(Port, [{exit_on_close, false}]),
    Ids = ids(1, N),
    _ = gen_tcp:send(S, frames(Ids, 10)),
    ok = gen_tcp:shutdown(S, write),
    {Acks, End} = recv_until_end(S, 5000),
    #{acks => Acks, expected => iolist_to_binary(Ids), ending => End}.

%% @doc Connects and says nothing; returns how long until the server ended
%% the connection.
-spec silent(port_spec(), timeout()) -> #{ms := integer(), ending := ending()}.
silent(Port, Timeout) ->
    S = connect(Port),
    T0 = erlang:monotonic_time(millisecond),
    {_, End} = recv_until_end(S, Timeout),
    #{ms => erlang:monotonic_time(millisecond) - T0, ending => End}.

%% @doc A client that writes up to Bytes of small frames and never reads its
%% acks, for at most Ms: returns how much it got written (a server with
%% back-pressure stops reading, so this stays far below Bytes when the acks
%% outgrow the socket buffers). The socket is returned open, unread.
-spec never_read(port_spec(), pos_integer(), non_neg_integer(), pos_integer()) ->
          {gen_tcp:socket(), non_neg_integer()}.
never_read(Port, Bytes, PayloadSize, Ms) ->
    %% A fixed receive buffer: left to the kernel it would grow to tens of
    %% megabytes and soak up the acks that are meant to hold the server back.
    S = connect(Port, [{send_timeout, 200}, {send_timeout_close, false}, {recbuf, 65536}]),
    Chunk = frames(ids(1, 65536 div (12 + PayloadSize)), PayloadSize),
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    {S, never_read_loop(S, Chunk, Bytes, Deadline, 0)}.

never_read_loop(S, Chunk, Bytes, Deadline, Sent) when Sent < Bytes ->
    case erlang:monotonic_time(millisecond) < Deadline of
        false ->
            Sent;
        true ->
            case gen_tcp:send(S, Chunk) of
                ok -> never_read_loop(S, Chunk, Bytes, Deadline, Sent + byte_size(Chunk));
                {error, timeout} -> never_read_loop(S, Chunk, Bytes, Deadline, Sent);
                {error, _} -> Sent
            end
    end;
never_read_loop(_S, _Chunk, _Bytes, _Deadline, Sent) ->
    Sent.
