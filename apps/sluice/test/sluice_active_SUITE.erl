%% Delivery modes (`active' option): every mode delivers every byte, in
%% order, to echo and to the ack protocol; the flow-controlled modes (false,
%% once, N) keep the connection process's mailbox bounded when a client
%% floods it, and `true' (documented as unbounded) shows that the probe can
%% see a growing mailbox.
-module(sluice_active_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([echo_returns_every_byte_in_order/1,
         ack_each_returns_every_id_in_order/1,
         flood_echo_keeps_mailbox_bounded/1,
         flood_ack_keeps_mailbox_bounded/1,
         flood_without_flow_control_grows_mailbox/1,
         adaptive_grant_stops_running_out_while_the_client_reads/1,
         adaptive_grant_suits_a_lockstep_client/1,
         a_running_grant_hands_chunks_over_unclassified/1,
         once_sizes_its_buffer_to_the_reads/1]).

-define(STREAM_BYTES, 2 * 1024 * 1024).
%% Messages a connection may hold beyond its active count: tcp_passive and
%% the driver's answers to the sends in flight.
-define(SLACK, 10).
-define(FLOOD_MS, 1000).
-define(FRAMES_PER_CHUNK, 15420).   % 17-byte frames in a 256 KiB read

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}].

%% Where the backends differ it shows here: with the inet driver `true'
%% lets the driver fill the mailbox; with the socket backend the connection
%% process reads for itself, so `true' is flow-controlled as well (as N =
%% 100, sluice_transport_socket).
groups() ->
    InOrder = [echo_returns_every_byte_in_order, ack_each_returns_every_id_in_order],
    Bounded = [flood_echo_keeps_mailbox_bounded, flood_ack_keeps_mailbox_bounded],
    Modes = [{group, G} || G <- [active_false, active_once, active_1, active_100,
                                 active_adaptive]],
    [{inet, [], Modes ++ [{group, active_true_unbounded},
                          once_sizes_its_buffer_to_the_reads,
                          adaptive_grant_stops_running_out_while_the_client_reads,
                          adaptive_grant_suits_a_lockstep_client,
                          a_running_grant_hands_chunks_over_unclassified]},
     {socket, [], Modes ++ [{group, active_true}, adaptive_grant_suits_a_lockstep_client]},
     {active_false, [], InOrder ++ Bounded},
     {active_once, [], InOrder ++ Bounded},
     {active_1, [], InOrder ++ Bounded},
     {active_100, [], InOrder ++ Bounded},
     {active_adaptive, [], InOrder ++ Bounded},
     {active_true, [], InOrder ++ Bounded},
     {active_true_unbounded, [], InOrder ++ [flood_without_flow_control_grows_mailbox]}].

init_per_suite(Config) ->
    {ok, Apps} = application:ensure_all_started(sluice),
    [{apps, Apps} | Config].

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) when Group =:= inet; Group =:= socket ->
    sluice_test_lib:init_backend(Group, Config);
init_per_group(Group, Config) ->
    [{active, mode(Group)} | Config].

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

mode(active_false) -> false;
mode(active_once) -> once;
mode(active_1) -> 1;
mode(active_100) -> 100;
mode(active_adaptive) -> adaptive;
mode(active_true) -> true;
mode(active_true_unbounded) -> true.

init_per_testcase(Case, Config) when Case =:= adaptive_grant_stops_running_out_while_the_client_reads;
                                    Case =:= adaptive_grant_suits_a_lockstep_client;
                                    Case =:= a_running_grant_hands_chunks_over_unclassified;
                                    Case =:= once_sizes_its_buffer_to_the_reads ->
    [{name, {?MODULE, Case}} | Config];
init_per_testcase(Case, Config) ->
    Seed = sluice_test_lib:seed_rand(),
    ct:log("rand seed ~p", [Seed]),
    Active = ?config(active, Config),
    Name = {?MODULE, Case, Active},
    Handler = case Case of
                  echo_returns_every_byte_in_order -> {sluice_proto_echo, []};
                  flood_echo_keeps_mailbox_bounded -> {sluice_proto_echo, []};
                  flood_without_flow_control_grows_mailbox -> {sluice_proto_echo, []};
                  _ -> {sluice_proto_ack, #{ack => each}}
              end,
    %% Small kernel buffers for the floods, so that a client that does not
    %% read pushes back on the server within a few hundred kilobytes.
    SocketOpts = case atom_to_list(Case) of
                     "flood" ++ _ -> [{sndbuf, 8192}];
                     _ -> []
                 end,
    sluice_test_lib:start_listener(Name, #{active => Active, handler => Handler,
                                           socket_opts => SocketOpts}),
    [{name, Name}, {port, sluice_test_lib:port(Name)} | Config].

