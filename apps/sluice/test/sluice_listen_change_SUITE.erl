%% The listen side of a running listener, as ranch users change it
%% (ranch:set_transport_options/2: the port, the backlog, the acceptors,
%% the socket options, applied when the listener next opens its sockets),
%% and a listen socket of the user's own (ranch 1's `socket' option:
%% systemd's socket activation, a port bound before dropping privileges).
%%
%% Changes: stored at once (get_transport_opts/1), applied at resume/1
%% after suspend/1 or when the sockets' owner is restarted by the
%% listener's supervisor (info/1 says the port bound); a port taken at
%% resume leaves a suspended listener that resumes once the port is free
%% or changed back; one bad key changes nothing.
%%
%% An own socket: listened on, on inet, socket and ssl; owned by the
%% listener from its start (closed when it stops, kept open while it is
%% suspended or its processes are restarted); each bad input refused at
%% start with words from format_error/1.
-module(sluice_listen_change_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([port_changed_at_resume/1,
         backlog_acceptors_and_socket_opts_changed_at_resume/1,
         socket_opts_reach_new_connections_at_resume/1,
         port_taken_at_resume_leaves_a_resumable_listener/1,
         one_bad_key_changes_nothing/1,
         sockets_owner_restart_uses_the_new_values/1,
         listener_restart_keeps_the_listen_side_opened/1,
         own_socket_inet/1,
         own_socket_socket/1,
         own_socket_ssl/1,
         own_socket_kept_over_suspend_and_restart/1,
         own_socket_listener_is_not_restarted/1,
         own_socket_closed_under_the_listener/1,
         own_ipv6_socket_is_the_listeners_ip/1,
         own_socket_bad_inputs/1,
         own_socket_listen_options_refused/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 40}}].

all() ->
    [port_changed_at_resume,
     backlog_acceptors_and_socket_opts_changed_at_resume,
     socket_opts_reach_new_connections_at_resume,
     port_taken_at_resume_leaves_a_resumable_listener,
     one_bad_key_changes_nothing,
     sockets_owner_restart_uses_the_new_values,
     listener_restart_keeps_the_listen_side_opened,
     own_socket_inet,
     own_socket_socket,
     own_socket_ssl,
     own_socket_kept_over_suspend_and_restart,
     own_socket_listener_is_not_restarted,
     own_socket_closed_under_the_listener,
     own_ipv6_socket_is_the_listeners_ip,
     own_socket_bad_inputs,
     own_socket_listen_options_refused].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    {ok, _} = application:ensure_all_started(ssl),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_log_forwarder:stop(),
    Name = ?config(name, Config),
    _ = [sluice_test_lib:stop_listener({Name, T}) || T <- [inet, socket, ssl]],
    sluice_test_lib:stop_listener(Name).

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

start(Name, T, Opts) ->
    Where = case Opts of
                #{listen_socket := _} -> #{};
                _ -> #{ip => ?LOOPBACK, port => 0}
            end,
    {ok, Pid} = sluice:start_listener(Name, maps:merge(Where#{transport => T,
                                                              handler => {sluice_proto_echo, []}},
                                                       Opts)),
    Pid.

%% A port nobody listens on (bound and let go).
free_port() ->
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    {ok, Port} = inet:port(L),
    ok = gen_tcp:close(L),
    Port.

%% An echo round trip on Port.
echo(Port) ->
    {ok, S} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(S, <<"ping">>),
    ?assertEqual({ok, <<"ping">>}, gen_tcp:recv(S, 4, 5000)),
    ok = gen_tcp:close(S).

refused(Port) ->
    ?assertEqual({error, econnrefused}, sluice_test_lib:connect(Port)).

listen_sockets(Name) ->
    {ok, #{listen_sockets := LSocks}} = sluice_registry:lookup(Name),
    LSocks.

listen_sockets_pid(Name) ->
    {ok, #{sup := Sup}} = sluice_registry:lookup(Name),
    {_, Pid, _, _} = lists:keyfind(sluice_listen_sockets, 1, supervisor:which_children(Sup)),
    Pid.

%% The backlogs the kernel's listen(2) is asked for while Fun runs, at
%% the library's boundary (gen_tcp:listen/2, socket:listen/2): the
%% kernel does not say a socket's backlog back.
listen_backlogs(Fun) ->
    Pats = [{gen_tcp, listen, 2}, {socket, listen, 2}],
    _ = [erlang:trace_pattern(P, true, [global]) || P <- Pats],
    _ = erlang:trace(all, true, [call, {tracer, self()}]),
    try Fun()
    after
        _ = erlang:trace(all, false, [call]),
        _ = [erlang:trace_pattern(P, false, [global]) || P <- Pats]
    end,
    backlogs([]).

backlogs(Acc) ->
    receive
        {trace, _, call, {gen_tcp, listen, [_Port, Opts]}} ->
            backlogs([proplists:get_value(backlog, Opts) | Acc]);
        {trace, _, call, {socket, listen, [_S, Backlog]}} ->
            backlogs([Backlog | Acc])
    after 0 ->
            lists:usort(Acc)
    end.

%%% ------------------------------------------------------------------
%%% Changes of the listen side
%%% ------------------------------------------------------------------

%% A new port is stored at once and used from the next resume: meanwhile
%% the listener serves on the old one and info/1 says so; after it, the
%% new port serves and the old one is refused. On both backends.
port_changed_at_resume(Config) ->
    _ = [port_changed_at_resume(Config, T) || T <- [inet, socket]],
    ok.

port_changed_at_resume(Config, T) ->
    Name = {?config(name, Config), T},
    start(Name, T, #{}),
    Old = sluice_test_lib:port(Name),
    New = free_port(),
    ok = sluice:set_transport_opts(Name, #{port => New}),
    ?assertMatch({ok, #{port := New}}, sluice:get_transport_opts(Name)),
    ?assertMatch(#{port := Old, status := running}, sluice:info(Name)),
    echo(Old),
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    ?assertMatch(#{port := New, status := running}, sluice:info(Name)),
    echo(New),
    refused(Old),
    %% and kept over the next suspend/resume
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    ?assertMatch(#{port := New}, sluice:info(Name)),
    echo(New),
    ok = sluice:stop_listener(Name).

%% The backlog the sockets are opened with, the number of acceptors and
%% the socket options the listen socket has: the old ones until the
%% resume, the new ones after it.
backlog_acceptors_and_socket_opts_changed_at_resume(Config) ->
    _ = [backlog_acceptors_and_socket_opts(Config, T) || T <- [inet, socket]],
    ok.

backlog_acceptors_and_socket_opts(Config, T) ->
    Name = {?config(name, Config), T},
    start(Name, T, #{backlog => 16, num_acceptors => 4, num_listen_sockets => 1,
                     socket_opts => [{recbuf, 16384}]}),
    ?assertEqual(4, length(sluice_test_lib:acceptor_pids(Name))),
    Recbuf = fun() -> [L] = listen_sockets(Name), recbuf(T, L) end,
    Before = Recbuf(),
    ok = sluice:set_transport_opts(Name, #{backlog => 32, num_acceptors => 2,
                                           socket_opts => [{recbuf, 65536}]}),
    ?assertEqual(4, length(sluice_test_lib:acceptor_pids(Name))),
    ?assertEqual(Before, Recbuf()),
    ok = sluice:suspend(Name),
    ?assertEqual([32], listen_backlogs(fun() -> ok = sluice:resume(Name) end)),
    ?assertEqual(2, length(sluice_test_lib:acceptor_pids(Name))),
    After = Recbuf(),
    ?assert(After > Before),
    ?assertMatch({ok, #{backlog := 32, num_acceptors := 2}}, sluice:get_transport_opts(Name)),
    echo(sluice_test_lib:port(Name)),
    ok = sluice:stop_listener(Name).

recbuf(inet, L) ->
    {ok, [{recbuf, V}]} = inet:getopts(L, [recbuf]),
    V;
recbuf(socket, L) ->
    {ok, V} = socket:getopt(L, {socket, rcvbuf}),
    V.

%% `socket_opts' a connection takes from the listener itself rather than
%% from the listen socket (SO_PRIORITY, which Linux's accepted sockets do
%% not inherit) reach the connections accepted from the sockets opened
%% with them: not before the resume, even from a connection supervisor
%% restarted meanwhile; after it, yes.
socket_opts_reach_new_connections_at_resume(Config) ->
    _ = [socket_opts_at_resume(Config, T) || T <- [inet, socket]],
    ok.

