%% A handler's half-close, `{reply_shutdown, IoData, State}': IoData, then
%% FIN, and the connection reads on (sluice_conn_halfclose). On `inet' and
%% `socket' (groups), on `ssl' (TLS 1.2 and 1.3), and parked (`inet').
-module(sluice_halfclose_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([client_gets_reply_then_eof_and_still_sends/1,
         client_close_after_is_handle_close_once/1,
         replies_owed_to_earlier_frames_go_before_the_fin/1,
         reply_after_shutdown_crashes_the_connection/1,
         reply_after_shutdown_in_the_same_read_crashes/1,
         reply_close_after_shutdown_crashes/1,
         empty_replies_and_closes_after_shutdown_are_fine/1,
         shutdown_timeout_still_fires/1,
         api_send_after_shutdown_is_refused/1,
         drain_closes_a_half_closed_connection/1,
         handle_drain_may_half_close/1,
         tls_half_close/1,
         half_closed_connection_parks_and_wakes_half_closed/1,
         file_reply_after_shutdown_crashes/1,
         starttls_after_shutdown_crashes/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

all() ->
    [{group, G} || {G, _, _} <- groups()].

groups() ->
    sluice_test_lib:backend_groups(cases())
        ++ [{tls, [], [tls_half_close]},
            {inet_only, [], [half_closed_connection_parks_and_wakes_half_closed,
                             file_reply_after_shutdown_crashes,
                             starttls_after_shutdown_crashes]}].

cases() ->
    [client_gets_reply_then_eof_and_still_sends,
     client_close_after_is_handle_close_once,
     replies_owed_to_earlier_frames_go_before_the_fin,
     reply_after_shutdown_crashes_the_connection,
     reply_after_shutdown_in_the_same_read_crashes,
     reply_close_after_shutdown_crashes,
     empty_replies_and_closes_after_shutdown_are_fine,
     shutdown_timeout_still_fires,
     api_send_after_shutdown_is_refused,
     drain_closes_a_half_closed_connection,
     handle_drain_may_half_close].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    %% The crashes these cases cause are expected: kept out of the log.
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% Helpers -------------------------------------------------------------

listener(Config) ->
    listener(Config, #{}).

listener(Config, Opts) ->
    Name = ?config(name, Config),
    HOpts = maps:get(hopts, Opts, self()),
    _ = sluice_test_lib:start_listener(Name, maps:merge(#{handler => {sluice_cmd_handler, HOpts},
                                                          framing => line},
                                                        maps:remove(hopts, Opts))),
    sluice_test_lib:port(Name).

%% A client that can still send once it has read the server's FIN.
connect(Port) ->
    {ok, S} = sluice_test_lib:connect(Port, [{exit_on_close, false}]),
    Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
    {S, Pid}.

%% Everything up to the server's FIN.
recv_to_eof(S) ->
    recv_to_eof(S, erlang:monotonic_time(millisecond) + 5000, []).

recv_to_eof(S, Deadline, Acc) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    case gen_tcp:recv(S, 0, Left) of
        {ok, Data} -> recv_to_eof(S, Deadline, [Data | Acc]);
        {error, closed} -> iolist_to_binary(lists:reverse(Acc));
        {error, Reason} -> error({recv, Reason, iolist_to_binary(lists:reverse(Acc))})
    end.

expect(Msg) ->
    receive Msg -> ok after 5000 -> error({not_received, Msg}) end.

got(Pid, Line) ->
    receive {data, Pid, Line} -> ok after 5000 -> error({not_received, Line}) end.

%% Nothing more of these from Pid for a moment.
no_more(Pid) ->
    receive
        {handle_close, Pid} = M -> error({unexpected, M});
        {terminate, Pid, _} = M -> error({unexpected, M})
    after 100 -> ok
    end.

info(Config) ->
    sluice:info(?config(name, Config)).

%% accepted = closed + connections; the close reasons add up to closed.
counts_add_up(Config) ->
    ok = sluice_test_lib:wait_info(?config(name, Config), connections, 0, 5000),
    #{accepted := A, closed := C, connections := N, close_reasons := R} = info(Config),
    ?assertEqual(A, C + N),
    ?assertEqual(C, lists:sum(maps:values(R))),
    R.

crashed_with(Pid, Reason) ->
    receive
        {handle_error, Pid, {crash, exit, Reason, _}} -> ok
    after 5000 -> error({no_crash, Reason})
    end,
    expect({terminate, Pid, Reason}).

%%% Cases ---------------------------------------------------------------

%% The reply, then EOF; what the client sends after it still reaches
%% handle_data/2.
client_gets_reply_then_eof_and_still_sends(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    got(Pid, <<"shut bye">>),
    ok = gen_tcp:send(S, <<"quiet more\n">>),
    got(Pid, <<"quiet more">>),
    ok = gen_tcp:send(S, <<"quiet and more\n">>),
    got(Pid, <<"quiet and more">>),
    ?assertEqual([Pid], sluice:connections(?config(name, Config))),
    ok = gen_tcp:close(S).

%% The client's close after the half-close: handle_close/1 once, counted
%% `peer_closed'.
client_close_after_is_handle_close_once(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"quiet last\n">>),
    got(Pid, <<"quiet last">>),
    ok = gen_tcp:close(S),
    expect({handle_close, Pid}),
    expect({terminate, Pid, closed}),
    no_more(Pid),
    R = counts_add_up(Config),
    ?assertMatch(#{peer_closed := 1, crashed := 0, socket_error := 0}, R).

%% Frames read with the shutdown one, before it: their replies go out
%% first, then the shutdown's, then FIN.
replies_owed_to_earlier_frames_go_before_the_fin(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"echo a\necho b\nshut c\n">>),
    ?assertEqual(<<"a\nb\nc\n">>, recv_to_eof(S)),
    [got(Pid, L) || L <- [<<"echo a">>, <<"echo b">>, <<"shut c">>]],
    ok = gen_tcp:send(S, <<"quiet after\n">>),
    got(Pid, <<"quiet after">>),
    ok = gen_tcp:close(S),
    expect({handle_close, Pid}).

%% A reply after the half-close could never reach the client: the
%% connection crashes with `{reply_after_shutdown, Bytes}' (handle_error/2,
%% terminate/2), counted `crashed'.
reply_after_shutdown_crashes_the_connection(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"echo late\n">>),
    crashed_with(Pid, {reply_after_shutdown, 5}),
    R = counts_add_up(Config),
    ?assertMatch(#{crashed := 1, socket_error := 0, peer_closed := 0}, R),
    ok = gen_tcp:close(S).

%% The same for a frame after the shutdown one in the same read: the
%% shutdown's reply went out, then FIN, and the later reply crashes.
reply_after_shutdown_in_the_same_read_crashes(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\necho late\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    crashed_with(Pid, {reply_after_shutdown, 5}),
    ?assertMatch(#{crashed := 1}, counts_add_up(Config)),
    ok = gen_tcp:close(S).

%% `reply_close' with bytes after the half-close is a reply after it too.
reply_close_after_shutdown_crashes(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"closereply late\n">>),
    crashed_with(Pid, {reply_after_shutdown, 5}),
    ?assertMatch(#{crashed := 1, handler := 0}, counts_add_up(Config)),
    ok = gen_tcp:close(S).

%% An empty reply, `{ok, _}', a second empty half-close and a `close' are
%% fine: the handler's close is counted as its own.
empty_replies_and_closes_after_shutdown_are_fine(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"empty\nquiet\nshut\n">>),
    [got(Pid, L) || L <- [<<"empty">>, <<"quiet">>, <<"shut">>]],
    ok = gen_tcp:send(S, <<"close\n">>),
    expect({terminate, Pid, done}),
    ?assertMatch(#{handler := 1, crashed := 0}, counts_add_up(Config)),
    ok = gen_tcp:close(S).

%% `{reply_shutdown, IoData, State, Timeout}': the timeout of a
%% half-closed connection fires as any other.
shutdown_timeout_still_fires(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shutfor bye 50\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    receive {timeout, Pid, _} -> ok after 5000 -> error(no_timeout) end,
    ok = gen_tcp:close(S),
    expect({handle_close, Pid}).

%% sluice:send/2 from another process after the half-close: `{error,
%% closed}', as gen_tcp:send/2 after shutdown(S, write), and the
%% connection reads on.
api_send_after_shutdown_is_refused(Config) ->
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ?assertEqual({error, closed}, sluice:send(Pid, <<"x">>)),
    ok = gen_tcp:send(S, <<"quiet still\n">>),
    got(Pid, <<"quiet still">>),
    ok = gen_tcp:close(S),
    expect({handle_close, Pid}),
    ?assertMatch(#{peer_closed := 1, crashed := 0}, counts_add_up(Config)).

%% A drain closes a half-closed connection as any other (its FIN was sent
%% already): counted `drained', terminate/2 once.
drain_closes_a_half_closed_connection(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = connect(listener(Config)),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"quiet before\n">>),
    got(Pid, <<"quiet before">>),
    %% The connection waits for the client's close until the drain's
    %% deadline, then closes by its own timer at that deadline, while
    %% drain/2 counts what is still open at it: 0 or 1, by a hair.
    {ok, Left} = sluice:drain(Name, 200),
    ?assert(Left =< 1, Left),
    expect({terminate, Pid, drained}),
    ok = gen_tcp:close(S),
    ?assertMatch(#{drained := 1, crashed := 0}, counts_add_up(Config)).

%% handle_drain/1 may half-close: the goodbye, then FIN, and what the
%% client sends until it closes still reaches the handler; the client's
%% close before the deadline is its own (`peer_closed').
handle_drain_may_half_close(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = connect(listener(Config, #{hopts => {self(), drain_shutdown}})),
    Self = self(),
    _ = spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 5000)} end),
    expect({handle_drain, Pid}),
    ?assertEqual(<<"going down\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"quiet last words\n">>),
    got(Pid, <<"quiet last words">>),
    ok = gen_tcp:close(S),
    expect({handle_close, Pid}),
    expect({drained, {ok, 0}}),
    ?assertMatch(#{peer_closed := 1, drained := 0}, counts_add_up(Config)).

%% TLS (OTP 25's ssl): the reply, close_notify, then the TCP FIN, and the
%% server reads on. OTP's ssl client ends its side at the close_notify
%% (its send after it: `{error, closed}', TLS 1.2 and 1.3 alike; an
%% OpenSSL client can send on), so to see the server read on, the
%% client's second connection goes through a relay that holds back the
%% server's last record before its FIN (the close_notify: an alert under
%% TLS 1.2, type 21) and the FIN: that client sends after it, and the
%% handler gets it.
tls_half_close(Config) ->
    Name = ?config(name, Config),
    lists:foreach(
      fun(Version) ->
              Port = listener(Config, #{transport => ssl,
                                        tls_opts => sluice_tls_test_lib:server_opts(Config)}),
              %% Directly: the reply, then the close.
              S = tls_connect(Config, Port, Version),
              Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
              ok = ssl:send(S, <<"echo a\nshut bye\n">>),
              ?assertEqual(<<"a\nbye\n">>, ssl_recv_to_eof(S), Version),
              _ = ssl:close(S),
              expect({handle_close, Pid}),
              %% Through the relay: the server reads on after its FIN.
              {RelayPort, Relay} = start_withholding_relay(Port),
              S2 = tls_connect(Config, RelayPort, Version),
              Pid2 = receive {init, P2} -> P2 after 5000 -> error(no_init) end,
              Relay ! withhold,
              ok = ssl:send(S2, <<"echo a\nshut bye\n">>),
              {ok, <<"a\nbye\n">>} = ssl_recv_exactly(S2, 6),
              Held = receive {relay_fin, Relay, H} -> H after 5000 -> error(no_fin) end,
              _ = Version =:= 'tlsv1.2' andalso ?assertMatch(<<21, _/binary>>, Held),
              ok = ssl:send(S2, <<"quiet after the fin\n">>),
              got(Pid2, <<"quiet after the fin">>),
              _ = ssl:close(S2),
              expect({handle_close, Pid2}),
              ?assertMatch(#{peer_closed := 2, crashed := 0}, counts_add_up(Config)),
              sluice_test_lib:stop_listener(Name)
      end, ['tlsv1.2', 'tlsv1.3']).

tls_connect(Config, Port, Version) ->
    {ok, S} = ssl:connect(?LOOPBACK, Port,
                          [{versions, [Version]}, binary, {active, false}
                           | sluice_tls_test_lib:client_opts(Config)], 5000),
    S.

ssl_recv_to_eof(S) ->
    ssl_recv_to_eof(S, []).

ssl_recv_to_eof(S, Acc) ->
    case ssl:recv(S, 0, 5000) of
        {ok, Data} -> ssl_recv_to_eof(S, [Data | Acc]);
        {error, closed} -> iolist_to_binary(lists:reverse(Acc));
        {error, Reason} -> error({recv, Reason, iolist_to_binary(lists:reverse(Acc))})
    end.

ssl_recv_exactly(S, N) ->
    ssl:recv(S, N, 5000).

%% A TCP relay for one connection. Once told `withhold' (after the
%% handshake, whose flights it must not hold up), it passes the server's
%% TLS records to the client one behind, and at the server's FIN keeps the
%% last one and the FIN (told to the test as `{relay_fin, Relay,
%% Record}'), while the client's bytes and its close still go through.
start_withholding_relay(ServerPort) ->
    Parent = self(),
    Pid = spawn_link(
            fun() ->
                    {ok, L} = gen_tcp:listen(0, [binary, {ip, ?LOOPBACK}, {active, false}]),
                    {ok, RP} = inet:port(L),
                    Parent ! {relay_port, self(), RP},
                    {ok, C} = gen_tcp:accept(L, 5000),
                    {ok, S} = gen_tcp:connect(?LOOPBACK, ServerPort,
                                              [binary, {active, true}, {nodelay, true},
                                               {exit_on_close, false}]),
                    ok = inet:setopts(C, [{active, true}, {nodelay, true}]),
                    pass(C, S, Parent)
            end),
    receive {relay_port, Pid, RP} -> {RP, Pid} after 5000 -> error(relay_not_started) end.

pass(C, S, Parent) ->
    receive
        withhold -> withhold(C, S, <<>>, none, Parent);
        {tcp, C, Data} -> ok = gen_tcp:send(S, Data), pass(C, S, Parent);
        {tcp, S, Data} -> ok = gen_tcp:send(C, Data), pass(C, S, Parent)
    end.

withhold(C, S, Buf, Last, Parent) ->
    receive
        {tcp, C, Data} ->
            ok = gen_tcp:send(S, Data),
            withhold(C, S, Buf, Last, Parent);
        {tcp_closed, C} ->
            _ = gen_tcp:shutdown(S, write),
            receive {tcp_closed, S} -> ok after 5000 -> ok end;
        {tcp, S, Data} ->
            {Records, Rest} = whole_records(<<Buf/binary, Data/binary>>, []),
            Last2 = lists:foldl(fun(R, Prev) ->
                                        _ = Prev =:= none orelse gen_tcp:send(C, Prev),
                                        R
                                end, Last, Records),
            withhold(C, S, Rest, Last2, Parent);
        {tcp_closed, S} ->
            Parent ! {relay_fin, self(), Last},
            withhold(C, S, Buf, none, Parent)
    end.

whole_records(<<Type, V:16, Len:16, Body:Len/binary, Rest/binary>>, Acc) ->
    whole_records(Rest, [<<Type, V:16, Len:16, Body/binary>> | Acc]);
whole_records(Rest, Acc) ->
    {lists:reverse(Acc), Rest}.

%% Parked after its half-close, the connection wakes in a new process
%% that is half-closed too: it reads on, and a reply still crashes it
%% (rather than going to a shut socket as a socket error).
half_closed_connection_parks_and_wakes_half_closed(Config) ->
    Port = listener(Config, #{transport => inet, hibernate_after => 20, park_after => 50}),
    {S, Pid} = connect(Port),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = sluice_test_lib:wait_info(?config(name, Config), parked, 1, 3000),
    ok = gen_tcp:send(S, <<"quiet woken\n">>),
    Pid2 = receive {data, P, <<"quiet woken">>} -> P after 5000 -> error(not_woken) end,
    ?assertNotEqual(Pid, Pid2),
    ok = sluice_test_lib:wait_info(?config(name, Config), parked, 1, 3000),
    ok = gen_tcp:send(S, <<"echo late\n">>),
    crashed_with(receive {data, P3, <<"echo late">>} -> P3 after 5000 -> error(no_data) end,
                 {reply_after_shutdown, 5}),
    ?assertMatch(#{crashed := 1, socket_error := 0}, counts_add_up(Config)),
    ok = gen_tcp:close(S).

%% A reply with a file after the half-close: the same crash, with
%% `sendfile' for the bytes (the file is not read).
file_reply_after_shutdown_crashes(Config) ->
    File = filename:join(?config(priv_dir, Config), "file"),
    ok = file:write_file(File, <<"contents">>),
    {S, Pid} = connect(listener(Config, #{transport => inet})),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, ["file ", File, "\n"]),
    crashed_with(Pid, {reply_after_shutdown, sendfile}),
    ?assertMatch(#{crashed := 1, socket_error := 0}, counts_add_up(Config)),
    ok = gen_tcp:close(S).

%% STARTTLS after the half-close: no "go ahead" can be sent, and the
%% connection crashes as for a listener that cannot upgrade.
starttls_after_shutdown_crashes(Config) ->
    {S, Pid} = connect(listener(Config, #{transport => inet,
                                          tls_opts => sluice_tls_test_lib:server_opts(Config)})),
    ok = gen_tcp:send(S, <<"shut bye\n">>),
    ?assertEqual(<<"bye\n">>, recv_to_eof(S)),
    ok = gen_tcp:send(S, <<"starttls\n">>),
    crashed_with(Pid, {starttls_unavailable, write_shut_down}),
    ?assertMatch(#{crashed := 1}, counts_add_up(Config)),
    ok = gen_tcp:close(S).
