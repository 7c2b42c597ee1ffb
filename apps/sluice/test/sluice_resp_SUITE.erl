%% A real request/response protocol on sluice: a subset of Redis's RESP2
%% (sluice_resp_handler, framed with `{split, Fun}'), driven as Redis
%% clients drive a server: pipelines of hundreds of commands in one write
%% answered in order, requests cut at every byte, an 8 MB value set and
%% read back, bad bulk lengths and malformed arrays answered with RESP's
%% protocol error before the close, inline commands, a client that
%% pipelines and reads slowly. On inet, socket and TLS, in every active
%% mode. And, on inet and socket, what the framing gives the handler: a
%% split function that raises crashes the connection only after the
%% replies owed (and the handler is told), and what a handler keeps of a
%% frame pins the read it came in unless it copies it.
-module(sluice_resp_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([pipeline_is_answered_in_order/1,
         requests_cut_at_every_byte/1,
         big_value_set_then_get/1,
         bad_bulk_lengths_are_answered_then_closed/1,
         malformed_arrays_are_answered_then_closed/1,
         slow_reader_gets_every_reply_in_order/1,
         big_replies_to_a_pipeline_are_not_held_whole/1,
         split_fun_that_raises_answers_what_came_before/1,
         split_fun_that_returns_no_result_crashes_after_what_came_before/1,
         kept_parts_of_frames_pin_reads_unless_copied/1]).

-define(MAX, 16 * 1024 * 1024).
-define(ACTIVE, [active_adaptive, active_once, active_false, active_true, active_10]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}, {group, tls}, {group, framing}].

protocol() ->
    [pipeline_is_answered_in_order, requests_cut_at_every_byte, big_value_set_then_get,
     bad_bulk_lengths_are_answered_then_closed, malformed_arrays_are_answered_then_closed,
     slow_reader_gets_every_reply_in_order].

groups() ->
    Modes = [{A, [], protocol()} || A <- ?ACTIVE],
    [{inet, [], [{group, A} || A <- ?ACTIVE] ++ [big_replies_to_a_pipeline_are_not_held_whole]},
     {socket, [], [{group, A} || A <- ?ACTIVE] ++ [big_replies_to_a_pipeline_are_not_held_whole]},
     {tls, [], [{group, A} || A <- ?ACTIVE] ++ [big_replies_to_a_pipeline_are_not_held_whole]},
     {framing, [], [{group, framing_inet}, {group, framing_socket}]},
     {framing_inet, [], [split_fun_that_raises_answers_what_came_before,
                         split_fun_that_returns_no_result_crashes_after_what_came_before,
                         kept_parts_of_frames_pin_reads_unless_copied]},
     {framing_socket, [], [split_fun_that_raises_answers_what_came_before,
                           split_fun_that_returns_no_result_crashes_after_what_came_before,
                           kept_parts_of_frames_pin_reads_unless_copied]}
     | Modes].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(inet, Config) -> [{transport, inet} | Config];
init_per_group(socket, Config) -> [{transport, socket} | Config];
init_per_group(tls, Config) -> [{transport, ssl} | Config];
init_per_group(framing_inet, Config) -> [{transport, inet} | Config];
init_per_group(framing_socket, Config) -> [{transport, socket} | Config];
init_per_group(framing, Config) -> Config;
init_per_group(active_adaptive, Config) -> [{active, adaptive} | Config];
init_per_group(active_once, Config) -> [{active, once} | Config];
init_per_group(active_false, Config) -> [{active, false} | Config];
init_per_group(active_true, Config) -> [{active, true} | Config];
init_per_group(active_10, Config) -> [{active, 10} | Config].

end_per_group(_Group, _Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, Case} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% Hundreds of commands in one write (what a Redis client's pipeline
%% sends): every reply, in order, nothing more.
pipeline_is_answered_in_order(Config) ->
    C = connect(Config, listener(Config)),
    N = 300,
    Reqs = [[cmd([<<"INCR">>, <<"n">>]) || _ <- lists:seq(1, N)],
            cmd([<<"SET">>, <<"k">>, <<"v">>]), <<"PING\r\n">>, cmd([<<"GET">>, <<"k">>]),
            cmd([<<"DEL">>, <<"k">>, <<"n">>, <<"nope">>]), cmd([<<"GET">>, <<"k">>]),
            cmd([<<"NOPE">>])],
    ok = send(C, Reqs),
    Expected = [[[$:, integer_to_binary(I), "\r\n"] || I <- lists:seq(1, N)],
                "+OK\r\n", "+PONG\r\n", "$1\r\nv\r\n", ":2\r\n", "$-1\r\n",
                "-ERR unknown command 'NOPE'\r\n"],
    ?assertEqual(iolist_to_binary(Expected), recv_exactly(C, iolist_size(Expected))).

%% A few requests, array and inline, cut in two at every byte (the second
%% half sent a moment after the first): the same replies every time.
requests_cut_at_every_byte(Config) ->
    C = connect(Config, listener(Config)),
    Reqs = iolist_to_binary([cmd([<<"SET">>, <<"k">>, <<"hello">>]), <<"PING\r\n">>,
                             <<"ECHO  hi\r\n">>, cmd([<<"GET">>, <<"k">>]),
                             cmd([<<"INCR">>, <<"k">>])]),
    Expected = <<"+OK\r\n+PONG\r\n$2\r\nhi\r\n$5\r\nhello\r\n",
                 "-ERR value is not an integer or out of range\r\n">>,
    [begin
         <<A:Cut/binary, B/binary>> = Reqs,
         ok = send(C, A),
         timer:sleep(1),
         ok = send(C, B),
         ?assertEqual({Cut, Expected}, {Cut, recv_n(C, byte_size(Expected))})
     end || Cut <- lists:seq(1, byte_size(Reqs) - 1)].

%% An 8 MB value, set then read back in one write; the connection keeps
%% one copy of it, not the reads it came in.
big_value_set_then_get(Config) ->
    Name = listener(Config),
    C = connect(Config, Name),
    Big = rand:bytes(8 * 1024 * 1024),
    ok = send(C, [cmd([<<"SET">>, <<"big">>, Big]), cmd([<<"GET">>, <<"big">>])]),
    Expected = iolist_to_binary(["+OK\r\n", sluice_resp_handler:encode(Big)]),
    ?assert(Expected =:= recv_exactly(C, byte_size(Expected))),
    [Pid] = sluice:connections(Name),
    true = erlang:garbage_collect(Pid),
    {binary, Bins} = erlang:process_info(Pid, binary),
    Held = lists:sum([Size || {_, Size, _} <- Bins]),
    ?assert(Held < 10 * 1024 * 1024, {held, Held}).

%% Redis answers a bulk length it refuses (too large, negative) with a
%% protocol error and closes; so does this handler, after the replies to
%% what came before in the same write. A length over the framing's `max'
%% that the split fun leaves to the framer closes without a reply (the
%% framer refuses it before the body comes). Each counts as a protocol
%% error.
bad_bulk_lengths_are_answered_then_closed(Config) ->
    Name = listener(Config),
    Error = <<"-ERR Protocol error: invalid bulk length\r\n">>,
    [begin
         C = connect(Config, Name),
         ok = send(C, [<<"PING\r\n">>, Bad]),
         ?assertEqual(<<"+PONG\r\n", Error/binary>>, recv_until_closed(C))
     end || Bad <- [<<"*1\r\n$999999999999\r\n">>, <<"*2\r\n$3\r\nGET\r\n$-5\r\n">>,
                    <<"*1\r\n$12x\r\n">>]],
    C2 = connect(Config, Name),
    ok = send(C2, [<<"PING\r\n">>, <<"*2\r\n$3\r\nGET\r\n$", (integer_to_binary(?MAX))/binary, "\r\n">>]),
    ?assertEqual(<<"+PONG\r\n">>, recv_until_closed(C2)),
    sluice_test_lib:wait_info(Name, protocol_errors, 4, 2000).

%% What cannot be an array of bulk strings: answered, then closed.
malformed_arrays_are_answered_then_closed(Config) ->
    Name = listener(Config),
    [begin
         C = connect(Config, Name),
         ok = send(C, [cmd([<<"SET">>, <<"a">>, <<"1">>]), Bad]),
         ?assertEqual(<<"+OK\r\n-ERR Protocol error: ", Why/binary, "\r\n">>,
                      recv_until_closed(C))
     end || {Bad, Why} <- [{<<"*2\r\n$3\r\nGET\r\n:1\r\n">>, <<"expected '$', got ':'">>},
                           {<<"*x\r\n">>, <<"invalid multibulk length">>},
                           {<<"*1\r\n$1\r\nab\r\n">>, <<"bulk string not followed by CRLF">>}]],
    sluice_test_lib:wait_info(Name, protocol_errors, 3, 2000).

%% A client that pipelines two thousand GETs of a 2 KB value (4 MB of
%% replies) and reads them slowly: every reply, in order.
slow_reader_gets_every_reply_in_order(Config) ->
    C = connect(Config, listener(Config)),
    V = binary:copy(<<"v">>, 2000),
    ok = send(C, cmd([<<"SET">>, <<"k">>, V])),
    <<"+OK\r\n">> = recv_exactly(C, 5),
    N = 2000,
    Get = cmd([<<"GET">>, <<"k">>]),
    ok = send(C, binary:copy(Get, N)),
    Reply = iolist_to_binary(sluice_resp_handler:encode(V)),
    slow_read(C, N, Reply).

slow_read(_C, 0, _Reply) ->
    ok;
slow_read(C, N, Reply) ->
    Batch = min(N, 100),
    ?assert(binary:copy(Reply, Batch) =:= recv_n(C, Batch * byte_size(Reply))),
    timer:sleep(5),
    slow_read(C, N - Batch, Reply).

%% 600 GETs of a 100 KB value in one write (14 KB): 60 MB of replies to
%% one read. The handler's replies share the value; the server must not
%% make one 60 MB binary of them to send (OTP's socket:send/3 and ssl do
%% that with an iolist: the VM's binary memory grew by the whole 60 MB on
%% `socket' and `ssl', by nothing on `inet'). Sent in slices, it grows by
%% a few MB.
big_replies_to_a_pipeline_are_not_held_whole(Config) ->
    C = connect(Config, listener(Config)),
    V = rand:bytes(100000),
    ok = send(C, cmd([<<"SET">>, <<"k">>, V])),
    <<"+OK\r\n">> = recv_exactly(C, 5),
    N = 600,
    Reply = iolist_to_binary(sluice_resp_handler:encode(V)),
    Before = erlang:memory(binary),
    ok = send(C, binary:copy(cmd([<<"GET">>, <<"k">>]), N)),
    Peak = read_replies(C, N * byte_size(Reply), Reply, <<>>, Before),
    ct:pal("binary memory grew by at most ~p bytes", [Peak - Before]),
    ?assert(Peak - Before < 20000000, {grew, Peak - Before}).

%% Every reply checked as it comes; the highest binary memory seen.
read_replies(_C, 0, _Reply, <<>>, Peak) ->
    Peak;
read_replies(C, Left, Reply, Buf, Peak) ->
    Peak2 = max(Peak, erlang:memory(binary)),
    Data = recv_some(C),
    read_replies(C, Left - byte_size(Data), Reply, whole_replies(<<Buf/binary, Data/binary>>, Reply),
                 Peak2).

whole_replies(Buf, Reply) ->
    Size = byte_size(Reply),
    case Buf of
        <<R:Size/binary, Rest/binary>> -> ?assert(R =:= Reply), whole_replies(Rest, Reply);
        _ -> Buf
    end.

%% A split function that raises (a parser's binary_to_integer/1 on a
%% client's garbage, say) is the handler's code failing: the requests
%% before the bad one in the same read are answered, and then the
%% connection crashes as when a callback raises: handle_error/2 and
%% terminate/2 run, and it counts as `crashed'. (The framer's exception
%% used to end the process at once: the replies owed were lost, whether
%% the client got them depended on how TCP cut its bytes, and the handler
%% was never told.)
split_fun_that_raises_answers_what_came_before(Config) ->
    Name = ?config(name, Config),
    Buggy = fun(<<"*1\r\n$", _/binary>> = B) ->
                    %% a parser that trusts its input
                    [Len, _] = binary:split(binary:part(B, 5, byte_size(B) - 5), <<"\r\n">>),
                    _ = binary_to_integer(Len),
                    sluice_resp_handler:split(B);
               (B) ->
                    sluice_resp_handler:split(B)
            end,
    sluice_test_lib:start_listener(Name, #{transport => ?config(transport, Config),
                                           framing => {split, Buggy, #{max => ?MAX}},
                                           handler => {sluice_resp_handler,
                                                       #{test_pid => self()}}}),
    C = connect(Config, Name),
    ok = send(C, [<<"PING\r\n">>, cmd([<<"SET">>, <<"a">>, <<"1">>]), <<"*1\r\n$x\r\n">>]),
    ?assertEqual(<<"+PONG\r\n+OK\r\n">>, recv_until_closed(C)),
    receive {sluice_resp_handler, _, {handle_error, E}} ->
            ?assertMatch({crash, error, badarg, [_ | _]}, E)
    after 2000 -> ct:fail(no_handle_error)
    end,
    receive {sluice_resp_handler, _, {terminate, R}} -> ?assertEqual(badarg, R)
    after 2000 -> ct:fail(no_terminate)
    end,
    sluice_test_lib:wait_until(
      fun() -> maps:get(crashed, maps:get(close_reasons, sluice:info(Name))) =:= 1 end, 2000).

%% A split function that returns what is not one of its results (here a
%% Rest that is not a binary) is the handler's bug as much as one that
%% raises, not the client's protocol error: the requests before are
%% answered, then the connection crashes with `{bad_return_value,
%% {{split, Fun}, Result}}' (as a callback's bad result does), counted as
%% `crashed'. (It was a `{protocol_error, {bad_split_result, _}}' close:
%% counted against the client, and the handler was told nothing.)
split_fun_that_returns_no_result_crashes_after_what_came_before(Config) ->
    Name = ?config(name, Config),
    Buggy = fun(<<"*1\r\n$x", _/binary>>) -> {ok, bad, not_a_rest};
               (B) -> sluice_resp_handler:split(B)
            end,
    sluice_test_lib:start_listener(Name, #{transport => ?config(transport, Config),
                                           framing => {split, Buggy, #{max => ?MAX}},
                                           handler => {sluice_resp_handler,
                                                       #{test_pid => self()}}}),
    C = connect(Config, Name),
    ok = send(C, [<<"PING\r\n">>, cmd([<<"SET">>, <<"a">>, <<"1">>]), <<"*1\r\n$x\r\n">>]),
    ?assertEqual(<<"+PONG\r\n+OK\r\n">>, recv_until_closed(C)),
    Bad = {bad_return_value, {{split, Buggy}, {ok, bad, not_a_rest}}},
    receive {sluice_resp_handler, _, {handle_error, E}} -> ?assertEqual({crash, exit, Bad, []}, E)
    after 2000 -> ct:fail(no_handle_error)
    end,
    receive {sluice_resp_handler, _, {terminate, R}} -> ?assertEqual(Bad, R)
    after 2000 -> ct:fail(no_terminate)
    end,
    sluice_test_lib:wait_until(
      fun() -> maps:get(crashed, maps:get(close_reasons, sluice:info(Name))) =:= 1 end, 2000),
    ?assertMatch(#{protocol_errors := 0}, sluice:info(Name)).

%% A frame is a part of the read it came in: twenty 100-byte values kept
%% as they are, out of twenty pipelined reads of 180 KB, keep those reads
%% alive (megabytes); copied, they cost their size.
kept_parts_of_frames_pin_reads_unless_copied(Config) ->
    Pinned = held_after_sets(Config, false),
    Copied = held_after_sets(Config, true),
    ct:pal("held: ~p bytes as they are, ~p bytes copied", [Pinned, Copied]),
    ?assert(Pinned > 1000000),
    ?assert(Copied < 20000).

held_after_sets(Config, Copy) ->
    Name = list_to_atom(atom_to_list(?config(name, Config)) ++ atom_to_list(Copy)),
    sluice_test_lib:start_listener(Name, #{transport => ?config(transport, Config),
                                           framing => sluice_resp_handler:framing(?MAX),
                                           handler => {sluice_resp_handler, #{copy => Copy}}}),
    try
        C = connect([{transport, ?config(transport, Config)} | Config], Name),
        Filler = binary:copy(<<"PING\r\n">>, 30000),
        V = binary:copy(<<"v">>, 100),
        [begin
             ok = send(C, [cmd([<<"SET">>, integer_to_binary(I), V]), Filler]),
             _ = recv_n(C, 5 + 7 * 30000)
         end || I <- lists:seq(1, 20)],
        [Pid] = sluice:connections(Name),
        true = erlang:garbage_collect(Pid),
        {binary, Bins} = erlang:process_info(Pid, binary),
        lists:sum([Size || {_, Size, _} <- Bins])
    after
        sluice_test_lib:stop_listener(Name)
    end.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% The RESP listener for the case, on the group's transport and active
%% mode, for requests of up to 16 MB.
listener(Config) ->
    Name = ?config(name, Config),
    Tls = case ?config(transport, Config) of
              ssl -> #{tls_opts => sluice_tls_test_lib:server_opts(Config)};
              _ -> #{}
          end,
    sluice_test_lib:start_listener(Name, Tls#{transport => ?config(transport, Config),
                                              active => proplists:get_value(active, Config, adaptive),
                                              framing => sluice_resp_handler:framing(?MAX),
                                              handler => {sluice_resp_handler, #{}}}),
    Name.

%% A request as Redis clients send it: an array of bulk strings.
cmd(Args) ->
    iolist_to_binary([$*, integer_to_binary(length(Args)), "\r\n",
                      [[$$, integer_to_binary(byte_size(A)), "\r\n", A, "\r\n"] || A <- Args]]).

connect(Config, Name) ->
    sluice_tls_test_lib:client(sluice_test_lib:port(Name), Config).

send({M, S}, Data) -> M:send(S, Data).

recv_exactly({gen_tcp, S}, N) -> sluice_test_lib:recv_exactly(S, N, 10000);
recv_exactly({ssl, S}, N) -> sluice_tls_test_lib:recv_exactly(S, N, 10000).

recv_some({M, S}) ->
    {ok, Data} = M:recv(S, 0, 10000),
    Data.

%% N bytes (what comes after them is the next step's to check).
recv_n({M, S}, N) ->
    {ok, Data} = M:recv(S, N, 10000),
    Data.

%% Everything the server sends until it closes.
recv_until_closed({gen_tcp, S}) -> recv_until_closed(gen_tcp, S, []);
recv_until_closed({ssl, S}) -> recv_until_closed(ssl, S, []).

recv_until_closed(M, S, Acc) ->
    case M:recv(S, 0, 5000) of
        {ok, Data} -> recv_until_closed(M, S, [Acc, Data]);
        {error, closed} -> iolist_to_binary(Acc)
    end.
