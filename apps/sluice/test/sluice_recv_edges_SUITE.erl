%% sluice:recv/3 where sluice_recv_SUITE does not go: from handle_call/3
%% (the caller gets its reply), from handle_timeout/1 under a persistent
%% timeout (which keeps firing), from handle_close/1, after a
%% `reply_shutdown'; a Length far larger than a read (20 MiB); Timeout 0
%% polled until the bytes are there; a thousand recvs in one callback; a
%% loop of recvs until the client closes; sluice:close/1 and sluice:send/2
%% from other processes while a recv waits (both wait for the callback,
%% nothing is lost); the idle timeout's nudge, sent while a recv waits,
%% taken back when the recv then reads what the client sent (the
%% connection serves on, and idles out later), kept when it reads
%% nothing. Every case checks that bytes_in is what the client sent and
%% that the counts add up. On `inet' and `socket'.
%%
%% The handler is sluice_recv_fun_handler: each case gives its callbacks
%% as funs.
-module(sluice_recv_edges_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([call_reads_then_replies/1,
         persistent_timeout_reads_and_fires_again/1,
         recv_after_reply_shutdown/1,
         recv_in_handle_close/1,
         length_of_20_mib/1,
         timeout_zero_polled/1,
         a_thousand_recvs_in_one_callback/1,
         recv_until_closed/1,
         close_from_another_process_during_recv/1,
         sends_from_other_processes_during_recv/1,
         idle_nudge_during_recv_is_stale_once_the_client_sends/1,
         idle_nudge_during_recv_that_reads_nothing_closes/1]).

suite() -> [{timetrap, {seconds, 60}}].

cases() ->
    [call_reads_then_replies, persistent_timeout_reads_and_fires_again,
     recv_after_reply_shutdown, recv_in_handle_close, length_of_20_mib, timeout_zero_polled,
     a_thousand_recvs_in_one_callback, recv_until_closed,
     close_from_another_process_during_recv, sends_from_other_processes_during_recv,
     idle_nudge_during_recv_is_stale_once_the_client_sends,
     idle_nudge_during_recv_that_reads_nothing_closes].

all() -> [{group, inet}, {group, socket}].

groups() -> sluice_test_lib:backend_groups(cases()).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) -> ok.

init_per_group(G, Config) -> sluice_test_lib:init_backend(G, Config).

end_per_group(G, Config) -> sluice_test_lib:end_backend(G, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case, ?config(transport, Config)}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%%% ------------------------------------------------------------------

%% handle_call/3 tells the test it is in, reads 5 bytes the client sends
%% then, and answers the call with them (sluice:reply/2); the bytes recv read past go to
%% handle_data/2.
call_reads_then_replies(Config) ->
    Self = self(),
    Port = listener(Config, #{call => fun(read, From, S = #{conn := C}) ->
                                             Self ! in_call,
                                             {ok, B} = sluice:recv(C, 5, 5000),
                                             ok = sluice:reply(From, B),
                                             {ok, S}
                                     end,
                              data => fun(D, S) -> Self ! {data, D}, {ok, S} end}),
    {C, Pid} = client(Port),
    Caller = spawn_link(fun() -> Self ! {called, sluice:call(Pid, read, 5000)} end),
    receive in_call -> ok after 5000 -> error(no_call) end,
    ok = gen_tcp:send(C, <<"hello world">>),
    receive {called, Reply} -> ?assertEqual(<<"hello">>, Reply) after 5000 -> error(no_reply) end,
    ?assertEqual(<<" world">>, data(6)),
    _ = Caller,
    ok = gen_tcp:close(C),
    ended(Config, Pid, 11).

