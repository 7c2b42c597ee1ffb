%% `bin/sluice serve' as a user runs it: one "listening on IP:PORT" line,
%% a working ack server, a clean drain and exit 0 on SIGTERM and on SIGINT,
%% exit 2 with a one-line message on bad usage, and --help that documents
%% every option.
%%
%% The script runs the VM from _build/default (what `make build' compiles),
%% so build first. Every OS process a case starts is killed in
%% end_per_testcase if it is still there (the script's launcher and the VM
%% under it).
-module(sluice_cli_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1, takes_the_signal/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([serve_prints_one_listening_line_and_acks/1,
         sigterm_drains_and_exits_0/1,
         sigint_drains_and_exits_0/1,
         an_early_sigterm_still_drains/1,
         the_launcher_holds_a_signal_until_the_vm_takes_it/1,
         an_early_sigterm_to_a_relaunched_serve_still_drains/1,
         a_launcher_killed_early_still_stops_serve/1,
         a_held_sigterm_waits_for_a_slow_command/1,
         unknown_option_exits_2_with_one_line/1,
         malformed_value_exits_2_with_one_line/1,
         port_in_use_exits_1_with_one_line/1,
         metrics_port_in_use_exits_1_with_one_line/1,
         hosts_without_nodes_exits_2_with_one_line/1,
         an_option_that_does_not_apply_exits_2_with_one_line/1,
         a_closed_stdout_exits_141/1,
         help_mentions_every_option/1,
         every_help_has_exit_codes_units_and_one_default/1,
         load_help_lists_coordinator_and_engine_options/1,
         load_bad_option_exits_2_with_one_line/1,
         load_unwritable_json_exits_2_before_the_run/1,
         socket_backend_and_poll_sets_reach_the_vm/1,
         more_poll_sets_than_threads_exits_2_with_one_line/1,
         idle_memory_past_the_descriptor_limit_exits_1_with_one_line/1,
         load_over_ipv6/1,
         serve_on_a_unix_socket/1,
         unix_with_a_tcp_address_or_nodes_exits_2_with_one_line/1,
         unix_path_in_a_missing_directory_exits_1_with_one_line/1]).

-define(LOOPBACK, "127.0.0.1").
%% Every option of `serve'; `serve --help' must document each (help_mentions_every_option).
-define(SERVE_OPTIONS, ["ip", "port", "unix", "protocol", "ack", "max-frame", "active", "acceptors",
                        "listen-sockets", "max-connections", "idle-timeout", "backlog",
                        "buffer", "drain-timeout", "backend", "io-poll-threads",
                        "io-poll-sets", "scheduler-bind", "help"]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [serve_prints_one_listening_line_and_acks, sigterm_drains_and_exits_0,
     sigint_drains_and_exits_0, an_early_sigterm_still_drains,
     the_launcher_holds_a_signal_until_the_vm_takes_it,
     an_early_sigterm_to_a_relaunched_serve_still_drains,
     a_launcher_killed_early_still_stops_serve, a_held_sigterm_waits_for_a_slow_command,
     unknown_option_exits_2_with_one_line,
     malformed_value_exits_2_with_one_line, port_in_use_exits_1_with_one_line,
     metrics_port_in_use_exits_1_with_one_line, hosts_without_nodes_exits_2_with_one_line,
     an_option_that_does_not_apply_exits_2_with_one_line, a_closed_stdout_exits_141,
     help_mentions_every_option, every_help_has_exit_codes_units_and_one_default,
     load_help_lists_coordinator_and_engine_options,
     load_bad_option_exits_2_with_one_line, load_unwritable_json_exits_2_before_the_run,
     socket_backend_and_poll_sets_reach_the_vm,
     more_poll_sets_than_threads_exits_2_with_one_line,
     idle_memory_past_the_descriptor_limit_exits_1_with_one_line, load_over_ipv6,
     serve_on_a_unix_socket, unix_with_a_tcp_address_or_nodes_exits_2_with_one_line,
     unix_path_in_a_missing_directory_exits_1_with_one_line].

init_per_suite(Config) ->
    sluice_load_test_lib:built_bin(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) ->
    sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------
%%% Running bin/sluice
%%% ------------------------------------------------------------------

run(Config, Args) ->
    sluice_load_test_lib:sluice_exit(Config, Args).

serve(Config, Extra) ->
    {Port, OsPid} = sluice_load_test_lib:sluice(Config, ["serve", "--ip", ?LOOPBACK, "--port", "0"
                                                         | Extra]),
    {[Ip, TcpPort], Before} = sluice_load_test_lib:wait_line(Port, "^listening on ([0-9.]+):([0-9]+)$", 15000),
    {Port, OsPid, Ip, list_to_integer(TcpPort), Before}.

signal(Sig, OsPid) ->
    sluice_load_test_lib:signal(Sig, OsPid).

listening_lines(Lines) ->
    [L || L <- Lines, binary:match(L, <<"listening on">>) =/= nomatch].

frame(Id) ->
    <<Id:64, 3:32, "abc">>.

connect(TcpPort) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, TcpPort, [binary, {active, false}], 5000),
    S.

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% `serve --port 0' prints exactly one line `listening on IP:PORT' with the
%% real port; a client there gets one ack per frame (the default `--ack
%% each'), in order; SIGTERM then ends it with status 0 and no second
%% listening line.
serve_prints_one_listening_line_and_acks(Config) ->
    {Port, OsPid, Ip, TcpPort, Before} = serve(Config, []),
    ?assertEqual(?LOOPBACK, Ip),
    ?assert(TcpPort > 0),
    S = connect(TcpPort),
    ok = gen_tcp:send(S, [frame(Id) || Id <- lists:seq(1, 100)]),
    Expected = << <<Id:64>> || Id <- lists:seq(1, 100) >>,
    ?assertEqual({ok, Expected}, gen_tcp:recv(S, 800, 5000)),
    ok = gen_tcp:close(S),
    signal("TERM", OsPid),
    {Status, After} = sluice_load_test_lib:wait_exit(Port, 10000),
    ct:log("output:~n~s", [[[L, $\n] || L <- Before ++ After]]),
    ?assertEqual(0, Status),
    ?assertEqual(1, length(listening_lines(Before ++ After))).

%% SIGTERM to the process the user started (the launcher) drains: an open
%% client connection gets end of stream (FIN), and once it closes the
%% server exits 0 well within 10 s, saying it drained.
sigterm_drains_and_exits_0(Config) ->
    signal_drains(Config, "TERM").

%% SIGINT (Ctrl-C) does the same: the launcher forwards it as SIGTERM.
sigint_drains_and_exits_0(Config) ->
    signal_drains(Config, "INT").

signal_drains(Config, Sig) ->
    {Port, OsPid, _Ip, TcpPort, _} = serve(Config, ["--drain-timeout", "8000"]),
    S = connect(TcpPort),
    ok = gen_tcp:send(S, frame(7)),
    ?assertEqual({ok, <<7:64>>}, gen_tcp:recv(S, 8, 5000)),
    T0 = erlang:monotonic_time(millisecond),
    signal(Sig, OsPid),
    ?assertEqual({error, closed}, gen_tcp:recv(S, 0, 5000)),
    ok = gen_tcp:close(S),
    {Status, After} = sluice_load_test_lib:wait_exit(Port, 10000),
    Ms = erlang:monotonic_time(millisecond) - T0,
    ct:log("SIG~s: status ~p after ~b ms; output:~n~s", [Sig, Status, Ms, [[L, $\n] || L <- After]]),
    ?assertEqual(0, Status),
    %% Not the 8 s drain deadline: it ended when the client left.
    ?assert(Ms < 6000, Ms),
    ?assert(lists:any(fun(L) -> binary:match(L, <<"drained">>) =/= nomatch end, After)).

%% A SIGTERM in the first moments of `serve', before the VM's signal
%% server runs (it was dropped: the server served on) or while OTP's own
%% handler was still in place (it stopped the VM, no drain), is held by
%% the launcher and the CLI until serve's handler takes it: serve starts,
%% drains and exits 0, whenever it came. Offsets from the moment the
%% script has exec'd the launcher (a signal before that ends the script,
%% status 143, which is not this case): they were from the start, and
%% the exec, a millisecond or two later on an idle host, came after the
%% 20 ms one on a loaded host (143).
an_early_sigterm_still_drains(Config) ->
    Runs = [early_sigterm(Config, Ms) || Ms <- [20, 50, 80, 120, 170, 250]],
    ct:log("~p", [Runs]),
    ?assertEqual([], [R || R = {_, Status, Drained, _} <- Runs,
                           not (Status =:= 0 andalso Drained)]).

early_sigterm(Config, Ms) ->
    {Port, OsPid} = sluice_load_test_lib:sluice(Config, ["serve", "--ip", ?LOOPBACK, "--port", "0",
                                                         "--drain-timeout", "2000"]),
    ok = wait_launcher(OsPid, erlang:monotonic_time(millisecond) + 5000),
    timer:sleep(Ms),
    signal("TERM", OsPid),
    %% (a lost signal: still serving after 5 s, which 6 runs fit in the
    %% suite's timetrap; the case's reaper kills it)
    {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 5000),
    {Ms, Status, lists:any(fun(L) -> binary:match(L, <<"drained">>) =/= nomatch end, Lines),
     Lines}.

%% The launcher alone (bin/sluice's sluice-run) with a child that says it
%% is ready 400 ms after its start, by writing to SLUICE_READY_FD or by
%% closing it: a SIGTERM at 50 ms reaches the child only then (the child
%% prints its line, then dies of the signal: 143), not at once (which
%% killed it before its line).
the_launcher_holds_a_signal_until_the_vm_takes_it(Config) ->
    {ok, Root} = sluice_load_test_lib:repo_root(),
    Run = filename:join(Root, "apps/sluice_load/priv/sluice-run"),
    Ready = [{"writes", "echo r >&$SLUICE_READY_FD"},
             {"closes", "eval \"exec $SLUICE_READY_FD>&-\""}],
    Runs = [begin
                Script = "sleep 0.4; echo ready; " ++ Say ++ "; exec sleep 20",
                {Port, OsPid} = sluice_load_test_lib:run_lines(Config, Run,
                                                               ["/bin/sh", "-c", Script]),
                T0 = erlang:monotonic_time(millisecond),
                ok = wait_launcher(OsPid, T0 + 5000),
                timer:sleep(50),
                signal("TERM", OsPid),
                {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 10000),
                {How, Status, Lines, erlang:monotonic_time(millisecond) - T0}
            end || {How, Say} <- Ready],
    ct:log("~p", [Runs]),
    ?assertEqual([], [R || R = {_, Status, Lines, Ms} <- Runs,
                           not (Status =:= 143 andalso Lines =:= [<<"ready">>]
                                andalso Ms >= 400 andalso Ms < 5000)]).

%% `serve --io-poll-threads 2' serves in a second VM started with the
%% flag (sluice_vm_flags:relaunch/2), and passes a SIGTERM on to it: one
%% that came in the first VM's first moments is passed on as soon as that
%% VM can, i.e. while the second VM is starting. That VM alone dropped it
%% (served on: the case timed out) or died of it (143, no drain); under
%% sluice-run of its own it is held until its serve can drain. The signal
%% goes when the second VM's process appears, and 30 and 150 ms after.
an_early_sigterm_to_a_relaunched_serve_still_drains(Config) ->
    Runs = [relaunched_sigterm(Config, Ms) || Ms <- [0, 30, 150]],
    ct:log("~p", [Runs]),
    ?assertEqual([], [R || R = {_, Status, Drained, _} <- Runs,
                           not (Status =:= 0 andalso Drained)]).

relaunched_sigterm(Config, Ms) ->
    {Port, OsPid} = sluice_load_test_lib:sluice(Config, ["serve", "--ip", ?LOOPBACK, "--port", "0",
                                                         "--drain-timeout", "2000",
                                                         "--io-poll-threads", "2"]),
    ok = wait_relaunched(OsPid, erlang:monotonic_time(millisecond) + 15000),
    timer:sleep(Ms),
    signal("TERM", OsPid),
    {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 6000),
    {Ms, Status, lists:any(fun(L) -> binary:match(L, <<"drained">>) =/= nomatch end, Lines),
     Lines}.

%% Until a process under OsPid has the relaunched VM's environment (the
%% first one does from its exec on: sluice-run, or erl's script).
wait_relaunched(OsPid, Deadline) ->
    Relaunched = [P || P <- sluice_procfs:process_tree(OsPid),
                       {ok, Env} <- [file:read_file("/proc/" ++ integer_to_list(P) ++ "/environ")],
                       binary:match(Env, <<"SLUICE_VM_RELAUNCHED=1">>) =/= nomatch],
    case Relaunched of
        [_ | _] -> ok;
        [] ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error(no_relaunched_vm);
                false -> timer:sleep(2), wait_relaunched(OsPid, Deadline)
            end
    end.

%% `kill -9' of the launcher in the VM's first moments: the VM's
%% parent-death SIGTERM came before the VM could take signals and was
%% dropped (serve served on with no parent, forever). The VM now sees
%% that its launcher is gone when it starts taking signals and drains as
%% on that SIGTERM. Killed at 20, 50, 100 and 150 ms after the fork; the
%% VM must be gone 10 s after, having drained if it served (one killed
%% before OTP takes SIGTERM dies of it, having served nothing).
a_launcher_killed_early_still_stops_serve(Config) ->
    Runs = [launcher_killed(Config, Ms) || Ms <- [20, 50, 100, 150]],
    ct:log("~p", [Runs]),
    ?assertEqual([], [R || R = {_, Left, Served, Drained, _} <- Runs,
                           not (Left =:= [] andalso Drained =:= Served)]).

launcher_killed(Config, Ms) ->
    Out = filename:join(?config(priv_dir, Config), "killed-" ++ integer_to_list(Ms) ++ ".out"),
    {ok, Root} = sluice_load_test_lib:repo_root(),
    %% (the VM's output to a file: the launcher's port goes with it)
    Cmd = "exec " ++ filename:join(Root, "bin/sluice") ++ " serve --ip " ++ ?LOOPBACK
        ++ " --port 0 --drain-timeout 2000 >" ++ Out ++ " 2>&1",
    {Port, OsPid} = sluice_load_test_lib:run_lines(Config, "/bin/sh", ["-c", Cmd]),
    Vm = wait_child(OsPid, erlang:monotonic_time(millisecond) + 5000),
    %% (one left serving is no longer under OsPid for the reaper)
    sluice_load_test_lib:reap(Config, Vm),
    timer:sleep(Ms),
    signal("KILL", OsPid),
    _ = sluice_load_test_lib:wait_exit(Port, 5000),
    Left = wait_gone(Vm, erlang:monotonic_time(millisecond) + 10000),
    {ok, Text} = file:read_file(Out),
    {Ms, Left, binary:match(Text, <<"listening on">>) =/= nomatch,
     binary:match(Text, <<"drained">>) =/= nomatch, Text}.

%% A SIGTERM that the CLI holds (sluice_signal:hold/0) for a command that
%% has not taken signals yet waits for it as long as the launcher would
%% (10 s): it waited 2 s, and then stopped the VM as OTP does. A `serve'
%% whose start took that long on a loaded host (a SIGTERM in its first
%% moments, an_early_sigterm_still_drains) exited 0 with nothing said, no
%% listener and no drain. Here, in a node of its own: the hold, a
%% SIGTERM, a command that takes 4 s to start, which still gets it.
a_held_sigterm_waits_for_a_slow_command(_Config) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [sluice_signal, ?MODULE]]),
    {ok, Peer, _} = peer:start_link(#{connection => standard_io,
                                      args => lists:append([["-pa", P] || P <- Paths])}),
    try
        ok = peer:call(Peer, sluice_signal, hold, []),
        signal("TERM", list_to_integer(peer:call(Peer, os, getpid, []))),
        timer:sleep(4000),
        ?assertEqual({sluice_signal, sigterm},
                     peer:call(Peer, ?MODULE, takes_the_signal, [5000], 10000))
    after
        catch peer:stop(Peer)
    end.

%% @private In the node of a_held_sigterm_waits_for_a_slow_command/1: the
%% command's handler, installed now, and what it gets within `Ms'.
-spec takes_the_signal(timeout()) -> term().
takes_the_signal(Ms) ->
    ok = sluice_signal:install(self()),
    receive {sluice_signal, _} = Got -> Got after Ms -> nothing end.

%% Once OsPid is the launcher (bin/sluice execs it) and holds SIGTERM:
%% blocked or caught (/proc's SigBlk, SigCgt), as sluice-run does first
%% thing; until then the signal would end it (143).
wait_launcher(OsPid, Deadline) ->
    Proc = "/proc/" ++ integer_to_list(OsPid),
    Holds = case {file:read_file(Proc ++ "/comm"), file:read_file(Proc ++ "/status")} of
                {{ok, <<"sluice-run\n">>}, {ok, Status}} ->
                    lists:any(fun(Key) -> sigterm_in(Key, Status) end, ["SigBlk", "SigCgt"]);
                _ ->
                    false
            end,
    case Holds of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error(no_launcher);
                false -> timer:sleep(1), wait_launcher(OsPid, Deadline)
            end
    end.

%% SIGTERM (15: bit 14) in the signal mask `Key' of a /proc status.
sigterm_in(Key, Status) ->
    case re:run(Status, "^" ++ Key ++ ":\\s*([0-9a-f]+)$", [multiline, {capture, [1], list}]) of
        {match, [Hex]} -> list_to_integer(Hex, 16) band (1 bsl 14) =/= 0;
        nomatch -> false
    end.

%% The launcher's child, once the script is the launcher (exec) and it
%% has forked (the VM, by exec).
wait_child(OsPid, Deadline) ->
    Comm = file:read_file("/proc/" ++ integer_to_list(OsPid) ++ "/comm"),
    case {Comm, sluice_procfs:process_tree(OsPid)} of
        {{ok, <<"sluice-run\n">>}, [OsPid, Child | _]} -> Child;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error(no_child);
                false -> timer:sleep(1), wait_child(OsPid, Deadline)
            end
    end.

wait_gone(Pid, Deadline) ->
    case filelib:is_dir("/proc/" ++ integer_to_list(Pid)) of
        false -> [];
        true ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> [Pid];
                false -> timer:sleep(20), wait_gone(Pid, Deadline)
            end
    end.

%% An unknown option: status 2 and exactly one line, naming the option.
unknown_option_exits_2_with_one_line(Config) ->
    {Status, Lines} = run(Config, ["serve", "--bogus-option", "1"]),
    ct:log("~p ~p", [Status, Lines]),
    ?assertEqual(2, Status),
    ?assertMatch([_], Lines),
    [Line] = Lines,
    ?assertNotEqual(nomatch, binary:match(Line, <<"--bogus-option">>)).

%% A malformed value: status 2 and one line naming the option, the value
%% and what was expected; for several options and kinds of value. Values
%% past the library's own bounds too (a time over 2^32 - 1 ms, a buffer
%% over 64 MiB, a limit that does not fit its atomic), here and with
%% --nodes: they were status 1 and "cannot listen on IP:PORT", the words
%% and the status of a port in use.
malformed_value_exits_2_with_one_line(Config) ->
    Cases = [{["--idle-timeout", "5000000000"], <<"--idle-timeout">>, <<"5000000000">>},
             {["--nodes", "1", "--park-after", "4294967296"], <<"--park-after">>,
              <<"4294967296">>},
             {["--buffer", "100000000"], <<"--buffer">>, <<"100000000">>},
             {["--max-connections", "9223372036854775807"], <<"--max-connections">>,
              <<"9223372036854775807">>},
             {["--port", "abc"], <<"--port">>, <<"abc">>},
             {["--port", "70000"], <<"--port">>, <<"70000">>},
             {["--active", "sometimes"], <<"--active">>, <<"sometimes">>},
             {["--max-connections=-1"], <<"--max-connections">>, <<"-1">>},
             {["--protocol", "http"], <<"--protocol">>, <<"http">>},
             {["--ip", "300.1.2.3"], <<"--ip">>, <<"300.1.2.3">>},
             {["--idle-timeout"], <<"--idle-timeout">>, <<"value">>}],
    Bad = [{Args, Status, Lines}
           || {Args, Opt, Val} <- Cases,
              {Status, Lines} <- [run(Config, ["serve" | Args])],
              not (Status =:= 2 andalso length(Lines) =:= 1
                   andalso binary:match(hd(Lines), Opt) =/= nomatch
                   andalso binary:match(hd(Lines), Val) =/= nomatch)],
    ?assertEqual([], Bad).

%% A port that is taken: status 1 and one line saying so (not a crash
%% report).
port_in_use_exits_1_with_one_line(Config) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]),
    {ok, Taken} = inet:port(L),
    {Status, Lines} = run(Config, ["serve", "--ip", ?LOOPBACK, "--port", integer_to_list(Taken)]),
    ok = gen_tcp:close(L),
    ct:log("~p ~p", [Status, Lines]),
    ?assertEqual(1, Status),
    ?assertMatch([_], Lines),
    ?assertNotEqual(nomatch, binary:match(hd(Lines), <<"address in use">>)).

%% A --metrics-port that is taken: status 1 and one line in words, as for
%% the listen port (not inets' supervisor reports and a nested start
%% error), in this VM and with --nodes.
metrics_port_in_use_exits_1_with_one_line(Config) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]),
    {ok, Taken} = inet:port(L),
    Results = [run(Config, ["serve", "--ip", ?LOOPBACK, "--port", "0",
                            "--metrics-port", integer_to_list(Taken) | Extra])
               || Extra <- [[], ["--nodes", "1"]]],
    ok = gen_tcp:close(L),
    ct:log("~p", [Results]),
    Expected = iolist_to_binary(io_lib:format("sluice: cannot serve metrics on port ~b: "
                                              "address in use", [Taken])),
    [?assertEqual({1, [Expected]}, R) || R <- Results].

%% --hosts without --nodes: exit 2 and one line naming both (it was
%% ignored, and the server ran in this VM as if it had not been given).
hosts_without_nodes_exits_2_with_one_line(Config) ->
    {Status, Lines} = run(Config, ["serve", "--ip", ?LOOPBACK, "--port", "0",
                                   "--hosts", "hostA,hostB"]),
    ct:log("~p ~p", [Status, Lines]),
    ?assertEqual(2, Status),
    ?assertMatch([_], Lines),
    [?assertNotEqual(nomatch, binary:match(hd(Lines), F)) || F <- [<<"--hosts">>, <<"--nodes">>]].

%% An option that applies only with another, given without it: exit 2 and
%% one line naming it, before anything listens, as `load' refuses its
%% --ack outside lockstep and pipeline. The server ran without it, in
%% silence (an --ack for the ping protocol, a --proxy-timeout with no
%% PROXY header expected). Each is taken where it applies.
an_option_that_does_not_apply_exits_2_with_one_line(Config) ->
    Cases = [{["--protocol", "ping", "--ack", "last"], <<"--ack">>},
             {["--protocol", "echo", "--max-frame", "10"], <<"--max-frame">>},
             {["--protocol", "ping", "--frame-timeout", "10"], <<"--frame-timeout">>},
             {["--proxy-timeout", "100"], <<"--proxy-timeout">>},
             {["--handshake-timeout", "100"], <<"--handshake-timeout">>},
             {["--backend", "socket", "--park-after", "100"], <<"--park-after">>},
             {["--active", "false", "--park-after", "100"], <<"--park-after">>}],
    Bad = [{Args, Status, Lines}
           || {Args, Opt} <- Cases,
              {Status, Lines} <- [run(Config, ["serve", "--ip", ?LOOPBACK, "--port", "0" | Args])],
              not (Status =:= 2 andalso length(Lines) =:= 1
                   andalso binary:match(hd(Lines), Opt) =/= nomatch)],
    ?assertEqual([], Bad),
    {Port, OsPid, _, _, _} = serve(Config, ["--ack", "last", "--max-frame", "10",
                                            "--frame-timeout", "100", "--park-after", "100",
                                            "--proxy-protocol", "--proxy-timeout", "100"]),
    signal("TERM", OsPid),
    ?assertMatch({0, _}, sluice_load_test_lib:wait_exit(Port, 10000)).

%% A standard output closed before the command writes (`| true') ends it
%% with 141, as docs/cli.md says and `bench --list | true' did: a --help
%% printed in one write, and load's summary (the engine's, which ignores
%% SIGPIPE for its sockets, and the coordinator's), exited 0. With nothing
%% written (a usage error) the code is the command's own. The C programs
%% ignore SIGPIPE for their sockets and see it themselves, at once: the
%% reference server at its "listening on" line (it served on, and the
%% command never ended), the engine while it runs (a 60 s run went on to
%% its summary's write: the status here would be timeout's 124).
a_closed_stdout_exits_141(Config) ->
    {Port, OsPid, _, TcpPort, _} = serve(Config, []),
    Load = ["load", "--scenario", "lockstep", "--port", integer_to_list(TcpPort),
            "--conns", "1", "--duration", "0.3"],
    LongLoad = ["load", "--scenario", "lockstep", "--port", integer_to_list(TcpPort),
                "--conns", "1", "--duration", "60"],
    Cases = [{["load", "--help"], 141}, {["serve", "--help"], 141},
             {["ref-server", "--help"], 141}, {Load, 141}, {Load ++ ["--engines", "1"], 141},
             {Load ++ ["--quiet"], 0}, {["load", "--bogus"], 2},
             {["ref-server", "--ip", "127.0.0.1", "--port", "0"], 141}, {LongLoad, 141}],
    Got = [{Args, closed_stdout_status(Config, Args)} || {Args, _} <- Cases],
    signal("TERM", OsPid),
    _ = sluice_load_test_lib:wait_exit(Port, 10000),
    ?assertEqual([{Args, Code} || {Args, Code} <- Cases], Got).

%% The status of bin/sluice Args with its stdout a pipe already closed;
%% 124 (timeout(1)'s) for a command still running after 20 s, which is
%% then stopped (SIGTERM to it and what it started).
closed_stdout_status(Config, Args) ->
    File = filename:join(?config(priv_dir, Config), "status"),
    P = open_port({spawn_executable, "/bin/sh"},
                  [{args, ["-c", "{ timeout 20 \"$0\" \"$@\" 2>/dev/null; echo $? > '"
                           ++ File ++ "'; } | true", proplists:get_value(bin, Config) | Args]},
                   exit_status, hide]),
    receive {P, {exit_status, _}} -> ok after 30000 -> ct:fail({no_exit, Args}) end,
    {ok, Status} = file:read_file(File),
    binary_to_integer(string:trim(Status)).

%% `idle-memory' with more --conns than the descriptor limit leaves room
%% for (a shell's default `ulimit -n' is 1024, the default --conns 1000):
%% status 1 at once and one line naming the limit. It waited 30 s for
%% connections that emfile kept out, then crashed stopping the engine
%% (os:cmd/1 needs descriptors too), an "internal error" and a trace.
idle_memory_past_the_descriptor_limit_exits_1_with_one_line(Config) ->
    {Port, _} = sluice_load_test_lib:run_lines(
                  Config, "/bin/sh",
                  ["-c", "ulimit -n 256 && exec \"$0\" idle-memory --conns 1000 --backend inet",
                   proplists:get_value(bin, Config)]),
    {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 15000),
    ct:log("~p ~p", [Status, Lines]),
    ?assertEqual(1, Status),
    ?assertMatch([_], Lines),
    [?assertNotEqual(nomatch, binary:match(hd(Lines), F))
     || F <- [<<"--conns 1000">>, <<"limit of 256">>, <<"ulimit -n">>]].

%% `serve --help' exits 0 and documents every option, each with its
%% default; the list checked is both the documented one and the parser's
%% own table (so an option added to one and not the other is caught).
%% `bin/sluice --help' exits 0 and lists the serve command.
help_mentions_every_option(Config) ->
    {Status, Lines} = run(Config, ["serve", "--help"]),
    Text = iolist_to_binary([[L, $\n] || L <- Lines]),
    ct:log("~s", [Text]),
    ?assertEqual(0, Status),
    FromSpecs = [Flag || #{flag := Flag} <- sluice_cmd_serve:specs()],
    Missing = [F || F <- lists:usort(?SERVE_OPTIONS ++ FromSpecs),
                    re:run(Text, "^  --" ++ F ++ "[ =]", [multiline]) =:= nomatch],
    ?assertEqual([], Missing),
    NoDefault = [F || F <- FromSpecs,
                      re:run(Text, "^  --" ++ F ++ " .*\\(default: [^)]+\\)$", [multiline])
                          =:= nomatch],
    ?assertEqual([], NoDefault),
    {TopStatus, TopLines} = run(Config, ["--help"]),
    ?assertEqual(0, TopStatus),
    ?assert(lists:any(fun(L) -> binary:match(L, <<"serve">>) =/= nomatch end, TopLines)).

%% Every command's --help ends with its exit codes (sluice_cli_exit's), says
%% each default once, and names the unit of every time option (MS, SECONDS
%% or MINUTES).
every_help_has_exit_codes_units_and_one_default(Config) ->
    [begin
         {Status, Lines} = run(Config, [Cmd, "--help"]),
         Text = iolist_to_binary([[L, $\n] || L <- Lines]),
         ct:log("~s --help:~n~s", [Cmd, Text]),
         ?assertEqual(0, Status),
         [_, Codes] = binary:split(Text, <<"\nexit codes:\n">>),
         ?assertEqual([Code || {Code, _} <- sluice_cli_exit:codes(Cmd)],
                      [binary_to_integer(C) || [C] <- matches(Codes, "^  ([0-9]+) ")]),
         Options = [L || L <- Lines, re:run(L, "^  --") =/= nomatch,
                           re:run(L, "^  --help ") =:= nomatch],
         ?assertEqual([], [L || L <- Options, length(binary:matches(L, <<"(default:">>)) =/= 1]),
         Timed = [L || L <- Options,
                       re:run(L, "^  --[a-z-]*(timeout|after|duration|warmup|interval|minutes|"
                                 "seconds) ") =/= nomatch],
         ?assertEqual([], [L || L <- Timed,
                                re:run(L, "^  --[a-z-]+ (MS|SECONDS|MINUTES) ") =:= nomatch])
     end || Cmd <- sluice_cli_exit:commands()].

matches(Text, Re) ->
    case re:run(Text, Re, [global, multiline, {capture, all_but_first, binary}]) of
        {match, Ms} -> Ms;
        nomatch -> []
    end.

%% `load --help' exits 0 and lists every option the command takes in two
%% sections: the coordinator's (--engines, --nodes, ...) and then the C
%% engine's (--duration, ...), whatever else is on the line (with
%% `--engines' it used to be the coordinator's alone, without it the
%% engine's alone). Every flag of the coordinator's table, and of the
%% engine's own (`sluice-load --options-json'), is listed once.
load_help_lists_coordinator_and_engine_options(Config) ->
    Texts = [begin
                 {Status, Lines} = run(Config, ["load" | Args]),
                 ?assertEqual(0, Status),
                 iolist_to_binary([[L, $\n] || L <- Lines])
             end || Args <- [["--help"], ["-h"], ["--engines", "2", "--help"],
                             ["--scenario", "lockstep", "--help"], ["--check", "--help"]]],
    [Text | _] = Texts,
    ct:log("~s", [Text]),
    ?assertEqual([Text], lists:usort(Texts)),
    [_, AfterCoord] = binary:split(Text, <<"\ncoordinator options">>),
    [Coord, Engine] = binary:split(AfterCoord, <<"\nengine options">>),
    Listed = fun(Section, Flag) -> re:run(Section, "^  --" ++ Flag ++ " ", [multiline]) =/= nomatch end,
    [?assert(Listed(Coord, F), F) || F <- ["engines", "nodes", "source-ips", "server-metrics"]],
    [?assert(Listed(Engine, F), F) || F <- ["scenario", "duration", "interval", "timeout", "help"]],
    ?assertNot(Listed(Coord, "duration")),
    {ok, EngineBin} = sluice_build:program("sluice-load"),
    {ok, #{specs := EngineSpecs}} = sluice_cprog:options(EngineBin),
    Flags = [F || #{flag := F} <- sluice_cmd_load:own_specs() ++ EngineSpecs],
    ?assertEqual([], [F || F <- Flags, not Listed(Text, F)]),
    ?assertEqual([], [F || F <- lists:usort(Flags),
                           length(binary:matches(Text, list_to_binary("\n  --" ++ F ++ " "))) =/= 1]).

%% A bad option to `load' exits 2 with one line, whether the C engine
%% (one process) or the coordinator (--engines) reads it.
load_bad_option_exits_2_with_one_line(Config) ->
    [begin
         {Status, Lines} = run(Config, ["load" | Args]),
         ct:log("~p -> ~p ~p", [Args, Status, Lines]),
         ?assertEqual(2, Status),
         ?assertMatch([_], Lines),
         ?assertNotEqual(nomatch, binary:match(hd(Lines), <<"--bogus">>))
     end || Args <- [["--bogus", "1"], ["--engines", "2", "--bogus", "1"]]].

%% A --json path that cannot be written: exit 2 and one line naming it,
%% before anything runs (one engine: the run went ahead, said "No such
%% file" after it and exited with the run's code, 0 for a good run; the
%% coordinator: exit 1 after the run), for one engine and for --engines.
load_unwritable_json_exits_2_before_the_run(Config) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]),
    {ok, Port} = inet:port(L),
    ok = gen_tcp:close(L),
    Json = filename:join([?config(priv_dir, Config), "no such dir", "x.json"]),
    [begin
         {Status, Lines} = run(Config, ["load", "--port", integer_to_list(Port),
                                        "--duration", "1", "--json", Json | Args]),
         ct:log("~p -> ~p ~p", [Args, Status, Lines]),
         ?assertEqual(2, Status),
         ?assertMatch([_], Lines),
         ?assertNotEqual(nomatch, binary:match(hd(Lines), list_to_binary("--json " ++ Json)))
     end || Args <- [[], ["--engines", "2", "--conns", "2"]]].

%% `--backend socket --io-poll-threads 2 --io-poll-sets 2 --scheduler-bind
%% u': the CLI serves in a VM started with the last three as emulator
%% flags, that VM reports them as in effect (sluice_vm_flags reads
%% erlang:system_info/1, so a flag lost on the way shows as "did not reach
%% the VM"), and the socket backend acks every frame in order.
socket_backend_and_poll_sets_reach_the_vm(Config) ->
    {Port, OsPid, _Ip, TcpPort, Before} =
        serve(Config, ["--backend", "socket", "--io-poll-threads", "2", "--io-poll-sets", "2",
                       "--scheduler-bind", "u"]),
    {_, Info} = sluice_load_test_lib:wait_line(Port, "^sluice: backend", 5000),
    ct:log("output:~n~s", [[[L, $\n] || L <- Before ++ Info]]),
    ?assertEqual(<<"sluice: backend socket; 2 poll thread(s), 2 poll set(s), scheduler bind u">>,
                 lists:last(Info)),
    S = connect(TcpPort),
    ok = gen_tcp:send(S, [frame(Id) || Id <- lists:seq(1, 100)]),
    ?assertEqual({ok, << <<Id:64>> || Id <- lists:seq(1, 100) >>}, gen_tcp:recv(S, 800, 5000)),
    ok = gen_tcp:close(S),
    signal("TERM", OsPid),
    ?assertMatch({0, _}, sluice_load_test_lib:wait_exit(Port, 10000)).

%% The VM refuses more poll sets than poll threads with a page of usage
%% text; bin/sluice refuses before it starts one, with one line naming both
%% options.
more_poll_sets_than_threads_exits_2_with_one_line(Config) ->
    {Status, Lines} = run(Config, ["serve", "--io-poll-threads", "1", "--io-poll-sets", "2"]),
    ct:log("~p ~p", [Status, Lines]),
    ?assertEqual(2, Status),
    ?assertMatch([_], Lines),
    [Line] = Lines,
    ?assertNotEqual(nomatch, binary:match(Line, <<"--io-poll-sets 2">>)),
    ?assertNotEqual(nomatch, binary:match(Line, <<"--io-poll-threads">>)).

%% `load --host ::1' against `serve --ip ::1' (skipped without ::1), one
%% engine and several with --server-metrics http://[::1]:P/metrics: the
%% engine said "Address family for hostname not supported", the
%% coordinator "cannot resolve --host ::1", and httpc, left to IPv4, got
%% no figures. --source-ips of the other family, or of both: exit 2 and
%% one line, from the engine and from the coordinator.
load_over_ipv6(Config) ->
    case sluice_load_test_lib:ipv6_loopback() of
        ok -> load_over_ipv6_run(Config);
        Skip -> Skip
    end.

load_over_ipv6_run(Config) ->
    {Port, OsPid} = sluice_load_test_lib:sluice(Config, ["serve", "--ip", "::1", "--port", "0",
                                                         "--metrics-port", "0"]),
    {[TcpPort], Before} = sluice_load_test_lib:wait_line(Port, "^listening on \\[::1\\]:([0-9]+)$",
                                                         15000),
    [Url] = [U || L <- Before, {match, [U]} <- [re:run(L, "metrics at (http://\\S+)",
                                                       [{capture, all_but_first, list}])]],
    Load = ["load", "--host", "::1", "--port", TcpPort],
    {0, _} = run(Config, Load ++ ["--duration", "0.3"]),
    %% a scrape in the hold: a second
    {0, Lines} = run(Config, Load ++ ["--duration", "1", "--engines", "2", "--conns", "2",
                                      "--server-metrics", Url]),
    ct:log("~s", [[[L, $\n] || L <- Lines]]),
    ?assertMatch([_], [L || L <- Lines, binary:match(L, <<"server memory per connection">>) =/= nomatch]),
    [begin
         {Status, Out} = run(Config, Load ++ Extra ++ ["--source-ips", Src]),
         ct:log("~p ~s -> ~p ~p", [Extra, Src, Status, Out]),
         ?assertEqual(2, Status),
         ?assertMatch([_], Out),
         ?assertNotEqual(nomatch, binary:match(hd(Out), list_to_binary(Says)))
     end || Extra <- [[], ["--engines", "2", "--conns", "2"]],
            {Src, Says} <- [{"127.0.0.1", "--host ::1 has no IPv4 address"},
                            {"::1,127.0.0.1", "mixes IPv4 and IPv6"}]],
    signal("TERM", OsPid),
    ?assertMatch({0, _}, sluice_load_test_lib:wait_exit(Port, 10000)).

%% `serve --unix PATH': one line `listening on unix:PATH', the protocol
%% served there, the metrics on loopback (a Unix listener has no IP to
%% serve them on), and the socket file gone after the drain. (Under /tmp:
%% priv_dir paths run past sun_path's 108 bytes.)
serve_on_a_unix_socket(Config) ->
    Path = "/tmp/sluice-cli-" ++ os:getpid() ++ ".sock",
    {Port, OsPid} = sluice_load_test_lib:sluice(Config, ["serve", "--unix", Path,
                                                         "--protocol", "ping",
                                                         "--metrics-port", "0"]),
    try
        {[], Before} = sluice_load_test_lib:wait_line(Port, "^listening on unix:" ++ Path ++ "$",
                                                      15000),
        ?assertMatch([_], [L || L <- Before,
                                re:run(L, "metrics at http://127\\.0\\.0\\.1:") =/= nomatch]),
        {ok, S} = gen_tcp:connect({local, Path}, 0, [binary, {active, false}], 5000),
        ok = gen_tcp:send(S, <<"Ping\n">>),
        ?assertEqual({ok, <<"Pong\n">>}, gen_tcp:recv(S, 5, 5000)),
        ok = gen_tcp:close(S),
        signal("TERM", OsPid),
        ?assertMatch({0, _}, sluice_load_test_lib:wait_exit(Port, 10000)),
        ?assertEqual({error, enoent}, file:read_link_info(Path))
    after
        _ = file:delete(Path)
    end.

%% --unix replaces --ip and --port, and cannot be shared by --nodes: each
%% with it is exit 2 and one line, before anything listens. An --ip or
%% --port equal to its default too (`--port 8000' was ignored in
%% silence, the server listening on the path alone).
unix_with_a_tcp_address_or_nodes_exits_2_with_one_line(Config) ->
    Path = "/tmp/sluice-cli-" ++ os:getpid() ++ "-bad.sock",
    [begin
         {Status, Lines} = run(Config, ["serve", "--unix", Path | Extra]),
         ct:log("~p -> ~p ~p", [Extra, Status, Lines]),
         ?assertEqual(2, Status),
         ?assertMatch([_], Lines),
         ?assertNotEqual(nomatch, binary:match(hd(Lines), Says))
     end || {Extra, Says} <- [{["--port", "9000"], <<"--port">>},
                              {["--port", "8000"], <<"--port">>},
                              {["--port=8000"], <<"--port">>},
                              {["--ip", ?LOOPBACK], <<"--ip">>},
                              {["--ip", "0.0.0.0"], <<"--ip">>},
                              {["--nodes", "2"], <<"--nodes">>}]],
    ?assertEqual({error, enoent}, file:read_link_info(Path)).

%% A path the listener cannot bind is exit 1 and one line that names it
%% (not the default --ip and --port, which --unix stands in for).
unix_path_in_a_missing_directory_exits_1_with_one_line(Config) ->
    Path = "/tmp/sluice-cli-" ++ os:getpid() ++ "-no-such-dir/x.sock",
    {Status, Lines} = run(Config, ["serve", "--unix", Path]),
    ct:log("~p ~p", [Status, Lines]),
    ?assertEqual(1, Status),
    ?assertEqual([list_to_binary("sluice: cannot listen on unix:" ++ Path ++
                                     ": no such directory")],
                 Lines).