socket_opts_at_resume(Config, T) ->
    Name = {?config(name, Config), T},
    start(Name, T, #{handler => {sluice_api_handler, #{test => self()}},
                     socket_opts => [{priority, 1}], num_conns_sups => 1}),
    ?assertEqual(1, conn_priority(Name)),
    ok = sluice:set_transport_opts(Name, #{socket_opts => [{priority, 2}]}),
    ?assertEqual(1, conn_priority(Name)),
    [Sup] = sluice_test_lib:conns_sups(Name),
    exit(Sup, kill),
    ok = sluice_test_lib:wait_until(
           fun() -> [S || S <- sluice_test_lib:conns_sups(Name), S =/= Sup] =/= [] end, 5000),
    ?assertEqual(1, conn_priority(Name)),
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    ?assertEqual(2, conn_priority(Name)),
    %% and a connection supervisor restarted now has the new ones
    [Sup2] = sluice_test_lib:conns_sups(Name),
    exit(Sup2, kill),
    ok = sluice_test_lib:wait_until(
           fun() -> [S || S <- sluice_test_lib:conns_sups(Name), S =/= Sup2] =/= [] end, 5000),
    ?assertEqual(2, conn_priority(Name)),
    ok = sluice:stop_listener(Name).

conn_priority(Name) ->
    {ok, C} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Conn = receive {init, _, Conn0} -> Conn0 after 5000 -> error(no_connection) end,
    {ok, [{priority, P}]} = sluice:getopts(Conn, [priority]),
    ok = gen_tcp:close(C),
    P.

%% The new port taken when the listener resumes: resume/1 says so, the
%% listener stays suspended with neither sockets nor acceptors, and it
%% resumes once the port is changed back, or once it is free.
port_taken_at_resume_leaves_a_resumable_listener(Config) ->
    Name = ?config(name, Config),
    start(Name, inet, #{}),
    Old = sluice_test_lib:port(Name),
    {ok, Squatter} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    {ok, Taken} = inet:port(Squatter),
    ok = sluice:set_transport_opts(Name, #{port => Taken}),
    ok = sluice:suspend(Name),
    ?assertEqual({error, eaddrinuse}, sluice:resume(Name)),
    Suspended = fun() ->
                        ?assertMatch(#{status := suspended, port := Old}, sluice:info(Name)),
                        {ok, #{sup := Sup}} = sluice_registry:lookup(Name),
                        Children = supervisor:which_children(Sup),
                        ?assertMatch({_, undefined, _, _},
                                     lists:keyfind(sluice_listen_sockets, 1, Children)),
                        ?assertMatch({_, undefined, _, _},
                                     lists:keyfind(sluice_acceptors_sup, 1, Children)),
                        refused(Old)
                end,
    Suspended(),
    ?assertEqual({error, eaddrinuse}, sluice:resume(Name)),
    Suspended(),
    %% changed back
    ok = sluice:set_transport_opts(Name, #{port => Old}),
    ok = sluice:resume(Name),
    echo(Old),
    %% or freed
    ok = sluice:set_transport_opts(Name, #{port => Taken}),
    ok = sluice:suspend(Name),
    ?assertEqual({error, eaddrinuse}, sluice:resume(Name)),
    Suspended(),
    ok = gen_tcp:close(Squatter),
    ok = sluice:resume(Name),
    ?assertMatch(#{status := running, port := Taken}, sluice:info(Name)),
    echo(Taken),
    refused(Old).

%% A call with one bad key or one key that cannot change changes nothing,
%% the good keys beside it included.
one_bad_key_changes_nothing(Config) ->
    Name = ?config(name, Config),
    start(Name, inet, #{num_acceptors => 3}),
    Port = sluice_test_lib:port(Name),
    {ok, Before} = sluice:get_transport_opts(Name),
    New = free_port(),
    ?assertEqual({error, {bad_option, backlog, 0}},
                 sluice:set_transport_opts(Name, #{port => New, backlog => 0})),
    ?assertEqual({error, {not_changeable, num_conns_sups}},
                 sluice:set_transport_opts(Name, #{port => New, num_acceptors => 5,
                                                   num_conns_sups => 7})),
    ?assertEqual({error, {bad_option, socket_opts, {active, true}}},
                 sluice:set_transport_opts(Name, #{num_acceptors => 5,
                                                   socket_opts => [{active, true}]})),
    %% from TCP to a Unix socket: the connections' handling differs
    ?assertEqual({error, {not_changeable, ip}},
                 sluice:set_transport_opts(Name, #{ip => {local, <<"/tmp/sluice-x.sock">>}})),
    ?assertEqual({ok, Before}, sluice:get_transport_opts(Name)),
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    ?assertMatch(#{port := Port}, sluice:info(Name)),
    ?assertEqual(3, length(sluice_test_lib:acceptor_pids(Name))),
    echo(Port).

%% The sockets' owner restarted by the listener's supervisor (it died)
%% opens the sockets with the values stored, as a resume does.
sockets_owner_restart_uses_the_new_values(Config) ->
    Name = ?config(name, Config),
    start(Name, inet, #{num_acceptors => 3}),
    Old = sluice_test_lib:port(Name),
    New = free_port(),
    ok = sluice:set_transport_opts(Name, #{port => New, num_acceptors => 5}),
    Owner = listen_sockets_pid(Name),
    exit(Owner, kill),
    ok = sluice_test_lib:wait_until(
           fun() ->
                   case sluice:info(Name) of
                       #{port := New, status := running} ->
                           length(sluice_test_lib:acceptor_pids(Name)) =:= 5;
                       _ ->
                           false
                   end
           end, 5000),
    echo(New),
    refused(Old).

%% A listener moved to another port whose supervisor dies is restarted by
%% sluice's supervisor from its child spec: it bound the port it had
%% started on, another listener's by then, and failed, each time, until
%% sluice's supervisor gave up, taking every listener of the node down.
%% It comes back with the listen side it last opened its sockets with (a
%% change stored and not opened yet may not open: here a port taken); a
%% new start is the start's own options again.
listener_restart_keeps_the_listen_side_opened(Config) ->
    Name = {?config(name, Config), inet},
    Other = {?config(name, Config), socket},
    First = free_port(),
    Sup = start(Name, inet, #{port => First, num_acceptors => 3}),
    Second = free_port(),
    ok = sluice:set_transport_opts(Name, #{port => Second, num_acceptors => 5}),
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    echo(Second),
    start(Other, inet, #{port => First}),
    ok = sluice:set_transport_opts(Name, #{port => First}),
    Top = whereis(sluice_sup),
    exit(Sup, kill),
    ok = sluice_test_lib:wait_until(
           fun() ->
                   case sluice_registry:lookup(Name) of
                       {ok, #{sup := Sup2, port := Second}} when Sup2 =/= Sup ->
                           length(sluice_test_lib:acceptor_pids(Name)) =:= 5;
                       _ ->
                           false
                   end
           end, 5000),
    ?assertEqual(Top, whereis(sluice_sup)),
    echo(Second),
    echo(First),
    ?assertMatch({ok, #{port := Second, num_acceptors := 5}}, sluice:get_transport_opts(Name)),
    ok = sluice:stop_listener(Name),
    start(Name, inet, #{port => 0}),
    ?assertMatch({ok, #{port := 0, num_acceptors := 10}}, sluice:get_transport_opts(Name)).

%%% ------------------------------------------------------------------
%%% A listen socket of one's own
%%% ------------------------------------------------------------------

own_socket_inet(Config) ->
    Name = ?config(name, Config),
    %% opened as a user would, in list mode and active: the listener sets
    %% what its connections need
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}, list, {active, true}]),
    {ok, Port} = inet:port(L),
    Sup = start(Name, inet, #{listen_socket => L, ip => {0, 0, 0, 0}}),
    ?assertEqual({connected, Sup}, erlang:port_info(L, connected)),
    ?assertMatch(#{port := Port, ip := ?LOOPBACK, status := running}, sluice:info(Name)),
    ?assertEqual([L], listen_sockets(Name)),
    echo(Port),
    ok = sluice:stop_listener(Name),
    %% the listener owned it: it closed with it
    ?assertEqual(undefined, erlang:port_info(L, connected)),
    refused(Port).

own_socket_socket(Config) ->
    Name = ?config(name, Config),
    {ok, L} = socket:open(inet, stream),
    ok = socket:bind(L, #{family => inet, addr => ?LOOPBACK, port => 0}),
    ok = socket:listen(L),
    {ok, #{port := Port}} = socket:sockname(L),
    Sup = start(Name, socket, #{listen_socket => L, ip => {0, 0, 0, 0}}),
    ?assertMatch(#{owner := Sup}, socket:info(L)),
    ?assertMatch(#{port := Port, status := running}, sluice:info(Name)),
    echo(Port),
    ok = sluice:stop_listener(Name),
    ?assertEqual({error, closed}, socket:getopt(L, {socket, acceptconn})),
    refused(Port).

own_socket_ssl(Config) ->
    Name = ?config(name, Config),
    #{server := Server, client := Client} = sluice_tls_test_lib:certs(),
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    {ok, Port} = inet:port(L),
    start(Name, ssl, #{listen_socket => L, ip => {0, 0, 0, 0}, tls_opts => Server}),
    {ok, S} = ssl:connect(?LOOPBACK, Port, [binary, {active, false} | Client], 5000),
    ok = ssl:send(S, <<"ping">>),
    ?assertEqual({ok, <<"ping">>}, ssl:recv(S, 4, 5000)),
    ok = ssl:close(S),
    %% an ssl listen socket is not what transport ssl listens on
    {ok, SslL} = ssl:listen(0, [{ip, ?LOOPBACK} | Server]),
    Other = {Name, ssl},
    {error, Why} = sluice:start_listener(Other, #{listen_socket => SslL, transport => ssl,
                                                  tls_opts => Server,
                                                  handler => {sluice_proto_echo, []}}),
    ?assertEqual({bad_option, listen_socket, ssl_listen_socket}, Why),
    ?assertMatch("bad value for option listen_socket: an ssl listen socket" ++ _,
                 sluice:format_error(Why)),
    ok = ssl:close(SslL).

%% Suspended, the listener keeps the socket open (it could not open it
%% again): a client that connects meanwhile waits in its backlog and is
%% served at resume. The sockets' owner restarted by the supervisor
%% finds it open too. Stopped, the listener closes it.
own_socket_kept_over_suspend_and_restart(Config) ->
    _ = [own_socket_kept(Config, T) || T <- [inet, socket]],
    ok.

own_socket_kept(Config, T) ->
    Name = {?config(name, Config), T},
    {L, Port, Open} = own_listen_socket(T),
    start(Name, T, #{listen_socket => L, num_acceptors => 2}),
    echo(Port),
    %% its acceptors see the suspend without the socket closing under them
    {Micros, ok} = timer:tc(fun() -> sluice:suspend(Name) end),
    ?assert(Micros < 1000000),
    ?assertMatch(#{status := suspended}, sluice:info(Name)),
    ?assert(Open()),
    {ok, Waiting} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(Waiting, <<"late">>),
    ?assertEqual({error, timeout}, gen_tcp:recv(Waiting, 4, 300)),
    ok = sluice:resume(Name),
    ?assertEqual({ok, <<"late">>}, gen_tcp:recv(Waiting, 4, 5000)),
    ok = gen_tcp:close(Waiting),
    %% a change that applies to it, at the next resume
    ok = sluice:set_transport_opts(Name, #{num_acceptors => 3}),
    exit(listen_sockets_pid(Name), kill),
    ok = sluice_test_lib:wait_until(
           fun() ->
                   case sluice:info(Name) of
                       #{status := running} ->
                           length(sluice_test_lib:acceptor_pids(Name)) =:= 3;
                       _ ->
                           false
                   end
           end, 5000),
    ?assert(Open()),
    echo(Port),
    ok = sluice:stop_listener(Name),
    ?assertNot(Open()).

%% A listener on a socket of the user's whose supervisor dies cannot
%% come back: the socket closed with its owner, that supervisor. Restarted
%% by sluice_sup, each try failed on the closed socket, and sluice_sup gave
%% up after ten, with every other listener of the node and the sluice
%% application. It ends alone, its name free for a new start.
own_socket_listener_is_not_restarted(Config) ->
    Name = {?config(name, Config), inet},
    Other = {?config(name, Config), socket},
    start(Other, inet, #{}),
    OtherPort = sluice_test_lib:port(Other),
    Top = whereis(sluice_sup),
    {L, _Port, Open} = own_listen_socket(inet),
    Sup = start(Name, inet, #{listen_socket => L}),
    exit(Sup, kill),
    ok = sluice_test_lib:wait_until(fun() -> not Open() end, 5000),
    ok = sluice_test_lib:wait_until(
           fun() -> not lists:member(Name, sluice:listeners()) end, 5000),
    ?assertEqual(error, sluice_registry:lookup(Name)),
    ?assertEqual(Top, whereis(sluice_sup)),
    ?assertMatch(#{status := running}, sluice:info(Other)),
    echo(OtherPort),
    ?assertEqual({error, not_found}, sluice:stop_listener(Name)),
    {L2, Port2, Open2} = own_listen_socket(inet),
    start(Name, inet, #{listen_socket => L2}),
    echo(Port2),
    ok = sluice:stop_listener(Name),
    ?assertNot(Open2()).

%% A socket of the user's that another process closes: the acceptors
%% ended as at a suspend (transient, not restarted), and the listener said
%% `running' with none, resume/1 answered ok, and nothing was logged. Now
%% one log line for the listener (not one per acceptor, no crash report),
%% status `listen_socket_closed' (kept over a suspend), resume/1 an error
%% format_error/1 puts in words; stop_listener/1 as usual. Closed while
%% the listener is suspended (nobody watching), resume/1 says the same
%% without trying to start on it (a crash report of the sockets' owner).
own_socket_closed_under_the_listener(Config) ->
    _ = [own_socket_closed(Config, T, When) || T <- [inet, socket], When <- [running, suspended]],
    ok.

own_socket_closed(Config, T, When) ->
    Name = {?config(name, Config), T},
    {L, Port, Open} = own_listen_socket(T),
    start(Name, T, #{listen_socket => L, num_acceptors => 20}),
    echo(Port),
    ok = sluice_log_forwarder:start(self()),
    _ = When =:= suspended andalso sluice:suspend(Name),
    ok = case T of
             inet -> gen_tcp:close(L);
             socket -> socket:close(L)
         end,
    ?assertNot(Open()),
    ok = case When of
             running ->
                 sluice_test_lib:wait_until(
                   fun() -> maps:get(status, sluice:info(Name)) =:= listen_socket_closed
                                andalso sluice_test_lib:acceptor_pids(Name) =:= [] end, 5000);
             suspended ->
                 ok
         end,
    ?assertEqual({error, listen_socket_closed}, sluice:resume(Name)),
    ?assertMatch("the listener's listen_socket was closed" ++ _,
                 sluice:format_error(listen_socket_closed)),
    ok = sluice:suspend(Name),
    ?assertEqual({error, listen_socket_closed}, sluice:resume(Name)),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 5000),
    Expected = case When of
                   running -> listen_socket_closed;
                   suspended -> suspended
               end,
    ?assertMatch(#{status := Expected, accepted := 1, closed := 1, connections := 0},
                 sluice:info(Name)),
    ok = sluice:stop_listener(Name),
    ?assertEqual({error, not_found}, sluice:info(Name)),
    sluice_log_forwarder:stop(),
    Logged = flush_logs([]),
    ct:log("~p ~p: ~p", [T, When, Logged]),
    case When of
        running ->
            ?assertMatch([{error, "sluice listener " ++ _}], Logged),
            [{_, Line}] = Logged,
            ?assertNotEqual(nomatch, string:find(Line, "listen_socket was closed"));
        suspended ->
            ?assertEqual([], Logged)
    end.

%% A socket of the user's on IPv6: the listener's stored `ip' stayed the
%% IPv4 default (only info/1 said the socket's), so a raw socket option of
%% IPv6's level (IPV6_TCLASS, 41/67 on Linux) was tried on an IPv4 socket
%% and refused, at start and in set_transport_opts/2, and
%% get_transport_opts/1 said {0,0,0,0}. Now `ip' is the socket's
%% address, and the map get_transport_opts/1 gives goes back whole.
own_ipv6_socket_is_the_listeners_ip(Config) ->
    Loopback6 = {0, 0, 0, 0, 0, 0, 0, 1},
    TClass = fun(V) -> {raw, 41, 67, <<V:32/native>>} end,
    _ = [begin
             Name = {?config(name, Config), T},
             L = case T of
                     inet ->
                         {ok, L0} = gen_tcp:listen(0, [inet6, {ip, Loopback6}]),
                         L0;
                     socket ->
                         {ok, L0} = socket:open(inet6, stream),
                         ok = socket:bind(L0, #{family => inet6, addr => Loopback6, port => 0}),
                         ok = socket:listen(L0),
                         L0
                 end,
             {ok, _} = sluice:start_listener(Name, #{listen_socket => L, transport => T,
                                                     handler => {sluice_proto_echo, []},
                                                     socket_opts => [TClass(32)]}),
             {ok, Opts} = sluice:get_transport_opts(Name),
             ?assertMatch(#{ip := Loopback6}, Opts),
             ?assertMatch(#{ip := Loopback6}, sluice:info(Name)),
             ok = sluice:set_transport_opts(Name, #{socket_opts => [TClass(64)]}),
             {ok, Opts2} = sluice:get_transport_opts(Name),
             ok = sluice:set_transport_opts(Name, Opts2),
             ?assertEqual({error, {not_with_listen_socket, ip, ?LOOPBACK}},
                          sluice:set_transport_opts(Name, #{ip => ?LOOPBACK})),
             ok = sluice:stop_listener(Name)
         end || T <- [inet, socket]],
    ok.

flush_logs(Acc) ->
    receive {log, Level, Text, _} when Level =/= debug, Level =/= info ->
            flush_logs([{Level, Text} | Acc])
    after 0 -> lists:reverse(Acc)
    end.

own_listen_socket(inet) ->
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    {ok, Port} = inet:port(L),
    {L, Port, fun() -> erlang:port_info(L, connected) =/= undefined end};
own_listen_socket(socket) ->
    {ok, L} = socket:open(inet, stream),
    ok = socket:bind(L, #{family => inet, addr => ?LOOPBACK, port => 0}),
    ok = socket:listen(L),
    {ok, #{port := Port}} = socket:sockname(L),
    {L, Port, fun() -> socket:getopt(L, {socket, acceptconn}) =:= {ok, true} end}.

%% Each bad input refused at start with its reason, and words for it; the
%% socket stays its owner's, open.
own_socket_bad_inputs(Config) ->
    Name = ?config(name, Config),
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    {ok, Port} = inet:port(L),
    {ok, Closed} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    ok = gen_tcp:close(Closed),
    {ok, Conn} = gen_tcp:connect(?LOOPBACK, Port, []),
    {ok, Udp} = gen_udp:open(0),
    {ok, S} = socket:open(inet, stream),
    ok = socket:bind(S, #{family => inet, addr => ?LOOPBACK, port => 0}),
    ok = socket:listen(S),
    {ok, Unbound} = socket:open(inet, stream),
    {ok, OnSocket} = gen_tcp:listen(0, [{inet_backend, socket}, {ip, ?LOOPBACK}]),
    %% (priv_dir is longer than a Unix socket's path may be)
    Path = "/tmp/sluice-own-" ++ os:getpid() ++ "-"
        ++ integer_to_list(erlang:unique_integer([positive])) ++ ".sock",
    {ok, Unix} = gen_tcp:listen(0, [{ifaddr, {local, Path}}]),
    Self = self(),
    Other = spawn_link(fun() ->
                               {ok, OL} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
                               Self ! {other, OL},
                               receive stop -> ok end
                       end),
    NotMine = receive {other, OL} -> OL end,
    Cases = [{inet, 123, #{}, {bad_option, listen_socket, not_a_socket}},
             {inet, Closed, #{}, {bad_option, listen_socket, closed}},
             {inet, Conn, #{}, {bad_option, listen_socket, not_listening}},
             {inet, Udp, #{}, {bad_option, listen_socket, {not_tcp, "udp_inet"}}},
             {inet, S, #{}, {bad_option, listen_socket, {for_transport, socket}}},
             {socket, L, #{}, {bad_option, listen_socket, {for_transport, inet}}},
             {socket, Unbound, #{}, {bad_option, listen_socket, not_listening}},
             {inet, OnSocket, #{}, {bad_option, listen_socket, inet_backend_socket}},
             {inet, Unix, #{}, {bad_option, listen_socket, not_tcp_ip}},
             {sluice_faulty_transport, L, #{},
              {bad_option, listen_socket, {transport, sluice_faulty_transport}}},
             {inet, L, #{port => 8080}, {not_with_listen_socket, port, 8080}},
             {inet, L, #{ip => ?LOOPBACK}, {not_with_listen_socket, ip, ?LOOPBACK}},
             {inet, L, #{backlog => 5}, {not_with_listen_socket, backlog, 5}},
             {inet, L, #{reuseport => true}, {not_with_listen_socket, reuseport, true}},
             {inet, L, #{num_listen_sockets => 2}, {not_with_listen_socket, num_listen_sockets, 2}},
             {inet, NotMine, #{}, {bad_option, listen_socket, not_owner}}],
    _ = [begin
             Opts = maps:merge(#{listen_socket => Sock, transport => T,
                                 handler => {sluice_proto_echo, []}}, Extra),
             ?assertEqual({T, Sock, {error, Why}}, {T, Sock, sluice:start_listener(Name, Opts)}),
             Text = sluice:format_error(Why),
             %% words of its own, not the generic "expected ..." of an option
             ?assertEqual(nomatch, string:find(Text, "expected")),
             ?assertEqual(error, sluice_registry:lookup(Name))
         end || {T, Sock, Extra, Why} <- Cases],
    %% still the caller's, still listening
    ?assertEqual({connected, self()}, erlang:port_info(L, connected)),
    ?assertEqual({connected, Other}, erlang:port_info(NotMine, connected)),
    echo_free(L),
    Other ! stop,
    ok = gen_tcp:close(Conn),
    ok = gen_udp:close(Udp),
    ok = socket:close(S),
    ok = socket:close(Unbound),
    ok = gen_tcp:close(OnSocket),
    ok = gen_tcp:close(Unix),
    _ = file:delete(Path),
    ok = gen_tcp:close(L).

%% L still listens: a client connects, and L accepts it.
echo_free(L) ->
    {ok, Port} = inet:port(L),
    {ok, C} = gen_tcp:connect(?LOOPBACK, Port, []),
    {ok, A} = gen_tcp:accept(L, 5000),
    ok = gen_tcp:close(A),
    ok = gen_tcp:close(C).

%% On a listener with a socket of its own, what opens a socket cannot
%% change (refused as at start) and the socket itself stays the one given.
own_socket_listen_options_refused(Config) ->
    Name = ?config(name, Config),
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    start(Name, inet, #{listen_socket => L}),
    ?assertEqual({error, {not_with_listen_socket, port, 8080}},
                 sluice:set_transport_opts(Name, #{port => 8080})),
    ?assertEqual({error, {not_with_listen_socket, backlog, 5}},
                 sluice:set_transport_opts(Name, #{backlog => 5})),
    {ok, L2} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    ?assertEqual({error, {not_changeable, listen_socket}},
                 sluice:set_transport_opts(Name, #{listen_socket => L2})),
    {ok, Opts} = sluice:get_transport_opts(Name),
    ?assertMatch(#{listen_socket := L}, Opts),
    ok = sluice:set_transport_opts(Name, Opts),
    ok = gen_tcp:close(L2).
