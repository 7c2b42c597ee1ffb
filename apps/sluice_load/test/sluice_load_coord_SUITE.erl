%% Tests of `bin/sluice load' across several engine processes and nodes
%% (sluice_cmd_load, sluice_load_run, sluice_load_coord, sluice_load_merge): runs the real
%% command against the C reference server (ping protocol) on loopback.
-module(sluice_load_coord_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([engines_merge_counts_and_histograms/1,
         nodes_run_engines_on_local_peers/1,
         remote_hosts_path_with_a_stand_in_for_ssh/1,
         a_dotted_host_gets_long_node_names/1,
         remote_nodes_get_the_cookie_off_the_command_line/1,
         a_missing_or_failing_ssh_is_one_line/1,
         scale_holds_connections_and_reports_server_memory/1,
         a_hold_under_a_second_gets_its_server_scrape/1,
         bad_options_exit_2_with_one_line/1,
         sigterm_ends_the_run_with_a_report/1,
         sigterm_while_the_nodes_start_ends_the_run_with_a_report/1,
         an_ssh_still_connecting_is_ended_with_the_run/1,
         a_second_interrupt_gives_up_a_node_still_starting/1,
         one_interrupt_says_so_once_for_two_nodes_starting/1,
         an_engine_stopped_as_it_starts_still_reports/1,
         engine_starts_its_window_on_go/1,
         a_lost_engine_is_reported_and_the_rest_merged/1,
         lockstep_rate_stays_per_connection/1,
         a_slow_rate_keeps_its_digits_when_split/1,
         progress_and_summary_say_acks_and_singulars/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [engines_merge_counts_and_histograms, nodes_run_engines_on_local_peers,
     remote_hosts_path_with_a_stand_in_for_ssh, a_dotted_host_gets_long_node_names,
     remote_nodes_get_the_cookie_off_the_command_line, a_missing_or_failing_ssh_is_one_line,
     scale_holds_connections_and_reports_server_memory,
     a_hold_under_a_second_gets_its_server_scrape,
     bad_options_exit_2_with_one_line, sigterm_ends_the_run_with_a_report,
     sigterm_while_the_nodes_start_ends_the_run_with_a_report,
     an_ssh_still_connecting_is_ended_with_the_run,
     a_second_interrupt_gives_up_a_node_still_starting,
     one_interrupt_says_so_once_for_two_nodes_starting,
     an_engine_stopped_as_it_starts_still_reports,
     engine_starts_its_window_on_go, a_lost_engine_is_reported_and_the_rest_merged,
     lockstep_rate_stays_per_connection, a_slow_rate_keeps_its_digits_when_split,
     progress_and_summary_say_acks_and_singulars].

init_per_suite(Config) ->
    case {sluice_load_test_lib:repo_root(), sluice_load_test_lib:priv_dir()} of
        {{ok, Root}, {ok, Priv}} -> [{root, Root}, {bin_dir, Priv} | Config];
        _ -> {fail, "bin/sluice or the C binaries not found: run make"}
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(_Case, Config) -> sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) -> sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------

%% Two engine processes: the report's counts are the sums of the engines'
%% own results, and its histogram is their bucket-by-bucket sum, from
%% which its percentiles are computed (checked here with an independent
%% rank walk, not by averaging the engines' percentiles).
engines_merge_counts_and_histograms(Config) ->
    Port = start_ref(Config),
    J = load_ok(Config, ["--scenario", "ping", "--engines", "2", "--port", Port,
                         "--conns", "41", "--interval", "100", "--duration", "1"]),
    Es = get(engine_results, J),
    ?assertEqual(2, length(Es)),
    ?assertEqual(2, get(engines, J)),
    ?assertEqual([20, 21], lists:sort([get(conns, E) || E <- Es])),
    [?assertEqual(lists:sum([get(K, E) || E <- Es]), get(K, J))
     || K <- [conns, messages, pings, pongs, timeouts, bytes, conns_up_at_end]],
    ?assertEqual(41, get(established, get(connect, J))),
    ?assert(get(pongs, J) >= 41 * 5, get(pongs, J)),
    Merged = buckets(get(latency_hist, J)),
    ?assertEqual(sum_buckets([buckets(get(latency_hist, E)) || E <- Es]), Merged),
    Lat = get(latency_us, J),
    ?assertEqual(lists:sum([N || {_, N} <- Merged]), get(samples, Lat)),
    H = get(latency_hist, J),
    ?assertEqual(lists:min([get(min, get(latency_hist, E)) || E <- Es]), get(min, H)),
    ?assertEqual(lists:max([get(max, get(latency_hist, E)) || E <- Es]), get(max, H)),
    [?assertEqual(max(get(min, H), min(get(max, H), rank_value(H, Q))) / 1000, get(K, Lat))
     || {Q, K} <- [{50, p50}, {90, p90}, {99, p99}]],
    %% per round too: each merged round adds up its engines' rounds
    [R0 | _] = get(rounds, J),
    ?assertEqual(lists:sum([get(pongs, hd(get(rounds, E))) || E <- Es]), get(pongs, R0)),
    ?assertEqual(sum_buckets([buckets(get(latency_hist, hd(get(rounds, E)))) || E <- Es]),
                 buckets(get(latency_hist, R0))).

%% --nodes 2: the engines run on two peer nodes started for the run (not
%% in the coordinator), and the peers are gone afterwards.
nodes_run_engines_on_local_peers(Config) ->
    Port = start_ref(Config),
    J = load_ok(Config, ["--scenario", "scale", "--nodes", "2", "--port", Port,
                         "--conns", "60", "--rate", "200", "--interval", "200",
                         "--duration", "0.5"]),
    ?assertEqual(2, get(nodes, J)),
    Nodes = [get(node, P) || P <- get(placement, J)],
    ?assertEqual(2, length(lists:usort(Nodes))),
    [?assertMatch({match, _}, re:run(N, "^sluice_load_[0-9]+_e[12]@")) || N <- Nodes],
    ?assertEqual(60, get(established, get(connect, J))),
    ?assertEqual(0, get(timeouts_whole_run, J)),
    %% the peers halted with the coordinator: epmd forgets a node when its
    %% OS process has gone, a moment after the command's exit (peer:stop/1
    %% waits for the node's disconnection, not for that), so polled
    Names = [binary_to_list(hd(string:split(N, "@"))) || N <- Nodes],
    ?assertEqual([], epmd_still_has(Names, erlang:monotonic_time(millisecond) + 10000)).

%% The node names of `Names' that epmd still lists at `Deadline' ([] as
%% soon as it lists none of them).
epmd_still_has(Names, Deadline) ->
    Listed = os:cmd("epmd -names"),
    case [N || N <- Names, string:find(Listed, "name " ++ N ++ " ") =/= nomatch] of
        [] -> [];
        Left ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true -> ct:log("epmd: ~s", [Listed]), Left;
                false -> timer:sleep(50), epmd_still_has(Names, Deadline)
            end
    end.