%% The first handle_timeout/1 of a persistent timeout reads 3 bytes; the
%% timeout fires again after it (its timer is not lost to the recv), and
%% the second closes.
persistent_timeout_reads_and_fires_again(Config) ->
    Self = self(),
    Port = listener(Config, #{init => fun(S) -> {ok, S#{n => 0}, {persistent, 100}} end,
                              timeout => fun(S = #{conn := C, n := 0}) ->
                                                 Self ! tick,
                                                 Self ! {recv, sluice:recv(C, 3, 5000)},
                                                 {ok, S#{n := 1}};
                                            (S = #{n := 1}) ->
                                                 Self ! tick,
                                                 {close, done, S}
                                         end}),
    {C, Pid} = client(Port),
    receive tick -> ok after 5000 -> error(no_tick) end,
    ok = gen_tcp:send(C, <<"xyz">>),
    receive {recv, R} -> ?assertEqual({ok, <<"xyz">>}, R) after 5000 -> error(no_recv) end,
    receive tick -> ok after 5000 -> error(no_second_tick) end,
    receive {terminate, Pid, Reason} -> ?assertEqual(done, Reason) after 5000 -> error(alive) end,
    counts(Config, 3).

%% After `reply_shutdown' the connection reads on: a recv too, and what it
%% read past goes to handle_data/2; the client's close ends it.
recv_after_reply_shutdown(Config) ->
    Self = self(),
    Port = listener(Config, #{data => fun(<<"q">>, S) -> {reply_shutdown, <<"bye">>, S};
                                         (D, S) -> Self ! {data, D}, {ok, S}
                                      end,
                              info => fun(go, S = #{conn := C}) ->
                                              Self ! {recv, sluice:recv(C, 3, 5000)},
                                              {ok, S}
                                      end,
                              close => fun(S) -> Self ! handle_close, {ok, S} end}),
    {C, Pid} = client(Port, [{exit_on_close, false}]),
    ok = gen_tcp:send(C, <<"q">>),
    {ok, <<"bye">>} = gen_tcp:recv(C, 3, 5000),
    {error, closed} = gen_tcp:recv(C, 0, 5000),
    Pid ! go,
    ok = gen_tcp:send(C, <<"abcd">>),
    receive {recv, R} -> ?assertEqual({ok, <<"abc">>}, R) after 5000 -> error(no_recv) end,
    ?assertEqual(<<"d">>, data(1)),
    ok = gen_tcp:close(C),
    receive handle_close -> ok after 5000 -> error(no_handle_close) end,
    ended(Config, Pid, 5).

%% The client closed: a recv in handle_close/1 says so, and nothing is
%% counted twice.
recv_in_handle_close(Config) ->
    Self = self(),
    Port = listener(Config, #{close => fun(S = #{conn := C}) ->
                                               Self ! {recv, sluice:recv(C, 0, 1000)},
                                               {ok, S}
                                       end}),
    {C, Pid} = client(Port),
    ok = gen_tcp:close(C),
    receive {recv, R} -> ?assertEqual({error, closed}, R) after 5000 -> error(no_recv) end,
    ended(Config, Pid, 0).

%% A Length of 20 MiB: read in the socket's reads, returned whole; the 7
%% bytes sent behind it go to handle_data/2.
length_of_20_mib(Config) ->
    Self = self(),
    N = 20 * 1024 * 1024,
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! {recv, case sluice:recv(C, N, 20000) of
                                                               {ok, B} -> {ok, byte_size(B), binary:at(B, N - 1)};
                                                               Error -> Error
                                                           end},
                                             {ok, S}
                                     end,
                              data => fun(D, S) -> Self ! {data, D}, {ok, S} end}),
    {C, Pid} = client(Port),
    Pid ! go,
    ok = gen_tcp:send(C, [binary:copy(<<"x">>, N - 1), <<"y">>, <<"tail-7b">>]),
    receive {recv, R} -> ?assertEqual({ok, N, $y}, R) after 20000 -> error(no_recv) end,
    ?assertEqual(<<"tail-7b">>, data(7)),
    ok = gen_tcp:close(C),
    ended(Config, Pid, N + 7).

%% Timeout 0 answers at once: polled until the client's two writes are
%% there, the bytes of each answer that timed out come first in the next.
timeout_zero_polled(Config) ->
    Self = self(),
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! first,
                                             Self ! {recv, sluice:recv(C, 0, 0)},
                                             receive sent -> ok end,
                                             Self ! {polled, poll(C, 6, 0)},
                                             {ok, S}
                                     end,
                              data => fun(D, S) -> Self ! {data, D}, {ok, S} end}),
    {C, Pid} = client(Port),
    Pid ! go,
    receive first -> ok after 5000 -> error(no_go) end,
    receive {recv, R} -> ?assertEqual({error, timeout}, R) after 5000 -> error(no_recv) end,
    ok = gen_tcp:send(C, <<"abc">>),
    ok = gen_tcp:send(C, <<"def">>),
    Pid ! sent,
    receive {polled, P} -> ?assertMatch({{ok, <<"abcdef">>}, _}, P) after 5000 -> error(no_poll) end,
    ok = gen_tcp:close(C),
    ended(Config, Pid, 6).

poll(C, N, Timeouts) ->
    case sluice:recv(C, N, 0) of
        {error, timeout} when Timeouts < 1000000 -> poll(C, N, Timeouts + 1);
        Result -> {Result, Timeouts}
    end.

%% A thousand recvs of a byte in one callback, then the connection serves
%% on (a round trip through handle_data/2).
a_thousand_recvs_in_one_callback(Config) ->
    Self = self(),
    Port = listener(Config, #{data => fun(<<"s">>, S = #{conn := C}) ->
                                              Self ! in_data,
                                              Rs = [sluice:recv(C, 1, 5000) || _ <- lists:seq(1, 1000)],
                                              Self ! {recvs, iolist_to_binary([B || {ok, B} <- Rs])},
                                              {ok, S};
                                         (D, S) ->
                                              {reply, D, S}
                                      end}),
    {C, Pid} = client(Port),
    Bytes = crypto:strong_rand_bytes(1000),
    ok = gen_tcp:send(C, <<"s">>),
    receive in_data -> ok after 5000 -> error(no_data) end,
    ok = gen_tcp:send(C, Bytes),
    receive {recvs, Got} -> ?assertEqual(Bytes, Got) after 10000 -> error(no_recvs) end,
    ok = gen_tcp:send(C, <<"ping">>),
    <<"ping">> = sluice_test_lib:recv_exactly(C, 4, 5000),
    ok = gen_tcp:close(C),
    ended(Config, Pid, 1005).

%% recv of whatever is there, in a loop, until the client closes: every
%% byte once, then `{error, closed}' and the connection ends as the
%% client's close.
recv_until_closed(Config) ->
    Self = self(),
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! {total, drain_all(C, 0)},
                                             {ok, S}
                                     end}),
    {C, Pid} = client(Port),
    Pid ! go,
    ok = gen_tcp:send(C, binary:copy(<<"y">>, 1000000)),
    ok = gen_tcp:close(C),
    receive {total, T} -> ?assertEqual({1000000, {error, closed}}, T) after 10000 -> error(no_total) end,
    ended(Config, Pid, 1000000).

