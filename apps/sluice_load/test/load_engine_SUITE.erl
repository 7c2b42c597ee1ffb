%% Tests of the C half of sluice_load: the load engine (sluice-load), the C
%% reference server (sluice-ref) and the histogram (sluice-hist-test).
%%
%% Everything runs on loopback against servers started here on port 0. The
%% binaries are found through $SLUICE_PRIV, code:priv_dir(sluice_load), the
%% priv directory next to this suite, or the repository layout, in that
%% order; build them with `make -C apps/sluice_load/c_src`.
-module(load_engine_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0,
         init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([histogram_unit_tests_pass/1,
         lockstep_against_ref/1,
         pipeline_ack_each_against_ref/1,
         pipeline_ack_last_against_ref/1,
         pipeline_ack_counted_against_ref/1,
         open_loop_rate_sends_on_schedule/1,
         flood_against_echo/1,
         ping_reports_mergeable_rounds/1,
         ping_timeouts_are_counted_and_connections_kept/1,
         connect_rate_and_latency/1,
         connect_probe_ping/1,
         source_ips_round_robin/1,
         ack_of_unsent_id_is_protocol_error/1,
         backwards_ack_is_protocol_error/1,
         counted_ack_of_zero_frames_is_protocol_error/1,
         flood_against_a_wrong_echo_is_protocol_error/1,
         bad_usage_exits_2/1,
         help_documents_every_option/1,
         closed_port_counts_econnrefused_and_exits_3/1,
         soft_file_limit_is_raised_for_the_conns/1,
         eaddrnotavail_says_which_limit/1,
         sigterm_reports_the_run_as_interrupted/1,
         sigterm_before_any_connection_is_not_exit_3/1,
         accept_then_close_is_closed_by_peer/1,
         server_closing_mid_run_is_reported/1,
         ref_acks_frames_split_anywhere/1,
         ref_counted_acks_cover_every_frame/1,
         ref_closes_on_oversized_frame_only/1,
         ref_ping_and_echo/1,
         ref_acks_the_frames_before_an_oversized_one/1,
         ref_ping_closes_on_other_lines/1,
         ref_usage_and_sigterm/1, ref_port_in_use_exits_1/1,
         ref_share_port_joins_the_first/1,
         ipv6_every_scenario_against_ref/1,
         ipv6_source_ips_bind_and_round_robin/1,
         ipv6_source_ips_of_the_other_family_exit_2/1,
         ipv6_ref_usage_and_errors/1]).
%% Helpers shared with load_engine_tls_SUITE and load_engine_storm_SUITE.
-export([run/4, load/2, start_ref/2, get/2]).

-define(RUN_S, "1").

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [histogram_unit_tests_pass, {group, scenarios}, {group, correctness},
     {group, failures}, {group, ref_server}, {group, ipv6}].

groups() ->
    [{scenarios, [],
      [lockstep_against_ref, pipeline_ack_each_against_ref,
       pipeline_ack_last_against_ref, pipeline_ack_counted_against_ref,
       open_loop_rate_sends_on_schedule, flood_against_echo,
       ping_reports_mergeable_rounds,
       ping_timeouts_are_counted_and_connections_kept,
       connect_rate_and_latency, connect_probe_ping, source_ips_round_robin]},
     {correctness, [],
      [ack_of_unsent_id_is_protocol_error, backwards_ack_is_protocol_error,
       counted_ack_of_zero_frames_is_protocol_error,
       flood_against_a_wrong_echo_is_protocol_error]},
     {failures, [],
      [bad_usage_exits_2, help_documents_every_option,
       closed_port_counts_econnrefused_and_exits_3,
       soft_file_limit_is_raised_for_the_conns,
       eaddrnotavail_says_which_limit,
       sigterm_reports_the_run_as_interrupted,
       sigterm_before_any_connection_is_not_exit_3,
       accept_then_close_is_closed_by_peer,
       server_closing_mid_run_is_reported]},
     {ref_server, [],
      [ref_acks_frames_split_anywhere, ref_counted_acks_cover_every_frame,
       ref_closes_on_oversized_frame_only, ref_acks_the_frames_before_an_oversized_one,
       ref_ping_closes_on_other_lines, ref_ping_and_echo,
       ref_usage_and_sigterm, ref_port_in_use_exits_1,
       ref_share_port_joins_the_first]},
     {ipv6, [],
      [ipv6_every_scenario_against_ref, ipv6_source_ips_bind_and_round_robin,
       ipv6_source_ips_of_the_other_family_exit_2, ipv6_ref_usage_and_errors]}].

%%% ------------------------------------------------------------------
%%% Setup: find the binaries; every OS process started by a case is
%%% registered with a per-case reaper and killed in end_per_testcase.
%%% ------------------------------------------------------------------

init_per_suite(Config) ->
    case sluice_load_test_lib:priv_dir() of
        {ok, Priv} ->
            ct:log("sluice C binaries from ~s", [Priv]),
            [{bin_dir, Priv} | Config];
        error -> {fail, "sluice C binaries not found: run "
                        "`make -C apps/sluice_load/c_src` or set SLUICE_PRIV"}
    end.

end_per_suite(_Config) -> ok.

%% The IPv6 cases skip on a host without ::1.
init_per_group(ipv6, Config) ->
    case sluice_load_test_lib:ipv6_loopback() of
        ok -> Config;
        Skip -> Skip
    end;
init_per_group(_Group, Config) ->
    Config.

end_per_group(_Group, _Config) -> ok.

init_per_testcase(_Case, Config) ->
    sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) ->
    sluice_load_test_lib:stop_reaper(Config).

bin(Config, Name) -> filename:join(?config(bin_dir, Config), Name).

%%% ------------------------------------------------------------------
%%% Cases: the histogram
%%% ------------------------------------------------------------------

%% The histogram keeps <=1% relative error over 1 ns..17 s, and merging
%% two histograms equals recording everything in one (sluice-hist-test).
histogram_unit_tests_pass(Config) ->
    {Status, Out} = run(Config, "sluice-hist-test", [], 20000),
    ct:log("~s", [Out]),
    ?assertEqual(0, Status),
    ?assertMatch({match, _}, re:run(Out, "^[1-9][0-9]* passed, 0 failed$",
                                    [multiline])).

%%% ------------------------------------------------------------------
%%% Cases: each scenario against sluice-ref gives sane figures
%%% ------------------------------------------------------------------

