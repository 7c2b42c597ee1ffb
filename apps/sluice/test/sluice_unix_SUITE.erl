%% Listeners on a Unix domain socket (`ip => {local, Path}'), on both
%% backends: what a client, a handler and an operator see (echo, the
%% Conn's addresses, info/1, socket options), the socket file's life (a
%% stale one replaced, a live one or a regular file left alone, removed
%% when the listener stops or suspends, and not when another server has
%% taken the path since), the PROXY protocol from a local proxy, the
%% features that read the socket's state (idle timeout, hibernation,
%% parking, drain, limits), TLS over a Unix socket, and the options
%% refused with one.
%%
%% The sockets live in a short directory under /tmp made by the suite:
%% priv_dir paths run past sun_path's 108 bytes.
-module(sluice_unix_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([serves_and_names_both_ends/1,
         tcp_only_socket_opts_are_left_out/1,
         tcp_only_options_on_a_connection_are_enotsup/1,
         stale_socket_file_is_replaced/1,
         live_listener_path_is_refused_and_kept/1,
         file_that_is_not_a_socket_is_refused_and_kept/1,
         missing_directory_is_refused/1,
         file_removed_at_stop_and_suspend/1,
         file_of_a_changed_path_goes_when_the_owner_is_killed/1,
         file_of_another_server_is_not_removed/1,
         relative_path_is_made_absolute/1,
         proxy_header_gives_the_real_client/1,
         idle_connection_is_closed/1,
         hibernated_connection_answers/1,
         drain_closes_connections/1,
         limits_and_pool_options_work/1,
         parked_connection_wakes/1,
         tls_over_a_unix_socket/1,
         bad_combinations_are_refused/1,
         child_spec_names_the_path/1,
         app_stop_removes_the_file/1]).

-define(ECHO, {sluice_proto_echo, []}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}, parked_connection_wakes, tls_over_a_unix_socket,
     bad_combinations_are_refused, child_spec_names_the_path, app_stop_removes_the_file].

groups() ->
    sluice_test_lib:backend_groups(
      [serves_and_names_both_ends,
       tcp_only_socket_opts_are_left_out,
       tcp_only_options_on_a_connection_are_enotsup,
       stale_socket_file_is_replaced,
       live_listener_path_is_refused_and_kept,
       file_that_is_not_a_socket_is_refused_and_kept,
       missing_directory_is_refused,
       file_removed_at_stop_and_suspend,
       file_of_another_server_is_not_removed,
       file_of_a_changed_path_goes_when_the_owner_is_killed,
       relative_path_is_made_absolute,
       proxy_header_gives_the_real_client,
       idle_connection_is_closed,
       hibernated_connection_answers,
       drain_closes_connections,
       limits_and_pool_options_work]).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Dir = "/tmp/sluice-unix-" ++ os:getpid(),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    [{dir, Dir} | Config].

end_per_suite(Config) ->
    _ = file:del_dir_r(?config(dir, Config)),
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    %% short names: the path must fit sun_path
    N = erlang:unique_integer([positive]),
    Path = filename:join(?config(dir, Config), integer_to_list(N) ++ ".sock"),
    [{name, {?MODULE, Case}}, {path, Path} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    _ = file:delete(?config(path, Config)),
    ok.

%%% Helpers

%% A listener on the case's path, on the group's transport.
start(Config, Opts) ->
    sluice:start_listener(?config(name, Config),
                          maps:merge(#{ip => {local, ?config(path, Config)},
                                       transport => sluice_test_lib:transport(),
                                       handler => {sluice_api_handler, #{test => self()}}},
                                     Opts)).

connect(Path) ->
    gen_tcp:connect({local, Path}, 0, [binary, {active, false}], 5000).

%% Connect, and the handler's pid and Conn from its init/2.
connect_conn(Path) ->
    {ok, C} = connect(Path),
    receive {init, Pid, Conn} -> {C, Pid, Conn}
    after 5000 -> error(no_init)
    end.

echo(C, Bin) ->
    ok = gen_tcp:send(C, Bin),
    gen_tcp:recv(C, byte_size(Bin), 5000).

is_socket_file(Path) ->
    case file:read_link_info(Path) of
        {ok, #file_info{type = Type}} -> Type =:= other;
        {error, _} -> false
    end.

%% A socket file that nothing listens on, as a killed server leaves it.
stale_socket(Path) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {local, Path}}]),
    ok = gen_tcp:close(L),
    true = is_socket_file(Path).

%%% Cases

%% Echo works; the Conn's ends are `{local, Path}' (the client, unnamed,
%% `<<>>'), info/1 names the path with port 0, and the default
%% socket_opts (nodelay among them) did not fail the listen.
serves_and_names_both_ends(Config) ->
    Path = ?config(path, Config),
    {ok, _} = start(Config, #{}),
    {C, _Pid, Conn} = connect_conn(Path),
    ?assertEqual({ok, <<"hello">>}, echo(C, <<"hello">>)),
    ?assertEqual({ok, {local, <<>>}}, sluice:peername(Conn)),
    ?assertEqual({ok, {local, list_to_binary(Path)}}, sluice:sockname(Conn)),
    #{ip := IP, port := Port, connections := 1} = sluice:info(?config(name, Config)),
    ?assertEqual({{local, list_to_binary(Path)}, 0}, {IP, Port}),
    ok = gen_tcp:close(C).

%% TCP's and IP's options, given or the library's defaults, are left out
%% on a Unix socket; the socket-level ones are set.
tcp_only_socket_opts_are_left_out(Config) ->
    Path = ?config(path, Config),
    SO = [{nodelay, true}, {tos, 16}, {keepalive, true}, {sndbuf, 65536},
          {linger, {true, 1}}, {priority, 1}],
    {ok, _} = start(Config, #{socket_opts => SO}),
    {C, Pid, _Conn} = connect_conn(Path),
    ?assertEqual({ok, <<"x">>}, echo(C, <<"x">>)),
    %% (Linux doubles sndbuf)
    ?assertEqual({ok, [{keepalive, true}, {linger, {true, 1}}, {priority, 1},
                       {sndbuf, 131072}]},
                 sluice:call(Pid, {getopts, [keepalive, linger, priority, sndbuf]}, 5000)),
    ok = gen_tcp:close(C).

%% sluice:setopts/2 and getopts/2 with nodelay or tos on a Unix socket:
%% `enotsup' on both backends (the inet driver said `ok' and set nothing);
%% the others work.
tcp_only_options_on_a_connection_are_enotsup(Config) ->
    {ok, _} = start(Config, #{}),
    {C, Pid, _Conn} = connect_conn(?config(path, Config)),
    Call = fun(Req) -> sluice:call(Pid, Req, 5000) end,
    ?assertEqual({error, enotsup}, Call({setopts, [{nodelay, true}]})),
    ?assertEqual({error, enotsup}, Call({setopts, [{tos, 16}]})),
    ?assertEqual({error, enotsup}, Call({getopts, [nodelay]})),
    ?assertEqual({error, enotsup}, Call({getopts, [keepalive, tos]})),
    ?assertEqual(ok, Call({setopts, [{keepalive, true}]})),
    ?assertEqual({ok, [{keepalive, true}]}, Call({getopts, [keepalive]})),
    ?assertEqual({ok, <<"still">>}, echo(C, <<"still">>)),
    ok = gen_tcp:close(C).

stale_socket_file_is_replaced(Config) ->
    Path = ?config(path, Config),
    stale_socket(Path),
    {ok, _} = start(Config, #{}),
    {C, _, _} = connect_conn(Path),
    ?assertEqual({ok, <<"new">>}, echo(C, <<"new">>)),
    ok = gen_tcp:close(C).

%% Another server listening on the path: eaddrinuse, and its socket file
%% and its clients are untouched.
live_listener_path_is_refused_and_kept(Config) ->
    Path = ?config(path, Config),
    {ok, L} = gen_tcp:listen(0, [binary, {ip, {local, Path}}, {active, false}]),
    ?assertEqual({error, eaddrinuse}, start(Config, #{})),
    %% (the library's probe was accepted there: it is taken first)
    {ok, Probe} = gen_tcp:accept(L, 5000),
    ok = gen_tcp:close(Probe),
    {ok, C} = connect(Path),
    {ok, A} = gen_tcp:accept(L, 5000),
    ok = gen_tcp:send(C, <<"mine">>),
    ?assertEqual({ok, <<"mine">>}, gen_tcp:recv(A, 4, 5000)),
    [ok = gen_tcp:close(S) || S <- [C, A, L]].

file_that_is_not_a_socket_is_refused_and_kept(Config) ->
    Path = ?config(path, Config),
    ok = file:write_file(Path, <<"data">>),
    ?assertEqual({error, eexist}, start(Config, #{})),
    ?assertEqual({ok, <<"data">>}, file:read_file(Path)),
    Dir = Path ++ ".d",
    ok = file:make_dir(Dir),
    ?assertEqual({error, eexist},
                 start(Config, #{ip => {local, Dir}})),
    ok = file:del_dir(Dir).

missing_directory_is_refused(Config) ->
    Path = filename:join([?config(dir, Config), "nodir", "x.sock"]),
    ?assertEqual({error, enoent}, start(Config, #{ip => {local, Path}})),
    ?assertEqual("no such file or directory", sluice:format_error(enoent)).

%% stop_listener/1 and /2 and suspend/1 remove the file (a connect is then
%% enoent); resume/1 binds it again.
file_removed_at_stop_and_suspend(Config) ->
    Path = ?config(path, Config),
    Name = ?config(name, Config),
    {ok, _} = start(Config, #{}),
    ?assert(is_socket_file(Path)),
    ok = sluice:suspend(Name),
    ?assertNot(is_socket_file(Path)),
    ?assertEqual({error, enoent}, connect(Path)),
    ok = sluice:resume(Name),
    {C, _, _} = connect_conn(Path),
    ?assertEqual({ok, <<"back">>}, echo(C, <<"back">>)),
    ok = gen_tcp:close(C),
    ok = sluice:stop_listener(Name),
    ?assertNot(is_socket_file(Path)),
    {ok, _} = start(Config, #{}),
    ok = sluice:stop_listener(Name, 1000),
    ?assertNot(is_socket_file(Path)).

%% A path whose file was replaced while the listener ran (another server
%% removed it and bound its own) keeps the new file at the stop.
file_of_another_server_is_not_removed(Config) ->
    Path = ?config(path, Config),
    {ok, _} = start(Config, #{}),
    ok = file:delete(Path),
    {ok, L} = gen_tcp:listen(0, [{ip, {local, Path}}]),
    ok = sluice:stop_listener(?config(name, Config)),
    ?assert(is_socket_file(Path)),
    {ok, C} = connect(Path),
    [ok = gen_tcp:close(S) || S <- [C, L]].

%% The path changed with set_transport_opts/2, then the sockets' owner
%% killed (not stopped: it removes nothing): its supervisor restarts it on
%% the new path, and the old path's file, the killed socket's, went with
%% nothing to remove it (no bind comes back to that path to find it
%% stale). Removed now as the owner restarts; the new path's is removed
%% at the stop as usual.
file_of_a_changed_path_goes_when_the_owner_is_killed(Config) ->
    Path = ?config(path, Config),
    Name = ?config(name, Config),
    New = iolist_to_binary([Path, "-new"]),
    {ok, _} = start(Config, #{}),
    ?assert(is_socket_file(Path)),
    ok = sluice:set_transport_opts(Name, #{ip => {local, New}}),
    Owner = owner(Name),
    exit(Owner, kill),
    ok = sluice_test_lib:wait_until(
           fun() -> owner(Name) =/= Owner andalso is_pid(owner(Name))
                        andalso maps:get(ip, sluice:info(Name)) =:= {local, New} end, 5000),
    ?assert(is_socket_file(New)),
    ?assertNot(is_socket_file(Path)),
    {C, _, _} = connect_conn(New),
    ?assertEqual({ok, <<"new">>}, echo(C, <<"new">>)),
    ok = gen_tcp:close(C),
    ok = sluice:stop_listener(Name),
    ?assertNot(is_socket_file(New)).

owner(Name) ->
    case sluice_registry:lookup(Name) of
        {ok, #{sup := Sup}} ->
            case lists:keyfind(sluice_listen_sockets, 1, supervisor:which_children(Sup)) of
                {_, Pid, _, _} -> Pid;
                false -> undefined
            end;
        error ->
            undefined
    end.

%% A relative path is the VM's working directory's at start: info/1 and
%% the Conn name it absolute, and the stop removes that file.
relative_path_is_made_absolute(Config) ->
    Path = ?config(path, Config),
    {ok, Cwd} = file:get_cwd(),
    ok = file:set_cwd(filename:dirname(Path)),
    try
        {ok, _} = start(Config, #{ip => {local, filename:basename(Path)}})
    after
        ok = file:set_cwd(Cwd)
    end,
    #{ip := IP} = sluice:info(?config(name, Config)),
    ?assertEqual({local, list_to_binary(Path)}, IP),
    {C, _, Conn} = connect_conn(Path),
    ?assertEqual({ok, {local, list_to_binary(Path)}}, sluice:sockname(Conn)),
    ok = gen_tcp:close(C),
    ok = sluice:stop_listener(?config(name, Config)),
    ?assertNot(is_socket_file(Path)).

%% haproxy's `send-proxy-v2' to a Unix socket: the client's TCP address
%% from the header, as over TCP; a LOCAL header (its health check) and an
%% AF_UNIX one (a local client of the proxy) too.
proxy_header_gives_the_real_client(Config) ->
    Path = ?config(path, Config),
    {ok, _} = start(Config, #{proxy_protocol => true}),
    Src = {{192, 0, 2, 7}, 40001},
    Dst = {{198, 51, 100, 1}, 443},
    Headers = [{#{version => 2, command => proxy, transport => tcp4, source => Src,
                  destination => Dst, tlvs => []}, Src},
               {#{version => 2, command => local, transport => unspec, tlvs => []}, none},
               {#{version => 2, command => proxy, transport => unix_stream,
                  source => {local, <<"/run/client">>}, destination => {local, <<"/run/x">>},
                  tlvs => []}, {local, <<"/run/client">>}},
               {#{version => 1, command => proxy, transport => tcp4, source => Src,
                  destination => Dst}, Src}],
    lists:foreach(
      fun({H, Source}) ->
              {ok, C} = connect(Path),
              ok = gen_tcp:send(C, [sluice_proxy_header:encode(H), <<"after">>]),
              Conn = receive {init, _, Cn} -> Cn after 5000 -> error(no_init) end,
              ?assertEqual(Source, maps:get(source, maps:get(proxy, Conn), none)),
              ?assertEqual({ok, <<"after">>}, gen_tcp:recv(C, 5, 5000)),
              ok = gen_tcp:close(C)
      end, Headers).

%% The idle sweep reads the Unix socket's byte count as a TCP one's.
idle_connection_is_closed(Config) ->
    {ok, _} = start(Config, #{idle_timeout => 100}),
    {C, _, _} = connect_conn(?config(path, Config)),
    ?assertEqual({error, closed}, gen_tcp:recv(C, 0, 5000)),
    ok = sluice_test_lib:wait_until(
           fun() -> maps:get(idle_timeout, maps:get(close_reasons,
                                                    sluice:info(?config(name, Config))))
                        =:= 1 end, 5000).

hibernated_connection_answers(Config) ->
    {ok, _} = start(Config, #{hibernate_after => 10, handler => {sluice_proto_echo, []}}),
    {ok, C} = connect(?config(path, Config)),
    ?assertEqual({ok, <<"first">>}, echo(C, <<"first">>)),
    [Pid] = sluice_test_lib:conn_pids(?config(name, Config)),
    %% (polled seldom: reading current_function moves the process's
    %% reductions, which the sweep takes for activity)
    ok = sluice_test_lib:wait_until(
           fun() -> process_info(Pid, current_function) =:=
                        {current_function, {erlang, hibernate, 3}} end, 5000, 250),
    ?assertEqual({ok, <<"awake">>}, echo(C, <<"awake">>)),
    ok = gen_tcp:close(C).

drain_closes_connections(Config) ->
    Path = ?config(path, Config),
    {ok, _} = start(Config, #{}),
    {C, Pid, _} = connect_conn(Path),
    {ok, _} = sluice:drain(?config(name, Config), 5000),
    receive {drain, Pid} -> ok after 5000 -> error(no_drain) end,
    ?assertEqual({error, closed}, gen_tcp:recv(C, 0, 5000)),
    ?assertNot(is_socket_file(Path)),
    ok = sluice_test_lib:wait_until(
           fun() -> maps:get(drained, maps:get(close_reasons, sluice:info(?config(name, Config))))
                        =:= 1 end, 5000).

%% max_connections holds; num_acceptors, backlog and num_listen_sockets
%% (one socket: a path is bound once) are taken.
limits_and_pool_options_work(Config) ->
    Path = ?config(path, Config),
    Name = ?config(name, Config),
    {ok, _} = start(Config, #{max_connections => 1, max_connections_wait => 0,
                              num_acceptors => 3, num_listen_sockets => 4, backlog => 16}),
    {C1, _, _} = connect_conn(Path),
    {ok, C2} = connect(Path),
    ?assertEqual({error, closed}, gen_tcp:recv(C2, 0, 5000)),
    #{rejected := 1, connections := 1} = sluice:info(Name),
    ?assertEqual(3, length(sluice_test_lib:acceptor_pids(Name))),
    ?assertEqual({ok, <<"one">>}, echo(C1, <<"one">>)),
    [ok = gen_tcp:close(S) || S <- [C1, C2]].

%% (inet: the one transport that parks) A parked Unix connection wakes
%% at its next read.
parked_connection_wakes(Config) ->
    Path = ?config(path, Config),
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, #{ip => {local, Path}, transport => inet,
                                            handler => {sluice_proto_ping, []},
                                            hibernate_after => 20, park_after => 50}),
    {ok, C} = connect(Path),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 5000),
    ?assertEqual({ok, <<"Pong\n">>}, echo(C, <<"Ping\n">>)),
    ok = gen_tcp:close(C).

%% OTP's ssl runs over the inet driver's Unix socket.
tls_over_a_unix_socket(Config) ->
    Path = ?config(path, Config),
    Certs = sluice_tls_test_lib:certs(),
    TlsConfig = [{certs, Certs} | Config],
    {ok, _} = sluice:start_listener(?config(name, Config),
                                    #{ip => {local, Path}, transport => ssl,
                                      socket_opts => [{keepalive, true}],
                                      tls_opts => sluice_tls_test_lib:server_opts(TlsConfig),
                                      handler => {sluice_api_handler, #{test => self()}}}),
    {ok, Tcp} = gen_tcp:connect({local, Path}, 0, [binary, {active, false}], 5000),
    {ok, S} = ssl:connect(Tcp, sluice_tls_test_lib:client_opts(TlsConfig) ++
                              [binary, {active, false}], 5000),
    {Pid, Conn} = receive {init, P, Cn} -> {P, Cn} after 5000 -> error(no_init) end,
    ?assertMatch(#{tls := #{protocol := _}}, Conn),
    ?assertEqual({ok, {local, <<>>}}, sluice:peername(Conn)),
    ?assertEqual({ok, [{keepalive, true}]}, sluice:call(Pid, {getopts, [keepalive]}, 5000)),
    ok = ssl:send(S, <<"secret">>),
    ?assertEqual({ok, <<"secret">>}, ssl:recv(S, 6, 5000)),
    ok = ssl:close(S).

%% What a Unix socket cannot have is refused with words that say why.
bad_combinations_are_refused(Config) ->
    Dir = ?config(dir, Config),
    Path = ?config(path, Config),
    Start = fun(Opts) -> sluice:start_listener(?config(name, Config),
                                               maps:merge(#{handler => ?ECHO}, Opts)) end,
    {error, {not_for_local, port, 8000} = E1} = Start(#{ip => {local, Path}, port => 8000}),
    ?assertMatch({match, _}, re:run(sluice:format_error(E1), "has no port")),
    {error, {not_for_local, reuseport, true} = E2} =
        Start(#{ip => {local, Path}, reuseport => true}),
    ?assertMatch({match, _}, re:run(sluice:format_error(E2), "reuseport")),
    %% sun_path: 107 bytes and the NUL
    Long = filename:join(Dir, lists:duplicate(107 - length(Dir), $a)),
    {error, {bad_option, ip, _} = E3} = Start(#{ip => {local, Long}}),
    ?assertMatch({match, _}, re:run(sluice:format_error(E3), "107 bytes")),
    Longest = filename:join(Dir, lists:duplicate(106 - length(Dir), $a)),
    ?assertEqual(107, length(Longest)),
    {ok, _} = Start(#{ip => {local, Longest}}),
    ok = sluice:stop_listener(?config(name, Config)),
    ?assertNot(is_socket_file(Longest)),
    [{error, {bad_option, ip, _}} = Start(#{ip => Bad})
     || Bad <- [{local, ""}, {local, <<>>}, {local, <<0, "abstract">>}, {local, foo},
                {local, "/tmp/a\0b"}]],
    ok.

%% child_spec/1's default name is the path, not the port (0 for every
%% Unix listener): two of them in one supervisor do not clash.
child_spec_names_the_path(Config) ->
    Path = ?config(path, Config),
    #{id := Id} = sluice:child_spec(#{ip => {local, Path}, handler => ?ECHO}),
    ?assertEqual({sluice_listener, {sluice, {local, Path}}}, Id),
    #{id := {sluice_listener, {sluice, 0}}} = sluice:child_spec(#{handler => ?ECHO}).

%% The application's stop stops its listeners: their files go too.
app_stop_removes_the_file(Config) ->
    Path = ?config(path, Config),
    {ok, _} = sluice:start_listener(?config(name, Config),
                                    #{ip => {local, Path}, handler => ?ECHO}),
    ?assert(is_socket_file(Path)),
    ok = application:stop(sluice),
    try
        ?assertNot(is_socket_file(Path))
    after
        {ok, _} = application:ensure_all_started(sluice)
    end.