drain_all(C, N) ->
    case sluice:recv(C, 0, 5000) of
        {ok, B} -> drain_all(C, N + byte_size(B));
        Error -> {N, Error}
    end.

%% sluice:close/1 from another process while a recv waits: the recv
%% answers first (its bytes), then the connection closes with
%% `closed_by_api'; what it read past is counted.
close_from_another_process_during_recv(Config) ->
    Self = self(),
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! in_recv,
                                             Self ! {recv, sluice:recv(C, 3, 5000)},
                                             {ok, S}
                                     end}),
    {C, Pid} = client(Port),
    Pid ! go,
    receive in_recv -> ok after 5000 -> error(no_go) end,
    ok = sluice:close(Pid),
    ok = gen_tcp:send(C, <<"abcde">>),
    receive {recv, R} -> ?assertEqual({ok, <<"abc">>}, R) after 5000 -> error(no_recv) end,
    receive {terminate, Pid, Reason} -> ?assertEqual(closed_by_api, Reason) after 5000 -> error(alive) end,
    sluice_test_lib:expect_closed(C, 5000),
    counts(Config, 5).

%% sluice:send/2 from five processes while a recv waits: they wait for the
%% callback, then every one is sent and answered `ok'.
sends_from_other_processes_during_recv(Config) ->
    Self = self(),
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! in_recv,
                                             Self ! {recv, sluice:recv(C, 2, 5000)},
                                             {ok, S}
                                     end,
                              data => fun(D, S) -> Self ! {data, D}, {ok, S} end}),
    {C, Pid} = client(Port),
    Pid ! go,
    receive in_recv -> ok after 5000 -> error(no_go) end,
    _ = [spawn_link(fun() -> Self ! {sent, I, sluice:send(Pid, <<I>>)} end)
         || I <- lists:seq(1, 5)],
    %% The senders' requests are queued behind the recv (it answers only
    %% once they are: a poll of the mailbox, bounded)
    ok = sluice_test_lib:wait_until(
           fun() ->
                   {messages, Ms} = erlang:process_info(Pid, messages),
                   length([M || M = {'$sluice', _, {send, _}} <- Ms]) =:= 5
           end,
           5000),
    ok = gen_tcp:send(C, <<"ab">>),
    receive {recv, R} -> ?assertEqual({ok, <<"ab">>}, R) after 5000 -> error(no_recv) end,
    [receive {sent, I, Sent} -> ?assertEqual(ok, Sent) after 5000 -> error({no_send, I}) end
     || I <- lists:seq(1, 5)],
    Out = sluice_test_lib:recv_exactly(C, 5, 5000),
    ?assertEqual(lists:seq(1, 5), lists:sort(binary_to_list(Out))),
    ok = gen_tcp:close(C),
    ended(Config, Pid, 2).