%% One frame in flight: every frame acked, latencies ordered and non-zero.
lockstep_against_ref(Config) ->
    Port = start_ref(Config, ["--protocol", "ack"]),
    J = load_ok(Config, ["--scenario", "lockstep", "--port", Port]),
    sane_traffic(J, 100),
    ?assertEqual(<<"lockstep">>, get(J, scenario)),
    ?assertEqual(1, get(J, window)).

pipeline_ack_each_against_ref(Config) -> pipeline(Config, "each").
pipeline_ack_last_against_ref(Config) -> pipeline(Config, "last").
pipeline_ack_counted_against_ref(Config) -> pipeline(Config, "counted").

%% Pipelined frames on two connections, acks checked in the given mode.
pipeline(Config, Mode) ->
    Port = start_ref(Config, ["--protocol", "ack", "--ack", Mode]),
    J = load_ok(Config, ["--scenario", "pipeline", "--ack", Mode,
                         "--port", Port, "--conns", "2",
                         "--window", "20000", "--batch", "500"]),
    sane_traffic(J, 10000),
    ?assertEqual(list_to_binary(Mode), get(J, ack)),
    ?assertEqual(2, get(J, conns_up_at_end)),
    %% bytes are whole 17-byte frames
    ?assertEqual(get(J, messages) * 17, get(J, bytes)).

%% --rate R is open loop: R frames/s per connection, scheduled in advance.
open_loop_rate_sends_on_schedule(Config) ->
    Port = start_ref(Config, ["--protocol", "ack"]),
    J = load_ok(Config, ["--scenario", "lockstep", "--port", Port,
                         "--rate", "2000"]),
    Msgs = get(J, messages),
    ?assert(Msgs >= 1800 andalso Msgs =< 2200, Msgs),
    ?assertEqual(<<"open">>, get(J, load)).

%% Tiny writes against echo: echoed bytes and writes are counted.
flood_against_echo(Config) ->
    Port = start_ref(Config, ["--protocol", "echo"]),
    J = load_ok(Config, ["--scenario", "flood", "--port", Port,
                         "--conns", "2"]),
    ?assert(get(J, messages) > 1000),
    ?assert(get(J, bytes) > 6000),
    ?assert(get(J, writes) > 1000),
    %% every write of the 6-byte message counted, not just some: the
    %% bytes written are the writes' (a count of a few per wakeup is
    %% still above 1000)
    ?assertEqual(get(J, writes) * 6, get(J, sent_bytes)),
    ?assertEqual(get(J, bytes) div 6, get(J, messages)),
    ?assert(get(J, rate) > 0),
    ?assertEqual(0, get(J, errors)).

