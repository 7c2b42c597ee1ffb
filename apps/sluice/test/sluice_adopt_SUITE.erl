%% sluice:adopt/2,3: a connected socket its owner gives to a running
%% listener, which serves it with its handler as if its acceptor had
%% accepted it. The round trip (a hand-off to a process that gives the
%% socket back with the bytes it read and did not handle), a protocol
%% sniffer of the user's own that gives sockets to two listeners, a plain
%% TCP socket given to a TLS listener (the handshake runs, with the bytes
%% the sniffer read first), an active socket's messages in its owner's
%% mailbox, every error leaving the socket with its owner and usable, the
%% connection limit, a drain and a stop reaching adopted connections,
%% framing with buffered bytes that split a frame, recv/3 in init/2,
%% a conns_sup being restarted, a client's reset, the owner's delivery
%% options, a handler adopting its own socket. Counts add up
%% throughout (accepted = closed + connections, close reasons sum to
%% closed).
%%
%% The handler is sluice_adopt_handler: it reports and echoes.
-module(sluice_adopt_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([round_trip_hands_everything_back_in_order/1,
         sniffer_gives_sockets_to_two_listeners/1,
         plain_socket_given_to_a_tls_listener_handshakes/1,
         active_sockets_messages_come_after_buffered/1,
         errors_leave_the_socket_with_its_owner/1,
         over_limit_gives_back_the_mailboxs_messages/1,
         drain_and_stop_reach_adopted_connections/1,
         buffered_bytes_that_split_a_frame/1,
         options_may_be_a_keyword_list/1,
         proxy_listener_reads_no_header_from_an_adopted_socket/1,
         closed_in_the_mailbox_gives_everything_back/1,
         recv_in_init_reads_the_buffered_bytes_first/1,
         restarting_conns_sup_leaves_everything_with_the_owner/1,
         reset_by_the_client_is_closed_a_listen_socket_badarg/1,
         owners_delivery_options_are_the_listeners/1,
         a_handler_cannot_adopt_its_own_socket/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}, {group, ssl}].

groups() ->
    Tcp = [round_trip_hands_everything_back_in_order,
           sniffer_gives_sockets_to_two_listeners,
           errors_leave_the_socket_with_its_owner,
           drain_and_stop_reach_adopted_connections,
           buffered_bytes_that_split_a_frame,
           recv_in_init_reads_the_buffered_bytes_first,
           reset_by_the_client_is_closed_a_listen_socket_badarg,
           a_handler_cannot_adopt_its_own_socket],
    [{inet, [], Tcp ++ [active_sockets_messages_come_after_buffered,
                        over_limit_gives_back_the_mailboxs_messages,
                        closed_in_the_mailbox_gives_everything_back,
                        proxy_listener_reads_no_header_from_an_adopted_socket,
                        restarting_conns_sup_leaves_everything_with_the_owner,
                        owners_delivery_options_are_the_listeners,
                        options_may_be_a_keyword_list]},
     {socket, [], Tcp},
     {ssl, [], [round_trip_hands_everything_back_in_order,
                plain_socket_given_to_a_tls_listener_handshakes,
                active_sockets_messages_come_after_buffered,
                errors_leave_the_socket_with_its_owner,
                recv_in_init_reads_the_buffered_bytes_first]}].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(T, Config) ->
    [{transport, T} | Config].

end_per_group(_, _Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, ?config(transport, Config), Case}} | Config].

end_per_testcase(_Case, Config) ->
    Name = ?config(name, Config),
    _ = [sluice_test_lib:stop_listener(N) || N <- [Name, {Name, a}, {Name, b}]],
    ok.

%%% Helpers ---------------------------------------------------------------

start(Config, Name, Opts) ->
    T = ?config(transport, Config),
    Tls = case T of
              ssl -> #{tls_opts => sluice_tls_test_lib:server_opts(Config)};
              _ -> #{}
          end,
    {ok, _} = sluice:start_listener(Name,
                                    maps:merge(#{ip => ?LOOPBACK, port => 0, transport => T,
                                                 handler => {sluice_adopt_handler, self()}},
                                               maps:merge(Tls, Opts))),
    sluice_test_lib:port(Name).

client(Config, Port) ->
    sluice_tls_test_lib:client(Port, Config).

