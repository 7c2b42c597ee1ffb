%% The `post_listen' option (ranch's post_listen_callback): a fun given
%% each listen socket once it listens, before any acceptor runs, on every
%% transport (inet and ssl: the gen_tcp listen socket; socket: the
%% socket NIF's; a transport of the user's: what its listen/2 returned);
%% what it is for (chmod of a Unix socket's file, an option on the listen
%% socket); a failure (an error, a raise, another return) fails the start
%% with `{post_listen, Reason}' and leaves no socket, file or listener
%% behind; it runs again whenever the sockets are opened again (resume, a
%% restart of their owner); a fun that returns ok but closed its socket
%% fails the start too (`{post_listen, closed}'); a bad value is refused
%% at start.
-module(sluice_post_listen_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([every_listen_socket_once_before_the_acceptors/1,
         sets_an_option_on_the_listen_sockets/1,
         chmod_of_a_unix_socket_file/1,
         an_error_fails_the_start_and_closes_the_sockets/1,
         a_raise_or_another_return_fails_the_start/1,
         a_failure_on_a_unix_socket_removes_its_file/1,
         a_socket_closed_by_the_fun_fails_the_start/1,
         again_on_resume_and_on_a_restart/1,
         a_failure_on_resume_is_resumes_error/1,
         a_failure_on_a_restart_leaves_the_listener_suspended/1,
         back_suspended_stays_so_when_its_connection_supervisors_restart/1,
         ssl_gives_the_tcp_listen_socket/1,
         a_users_transport_gives_its_own/1,
         bad_values_are_refused_at_start/1]).

-define(ECHO, {sluice_proto_echo, []}).
-define(WAIT, 5000).
%% SOL_SOCKET, SO_KEEPALIVE (Linux): a raw option that reads back as set.
-define(KEEPALIVE, {1, 9}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}, ssl_gives_the_tcp_listen_socket,
     a_users_transport_gives_its_own, bad_values_are_refused_at_start].

groups() ->
    sluice_test_lib:backend_groups(
      [every_listen_socket_once_before_the_acceptors,
       sets_an_option_on_the_listen_sockets,
       chmod_of_a_unix_socket_file,
       an_error_fails_the_start_and_closes_the_sockets,
       a_raise_or_another_return_fails_the_start,
       a_failure_on_a_unix_socket_removes_its_file,
       a_socket_closed_by_the_fun_fails_the_start,
       again_on_resume_and_on_a_restart,
       a_failure_on_resume_is_resumes_error,
       a_failure_on_a_restart_leaves_the_listener_suspended,
       back_suspended_stays_so_when_its_connection_supervisors_restart]).

init_per_suite(Config) ->
    Config1 = sluice_tls_test_lib:init_per_suite(Config),
    %% Unix socket paths must fit sun_path: not under priv_dir.
    Dir = "/tmp/sluice-pl-" ++ os:getpid(),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    [{dir, Dir} | Config1].

end_per_suite(Config) ->
    _ = file:del_dir_r(?config(dir, Config)),
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    N = erlang:unique_integer([positive]),
    Path = filename:join(?config(dir, Config), integer_to_list(N) ++ ".sock"),
    [{name, {?MODULE, Case}}, {path, Path} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    _ = file:delete(?config(path, Config)),
    ok.

%%% ------------------------------------------------------------------

%% With three listen sockets the fun gets each once, three different
%% sockets, all of the listener's port and the ones it accepts on, called
%% in the process that owns them (the listener's sluice_listen_sockets,
%% which its supervisor starts before the acceptors); the listener then
%% serves.
every_listen_socket_once_before_the_acceptors(Config) ->
    Name = ?config(name, Config),
    Test = self(),
    Fun = fun(S) -> Test ! {post_listen, self(), S}, ok end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, num_acceptors => 3,
                                          num_listen_sockets => 3, post_listen => Fun}),
    Port = sluice_test_lib:port(Name),
    Calls = [receive {post_listen, Owner, S} -> {Owner, S} after ?WAIT -> ct:fail(no_call) end
             || _ <- [1, 2, 3]],
    receive {post_listen, _, _} = Extra -> ct:fail({called_again, Extra}) after 100 -> ok end,
    {Owners, LSocks} = lists:unzip(Calls),
    [Owner] = lists:usort(Owners),
    ?assertEqual(3, length(lists:usort(LSocks))),
    ?assertEqual([Port, Port, Port], [listen_port(S) || S <- LSocks]),
    {ok, #{listen_sockets := Held}} = sluice_registry:lookup(Name),
    ?assertEqual(lists:sort(Held), lists:sort(LSocks)),
    %% the owner of the sockets: the listener's sluice_listen_sockets
    {_, Owner, _, _} = lists:keyfind(sluice_listen_sockets, 1,
                                     supervisor:which_children(listener_sup(Name))),
    echo(Port).

%% What ranch documents it for: an option set on the listen socket by the
%% fun (SO_KEEPALIVE, raw on inet, the NIF's setopt on socket) is on every
%% listen socket of the listener.
sets_an_option_on_the_listen_sockets(Config) ->
    Name = ?config(name, Config),
    T = sluice_test_lib:transport(),
    Fun = fun(S) -> set_keepalive(T, S) end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, num_listen_sockets => 2,
                                          post_listen => Fun}),
    {ok, #{listen_sockets := Held}} = sluice_registry:lookup(Name),
    ?assertEqual([true, true], [keepalive(T, S) || S <- Held]),
    echo(sluice_test_lib:port(Name)).

%% A Unix socket's file made owner-only by the fun (it is created 0777
%% less the umask): the mode is the fun's once start_listener/2 returns,
%% before any client can connect, and the listener serves.
chmod_of_a_unix_socket_file(Config) ->
    Name = ?config(name, Config),
    Path = ?config(path, Config),
    Fun = fun(_S) -> file:change_mode(Path, 8#600) end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, ip => {local, Path},
                                          post_listen => Fun}),
    {ok, #file_info{mode = Mode, type = other}} = file:read_file_info(Path),
    ?assertEqual(8#600, Mode band 8#777),
    {ok, C} = gen_tcp:connect({local, Path}, 0, [binary, {active, false}], ?WAIT),
    ok = gen_tcp:send(C, <<"hi">>),
    {ok, <<"hi">>} = gen_tcp:recv(C, 2, ?WAIT),
    ok = gen_tcp:close(C).

%% `{error, Reason}' from the fun (here on the second of three sockets)
%% fails the start with `{post_listen, Reason}': every socket is closed
%% (the port can be had without SO_REUSEPORT at once), the listener is
%% not there, and the same name starts afterwards.
an_error_fails_the_start_and_closes_the_sockets(Config) ->
    Name = ?config(name, Config),
    Test = self(),
    Counter = counters:new(1, []),
    Fun = fun(S) ->
                  counters:add(Counter, 1, 1),
                  Test ! {port, listen_port(S)},
                  case counters:get(Counter, 1) of
                      2 -> {error, not_today};
                      _ -> ok
                  end
          end,
    Opts = #{handler => ?ECHO, ip => {127, 0, 0, 1}, port => 0,
             transport => sluice_test_lib:transport(), num_listen_sockets => 3,
             post_listen => Fun},
    ?assertEqual({error, {post_listen, not_today}}, sluice:start_listener(Name, Opts)),
    Port = receive {port, P} -> P after ?WAIT -> ct:fail(no_call) end,
    ?assertEqual(2, counters:get(Counter, 1)),
    gone(Name),
    {ok, L} = gen_tcp:listen(Port, [{ip, {127, 0, 0, 1}}]),
    ok = gen_tcp:close(L),
    Msg = sluice:format_error({post_listen, not_today}),
    ?assertNotEqual(nomatch, string:find(Msg, "post_listen")),
    ?assertNotEqual(nomatch, string:find(Msg, "not_today")),
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO}),
    echo(sluice_test_lib:port(Name)).

%% A fun that raises is `{post_listen, {Class, Reason}}', one that returns
%% anything but `ok' or `{error, _}' `{post_listen, {bad_return, Value}}':
%% the start fails, nothing is left.
a_raise_or_another_return_fails_the_start(Config) ->
    Name = ?config(name, Config),
    Opts = #{handler => ?ECHO, ip => {127, 0, 0, 1}, port => 0,
             transport => sluice_test_lib:transport()},
    ?assertEqual({error, {post_listen, {error, boom}}},
                 sluice:start_listener(Name, Opts#{post_listen => fun(_) -> error(boom) end})),
    ?assertEqual({error, {post_listen, {throw, up}}},
                 sluice:start_listener(Name, Opts#{post_listen => fun(_) -> throw(up) end})),
    ?assertEqual({error, {post_listen, {bad_return, yes}}},
                 sluice:start_listener(Name, Opts#{post_listen => fun(_) -> yes end})),
    gone(Name).

%% On a Unix socket a failure leaves no file at the path (and no socket
%% bound there: the path starts again).
a_failure_on_a_unix_socket_removes_its_file(Config) ->
    Name = ?config(name, Config),
    Path = ?config(path, Config),
    Test = self(),
    Fun = fun(_S) -> Test ! {file, file:read_file_info(Path)}, {error, no} end,
    ?assertEqual({error, {post_listen, no}},
                 sluice:start_listener(Name, #{handler => ?ECHO, ip => {local, Path},
                                               transport => sluice_test_lib:transport(),
                                               post_listen => Fun})),
    receive {file, Info} -> ?assertMatch({ok, #file_info{type = other}}, Info)
    after ?WAIT -> ct:fail(no_call)
    end,
    ?assertEqual({error, enoent}, file:read_file_info(Path)),
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, ip => {local, Path}}),
    ?assertMatch({ok, #file_info{type = other}}, file:read_file_info(Path)).

%% A fun that closes its socket and returns ok: without a check the start
%% succeeded, info/1 said running and every connect was refused, without
%% a word. The start fails with `{post_listen, closed}' (here the second
%% of three TCP sockets: the other two are closed, the port free), and on
%% a Unix socket the file is removed; format_error/1 says what happened.
a_socket_closed_by_the_fun_fails_the_start(Config) ->
    Name = ?config(name, Config),
    Path = ?config(path, Config),
    T = sluice_test_lib:transport(),
    Test = self(),
    Counter = counters:new(1, []),
    CloseSecond = fun(S) ->
                          counters:add(Counter, 1, 1),
                          Test ! {port, listen_port(S)},
                          case counters:get(Counter, 1) of
                              2 -> close_lsock(T, S);
                              _ -> ok
                          end
                  end,
    Opts = #{handler => ?ECHO, ip => {127, 0, 0, 1}, port => 0, transport => T},
    ?assertEqual({error, {post_listen, closed}},
                 sluice:start_listener(Name, Opts#{num_listen_sockets => 3,
                                                   post_listen => CloseSecond})),
    Port = receive {port, P} -> P after ?WAIT -> ct:fail(no_call) end,
    ?assertEqual(2, counters:get(Counter, 1)),
    gone(Name),
    {ok, L} = gen_tcp:listen(Port, [{ip, {127, 0, 0, 1}}]),
    ok = gen_tcp:close(L),
    Close = fun(S) -> close_lsock(T, S) end,
    ?assertEqual({error, {post_listen, closed}},
                 sluice:start_listener(Name, #{handler => ?ECHO, ip => {local, Path},
                                               transport => T, post_listen => Close})),
    ?assertEqual({error, enoent}, file:read_file_info(Path)),
    gone(Name),
    Msg = sluice:format_error({post_listen, closed}),
    ?assertNotEqual(nomatch, string:find(Msg, "left a listen socket closed")).

%% Each time the sockets are opened again the fun gets the new ones: on
%% resume after suspend, and when their owner is killed and restarted by
%% the listener's supervisor.
again_on_resume_and_on_a_restart(Config) ->
    Name = ?config(name, Config),
    Test = self(),
    Fun = fun(S) -> Test ! {post_listen, self(), S}, ok end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, num_listen_sockets => 1,
                                          num_acceptors => 1, post_listen => Fun}),
    {Owner1, S1} = called(),
    ok = sluice:suspend(Name),
    nothing_called(),
    ok = sluice:resume(Name),
    {Owner2, S2} = called(),
    ?assertNotEqual(S1, S2),
    ?assertNotEqual(Owner1, Owner2),
    echo(sluice_test_lib:port(Name)),
    exit(Owner2, kill),
    {Owner3, S3} = called(),
    ?assertNotEqual(Owner2, Owner3),
    ?assertNotEqual(S2, S3),
    ok = sluice_test_lib:wait_until(fun() -> length(sluice_test_lib:acceptor_pids(Name)) =:= 1 end,
                                    ?WAIT),
    echo(sluice_test_lib:port(Name)).

%% A fun that fails when the sockets are opened again on resume: resume/1
%% returns `{error, {post_listen, Reason}}', the listener stays suspended
%% with its port closed, and a later resume whose fun succeeds serves.
a_failure_on_resume_is_resumes_error(Config) ->
    Name = ?config(name, Config),
    Fail = atomics:new(1, []),
    Fun = fun(_S) ->
                  case atomics:get(Fail, 1) of
                      1 -> {error, not_now};
                      0 -> ok
                  end
          end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, post_listen => Fun}),
    Port = sluice_test_lib:port(Name),
    ok = sluice:suspend(Name),
    ok = atomics:put(Fail, 1, 1),
    ?assertEqual({error, {post_listen, not_now}}, sluice:resume(Name)),
    ?assertMatch(#{status := suspended}, sluice:info(Name)),
    ?assertEqual({error, econnrefused}, sluice_test_lib:connect(Port)),
    ok = atomics:put(Fail, 1, 0),
    ok = sluice:resume(Name),
    echo(Port).

%% On `ssl' the listen socket is TCP's (the handshake runs on each
%% accepted socket): the fun gets the gen_tcp listen socket.
ssl_gives_the_tcp_listen_socket(Config) ->
    Name = ?config(name, Config),
    Test = self(),
    Fun = fun(S) -> Test ! {post_listen, self(), S}, set_keepalive(ssl, S) end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, transport => ssl,
                                          tls_opts => sluice_tls_test_lib:server_opts(Config),
                                          num_listen_sockets => 1, post_listen => Fun}),
    {_, S} = called(),
    ?assert(is_port(S)),
    ?assertEqual(sluice_test_lib:port(Name), listen_port(S)),
    ?assert(keepalive(ssl, S)),
    {ok, C} = ssl:connect({127, 0, 0, 1}, sluice_test_lib:port(Name),
                          [binary, {active, false} | sluice_tls_test_lib:client_opts(Config)],
                          ?WAIT),
    ok = ssl:send(C, <<"tls">>),
    {ok, <<"tls">>} = ssl:recv(C, 3, ?WAIT),
    ok = ssl:close(C).

%% A transport of the user's: the fun gets what its listen/2 returned
%% (the faulty transport's are inet's).
a_users_transport_gives_its_own(Config) ->
    Name = ?config(name, Config),
    Test = self(),
    Fun = fun(S) -> Test ! {post_listen, self(), S}, ok end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, transport => sluice_faulty_transport,
                                          num_listen_sockets => 1, post_listen => Fun}),
    {_, S} = called(),
    {ok, #{listen_sockets := [S]}} = sluice_registry:lookup(Name),
    echo(sluice_test_lib:port(Name)).

%% Sockets that cannot open again when a supervisor restarts them (the
%% fun fails now) leave the listener suspended, with one log line, and
%% resume/1 says why until they can: the restart failed again and again,
%% the listener's supervisor gave up, then sluice's, with every other
%% listener (here `Other') and the application. The same when sluice's
%% supervisor restarts the whole listener.
a_failure_on_a_restart_leaves_the_listener_suspended(Config) ->
    Name = ?config(name, Config),
    Other = {Name, other},
    {Fail, Owner} = start_failable(Name),
    Port = sluice_test_lib:port(Name),
    sluice_test_lib:start_listener(Other, #{handler => ?ECHO}),
    Top = whereis(sluice_sup),
    try
        ok = atomics:put(Fail, 1, 1),
        exit(Owner, kill),
        {_, _} = called(),
        suspended(Name),
        ?assertEqual(Top, whereis(sluice_sup)),
        ?assertEqual({error, econnrefused}, gen_tcp:connect({127, 0, 0, 1}, Port, [])),
        echo(sluice_test_lib:port(Other)),
        ?assertEqual({error, {post_listen, now_failing}}, sluice:resume(Name)),
        {_, _} = called(),
        ?assertMatch(#{status := suspended}, sluice:info(Name)),
        ok = atomics:put(Fail, 1, 0),
        ok = sluice:resume(Name),
        {_, _} = called(),
        ?assertMatch(#{status := running}, sluice:info(Name)),
        echo(sluice_test_lib:port(Name)),
        %% the listener's own supervisor killed: sluice's restarts it
        ok = atomics:put(Fail, 1, 1),
        Sup = listener_sup(Name),
        exit(Sup, kill),
        {_, _} = called(),
        ok = sluice_test_lib:wait_until(
               fun() -> catch listener_sup(Name) =/= Sup end, ?WAIT),
        suspended(Name),
        ?assertEqual(Top, whereis(sluice_sup)),
        echo(sluice_test_lib:port(Other)),
        ok = atomics:put(Fail, 1, 0),
        ok = sluice:resume(Name),
        echo(sluice_test_lib:port(Name))
    after
        sluice_test_lib:stop_listener(Other)
    end.

%% A listener back suspended after a failed restart, whose connection
%% supervisors' supervisor then dies: its supervisor (rest_for_one)
%% starts the sockets' owner again too, which opened the sockets (the
%% fun called), failed, and failed each restart until the listener's
%% supervisor gave up and sluice's replaced it. It stays suspended, the
%% same listener, until resume/1.
back_suspended_stays_so_when_its_connection_supervisors_restart(Config) ->
    Name = ?config(name, Config),
    {Fail, Owner} = start_failable(Name),
    ok = atomics:put(Fail, 1, 1),
    exit(Owner, kill),
    {_, _} = called(),
    suspended(Name),
    Sup = listener_sup(Name),
    {_, ConnsSupSup, _, _} = lists:keyfind(sluice_conns_sup_sup, 1,
                                           supervisor:which_children(Sup)),
    exit(ConnsSupSup, kill),
    ok = sluice_test_lib:wait_until(
           fun() ->
                   {_, New, _, _} = lists:keyfind(sluice_conns_sup_sup, 1,
                                                  supervisor:which_children(Sup)),
                   is_pid(New) andalso New =/= ConnsSupSup
           end, ?WAIT),
    nothing_called(),
    ?assertEqual(Sup, listener_sup(Name)),
    ?assertMatch(#{status := suspended}, sluice:info(Name)),
    ok = atomics:put(Fail, 1, 0),
    ok = sluice:resume(Name),
    {_, _} = called(),
    echo(sluice_test_lib:port(Name)).

%% A listener whose post_listen fun fails once `Fail' is set (an atomics
%% of one), and reports each call: its sockets' owner.
start_failable(Name) ->
    Fail = atomics:new(1, []),
    Test = self(),
    Fun = fun(S) ->
                  Test ! {post_listen, self(), S},
                  case atomics:get(Fail, 1) of
                      0 -> ok;
                      _ -> {error, now_failing}
                  end
          end,
    sluice_test_lib:start_listener(Name, #{handler => ?ECHO, num_listen_sockets => 1,
                                          post_listen => Fun}),
    {Owner, _} = called(),
    {Fail, Owner}.

suspended(Name) ->
    ok = sluice_test_lib:wait_until(
           fun() -> catch maps:get(status, sluice:info(Name)) =:= suspended end, ?WAIT).

%% Anything but `none' or a fun of one argument is refused at start, as a
%% bad option, with the other options' wording.
bad_values_are_refused_at_start(Config) ->
    Name = ?config(name, Config),
    [begin
         ?assertEqual({error, {bad_option, post_listen, V}},
                      sluice:start_listener(Name, #{handler => ?ECHO, post_listen => V})),
         Msg = sluice:format_error({bad_option, post_listen, V}),
         ?assertNotEqual(nomatch, string:find(Msg, "a fun of one argument"))
     end || V <- [fun(_, _) -> ok end, fun() -> ok end, {m, f}, undefined, "f"]],
    ?assertMatch({ok, #{post_listen := none}}, sluice_opts:validate(#{handler => ?ECHO})).

%%% ------------------------------------------------------------------

%% The registry forgets a listener whose start failed when it sees its
%% supervisor go down, a moment after start_listener/2 returned.
gone(Name) ->
    ok = sluice_test_lib:wait_until(fun() -> not lists:member(Name, sluice:listeners()) end,
                                    ?WAIT),
    ?assertEqual(error, sluice_registry:lookup(Name)).

listener_sup(Name) ->
    {_, Sup, _, _} = lists:keyfind({sluice_listener, Name}, 1,
                                   supervisor:which_children(sluice_sup)),
    Sup.

called() ->
    receive {post_listen, Owner, S} -> {Owner, S}
    after ?WAIT -> ct:fail(post_listen_not_called)
    end.

nothing_called() ->
    receive {post_listen, _, _} = Call -> ct:fail({unexpected, Call})
    after 100 -> ok
    end.

listen_port(S) when is_port(S) ->
    {ok, P} = inet:port(S),
    P;
listen_port(S) ->
    {ok, #{port := P}} = socket:sockname(S),
    P.

close_lsock(socket, S) ->
    socket:close(S);
close_lsock(inet, S) ->
    gen_tcp:close(S).

set_keepalive(socket, S) ->
    socket:setopt_native(S, ?KEEPALIVE, <<1:32/native>>);
set_keepalive(_InetOrSsl, S) ->
    {L, N} = ?KEEPALIVE,
    inet:setopts(S, [{raw, L, N, <<1:32/native>>}]).

keepalive(socket, S) ->
    {ok, V} = socket:getopt(S, {socket, keepalive}),
    V;
keepalive(_InetOrSsl, S) ->
    {ok, [{keepalive, V}]} = inet:getopts(S, [keepalive]),
    V.

echo(Port) ->
    {ok, C} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(C, <<"echo">>),
    {ok, <<"echo">>} = gen_tcp:recv(C, 4, ?WAIT),
    ok = gen_tcp:close(C).