%% Ping every 100 ms on 20 connections: per-round figures with a sparse
%% histogram whose counts add up to the round's pongs (mergeable).
ping_reports_mergeable_rounds(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    J = load_ok(Config, ["--scenario", "ping", "--port", Port,
                         "--conns", "20", "--interval", "100",
                         "--rate", "1000"]),
    ?assertEqual(0, get(J, errors)),
    ?assert(get(J, pongs) >= 150),
    Rounds = get(J, rounds),
    ?assert(length(Rounds) >= 9),
    lists:foreach(
      fun(R) ->
              ?assertEqual(20, get(R, conns_up)),
              ?assertEqual(0, get(R, timeouts)),
              Buckets = get(get(R, latency_hist), buckets),
              ?assertEqual(get(R, pongs),
                           lists:sum([C || [_, C] <- Buckets]))
      end, Rounds),
    ?assert(lists:sum([get(R, pings) || R <- Rounds]) >= 150).

%% A server that never answers (ack protocol reading "Ping\n" as half a
%% header): pings time out, are counted, connections stay open, exit 0.
ping_timeouts_are_counted_and_connections_kept(Config) ->
    Port = start_ref(Config, ["--protocol", "ack"]),
    %% timeouts are errors: exit 4, the run complete
    {4, J} = load(Config, ["--scenario", "ping", "--port", Port,
                           "--conns", "4", "--interval", "100",
                           "--timeout", "200"]),
    ?assertEqual(4, get(J, exit_code)),
    ?assertEqual(4, get(J, timeouts_whole_run)),
    ?assertEqual(4, get(J, errors)),
    ?assertEqual(0, get(J, pongs)),
    ?assert(get(J, skipped) > 0),
    ?assertEqual(4, get(J, conns_up_at_end)),
    ?assertEqual(<<"keep">>, get(J, on_timeout)).

%% Connection rate: all established, rate and connect latency reported.
connect_rate_and_latency(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    J = load_ok(Config, ["--scenario", "connect", "--port", Port,
                         "--conns", "200", "--duration", "0.5"]),
    ?assertEqual(200, get(J, messages)),
    ?assert(get(J, rate) > 0),
    ?assert(get(get(J, latency_us), p50) > 0),
    ?assertEqual(200, get(J, held_at_end)),
    ?assertEqual(0, get(J, errors)).

%% --probe ping: established means Ping got Pong.
connect_probe_ping(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    J = load_ok(Config, ["--scenario", "connect", "--probe", "ping",
                         "--port", Port, "--conns", "100",
                         "--duration", "0.5"]),
    ?assertEqual(100, get(J, messages)),
    ?assertEqual(<<"ping">>, get(J, probe)),
    ?assertEqual(0, get(J, errors)),
    %% against a ping server the figures are those of a TCP connect; a
    %% server that accepts but never answers Pong (the ack protocol reads
    %% "Ping\n" as half a header) tells them apart: nothing established
    Silent = start_ref(Config, ["--protocol", "ack"]),
    {3, J2} = load(Config, ["--scenario", "connect", "--probe", "ping",
                            "--port", Silent, "--conns", "3",
                            "--connect-timeout", "300"]),
    ?assertEqual(0, get(J2, messages)),
    ?assertEqual(3, get(get(J2, connect), handshakes)),
    ?assertEqual(#{<<"ETIMEDOUT">> => 3}, get(J2, failures)).

%% Source addresses are used round-robin (bind with
%% IP_BIND_ADDRESS_NO_PORT before connect). One thread opening one
%% connection at a time connects in index order, so the order the server
%% accepts them shows the rotation (two each in blocks gives the same
%% counts per address).
source_ips_round_robin(Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}]),
    {ok, Port} = inet:port(L),
    Self = self(),
    spawn_link(fun() -> collect_peers(L, 6, Self, []) end),
    J = load_ok(Config, ["--scenario", "connect", "--port", itoa(Port),
                         "--conns", "6", "--duration", "0.2",
                         "--threads", "1", "--connect-concurrency", "1",
                         "--source-ips", "127.0.0.2-4"]),
    ?assertEqual(6, get(J, messages)),
    Peers = receive {peers, Ps} -> Ps after 5000 -> ct:fail(no_peers) end,
    %% collect_peers/4 gathers them last first
    ?assertEqual([{127, 0, 0, 2}, {127, 0, 0, 3}, {127, 0, 0, 4},
                  {127, 0, 0, 2}, {127, 0, 0, 3}, {127, 0, 0, 4}],
                 lists:reverse(Peers)).

%% The sockets stay open until the engine is done with them (a close by
%% the server is an error of the run).
collect_peers(_L, 0, To, Acc) ->
    To ! {peers, Acc},
    receive after 10000 -> ok end;
collect_peers(L, N, To, Acc) ->
    {ok, S} = gen_tcp:accept(L),
    {ok, {Ip, _}} = inet:peername(S),
    collect_peers(L, N - 1, To, [Ip | Acc]).

%%% ------------------------------------------------------------------
%%% Cases: every ack is checked (lying servers written here)
%%% ------------------------------------------------------------------

%% A server acking an id that was never sent: exit 1 at once, stderr names
%% the connection (index and local address:port) and the id.
ack_of_unsent_id_is_protocol_error(Config) ->
    liar(Config, "each", fun(Id, _N) -> <<(Id + 1000):64>> end,
         "ack id 1001 was never sent").

%% A server acking backwards: frame 1 acked honestly, frame 2 acked as 1.
backwards_ack_is_protocol_error(Config) ->
    liar(Config, "each", fun(Id, 1) -> <<Id:64>>;
                            (_Id, _N) -> <<1:64>>
                         end,
         "ack id 1 goes backwards").

%% counted mode: an ack whose Count is 0 covers zero frames.
counted_ack_of_zero_frames_is_protocol_error(Config) ->
    liar(Config, "counted", fun(Id, _N) -> <<Id:64, 0:32>> end,
         "ack id 1 covers zero frames").

%% flood: the echo is checked, not only counted: a server that sends back
%% other bytes (here the first `a' of "aloha\n" as `A'), or more than was
%% sent, stops the run (both were counted as echoed bytes).
flood_against_a_wrong_echo_is_protocol_error(Config) ->
    [begin
         {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}]),
         {ok, Port} = inet:port(L),
         spawn_link(fun() -> {ok, S} = gen_tcp:accept(L), echo_as(S, Fun) end),
         {Status, Out} = run(Config, "sluice-load",
                             ["--scenario", "flood", "--port", itoa(Port),
                              "--duration", "10"], 10000),
         ct:log("exit ~p:~n~s", [Status, Out]),
         ?assertEqual(1, Status),
         ?assertMatch({match, _}, re:run(Out, Expect)),
         gen_tcp:close(L)
     end || {Fun, Expect} <- [{fun(<<_, R/binary>>) -> <<"A", R/binary>> end,
                               "echo byte 0 is 0x41, 0x61 was sent there"},
                              {fun more_than_sent/1,
                               "bytes came back, only [0-9]+ were sent"}]].

%% The first read back, then 16 MB more of the same stream ("aloha\n"
%% over and over from where the read ended): not read yet, the client
%% cannot have sent as much (the kernel's buffers hold a few MB).
more_than_sent(D) ->
    N = 16 * 1048576,
    [D, binary:part(binary:copy(<<"aloha\n">>, N div 6 + 2), byte_size(D) rem 6, N)].

%% The first read back as Fun makes it, then every byte as it came.
echo_as(S, Fun) ->
    case gen_tcp:recv(S, 0) of
        {ok, D} -> _ = gen_tcp:send(S, Fun(D)), echo_as(S, fun(X) -> X end);
        {error, _} -> ok
    end.

liar(Config, Mode, AckFun, Expect) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}]),
    {ok, Port} = inet:port(L),
    Self = self(),
    spawn_link(fun() ->
                       {ok, S} = gen_tcp:accept(L),
                       {ok, {_, PeerPort}} = inet:peername(S),
                       Self ! {peer_port, PeerPort},
                       lie(S, AckFun, 1)
               end),
    T0 = erlang:monotonic_time(millisecond),
    {Status, Out} = run(Config, "sluice-load",
                        ["--scenario", "lockstep", "--ack", Mode,
                         "--port", itoa(Port), "--duration", "10"], 10000),
    Elapsed = erlang:monotonic_time(millisecond) - T0,
    ct:log("exit ~p after ~p ms:~n~s", [Status, Elapsed, Out]),
    PeerPort = receive {peer_port, P} -> P after 1000 -> ct:fail(no_peer) end,
    ?assertEqual(1, Status),
    ?assert(Elapsed < 5000),
    Needle = "protocol error on connection 0 \\(local 127.0.0.1:"
        ++ itoa(PeerPort) ++ "\\): " ++ Expect,
    ?assertMatch({match, _}, re:run(Out, Needle)).

%% Answers frame N (1, 2, ...) with AckFun(Id, N).
lie(S, AckFun, N) ->
    case gen_tcp:recv(S, 12) of
        {ok, <<Id:64, 0:32>>} ->
            ok = gen_tcp:send(S, AckFun(Id, N)),
            lie(S, AckFun, N + 1);
        {ok, <<Id:64, Len:32>>} ->
            case gen_tcp:recv(S, Len) of
                {ok, _} ->
                    ok = gen_tcp:send(S, AckFun(Id, N)),
                    lie(S, AckFun, N + 1);
                {error, _} -> ok
            end;
        {error, _} -> ok
    end.

%%% ------------------------------------------------------------------
%%% Cases: usage errors and failures are reported, never silent
%%% ------------------------------------------------------------------

