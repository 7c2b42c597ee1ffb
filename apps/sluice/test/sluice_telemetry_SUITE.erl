%% Telemetry: with a `telemetry' module on the code path (here the stand-in
%% in test/telemetry.erl) a connection emits `[sluice, connection, start]'
%% and `[sluice, connection, stop]' and a failed accept `[sluice, listener,
%% accept_error]' and a connection closed at once (over max_connections,
%% or while the listener stops accepting) `[sluice, listener, rejected]',
%% with the measurements and metadata sluice_telemetry documents; without
%% one, nothing is called and nothing breaks.
-module(sluice_telemetry_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([start_and_stop_of_a_connection_the_client_closes/1,
         stop_says_why_the_connection_ended/1,
         stop_reasons_of_the_library_are_those_documented/1,
         a_failed_accept_is_an_event/1,
         a_connection_over_the_limit_is_a_rejected_event/1,
         a_newcomer_closed_by_a_suspend_is_a_rejected_event/1,
         without_telemetry_nothing_is_called_and_nothing_breaks/1,
         a_stop_event_finds_its_close_reason_counted/1]).

-define(WAIT, 5000).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [start_and_stop_of_a_connection_the_client_closes,
     stop_says_why_the_connection_ended,
     stop_reasons_of_the_library_are_those_documented,
     a_failed_accept_is_an_event,
     a_connection_over_the_limit_is_a_rejected_event,
     a_newcomer_closed_by_a_suspend_is_a_rejected_event,
     without_telemetry_nothing_is_called_and_nothing_breaks,
     a_stop_event_finds_its_close_reason_counted].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    {module, telemetry} = code:ensure_loaded(telemetry),
    true = sluice_telemetry:refresh(),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    true = telemetry:forward_to_me(),
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    ok = telemetry:stop_forwarding(),
    [sluice_test_lib:stop_listener(N) || {sluice_listener, N} <- listeners(Config)],
    ok.

%% Every listener a case may have started: its name, with a suffix.
listeners(Config) ->
    Name = ?config(name, Config),
    [{sluice_listener, N} || N <- sluice:listeners(), element(1, N) =:= Name orelse N =:= Name].

%%% ------------------------------------------------------------------

%% start: `#{system_time, monotonic_time}', `#{listener, pid, peer}' with
%% the connection's pid and the client's address, before the handler sees
%% data; stop: `#{duration,
%% monotonic_time}' where duration is the time since start (native units),
%% `#{listener, pid, reason}', reason `closed' when the client closed.
%% The handler (sluice_test_handler, an echo) tells this process of its
%% init from the connection's process, which emits the start event too:
%% the start event must come first in this mailbox.
start_and_stop_of_a_connection_the_client_closes(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_test_handler,
                                                       #{test_pid => self()}}}),
    Before = erlang:monotonic_time(),
    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = gen_tcp:send(Sock, <<"hello">>),
    {ok, <<"hello">>} = gen_tcp:recv(Sock, 5, ?WAIT),
    First = receive
                {telemetry, [sluice, connection, start], M, #{listener := Name} = Md} -> {M, Md};
                {sluice_test_handler, {init, _}} -> handler_init_first
            after ?WAIT -> ct:fail({no_event, [sluice, connection, start], Name})
            end,
    ?assertNotEqual(handler_init_first, First),
    {Start, StartMeta} = First,
    receive {sluice_test_handler, {init, _}} -> ok after ?WAIT -> ct:fail(no_init) end,
    ?assertEqual([monotonic_time, system_time], lists:sort(maps:keys(Start))),
    #{monotonic_time := Started, system_time := SystemTime} = Start,
    ?assert(Started >= Before),
    ?assert(abs(SystemTime - erlang:system_time()) < erlang:convert_time_unit(?WAIT, millisecond, native)),
    ?assertEqual([listener, peer, pid], lists:sort(maps:keys(StartMeta))),
    #{listener := Name, pid := Pid, peer := Peer} = StartMeta,
    ?assertEqual(inet:sockname(Sock), {ok, Peer}),
    ?assertEqual([Pid], sluice:connections(Name)),
    ok = gen_tcp:close(Sock),
    {Stop, StopMeta} = event([sluice, connection, stop], Name),
    ?assertEqual([duration, monotonic_time], lists:sort(maps:keys(Stop))),
    #{duration := Duration, monotonic_time := Stopped} = Stop,
    ?assertEqual(Started, Stopped - Duration),
    ?assert(Duration > 0 andalso Stopped =< erlang:monotonic_time()),
    ?assertEqual(#{listener => Name, pid => Pid, reason => closed}, StopMeta),
    nothing_more(Name).

%% The stop event's reason is the connection's own: the idle timeout, a
%% framing error, a handler that raised (with what it raised).
stop_says_why_the_connection_ended(Config) ->
    Name = ?config(name, Config),
    Ended = fun(Suffix, Opts, Send) ->
                    L = {Name, Suffix},
                    sluice_test_lib:start_listener(L, Opts),
                    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(L)),
                    ok = gen_tcp:send(Sock, Send),
                    {_, #{pid := Pid}} = event([sluice, connection, start], L),
                    {_, #{pid := Pid, reason := Reason}} = event([sluice, connection, stop], L),
                    ok = gen_tcp:close(Sock),
                    Reason
            end,
    ?assertEqual(idle_timeout,
                 Ended(idle, #{handler => {sluice_proto_echo, []}, idle_timeout => 100}, <<>>)),
    ?assertMatch({protocol_error, {line_too_long, _, 4}},
                 Ended(framing, #{handler => {sluice_proto_echo, []},
                                  framing => {line, #{max => 4}}}, <<"much too long\n">>)),
    ?assertEqual(crash_requested,
                 Ended(crash, #{handler => {sluice_test_handler, #{}}}, <<"crash">>)).

%% The library's other reasons, as sluice_telemetry and the README list
%% them (they listed only the client's close, the idle timeout, a
%% protocol or socket error and the handler's own): a drain, a result's
%% Timeout with no handle_timeout/1, sluice:close/1; one start and one
%% stop each, whatever the reason.
stop_reasons_of_the_library_are_those_documented(Config) ->
    Name = ?config(name, Config),
    Ended = fun(Suffix, Handler, End) ->
                    L = {Name, Suffix},
                    sluice_test_lib:start_listener(L, #{handler => Handler}),
                    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(L)),
                    {_, #{pid := Pid}} = event([sluice, connection, start], L),
                    End(L, Pid),
                    {_, #{pid := Pid, reason := Reason}} = event([sluice, connection, stop], L),
                    ok = sluice_test_lib:expect_closed(Sock, ?WAIT),
                    nothing_more(L),
                    Reason
            end,
    ?assertEqual(drained, Ended(drain, {sluice_proto_echo, []},
                                fun(L, _Pid) -> {ok, _} = sluice:drain(L, 1000) end)),
    ?assertEqual(timeout, Ended(timeout, {sluice_timeout_handler, 50}, fun(_, _) -> ok end)),
    ?assertEqual(closed_by_api, Ended(api, {sluice_proto_echo, []},
                                      fun(_L, Pid) -> ok = sluice:close(Pid) end)).

%% `#{count => 1}', `#{listener, reason}' for every failed accept; the
%% acceptor carries on.
a_failed_accept_is_an_event(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                          transport => sluice_faulty_transport,
                                          num_acceptors => 1}),
    Port = sluice_test_lib:port(Name),
    ok = sluice_faulty_transport:fail_next_accept(econnaborted),
    {ok, Refused} = sluice_test_lib:connect(Port),
    ok = sluice_test_lib:expect_closed(Refused, ?WAIT),
    ?assertEqual({#{count => 1}, #{listener => Name, reason => econnaborted}},
                 event([sluice, listener, accept_error], Name)),
    ?assertMatch(#{accept_errors := #{econnaborted := 1}}, sluice:info(Name)),
    {ok, Sock} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(Sock, <<"still here">>),
    {ok, <<"still here">>} = gen_tcp:recv(Sock, 10, ?WAIT),
    {_, _} = event([sluice, connection, start], Name),
    ok = gen_tcp:close(Sock).

%% `#{count => 1}', `#{listener, reason => max_connections}' for each
%% connection closed over the limit, as many as info/1's `rejected'; the
%% one admitted has its start event and no rejected one.
a_connection_over_the_limit_is_a_rejected_event(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                          max_connections => 1, max_connections_wait => 0}),
    Port = sluice_test_lib:port(Name),
    {ok, In} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(In, <<"in">>),
    {ok, <<"in">>} = gen_tcp:recv(In, 2, ?WAIT),
    {_, _} = event([sluice, connection, start], Name),
    [begin
         {ok, Out} = sluice_test_lib:connect(Port),
         ok = sluice_test_lib:expect_closed(Out, ?WAIT),
         ?assertEqual({#{count => 1}, #{listener => Name, reason => max_connections}},
                      event([sluice, listener, rejected], Name))
     end || _ <- [1, 2, 3]],
    ?assertMatch(#{accepted := 1, rejected := 3}, sluice:info(Name)),
    nothing_more(Name),
    ok = gen_tcp:close(In).

%% A newcomer waiting for a slot when the listener suspends is closed at
%% once: reason `suspended' (not the limit's).
a_newcomer_closed_by_a_suspend_is_a_rejected_event(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                          max_connections => 1,
                                          max_connections_wait => 60000}),
    Port = sluice_test_lib:port(Name),
    {ok, In} = sluice_test_lib:connect(Port),
    {_, _} = event([sluice, connection, start], Name),
    {ok, Waiting} = sluice_test_lib:connect(Port),
    ok = sluice_test_lib:wait_until(fun() -> waiting_for_a_slot(Name) end, ?WAIT),
    ok = sluice:suspend(Name),
    ok = sluice_test_lib:expect_closed(Waiting, ?WAIT),
    ?assertEqual({#{count => 1}, #{listener => Name, reason => suspended}},
                 event([sluice, listener, rejected], Name)),
    ?assertMatch(#{rejected := 1}, sluice:info(Name)),
    nothing_more(Name),
    ok = gen_tcp:close(In).

%% With telemetry gone from the code path, refresh/0 (which a listener's
%% connection supervisors call when they start) finds it absent: the same
%% traffic as above, a failed accept included, works, and nothing tries
%% to call it. (Its directory is off the code path, so a call could not
%% load it again: a call shows only as one to the error handler, which
%% raises undef, and a `catch' around the call would hide that; calls to
%% the error handler for telemetry are traced in every process started
%% from here on, the listener's.)
without_telemetry_nothing_is_called_and_nothing_breaks(Config) ->
    Name = ?config(name, Config),
    Dir = filename:dirname(code:which(telemetry)),
    %% What this case needs from the directory that goes, loaded first.
    [{module, M} = code:ensure_loaded(M)
     || M <- [sluice_test_lib, sluice_faulty_transport, sluice_test_handler]],
    true = code:del_path(Dir),
    try
        _ = code:purge(telemetry),
        true = code:delete(telemetry),
        _ = code:purge(telemetry),
        ?assertNot(sluice_telemetry:refresh()),
        ?assertNot(sluice_telemetry:enabled()),
        1 = erlang:trace_pattern({error_handler, undefined_function, 3}, true, [global]),
        _ = erlang:trace(new_processes, true, [call, {tracer, self()}]),
        sluice_test_lib:start_listener(Name, #{handler => {sluice_test_handler, #{}},
                                              transport => sluice_faulty_transport,
                                              num_acceptors => 1}),
        Port = sluice_test_lib:port(Name),
        ok = sluice_faulty_transport:fail_next_accept(econnaborted),
        {ok, Refused} = sluice_test_lib:connect(Port),
        ok = sluice_test_lib:expect_closed(Refused, ?WAIT),
        {ok, Sock} = sluice_test_lib:connect(Port),
        ok = gen_tcp:send(Sock, <<"echo">>),
        {ok, <<"echo">>} = gen_tcp:recv(Sock, 4, ?WAIT),
        ok = gen_tcp:close(Sock),
        {ok, Crash} = sluice_test_lib:connect(Port),
        ok = gen_tcp:send(Crash, <<"crash">>),
        ok = sluice_test_lib:expect_closed(Crash, ?WAIT),
        ok = sluice_test_lib:wait_info(Name, connections, 0, ?WAIT),
        ?assertMatch(#{accepted := 2, accept_errors := #{econnaborted := 1},
                       close_reasons := #{peer_closed := 1, crashed := 1}},
                     sluice:info(Name)),
        ?assertEqual(false, code:is_loaded(telemetry)),
        receive {telemetry, _, _, _} = Event -> ct:fail({unexpected, Event})
        after 200 -> ok
        end,
        receive
            {trace, Pid, call, {error_handler, undefined_function, [telemetry | _] = Call}} ->
                ct:fail({telemetry_called, Pid, Call})
        after 0 -> ok
        end
    after
        _ = erlang:trace(new_processes, false, [call]),
        _ = erlang:trace_pattern({error_handler, undefined_function, 3}, false, [global]),
        true = code:add_patha(Dir),
        {module, telemetry} = code:ensure_loaded(telemetry),
        true = sluice_telemetry:refresh()
    end.

%% A telemetry handler (it runs in the connection's process) that reads
%% info/1 on the stop event finds the connection's close reason counted,
%% as it did before the count moved after the handler's last callbacks
%% (2026-11: the count came after the event, and such a handler, or a
%% test that reads the figures on the event, found none).
a_stop_event_finds_its_close_reason_counted(Config) ->
    Name = ?config(name, Config),
    Me = self(),
    ok = telemetry:run_in_caller(
           fun([sluice, connection, stop], _, #{listener := L = {N, _}}) when N =:= Name ->
                   #{close_reasons := Reasons} = sluice:info(L),
                   Me ! {reasons_at_stop, L, maps:filter(fun(_, C) -> C > 0 end, Reasons)};
              (_, _, _) ->
                   ok
           end),
    AtStop = fun(Suffix, Opts, End) ->
                     L = {Name, Suffix},
                     sluice_test_lib:start_listener(L, Opts),
                     {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(L)),
                     {_, #{pid := Pid}} = event([sluice, connection, start], L),
                     End(Sock, Pid),
                     receive {reasons_at_stop, L, R} -> R
                     after ?WAIT -> ct:fail({no_stop_event, L})
                     end
             end,
    Echo = #{handler => {sluice_proto_echo, []}},
    ?assertEqual(#{peer_closed => 1},
                 AtStop(peer, Echo, fun(Sock, _) -> ok = gen_tcp:close(Sock) end)),
    ?assertEqual(#{idle_timeout => 1},
                 AtStop(idle, Echo#{idle_timeout => 50}, fun(_, _) -> ok end)),
    ?assertEqual(#{handler => 1},
                 AtStop(api, Echo, fun(_, Pid) -> ok = sluice:close(Pid) end)),
    ?assertEqual(#{drained => 1},
                 AtStop(drain, Echo, fun(_, _) -> {ok, _} = sluice:drain({Name, drain}, 1000) end)).

%%% ------------------------------------------------------------------

%% The next event of this kind from this listener (other listeners of
%% the test run may emit too, or tools' periodic events).
event(Event, Name) ->
    receive
        {telemetry, Event, Measurements, #{listener := Name} = Meta} -> {Measurements, Meta}
    after ?WAIT ->
            ct:fail({no_event, Event, Name})
    end.

%% An acceptor of the listener is in its wait for a slot.
waiting_for_a_slot(Name) ->
    lists:any(fun(Pid) ->
                      process_info(Pid, current_function)
                          =:= {current_function, {sluice_stats, retry_admit, 2}}
              end, sluice_test_lib:acceptor_pids(Name)).

nothing_more(Name) ->
    receive
        {telemetry, Event, _, #{listener := Name}} -> ct:fail({unexpected, Event})
    after 100 -> ok
    end.