send({M, S}, Data) -> ok = M:send(S, Data).

%% Exactly these bytes, then nothing more for a moment.
expect({M, S}, Expected) ->
    ?assertEqual(Expected, recv(M, S, byte_size(Expected), <<>>)),
    ?assertEqual({error, timeout}, M:recv(S, 0, 100)).

recv(_M, _S, 0, Acc) ->
    Acc;
recv(M, S, N, Acc) ->
    case M:recv(S, 0, 5000) of
        {ok, Data} when byte_size(Data) =< N -> recv(M, S, N - byte_size(Data), <<Acc/binary, Data/binary>>);
        {ok, Data} -> <<Acc/binary, Data/binary>>;
        Error -> {Acc, Error}
    end.

expect_closed({M, S}) ->
    ?assertMatch({error, _}, M:recv(S, 0, 5000)).

%% What one connection's handler was given, until `Bytes' bytes.
handled(Pid, Bytes) ->
    handled(Pid, Bytes, []).

handled(_Pid, 0, Acc) ->
    lists:reverse(Acc);
handled(Pid, Bytes, Acc) ->
    receive
        {data, Pid, Data} -> handled(Pid, Bytes - byte_size(Data), [Data | Acc])
    after 5000 ->
            ct:fail({handled, lists:reverse(Acc)})
    end.

%% The sums info/1's figures keep, once `Closed' connections have closed.
counts(Name, Accepted, Closed) ->
    ok = sluice_test_lib:wait_info(Name, closed, Closed, 5000),
    #{accepted := A, closed := C, connections := N, close_reasons := Reasons} = sluice:info(Name),
    ?assertEqual(Accepted, A),
    ?assertEqual(A, C + N),
    ?assertEqual(C, lists:sum(maps:values(Reasons))),
    Reasons.

%% A socket of the group's kind (a gen_tcp socket, or OTP's socket for
%% `socket') that the caller owns, connected to a plain TCP client.
own_listener(Kind) ->
    own_listener(Kind, [binary]).

own_listener(socket, _Mode) ->
    {ok, L} = socket:open(inet, stream, tcp),
    ok = socket:bind(L, #{family => inet, addr => ?LOOPBACK, port => 0}),
    ok = socket:listen(L),
    {ok, #{port := Port}} = socket:sockname(L),
    {socket, L, Port};
own_listener(_, Mode) ->
    {ok, L} = gen_tcp:listen(0, Mode ++ [{active, false}, {ip, ?LOOPBACK}]),
    {ok, Port} = inet:port(L),
    {gen_tcp, L, Port}.

own_accept({socket, L, _}) -> {ok, S} = socket:accept(L, 5000), {socket, S};
own_accept({gen_tcp, L, _}) -> {ok, S} = gen_tcp:accept(L, 5000), {gen_tcp, S}.

own_pair(Config) ->
    Own = {_, _, Port} = own_listener(?config(transport, Config)),
    {ok, C} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
    {own_accept(Own), {gen_tcp, C}, Own}.

close_own({socket, L, _}) -> socket:close(L);
close_own({gen_tcp, L, _}) -> gen_tcp:close(L).

%% The socket still works both ways for its owner.
usable({M, S}, Client) ->
    ok = M:send(S, <<"still\n">>),
    expect(Client, <<"still\n">>),
    send(Client, <<"yours">>),
    ?assertEqual({ok, <<"yours">>}, M:recv(S, 5, 5000)).

%% A client of the group's transport hands its connection off (UPGRADE),
%% and the taker runs Fun(Conn, Buffered) with the socket.
handed_off(Config, Port) ->
    C = client(Config, Port),
    send(C, <<"UPGRADE">>),
    expect(C, <<"101\n">>),
    receive
        {handed, To, Conn, Buffered} -> {C, To, Conn, Buffered}
    after 5000 -> ct:fail(no_handoff)
    end.

list_mode(sluice_transport_inet, S) -> inet:setopts(S, [list]);
list_mode(sluice_transport_ssl, S) -> ssl:setopts(S, [list]);
list_mode(sluice_transport_socket, _S) -> ok.

native(sluice_transport_inet) -> gen_tcp;
native(sluice_transport_socket) -> socket;
native(sluice_transport_ssl) -> ssl.

%% Run Fun in the taker (the socket's owner), and get what it returns.
in_taker(To, Fun) ->
    Test = self(),
    Ref = make_ref(),
    To ! {run, fun(Conn, Buffered) -> Test ! {Ref, Fun(Conn, Buffered)} end},
    receive {Ref, Result} -> Result after 15000 -> ct:fail(taker) end.

%%% Cases -----------------------------------------------------------------

%% The round trip: a connection hands its socket off (UPGRADE), the new
%% owner reads 5 bytes of what the client sent next and gives the socket
%% back to the same listener with them: the listener's handler sees
%% everything, in order, on a new connection whose Conn names the client.
round_trip_hands_everything_back_in_order(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, Name, #{}),
    {C, To, _Conn, <<>>} = handed_off(Config, Port),
    send(C, <<"hello world">>),
    {ok, Pid} = in_taker(To, fun(#{transport := T, socket := S}, Buffered) ->
                                     %% The taker's own mode (lists): the
                                     %% listener's handler still gets binaries.
                                     ok = list_mode(T, S),
                                     {ok, Five} = (native(T)):recv(S, 5, 5000),
                                     sluice:adopt(Name, S, #{buffered => [Buffered, Five]})
                             end),
    Conn2 = receive {init, Pid, Cn} -> Cn after 5000 -> ct:fail(no_init) end,
    expect(C, <<"hello world">>),
    ?assertEqual(<<"hello world">>, iolist_to_binary(handled(Pid, 11))),
    {M, CS} = C,
    {ok, ClientAddr} = case M of ssl -> ssl:sockname(CS); _ -> inet:sockname(CS) end,
    ?assertEqual({ok, ClientAddr}, sluice:peername(Conn2)),
    ?assertEqual(Name, maps:get(listener, Conn2)),
    #{handoff := 1} = counts(Name, 2, 1),
    #{bytes_in := In} = sluice:info(Name),
    %% UPGRADE, then hello world: the 5 bytes the taker read are counted
    %% as the adopted connection's (`buffered').
    ?assertEqual(7 + 11, In),
    ok = (element(1, C)):close(element(2, C)),
    #{peer_closed := 1} = counts(Name, 2, 2).