%% Unknown or malformed options: one line on stderr, exit 2. An empty entry
%% in --source-ips too (strtok_r skipped it: `127.0.0.1,,' ran).
bad_usage_exits_2(Config) ->
    Bad = [["--bogus"], ["--conns", "many"], ["--scenario", "nope"],
           ["--ack", "sometimes"], ["--conns"], ["--scenario", "lockstep",
                                                 "--window", "10"],
           ["--source-ips", "127.0.0.9-2"], ["--source-ips", "127.0.0.1,,"],
           ["--source-ips", ",127.0.0.1"], ["--source-ips", "127.0.0.1,,127.0.0.2"],
           ["extra"]],
    lists:foreach(
      fun(Args) ->
              {Status, Out} = run(Config, "sluice-load", Args, 5000),
              ct:log("~p -> ~p: ~s", [Args, Status, Out]),
              ?assertEqual(2, Status),
              ?assertEqual(1, length(string:split(string:trim(Out), "\n",
                                                  all)))
      end, Bad).

%% --help lists every option with its default and exits 0.
help_documents_every_option(Config) ->
    {0, Out} = run(Config, "sluice-load", ["--help"], 5000),
    Opts = ["--scenario", "--host", "--port", "--conns", "--duration",
            "--warmup", "--window", "--batch", "--payload", "--interval",
            "--timeout", "--threads", "--source-ips", "--rate", "--ack",
            "--json", "--quiet", "--connect-timeout", "--probe",
            "--progress"],
    [?assertNotEqual(nomatch, string:find(Out, O ++ " ")) || O <- Opts],
    ?assert(length(string:split(Out, "default:", all)) > 15),
    %% each default of the engine's own table (--options-json) on its
    %% option's line: a count of "default:" lets a few go missing
    {0, Table} = run(Config, "sluice-load", ["--options-json"], 5000),
    {ok, #{<<"options">> := Specs}} = sluice_json:decode(list_to_binary(Table)),
    Defaults = [{N, D} || #{<<"name">> := N, <<"default">> := D} <- Specs],
    ?assert(length(Defaults) > 15),
    ?assertEqual([], [N || {N, D} <- Defaults,
                           re:run(Out, ["^  --", N, " .*\\[default: \\Q", D, "\\E\\]$"],
                                  [multiline]) =:= nomatch]).

%% Nothing listens: every attempt fails with ECONNREFUSED, exit 3.
closed_port_counts_econnrefused_and_exits_3(Config) ->
    {ok, L} = gen_tcp:listen(0, []),
    {ok, Port} = inet:port(L),
    ok = gen_tcp:close(L),
    {Status, J} = load(Config, ["--scenario", "connect", "--port", itoa(Port),
                                "--conns", "3"]),
    ?assertEqual(3, Status),
    ?assertEqual(#{<<"ECONNREFUSED">> => 3}, get(J, failures)),
    ?assertEqual(3, get(J, errors)).

%% A soft open-file limit below --conns (1024 is a shell's usual one,
%% under a far higher hard limit) is raised as far as the hard one allows:
%% it failed the connections past it with EMFILE. Short of the hard
%% limit: one line that says so, and the EMFILE failures it announced.
soft_file_limit_is_raised_for_the_conns(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    Args = ["--scenario", "connect", "--port", Port, "--conns", "300",
            "--duration", "0.2", "--threads", "1"],
    {0, J} = load_limited(Config, "-Sn 128", Args),
    ?assertEqual(#{}, get(J, failures)),
    ?assertEqual(300, get(J, held_at_end)),
    {4, Out, J2} = load_limited_out(Config, "-n 128", Args),
    ?assertMatch({match, _}, re:run(Out, "--conns 300 needs about [0-9]+ open "
                                    "files, the limit is 128 \\(ulimit -n\\)")),
    ?assertMatch(#{<<"EMFILE">> := _}, get(J2, failures)).

%% EADDRNOTAVAIL is this host's limit, not the server's doing: a line says
%% which (the ephemeral ports of the source addresses, or an address that
%% is not this host's) and what gives more, where the counts alone said
%% "EADDRNOTAVAIL 2". 192.0.2.1 (TEST-NET-1) is no host's address.
eaddrnotavail_says_which_limit(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    {Status, Out} = run(Config, "sluice-load",
                        ["--scenario", "connect", "--port", Port, "--conns", "2",
                         "--duration", "0.2", "--source-ips", "192.0.2.1"], 10000),
    ct:log("~s", [Out]),
    ?assertEqual(3, Status),
    ?assertMatch({match, _}, re:run(Out, "EADDRNOTAVAIL 2: out of local ports for the "
                                    "--source-ips addresses .*ip_local_port_range.*"
                                    "or a --source-ips address is not this host's")).

%% SIGTERM ends the run with the report of what was measured, and exit 0 as
%% a whole run: the report says it was cut short (the JSON was that of a
%% whole run with a shorter --duration; only stderr said "interrupted").
sigterm_reports_the_run_as_interrupted(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    Json = json_path(Config),
    %% (signalled a second into the window: pings were measured)
    {Status, Out} = interrupted(Config, ["--scenario", "ping", "--port", Port, "--conns", "2",
                                         "--interval", "100", "--duration", "30",
                                         "--json", Json],
                                {<<"\"phase\":\"window\"">>, 2}),
    ?assertEqual(0, Status),
    ?assertMatch({match, _}, re:run(Out, "s measured \\(interrupted\\)\n")),
    J = read_json(Json),
    ?assertEqual(true, get(J, interrupted)),
    ?assert(get(J, pings) > 0),
    {0, Whole} = load(Config, ["--scenario", "ping", "--port", Port, "--conns", "2",
                               "--interval", "100"]),
    ?assertEqual(false, get(Whole, interrupted)).

%% sluice-load with Args, sent SIGTERM once its --progress-json lines (a
%% line a second, and one at each change of phase) have said `Needle'
%% `N' times: its status and its output (logged). A SIGTERM 0.7 s after
%% the start, as it was, came before the first ping of an engine slow to
%% start (pings 0) on a loaded host.
interrupted(Config, Args, {Needle, N}) ->
    P = open_port({spawn_executable, bin(Config, "sluice-load")},
                  [{args, Args ++ ["--progress-json"]}, exit_status, binary,
                   stderr_to_stdout, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    Before = output_until(P, Needle, N, [], erlang:monotonic_time(millisecond) + 15000),
    _ = os:cmd("kill -TERM " ++ itoa(OsPid)),
    {Status, After} = collect(P, [], erlang:monotonic_time(millisecond) + 10000),
    Out = binary_to_list(Before) ++ After,
    ct:log("~s", [Out]),
    {Status, Out}.

%% The output of port P up to the data in which `Needle' has been seen
%% `N' times (the run is still going: it fails if the port exits first).
output_until(P, Needle, N, Acc, Deadline) ->
    Out = iolist_to_binary(lists:reverse(Acc)),
    case length(binary:matches(Out, Needle)) >= N of
        true -> Out;
        false ->
            Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
            receive
                {P, {data, D}} -> output_until(P, Needle, N, [D | Acc], Deadline);
                {P, {exit_status, S}} -> ct:fail({exited_before, Needle, S, Out})
            after Left -> ct:fail({no_output, Needle, N, Out})
            end
    end.

%% SIGTERM while every connect is still pending (a listener whose accept
%% queue is full: the kernel drops the SYNs, so the connects neither
%% succeed nor fail): the run could not connect at all only if a connect
%% failed. It said "could not connect ... at all ()" beside "connection
%% failures: none" and exited 3; now the errors line is 0 and so is the
%% exit. (A Ctrl-C as a run starts, which bin/sluice now passes on rather
%% than drops, came to the same.)
sigterm_before_any_connection_is_not_exit_3(Config) ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}, {backlog, 0}, {active, false}]),
    {ok, Port} = inet:port(L),
    Self = self(),
    %% (the queue's own connects, never accepted: they hold it full)
    Fillers = [spawn(fun() ->
                             R = gen_tcp:connect({127, 0, 0, 1}, Port, [], 20000),
                             Self ! {filled, self()},
                             receive stop -> R end
                     end) || _ <- lists:seq(1, 3)],
    %% (signalled once both connects are under way)
    {Status, Out} = interrupted(Config, ["--scenario", "ping", "--port", itoa(Port),
                                         "--conns", "2", "--duration", "10"],
                                {<<"\"attempts\":2,">>, 1}),
    [exit(F, kill) || F <- Fillers],
    ok = gen_tcp:close(L),
    ?assertMatch({match, _}, re:run(Out, "connect: 0 established of 2 attempts")),
    ?assertMatch({match, _}, re:run(Out, "connection failures: none")),
    ?assertEqual(nomatch, re:run(Out, "at all")),
    ?assertEqual(0, Status).

%% A server at its connection limit accepts and closes at once: that shows
%% as closed_by_peer failures (with and without --probe ping), errors of
%% the run (exit 4; 3 when none was ever established).
accept_then_close_is_closed_by_peer(Config) ->
    Port = start_ref(Config, ["--protocol", "ping",
                              "--max-connections", "0"]),
    {4, J1} = load(Config, ["--scenario", "connect", "--port", Port,
                            "--conns", "5"]),
    ?assertEqual(5, get(J1, errors)),
    ?assertEqual(#{<<"closed_by_peer">> => 5}, get(J1, failures)),
    ?assertEqual(0, get(J1, held_at_end)),
    {3, J2} = load(Config, ["--scenario", "connect", "--probe", "ping",
                            "--port", Port, "--conns", "5"]),
    ?assertEqual(#{<<"closed_by_peer">> => 5}, get(J2, failures)),
    ?assertEqual(0, get(J2, messages)).

%% A server that closes a connection mid-run: reported on stderr (naming
%% the connection), in the failures, and in the errors and the exit code
%% (4: the run completed with errors).
server_closing_mid_run_is_reported(Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {reuseaddr, true}]),
    {ok, Port} = inet:port(L),
    spawn_link(fun() ->
                       {ok, S} = gen_tcp:accept(L),
                       ack_n(S, 50),
                       gen_tcp:close(S)
               end),
    Json = json_path(Config),
    T0 = erlang:monotonic_time(millisecond),
    {Status, Out} = run(Config, "sluice-load",
                        ["--scenario", "lockstep", "--port", itoa(Port),
                         "--duration", "10", "--json", Json], 10000),
    Elapsed = erlang:monotonic_time(millisecond) - T0,
    ct:log("exit ~p after ~p ms~n~s", [Status, Elapsed, Out]),
    ?assertEqual(4, Status),
    ?assertMatch({match, _}, re:run(Out, "connection failures: closed_by_peer 1\n"
                                    "(.*\n)?errors: 1 \\(connection failures 1\\); exit 4\n")),
    %% with no connection left the run ends early instead of idling
    ?assert(Elapsed < 5000),
    ?assertMatch({match, _}, re:run(Out, "connection 0 \\(local "
                                    "127.0.0.1:[0-9]+\\) closed by the "
                                    "server")),
    J = read_json(Json),
    ?assertEqual(#{<<"closed_by_peer">> => 1}, get(J, failures)),
    ?assertEqual(1, get(J, errors)),
    ?assertEqual(4, get(J, exit_code)).

ack_n(_S, 0) -> ok;
ack_n(S, N) ->
    {ok, <<Id:64, Len:32>>} = gen_tcp:recv(S, 12),
    {ok, _} = gen_tcp:recv(S, Len),
    ok = gen_tcp:send(S, <<Id:64>>),
    ack_n(S, N - 1).

%%% ------------------------------------------------------------------
%%% Cases: the reference server
%%% ------------------------------------------------------------------

%% ack each: frames of random sizes sent in random pieces (a frame split
%% at any byte, several frames per piece) are acked one by one, in order.
ref_acks_frames_split_anywhere(Config) ->
    Port = start_ref(Config, ["--protocol", "ack", "--ack", "each"]),
    S = connect(Port),
    N = 300,
    Stream = frames(N),
    send_in_pieces(S, Stream),
    {ok, Acks} = gen_tcp:recv(S, 8 * N, 5000),
    ?assertEqual(lists:seq(1, N), [Id || <<Id:64>> <= Acks]).

%% ack counted: the counts of all acks add up to the frames sent, each
%% ack's count matches the ids it covers, and the last ack is the last id.
ref_counted_acks_cover_every_frame(Config) ->
    Port = start_ref(Config, ["--protocol", "ack", "--ack", "counted"]),
    S = connect(Port),
    N = 300,
    send_in_pieces(S, frames(N)),
    Acks = recv_counted(S, 0, N, []),
    lists:foldl(fun({Id, Count}, Prev) ->
                        ?assertEqual(Id - Prev, Count),
                        Id
                end, 0, Acks),
    ?assertEqual(N, element(1, lists:last(Acks))).

recv_counted(_S, Last, N, Acc) when Last =:= N -> lists:reverse(Acc);
recv_counted(S, _Last, N, Acc) ->
    {ok, <<Id:64, Count:32>>} = gen_tcp:recv(S, 12, 5000),
    recv_counted(S, Id, N, [{Id, Count} | Acc]).

%% A frame longer than --max-frame closes that connection at once; another
%% connection keeps being served.
ref_closes_on_oversized_frame_only(Config) ->
    Port = start_ref(Config, ["--protocol", "ack", "--max-frame", "100"]),
    Good = connect(Port),
    Bad = connect(Port),
    ok = gen_tcp:send(Bad, <<7:64, 101:32>>),
    ?assertMatch({error, _}, gen_tcp:recv(Bad, 0, 5000)),
    ok = gen_tcp:send(Good, <<9:64, 100:32, 0:800>>),
    ?assertEqual({ok, <<9:64>>}, gen_tcp:recv(Good, 8, 5000)).

%% The frames before a frame too large in the same read are acked before
%% the close, as sluice and the peers do (the reference closed without
%% them), in every mode.
ref_acks_the_frames_before_an_oversized_one(Config) ->
    Frames = <<1:64, 1:32, "a", 2:64, 0:32, 3:64, 100:32, 0:800, 4:64, 101:32>>,
    [begin
         Port = start_ref(Config, ["--protocol", "ack", "--ack", Mode, "--max-frame", "100"]),
         S = connect(Port),
         ok = gen_tcp:send(S, Frames),
         ?assertEqual({Mode, Acks}, {Mode, recv_until_closed(S, <<>>)})
     end || {Mode, Acks} <- [{"each", <<1:64, 2:64, 3:64>>}, {"last", <<3:64>>},
                             {"counted", <<3:64, 3:32>>}]].

%% ping: any other line, or more than 64 bytes without a newline, closes
%% the connection after the Pongs owed (as sluice_proto_ping; the
%% reference ignored such lines and answered the Pings after them).
ref_ping_closes_on_other_lines(Config) ->
    Port = start_ref(Config, ["--protocol", "ping"]),
    [begin
         S = connect(Port),
         ok = gen_tcp:send(S, In),
         ?assertEqual({In, Out}, {In, recv_until_closed(S, <<>>)})
     end || {In, Out} <- [{<<"Ping\nHello\nPing\n">>, <<"Pong\n">>},
                          {<<"\nPing\n">>, <<>>},
                          {<<"Ping\r\nPing\n">>, <<>>},
                          {<<"Ping\n", (binary:copy(<<"x">>, 65))/binary>>, <<"Pong\n">>}]],
    %% a line still waiting for its newline is kept
    S = connect(Port),
    ok = gen_tcp:send(S, [<<"Ping\n">>, binary:copy(<<"x">>, 64)]),
    ?assertEqual({ok, <<"Pong\n">>}, gen_tcp:recv(S, 5, 5000)),
    ?assertEqual({error, timeout}, gen_tcp:recv(S, 0, 200)).

recv_until_closed(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, B} -> recv_until_closed(S, <<Acc/binary, B/binary>>);
        {error, closed} -> Acc
    end.

%% ping answers each "Ping\n" line (even split) with "Pong\n"; echo
%% returns every byte.
ref_ping_and_echo(Config) ->
    P1 = start_ref(Config, ["--protocol", "ping"]),
    S1 = connect(P1),
    ok = gen_tcp:send(S1, <<"Pi">>),
    timer:sleep(20),
    ok = gen_tcp:send(S1, <<"ng\nPing\n">>),
    ?assertEqual({ok, <<"Pong\nPong\n">>}, gen_tcp:recv(S1, 10, 5000)),
    P2 = start_ref(Config, ["--protocol", "echo"]),
    S2 = connect(P2),
    Data = rand:bytes(100000),
    ok = gen_tcp:send(S2, Data),
    ?assertEqual({ok, Data}, gen_tcp:recv(S2, byte_size(Data), 5000)).

%% Bad option: exit 2; SIGTERM: exit 0.
ref_usage_and_sigterm(Config) ->
    {2, _} = run(Config, "sluice-ref", ["--protocol", "ack", "--bogus"], 5000),
    {2, _} = run(Config, "sluice-ref", ["--port", "0"], 5000),
    {0, Help} = run(Config, "sluice-ref", ["--help"], 5000),
    ?assertNotEqual(nomatch, string:find(Help, "--max-connections")),
    {Port, _TcpPort, OsPid} = spawn_ref(Config, ["--protocol", "echo"]),
    os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    receive
        {Port, {exit_status, Status}} -> ?assertEqual(0, Status)
    after 5000 -> ct:fail(ref_did_not_exit)
    end.

%% A port another sluice-ref already listens on: one line, exit 1 (its
%% SO_REUSEPORT listeners would otherwise join the first server's and
%% take a share of its connections); likewise any other listener.
ref_port_in_use_exits_1(Config) ->
    TcpPort = itoa(element(2, spawn_ref(Config, ["--protocol", "ack"]))),
    {1, Out} = run(Config, "sluice-ref", ["--ip", "127.0.0.1", "--port", TcpPort,
                                          "--protocol", "ack"], 5000),
    ?assertNotEqual(nomatch, string:find(Out, "Address already in use")),
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}, {reuseaddr, true}]),
    {ok, Other} = inet:port(L),
    {1, _} = run(Config, "sluice-ref", ["--ip", "127.0.0.1", "--port", itoa(Other),
                                        "--protocol", "ack"], 5000),
    gen_tcp:close(L).

%% `--share-port' joins the sluice-ref already on the port (how
%% docs/load.md held 100,000 connections with seven of them): it starts
%% there, and once the first has gone it serves the port alone.
ref_share_port_joins_the_first(Config) ->
    {First, TcpPort, FirstOs} = spawn_ref(Config, ["--protocol", "echo"]),
    Second = open_port({spawn_executable, bin(Config, "sluice-ref")},
                       [{args, ["--ip", "127.0.0.1", "--port", itoa(TcpPort),
                                "--protocol", "echo", "--share-port"]},
                        exit_status, binary, {line, 256}, hide]),
    {os_pid, SecondOs} = erlang:port_info(Second, os_pid),
    sluice_load_test_lib:reap(Config, SecondOs),
    Listening = iolist_to_binary(["listening on 127.0.0.1:", itoa(TcpPort)]),
    receive
        {Second, {data, {eol, Line}}} -> ?assertEqual(Listening, Line);
        {Second, {exit_status, Status}} -> ct:fail({second_exited, Status})
    after 5000 -> ct:fail(second_not_listening)
    end,
    os:cmd("kill -TERM " ++ integer_to_list(FirstOs)),
    receive {First, {exit_status, 0}} -> ok after 5000 -> ct:fail(first_did_not_exit) end,
    {ok, C} = gen_tcp:connect({127, 0, 0, 1}, TcpPort, [binary, {active, false}], 5000),
    ok = gen_tcp:send(C, <<"hello">>),
    ?assertEqual({ok, <<"hello">>}, gen_tcp:recv(C, 5, 5000)),
    ok = gen_tcp:close(C),
    os:cmd("kill -TERM " ++ integer_to_list(SecondOs)),
    receive {Second, {exit_status, 0}} -> ok after 5000 -> ct:fail(second_did_not_exit) end.

