%% info/1's figures against what happened: every accepted connection
%% ends counted in `closed' and in exactly one of `close_reasons', however
%% it ends (here: with a killed connection supervisor, and with a handler
%% that calls exit(normal)); and the telemetry stop event of a connection
%% that parked covers its whole life, as the start event's time says.
%%
%% This module is also the handler of its listeners: an echo that calls
%% exit(normal) on `exit-normal'.
-module(sluice_figures_SUITE).
-behaviour(sluice_handler).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([killed_conns_sup_counts_its_connections_closed/1,
         killed_conns_sup_counts_its_parked_connections_closed/1,
         handler_exit_normal_is_counted_as_crashed/1,
         stop_event_of_a_parked_connection_covers_its_whole_life/1]).
%% the handler
-export([init/2, handle_data/2]).

-define(WAIT, 5000).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket},
     %% parking is inet's only
     killed_conns_sup_counts_its_parked_connections_closed,
     stop_event_of_a_parked_connection_covers_its_whole_life].

groups() ->
    sluice_test_lib:backend_groups([killed_conns_sup_counts_its_connections_closed,
                                    handler_exit_normal_is_counted_as_crashed]).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    {module, telemetry} = code:ensure_loaded(telemetry),
    true = sluice_telemetry:refresh(),
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
    ok = telemetry:stop_forwarding(),
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% The handler -------------------------------------------------------

init(_Conn, _Opts) ->
    {ok, none}.

handle_data(<<"exit-normal">>, _State) ->
    exit(normal);
handle_data(Data, State) ->
    {reply, Data, State}.

%%% Cases -------------------------------------------------------------

%% A killed connection supervisor takes its connections with it: they are
%% no longer live, and each is counted closed (as `crashed', as a killed
%% connection process is), so that accepted = closed + live and the close
%% reasons add up to closed. (Until 2026-11 they left `connections' and
%% were counted nowhere: accepted 10, closed 0.)
killed_conns_sup_counts_its_connections_closed(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, []}, num_conns_sups => 1}),
    Socks = echoed(sluice_test_lib:port(Name), 10),
    ok = sluice_test_lib:wait_info(Name, connections, 10, ?WAIT),
    [Sup] = sluice_test_lib:conns_sups(Name),
    exit(Sup, kill),
    [ok = sluice_test_lib:expect_closed(S, ?WAIT) || S <- Socks],
    ok = sluice_test_lib:wait_info(Name, connections, 0, ?WAIT),
    ok = sluice_test_lib:wait_until(fun() -> sluice_test_lib:conns_sups(Name) =/= [Sup] end,
                                    ?WAIT),
    assert_figures(Name, 10, #{crashed => 10}),
    %% and the restarted supervisor counts as before
    [S2] = echoed(sluice_test_lib:port(Name), 1),
    ok = gen_tcp:close(S2),
    ok = sluice_test_lib:wait_info(Name, connections, 0, ?WAIT),
    assert_figures(Name, 11, #{crashed => 10, peer_closed => 1}).

%% The same with parked connections (no process; their sockets are closed
%% by the registry when their supervisor dies).
killed_conns_sup_counts_its_parked_connections_closed(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, []}, transport => inet,
                                           num_conns_sups => 1, park_after => 50,
                                           hibernate_after => 20}),
    Socks = echoed(sluice_test_lib:port(Name), 6),
    ok = sluice_test_lib:wait_info(Name, parked, 6, ?WAIT),
    [Sup] = sluice_test_lib:conns_sups(Name),
    exit(Sup, kill),
    [ok = sluice_test_lib:expect_closed(S, ?WAIT) || S <- Socks],
    ok = sluice_test_lib:wait_info(Name, connections, 0, ?WAIT),
    ?assertMatch(#{parked := 0}, sluice:info(Name)),
    assert_figures(Name, 6, #{crashed => 6}).

%% A handler that calls exit(normal) ends its connection as a raise does
%% (handle_error/2, terminate/2, the stop event), but the process ends
%% normally, so its supervisor counts no crash: the connection is counted
%% `crashed' by the connection itself. (Until 2026-11 it was closed with
%% no close reason: the reasons added up to one less than closed.)
handler_exit_normal_is_counted_as_crashed(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, []}}),
    [S] = echoed(sluice_test_lib:port(Name), 1),
    ok = gen_tcp:send(S, <<"exit-normal">>),
    ok = sluice_test_lib:expect_closed(S, ?WAIT),
    ok = sluice_test_lib:wait_info(Name, closed, 1, ?WAIT),
    assert_figures(Name, 1, #{crashed => 1}).

%% The start event's monotonic_time is the stop event's monotonic_time
%% less its duration (sluice_telemetry), for a connection that parked and
%% woke too: the process that ends it is not the one that started it.
%% (Until 2026-11 the duration ran from the last wake only.)
stop_event_of_a_parked_connection_covers_its_whole_life(Config) ->
    Name = ?config(name, Config),
    true = telemetry:forward_to_me(),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, []}, transport => inet,
                                           park_after => 50, hibernate_after => 20}),
    [S] = echoed(sluice_test_lib:port(Name), 1),
    Started = receive
                  {telemetry, [sluice, connection, start], #{monotonic_time := T0},
                   #{listener := Name}} -> T0
              after ?WAIT -> ct:fail(no_start_event)
              end,
    ok = sluice_test_lib:wait_info(Name, parked, 1, ?WAIT),
    ok = gen_tcp:send(S, <<"again">>),
    {ok, <<"again">>} = gen_tcp:recv(S, 5, ?WAIT),
    ok = sluice_test_lib:wait_info(Name, parked, 1, ?WAIT),
    ok = gen_tcp:close(S),
    receive
        {telemetry, [sluice, connection, stop], #{duration := D, monotonic_time := T1},
         #{listener := Name, reason := closed}} ->
            ?assertEqual(Started, T1 - D)
    after ?WAIT -> ct:fail(no_stop_event)
    end,
    assert_figures(Name, 1, #{peer_closed => 1}).

%%% Helpers -----------------------------------------------------------

%% N connections, each answered once.
echoed(Port, N) ->
    [begin
         {ok, S} = sluice_test_lib:connect(Port),
         ok = gen_tcp:send(S, <<"hi">>),
         {ok, <<"hi">>} = gen_tcp:recv(S, 2, ?WAIT),
         S
     end || _ <- lists:seq(1, N)].

%% With no connection left: Accepted accepted, all closed, and the close
%% reasons exactly Reasons (the others 0).
assert_figures(Name, Accepted, Reasons) ->
    #{accepted := A, closed := C, connections := L, close_reasons := CR} = sluice:info(Name),
    ?assertEqual({Accepted, Accepted, 0}, {A, C, L}),
    ?assertEqual(Reasons, maps:filter(fun(_, V) -> V > 0 end, CR)),
    ?assertEqual(C, lists:sum(maps:values(CR))).