%% A protocol sniffer of the user's own: its acceptor reads the first two
%% bytes and gives each socket to the listener they name, with them.
sniffer_gives_sockets_to_two_listeners(Config) ->
    Name = ?config(name, Config),
    A = {Name, a},
    B = {Name, b},
    _ = start(Config, A, #{}),
    _ = start(Config, B, #{}),
    %% The sniffer's own sockets deliver lists: the listener's
    %% connections still get binaries (its delivery is set on adoption).
    Own = {_, _, Port} = own_listener(?config(transport, Config), [list]),
    Test = self(),
    Sniffer = spawn_link(fun() -> sniff(Own, #{<<"A:">> => A, <<"B:">> => B}, Test, 2) end),
    {ok, C1} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
    {ok, C2} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
    ok = gen_tcp:send(C1, <<"A:one">>),
    ok = gen_tcp:send(C2, <<"B:two">>),
    expect({gen_tcp, C1}, <<"A:one">>),
    expect({gen_tcp, C2}, <<"B:two">>),
    Inits = [receive {init, P, #{listener := L}} -> {L, P} after 5000 -> ct:fail(no_init) end
             || _ <- [1, 2]],
    ?assertEqual([A, B], lists:sort([L || {L, _} <- Inits])),
    ?assertEqual([<<"A:one">>, <<"B:two">>],
                 lists:sort([iolist_to_binary(handled(P, 5)) || {_, P} <- Inits])),
    receive {sniffed, Sniffer, done} -> ok after 5000 -> ct:fail(sniffer) end,
    _ = counts(A, 1, 0),
    _ = counts(B, 1, 0),
    ok = gen_tcp:close(C1),
    ok = gen_tcp:close(C2),
    _ = counts(A, 1, 1),
    _ = counts(B, 1, 1),
    close_own(Own).

sniff(_Own, _Routes, Test, 0) ->
    Test ! {sniffed, self(), done};
sniff(Own, Routes, Test, N) ->
    {M, S} = own_accept(Own),
    {ok, First} = M:recv(S, 2, 5000),
    {ok, _} = sluice:adopt(maps:get(iolist_to_binary(First), Routes), S,
                           #{buffered => First}),
    sniff(Own, Routes, Test, N - 1).

%% A plain gen_tcp socket given to a TLS listener: the handshake runs as
%% after an accept, the bytes the sniffer read (the start of the client's
%% hello) first.
plain_socket_given_to_a_tls_listener_handshakes(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    Own = {_, _, Port} = own_listener(inet),
    Test = self(),
    _ = spawn_link(fun() ->
                           {gen_tcp, S} = own_accept(Own),
                           %% 22: a TLS handshake record
                           {ok, <<22>> = First} = gen_tcp:recv(S, 1, 5000),
                           Test ! {adopted, sluice:adopt(Name, S, #{buffered => First})}
                   end),
    {ok, C} = sluice_tls_test_lib:connect(Port, Config),
    {ok, Pid} = receive {adopted, R} -> R after 5000 -> ct:fail(no_adopt) end,
    receive {init, Pid, #{transport := sluice_transport_ssl}} -> ok
    after 5000 -> ct:fail(no_init)
    end,
    ok = ssl:send(C, <<"over tls">>),
    expect({ssl, C}, <<"over tls">>),
    _ = counts(Name, 1, 0),
    ok = ssl:close(C),
    _ = counts(Name, 1, 1),
    close_own(Own).

%% An active socket has sent its owner what it read: those messages are
%% taken out of the owner's mailbox, after `buffered' and in order.
active_sockets_messages_come_after_buffered(Config) ->
    case ?config(transport, Config) of
        ssl -> active_ssl(Config);
        _ -> active_inet(Config)
    end.

active_inet(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    {{gen_tcp, S}, C, Own} = own_pair(Config),
    ok = inet:setopts(S, [{active, true}]),
    send(C, <<"one">>),
    wait_mailbox(tcp, S, 3),
    send(C, <<"two">>),
    wait_mailbox(tcp, S, 6),
    {ok, Pid} = sluice:adopt(Name, S, #{buffered => <<"zero">>}),
    ?assertEqual([], [M || M = {tcp, S1, _} <- mailbox(), S1 =:= S]),
    expect(C, <<"zeroonetwo">>),
    ?assertEqual(<<"zeroonetwo">>, iolist_to_binary(handled(Pid, 10))),
    ok = sluice_test_lib:wait_info(Name, bytes_in, 10, 5000),
    _ = counts(Name, 1, 0),
    close_own(Own).

active_ssl(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, Name, #{}),
    {C, To, _Conn, <<>>} = handed_off(Config, Port),
    Test = self(),
    Ref = make_ref(),
    To ! {run, fun(#{socket := S}, <<>>) ->
                       ok = ssl:setopts(S, [{active, true}]),
                       Test ! {Ref, active},
                       wait_mailbox(ssl, S, 6),
                       Test ! {Ref, sluice:adopt(Name, S, #{buffered => <<"zero">>}),
                               [M || M = {ssl, S1, _} <- mailbox(), S1 =:= S]}
               end},
    receive {Ref, active} -> ok after 5000 -> ct:fail(taker) end,
    send(C, <<"one">>),
    send(C, <<"two">>),
    {{ok, Pid}, Left} = receive {Ref, R, L} -> {R, L} after 15000 -> ct:fail(taker) end,
    ?assertEqual([], Left),
    expect(C, <<"zeroonetwo">>),
    ?assertEqual(<<"zeroonetwo">>, iolist_to_binary(handled(Pid, 10))),
    _ = counts(Name, 2, 1).

%% (A receive first: on OTP 25 process_info/2 sees only the messages a
%% receive has taken in.)
mailbox() ->
    receive '$adopt_suite_nothing' -> ok after 0 -> ok end,
    {messages, Msgs} = process_info(self(), messages),
    Msgs.

%% Until the socket's data messages in this process's mailbox hold N bytes.
wait_mailbox(Tag, S, N) ->
    ok = sluice_test_lib:wait_until(
           fun() ->
                   N =:= lists:sum([byte_size(D) || {T, S1, D} <- mailbox(),
                                                    T =:= Tag, S1 =:= S])
           end, 5000).

%% Every refusal leaves the socket with its owner, open, and usable both
%% ways; none is counted.
errors_leave_the_socket_with_its_owner(Config) ->
    case ?config(transport, Config) of
        ssl -> errors_ssl(Config);
        _ -> errors_tcp(Config)
    end.

errors_tcp(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    {{M, S} = Own, C, L} = own_pair(Config),
    refusals(Name, S, fun() -> usable(Own, C) end),
    %% A socket of another kind than the listener's transport takes.
    Other = case M of
                socket -> element(2, own_accept_other(gen_tcp));
                gen_tcp -> element(2, own_accept_other(socket))
            end,
    ?assertError(badarg, sluice:adopt(Name, Other)),
    usable(Own, C),
    %% A gen_tcp socket on the socket backend: gen_tcp's, not a
    %% transport's.
    {ok, LB} = gen_tcp:listen(0, [{inet_backend, socket}, binary, {ip, ?LOOPBACK}]),
    {ok, PB} = inet:port(LB),
    {ok, _CB} = gen_tcp:connect(?LOOPBACK, PB, [binary]),
    {ok, SB} = gen_tcp:accept(LB, 5000),
    ?assertError(badarg, sluice:adopt(Name, SB)),
    ?assertMatch(#{accepted := 0, closed := 0, connections := 0}, sluice:info(Name)),
    %% Closed.
    ok = M:close(S),
    ?assertEqual({error, closed}, sluice:adopt(Name, S)),
    ?assertMatch(#{accepted := 0, closed := 0, connections := 0}, sluice:info(Name)),
    close_own(L).

own_accept_other(Kind) ->
    Own = {_, _, Port} = own_listener(case Kind of gen_tcp -> inet; socket -> socket end),
    {ok, _C} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
    own_accept(Own).

errors_ssl(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, Name, #{}),
    {C, To, _Conn, <<>>} = handed_off(Config, Port),
    Result = in_taker(To, fun(#{socket := S}, <<>>) ->
                                  refusals(Name, S, fun() -> usable({ssl, S}, C) end),
                                  ok
                          end),
    ?assertEqual(ok, Result),
    _ = counts(Name, 1, 1).

%% not_found, not_owner, suspended, over_limit, bad options: each checked
%% with Usable() after it.
refusals(Name, S, Usable) ->
    ?assertEqual({error, not_found}, sluice:adopt({Name, nobody}, S)),
    Usable(),
    Test = self(),
    _ = spawn_link(fun() -> Test ! {other, sluice:adopt(Name, S)} end),
    ?assertEqual({error, not_owner}, receive {other, R} -> R after 5000 -> timeout end),
    Usable(),
    ok = sluice:suspend(Name),
    ?assertEqual({error, suspended}, sluice:adopt(Name, S)),
    ok = sluice:resume(Name),
    Usable(),
    #{accepted := Before} = sluice:info(Name),
    ok = sluice:set_max_connections(Name, 0),
    ?assertEqual({error, over_limit}, sluice:adopt(Name, S, #{buffered => <<"x">>})),
    ok = sluice:set_max_connections(Name, infinity),
    ?assertMatch(#{accepted := Before}, sluice:info(Name)),
    Usable(),
    ?assertError(badarg, sluice:adopt(Name, S, #{buffered => not_iodata})),
    ?assertError(badarg, sluice:adopt(Name, S, #{other => 1})),
    ?assertError(badarg, sluice:adopt(Name, S, [{other, 1}])),
    ?assertError(badarg, sluice:adopt(Name, self())),
    Usable().

%% Refused at the limit, an active socket's messages are still the
%% owner's, in their order.
over_limit_gives_back_the_mailboxs_messages(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{max_connections => 0}),
    {{gen_tcp, S}, C, Own} = own_pair(Config),
    ok = inet:setopts(S, [{active, true}]),
    send(C, <<"one">>),
    wait_mailbox(tcp, S, 3),
    send(C, <<"two">>),
    wait_mailbox(tcp, S, 6),
    ?assertEqual({error, over_limit}, sluice:adopt(Name, S)),
    ?assertEqual(<<"onetwo">>,
                 iolist_to_binary([D || {tcp, S1, D} <- mailbox(), S1 =:= S])),
    %% Still active, still delivering.
    send(C, <<"three">>),
    wait_mailbox(tcp, S, 11),
    close_own(Own).

%% A drain reaches an adopted connection (closed `drained'), and a stop
%% of its listener closes it.
drain_and_stop_reach_adopted_connections(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    {{_, S}, C, Own} = own_pair(Config),
    {ok, Pid} = sluice:adopt(Name, S),
    receive {init, Pid, _} -> ok after 5000 -> ct:fail(no_init) end,
    %% The client closes once it sees the drain's FIN, which the drain
    %% waits for.
    Closer = closes_at_fin(C),
    ?assertEqual({ok, 0}, sluice:drain(Name, 5000)),
    receive {fin, Closer} -> ok after 5000 -> ct:fail(no_fin) end,
    #{drained := 1} = counts(Name, 1, 1),
    %% Drained, the listener takes no more.
    {{_, S2}, C2, Own2} = own_pair(Config),
    ?assertEqual({error, suspended}, sluice:adopt(Name, S2)),
    ok = sluice:resume(Name),
    {ok, Pid2} = sluice:adopt(Name, S2),
    Ref = monitor(process, Pid2),
    ok = sluice:stop_listener(Name),
    receive {'DOWN', Ref, process, Pid2, _} -> ok after 5000 -> ct:fail(not_stopped) end,
    expect_closed(C2),
    close_own(Own),
    close_own(Own2).

closes_at_fin({gen_tcp, C}) ->
    Test = self(),
    P = spawn_link(fun() ->
                           receive go -> ok end,
                           {error, closed} = gen_tcp:recv(C, 0, 5000),
                           ok = gen_tcp:close(C),
                           Test ! {fin, self()}
                   end),
    ok = gen_tcp:controlling_process(C, P),
    P ! go,
    P.

%% Buffered bytes that end mid-line: the framer joins them with what
%% comes from the socket.
buffered_bytes_that_split_a_frame(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{framing => line}),
    {{_, S}, C, Own} = own_pair(Config),
    {ok, Pid} = sluice:adopt(Name, S, #{buffered => [<<"he">>, "l"]}),
    send(C, <<"lo\nwor">>),
    send(C, <<"ld\n">>),
    ?assertEqual([<<"hello">>, <<"world">>], handled(Pid, 10)),
    expect(C, <<"helloworld">>),
    ok = sluice_test_lib:wait_info(Name, bytes_in, 12, 5000),
    close_own(Own).

%% adopt/3's options as a proplist, Elixir's `adopt(name, socket,
%% buffered: bytes)', read as a listener's are (the first of a repeated
%% key wins); `[]' is none. A list that is not one of options, or holds
%% another key, still raises badarg, and the socket stays the caller's.
options_may_be_a_keyword_list(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{framing => line}),
    {{_, S}, C, Own} = own_pair(Config),
    ?assertError(badarg, sluice:adopt(Name, S, "hel")),
    ?assertError(badarg, sluice:adopt(Name, S, [{buffered, <<"hel">>}, {tls, none}])),
    ?assertError(badarg, sluice:adopt(Name, S, [{buffered, <<"hel">>} | improper])),
    {ok, Pid} = sluice:adopt(Name, S, [{buffered, [<<"he">>, "l"]}, {buffered, <<"ignored">>}]),
    send(C, <<"lo\n">>),
    ?assertEqual([<<"hello">>], handled(Pid, 5)),
    expect(C, <<"hello">>),
    {{_, S2}, C2, Own2} = own_pair(Config),
    {ok, Pid2} = sluice:adopt(Name, S2, []),
    send(C2, <<"bye\n">>),
    ?assertEqual([<<"bye">>], handled(Pid2, 3)),
    expect(C2, <<"bye">>),
    close_own(Own2),
    close_own(Own).

%% A listener that expects a PROXY header (from its load balancer) reads
%% none from an adopted socket: its first bytes are the client's.
proxy_listener_reads_no_header_from_an_adopted_socket(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{proxy_protocol => true}),
    {{_, S}, C, Own} = own_pair(Config),
    {ok, Pid} = sluice:adopt(Name, S, #{buffered => <<"GET">>}),
    receive {init, Pid, Conn} -> ?assertNot(maps:is_key(proxy, Conn))
    after 5000 -> ct:fail(no_init)
    end,
    send(C, <<" /">>),
    expect(C, <<"GET /">>),
    _ = counts(Name, 1, 0),
    close_own(Own).

%% The client's last bytes and its close in the owner's mailbox: nothing
%% to adopt (`closed'), and both are given back to the owner, in order.
closed_in_the_mailbox_gives_everything_back(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    {{gen_tcp, S}, {gen_tcp, C}, Own} = own_pair(Config),
    %% (Open after the client's close, as the listener's own sockets are.)
    ok = inet:setopts(S, [{active, true}, {exit_on_close, false}]),
    ok = gen_tcp:send(C, <<"bye">>),
    wait_mailbox(tcp, S, 3),
    ok = gen_tcp:close(C),
    ok = sluice_test_lib:wait_until(fun() -> lists:member({tcp_closed, S}, mailbox()) end, 5000),
    ?assertEqual({error, closed}, sluice:adopt(Name, S)),
    ?assertEqual([{tcp, S, <<"bye">>}, {tcp_closed, S}],
                 [M || M <- mailbox(), element(2, M) =:= S]),
    ?assertMatch(#{accepted := 0, closed := 0, connections := 0}, sluice:info(Name)),
    close_own(Own).

%% sluice:recv/3 in init/2 of an adopted connection reads `buffered'
%% first, then the socket: on an established TLS socket too, whose
%% buffered plaintext went to handle_data/2 after init/2 (recv read the
%% client's later bytes before it, and timed out here).
recv_in_init_reads_the_buffered_bytes_first(Config) ->
    Name = ?config(name, Config),
    B = {Name, b},
    {ok, _} = sluice:start_listener(B, maps:merge(
                                         #{ip => ?LOOPBACK, port => 0,
                                           transport => ?config(transport, Config),
                                           handler => {sluice_adopt_handler,
                                                       {recv_in_init, 4, self()}}},
                                         case ?config(transport, Config) of
                                             ssl -> #{tls_opts => sluice_tls_test_lib:server_opts(Config)};
                                             _ -> #{}
                                         end)),
    {C, Adopt} =
        case ?config(transport, Config) of
            ssl ->
                Port = start(Config, Name, #{}),
                {C0, To, _Conn, <<>>} = handed_off(Config, Port),
                Test = self(),
                To ! {run, fun(#{socket := S}, <<>>) ->
                                   Test ! {adopted, sluice:adopt(B, S, #{buffered => <<"AB">>})}
                           end},
                {C0, fun() -> receive {adopted, R} -> R after 5000 -> ct:fail(no_adopt) end end};
            _ ->
                {{_, S}, C0, _Own} = own_pair(Config),
                {C0, fun() -> sluice:adopt(B, S, #{buffered => <<"AB">>}) end}
        end,
    {ok, Pid} = Adopt(),
    send(C, <<"CD">>),
    ?assertEqual({ok, <<"ABCD">>},
                 receive {init_recv, Pid, R} -> R after 10000 -> ct:fail(no_init) end),
    %% and the connection reads on, nothing given twice
    send(C, <<"EF">>),
    expect(C, <<"EF">>),
    ?assertEqual([<<"EF">>], handled(Pid, 2)),
    ok = sluice_test_lib:wait_info(B, bytes_in, 6, 5000),
    _ = counts(B, 1, 0).

%% A connection supervisor being restarted (sluice_registry still names
%% the dead one): `not_found', and the socket is the caller's as it was,
%% its messages back in its mailbox, active, in its own mode. (They were
%% lost, the socket left passive, in binary mode, with the listener's
%% options.)
restarting_conns_sup_leaves_everything_with_the_owner(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{num_conns_sups => 1}),
    [Sup] = sluice_test_lib:conns_sups(Name),
    {dictionary, Dict} = process_info(Sup, dictionary),
    [SupSup | _] = proplists:get_value('$ancestors', Dict),
    %% Its supervisor cannot restart it while suspended.
    ok = sys:suspend(SupSup),
    try
        Ref = monitor(process, Sup),
        exit(Sup, kill),
        receive {'DOWN', Ref, process, Sup, _} -> ok end,
        Own = {_, _, Port} = own_listener(inet, [list]),
        {ok, C} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
        {gen_tcp, S} = own_accept(Own),
        ok = inet:setopts(S, [{active, true}]),
        ok = gen_tcp:send(C, <<"one">>),
        ok = sluice_test_lib:wait_until(fun() -> lists:member({tcp, S, "one"}, mailbox()) end, 5000),
        ?assertEqual({error, not_found}, sluice:adopt(Name, S)),
        ?assertEqual([{tcp, S, "one"}], [M || M <- mailbox(), element(2, M) =:= S]),
        ?assertEqual({ok, [{mode, list}, {active, true}]}, inet:getopts(S, [mode, active])),
        ?assertMatch(#{accepted := 0, closed := 0, connections := 0}, sluice:info(Name)),
        close_own(Own)
    after
        sys:resume(SupSup)
    end.

%% A client that sends its first bytes and resets (an adversary, or a
%% crash): the socket has no peer any more, `closed' (it was an
%% undocumented `{error, badarg}'); a listen socket is not a connection
%% at all: badarg raised, as for a socket of the wrong kind (it was
%% returned).
reset_by_the_client_is_closed_a_listen_socket_badarg(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    Own = {_, L, Port} = own_listener(?config(transport, Config)),
    {ok, C} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}, {linger, {true, 0}}]),
    {M, S} = own_accept(Own),
    ok = gen_tcp:send(C, <<"hi">>),
    {ok, <<"hi">>} = M:recv(S, 2, 5000),
    ok = gen_tcp:close(C),
    %% (the RST arrived: the socket has no peer)
    Peername = case M of gen_tcp -> fun inet:peername/1; socket -> fun socket:peername/1 end,
    ok = sluice_test_lib:wait_until(fun() -> Peername(S) =:= {error, enotconn} end, 5000),
    ?assertEqual({error, closed}, sluice:adopt(Name, S, #{buffered => <<"hi">>})),
    ?assertError(badarg, sluice:adopt(Name, L)),
    ?assertMatch(#{accepted := 0, closed := 0, connections := 0}, sluice:info(Name)),
    _ = M:close(S),
    close_own(Own).

%% gen_tcp delivery options its owner set (a `header', `{deliver, port}')
%% are gen_tcp's defaults again, as on the listener's own sockets: the
%% connection got nothing (`deliver') or crashed on a list (`header').
owners_delivery_options_are_the_listeners(Config) ->
    Name = ?config(name, Config),
    _ = start(Config, Name, #{}),
    [begin
         {{gen_tcp, S}, C, Own} = own_pair(Config),
         ok = inet:setopts(S, [Opt]),
         {ok, Pid} = sluice:adopt(Name, S, #{buffered => <<"ab">>}),
         send(C, <<"cd">>),
         expect(C, <<"abcd">>),
         ?assertEqual(<<"abcd">>, iolist_to_binary(handled(Pid, 4))),
         close_own(Own)
     end || Opt <- [{deliver, port}, {header, 2}]],
    _ = counts(Name, 2, 0).

%% A handler that gives its own connection's socket to a listener (as a
%% ranch protocol passes its socket to another's start_link/3): badarg,
%% the connection goes on. It was adopted: two connections on one socket,
%% both counted, and the first one's idle timeout closed it under the
%% second.
a_handler_cannot_adopt_its_own_socket(Config) ->
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, #{ip => ?LOOPBACK, port => 0,
                                            transport => ?config(transport, Config),
                                            handler => {sluice_adopt_handler, {own, self()}}}),
    {ok, C} = gen_tcp:connect(?LOOPBACK, sluice_test_lib:port(Name), [binary, {active, false}]),
    Pid = receive {init, P, _} -> P after 5000 -> ct:fail(no_init) end,
    ok = gen_tcp:send(C, <<"ADOPT">>),
    ?assertEqual({raised, badarg},
                 receive {adopt_own, Pid, R} -> R after 5000 -> ct:fail(no_adopt) end),
    expect({gen_tcp, C}, <<"still\n">>),
    ?assertEqual([Pid], sluice:connections(Name)),
    _ = counts(Name, 1, 0),
    ok = gen_tcp:close(C),
    _ = counts(Name, 1, 1).
