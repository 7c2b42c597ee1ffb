%% A handler's `{handoff, Reply, To, State}' (sluice_conn_handoff): Reply
%% goes out, the socket becomes `To''s, and `To' gets `{sluice_handoff,
%% Conn, Buffered}' with every byte the connection read and did not
%% handle, exactly once and in order: frames after the hand-off's in the
%% same write (line, length and split framing: as the client sent them),
%% a line begun, chunks already in the connection's mailbox under a
%% running grant; on inet, socket and ssl; after a PROXY header; from a
%% parked connection woken by data. The connection ends counted
%% (`handoff'), terminate(handoff, S) once; the listener no longer sees
%% the socket (a stop leaves it to `To'). A `To' that is gone closes the
%% connection, counted.
%%
%% And sluice:remove_connection/1: a connection that no longer counts
%% against max_connections lets a waiting newcomer in, once, and still
%% counts when it closes.
%%
%% The handler is sluice_handoff_handler; its taker echoes what it gets,
%% so the client reads back exactly what it sent after the hand-off.
-module(sluice_handoff_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([bytes_a_recv_read_past_reach_to/1]).
-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([pipelined_in_the_same_write_reach_to_once/1,
         chunks_in_the_mailbox_reach_to_once/1,
         handoff_from_handle_info_hands_a_line_begun/1,
         counts_add_up_and_a_stop_leaves_the_socket_to_to/1,
         dead_to_closes_the_connection_counted/1,
         after_a_proxy_header/1,
         length_frames_are_handed_as_sent/1,
         split_frames_are_handed_as_sent/1,
         bytes_the_framer_refuses_after_the_handoff_are_handed/1,
         parked_connection_woken_by_data_hands_off/1,
         handoff_from_handle_drain_crashes/1,
         own_sends_between_the_replies_owed_and_the_handoffs/1,
         handoff_to_the_connections_own_process_crashes/1,
         after_starttls_to_gets_the_tls_socket/1,
         removed_connection_lets_a_waiting_one_in/1,
         removed_connection_still_drains_and_counts/1,
         remove_connection_from_another_process_is_refused/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}, {group, ssl}, {group, framers}, {group, uncounted}].

-define(EVERY_TRANSPORT, [pipelined_in_the_same_write_reach_to_once,
                          chunks_in_the_mailbox_reach_to_once,
                          handoff_from_handle_info_hands_a_line_begun,
                          counts_add_up_and_a_stop_leaves_the_socket_to_to,
                          dead_to_closes_the_connection_counted,
                          bytes_a_recv_read_past_reach_to,
                          own_sends_between_the_replies_owed_and_the_handoffs]).

groups() ->
    [{inet, [], ?EVERY_TRANSPORT ++ [after_a_proxy_header]},
     {socket, [], ?EVERY_TRANSPORT ++ [after_a_proxy_header]},
     {ssl, [], ?EVERY_TRANSPORT},
     {framers, [], [length_frames_are_handed_as_sent, split_frames_are_handed_as_sent,
                    bytes_the_framer_refuses_after_the_handoff_are_handed,
                    parked_connection_woken_by_data_hands_off,
                    handoff_from_handle_drain_crashes,
                    handoff_to_the_connections_own_process_crashes,
                    after_starttls_to_gets_the_tls_socket]},
     {uncounted, [], [removed_connection_lets_a_waiting_one_in,
                      removed_connection_still_drains_and_counts,
                      remove_connection_from_another_process_is_refused]}].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(ssl, Config) ->
    [{transport, ssl} | Config];
init_per_group(T, Config) when T =:= inet; T =:= socket ->
    [{transport, T} | Config];
init_per_group(_, Config) ->
    [{transport, inet} | Config].

end_per_group(_, _Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% Helpers ---------------------------------------------------------------

start(Config, Opts) ->
    T = ?config(transport, Config),
    Tls = case T of
              ssl -> #{tls_opts => sluice_tls_test_lib:server_opts(Config)};
              _ -> #{}
          end,
    {ok, _} = sluice:start_listener(?config(name, Config),
                                    maps:merge(#{ip => ?LOOPBACK, port => 0, transport => T,
                                                 handler => {sluice_handoff_handler, self()}},
                                               maps:merge(Tls, Opts))),
    sluice_test_lib:port(?config(name, Config)).

%% A client of the group's transport: {Module, Socket}.
client(Config, Port) ->
    sluice_tls_test_lib:client(Port, Config).

send({M, S}, Data) -> ok = M:send(S, Data).

%% Exactly these bytes, then nothing more for a moment.
expect({M, S}, Expected) ->
    ?assertEqual(Expected, recv(M, S, byte_size(Expected), [])),
    ?assertEqual({error, timeout}, M:recv(S, 0, 100)).

recv(_M, _S, 0, Acc) ->
    iolist_to_binary(lists:reverse(Acc));
recv(M, S, N, Acc) ->
    case M:recv(S, 0, 5000) of
        {ok, D} when byte_size(D) =< N -> recv(M, S, N - byte_size(D), [D | Acc]);
        {ok, D} -> error({more_than_expected, iolist_to_binary(lists:reverse([D | Acc]))});
        {error, R} -> error({recv_failed, R, iolist_to_binary(lists:reverse(Acc))})
    end.

close({M, S}) -> M:close(S).

handed() ->
    receive {handed, Taker, Conn, Buffered} -> {Taker, Conn, Buffered}
    after 5000 -> error(not_handed)
    end.

terminated() ->
    receive {terminated, Pid, Reason} -> {Pid, Reason}
    after 5000 -> error(not_terminated)
    end.

no_more_terminate() ->
    receive {terminated, _, _} = T -> error({terminated_again, T})
    after 100 -> ok
    end.

info(Config) ->
    sluice:info(?config(name, Config)).

%% accepted = closed + connections, close_reasons sum to closed.
adds_up(Config) ->
    #{accepted := A, closed := C, connections := N, close_reasons := R} = info(Config),
    ?assertEqual(A, C + N),
    ?assertEqual(C, lists:sum(maps:values(R))).

wait_closed(Config, N) ->
    sluice_test_lib:wait_until(fun() -> maps:get(closed, info(Config)) =:= N end, 5000).

%%% Cases -------------------------------------------------------------------

%% One write: a frame before the hand-off, the hand-off's, a whole line
%% after it and a line begun. The reply to the first, then the
%% hand-off's, then the taker's echo of what followed, each byte once;
%% what the client sends next is the taker's.
pipelined_in_the_same_write_reach_to_once(Config) ->
    Port = start(Config, #{framing => line}),
    C = client(Config, Port),
    send(C, <<"PING\nUPGRADE\nhello\nwor">>),
    expect(C, <<"PONG\n101\nhello\nwor">>),
    {Taker, Conn, Buffered} = handed(),
    ?assertEqual(<<"hello\nwor">>, Buffered),
    #{listener := Name, transport := T} = Conn,
    ?assertEqual(?config(name, Config), Name),
    ?assertEqual(sluice_transport:module(?config(transport, Config)), T),
    ?assertMatch({ok, {?LOOPBACK, _}}, sluice:peername(Conn)),
    case ?config(transport, Config) of
        ssl -> ?assertMatch(#{tls := #{protocol := _}}, Conn);
        _ -> ok
    end,
    {_, handoff} = terminated(),
    send(C, <<"ld\nmore">>),
    expect(C, <<"ld\nmore">>),
    ok = close(C),
    receive {taker_done, Taker, closed} -> ok after 5000 -> error(taker_not_done) end,
    no_more_terminate().

%% Chunks the client wrote after UPGRADE, already delivered to the
%% connection (a running grant) while its handler worked: handed over, in
%% order, not lost in the mailbox. (On `socket' the transport reads only
%% when it handles a message: they wait in the kernel for the taker.)
chunks_in_the_mailbox_reach_to_once(Config) ->
    Port = start(Config, #{active => 10}),
    C = client(Config, Port),
    send(C, <<"WAIT-UPGRADE">>),
    Conn = receive {upgrading, P} -> P after 5000 -> error(no_upgrade) end,
    [begin send(C, B), timer:sleep(0) end || B <- [<<"a">>, <<"b">>, <<"c">>]],
    Delivered = fun() ->
                        {messages, Msgs} = process_info(Conn, messages),
                        iolist_to_binary([D || {Tag, _, D} <- Msgs,
                                               Tag =:= tcp orelse Tag =:= ssl])
                end,
    case ?config(transport, Config) of
        socket ->
            sluice_test_lib:wait_until(
              fun() -> element(2, process_info(Conn, message_queue_len)) > 0 end, 5000);
        _ ->
            sluice_test_lib:wait_until(fun() -> Delivered() =:= <<"abc">> end, 5000)
    end,
    Conn ! go,
    {_Taker, _, Buffered} = handed(),
    case ?config(transport, Config) of
        socket -> ok;
        _ -> ?assertEqual(<<"abc">>, Buffered)
    end,
    expect(C, <<"101\nabc">>),
    send(C, <<"d">>),
    expect(C, <<"d">>),
    {Conn, handoff} = terminated().

%% From handle_info/2, with the framer holding a line begun: that line's
%% bytes are the taker's.
handoff_from_handle_info_hands_a_line_begun(Config) ->
    Port = start(Config, #{framing => line}),
    C = client(Config, Port),
    send(C, <<"PING\npar">>),
    expect(C, <<"PONG\n">>),
    [Conn] = sluice:connections(?config(name, Config)),
    Conn ! {handoff_now, <<"101\n">>},
    {_Taker, _, Buffered} = handed(),
    ?assertEqual(<<"par">>, Buffered),
    expect(C, <<"101\npar">>),
    send(C, <<"tial\n">>),
    expect(C, <<"tial\n">>),
    {Conn, handoff} = terminated().

%% The hand-off ends the connection as the listener's: counted closed as
%% `handoff', the slot free; the numbers add up. A stop of the listener
%% (with a drain) does not touch the taker's socket.
counts_add_up_and_a_stop_leaves_the_socket_to_to(Config) ->
    Port = start(Config, #{framing => line, max_connections => 1}),
    C = client(Config, Port),
    send(C, <<"UPGRADE\n">>),
    expect(C, <<"101\n">>),
    {Taker, _, <<>>} = handed(),
    ok = wait_closed(Config, 1),
    #{connections := 0, close_reasons := #{handoff := 1}} = info(Config),
    adds_up(Config),
    %% The slot is free: another client gets in under max_connections 1.
    C2 = client(Config, Port),
    send(C2, <<"PING\n">>),
    expect(C2, <<"PONG\n">>),
    ok = close(C2),
    ok = wait_closed(Config, 2),
    adds_up(Config),
    ok = sluice:stop_listener(?config(name, Config), 1000),
    send(C, <<"still here">>),
    expect(C, <<"still here">>),
    ok = close(C),
    receive {taker_done, Taker, closed} -> ok after 5000 -> error(taker_not_done) end.

%% A `To' that is gone: Reply has gone out, then the connection closes,
%% counted as the handler's, terminate/2 told why; its socket is closed.
dead_to_closes_the_connection_counted(Config) ->
    Port = start(Config, #{}),
    C = client(Config, Port),
    send(C, <<"UPGRADE-DEAD">>),
    expect_then_closed(C, <<"101\n">>),
    {_, {handoff_failed, noproc}} = terminated(),
    ok = wait_closed(Config, 1),
    #{connections := 0, close_reasons := #{handler := 1, handoff := 0}} = info(Config),
    adds_up(Config).

expect_then_closed({M, S}, Expected) ->
    ?assertEqual(Expected, recv(M, S, byte_size(Expected), [])),
    ?assertMatch({error, _}, M:recv(S, 0, 5000)).

%% After a PROXY header read with the first bytes: those bytes are the
%% stream's, and what follows the hand-off is the taker's.
after_a_proxy_header(Config) ->
    Port = start(Config, #{framing => line, proxy_protocol => true}),
    C = client(Config, Port),
    send(C, <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\nPING\nUPGRADE\nafter">>),
    expect(C, <<"PONG\n101\nafter">>),
    {_, _, <<"after">>} = handed(),
    send(C, <<"!">>),
    expect(C, <<"!">>),
    {_, handoff} = terminated().

%% Length framing: the frames after the hand-off's (headers and all) and
%% a frame begun, as the client sent them.
length_frames_are_handed_as_sent(Config) ->
    Port = start(Config, #{framing => {length, 2}}),
    C = client(Config, Port),
    After = <<0, 3, "abc", 0, 5, "de">>,
    send(C, [<<0, 4, "PING", 0, 7, "UPGRADE">>, After]),
    expect(C, <<"PONG\n101\n", After/binary>>),
    {_, _, Buffered} = handed(),
    ?assertEqual(After, Buffered),
    {_, handoff} = terminated().

%% A split function's frames carry no size: the bytes after the
%% hand-off's frame are found by calling it again.
split_frames_are_handed_as_sent(Config) ->
    Split = fun(B) ->
                    case binary:split(B, <<"\n">>) of
                        [Line, Rest] -> {ok, Line, Rest};
                        [_] -> more
                    end
            end,
    Port = start(Config, #{framing => {split, Split}}),
    C = client(Config, Port),
    send(C, <<"PING\nUPGRADE\nx\ny">>),
    expect(C, <<"PONG\n101\nx\ny">>),
    {_, _, <<"x\ny">>} = handed(),
    {_, handoff} = terminated().

%% What follows the hand-off's line in the same write is not a line (a
%% WebSocket frame, say) and longer than the framer's `max': not a
%% protocol error but the taker's bytes.
bytes_the_framer_refuses_after_the_handoff_are_handed(Config) ->
    Port = start(Config, #{framing => {line, #{max => 16}}}),
    C = client(Config, Port),
    Binary = binary:copy(<<16#81, 0>>, 20),
    send(C, <<"UPGRADE\n", Binary/binary>>),
    expect(C, <<"101\n", Binary/binary>>),
    {_, _, Binary} = handed(),
    {_, handoff} = terminated(),
    ok = wait_closed(Config, 1),
    #{close_reasons := #{handoff := 1, protocol_error := 0}} = info(Config).

%% A parked connection (no process) woken by the client's data: its new
%% process hands off.
parked_connection_woken_by_data_hands_off(Config) ->
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, #{ip => ?LOOPBACK, port => 0, framing => line,
                                            park_after => 200, hibernate_after => 100,
                                            handler => {sluice_handoff_park_handler, self()}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    C = {gen_tcp, S},
    send(C, <<"PING\n">>),
    expect(C, <<"PONG\n">>),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 10000),
    send(C, <<"UPGRADE\nwoken">>),
    expect(C, <<"101\nwoken">>),
    {_, _, <<"woken">>} = handed(),
    ok = wait_closed(Config, 1),
    #{parked := 0, connections := 0, close_reasons := #{handoff := 1}} = info(Config),
    adds_up(Config).

%% Not a result handle_drain/1 may return (a drain is closing the
%% connection): the connection crashes, and the client is not told to
%% switch.
handoff_from_handle_drain_crashes(Config) ->
    Port = start(Config, #{framing => line}),
    C = client(Config, Port),
    send(C, <<"DRAIN-HANDOFF\n">>),
    expect(C, <<"ok\n">>),
    {ok, 0} = sluice:drain(?config(name, Config), 5000),
    ?assertMatch({error, _}, gen_tcp:recv(element(2, C), 0, 5000)),
    {_, {bad_return_value, {sluice_handoff_handler, handle_drain, {handoff, _, _, _}}}} =
        terminated(),
    ok = wait_closed(Config, 1),
    #{close_reasons := #{crashed := 1, handoff := 0}} = info(Config),
    adds_up(Config).

%% One write: a frame whose handler calls sluice:send/2 and replies, then
%% the hand-off's. They go out in the order they were asked for: the reply
%% owed, the handler's own send, then the hand-off's reply (the own send
%% went out first, ahead of the reply owed to the frame before).
own_sends_between_the_replies_owed_and_the_handoffs(Config) ->
    Port = start(Config, #{framing => line}),
    C = client(Config, Port),
    send(C, <<"SEND\nUPGRADE\n">>),
    expect(C, <<"replied\nsent\n101\n">>),
    {Taker, _, <<>>} = handed(),
    {_, handoff} = terminated(),
    send(C, <<"after\n">>),
    expect(C, <<"after\n">>),
    ok = close(C),
    receive {taker_done, Taker, closed} -> ok after 5000 -> error(taker_not_done) end.

%% `To' the connection's own process: not a hand-off (the process ends
%% with it, and the socket with the process, its Reply sent and nothing
%% told), a bad result: the connection crashes, counted, before Reply.
handoff_to_the_connections_own_process_crashes(Config) ->
    Port = start(Config, #{}),
    C = client(Config, Port),
    send(C, <<"PING">>),
    expect(C, <<"PONG\n">>),
    [Conn] = sluice:connections(?config(name, Config)),
    send(C, <<"UPGRADE-SELF">>),
    ?assertMatch({error, _}, gen_tcp:recv(element(2, C), 0, 5000)),
    {Conn, {bad_return_value, {sluice_handoff_handler, handle_data, {handoff, _, Conn, _}}}} =
        terminated(),
    ok = wait_closed(Config, 1),
    #{close_reasons := #{crashed := 1, handoff := 0}} = info(Config),
    adds_up(Config).

%% A connection upgraded by STARTTLS hands off its TLS socket: `To' gets
%% the sslsocket, the ssl transport and the TLS facts, and the bytes after
%% the hand-off's frame in the same TLS record; it talks TLS to the client
%% from there.
after_starttls_to_gets_the_tls_socket(Config) ->
    Port = start(Config, #{framing => line,
                           tls_opts => sluice_tls_test_lib:server_opts(Config)}),
    {ok, Plain} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(Plain, <<"STARTTLS\n">>),
    {ok, <<"go\n">>} = gen_tcp:recv(Plain, 0, 5000),
    {ok, Tls} = ssl:connect(Plain, [binary, {active, false}
                                    | sluice_tls_test_lib:client_opts(Config)], 5000),
    C = {ssl, Tls},
    send(C, <<"UPGRADE\nrest">>),
    expect(C, <<"101\nrest">>),
    {Taker, Conn, <<"rest">>} = handed(),
    ?assertMatch(#{transport := sluice_transport_ssl, tls := #{protocol := _}}, Conn),
    ?assertMatch({ok, {?LOOPBACK, _}}, ssl:peername(maps:get(socket, Conn))),
    {_, handoff} = terminated(),
    send(C, <<"more">>),
    expect(C, <<"more">>),
    ok = close(C),
    receive {taker_done, Taker, closed} -> ok after 5000 -> error(taker_not_done) end,
    ok = wait_closed(Config, 1),
    #{close_reasons := #{handoff := 1}} = info(Config),
    adds_up(Config).

%%% Uncounted ----------------------------------------------------------------

%% At max_connections 2, a third client waits for a slot; the handler of
%% one of the two removes itself (twice: once counts); the third is let
%% in and served.
removed_connection_lets_a_waiting_one_in(Config) ->
    Port = start(Config, #{framing => line, max_connections => 2,
                           max_connections_wait => 10000}),
    [A, B] = [client(Config, Port) || _ <- [1, 2]],
    [begin send(X, <<"PING\n">>), expect(X, <<"PONG\n">>) end || X <- [A, B]],
    C3 = client(Config, Port),
    send(C3, <<"PING\n">>),
    ?assertEqual({error, timeout}, gen_tcp:recv(element(2, C3), 0, 300)),
    send(A, <<"UNCOUNT\n">>),
    expect(A, <<"uncounted\n">>),
    expect(C3, <<"PONG\n">>),
    #{connections := 3, uncounted := 1, max_connections := 2} = info(Config),
    ?assertEqual(3, length(sluice:connections(?config(name, Config)))),
    adds_up(Config),
    %% Still counted in closes; a counted one closing leaves no room for
    %% a fourth beyond the limit.
    ok = close(A),
    ok = wait_closed(Config, 1),
    #{connections := 2, uncounted := 0} = info(Config),
    adds_up(Config),
    [ok = close(X) || X <- [B, C3]],
    ok = wait_closed(Config, 3),
    #{connections := 0, uncounted := 0, accepted := 3} = info(Config),
    adds_up(Config).

%% An uncounted connection is still drained (its handle_drain/1 closes
%% it gracefully, `drained') and counted. The client sees the FIN and
%% closes, well before the drain's long deadline: a connection the drain
%% had missed would have been closed only by that deadline (a client
%% that waited for it left drain/2's figure to a race with the
%% connection's own deadline: {ok, 1} in CI).
removed_connection_still_drains_and_counts(Config) ->
    Port = start(Config, #{framing => line}),
    A = {M, S} = client(Config, Port),
    send(A, <<"UNCOUNT\n">>),
    expect(A, <<"uncounted\n">>),
    Name = ?config(name, Config),
    ok = sluice_test_lib:wait_info(Name, uncounted, 1, 5000),
    Test = self(),
    _ = spawn_link(fun() -> Test ! {drained, sluice:drain(Name, 60000)} end),
    ?assertEqual({error, closed}, M:recv(S, 0, 5000)),
    ok = close(A),
    {ok, 0} = receive {drained, Left} -> Left after 5000 -> error(drain_not_done) end,
    #{connections := 0, uncounted := 0, closed := 1,
      close_reasons := #{drained := 1}} = info(Config),
    adds_up(Config).

remove_connection_from_another_process_is_refused(Config) ->
    Port = start(Config, #{framing => line}),
    A = client(Config, Port),
    send(A, <<"PING\n">>),
    expect(A, <<"PONG\n">>),
    [Pid] = sluice:connections(?config(name, Config)),
    ?assertEqual({error, not_owner}, sluice:remove_connection(Pid)),
    #{uncounted := 0} = info(Config).

%% A callback that read with sluice:recv/3 and then hands off: the bytes
%% the recv read past what it asked for (left for the loop, which will
%% never run again) are the taker's, first, and counted in bytes_in (they
%% were not: 15 of the 18 bytes read).
bytes_a_recv_read_past_reach_to(Config) ->
    Port = start(Config, #{}),
    C = client(Config, Port),
    send(C, <<"RECV-UPGRADE">>),
    receive {recving, _} -> ok after 5000 -> error(no_recv) end,
    send(C, <<"abcXYZ">>),
    expect(C, <<"abc\n101\nXYZ">>),
    {_Taker, _Conn, Buffered} = handed(),
    ?assertEqual(<<"XYZ">>, Buffered),
    {_, handoff} = terminated(),
    ok = close(C),
    wait_closed(Config, 1),
    %% every byte read from the client, those handed to the taker too
    ?assertMatch(#{bytes_in := 18}, info(Config)),
    adds_up(Config).
