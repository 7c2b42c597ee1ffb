%% Connect storms: a listener takes connections as fast as clients open
%% them, and when the kernel does drop some, info/1 shows it.
-module(sluice_storm_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([listen_queue_overflow_shows_in_info/1,
         reconnect_storm_is_taken_without_syn_retransmits/1,
         accept_queues_hold_three_backlogs_while_nothing_is_accepted/1,
         default_backlog_is_the_kernels_cap/1]).

-define(LOOPBACK, {127, 0, 0, 1}).
%% Connections of the storm: held, closed and reopened at once.
-define(STORM, 2000).
%% A connect that took this long waited for a SYN retransmit (Linux's first
%% is after one second).
-define(RETRANSMIT_MS, 900).
%% The backlog of the accept-queue case: small enough that three of them
%% are few descriptors and a second's connects.
-define(QUEUE_BACKLOG, 1024).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [default_backlog_is_the_kernels_cap, {group, inet}, {group, socket}].

groups() ->
    sluice_test_lib:backend_groups([listen_queue_overflow_shows_in_info,
                                    reconnect_storm_is_taken_without_syn_retransmits,
                                    accept_queues_hold_three_backlogs_while_nothing_is_accepted]).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% Cases

%% With its only acceptor held, a listener with a backlog of 1 cannot take
%% a burst of connects: the kernel drops some at the listen queue, and
%% info/1's `kernel' counters (host-wide) move. (Some clients believe they
%% are connected while the kernel dropped their final ACK: that is what the
%% counter tells a user about.) Once the acceptor runs again, the listener
%% serves new clients.
listen_queue_overflow_shows_in_info(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ping, []},
                                               num_acceptors => 1, backlog => 1}),
    Port = sluice_test_lib:port(Name),
    #{kernel := #{listen_overflows := Before}} = sluice:info(Name),
    [Acceptor] = sluice_test_lib:acceptor_pids(Name),
    true = erlang:suspend_process(Acceptor),
    Self = self(),
    Clients = [spawn_link(fun() -> Self ! {self(), gen_tcp:connect(?LOOPBACK, Port,
                                                                   [binary, {active, false}],
                                                                   300)}
                          end) || _ <- lists:seq(1, 20)],
    Results = [receive {C, R} -> R after 5000 -> error(stuck) end || C <- Clients],
    #{kernel := #{listen_overflows := After}} = sluice:info(Name),
    ct:log("overflows ~b -> ~b; connects: ~p", [Before, After, Results]),
    ?assert(After > Before),
    ?assert(lists:any(fun({error, timeout}) -> true; (_) -> false end, Results)),
    true = erlang:resume_process(Acceptor),
    [gen_tcp:close(S) || {ok, S} <- Results],
    {ok, Fresh} = sluice_test_lib:connect(Port),
    ?assert(sluice_test_lib:ping_sock(Fresh)),
    ok = gen_tcp:close(Fresh).

%% ?STORM connections are opened and held, closed by their clients, and
%% reopened all at once (one process per client): every one is served and
%% none waited for a SYN retransmit.
reconnect_storm_is_taken_without_syn_retransmits(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ping, []}}),
    Port = sluice_test_lib:port(Name),
    First = storm(Port),
    ?assertEqual([], [R || R <- First, element(1, R) =/= ok]),
    ok = sluice_test_lib:wait_info(Name, connections, ?STORM, 10000),
    [gen_tcp:close(S) || {ok, S, _} <- First],
    ok = sluice_test_lib:wait_info(Name, connections, 0, 10000),
    #{kernel := K0} = sluice:info(Name),
    T0 = erlang:monotonic_time(millisecond),
    Second = storm(Port),
    Ms = erlang:monotonic_time(millisecond) - T0,
    #{kernel := K1} = sluice:info(Name),
    Slowest = lists:max([T || {ok, _, T} <- Second]),
    ct:log("~b reconnected in ~b ms; slowest connect + Pong ~b ms; kernel ~p -> ~p",
           [length(Second), Ms, Slowest, K0, K1]),
    ?assertEqual([], [R || R <- Second, element(1, R) =/= ok]),
    ?assert(Slowest < ?RETRANSMIT_MS, Slowest),
    [gen_tcp:close(S) || {ok, S, _} <- Second],
    ok = sluice_test_lib:wait_info(Name, connections, 0, 10000).

