%% The handler API a protocol author writes against (sluice_handler): the
%% server speaking first, per-result timeouts, calls into a connection,
%% sending and closing from other processes, the callbacks on peer close,
%% socket errors and crashes, framing, what "idle" means, and child_spec/1.
%% Every network case runs on both backends.
-module(sluice_handler_api_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([init_reply_is_a_greeting_sent_first/1, init_reply_close_sends_then_closes/1,
         init_close_with_state_runs_terminate_and_is_counted/1,
         send_to_a_connection_past_its_fin_fails_at_once/1,
         conn_carries_pid_listener_and_addresses/1,
         result_timeout_calls_handle_timeout_and_any_result_clears_it/1,
         without_handle_timeout_the_connection_closes_with_reason_timeout/1,
         timeout_past_what_a_timer_holds_never_fires/1,
         handlers_own_timer_named_like_the_librarys_reaches_handle_info/1,
         call_reaches_handle_call_and_can_be_answered_later/1,
         call_without_handle_call_is_not_supported/1,
         call_to_a_closed_connection_exits/1,
         names_as_gen_server_takes_them_reach_send_close_and_call/1,
         name_on_a_node_reaches_send_close_and_call/1,
         sys_state_is_the_handlers_state/1,
         send_from_another_process_is_ordered_counted_and_leaves_no_reply/1,
         send_to_a_closed_connection_is_an_error/1,
         connections_sending_to_each_other_do_not_wait_for_each_other/1,
         close_from_another_process_sends_fin/1,
         peer_close_calls_handle_close_before_terminate/1,
         peer_reset_is_a_close_on_both_backends/1,
         peer_reset_during_a_send_is_the_same_error_on_both_backends/1,
         crash_calls_handle_error_then_terminate_and_is_counted/1,
         bad_return_crashes_naming_handler_and_callback/1,
         reply_that_is_not_iodata_is_the_handlers_crash/1,
         crash_on_a_frame_sends_the_replies_of_the_frames_before/1,
         init_that_fails_gets_no_handle_error_or_terminate/1,
         handler_that_traps_exits_ends_with_its_supervisor/1,
         send_of_what_is_not_iodata_raises_in_the_caller/1,
         idle_means_no_bytes_from_the_client/1,
         line_framing_delivers_whole_lines/1,
         length_framing_delivers_whole_frames_across_chunks/1,
         oversized_frame_sends_replies_owed_then_closes/1,
         close_with_replies_queued_sends_them_all_before_fin/1,
         own_sends_before_a_close_result_go_out_before_it/1,
         drain_carried_on_closes_at_the_deadline/1,
         drain_deadline_reaches_a_hibernated_connection/1,
         second_drain_the_earlier_deadline_stands/1,
         call_answered_later_survives_park_after/1,
         child_spec_1_takes_the_name_from_the_options/1,
         parking_is_off_by_default/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

%% Wait for a message matching Pattern (bound variables must match).
-define(expect(Pattern),
        receive Pattern -> ok after 5000 -> error({not_received, ??Pattern}) end).

suite() -> [{timetrap, {seconds, 30}}].

network_cases() ->
    [init_reply_is_a_greeting_sent_first,
     init_reply_close_sends_then_closes,
     init_close_with_state_runs_terminate_and_is_counted,
     send_to_a_connection_past_its_fin_fails_at_once,
     conn_carries_pid_listener_and_addresses,
     result_timeout_calls_handle_timeout_and_any_result_clears_it,
     without_handle_timeout_the_connection_closes_with_reason_timeout,
     timeout_past_what_a_timer_holds_never_fires,
     handlers_own_timer_named_like_the_librarys_reaches_handle_info,
     call_reaches_handle_call_and_can_be_answered_later,
     call_without_handle_call_is_not_supported,
     call_to_a_closed_connection_exits,
     names_as_gen_server_takes_them_reach_send_close_and_call,
     name_on_a_node_reaches_send_close_and_call,
     sys_state_is_the_handlers_state,
     send_from_another_process_is_ordered_counted_and_leaves_no_reply,
     send_to_a_closed_connection_is_an_error,
     connections_sending_to_each_other_do_not_wait_for_each_other,
     close_from_another_process_sends_fin,
     peer_close_calls_handle_close_before_terminate,
     peer_reset_is_a_close_on_both_backends,
     peer_reset_during_a_send_is_the_same_error_on_both_backends,
     crash_calls_handle_error_then_terminate_and_is_counted,
     bad_return_crashes_naming_handler_and_callback,
     reply_that_is_not_iodata_is_the_handlers_crash,
     crash_on_a_frame_sends_the_replies_of_the_frames_before,
     init_that_fails_gets_no_handle_error_or_terminate,
     handler_that_traps_exits_ends_with_its_supervisor,
     send_of_what_is_not_iodata_raises_in_the_caller,
     idle_means_no_bytes_from_the_client,
     line_framing_delivers_whole_lines,
     length_framing_delivers_whole_frames_across_chunks,
     oversized_frame_sends_replies_owed_then_closes,
     close_with_replies_queued_sends_them_all_before_fin,
     own_sends_before_a_close_result_go_out_before_it,
     drain_carried_on_closes_at_the_deadline,
     drain_deadline_reaches_a_hibernated_connection,
     second_drain_the_earlier_deadline_stands,
     call_answered_later_survives_park_after].

all() ->
    [{group, inet}, {group, socket}, child_spec_1_takes_the_name_from_the_options,
     parking_is_off_by_default].

groups() ->
    sluice_test_lib:backend_groups(network_cases()).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% Helpers

%% A listener of sluice_api_handler reporting to this process; returns a
%% connected client socket and the connection's pid.
api(Config, Opts) ->
    api(Config, Opts, #{}).

api(Config, Opts, HOpts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(
          Name, maps:merge(#{handler => {sluice_api_handler, HOpts#{test => self()}}}, Opts)),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {init, P, _Conn} -> P after 5000 -> error(no_init) end,
    {S, Pid}.


recv_line(S) ->
    ok = inet:setopts(S, [{packet, line}]),
    R = gen_tcp:recv(S, 0, 5000),
    ok = inet:setopts(S, [{packet, raw}]),
    R.

%% The next report from the connection process Pid (its pid is the second
%% element of every sluice_api_handler report). Reports from one process
%% arrive in the order it sent them, so taking them one by one checks the
%% order of the callbacks; a selective receive of each would not.
next_report(Pid) ->
    receive
        M when is_tuple(M), tuple_size(M) >= 2, element(2, M) =:= Pid -> M
    after 5000 -> error({no_report_from, Pid})
    end.

%% The messages queued for this process that match Pred.
queued(Pred) ->
    {messages, Ms} = process_info(self(), messages),
    [M || M <- Ms, Pred(M)].

%%% Cases

%% `{reply, Greeting, State}' from init/2: the client reads it before it
%% has sent anything.
init_reply_is_a_greeting_sent_first(Config) ->
    {S, _Pid} = api(Config, #{}, #{greeting => <<"hello\n">>}),
    ?assertEqual({ok, <<"hello\n">>}, gen_tcp:recv(S, 0, 2000)),
    ok = gen_tcp:send(S, <<"echo hi">>),
    ?assertEqual({ok, <<"hi\n">>}, gen_tcp:recv(S, 0, 2000)).

%% `{reply_close, Bye, Reason, State}' from init/2 (thousand_island's
%% handle_connection/2 that sends, then returns `{:close, state}'; a
%% daytime server): the client reads Bye, then the FIN, the handler's
%% terminate/2 gets the reason, counted as the handler's close.
init_reply_close_sends_then_closes(Config) ->
    {S, Pid} = api(Config, #{}, #{init => {reply_close, <<"it is noon\n">>}}),
    ?assertEqual({ok, <<"it is noon\n">>}, gen_tcp:recv(S, 0, 2000)),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 2000)),
    ?assertEqual({terminate, Pid, said_goodbye}, next_report(Pid)),
    Name = ?config(name, Config),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{handler := 1}}, sluice:info(Name)).

%% `{close, Reason, State}' from init/2 (decide after a look at the
%% connection, and end with terminate/2): the client gets a FIN and no
%% byte, terminate/2 gets the reason and the state (no handle_close/1 or
%% handle_error/2 before it), and the reason is counted as a close of the
%% handler's from any callback: `{protocol_error, _}' as one, anything
%% else as `handler'.
init_close_with_state_runs_terminate_and_is_counted(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}, #{init => {close_with_state, not_welcome}}),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 2000)),
    ?assertEqual({terminate, Pid, not_welcome}, next_report(Pid)),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{handler := 1, crashed := 0}}, sluice:info(Name)),
    sluice_test_lib:stop_listener(Name),
    {S2, Pid2} = api(Config, #{}, #{init => {close_with_state, {protocol_error, banned}}}),
    ?assertEqual({error, closed}, gen_tcp:recv(S2, 0, 2000)),
    ?assertEqual({terminate, Pid2, {protocol_error, banned}}, next_report(Pid2)),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{protocol_errors := 1,
                   close_reasons := #{handler := 0, protocol_error := 1, crashed := 0}},
                 sluice:info(Name)).

%% conn() has the connection's pid (the process the callbacks run in),
%% the listener's name, and addresses through peername/sockname.
conn_carries_pid_listener_and_addresses(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_api_handler, #{test => self()}}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Conn = receive {init, _, C} -> C after 5000 -> error(no_init) end,
    #{pid := Pid, listener := Name} = Conn,
    ok = gen_tcp:send(S, <<"ping">>),
    ?expect({data, Pid, <<"ping">>}),
    {ok, Local} = inet:sockname(S),
    ?assertEqual({ok, Local}, sluice:peername(Conn)),
    ?assertEqual(inet:peername(S), sluice:sockname(Conn)),
    ?assertEqual([Pid], sluice:connections(Name)).

%% `{ok, S, N}': handle_timeout/1 after N ms with no callback; a later
%% result without a timeout clears it.
result_timeout_calls_handle_timeout_and_any_result_clears_it(Config) ->
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:send(S, <<"wait 100">>),
    ?expect({timeout, Pid}),
    ?assertEqual({ok, <<"timeout\n">>}, gen_tcp:recv(S, 0, 2000)),
    %% Asked again, then cleared by a plain result before it fires.
    ok = gen_tcp:send(S, <<"wait 300">>),
    ?expect({data, Pid, <<"wait 300">>}),
    ok = gen_tcp:send(S, <<"echo x">>),
    ?assertEqual({ok, <<"x\n">>}, gen_tcp:recv(S, 0, 2000)),
    receive {timeout, Pid} -> error(timeout_not_cleared) after 600 -> ok end.

%% A handler without handle_timeout/1 that asks for a timeout is closed
%% with reason `timeout' when it passes. (close_reasons counts every
%% reason it does not know as `handler': the reason itself is read from
%% terminate/2.)
without_handle_timeout_the_connection_closes_with_reason_timeout(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_timeout_handler,
                                                           {150, self()}}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    T0 = erlang:monotonic_time(millisecond),
    ok = sluice_test_lib:expect_closed(S, 3000),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ?assert(Ms >= 140 andalso Ms < 2000, Ms),
    ?expect({terminate, _, timeout}),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{handler := 1}}, sluice:info(Name)).

%% A result's Timeout is any non-negative integer (sluice_handler's
%% timeout_ms()): one longer than an Erlang timer holds (2^50 ms; the
%% VM's limit is about 2^43) is one that never fires. It crashed the
%% connection in the library's own start_timer/3 (badarg), without
%% handle_error/2 or terminate/2 and with the client's replies lost.
timeout_past_what_a_timer_holds_never_fires(Config) ->
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:send(S, <<"wait 1125899906842624">>),
    ?expect({data, Pid, <<"wait 1125899906842624">>}),
    ok = gen_tcp:send(S, <<"echo x">>),
    ?assertEqual({ok, <<"x\n">>}, gen_tcp:recv(S, 0, 2000)),
    ?assert(is_process_alive(Pid)),
    ?assertMatch(#{connections := 1, closed := 0}, sluice:info(?config(name, Config))).

%% A handler's own timer is its own, whatever its message: one whose
%% message has the shape of the library's result timer,
%% `{timeout, Ref, sluice_timeout}', reaches handle_info/2 (it was dropped
%% as a stale result timer).
handlers_own_timer_named_like_the_librarys_reaches_handle_info(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_test_handler,
                                                           #{test_pid => self()}}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {sluice_test_handler, {init, P}} -> P after 2000 -> error(no_init) end,
    ok = gen_tcp:send(S, <<"own_timer">>),
    ?assertEqual({ok, <<"started\n">>}, gen_tcp:recv(S, 0, 2000)),
    receive
        {sluice_test_handler, {info, Pid, Msg}} ->
            ?assertMatch({timeout, _, sluice_timeout}, Msg)
    after 1000 -> error(own_timer_lost)
    end.

%% sluice:call/3 reaches handle_call/3; the handler may answer at once
%% (sluice:reply/2) or keep From and answer from a later callback; what
%% the handler sends meanwhile goes to the client.
call_reaches_handle_call_and_can_be_answered_later(Config) ->
    {S, Pid} = api(Config, #{}),
    ?assertEqual({echo, hello}, sluice:call(Pid, hello, 2000)),
    ?assertEqual(said, sluice:call(Pid, {say, <<"from a call\n">>}, 2000)),
    ?assertEqual({ok, <<"from a call\n">>}, gen_tcp:recv(S, 0, 2000)),
    Self = self(),
    Waiter = spawn_link(fun() -> Self ! {later, sluice:call(Pid, later, 5000)} end),
    ?expect({call, Pid, later}),
    ?assertEqual(ok, sluice:call(Pid, {answer_later, done}, 2000)),
    ?expect({later, done}),
    unlink(Waiter).

call_without_handle_call_is_not_supported(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []}}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = gen_tcp:send(S, <<"x">>),
    {ok, <<"x">>} = gen_tcp:recv(S, 0, 2000),
    [Pid] = sluice:connections(Name),
    ?assertEqual({error, not_supported}, sluice:call(Pid, anything, 2000)).

call_to_a_closed_connection_exits(Config) ->
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:close(S),
    ?expect({terminate, Pid, closed}),
    %% (the process ends a moment after terminate/2, once its close is
    %% counted: a call meanwhile exits `normal', with the process)
    Ref = monitor(process, Pid),
    receive {'DOWN', Ref, process, Pid, _} -> ok after 5000 -> error(still_alive) end,
    ?assertExit({noproc, {sluice, call, _}}, sluice:call(Pid, hello, 1000)).

%% A connection registered under a name (here with global, as an Elixir
%% Registry's `{:via, Registry, {Reg, Key}}' would be) is reached by
%% send/2, close/1 and call/3 through that name, as gen_server's functions
%% take one, from other processes and from another connection's handler;
%% a name not registered: close/1 `ok' as gen_server:cast/2, send/2
%% `{error, closed}', call/3 exits (close/1 raised badarg for an atom not
%% registered, for `{global, _}' and `{via, _, _}').
names_as_gen_server_takes_them_reach_send_close_and_call(Config) ->
    Name = ?config(name, Config),
    G = {?MODULE, ?FUNCTION_NAME, make_ref()},
    {S, Pid} = api(Config, #{}, #{global => G}),
    ?assertEqual({echo, hello}, sluice:call({global, G}, hello, 5000)),
    ?assertEqual({echo, again}, sluice:call({via, global, G}, again, 5000)),
    ok = sluice:send({via, global, G}, <<"by via\n">>),
    ?assertEqual({ok, <<"by via\n">>}, recv_line(S)),
    ok = sluice:send({global, G}, <<"by global\n">>),
    ?assertEqual({ok, <<"by global\n">>}, recv_line(S)),
    %% from another connection's handler, which does not wait
    {ok, B} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    PidB = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    PidB ! {send_to, {via, global, G}, <<"from b\n">>},
    ?expect({sent, PidB, ok}),
    ?assertEqual({ok, <<"from b\n">>}, recv_line(S)),
    ok = sluice:close({via, global, G}),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    ?expect({terminate, Pid, closed_by_api}),
    ok = sluice_test_lib:wait_until(fun() -> global:whereis_name(G) =:= undefined end, 3000),
    Gone = {?MODULE, not_registered, make_ref()},
    ?assertEqual(ok, sluice:close({global, Gone})),
    ?assertEqual(ok, sluice:close({via, global, Gone})),
    ?assertEqual(ok, sluice:close(sluice_api_suite_no_such_name)),
    ?assertEqual({error, closed}, sluice:send({via, global, Gone}, <<"x">>)),
    ?assertEqual({error, closed}, sluice:send(sluice_api_suite_no_such_name, <<"x">>)),
    ?assertExit(_, sluice:call({global, Gone}, hello, 1000)),
    PidB ! {send_to, {global, Gone}, <<"nobody\n">>},
    ?expect({sent, PidB, ok}),
    ok = gen_tcp:close(B).

%% `{Name, Node}', the other name gen_server takes, reaches send/2,
%% close/1 and call/3 too, from other processes and from another
%% connection's handler; not registered, close/1 and a handler's send/2
%% are `ok'. close/1 and a handler's send/2 raised function_clause.
name_on_a_node_reaches_send_close_and_call(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    true = register(sluice_api_suite_conn, Pid),
    Dest = {sluice_api_suite_conn, node()},
    ?assertEqual({echo, hello}, sluice:call(Dest, hello, 5000)),
    ok = sluice:send(Dest, <<"by name\n">>),
    ?assertEqual({ok, <<"by name\n">>}, recv_line(S)),
    {ok, B} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    PidB = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    PidB ! {send_to, Dest, <<"from b\n">>},
    ?expect({sent, PidB, ok}),
    ?assertEqual({ok, <<"from b\n">>}, recv_line(S)),
    ok = sluice:close(Dest),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    ?expect({terminate, Pid, closed_by_api}),
    Gone = {sluice_api_suite_no_such_name, node()},
    ?assertEqual(ok, sluice:close(Gone)),
    PidB ! {send_to, Gone, <<"nobody\n">>},
    ?expect({sent, PidB, ok}),
    ok = gen_tcp:close(B).

%% sys:get_state/1 and sys:replace_state/2 see the handler's state, as a
%% gen_server's do its callback module's (they saw the loop's record); a
%% fun that raises leaves the connection as it was.
sys_state_is_the_handlers_state(Config) ->
    {S, Pid} = api(Config, #{}),
    Self = self(),
    ?assertMatch(#{test := Self, conn := #{pid := Pid}}, sys:get_state(Pid)),
    Replaced = sys:replace_state(Pid, fun(HState) -> HState#{mark => replaced} end),
    ?assertMatch(#{mark := replaced}, Replaced),
    ?assertEqual(Replaced, sluice:call(Pid, state, 2000)),
    ?assertError({callback_failed, _, _},
                 sys:replace_state(Pid, fun(_) -> error(no) end)),
    ?assertEqual(Replaced, sys:get_state(Pid)),
    ok = gen_tcp:send(S, <<"echo still here">>),
    ?assertEqual({ok, <<"still here\n">>}, gen_tcp:recv(S, 0, 2000)).

%% sluice:send/2 from another process: in order with the connection's
%% replies, counted in bytes_out, and the sender is left with no message
%% (no inet_reply, no reply tag).
send_from_another_process_is_ordered_counted_and_leaves_no_reply(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:send(S, <<"echo first">>),
    ?assertEqual({ok, <<"first\n">>}, recv_line(S)),
    Before = maps:get(bytes_out, sluice:info(Name)),
    Self = self(),
    spawn_link(fun() ->
                       R = [sluice:send(Pid, [<<"pushed ">>, integer_to_binary(I), $\n])
                            || I <- lists:seq(1, 100)],
                       {messages, Left} = process_info(self(), messages),
                       Self ! {sent, R, Left}
               end),
    receive {sent, R, Left} ->
            ?assertEqual(lists:duplicate(100, ok), R),
            ?assertEqual([], Left)
    after 5000 -> error(send_stuck)
    end,
    Lines = [recv_line(S) || _ <- lists:seq(1, 100)],
    ?assertEqual([{ok, <<"pushed ", (integer_to_binary(I))/binary, "\n">>}
                  || I <- lists:seq(1, 100)], Lines),
    Sent = lists:sum([byte_size(L) || {ok, L} <- Lines]),
    ?assertEqual(Before + Sent, maps:get(bytes_out, sluice:info(Name))),
    ?assertEqual([], queued(fun({inet_reply, _, _}) -> true; (_) -> false end)).

send_to_a_closed_connection_is_an_error(Config) ->
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:close(S),
    ?expect({terminate, Pid, closed}),
    ?assertEqual({error, closed}, sluice:send(Pid, <<"late">>)).

%% Two handlers that send to each other's connection at the same moment:
%% neither waits for the other (they would wait for ever), both clients get
%% the data.
connections_sending_to_each_other_do_not_wait_for_each_other(Config) ->
    Name = ?config(name, Config),
    {A, PidA} = api(Config, #{}),
    {ok, B} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    PidB = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    [begin
         PidA ! {send_to, PidB, [<<"from a ">>, integer_to_binary(I), $\n]},
         PidB ! {send_to, PidA, [<<"from b ">>, integer_to_binary(I), $\n]}
     end || I <- lists:seq(1, 50)],
    [?expect({sent, PidA, ok}) || _ <- lists:seq(1, 50)],
    [?expect({sent, PidB, ok}) || _ <- lists:seq(1, 50)],
    ?assertEqual([{ok, <<"from b ", (integer_to_binary(I))/binary, "\n">>} || I <- lists:seq(1, 50)],
                 [recv_line(A) || _ <- lists:seq(1, 50)]),
    ?assertEqual([{ok, <<"from a ", (integer_to_binary(I))/binary, "\n">>} || I <- lists:seq(1, 50)],
                 [recv_line(B) || _ <- lists:seq(1, 50)]).

%% sluice:close/1: the client sees what was queued, then FIN; the handler
%% is told (terminate/2) with reason closed_by_api.
close_from_another_process_sends_fin(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    ok = sluice:send(Pid, <<"last words\n">>),
    ok = sluice:close(#{pid => Pid}),
    ?assertEqual({ok, <<"last words\n">>}, recv_line(S)),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    ?expect({terminate, Pid, closed_by_api}),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000).

%% The client closes: handle_close/1, then terminate/2 with `closed';
%% counted as peer_closed.
peer_close_calls_handle_close_before_terminate(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:close(S),
    %% In this order, and nothing between them (no handle_error/2).
    ?assertEqual({peer_closed, Pid}, next_report(Pid)),
    ?assertEqual({terminate, Pid, closed}, next_report(Pid)),
    ?assertEqual([], queued(fun({error, P, _}) -> P =:= Pid; (_) -> false end)),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{peer_closed := 1}}, sluice:info(Name)).

%% The client resets (SO_LINGER 0) instead of closing: as the inet driver
%% tells it (and gen_tcp, on either backend), a close: handle_close/1,
%% terminate(closed), counted as peer_closed. On the socket backend it was
%% handle_error({socket_error, econnreset}) and a socket_error.
peer_reset_is_a_close_on_both_backends(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:send(S, <<"echo hi">>),
    ?assertEqual({ok, <<"hi\n">>}, gen_tcp:recv(S, 0, 5000)),
    ?assertEqual({data, Pid, <<"echo hi">>}, next_report(Pid)),
    ok = inet:setopts(S, [{linger, {true, 0}}]),
    ok = gen_tcp:close(S),
    ?assertEqual({peer_closed, Pid}, next_report(Pid)),
    ?assertEqual({terminate, Pid, closed}, next_report(Pid)),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{peer_closed := 1, socket_error := 0}}, sluice:info(Name)).

%% The client floods an echo and reads nothing, so the connection waits in
%% a send, then resets: the send fails as the inet driver says it,
%% `closed' (handle_error({socket_error, closed})), or the reset is seen
%% as the close it is; never econnreset or epipe, which the socket backend
%% said.
peer_reset_during_a_send_is_the_same_error_on_both_backends(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(
          Name, #{handler => {sluice_api_handler, #{test => self()}},
                  socket_opts => [{sndbuf, 8192}]}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name), [{recbuf, 4096}]),
    Pid = receive {init, P, _Conn} -> P after 5000 -> error(no_init) end,
    Chunk = binary:copy(<<"z">>, 65536),
    Writer = spawn_link(fun() -> flood(S, Chunk, 200) end),
    %% Until the connection's echoes back up and it waits in a send.
    ok = sluice_test_lib:wait_until(fun() -> sending(Pid) end, 5000),
    unlink(Writer),
    exit(Writer, kill),
    ok = inet:setopts(S, [{linger, {true, 0}}]),
    ok = gen_tcp:close(S),
    End = last_reports(Pid),
    ct:log("~p: ~p", [?config(transport, Config), End]),
    ?assert(End =:= [{error, Pid, {socket_error, closed}}, {terminate, Pid, {error, closed}}]
            orelse End =:= [{peer_closed, Pid}, {terminate, Pid, closed}], End),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000).

flood(_S, _Chunk, 0) -> ok;
flood(S, Chunk, N) ->
    case gen_tcp:send(S, Chunk) of
        ok -> flood(S, Chunk, N - 1);
        _ -> ok
    end.

%% Whether the connection process waits in a send (a busy port on inet, a
%% writable wait on socket).
sending(Pid) ->
    case process_info(Pid, current_function) of
        {current_function, {erts_internal, port_command, _}} -> true;
        {current_function, {sluice_transport_socket, wait_writable, _}} -> true;
        _ -> false
    end.

%% The reports of Pid after its data, up to its terminate/2.
last_reports(Pid) ->
    case next_report(Pid) of
        {data, Pid, _} -> last_reports(Pid);
        {terminate, Pid, _} = T -> [T];
        R -> [R | last_reports(Pid)]
    end.

%% A callback that raises: handle_error/2 with the crash, then
%% terminate/2, the socket closed, the connection counted as crashed and
%% the other connections untouched.
crash_calls_handle_error_then_terminate_and_is_counted(Config) ->
    Name = ?config(name, Config),
    {Other, OtherPid} = api(Config, #{}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ok = gen_tcp:send(S, <<"crash">>),
    %% In this order: the data that crashed it, handle_error/2, terminate/2.
    ?assertEqual({data, Pid, <<"crash">>}, next_report(Pid)),
    ?assertMatch({error, Pid, {crash, error, asked_to_crash, _}}, next_report(Pid)),
    ?assertEqual({terminate, Pid, asked_to_crash}, next_report(Pid)),
    ok = sluice_test_lib:expect_closed(S, 2000),
    ok = sluice_test_lib:wait_info(Name, connections, 1, 2000),
    ?assertMatch(#{close_reasons := #{crashed := 1}}, sluice:info(Name)),
    ok = gen_tcp:send(Other, <<"echo still here">>),
    ?assertEqual({ok, <<"still here\n">>}, recv_line(Other)),
    ?assert(is_process_alive(OtherPid)).

%% A result that is not one: the connection exits with
%% {bad_return_value, {Handler, Callback, Value}}.
bad_return_crashes_naming_handler_and_callback(Config) ->
    {S, Pid} = api(Config, #{}),
    MRef = erlang:monitor(process, Pid),
    ok = gen_tcp:send(S, <<"bad">>),
    Reason = receive {'DOWN', MRef, process, Pid, R} -> R after 5000 -> error(no_exit) end,
    ?assertMatch({bad_return_value, {sluice_api_handler, handle_data, {what, #{}}}}, Reason),
    ok = sluice_test_lib:expect_closed(S, 2000).

%% A reply that is not iodata is the handler's fault, not the socket's:
%% handle_error/2 and terminate/2 are told, the close counts as crashed. A
%% term that is neither a binary nor a list is not a result
%% (bad_return_value); a list with something else in it is found when it
%% is sent (bad_iodata). (Until 2026-11-27 both closed the connection as a
%% socket error on inet, and crashed it without callbacks on socket.)
reply_that_is_not_iodata_is_the_handlers_crash(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:send(S, <<"badio">>),
    ?assertEqual({data, Pid, <<"badio">>}, next_report(Pid)),
    ?assertMatch({error, Pid, {crash, exit, {bad_return_value,
                                            {sluice_api_handler, handle_data, {reply, foo, _}}},
                               []}}, next_report(Pid)),
    ?assertMatch({terminate, Pid, {bad_return_value, _}}, next_report(Pid)),
    ok = sluice_test_lib:expect_closed(S, 2000),
    {ok, S2} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid2 = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ok = gen_tcp:send(S2, <<"badlist">>),
    ?assertEqual({data, Pid2, <<"badlist">>}, next_report(Pid2)),
    ?assertEqual({error, Pid2, {crash, exit, {bad_iodata, [<<"a">>, 256]}, []}},
                 next_report(Pid2)),
    ?assertEqual({terminate, Pid2, {bad_iodata, [<<"a">>, 256]}}, next_report(Pid2)),
    ok = sluice_test_lib:expect_closed(S2, 2000),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{crashed := 2, socket_error := 0}}, sluice:info(Name)).

%% With framing, a handler that crashes on one frame of a chunk: the
%% replies to the frames before it go out first, as they would have had
%% the frames come in chunks of their own (what the client gets does not
%% depend on how TCP cut the bytes).
crash_on_a_frame_sends_the_replies_of_the_frames_before(Config) ->
    {S, Pid} = api(Config, #{framing => line}),
    ok = gen_tcp:send(S, <<"echo a\necho b\ncrash\n">>),
    ?expect({error, Pid, {crash, error, asked_to_crash, _}}),
    ?assertEqual({ok, <<"a\nb\n">>}, gen_tcp:recv(S, 4, 2000)),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 2000)),
    {S2, Pid2} = api2(Config),
    ok = gen_tcp:send(S2, <<"echo a\nbad\n">>),
    ?expect({terminate, Pid2, {bad_return_value, _}}),
    ?assertEqual({ok, <<"a\n">>}, gen_tcp:recv(S2, 2, 2000)),
    ?assertEqual({error, closed}, gen_tcp:recv(S2, 0, 2000)).

%% A second client of the listener api/2 started.
api2(Config) ->
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(?config(name, Config))),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    {S, Pid}.

%% init/2 that closes or raises leaves no state: handle_error/2 and
%% terminate/2 are not called (as a gen_server's terminate/2 is not after
%% its init/1 fails) rather than called with a state the handler never
%% returned; the close is still counted.
init_that_fails_gets_no_handle_error_or_terminate(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}, #{init => close}),
    ok = sluice_test_lib:expect_closed(S, 2000),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    sluice_test_lib:stop_listener(Name),
    {S2, Pid2} = api(Config, #{}, #{init => crash}),
    ok = sluice_test_lib:expect_closed(S2, 2000),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{crashed := 1}}, sluice:info(Name)),
    receive
        {Callback, P, _} when (Callback =:= error orelse Callback =:= terminate),
                              (P =:= Pid orelse P =:= Pid2) ->
            error({called_after_init_failed, Callback, P})
    after 300 -> ok
    end.

%% A handler that traps exits (process_flag in init/2) gets its
%% supervisor's shutdown as a gen_server does: the connection ends at
%% once, with terminate/2 ({shutdown, shutdown}), and handle_info/2 never
%% sees the supervisor's 'EXIT'. (It was handed to handle_info/2: the
%% connection lived on until the shutdown_timeout killed it, without
%% terminate/2, and outlived a supervisor that was killed.)
handler_that_traps_exits_ends_with_its_supervisor(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{shutdown_timeout => 5000}, #{trap_exit => true}),
    T0 = erlang:monotonic_time(millisecond),
    ok = sluice:stop_listener(Name),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ?assertEqual({terminate, Pid, {shutdown, shutdown}}, next_report(Pid)),
    ?assert(Ms < 2000, {stop_took, Ms}),
    ok = sluice_test_lib:expect_closed(S, 2000),
    {S2, Pid2} = api(Config, #{}, #{trap_exit => true}),
    [Sup] = [P || P <- sluice_test_lib:conns_sups(Name),
                  lists:member(Pid2, element(2, process_info(P, links)))],
    exit(Sup, kill),
    ?assertEqual({terminate, Pid2, {shutdown, killed}}, next_report(Pid2)),
    ok = sluice_test_lib:expect_closed(S2, 2000).

%% sluice:send/2 with data that is not iodata fails in the caller
%% (badarg, as gen_tcp:send/2), and the connection is untouched. (It was
%% sent on, and closed the connection.)
send_of_what_is_not_iodata_raises_in_the_caller(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{}),
    ?assertError(badarg, sluice:send(Pid, not_iodata)),
    ?assertError(badarg, sluice:send(Pid, [<<"a">>, 300])),
    ok = gen_tcp:send(S, <<"echo still">>),
    ?assertEqual({ok, <<"still\n">>}, gen_tcp:recv(S, 6, 2000)),
    ?assertEqual(ok, sluice:send(Pid, [<<"and">>, $\n])),
    ?assertEqual({ok, <<"and\n">>}, gen_tcp:recv(S, 4, 2000)),
    ?assertMatch(#{connections := 1, close_reasons := #{socket_error := 0, crashed := 0}},
                 sluice:info(Name)).

%% Idle is "no bytes from the client": messages to the handler, calls and
%% process inspection do not keep a connection open; bytes do.
idle_means_no_bytes_from_the_client(Config) ->
    Name = ?config(name, Config),
    Idle = 400,
    %% Before the connect: the connection's idle time starts when it is
    %% accepted (taken after, T0 made a close in time look 1 ms early
    %% on a loaded machine).
    T0 = erlang:monotonic_time(millisecond),
    {Quiet, QuietPid} = api(Config, #{idle_timeout => Idle}),
    {ok, Talker} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    TalkerPid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    %% Every 50 ms: a message, a call and an inspection for the quiet
    %% connection, bytes from the talker's client.
    Busy = spawn_link(fun Busy() ->
                              QuietPid ! poke,
                              _ = (catch sluice:call(QuietPid, hello, 500)),
                              _ = process_info(QuietPid, current_function),
                              ok = gen_tcp:send(Talker, <<"talk">>),
                              receive stop -> ok after 50 -> Busy() end
                      end),
    ?expect({terminate, QuietPid, idle_timeout}),
    Closed = erlang:monotonic_time(millisecond) - T0,
    ?assert(Closed >= Idle andalso Closed < 3 * Idle, Closed),
    ok = sluice_test_lib:expect_closed(Quiet, 1000),
    %% The talker's connection outlives several idle timeouts.
    timer:sleep(3 * Idle),
    ?assert(is_process_alive(TalkerPid)),
    unlink(Busy),
    exit(Busy, kill),
    ?assertMatch(#{close_reasons := #{idle_timeout := 1}}, sluice:info(Name)).

%% framing => line: handle_data/2 gets one line at a time, without its
%% delimiter, however the bytes were split; the replies to one chunk's
%% lines go out together. The client cannot tell one send from two (TCP
%% joins them), so the connection's calls to its transport's send/2 are
%% traced: one for the two lines of the first chunk, one for the second.
%% The second chunk is sent once the first one's replies are in, so that
%% the two are not read as one.
line_framing_delivers_whole_lines(Config) ->
    {S, Pid} = api(Config, #{framing => line}),
    T = sluice_transport:module(sluice_test_lib:transport()),
    1 = erlang:trace_pattern({T, send, 2}, true, [global]),
    1 = erlang:trace(Pid, true, [call]),
    ok = gen_tcp:send(S, <<"echo a\necho b\nech">>),
    ?assertEqual([{ok, <<"a\n">>}, {ok, <<"b\n">>}], [recv_line(S) || _ <- [a, b]]),
    ok = gen_tcp:send(S, <<"o c\n">>),
    ?assertEqual({ok, <<"c\n">>}, recv_line(S)),
    _ = erlang:trace(Pid, false, [call]),
    _ = erlang:trace_pattern({T, send, 2}, false, [global]),
    Ref = erlang:trace_delivered(Pid),
    ?expect({trace_delivered, Pid, Ref}),
    ?expect({data, Pid, <<"echo a">>}),
    ?expect({data, Pid, <<"echo b">>}),
    ?expect({data, Pid, <<"echo c">>}),
    ?assertEqual([<<"a\nb\n">>, <<"c\n">>], sends(Pid, T)).

%% The data of Pid's traced calls to T:send/2, in order.
sends(Pid, T) ->
    receive
        {trace, Pid, call, {T, send, [_, Out]}} -> [iolist_to_binary(Out) | sends(Pid, T)]
    after 0 -> []
    end.

%% framing => {length, 4}: a frame split over many writes arrives whole.
length_framing_delivers_whole_frames_across_chunks(Config) ->
    {S, Pid} = api(Config, #{framing => {length, 4}}),
    Body = binary:copy(<<"0123456789">>, 10000),
    Frame = <<(byte_size(Body)):32, Body/binary>>,
    _ = [begin ok = gen_tcp:send(S, Part), timer:sleep(1) end
         || Part <- sluice_test_lib:random_split(Frame, 1, 20000)],
    ?expect({data, Pid, Body}),
    {ok, Echo} = gen_tcp:recv(S, byte_size(Body), 5000),
    ?assertEqual(Body, Echo).

%% A frame over the framer's max: the replies to the frames before it in
%% the same chunk go out, then FIN; counted as a protocol error.
oversized_frame_sends_replies_owed_then_closes(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = api(Config, #{framing => {line, #{max => 16}}}),
    ok = gen_tcp:send(S, <<"echo one\necho two\n", (binary:copy(<<"x">>, 100))/binary>>),
    ?assertEqual({ok, <<"one\ntwo\n">>}, gen_tcp:recv(S, 8, 2000)),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    ?expect({terminate, Pid, {protocol_error, {line_too_long, _, 16}}}),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{protocol_errors := 1}, sluice:info(Name)).

%% A connection that closes while its replies are still queued (32 MB,
%% more than loopback's socket buffers hold, sent before the client reads
%% any) sends every byte before its FIN: closing never drops what is
%% queued (sluice_transport_inet:close_port/1 takes a shortcut only when
%% nothing is).
close_with_replies_queued_sends_them_all_before_fin(Config) ->
    {S, Pid} = api(Config, #{}),
    Big = binary:copy(<<"0123456789abcdef">>, 2 * 1024 * 1024),
    Pid ! {say, Big},
    ?expect({info, Pid, {say, _}}),
    %% (on the socket backend the send waits for the client to read, so
    %% the client reads at once; on inet the reply sits in the driver)
    ok = gen_tcp:send(S, <<"close">>),
    ?assertEqual(byte_size(Big), recv_until_closed(S, 0)),
    ?expect({data, Pid, <<"close">>}),
    ?expect({terminate, Pid, asked}).

%% A handler's own sluice:send/2 calls, then a `close' (or `reply_close')
%% result in the same callback: what it sent goes out, in order, before
%% the close (behind the reply_close's reply, as an own send goes behind
%% a reply), as gen_tcp:send/2 then close/1 do in a ranch protocol; they
%% were dropped, and the client got nothing (or only the reply).
own_sends_before_a_close_result_go_out_before_it(Config) ->
    {S, Pid} = api(Config, #{}),
    ok = gen_tcp:send(S, <<"sendclose a">>),
    ?assertEqual(<<"a1\na2\n">>, recv_all(S, <<>>)),
    ?expect({terminate, Pid, asked}),
    Name = ?config(name, Config),
    {ok, S2} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid2 = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ok = gen_tcp:send(S2, <<"sendbye b">>),
    ?assertEqual(<<"b\nb1\n">>, recv_all(S2, <<>>)),
    ?expect({terminate, Pid2, asked}).

%% Everything until the server's FIN.
recv_all(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, B} -> recv_all(S, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc
    end.

recv_until_closed(S, N) ->
    case gen_tcp:recv(S, 0, 10000) of
        {ok, B} -> recv_until_closed(S, N + byte_size(B));
        {error, closed} -> N
    end.

%% A drain whose handle_drain/1 carries on (`{ok, S, 50}'): the
%% connection is served until the drain's deadline, then closed there with
%% FIN and reason `drained' (terminate/2, close_reasons). The handler's
%% world is its own meanwhile: its result timeout still fires
%% (handle_timeout/1), a timer of its own with the very message the
%% deadline comes in reaches handle_info/2, and nothing of the library's
%% does.
drain_carried_on_closes_at_the_deadline(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = drain_listener(Config, #{}, #{drain_timeout => 50}),
    DrainMs = 600,
    T0 = erlang:monotonic_time(millisecond),
    Drainer = spawn_drain(Name, DrainMs),
    ?expect({drain, Pid}),
    ?expect({timeout, Pid}),
    ok = gen_tcp:send(S, <<"timer 100">>),
    ?assertEqual({ok, <<"set\n">>}, gen_tcp:recv(S, 0, 2000)),
    ?expect({info, Pid, {timeout, _, sluice_drain}}),
    ok = gen_tcp:send(S, <<"still served">>),
    ?assertEqual({ok, <<"still served">>}, gen_tcp:recv(S, 0, 2000)),
    ?assert(erlang:monotonic_time(millisecond) - T0 < DrainMs),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("closed ~b ms after a drain of ~b ms", [Ms, DrainMs]),
    ?assert(Ms >= DrainMs - 10 andalso Ms < DrainMs + 1000, Ms),
    ?expect({terminate, Pid, drained}),
    ?expect({drained, Drainer, {ok, _}}),
    ?assertEqual([], queued(fun({info, P, _}) -> P =:= Pid; (_) -> false end)),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertMatch(#{close_reasons := #{drained := 1}}, sluice:info(Name)).

%% A connection that carries on through a drain and then hibernates is
%% woken at the deadline and closed there all the same.
drain_deadline_reaches_a_hibernated_connection(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = drain_listener(Config, #{hibernate_after => 20}, #{}),
    DrainMs = 1000,
    T0 = erlang:monotonic_time(millisecond),
    Drainer = spawn_drain(Name, DrainMs),
    ?expect({drain, Pid}),
    %% (Looked at every 100 ms: process_info/2 on a process runs it, and
    %% a process that runs is not quiet.)
    ok = sluice_test_lib:wait_until(
           fun() -> process_info(Pid, current_function) =:=
                        {current_function, {erlang, hibernate, 3}}
           end, DrainMs - 200, 100),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 3000)),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ?assert(Ms >= DrainMs - 10 andalso Ms < DrainMs + 1000, Ms),
    ?expect({terminate, Pid, drained}),
    ?expect({drained, Drainer, {ok, _}}),
    ?assertEqual([], queued(fun({info, P, _}) -> P =:= Pid; (_) -> false end)).

%% Two drains of a connection that carries on through both (say drain/2,
%% then stop_listener/2): the handler is asked each time, and the
%% connection closes at the earlier deadline, whichever drain set it.
second_drain_the_earlier_deadline_stands(Config) ->
    Name = ?config(name, Config),
    lists:foreach(
      fun({FirstMs, SecondMs}) ->
              {S, Pid} = drain_listener(Config, #{}, #{}),
              T0 = erlang:monotonic_time(millisecond),
              First = spawn_drain(Name, FirstMs),
              ?expect({drain, Pid}),
              T1 = erlang:monotonic_time(millisecond),
              Second = spawn_drain(Name, SecondMs),
              ?expect({drain, Pid}),
              ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 5000)),
              Ms = erlang:monotonic_time(millisecond),
              Earlier = min(T0 + FirstMs, T1 + SecondMs),
              ?assert(Ms >= Earlier - 10 andalso Ms < Earlier + 800,
                      {FirstMs, SecondMs, Ms - Earlier}),
              ?expect({terminate, Pid, drained}),
              ?expect({drained, First, {ok, _}}),
              ?expect({drained, Second, {ok, _}}),
              sluice_test_lib:stop_listener(Name)
      end, [{3000, 400}, {400, 3000}]).

%% A listener of sluice_drain_handler reporting to this process; returns a
%% connected client socket (answered once) and the connection's pid.
drain_listener(Config, Opts, HOpts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(
          Name, maps:merge(#{handler => {sluice_drain_handler, HOpts#{test => self()}}}, Opts)),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
    ok = gen_tcp:send(S, <<"hello">>),
    {ok, <<"hello">>} = gen_tcp:recv(S, 0, 2000),
    {S, Pid}.

%% sluice:drain/2 returns at its deadline at the earliest here: run it
%% aside, its result sent as `{drained, Pid, Result}'.
spawn_drain(Name, DrainMs) ->
    Self = self(),
    spawn_link(fun() -> Self ! {drained, self(), sluice:drain(Name, DrainMs)} end).

%% A call its handler answers later, from a later callback, outlives a
%% quiet spell longer than park_after: a handler that takes calls is
%% reached at its pid (the caller monitors it), so it does not park. (On
%% the socket backend nothing parks.)
call_answered_later_survives_park_after(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(
          Name, #{handler => {sluice_call_handler, #{test => self()}},
                  hibernate_after => 20, park_after => 50}),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
    Self = self(),
    Caller = spawn_link(fun() -> Self ! {answer, self(), catch sluice:call(Pid, later, 5000)} end),
    ?expect({call, Pid, later}),
    timer:sleep(400),
    ?assertEqual(0, maps:get(parked, sluice:info(Name))),
    ?assertEqual([Pid], sluice:connections(Name)),
    ok = gen_tcp:send(S, <<"answer">>),
    ?assertEqual({ok, <<"done">>}, gen_tcp:recv(S, 0, 2000)),
    ?expect({answer, Caller, answered}).

%% child_spec/1 (Elixir's `{:sluice, opts}'): the name comes from the
%% options; the listener runs under the caller's supervisor.
child_spec_1_takes_the_name_from_the_options(_Config) ->
    Spec = sluice:child_spec([{name, api_child}, {ip, ?LOOPBACK}, {port, 0},
                              {handler, {sluice_proto_echo, []}}]),
    ?assertMatch(#{id := {sluice_listener, api_child}}, Spec),
    {ok, Sup} = supervisor:start_link(sluice_test_sup, [Spec]),
    try
        #{port := Port} = sluice:info(api_child),
        {ok, S} = sluice_test_lib:connect(Port),
        ok = gen_tcp:send(S, <<"x">>),
        ?assertEqual({ok, <<"x">>}, gen_tcp:recv(S, 0, 2000)),
        ?assertMatch(#{id := {sluice_listener, {sluice, 4040}}},
                     sluice:child_spec(#{port => 4040, handler => {sluice_proto_echo, []}})),
        ?assertError(#{reason := _}, sluice:child_spec(#{name => x}))
    after
        unlink(Sup),
        exit(Sup, shutdown)
    end.

%% A handler's pid never changes unless the listener asks for parking.
parking_is_off_by_default(_Config) ->
    ?assertEqual(infinity, maps:get(park_after, sluice_opts:defaults())).

%% After its FIN the connection waits for the client's close (in a
%% drain, up to its deadline: 10 s here; after reply_close, a second), and
%% nothing more can go out: sluice:send/2 from another process says
%% `{error, closed}' while the connection still waits, as gen_tcp:send/2
%% after a shutdown fails at once (it waited for the connection's end).
send_to_a_connection_past_its_fin_fails_at_once(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(
          Name, #{handler => {sluice_api_handler, #{test => self()}}}),
    %% A client that keeps its side open after the server's FIN.
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name), [{exit_on_close, false}]),
    Pid = receive {init, P, _Conn} -> P after 5000 -> error(no_init) end,
    ok = gen_tcp:send(S, <<"echo x">>),
    ?assertEqual({ok, <<"x\n">>}, gen_tcp:recv(S, 2, 5000)),
    Self = self(),
    _ = spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 10000)} end),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 5000)),
    ?assertEqual({error, closed}, sluice:send(Pid, <<"late">>)),
    ?assert(is_process_alive(Pid)),
    ok = gen_tcp:close(S),
    receive {drained, _} -> ok after 10000 -> error(drain_stuck) end,
    ok = sluice_test_lib:wait_info(Name, connections, 0, 3000).
