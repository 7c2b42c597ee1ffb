%% The listener on several nodes: `bin/sluice serve --nodes 2' prints one
%% listening line, both nodes take connections on the one port, /metrics
%% gives each node's figures and their sums, a dead node leaves the other
%% serving, SIGTERM drains every node and exits 0; sluice_cluster:info/2
%% sums over peer nodes.
%%
%% Needs `make build' (bin/sluice runs _build/default). Every OS process a
%% case starts is killed at its end (the launcher and its children; the
%% peer nodes are children of the CLI VM, and die with their control
%% connection anyway).
-module(sluice_cluster_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([serve_on_two_nodes_spreads_reports_and_drains/1,
         a_dead_node_leaves_the_other_serving/1,
         a_killed_launcher_leaves_no_vm_running/1,
         a_port_shared_by_another_server_is_in_use/1,
         a_hung_node_is_not_counted_as_drained/1,
         hosts_start_nodes_through_ssh/1,
         an_ssh_still_connecting_is_ended_with_serve/1,
         a_second_interrupt_gives_up_the_nodes_still_starting/1,
         one_interrupt_says_so_once_for_two_nodes_starting/1,
         bad_cluster_options_exit_2_with_one_line/1,
         cluster_info_sums_over_peer_nodes/1,
         telemetry_events_carry_the_figures/1,
         no_telemetry_no_process/1]).
-export([execute/3]).

-define(LOOPBACK, "127.0.0.1").
-define(SERIES, ["sluice_connections", "sluice_accepted_total", "sluice_rejected_total",
                 "sluice_closed_total", "sluice_protocol_errors_total",
                 "sluice_accept_errors_total", "sluice_messages_total",
                 "sluice_bytes_in_total", "sluice_bytes_out_total",
                 "sluice_bytes_unsent_total", "sluice_max_connections",
                 "sluice_beam_memory_bytes", "sluice_resident_memory_bytes"]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [serve_on_two_nodes_spreads_reports_and_drains, a_dead_node_leaves_the_other_serving,
     a_killed_launcher_leaves_no_vm_running, a_port_shared_by_another_server_is_in_use,
     a_hung_node_is_not_counted_as_drained,
     hosts_start_nodes_through_ssh, an_ssh_still_connecting_is_ended_with_serve,
     a_second_interrupt_gives_up_the_nodes_still_starting,
     one_interrupt_says_so_once_for_two_nodes_starting,
     bad_cluster_options_exit_2_with_one_line, cluster_info_sums_over_peer_nodes,
     telemetry_events_carry_the_figures, no_telemetry_no_process].

init_per_suite(Config) ->
    sluice_load_test_lib:built_bin(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    {ok, _} = application:ensure_all_started(inets),
    sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) ->
    sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% serve --nodes 2: exactly one "listening on" line, printed once both
%% accept; 40 ping connections are spread over both nodes (each node's
%% accepted count in /metrics is > 0: SO_REUSEPORT hashes each connection,
%% all 40 on one node would be a 1 in 2^39 event); every /metrics line
%% parses, every agreed series is there, and node="all" is the sum of the
%% nodes; the nodes' command lines do not show the cookie (they read it
%% from ~/.erlang.cookie as this VM did: `ps' showed it to every user of
%% the host, enough to connect to a node and run anything there); SIGTERM
%% closes every client (drain), exits 0 and leaves no node running.
serve_on_two_nodes_spreads_reports_and_drains(Config) ->
    {Port, OsPid, TcpPort, MetricsUrl, Lines} = serve(Config, ["--nodes", "2"]),
    ?assertEqual(1, length([L || L <- Lines, binary:match(L, <<"listening on">>) =/= nomatch])),
    Socks = [ping_connect(TcpPort) || _ <- lists:seq(1, 40)],
    Kernel = sluice_kernel:listen_drops(),
    Metrics = scrape(MetricsUrl),
    Nodes = lists:usort([N || {_, #{"node" := N}, _} <- Metrics, N =/= "all"]),
    ct:log("nodes ~p~nmetrics:~n~p", [Nodes, Metrics]),
    ?assertEqual(2, length(Nodes)),
    CmdLines = [C || P <- node_os_pids(Nodes), {ok, C} <- [file:read_file("/proc/" ++ P ++ "/cmdline")]],
    ?assertMatch([_, _], [C || C <- CmdLines, binary:match(C, <<"-name">>) =/= nomatch]),
    [?assertEqual(nomatch, binary:match(C, <<"-setcookie">>)) || C <- CmdLines],
    [?assert(value(Metrics, "sluice_accepted_total", N) > 0, N) || N <- Nodes],
    ?assertEqual(40, value(Metrics, "sluice_accepted_total", "all")),
    ?assertEqual(40, value(Metrics, "sluice_connections", "all")),
    ?assertEqual(40 * 5, value(Metrics, "sluice_bytes_in_total", "all")),
    [?assertEqual(value(Metrics, S, "all"), lists:sum([value(Metrics, S, N) || N <- Nodes]), S)
     || S <- ?SERIES],
    [?assert(value(Metrics, S, N) > 1000000, {S, N})
     || S <- ["sluice_beam_memory_bytes", "sluice_resident_memory_bytes"], N <- Nodes],
    %% The host's kernel counters, on every node and `all' alike: at least
    %% what this host's /proc/net/netstat said just before (they only grow).
    [?assert(value(Metrics, S, N) >= maps:get(K, Kernel), {S, N, Kernel})
     || {S, K} <- [{"sluice_listen_overflows_total", listen_overflows},
                   {"sluice_listen_drops_total", listen_drops}], N <- ["all" | Nodes]],
    signal("TERM", OsPid),
    [?assertEqual({error, closed}, gen_tcp:recv(S, 0, 5000)) || S <- Socks],
    [gen_tcp:close(S) || S <- Socks],
    {Status, After} = sluice_load_test_lib:wait_exit(Port, 15000),
    ct:log("after SIGTERM: ~p~n~s", [Status, [[L, $\n] || L <- After]]),
    ?assertEqual(0, Status),
    ?assert(lists:any(fun(L) -> binary:match(L, <<"drained 2 nodes">>) =/= nomatch end, After)),
    ?assertEqual([], node_os_pids(Nodes)).

%% kill -9 of one node's OS process: the CLI says so on one line, the other
%% node keeps serving (new connections get Pong, /metrics shows one node
%% and sluice_node_up 0 for the dead one, no node="all" for the counters:
%% it would have gone down), and SIGTERM still ends it all with 0.
a_dead_node_leaves_the_other_serving(Config) ->
    %% On both backends: the nodes' listeners are independent either way.
    lists:foreach(fun(Backend) -> dead_node(Config, Backend) end, ["inet", "socket"]).

dead_node(Config, Backend) ->
    {Port, OsPid, TcpPort, MetricsUrl, _} = serve(Config, ["--nodes", "2", "--backend", Backend]),
    Nodes = lists:usort([N || {_, #{"node" := N}, _} <- scrape(MetricsUrl), N =/= "all"]),
    [Victim, Survivor] = Nodes,
    [VictimPid] = node_os_pids([Victim]),
    _ = os:cmd("kill -9 " ++ VictimPid),
    {_, _} = sluice_load_test_lib:wait_line(Port, "node " ++ Victim ++ " is down", 10000),
    Socks = [ping_connect(TcpPort) || _ <- lists:seq(1, 10)],
    Metrics = scrape(MetricsUrl),
    ?assertEqual([Survivor], lists:usort([N || {S, #{"node" := N}, _} <- Metrics, N =/= "all",
                                               S =/= "sluice_node_up"])),
    ?assertEqual(10, value(Metrics, "sluice_connections", "all")),
    ?assertEqual(0, value(Metrics, "sluice_node_up", Victim)),
    ?assertEqual(1, value(Metrics, "sluice_node_up", Survivor)),
    ?assertEqual([], [M || {"sluice_accepted_total", #{"node" := "all"}, _} = M <- Metrics]),
    [gen_tcp:close(S) || S <- Socks],
    signal("TERM", OsPid),
    {Status, After} = sluice_load_test_lib:wait_exit(Port, 15000),
    ct:log("after SIGTERM: ~p~n~s", [Status, [[L, $\n] || L <- After]]),
    ?assertEqual(0, Status).

%% kill -9 of the command's own pid (bin/sluice execs sluice-run: what `$!'
%% names): its VM and the node's VM end too (the VM gets SIGTERM, drains
%% and stops the node). They went on serving the port with no parent,
%% found only by their own pids.
a_killed_launcher_leaves_no_vm_running(Config) ->
    {_Port, OsPid, TcpPort, MetricsUrl, _} = serve(Config, ["--nodes", "1"]),
    Nodes = lists:usort([N || {_, #{"node" := N}, _} <- scrape(MetricsUrl), N =/= "all"]),
    Vms = string:lexemes(os:cmd("pgrep -P " ++ integer_to_list(OsPid)), "\n")
        ++ node_os_pids(Nodes),
    ct:log("launcher ~b, VMs ~p", [OsPid, Vms]),
    ?assertEqual(2, length(Vms)),
    try
        signal("KILL", OsPid),
        ?assertEqual([], wait_gone(Vms, 15000)),
        ?assertMatch({error, _}, gen_tcp:connect({127, 0, 0, 1}, TcpPort, [], 1000))
    after
        [os:cmd("kill -9 " ++ P) || P <- Vms]
    end.

%% A port held by another server whose socket has SO_REUSEPORT (another
%% `serve --nodes', sluice-ref --share-port; here this VM): exit 1 with
%% one line saying the address is in use, as `serve' alone does. The
%% nodes bound it beside the other server (their sockets have
%% SO_REUSEPORT), said `listening on', and the clients were split between
%% the two.
a_port_shared_by_another_server_is_in_use(Config) ->
    SoReusePort = {raw, 1, 15, <<1:32/native>>},
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}, {reuseaddr, true}, SoReusePort]),
    {ok, TcpPort} = inet:port(L),
    try
        {Status, Lines} = sluice_load_test_lib:wait_exit(
                            element(1, sluice_load_test_lib:sluice(
                                         Config, ["serve", "--ip", ?LOOPBACK,
                                                  "--port", integer_to_list(TcpPort),
                                                  "--protocol", "ping", "--nodes", "1"])),
                            30000),
        ct:log("~p~n~s", [Status, [[Line, $\n] || Line <- Lines]]),
        ?assertEqual(1, Status),
        ?assertMatch([_], [Line || Line <- Lines, binary:match(Line, <<"address in use">>) =/= nomatch]),
        ?assertEqual([], [Line || Line <- Lines, binary:match(Line, <<"listening on">>) =/= nomatch])
    after
        gen_tcp:close(L)
    end.

%% SIGTERM with one node hung (SIGSTOP): the drain does not wait for its
%% answer past the deadline, the summary counts only the node that drained
%% and a line names the one that did not, exit 0. It said "drained 2
%% nodes (0 connections closed at the deadline)" whatever the hung node
%% held, and waited 15 s more to stop its listener.
a_hung_node_is_not_counted_as_drained(Config) ->
    {Port, OsPid, _TcpPort, MetricsUrl, _} = serve(Config, ["--nodes", "2",
                                                            "--drain-timeout", "200"]),
    Nodes = lists:usort([N || {_, #{"node" := N}, _} <- scrape(MetricsUrl), N =/= "all"]),
    [Hung, _] = Nodes,
    [HungPid] = node_os_pids([Hung]),
    try
        signal("STOP", list_to_integer(HungPid)),
        signal("TERM", OsPid),
        {Status, After} = sluice_load_test_lib:wait_exit(Port, 40000),
        ct:log("after SIGTERM: ~p~n~s", [Status, [[L, $\n] || L <- After]]),
        ?assertEqual(0, Status),
        ?assert(lists:any(fun(L) -> binary:match(L, <<"drained 1 nodes">>) =/= nomatch end, After)),
        ?assert(lists:any(fun(L) -> binary:match(L, list_to_binary("node " ++ Hung ++ " did not drain")) =/= nomatch end, After)),
        %% "cut": the hung node is gone (it held its connections, and
        %% the command's stderr, which its standard I/O inherits)
        ?assertEqual(gone, os_process(HungPid)),
        %% killed before peer:stop/1, which otherwise waited 5 s for it
        %% and logged "peer:stop() timed out waiting for disconnect"
        ?assertEqual([], [L || L <- After, binary:match(L, <<"timed out">>) =/= nomatch])
    after
        os:cmd("kill -9 " ++ HungPid)
    end.

%% `gone' once the OS process has exited (a zombie has exited too).
os_process(OsPid) ->
    case string:trim(os:cmd("ps -o stat= -p " ++ OsPid)) of
        "" -> gone;
        "Z" ++ _ -> gone;
        Stat -> {running, Stat}
    end.

%% --hosts starts each node through ssh (here $SLUICE_SSH, a stand-in that
%% logs its arguments and runs the command locally; $SLUICE_DIST_HOST names
%% this host for the nodes): the same path as on real hosts. Two nodes on
%% "host" 127.0.0.1 serve, the stand-in ran once per node with `-T HOST',
%% and SIGTERM ends it with 0. The stand-in's "remote" home holds another
%% cookie: the nodes get the CLI node's, and not on the ssh command line,
%% which ps shows to every user of both hosts.
hosts_start_nodes_through_ssh(Config) ->
    {Ssh, Log} = sluice_load_test_lib:fake_ssh(?config(priv_dir, Config), 2, "hosts-ssh"),
    Env = [{"SLUICE_SSH", Ssh}, {"SLUICE_DIST_HOST", "127.0.0.1"}],
    {Port, OsPid, TcpPort, _Url, _} = serve(Config, ["--nodes", "2", "--hosts", "127.0.0.1"], Env),
    Socks = [ping_connect(TcpPort) || _ <- lists:seq(1, 4)],
    {ok, Logged} = file:read_file(Log),
    ct:log("ssh was given: ~s", [Logged]),
    ?assertMatch([<<"-T 127.0.0.1 ", _/binary>>, <<"-T 127.0.0.1 ", _/binary>>],
                 string:lexemes(Logged, "\n")),
    ?assertEqual(nomatch, string:find(Logged, "setcookie")),
    ?assertEqual(nomatch, string:find(Logged, sluice_load_test_lib:cookie())),
    [gen_tcp:close(S) || S <- Socks],
    signal("TERM", OsPid),
    {Status, After} = sluice_load_test_lib:wait_exit(Port, 15000),
    ct:log("after SIGTERM: ~p~n~s", [Status, [[L, $\n] || L <- After]]),
    ?assertEqual(0, Status).

%% `serve --hosts HOST' interrupted while ssh is still connecting (a
%% stand-in that hangs as ssh does on an unreachable host): the node is
%% given up on after its boot timeout (30 s, here 3: SLUICE_BOOT_TIMEOUT),
%% exit 1 with one line, and that ssh is gone
%% with the command, its children too. It ran on until its own connect
%% timeout, and held the command's standard error open (a `2>&1 | tee'
%% did not end).
an_ssh_still_connecting_is_ended_with_serve(Config) ->
    ct:timetrap({seconds, 75}),
    {Port, OsPid, SshPid} = serve_through_hanging_ssh(Config, "serve-hanging-ssh", "3"),
    signal("TERM", OsPid),
    {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 45000),
    ct:log("~p: ~p", [Status, Lines]),
    ?assertEqual(1, Status),
    ?assertMatch([<<"sluice: interrupted: waiting up to ", _/binary>>,
                  <<"sluice: cannot start a node on 127.0.0.1: none came up", _/binary>>], Lines),
    ?assertMatch({match, _}, re:run(hd(Lines), "^sluice: interrupted: waiting up to [1-3] s more "
                                               "for the node starting on 127.0.0.1 \\(interrupt "
                                               "again to give it up\\)$")),
    ?assertEqual([], sluice_load_test_lib:wait_group_gone(SshPid, 5000)).

%% The same with a second interrupt: it gives the boot up at once (the
%% boot timeout is a minute here), with one line, and that ssh is gone.
%% Only the boot timeout ended it (30 s by default).
a_second_interrupt_gives_up_the_nodes_still_starting(Config) ->
    ct:timetrap({seconds, 60}),
    {Port, OsPid, SshPid} = serve_through_hanging_ssh(Config, "serve-hanging-ssh-twice", "60"),
    signal("TERM", OsPid),
    _ = sluice_load_test_lib:wait_line(Port, "interrupt again", 10000),
    signal("TERM", OsPid),
    {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 20000),
    ct:log("~p: ~p", [Status, Lines]),
    ?assertEqual(1, Status),
    ?assertEqual([<<"sluice: interrupted while a node was starting on 127.0.0.1">>], Lines),
    ?assertEqual([], sluice_load_test_lib:wait_group_gone(SshPid, 5000)).

%% Two nodes starting (`--nodes 2', ssh stand-ins that hang) and one
%% interrupt: one line, the rule `load --nodes' has (sluice_peer_boot),
%% naming both; the boot timeout then gives both up (exit 1), and both
%% ssh stand-ins are gone.
one_interrupt_says_so_once_for_two_nodes_starting(Config) ->
    ct:timetrap({seconds, 60}),
    Dir = ?config(priv_dir, Config),
    PidFile = filename:join(Dir, "two-hanging.pids"),
    Ssh = filename:join(Dir, "two-hanging-ssh"),
    ok = file:write_file(Ssh, ["#!/bin/sh\necho $$ >> '", PidFile, "'\n",
                               "sleep 120\nshift\nexec \"$@\"\n"]),
    ok = file:change_mode(Ssh, 8#755),
    Env = [{"SLUICE_SSH", Ssh}, {"SLUICE_DIST_HOST", "127.0.0.1"}, {"SLUICE_BOOT_TIMEOUT", "4"}],
    {Port, OsPid} = sluice_load_test_lib:sluice(
                      Config, ["serve", "--ip", ?LOOPBACK, "--port", "0", "--nodes", "2",
                               "--hosts", "127.0.0.1"], Env),
    Deadline = erlang:monotonic_time(millisecond) + 15000,
    SshPids = wait_pids(PidFile, 2, Deadline),
    [sluice_load_test_lib:reap(Config, P) || P <- SshPids],
    signal("TERM", OsPid),
    {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 30000),
    ct:log("~p: ~p", [Status, Lines]),
    ?assertEqual(1, Status),
    ?assertMatch([<<"sluice: interrupted: waiting up to ", _/binary>>],
                 [L || L <- Lines, string:find(L, "interrupted: waiting") =/= nomatch]),
    ?assertMatch({match, _}, re:run(hd(Lines), "for the nodes starting on 127.0.0.1 \\(interrupt "
                                               "again to give them up\\)$")),
    [?assertEqual([], sluice_load_test_lib:wait_group_gone(P, 5000)) || P <- SshPids].

wait_pids(File, N, Deadline) ->
    Pids = case file:read_file(File) of
               {ok, B} -> [P || L <- string:lexemes(B, "\n"), {P, <<>>} <- [string:to_integer(L)]];
               _ -> []
           end,
    case length(Pids) >= N of
        true -> Pids;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ct:fail({no_pids, File, Pids});
                false -> timer:sleep(20), wait_pids(File, N, Deadline)
            end
    end.

%% `serve --hosts 127.0.0.1' through a stand-in ssh that hangs as ssh
%% does on an unreachable host, with a boot timeout of BootSecs: the
%% port, the command's and the ssh's OS pids, once the ssh runs.
serve_through_hanging_ssh(Config, Name, BootSecs) ->
    {Ssh, PidFile} = sluice_load_test_lib:hanging_ssh(?config(priv_dir, Config), Name),
    Env = [{"SLUICE_SSH", Ssh}, {"SLUICE_DIST_HOST", "127.0.0.1"},
           {"SLUICE_BOOT_TIMEOUT", BootSecs}],
    {Port, OsPid} = sluice_load_test_lib:sluice(
                      Config, ["serve", "--ip", ?LOOPBACK, "--port", "0", "--nodes", "1",
                               "--hosts", "127.0.0.1"], Env),
    SshPid = wait_pid(PidFile, erlang:monotonic_time(millisecond) + 15000),
    sluice_load_test_lib:reap(Config, SshPid),
    {Port, OsPid, SshPid}.

wait_pid(File, Deadline) ->
    Read = case file:read_file(File) of
               {ok, B} -> string:to_integer(string:trim(B));
               _ -> none
           end,
    case Read of
        {Pid, <<>>} -> Pid;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ct:fail({no_pid, File});
                false -> timer:sleep(20), wait_pid(File, Deadline)
            end
    end.

%% Bad --nodes / --metrics-port values: status 2, one line naming the option.
bad_cluster_options_exit_2_with_one_line(Config) ->
    [begin
         {Status, Lines} = run(Config, ["serve" | Args]),
         ct:log("~p: ~p ~p", [Args, Status, Lines]),
         ?assertEqual(2, Status),
         ?assertMatch([_], Lines),
         ?assertNotEqual(nomatch, binary:match(hd(Lines), Flag))
     end || {Args, Flag} <- [{["--nodes", "-1"], <<"--nodes">>},
                             {["--nodes", "many"], <<"--nodes">>},
                             {["--metrics-port", "70000"], <<"--metrics-port">>}]].

%% cluster_info/1 on a distributed node with a listener on each of two
%% peers: connections, accepted and bytes are the sums of the peers' info/1,
%% each peer's figures and memory are under `nodes'; a name no node runs is
%% not_found.
cluster_info_sums_over_peer_nodes(_Config) ->
    ok = ensure_distributed(),
    Ebins = [filename:dirname(code:which(M)) || M <- [sluice, sluice_cluster]],
    Peers = [begin
                 {ok, P, N} = peer:start_link(#{name => peer:random_name(?MODULE),
                                               host => "127.0.0.1",
                                               args => ["-setcookie", atom_to_list(erlang:get_cookie())
                                                        | lists:append([["-pa", D] || D <- Ebins])]}),
                 {P, N}
             end || _ <- [1, 2]],
    try
        Counts = lists:zip([N || {_, N} <- Peers], [3, 5]),
        Socks = lists:append(
                  [begin
                       {ok, Port} = erpc:call(N, sluice_serve_cluster, start_node_listener,
                                              [#{ip => {127, 0, 0, 1}, port => 0,
                                                 handler => {sluice_proto_ping, []}}]),
                       [ping_connect(Port) || _ <- lists:seq(1, C)]
                   end || {N, C} <- Counts]),
        Info = sluice_cluster:info(sluice_cli, [node() | nodes()]),
        ct:log("~p", [Info]),
        ?assertMatch(#{connections := 8, accepted := 8, bytes_in := 40, bytes_out := 40},
                     Info),
        PerNode = maps:get(nodes, Info),
        [?assertMatch(#{connections := C, beam_memory := M, resident_memory := R}
                        when M > 0 andalso R > 0, maps:get(N, PerNode))
         || {N, C} <- Counts],
        ?assertEqual({error, not_found}, sluice_cluster:info(no_such_listener, [node() | nodes()])),
        [gen_tcp:close(S) || S <- Socks]
    after
        [peer:stop(P) || {P, _} <- Peers]
    end.

%% Where a telemetry module is present (this suite stands in for it), the
%% figures go out as [sluice, listener, stats] events, once for the node and
%% once for `all', with the listener's counts as measurements.
telemetry_events_carry_the_figures(_Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Name = {?MODULE, telemetry},
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0,
                                           handler => {sluice_proto_ping, []}}),
    #{port := Port} = sluice:info(Name),
    S = ping_connect(Port),
    register(sluice_serve_telemetry_test, self()),
    {ok, Pid} = sluice_serve_telemetry:start(Name, ?MODULE),
    try
        Events = [receive {telemetry, E, M, Meta} -> {E, M, Meta} after 3000 -> none end
                  || _ <- [1, 2]],
        ct:log("~p", [Events]),
        Node = node(),
        [?assertMatch({[sluice, listener, stats],
                       #{connections := 1, accepted := 1, bytes_in := 5, accept_errors := 0,
                         beam_memory := _, resident_memory := _},
                       #{listener := Name, node := N}} when N =:= Node orelse N =:= all, E)
         || E <- Events],
        %% one of each (the first tick's two events), not the node's twice
        ?assertEqual(lists:sort([Node, all]),
                     lists:sort([maps:get(node, Meta) || {_, _, Meta} <- Events])),
        %% `all' names the nodes that did not answer: none
        ?assertEqual([[]], [maps:get(missing, Meta) || {_, _, #{node := all} = Meta} <- Events])
    after
        unlink(Pid), exit(Pid, kill),
        unregister(sluice_serve_telemetry_test),
        gen_tcp:close(S),
        sluice:stop_listener(Name)
    end.

%% Without telemetry on the code path nothing is started.
no_telemetry_no_process(_Config) ->
    ?assertEqual(ignore, sluice_serve_telemetry:start(x, sluice_no_such_module)).

%% Stands in for telemetry:execute/3.
-spec execute(list(), map(), map()) -> ok.
execute(Event, Measurements, Meta) ->
    sluice_serve_telemetry_test ! {telemetry, Event, Measurements, Meta},
    ok.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

ensure_distributed() ->
    case node() of
        nonode@nohost ->
            _ = os:cmd("epmd -daemon"),
            Name = list_to_atom("sluice_cluster_suite_" ++ os:getpid() ++ "@127.0.0.1"),
            {ok, _} = net_kernel:start([Name, longnames]),
            ok;
        _ ->
            ok
    end.

serve(Config, Extra) ->
    serve(Config, Extra, []).

serve(Config, Extra, Env) ->
    {Port, OsPid} = sluice_load_test_lib:sluice(
                      Config, ["serve", "--ip", ?LOOPBACK, "--port", "0", "--protocol", "ping",
                               "--metrics-port", "0" | Extra], Env),
    {[MPort], L1} = sluice_load_test_lib:wait_line(Port, "metrics at http://127.0.0.1:([0-9]+)/metrics", 30000),
    {[TcpPort], L2} = sluice_load_test_lib:wait_line(Port, "^listening on [0-9.]+:([0-9]+)$", 10000),
    Url = "http://127.0.0.1:" ++ MPort ++ "/metrics",
    {Port, OsPid, list_to_integer(TcpPort), Url, L1 ++ L2}.

run(Config, Args) ->
    sluice_load_test_lib:sluice_exit(Config, Args).

signal(Sig, OsPid) ->
    sluice_load_test_lib:signal(Sig, OsPid).

%% A connection that has had its Pong: counted by the server.
ping_connect(TcpPort) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, TcpPort, [binary, {active, false}], 5000),
    ok = gen_tcp:send(S, <<"Ping\n">>),
    {ok, <<"Pong\n">>} = gen_tcp:recv(S, 5, 5000),
    S.

%% The OS pids of `Pids' still running after up to `Ms'.
wait_gone(Pids, Ms) ->
    case [P || P <- Pids, filelib:is_dir("/proc/" ++ P)] of
        Alive when Alive =:= []; Ms =< 0 -> Alive;
        _ -> timer:sleep(200), wait_gone(Pids, Ms - 200)
    end.

%% OS pids of the VMs running these node names.
node_os_pids(Nodes) ->
    [P || N <- Nodes,
          P <- string:lexemes(os:cmd("pgrep -f -- '-name " ++ N ++ "( |$)'"), "\n")].

%% [{Series, Labels, Value}] from Prometheus text; fails on a line that
%% is neither a comment nor a well-formed sample.
scrape(Url) ->
    {ok, {{_, 200, _}, Headers, Body}} = httpc:request(get, {Url, []}, [{timeout, 10000}], []),
    ?assertMatch("text/plain" ++ _, proplists:get_value("content-type", Headers)),
    [parse_sample(L) || L <- string:lexemes(Body, "\n"), hd(L) =/= $#].

parse_sample(Line) ->
    case re:run(Line, "^([a-z_]+)\\{([^}]*)\\} ([0-9]+)$", [{capture, all_but_first, list}]) of
        {match, [Name, Labels, Value]} ->
            Pairs = [list_to_tuple(string:split(KV, "=")) || KV <- string:lexemes(Labels, ",")],
            {Name, maps:from_list([{K, string:trim(V, both, "\"")} || {K, V} <- Pairs]),
             list_to_integer(Value)};
        nomatch ->
            error({bad_metrics_line, Line})
    end.

%% The value of a series for a node (for accept errors: reason="all").
value(Metrics, Series, Node) ->
    case [V || {S, #{"node" := N} = L, V} <- Metrics, S =:= Series, N =:= Node,
               maps:get("reason", L, "all") =:= "all"] of
        [V] -> V;
        Other -> error({no_single_sample, Series, Node, Other})
    end.