%% A recv waits past the idle timeout: the sweep's nudge to close waits in
%% the mailbox. The client then sends and recv reads it: the nudge is
%% stale, and the connection serves on (it closed, `idle_timeout', once
%% the callback returned, the client's next request unanswered); then,
%% quiet, it idles out all the same (the sweep watches it again).
idle_nudge_during_recv_is_stale_once_the_client_sends(Config) ->
    Self = self(),
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! {recv, sluice:recv(C, 5, 10000)},
                                             {ok, S}
                                     end,
                              data => fun(D, S) -> {reply, D, S} end},
                    #{idle_timeout => 200}),
    {C, Pid} = client(Port),
    Pid ! go,
    nudged(Pid),
    ok = gen_tcp:send(C, <<"hello">>),
    receive {recv, R} -> ?assertEqual({ok, <<"hello">>}, R) after 5000 -> error(no_recv) end,
    ok = gen_tcp:send(C, <<"again">>),
    ?assertEqual(<<"again">>, sluice_test_lib:recv_exactly(C, 5, 5000)),
    receive {terminate, Pid, Reason} -> ?assertEqual(idle_timeout, Reason)
    after 5000 -> error(never_idled_out)
    end,
    counts(Config, 10),
    #{close_reasons := #{idle_timeout := 1}} = sluice:info(?config(name, Config)),
    ok.

%% The same recv, but the client sends nothing until it times out: the
%% client was idle, and the nudge closes the connection once the callback
%% returns.
idle_nudge_during_recv_that_reads_nothing_closes(Config) ->
    Self = self(),
    Port = listener(Config, #{info => fun(go, S = #{conn := C}) ->
                                             Self ! in_recv,
                                             receive nudged -> ok end,
                                             Self ! {recv, sluice:recv(C, 5, 0)},
                                             {ok, S}
                                     end},
                    #{idle_timeout => 200}),
    {_C, Pid} = client(Port),
    Pid ! go,
    receive in_recv -> ok after 5000 -> error(no_go) end,
    nudged(Pid),
    Pid ! nudged,
    receive {recv, R} -> ?assertEqual({error, timeout}, R) after 5000 -> error(no_recv) end,
    receive {terminate, Pid, Reason} -> ?assertEqual(idle_timeout, Reason)
    after 5000 -> error(alive)
    end,
    counts(Config, 0).

%% The sweep's nudge to close for idleness is in Pid's mailbox (a poll,
%% bounded).
nudged(Pid) ->
    ok = sluice_test_lib:wait_until(
           fun() ->
                   {messages, Ms} = erlang:process_info(Pid, messages),
                   lists:member({sluice_sweep, idle_timeout}, Ms)
           end, 5000).

%%% Helpers -------------------------------------------------------------

listener(Config, HOpts) ->
    listener(Config, HOpts, #{}).

listener(Config, HOpts, Extra) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(
      Name, Extra#{handler => {sluice_recv_fun_handler, maps:merge(#{test => self()}, HOpts)}}),
    sluice_test_lib:port(Name).

client(Port) ->
    client(Port, []).

client(Port, Extra) ->
    {ok, C} = sluice_test_lib:connect(Port, Extra),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    {C, Pid}.

%% N bytes, in the chunks handle_data/2 got.
data(N) -> data(N, <<>>).

data(N, Acc) when byte_size(Acc) >= N -> Acc;
data(N, Acc) ->
    receive {data, D} -> data(N, <<Acc/binary, D/binary>>)
    after 5000 -> error({no_data, Acc})
    end.

%% The connection ended as the client's close.
ended(Config, Pid, BytesIn) ->
    receive {terminate, Pid, Reason} -> ?assertEqual(closed, Reason)
    after 5000 -> error(alive)
    end,
    counts(Config, BytesIn),
    #{close_reasons := #{peer_closed := 1}} = sluice:info(?config(name, Config)),
    ok.

%% bytes_in is what the client sent, and the counts add up, once the
%% connection is gone.
counts(Config, BytesIn) ->
    Name = ?config(name, Config),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 5000),
    #{accepted := A, closed := Closed, connections := Conns, close_reasons := Reasons,
      bytes_in := In} = sluice:info(Name),
    ?assertEqual(BytesIn, In),
    ?assertEqual(A, Closed + Conns),
    ?assertEqual(Closed, lists:sum(maps:values(Reasons))),
    ok.