end_per_testcase(Case, Config) when Case =:= adaptive_grant_stops_running_out_while_the_client_reads;
                                   Case =:= adaptive_grant_suits_a_lockstep_client;
                                   Case =:= a_running_grant_hands_chunks_over_unclassified ->
    [sluice_test_lib:stop_listener({?config(name, Config), M}) || M <- [10, adaptive, once]],
    ok;
end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%% A pipelining client that keeps more reads in flight than a grant of 10
%% allows (here at most 24 reads' worth of frames unacknowledged, as the
%% load engine's window does) makes the driver run out of grant and go
%% passive again and again (each time the socket leaves the schedulers'
%% poll set). The adaptive grant grows instead, each time it runs out, until
%% the client's window fits: then it does not run out any more. Counted:
%% the `tcp_passive' messages the connection process receives in the first
%% and second half of the same traffic.
%%
%% Whether a fixed 10 runs out at all is up to the schedulers: the driver
%% must deliver 10 reads before the connection has handled 5, and with
%% the machine busy elsewhere the two take turns and it never does (seen
%% once in a loaded run: 0 and 0). Then nothing was measured, and the
%% traffic is sent again, at most twice more; the comparison itself is
%% never retried.
adaptive_grant_stops_running_out_while_the_client_reads(Config) ->
    {Fixed, Adaptive} = grant_run_outs(Config, 3),
    %% On a quiet machine the adaptive grant still runs out a few times
    %% while it grows (seen: 4 against fixed 10's 24): far fewer, not none.
    ?assert(Adaptive * 4 =< Fixed, {Fixed, Adaptive}).

%% The second half's passives for a fixed 10 and adaptive, from the first
%% of Attempts in which the fixed grant ran out at least 4 times.
grant_run_outs(Config, Attempts) ->
    Counts = [{Mode, passives(Config, Mode)} || Mode <- [10, adaptive]],
    ct:log("tcp_passive messages in the first and second half of the same traffic: ~p",
           [Counts]),
    [{10, {_, Fixed}}, {adaptive, {_, Adaptive}}] = Counts,
    if
        Fixed >= 4 ->
            {Fixed, Adaptive};
        Attempts > 1 ->
            [sluice_test_lib:stop_listener({?config(name, Config), M}) || M <- [10, adaptive]],
            grant_run_outs(Config, Attempts - 1);
        true ->
            ct:fail({fixed_grant_never_ran_out, Counts})
    end.

%% A lock-step client (one frame, wait for its ack, repeat) sends short
%% reads: the adaptive grant grows for them (sluice_conn:top_up/3) and is
%% topped up far less often than a fixed 10 (every 5 round trips), always
%% with a grant of chunks: no read is granted alone (`once'), which the
%% adaptive mode did on inet until single reads stopped paying
%% (bench/README.md, "Lock-step: single reads, removed"). Counted: the
%% connection's calls to the transport's activate/2 over the same 400
%% round trips.
adaptive_grant_suits_a_lockstep_client(Config) ->
    Modes = [{Mode, calls(Config, Mode, 400, activate)} || Mode <- [10, adaptive]],
    ct:log("activate/2 modes over 400 lock-step round trips: ~p", [Modes]),
    [{10, Fixed}, {adaptive, Adaptive}] = Modes,
    ?assert(length(Fixed) >= 60, Modes),
    ?assert(length(Adaptive) * 3 =< length(Fixed), Modes),
    ?assert(lists:all(fun is_integer/1, Adaptive), Modes).

%% Under a running grant (`adaptive', the default, or N) the inet
%% transport names its chunks (data_tag/1) and the loop hands them to the
%% handler without classify/2 (450 instructions a lock-step round trip);
%% with `once' every chunk still goes through classify/2, which sizes the
%% next read's buffer. Counted: the messages the connection gave
%% classify/2 over the same 200 round trips, each answered with its id.
a_running_grant_hands_chunks_over_unclassified(Config) ->
    Classified = [{Mode, [element(1, Msg) || Msg <- calls(Config, Mode, 200, classify)]}
                  || Mode <- [adaptive, once]],
    ct:log("messages classified over 200 lock-step round trips: ~p", [Classified]),
    [{adaptive, Grant}, {once, Once}] = Classified,
    ?assertEqual([], [tcp || tcp <- Grant], Classified),
    ?assert(length([tcp || tcp <- Once]) >= 200, Classified).

%% `once' on inet re-arms after every read with a buffer sized to the last
%% read (twice it, in powers of two from 512 bytes): a client's 3,000-byte
%% requests are read whole (one chunk each after the first), and an idle
%% connection holds that buffer in the driver, not the whole 256 KiB read
%% buffer it used to (262,209 bytes of binary per idle connection before).
once_sizes_its_buffer_to_the_reads(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{active => once, handler => {sluice_proto_echo, []}}),
    Port = sluice_test_lib:port(Name),
    {ok, S} = sluice_test_lib:connect(Port),
    Msg = binary:copy(<<"x">>, 3000),
    [begin ok = gen_tcp:send(S, Msg), {ok, _} = gen_tcp:recv(S, 3000, 2000) end
     || _ <- lists:seq(1, 100)],
    #{messages := Chunks} = sluice:info(Name),
    ct:log("chunks for 100 requests of 3,000 bytes: ~b", [Chunks]),
    ?assert(Chunks =< 102, Chunks),
    ok = gen_tcp:close(S),
    sluice_test_lib:wait_info(Name, connections, 0, 5000),
    erlang:garbage_collect(),
    Before = erlang:memory(binary),
    Idle = [begin
                {ok, C} = sluice_test_lib:connect(Port),
                ok = gen_tcp:send(C, <<"hello">>),
                {ok, <<"hello">>} = gen_tcp:recv(C, 5, 2000),
                C
            end || _ <- lists:seq(1, 50)],
    timer:sleep(200),
    PerConn = (erlang:memory(binary) - Before) div 50,
    ct:log("binary memory per idle active-once connection: ~b bytes", [PerConn]),
    ?assert(PerConn < 8192, PerConn),
    [gen_tcp:close(C) || C <- Idle],
    ok.

%% What the connection gave its transport's Fun over RoundTrips lock-step
%% round trips: the modes it asked of activate/2, the messages it passed
%% to classify/2.
calls(Config, Mode, RoundTrips, Fun) ->
    Name = {?config(name, Config), Mode},
    sluice_test_lib:start_listener(Name, #{active => Mode,
                                           handler => {sluice_proto_ack, #{ack => each}}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = gen_tcp:send(S, sluice_test_lib:frame(<<"warmup00">>, <<>>)),
    {ok, <<"warmup00">>} = gen_tcp:recv(S, 8, 2000),
    [Conn] = sluice_test_lib:conn_pids(Name),
    T = sluice_transport:module(sluice_test_lib:transport()),
    erlang:trace_pattern({T, Fun, 2}, true, [global]),
    1 = erlang:trace(Conn, true, [call]),
    [begin
         Id = <<I:64>>,
         ok = gen_tcp:send(S, sluice_test_lib:frame(Id, <<"x">>)),
         {ok, Id} = gen_tcp:recv(S, 8, 2000)
     end || I <- lists:seq(1, RoundTrips)],
    _ = (catch erlang:trace(Conn, false, [call])),
    erlang:trace_pattern({T, Fun, 2}, false, [global]),
    ok = gen_tcp:close(S),
    traced(Conn, T, Fun, []).

traced(Conn, T, Fun, Acc) ->
    receive
        {trace, Conn, call, {T, activate, [_, M]}} when Fun =:= activate ->
            traced(Conn, T, Fun, [M | Acc]);
        {trace, Conn, call, {T, classify, [Msg, _]}} when Fun =:= classify ->
            traced(Conn, T, Fun, [Msg | Acc])
    after 200 -> lists:reverse(Acc)
    end.

-define(WINDOW_CHUNKS, 24).
-define(CHUNKS, 400).

passives(Config, Mode) ->
    Name = {?config(name, Config), Mode},
    sluice_test_lib:start_listener(Name, #{active => Mode,
                                           handler => {sluice_proto_ack, #{ack => counted}}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    %% One round trip, so that the connection process exists.
    ok = gen_tcp:send(S, sluice_test_lib:frame(<<"warmup00">>, <<>>)),
    {ok, <<"warmup00", 1:32>>} = gen_tcp:recv(S, 12, 2000),
    [Conn] = sluice_test_lib:conn_pids(Name),
    1 = erlang:trace(Conn, true, ['receive']),
    Writer = self(),
    Reader = spawn_link(fun() -> count_acks(S, Writer, 0, <<>>) end),
    Chunk = binary:copy(sluice_test_lib:frame(<<"frame000">>, <<"abcde">>), ?FRAMES_PER_CHUNK),
    Half = ?CHUNKS div 2,
    Acked1 = write(S, Chunk, Half, 0, 0),
    First = count_passives(Conn, 0, 0),
    _ = write(S, Chunk, Half, Half * ?FRAMES_PER_CHUNK, Acked1),
    ok = gen_tcp:shutdown(S, write),
    receive {Reader, done} -> ok after 30000 -> error(reader_stuck) end,
    _ = (catch erlang:trace(Conn, false, ['receive'])),
    {First, count_passives(Conn, 0, 500)}.

%% Send N chunks, never more than ?WINDOW_CHUNKS of frames unacknowledged;
%% returns the frames acknowledged so far.
write(_S, _Chunk, 0, _Sent, Acked) ->
    Acked;
write(S, Chunk, N, Sent, Acked) when Sent - Acked >= ?WINDOW_CHUNKS * ?FRAMES_PER_CHUNK ->
    receive {acked, A} -> write(S, Chunk, N, Sent, A) after 10000 -> error(no_acks) end;
write(S, Chunk, N, Sent, Acked) ->
    ok = gen_tcp:send(S, Chunk),
    Acked2 = receive {acked, A} -> A after 0 -> Acked end,
    write(S, Chunk, N - 1, Sent + ?FRAMES_PER_CHUNK, Acked2).

%% counted acks: Id:64, Count:32 frames covered; tells the writer the total.
count_acks(S, Writer, Total, Buf) ->
    case gen_tcp:recv(S, 0, 30000) of
        {ok, Data} ->
            {Total2, Rest} = acks(<<Buf/binary, Data/binary>>, Total),
            Writer ! {acked, Total2},
            count_acks(S, Writer, Total2, Rest);
        {error, _} ->
            Writer ! {self(), done}
    end.

acks(<<_:64, N:32, Rest/binary>>, Total) -> acks(Rest, Total + N);
acks(Rest, Total) -> {Total, Rest}.

%% The passives traced so far (waiting Wait ms for more once none is
%% queued).
count_passives(Conn, N, Wait) ->
    receive
        {trace, Conn, 'receive', {tcp_passive, _}} -> count_passives(Conn, N + 1, Wait);
        {trace, Conn, 'receive', _} -> count_passives(Conn, N, Wait)
    after Wait -> N
    end.

%%% ------------------------------------------------------------------

%% ~2 MB written in random-size pieces (1 byte to 64 KiB) to an echo
%% listener come back byte for byte, in order, and nothing more; the
%% listener counts every byte in and out.
echo_returns_every_byte_in_order(Config) ->
    Name = ?config(name, Config),
    Data = rand:bytes(?STREAM_BYTES),
    {ok, S} = sluice_test_lib:connect(?config(port, Config)),
    Sender = send_in_background(S, sluice_test_lib:random_split(Data, 1, 65536)),
    Got = sluice_test_lib:recv_exactly(S, byte_size(Data), 20000),
    wait_sent(Sender),
    same_bytes(Data, Got),
    ok = gen_tcp:close(S),
    sluice_test_lib:wait_info(Name, connections, 0, 5000),
    #{bytes_in := In, bytes_out := Out} = sluice:info(Name),
    ?assertEqual({byte_size(Data), byte_size(Data)}, {In, Out}).

%% ~2 MB of ack frames (random payload sizes, cut at random places, so
%% frames straddle writes) on an `ack => each' listener: exactly one ack per
%% frame, carrying its id, in the order sent.
ack_each_returns_every_id_in_order(Config) ->
    {Ids, Stream} = frames_of_about(?STREAM_BYTES),
    {ok, S} = sluice_test_lib:connect(?config(port, Config)),
    Sender = send_in_background(S, sluice_test_lib:random_split(Stream, 1, 65536)),
    Got = sluice_test_lib:recv_exactly(S, 8 * length(Ids), 20000),
    wait_sent(Sender),
    Expected = iolist_to_binary(Ids),
    same_bytes(Expected, Got),
    ok = gen_tcp:close(S).

%% A client floods an echo connection (MBs written, nothing read): the
%% server blocks on its own sends and the kernel buffers fill; with flow
%% control the connection process never holds more than its active count
%% (plus a few driver replies) in its mailbox, and the client's writes are
%% held back by TCP instead.
flood_echo_keeps_mailbox_bounded(Config) ->
    flood_bounded(Config, binary:copy(<<"x">>, 65536)).

%% The same with ack frames (12-byte frames, so the acks fill the server's
%% send path as the client does not read them).
flood_ack_keeps_mailbox_bounded(Config) ->
    Frame = sluice_test_lib:frame(<<1, 2, 3, 4, 5, 6, 7, 8>>, <<>>),
    flood_bounded(Config, binary:copy(Frame, 5461)).

flood_bounded(Config, Chunk) ->
    Active = ?config(active, Config),
    Bound = case {?config(transport, Config), Active} of
                {_, N} when is_integer(N) -> N + ?SLACK;
                %% the socket backend reads `true' as N = 100
                {socket, true} -> 100 + ?SLACK;
                _ -> 1 + ?SLACK
            end,
    {Max, StillSending} = flood(Config, Chunk, 64 * 1024 * 1024, ?FLOOD_MS, infinity),
    ct:log("active ~p: largest mailbox ~b (bound ~b), client still blocked: ~p",
           [Active, Max, Bound, StillSending]),
    %% The flood really pushed back: the client could not write everything.
    ?assert(StillSending),
    ?assert(Max =< Bound, {mailbox, Max, bound, Bound}).

%% Control for the probe above: with `active => true' and the same flood the
%% mailbox grows far past any active count (the documented hazard), so the
%% bounded results are not an artefact of how the mailbox is sampled.
flood_without_flow_control_grows_mailbox(Config) ->
    Chunk = binary:copy(<<"x">>, 65536),
    %% Sampling stops once the mailbox passes 500 (five times the largest
    %% bound above), which also caps the memory the flood takes.
    {Max, _} = flood(Config, Chunk, 256 * 1024 * 1024, 3 * ?FLOOD_MS, 500),
    ct:log("active true: largest mailbox ~b", [Max]),
    ?assert(Max > 500, {mailbox, Max}).

%% Flood for up to Ms (or until the mailbox passes StopAt), sampling the
%% connection process's message queue; returns the largest length seen and
%% whether the sender was still blocked at the end.
flood(Config, Chunk, Total, Ms, StopAt) ->
    Name = ?config(name, Config),
    {ok, S} = sluice_test_lib:connect(?config(port, Config), [{recbuf, 4096}]),
    sluice_test_lib:wait_until(fun() -> length(sluice_test_lib:conn_pids(Name)) =:= 1 end, 5000),
    [Conn] = sluice_test_lib:conn_pids(Name),
    Parent = self(),
    Sender = spawn(fun() ->
                           R = send_n(S, Chunk, Total div byte_size(Chunk)),
                           Parent ! {flood_done, self(), R}
                   end),
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    Max = sample(Conn, Deadline, StopAt, 0),
    StillSending = receive {flood_done, Sender, _} -> false after 0 -> true end,
    exit(Sender, kill),
    %% Reset rather than wait for the unsent flood to drain.
    ok = inet:setopts(S, [{linger, {true, 0}}]),
    ok = gen_tcp:close(S),
    {Max, StillSending}.

sample(Conn, Deadline, StopAt, Max) ->
    case process_info(Conn, message_queue_len) of
        {message_queue_len, N} ->
            Max2 = max(N, Max),
            case Max2 > StopAt orelse erlang:monotonic_time(millisecond) >= Deadline of
                true -> Max2;
                false -> erlang:yield(), sample(Conn, Deadline, StopAt, Max2)
            end;
        undefined ->
            error({connection_process_died, Max})
    end.

send_n(_S, _Chunk, 0) -> ok;
send_n(S, Chunk, N) ->
    case gen_tcp:send(S, Chunk) of
        ok -> send_n(S, Chunk, N - 1);
        Error -> Error
    end.

%%% ------------------------------------------------------------------

frames_of_about(Bytes) ->
    %% Payloads average 1000 bytes, plus a 12-byte header.
    sluice_test_lib:frames(Bytes div 1012).

send_in_background(S, Chunks) ->
    Parent = self(),
    spawn_link(fun() ->
                       _ = [ok = gen_tcp:send(S, C) || C <- Chunks],
                       Parent ! {sent, self()}
               end).

wait_sent(Sender) ->
    receive {sent, Sender} -> ok
    after 10000 -> error(sender_stuck)
    end.

%% Compare without printing megabytes: report the first difference.
same_bytes(Same, Same) ->
    ok;
same_bytes(Expected, Got) ->
    Common = binary:longest_common_prefix([Expected, Got]),
    error({differ_at, Common, expected_size, byte_size(Expected), got_size, byte_size(Got)}).