%% --nodes host1,host2 goes through `--ssh CMD HOST erl ...': with a stand-in
%% for ssh that runs the command here, the remote path starts real nodes
%% named after the hosts.
remote_hosts_path_with_a_stand_in_for_ssh(Config) ->
    Port = start_ref(Config),
    Ssh = filename:join(?config(priv_dir, Config), "fake-ssh"),
    %% the stand-in logs each host it is asked for: node names alone would
    %% not show that the nodes were started through it
    Log = filename:join(?config(priv_dir, Config), "fake-ssh.log"),
    %% (empty: the priv_dir is the whole run's, shared with other suites)
    ok = file:write_file(Log, ""),
    ok = file:write_file(Ssh, ["#!/bin/sh\n# logs the host, drops it, runs the rest here\n"
                               "echo \"$1\" >> '", Log, "'\nshift\nexec \"$@\"\n"]),
    ok = file:change_mode(Ssh, 8#755),
    {ok, Here} = inet:gethostname(),
    J = load_ok(Config, ["--scenario", "ping", "--nodes", "localhost," ++ Here, "--ssh", Ssh,
                         "--port", Port, "--conns", "10", "--interval", "200",
                         "--duration", "0.4"]),
    Nodes = lists:sort([get(node, P) || P <- get(placement, J)]),
    ?assertMatch([<<"sluice_load_", _/binary>>, <<"sluice_load_", _/binary>>], Nodes),
    ?assertEqual(lists:sort([<<"localhost">>, list_to_binary(Here)]),
                 lists:sort([lists:last(binary:split(N, <<"@">>)) || N <- Nodes])),
    {ok, Logged} = file:read_file(Log),
    ?assertEqual(lists:sort(["localhost", Here]), lists:sort(string:lexemes(binary_to_list(Logged), "\n"))),
    ?assertEqual(10, get(established, get(connect, J))).

%% A host given by address (or by a domain name): long node names. The
%% coordinator took the host part net_kernel found, the bare host name
%% (`vm' here, most machines), which long names refuse: every such run
%% ended with a page of supervisor report and exit 1 before a node
%% started.
a_dotted_host_gets_long_node_names(Config) ->
    Port = start_ref(Config),
    Ssh = filename:join(?config(priv_dir, Config), "fake-ssh"),
    ok = file:write_file(Ssh, "#!/bin/sh\nshift\nexec \"$@\"\n"),
    ok = file:change_mode(Ssh, 8#755),
    J = load_ok(Config, ["--scenario", "ping", "--nodes", "127.0.0.1", "--ssh", Ssh,
                         "--port", Port, "--conns", "4", "--interval", "200",
                         "--duration", "0.4"]),
    ?assertMatch([<<"sluice_load_", _/binary>>], [get(node, P) || P <- get(placement, J)]),
    [Node] = [get(node, P) || P <- get(placement, J)],
    ?assertEqual(<<"127.0.0.1">>, lists:last(binary:split(Node, <<"@">>))),
    ?assertEqual(4, get(established, get(connect, J))).

%% A node on another host gets the coordinator's cookie, but not on the
%% ssh command line, which ps shows to every user of both hosts (whoever
%% has the cookie can run anything on the nodes): the stand-in's "remote"
%% home holds another cookie, the node joins all the same, and the cookie
%% is nowhere in what ssh was given.
remote_nodes_get_the_cookie_off_the_command_line(Config) ->
    Port = start_ref(Config),
    {Ssh, Log} = sluice_load_test_lib:fake_ssh(?config(priv_dir, Config), 1, "cookie-ssh"),
    J = load_ok(Config, ["--scenario", "ping", "--nodes", "127.0.0.1", "--ssh", Ssh,
                         "--port", Port, "--conns", "4", "--interval", "200",
                         "--duration", "0.4"]),
    ?assertEqual(4, get(established, get(connect, J))),
    {ok, Logged} = file:read_file(Log),
    ct:log("ssh was given: ~s", [Logged]),
    ?assertMatch([_], string:lexemes(Logged, "\n")),
    ?assertEqual(nomatch, string:find(Logged, "setcookie")),
    ?assertEqual(nomatch, string:find(Logged, sluice_load_test_lib:cookie())).

%% An --ssh that is not there, or that fails (a host it cannot reach):
%% exit 1 and one line of sluice's (after what ssh said itself), where it
%% printed a dozen lines of Erlang terms (enoent and open_port's stack;
%% {boot_failed, {exit_status, 255}}).
a_missing_or_failing_ssh_is_one_line(Config) ->
    Dir = ?config(priv_dir, Config),
    Missing = filename:join(Dir, "no-such-ssh"),
    {1, Out1} = sluice(Config, ["load", "--scenario", "ping", "--nodes", "127.0.0.1",
                                "--ssh", Missing, "--port", "1"]),
    ?assertEqual([<<"sluice: --ssh ", (list_to_binary(Missing))/binary, ": no such program">>],
                 string:lexemes(Out1, "\n")),
    Failing = filename:join(Dir, "failing-ssh"),
    ok = file:write_file(Failing, "#!/bin/sh\necho \"ssh: connect to host $1: refused\" >&2\nexit 255\n"),
    ok = file:change_mode(Failing, 8#755),
    {1, Out2} = sluice(Config, ["load", "--scenario", "ping", "--nodes", "127.0.0.1",
                                "--ssh", Failing, "--port", "1"]),
    ct:log("~s", [Out2]),
    ?assertMatch([<<"ssh: connect to host 127.0.0.1: refused">>,
                  <<"sluice: cannot start a node on 127.0.0.1: `", _/binary>>],
                 string:lexemes(Out2, "\n")),
    ?assertNotEqual(nomatch, string:find(Out2, "exited with status 255 before the node came up")).

%% The scale scenario: 2,000 connections from 2 engines on 2 source
%% addresses, ramped at a rate, held for 2 rounds with no timeout, each
%% round reported live as it ends; the
%% server's memory per connection is (held - baseline) / connections from
%% its metrics endpoint (a stub here that serves known figures).
scale_holds_connections_and_reports_server_memory(Config) ->
    Port = start_ref(Config),
    Url = start_metrics_stub(),
    {Code, Out} = sluice(Config, ["load", "--scenario", "scale", "--engines", "2",
                                  "--source-ips", "127.0.0.2-3", "--port", Port,
                                  "--conns", "2000", "--rate", "4000", "--interval", "1000",
                                  "--timeout", "3000", "--duration", "2",
                                  "--server-metrics", Url, "--progress",
                                  "--json", json_path(Config)]),
    ct:log("~s", [Out]),
    ?assertEqual(0, Code),
    J = read_json(Config),
    ?assertEqual(<<"scale">>, get(scenario, J)),
    ?assertEqual(2000, get(established, get(connect, J))),
    ?assertEqual(#{}, get(failures, J)),
    ?assert(get(rate_per_s, get(connect, J)) > 500),
    Rounds = get(rounds, J),
    ?assertEqual(2, length(Rounds)),
    [begin
         ?assertEqual(2000, get(conns_up, R)),
         ?assertEqual(0, get(timeouts, R)),
         ?assert(get(pongs, R) >= 1900, R),
         ?assert(get(p99, get(latency_us, R)) > 0)
     end || R <- Rounds],
    ?assertEqual(0, get(timeouts_whole_run, J)),
    %% each engine kept to its own source address
    Srcs = [lists:last(string:split(binary_to_list(lists:nth(2, lists:dropwhile(
                                      fun(A) -> A =/= <<"--source-ips">> end, get(args, P)))), ","))
            || P <- get(placement, J)],
    ?assertEqual(["127.0.0.2", "127.0.0.3"], lists:sort(Srcs)),
    Mem = get(server_memory, J),
    ?assertEqual(2000, get(connections, Mem)),
    ?assertEqual(3000.0, float(get(beam_bytes_per_conn, Mem))),
    ?assertEqual(8192.0, float(get(resident_bytes_per_conn, Mem))),
    %% every scrape of the hold, as a band
    Range = get(range, Mem),
    ?assert(get(scrapes, Range) >= 1),
    ?assertEqual([3000.0, 3000.0], [float(X) || X <- get(beam, Range)]),
    ?assertMatch({match, _}, re:run(Out, "BEAM 3000 bytes .* resident 8192 bytes")),
    %% live: a line per finished round, merged over both engines, and the
    %% server's memory on the progress line during the hold
    ?assertMatch({match, _}, re:run(Out, "^round 0: up 2000  pings [0-9]+  pongs [0-9]+  timeouts 0 .* p99 [0-9.]+ ",
                                    [multiline])),
    ?assertMatch({match, _}, re:run(Out, "\\(hold .*server: 2000 conns, 2.93 KiB BEAM, 8.00 KiB RSS per conn")).

%% A hold of half a second still has a scrape of the server in it: the
%% hold's scrapes came at the coordinator's one-a-second tick only, which
%% lands anywhere in the second, so a short hold, or one whose tick's
%% scrape was answered after its end (a slow host), had none ("server
%% memory: no figures"). The hold's first scrape is now at its start.
a_hold_under_a_second_gets_its_server_scrape(Config) ->
    Port = start_ref(Config),
    Url = start_metrics_stub(),
    J = load_ok(Config, ["--scenario", "ping", "--port", Port, "--conns", "4",
                         "--interval", "100", "--duration", "0.5", "--server-metrics", Url]),
    Mem = get(server_memory, J),
    ?assertMatch(#{<<"connections">> := 2000}, Mem),
    ?assertEqual(3000.0, float(get(beam_bytes_per_conn, Mem))),
    ?assert(get(scrapes, get(range, Mem)) >= 1).

%% Bad options exit 2 with one line on stderr, before anything starts;
%% the engine's own options are checked by the engine.
bad_options_exit_2_with_one_line(Config) ->
    Bad = [["--engines", "0"], ["--nodes", "0"], ["--source-ips", "10.0.0"],
           ["--source-ips", "127.0.0.1,,"],
           ["--server-metrics", "ftp://x/metrics"], ["--rate", "fast"],
           ["--interval", "0"], ["--bogus", "1"], ["--scenario", "nope"]],
    [begin
         {Code, Err} = sluice_stderr(Config, ["load", "--engines", "2", "--scenario", "scale"] ++ Args),
         ct:log("~p -> ~b: ~s", [Args, Code, Err]),
         ?assertEqual(2, Code),
         ?assertMatch([_], string:lexemes(Err, "\n"))
     end || Args <- Bad].

%% SIGTERM during the hold ends the run early, and the merged report of
%% what was measured still comes out (exit 0).
sigterm_ends_the_run_with_a_report(Config) ->
    {P, OsPid, _Port} = scale_in_hold(Config, "100", "30"),
    _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    ?assertEqual(0, wait_exit(P, 10000)),
    J = read_json(Config),
    ?assert(get(duration_s, J) < 10),
    ?assertEqual(20, get(conns_up_at_end, J)),
    %% and says so: it exits as a whole run does
    ?assertEqual(true, get(interrupted, J)).

%% SIGTERM while a node is starting (a stand-in for ssh that marks the
%% moment and takes a second): the run ends as from the ramp, each engine
%% reporting what it measured, exit 0. OTP's handler stopped the VM (the
%% node was then reported unreachable, exit 1); and an engine stopped just
%% after its start died of the SIGTERM with no report (143, `lost', exit 1)
%% before it blocked the signal.
sigterm_while_the_nodes_start_ends_the_run_with_a_report(Config) ->
    {P, _Mark} = interrupted_as_nodes_start(Config, "slow-ssh", 1,
                                            ["--nodes", "localhost", "--engines", "3",
                                             "--conns", "6"]),
    {Status, Out} = collect_lines(P, []),
    ct:log("~s", [Out]),
    ?assertEqual(0, Status),
    J = read_json(Config),
    ?assertEqual(0, get(engines_lost, J)),
    ?assertEqual(3, length(get(engine_results, J))).

%% `load --nodes HOST' interrupted while ssh is still connecting (a
%% stand-in that hangs as ssh does on an unreachable host): the command
%% gives the node up (after its boot timeout, 30 s, here 3 through
%% SLUICE_BOOT_TIMEOUT: an interrupt waits for a booting node, as the
%% case above shows) and exits 1, and that ssh is gone with
%% it, its children too. It ran on until its own connect timeout (peer
%% gives no handle on it before the node is up), holding the command's
%% output open: this case timed out waiting for the exit.
an_ssh_still_connecting_is_ended_with_the_run(Config) ->
    ct:timetrap({seconds, 75}),
    {P, OsPid, SshPid} = load_through_hanging_ssh(Config, "hanging-ssh", "3"),
    _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    {Status, Out} = collect_lines(P, [], 45000),
    ct:log("~p: ~s~nssh's group at the exit:~n~s",
           [Status, Out, os:cmd("ps -o pid,pgid,ppid,args -g " ++ integer_to_list(SshPid))]),
    ?assertEqual(1, Status),
    ?assertNotEqual(nomatch, string:find(Out, "cannot start a node on localhost")),
    ?assertEqual([], sluice_load_test_lib:wait_group_gone(SshPid, 5000)).

%% The same with a second interrupt: the node is given up at once (its
%% boot timeout is a minute here), exit 1 with the reason, and that ssh
%% is gone. The first interrupt says so; only the boot timeout ended the
%% wait (30 s by default).
a_second_interrupt_gives_up_a_node_still_starting(Config) ->
    ct:timetrap({seconds, 75}),
    {P, OsPid, SshPid} = load_through_hanging_ssh(Config, "hanging-ssh-twice", "60"),
    _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    {_, Before} = sluice_load_test_lib:wait_line(P, "interrupt again to give it up", 10000),
    _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    {Status, Out} = collect_lines(P, [], 20000),
    ct:log("~p: ~p~n~s", [Status, Before, Out]),
    ?assertEqual(1, Status),
    ?assertNotEqual(nomatch, string:find(Out, "interrupted while a node was starting on localhost")),
    ?assertEqual([], sluice_load_test_lib:wait_group_gone(SshPid, 5000)).

%% One interrupt while the first of two nodes starts (a stand-in ssh that
%% takes two seconds, then starts it): one line says the run waits for
%% it and for the one after it, the run ends with a report (exit 0). The
%% interrupt, put back for the run once the first node was up, was taken
%% by the second node's boot as a first interrupt again, which said so
%% once more: a line per node still to start.
one_interrupt_says_so_once_for_two_nodes_starting(Config) ->
    {P, Mark} = interrupted_as_nodes_start(Config, "slow-ssh-two", 2,
                                           ["--nodes", "localhost,localhost", "--conns", "2"]),
    {Status, Out} = collect_lines(P, [], 45000),
    ct:log("~s", [Out]),
    ?assertEqual(0, Status),
    %% both ssh stand-ins ran: the second node started after the interrupt
    {ok, Pids} = file:read_file(Mark),
    ?assertMatch([_, _], string:lexemes(Pids, "\n")),
    ?assertMatch([<<"sluice: interrupted: waiting up to ", _/binary>>],
                 [L || L <- string:lexemes(Out, "\n"), string:find(L, "interrupted: waiting") =/= nomatch]),
    ?assertMatch({match, _}, re:run(Out, "waiting up to [0-9]+ s more for the node starting on "
                                         "localhost, then for the 1 still to start "
                                         "\\(interrupt again to give them up\\)")),
    J = read_json(Config),
    ?assertEqual(true, get(interrupted, J)),
    ?assertEqual(0, get(engines_lost, J)).

%% `load' (ping, 3 s) against a C server with `Args', through a stand-in
%% ssh that takes `Secs' (slow_ssh/3), SIGTERMed once the first node
%% starts: its port, and the stand-in's mark file.
interrupted_as_nodes_start(Config, Name, Secs, Args) ->
    TcpPort = start_ref(Config),
    {Ssh, Mark} = slow_ssh(Config, Name, Secs),
    P = open_port({spawn_executable, filename:join(?config(root, Config), "bin/sluice")},
                  [{args, ["load", "--scenario", "ping", "--ssh", Ssh, "--port", TcpPort,
                           "--duration", "3", "--json", json_path(Config) | Args]},
                   exit_status, stderr_to_stdout, binary, {line, 1024}, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    ok = wait_file(Mark, 10000),
    _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    {P, Mark}.

%% A stand-in for ssh that takes `Secs' to connect, then runs the node
%% here; each run appends its pid to the mark file it returns (which
%% exists once the first has started).
slow_ssh(Config, Name, Secs) ->
    Dir = ?config(priv_dir, Config),
    Mark = filename:join(Dir, Name ++ ".started"),
    Ssh = filename:join(Dir, Name),
    ok = file:write_file(Ssh, ["#!/bin/sh\necho $$ >> '", Mark, "'\nsleep ",
                               integer_to_list(Secs), "\nshift\nexec \"$@\"\n"]),
    ok = file:change_mode(Ssh, 8#755),
    {Ssh, Mark}.

%% `load --nodes localhost' through a stand-in ssh that hangs as ssh does
%% on an unreachable host, with a boot timeout of BootSecs: the port, the
%% command's and the ssh's OS pids, once the ssh runs.
load_through_hanging_ssh(Config, Name, BootSecs) ->
    TcpPort = start_ref(Config),
    {Ssh, PidFile} = sluice_load_test_lib:hanging_ssh(?config(priv_dir, Config), Name),
    P = open_port({spawn_executable, filename:join(?config(root, Config), "bin/sluice")},
                  [{args, ["load", "--scenario", "ping", "--nodes", "localhost", "--ssh", Ssh,
                           "--port", TcpPort, "--conns", "2", "--duration", "3"]},
                   {env, [{"SLUICE_BOOT_TIMEOUT", BootSecs}]},
                   exit_status, stderr_to_stdout, binary, {line, 1024}, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    ok = wait_file(PidFile, 10000),
    {ok, SshPid} = read_pid(PidFile, 2000),
    sluice_load_test_lib:reap(Config, SshPid),
    {P, OsPid, SshPid}.

read_pid(File, Ms) ->
    case file:read_file(File) of
        {ok, B} ->
            case string:to_integer(string:trim(B)) of
                {Pid, <<>>} -> {ok, Pid};
                _ when Ms =< 0 -> ct:fail({no_pid, File});
                _ -> timer:sleep(20), read_pid(File, Ms - 20)
            end;
        _ when Ms =< 0 -> ct:fail({no_pid, File});
        _ -> timer:sleep(20), read_pid(File, Ms - 20)
    end.

%% sluice_load_engine told to stop as soon as it is started (SIGTERM in
%% the coordinator as the engines start): the engine still reports, with
%% status 0. The SIGTERM reached it before it blocked the signal, and it
%% died with no report (143: `lost', exit 1). The engine here starts half
%% a second late (a wrapper), which makes that window wide.
an_engine_stopped_as_it_starts_still_reports(Config) ->
    TcpPort = start_ref(Config),
    Slow = filename:join(?config(priv_dir, Config), "slow-engine"),
    ok = file:write_file(Slow, ["#!/bin/sh\nsleep 0.5\nexec '",
                                filename:join(?config(bin_dir, Config), "sluice-load"),
                                "' \"$@\"\n"]),
    ok = file:change_mode(Slow, 8#755),
    Runner = sluice_load_engine:start(self(), 7, Slow,
                                      ["--scenario", "ping", "--port", TcpPort, "--conns", "2",
                                       "--duration", "3"]),
    ok = sluice_load_engine:stop(Runner),
    {Status, Result} = receive {engine_done, 7, St, R} -> {St, R} after 10000 -> ct:fail(no_end) end,
    ct:log("~p ~p", [Status, Result]),
    ?assertEqual(0, Status),
    ?assertMatch(#{<<"conns">> := 2}, element(2, sluice_json:decode(Result))).

wait_file(File, Ms) ->
    case filelib:is_regular(File) of
        true -> ok;
        false when Ms =< 0 -> ct:fail({no_file, File});
        false -> timer:sleep(50), wait_file(File, Ms - 50)
    end.

%% An engine killed during the hold: the run goes on with the others, the
%% report merges what they measured, says which engine gave nothing, and
%% the exit code is 1.
a_lost_engine_is_reported_and_the_rest_merged(Config) ->
    {P, _OsPid, Port} = scale_in_hold(Config, "200", "2"),
    %% one of the two engines: the sluice-load process aimed at this port
    [Victim | _] = [Pid || L <- string:lexemes(os:cmd("ps -eo pid=,args="), "\n"),
                           [Pid, Args] <- [string:split(string:trim(L), " ")],
                           string:find(Args, "sluice-load --scenario scale") =/= nomatch,
                           string:find(Args, "--port " ++ Port ++ " ") =/= nomatch],
    _ = os:cmd("kill -KILL " ++ Victim),
    {Code, Out} = collect_lines(P, []),
    ct:log("~s", [Out]),
    ?assertEqual(1, Code),
    ?assertMatch({match, _}, re:run(Out, "engine [01] ended with 137 and no result")),
    J = read_json(Config),
    ?assertEqual(1, length(get(engine_results, J))),
    ?assertEqual(10, get(conns_up_at_end, J)).

%% `load --scenario scale' with 2 engines and 20 connections against a
%% fresh reference server, once its hold has started: {Port, OsPid, the
%% server's TCP port}.
scale_in_hold(Config, Interval, Duration) ->
    TcpPort = start_ref(Config),
    P = open_port({spawn_executable, filename:join(?config(root, Config), "bin/sluice")},
                  [{args, ["load", "--scenario", "scale", "--engines", "2", "--port", TcpPort,
                           "--conns", "20", "--interval", Interval, "--duration", Duration,
                           "--progress", "--json", json_path(Config)]},
                   exit_status, stderr_to_stdout, binary, {line, 1024}, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    wait_line(P, <<"hold">>, 10000),
    {P, OsPid, TcpPort}.

collect_lines(P, Acc) ->
    collect_lines(P, Acc, 20000).

collect_lines(P, Acc, Ms) ->
    receive
        {P, {data, {_, L}}} -> collect_lines(P, [L, "\n" | Acc], Ms);
        {P, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after Ms -> ct:fail(no_exit)
    end.

%% What the coordinator builds on, in the engine alone: with --go-stdin
%% a ramped engine reports phase "ready" and keeps waiting (pinging,
%% unmeasured) until "go" arrives on stdin; the window then lasts
%% --duration, the finished rounds come as {"round":K} lines, and the
%% result comes on stdout.
engine_starts_its_window_on_go(Config) ->
    Port = start_ref(Config),
    P = open_port({spawn_executable, filename:join(?config(bin_dir, Config), "sluice-load")},
                  [{args, ["--scenario", "scale", "--port", Port, "--conns", "10",
                           "--interval", "200", "--duration", "0.6", "--quiet",
                           "--progress-json", "--go-stdin", "--json", "/dev/stdout"]},
                   exit_status, binary, {line, 65536}, use_stdio, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    wait_line(P, <<"\"phase\":\"ready\"">>, 5000),
    %% 1.5 s later, still waiting: no window, no round
    Early = drain_lines(P, erlang:monotonic_time(millisecond) + 1500),
    ?assertEqual([], [L || L <- Early, binary:match(L, [<<"window">>, <<"{\"round\"">>]) =/= nomatch]),
    Go = erlang:monotonic_time(millisecond),
    true = port_command(P, <<"go\n">>),
    Lines = lines_until_exit(P, []),
    Took = erlang:monotonic_time(millisecond) - Go,
    ?assert(Took >= 550 andalso Took < 3000, Took),
    ?assert(lists:any(fun(L) -> binary:match(L, <<"\"phase\":\"window\"">>) =/= nomatch end, Lines)),
    [Result] = [L || <<"{\"scenario\"", _/binary>> = L <- Lines],
    {ok, J} = sluice_json:decode(Result),
    ?assertEqual(0, get(exit_code, J)),
    ?assert(abs(get(duration_s, J) - 0.6) < 0.1),
    ?assertEqual(3, length(get(rounds, J))),
    %% every round came live as well, before the result, the last one
    %% too: a round was said once a later one had begun in every thread,
    %% so the last never was, nor one that a thread started late (a
    %% loaded host) finished in the window's last moments
    Live = [R || <<"{\"round\":", _/binary>> = L <- Lines, {ok, R} <- [sluice_json:decode(L)]],
    ?assertEqual([0, 1, 2], [get(round, R) || R <- Live]),
    ?assertEqual(get(rounds, J), Live).

drain_lines(P, Until) ->
    receive {P, {data, {eol, L}}} -> [L | drain_lines(P, Until)]
    after max(0, Until - erlang:monotonic_time(millisecond)) -> []
    end.

lines_until_exit(P, Acc) ->
    receive
        {P, {data, {eol, L}}} -> lines_until_exit(P, [L | Acc]);
        {P, {exit_status, 0}} -> lists:reverse(Acc);
        {P, {exit_status, S}} -> ct:fail({engine_exit, S})
    after 10000 -> ct:fail(engine_timeout)
    end.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% lockstep's --rate is frames/s per connection: over two engines each
%% connection keeps it (it was split like an opening rate, so each
%% connection ran at half of it); ping's, connections opened per second,
%% is still split.
lockstep_rate_stays_per_connection(Config) ->
    Port = start_ref(Config, "ack"),
    J = load_ok(Config, ["--scenario", "lockstep", "--engines", "2", "--port", Port,
                         "--conns", "4", "--rate", "50", "--duration", "1"]),
    Rates = [rate_arg(get(args, P)) || P <- get(placement, J)],
    ?assertEqual([50.0, 50.0], Rates),
    %% 4 connections at 50 frames/s for 1 s
    ?assert(get(messages, J) >= 180 andalso get(messages, J) =< 220, get(messages, J)),
    {0, _} = sluice(Config, ["load", "--scenario", "ping", "--engines", "2", "--port", Port,
                             "--conns", "4", "--rate", "50", "--check"]),
    PingShares = sluice_load_plan:split(#{conns => 4, rate => 50, connect_concurrency => 256},
                                        2, "ping"),
    ?assertEqual([25.0, 25.0], [float(R) || #{rate := R} <- PingShares]).

%% An opening rate split over engines keeps its digits: each of 3 engines'
%% share of 0.01/s was given as "0.003" (0.009/s in all), and a share
%% under 0.0005/s as "0.0", which the engine takes for as fast as possible.
a_slow_rate_keeps_its_digits_when_split(Config) ->
    Port = start_ref(Config, "ping"),
    Shares = fun(Rate) ->
                     J = load_ok(Config, ["--scenario", "connect", "--engines", "3",
                                          "--port", Port, "--conns", "3", "--rate", Rate,
                                          "--duration", "0.2"]),
                     [rate_arg(get(args, P)) || P <- get(placement, J)]
             end,
    ?assert(abs(lists:sum(Shares("0.01")) - 0.01) < 1.0e-12, Shares("0.01")),
    ?assertEqual([], [R || R <- Shares("0.0006"), R == 0]).

%% A lock-step run's progress line counts acks (it said "pongs", the ping
%% scenario's word, and "timeouts", which only pings have), and its
%% summary says "1 connection, 1 engine ... (1 thread)", not
%% "1 connections, 1 engines".
progress_and_summary_say_acks_and_singulars(Config) ->
    Port = start_ref(Config, "ack"),
    {Code, Out} = sluice(Config, ["load", "--scenario", "lockstep", "--engines", "1",
                                  "--port", Port, "--conns", "1", "--duration", "1.5",
                                  "--progress"]),
    ct:log("~s", [Out]),
    ?assertEqual(0, Code),
    ?assertMatch({match, _}, re:run(Out, "^\\[ *[0-9.]+s\\] up 1/1 .* acks [0-9]+/s  \\(",
                                    [multiline])),
    ?assertEqual(nomatch, re:run(Out, "pongs|timeouts")),
    ?assertMatch({match, _}, re:run(Out, "^sluice load lockstep: 1 connection, 1 engine on 1 "
                                         "node \\(1 thread\\), ", [multiline])).

rate_arg([<<"--rate">>, R | _]) -> binary_to_float(R);
rate_arg([_ | T]) -> rate_arg(T).

load_ok(Config, Args) ->
    {Code, Out} = sluice(Config, ["load" | Args] ++ ["--json", json_path(Config)]),
    ct:log("~s", [Out]),
    ?assertEqual(0, Code),
    read_json(Config).

json_path(Config) -> filename:join(?config(priv_dir, Config), "load.json").

read_json(Config) ->
    {ok, Bin} = file:read_file(json_path(Config)),
    {ok, J} = sluice_json:decode(Bin),
    J.

get(K, M) -> maps:get(atom_to_binary(K), M).

buckets(H) -> [{Lo, N} || [Lo, N] <- get(buckets, H)].

sum_buckets(Lists) ->
    lists:sort(maps:to_list(lists:foldl(fun({Lo, N}, A) -> maps:update_with(Lo, fun(X) -> X + N end, N, A) end,
                                        #{}, lists:append(Lists)))).

%% The hist.c rule: midpoint of the bucket holding the ceil(q% n)-th value,
%% each bucket's width from the histogram's own sub_bucket_bits.
rank_value(H, Q) ->
    Buckets = buckets(H),
    N = lists:sum([C || {_, C} <- Buckets]),
    walk(Buckets, max(1, ceil(Q / 100 * N)), 0, get(sub_bucket_bits, H)).

walk([{Lo, C} | Rest], Rank, Seen, Bits) ->
    case Seen + C >= Rank of
        true -> Lo + (width(Lo, Bits) - 1) div 2;
        false -> walk(Rest, Rank, Seen + C, Bits)
    end.

width(Lo, Bits) when Lo < 1 bsl Bits -> 1;
width(Lo, Bits) -> 1 bsl (length(integer_to_list(Lo, 2)) - 1 - Bits).

sluice(Config, Args) ->
    P = open_port({spawn_executable, filename:join(?config(root, Config), "bin/sluice")},
                  [{args, Args}, exit_status, stderr_to_stdout, binary, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    collect(P, []).

%% stderr alone (stdout dropped)
sluice_stderr(Config, Args) ->
    Cmd = filename:join(?config(root, Config), "bin/sluice"),
    P = open_port({spawn_executable, "/bin/sh"},
                  [{args, ["-c", "\"$0\" \"$@\" 2>&1 >/dev/null", Cmd | Args]},
                   exit_status, binary, hide]),
    {Code, Out} = collect(P, []),
    {Code, binary_to_list(Out)}.

collect(P, Acc) ->
    receive
        {P, {data, D}} -> collect(P, [D | Acc]);
        {P, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after 40000 -> ct:fail(sluice_timeout)
    end.

wait_line(P, Needle, T) ->
    receive
        {P, {data, {_, L}}} ->
            case binary:match(L, Needle) of
                nomatch -> wait_line(P, Needle, T);
                _ -> ok
            end;
        {P, {exit_status, S}} -> ct:fail({exited, S})
    after T -> ct:fail({no_line, Needle})
    end.

wait_exit(P, T) ->
    receive
        {P, {data, _}} -> wait_exit(P, T);
        {P, {exit_status, S}} -> S
    after T -> ct:fail(no_exit)
    end.

start_ref(Config) ->
    start_ref(Config, "ping").

start_ref(Config, Protocol) ->
    P = open_port({spawn_executable, filename:join(?config(bin_dir, Config), "sluice-ref")},
                  [{args, ["--ip", "127.0.0.1", "--port", "0", "--protocol", Protocol, "--threads", "1"]},
                   exit_status, binary, {line, 256}, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    receive
        {P, {data, {eol, <<"listening on ", Addr/binary>>}}} ->
            [_, PortBin] = binary:split(Addr, <<":">>),
            binary_to_list(PortBin);
        {P, {exit_status, S}} -> ct:fail({ref_exited, S})
    after 5000 -> ct:fail(ref_not_listening)
    end.

%% A Prometheus endpoint that answers its first scrape with a baseline and
%% every later one with 2,000 connections that cost 3000 bytes of BEAM
%% memory and 8192 bytes of resident memory each, over two nodes.
start_metrics_stub() ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}, {ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(L),
    Owner = self(),
    Pid = spawn(fun() -> metrics_loop(L, 0, Owner) end),
    ok = gen_tcp:controlling_process(L, Pid),
    "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/metrics".

metrics_loop(L, N, Owner) ->
    case gen_tcp:accept(L, 30000) of
        {ok, S} ->
            _ = gen_tcp:recv(S, 0, 2000),
            {Conns, Beam, Rss} = case N of
                                     0 -> {0, 50000000, 80000000};
                                     _ -> {2000, 50000000 + 2000 * 3000, 80000000 + 2000 * 8192}
                                 end,
            Half = fun(V) -> integer_to_list(V div 2) end,
            Series = fun(Name, V) ->
                             ["# TYPE ", Name, " gauge\n",
                              Name, "{node=\"a@h\"} ", Half(V), "\n",
                              Name, "{node=\"b@h\"} ", Half(V), "\n",
                              Name, "{node=\"all\"} ", integer_to_list(V), "\n"]
                     end,
            Body = iolist_to_binary([Series("sluice_connections", Conns),
                                     Series("sluice_beam_memory_bytes", Beam),
                                     Series("sluice_resident_memory_bytes", Rss),
                                     "sluice_accepted_total{node=\"all\"} 7\n"]),
            ok = gen_tcp:send(S, ["HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n"
                                  "content-length: ", integer_to_list(byte_size(Body)),
                                  "\r\nconnection: close\r\n\r\n", Body]),
            gen_tcp:close(S),
            metrics_loop(L, N + 1, Owner);
        {error, _} -> ok
    end.