%%% ------------------------------------------------------------------
%%% Cases: IPv6 (skipped without ::1)
%%% ------------------------------------------------------------------

%% Every scenario runs over ::1 against sluice-ref --ip ::1 (the engine
%% resolved --host for IPv4 only: "Address family for hostname not
%% supported", exit 2; sluice-ref took an IPv4 --ip only).
ipv6_every_scenario_against_ref(Config) ->
    Ack = start_ref(Config, ["--ip", "::1", "--protocol", "ack"]),
    Ping = start_ref(Config, ["--ip", "::1", "--protocol", "ping"]),
    Echo = start_ref(Config, ["--ip", "::1", "--protocol", "echo"]),
    Run = fun(Args) -> load_ok(Config, ["--host", "::1", "--duration", "0.3" | Args]) end,
    L = Run(["--scenario", "lockstep", "--port", Ack]),
    ?assert(get(L, messages) > 0),
    P = Run(["--scenario", "pipeline", "--port", Ack, "--window", "2000", "--batch", "100"]),
    ?assert(get(P, messages) > 0),
    F = Run(["--scenario", "flood", "--port", Echo]),
    ?assertEqual(get(F, writes) * 6, get(F, sent_bytes)),
    Pg = Run(["--scenario", "ping", "--port", Ping, "--conns", "5", "--interval", "50"]),
    ?assert(get(Pg, pongs) > 0),
    C = Run(["--scenario", "connect", "--probe", "ping", "--port", Ping, "--conns", "20"]),
    ?assertEqual(20, get(C, messages)),
    S = Run(["--scenario", "storm", "--port", Ping, "--conns", "20"]),
    ?assertEqual(0, get(S, errors)),
    [?assertEqual(0, get(J, errors)) || J <- [L, P, F, Pg, C]].

%% --source-ips ::1 binds every connection there (a list, a range of one);
%% the server sees them come from ::1. An IPv6 range is one /120 and has
%% no A.B.C.X-Y short form (hex).
ipv6_source_ips_bind_and_round_robin(Config) ->
    {ok, L} = gen_tcp:listen(0, [inet6, {ip, {0, 0, 0, 0, 0, 0, 0, 1}}, binary,
                                 {active, false}, {reuseaddr, true}]),
    {ok, Port} = inet:port(L),
    Self = self(),
    spawn_link(fun() -> collect_peers(L, 4, Self, []) end),
    J = load_ok(Config, ["--scenario", "connect", "--host", "::1", "--port", itoa(Port),
                         "--conns", "4", "--duration", "0.2", "--threads", "1",
                         "--source-ips", "::1,::1-::1"]),
    ?assertEqual(4, get(J, messages)),
    Peers = receive {peers, Ps} -> Ps after 5000 -> ct:fail(no_peers) end,
    ?assertEqual(lists:duplicate(4, {0, 0, 0, 0, 0, 0, 0, 1}), Peers),
    [?assertMatch({2, _}, run(Config, "sluice-load",
                              ["--host", "::1", "--source-ips", Bad, "--check"], 5000))
     || Bad <- ["fd00::2-4", "fd00::ff-fd00::100", "fd00::4-fd00::2"]].

%% Source addresses of the other family than the server's, or of both:
%% one line, exit 2, nothing run (every connect() would have failed).
ipv6_source_ips_of_the_other_family_exit_2(Config) ->
    [begin
         {Status, Out} = run(Config, "sluice-load",
                             ["--scenario", "connect", "--duration", "0.2",
                              "--host", Host, "--source-ips", Src], 5000),
         ct:log("--host ~s --source-ips ~s -> ~p~n~s", [Host, Src, Status, Out]),
         ?assertEqual(2, Status),
         ?assertMatch([_], string:lexemes(Out, "\n")),
         ?assertNotEqual(nomatch, string:find(Out, Says))
     end || {Host, Src, Says} <- [{"::1", "127.0.0.1", "IPv4 addresses but --host ::1 has no IPv4"},
                                  {"127.0.0.1", "::1", "IPv6 addresses but --host 127.0.0.1"},
                                  {"::1", "::1,127.0.0.2-3", "mixes IPv4 and IPv6"}]].

%% sluice-ref --ip ::1 says where as serve does ("[::1]:P"), in its
%% listening line and when the port is taken; the engine's "could not
%% connect" names the server the same way.
ipv6_ref_usage_and_errors(Config) ->
    {_, TcpPort, _} = spawn_ref(Config, ["--ip", "::1", "--protocol", "ack"]),
    {1, Out} = run(Config, "sluice-ref", ["--ip", "::1", "--port", itoa(TcpPort),
                                          "--protocol", "ack"], 5000),
    ?assertNotEqual(nomatch, string:find(Out, "listen on [::1]:" ++ itoa(TcpPort)
                                         ++ ": Address already in use")),
    {2, Bad} = run(Config, "sluice-ref", ["--ip", "::1::2", "--protocol", "ack"], 5000),
    ?assertNotEqual(nomatch, string:find(Bad, "not an IPv4 or IPv6 address")),
    {ok, L} = gen_tcp:listen(0, [inet6, {ip, {0, 0, 0, 0, 0, 0, 0, 1}}]),
    {ok, Closed} = inet:port(L),
    ok = gen_tcp:close(L),
    {3, Refused} = run(Config, "sluice-load", ["--host", "::1", "--port", itoa(Closed),
                                               "--duration", "0.2"], 5000),
    ?assertNotEqual(nomatch, string:find(Refused, "could not connect to [::1]:" ++ itoa(Closed))).

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

itoa(I) -> integer_to_list(I).

get(Map, Key) when is_atom(Key) -> maps:get(atom_to_binary(Key), Map).

json_path(Config) ->
    filename:join(?config(priv_dir, Config),
                  "load-" ++ itoa(erlang:unique_integer([positive]))
                  ++ ".json").

%% Run a binary to completion; stdout and stderr together.
run(Config, Name, Args, TimeoutMs) ->
    P = open_port({spawn_executable, bin(Config, Name)},
                  [{args, Args}, exit_status, binary, stderr_to_stdout,
                   hide]),
    case erlang:port_info(P, os_pid) of
        {os_pid, OsPid} -> sluice_load_test_lib:reap(Config, OsPid);
        _ -> ok
    end,
    collect(P, [], erlang:monotonic_time(millisecond) + TimeoutMs).

collect(P, Acc, Deadline) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {P, {data, D}} -> collect(P, [D | Acc], Deadline);
        {P, {exit_status, S}} ->
            {S, binary_to_list(iolist_to_binary(lists:reverse(Acc)))}
    after Left ->
            ct:fail({timeout, iolist_to_binary(lists:reverse(Acc))})
    end.

%% sluice-load with --json; returns {ExitStatus, DecodedJson}.
load(Config, Args) ->
    Json = json_path(Config),
    {Status, Out} = run(Config, "sluice-load",
                        ["--duration", ?RUN_S, "--json", Json | Args], 20000),
    ct:log("sluice-load ~s -> ~p~n~s", [lists:join(" ", Args), Status, Out]),
    {Status, read_json(Json)}.

%% load/2 under `ulimit Limit' (a shell that execs the engine).
load_limited(Config, Limit, Args) ->
    {Status, _Out, J} = load_limited_out(Config, Limit, Args),
    {Status, J}.

load_limited_out(Config, Limit, Args) ->
    Json = json_path(Config),
    P = open_port({spawn_executable, "/bin/sh"},
                  [{args, ["-c", "ulimit " ++ Limit ++ " && exec \"$0\" \"$@\"",
                           bin(Config, "sluice-load"), "--json", Json | Args]},
                   exit_status, binary, stderr_to_stdout, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    {Status, Out} = collect(P, [], erlang:monotonic_time(millisecond) + 20000),
    ct:log("ulimit ~s; sluice-load ~s -> ~p~n~s", [Limit, lists:join(" ", Args), Status, Out]),
    {Status, Out, read_json(Json)}.

load_ok(Config, Args) ->
    {0, J} = load(Config, Args),
    J.

read_json(Path) ->
    {ok, Bin} = file:read_file(Path),
    json_decode(Bin).

sane_traffic(J, MinMessages) ->
    ?assertEqual(0, get(J, errors)),
    Msgs = get(J, messages),
    ?assert(Msgs >= MinMessages, Msgs),
    ?assert(get(J, rate) > 0),
    ?assert(get(J, bytes) > 0),
    D = get(J, duration_s),
    ?assert(D > 0.8 andalso D < 2.0, D),
    L = get(J, latency_us),
    Ps = [get(L, K) || K <- [p50, p90, p99, p999, max]],
    ?assert(hd(Ps) > 0, Ps),
    ?assertEqual(Ps, lists:sort(Ps)),
    ?assert(get(L, samples) > 0).

%% Start sluice-ref on port 0; returns the port it listens on (a string).
start_ref(Config, Args) ->
    {_Port, TcpPort, _OsPid} = spawn_ref(Config, Args),
    itoa(TcpPort).

spawn_ref(Config, Args) ->
    P = open_port({spawn_executable, bin(Config, "sluice-ref")},
                  [{args, ["--ip", "127.0.0.1", "--port", "0" | Args]}, exit_status, binary,
                   {line, 256}, hide]),
    {os_pid, OsPid} = erlang:port_info(P, os_pid),
    sluice_load_test_lib:reap(Config, OsPid),
    receive
        {P, {data, {eol, <<"listening on ", Addr/binary>>}}} ->
            %% IP:PORT or [IPv6]:PORT (an --ip ::1 in Args)
            PortBin = lists:last(binary:split(Addr, <<":">>, [global])),
            {P, binary_to_integer(PortBin), OsPid};
        {P, {exit_status, S}} -> ct:fail({ref_exited, S})
    after 5000 -> ct:fail(ref_not_listening)
    end.

connect(Port) when is_list(Port) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, list_to_integer(Port),
                              [binary, {active, false}, {nodelay, true}]),
    S.

%% N frames with ids 1..N and payloads of 0..40 bytes.
frames(N) ->
    rand:seed(exsss, {1, 2, 3}),
    iolist_to_binary(
      [begin
           Len = rand:uniform(41) - 1,
           <<Id:64, Len:32, (binary:copy(<<"x">>, Len))/binary>>
       end || Id <- lists:seq(1, N)]).

%% Random pieces of 1..30 bytes, with pauses so that the server sees many
%% of them as separate reads.
send_in_pieces(_S, <<>>) -> ok;
send_in_pieces(S, Bin) ->
    K = min(byte_size(Bin), rand:uniform(30)),
    <<Piece:K/binary, Rest/binary>> = Bin,
    ok = gen_tcp:send(S, Piece),
    case rand:uniform(4) of
        1 -> timer:sleep(1);
        _ -> ok
    end,
    send_in_pieces(S, Rest).

%%% A small JSON decoder (OTP 25 has none): objects become maps with
%%% binary keys, numbers integers or floats.

json_decode(Bin) ->
    {V, Rest} = json_value(ws(Bin)),
    <<>> = ws(Rest),
    V.

ws(<<C, R/binary>>) when C =:= $\s; C =:= $\n; C =:= $\t; C =:= $\r -> ws(R);
ws(B) -> B.

json_value(<<${, R/binary>>) -> json_object(ws(R), #{});
json_value(<<$[, R/binary>>) -> json_array(ws(R), []);
json_value(<<$", R/binary>>) -> json_string(R, []);
json_value(<<"true", R/binary>>) -> {true, R};
json_value(<<"false", R/binary>>) -> {false, R};
json_value(<<"null", R/binary>>) -> {null, R};
json_value(B) -> json_number(B, []).

json_object(<<$}, R/binary>>, M) -> {M, R};
json_object(<<$", B/binary>>, M) ->
    {K, R1} = json_string(B, []),
    <<$:, R2/binary>> = ws(R1),
    {V, R3} = json_value(ws(R2)),
    case ws(R3) of
        <<$,, R4/binary>> -> json_object(ws(R4), M#{K => V});
        <<$}, R4/binary>> -> {M#{K => V}, R4}
    end.

json_array(<<$], R/binary>>, Acc) -> {lists:reverse(Acc), R};
json_array(B, Acc) ->
    {V, R1} = json_value(B),
    case ws(R1) of
        <<$,, R2/binary>> -> json_array(ws(R2), [V | Acc]);
        <<$], R2/binary>> -> {lists:reverse([V | Acc]), R2}
    end.

json_string(<<$", R/binary>>, Acc) ->
    {unicode:characters_to_binary(lists:reverse(Acc)), R};
json_string(<<$\\, $u, H:4/binary, R/binary>>, Acc) ->
    json_string(R, [binary_to_integer(H, 16) | Acc]);
json_string(<<$\\, C, R/binary>>, Acc) ->
    json_string(R, [case C of $n -> $\n; $t -> $\t; $r -> $\r;
                        $b -> $\b; $f -> $\f; _ -> C end | Acc]);
json_string(<<C/utf8, R/binary>>, Acc) -> json_string(R, [C | Acc]).

json_number(<<C, R/binary>>, Acc)
  when C >= $0, C =< $9; C =:= $-; C =:= $+; C =:= $.; C =:= $e; C =:= $E ->
    json_number(R, [C | Acc]);
json_number(R, Acc) ->
    S = lists:reverse(Acc),
    N = case lists:member($., S) of
            true -> list_to_float(S);
            false -> list_to_integer(S)
        end,
    {N, R}.