%% In a storm the old connections' closes can keep the acceptors from
%% accepting for a while, and the kernel's accept queues must hold the wave
%% meanwhile: a listener has four listen sockets by default, four queues.
%% With every acceptor stopped, three backlogs' worth of clients all get
%% connected (two queues would drop SYNs after two backlogs, and the next
%% connect would wait a second for a retransmit); once the acceptors run
%% again every one is accepted, none lost.
accept_queues_hold_three_backlogs_while_nothing_is_accepted(Config) ->
    Name = ?config(name, Config),
    Backlog = min(?QUEUE_BACKLOG, sluice_opts:default_backlog()),
    _ = sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_ping, []},
                                               backlog => Backlog}),
    Port = sluice_test_lib:port(Name),
    #{accepted := Accepted0} = sluice:info(Name),
    Acceptors = sluice_test_lib:acceptor_pids(Name),
    [true = erlang:suspend_process(A) || A <- Acceptors],
    N = 3 * Backlog,
    {Socks, Failed} = connect_all(Port, N, []),
    ct:log("~b of ~b connected with no acceptor running; first failure: ~p",
           [length(Socks), N, Failed]),
    [gen_tcp:close(S) || S <- Socks],
    [true = erlang:resume_process(A) || A <- Acceptors],
    ?assertEqual(none, Failed),
    %% The inet driver accepted one for each acceptor already waiting in
    %% accept, into its mailbox; the rest wait in the queues: all N are
    %% counted once the acceptors run.
    ok = sluice_test_lib:wait_until(
           fun() -> maps:get(accepted, sluice:info(Name)) - Accepted0 >= N end, 10000),
    ok = sluice_test_lib:wait_info(Name, connections, 0, 10000).

%% The listen backlog a listener gets unless it sets one: the kernel's own
%% cap (net.core.somaxconn), where a smaller one would overflow first.
default_backlog_is_the_kernels_cap(_Config) ->
    {ok, Text} = file:read_file("/proc/sys/net/core/somaxconn"),
    Cap = binary_to_integer(string:trim(Text)),
    ?assertEqual(min(Cap, 65535), maps:get(backlog, sluice_opts:defaults())),
    ?assertEqual(min(Cap, 65535), sluice_opts:default_backlog()).

%%% Helpers

%% N connects one after another, each given less than a SYN retransmit;
%% stops at the first that fails: {Socks, none | {Index, Error}}.
connect_all(_Port, 0, Socks) ->
    {Socks, none};
connect_all(Port, N, Socks) ->
    case gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}], ?RETRANSMIT_MS) of
        {ok, S} -> connect_all(Port, N - 1, [S | Socks]);
        Error -> {Socks, {length(Socks) + 1, Error}}
    end.

%% ?STORM clients at once, each connecting and pinging: {ok, Sock, Ms}
%% (connect and Pong took Ms) or {error, Why}. Sockets end up owned by the
%% caller.
storm(Port) ->
    Self = self(),
    Pids = [spawn_link(fun() -> Self ! {self(), client(Port, Self)} end)
            || _ <- lists:seq(1, ?STORM)],
    [receive {P, R} -> R after 30000 -> error({stuck, P}) end || P <- Pids].

client(Port, Owner) ->
    T0 = erlang:monotonic_time(millisecond),
    case gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}], 5000) of
        {ok, S} ->
            ok = gen_tcp:send(S, <<"Ping\n">>),
            case gen_tcp:recv(S, 5, 5000) of
                {ok, <<"Pong\n">>} ->
                    Ms = erlang:monotonic_time(millisecond) - T0,
                    ok = gen_tcp:controlling_process(S, Owner),
                    {ok, S, Ms};
                Other ->
                    {error, Other}
            end;
        Error ->
            Error
    end.
