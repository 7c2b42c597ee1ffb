%% A persistent result timeout, `Timeout = {persistent, Ms}'
%% (sluice_conn_timeout): handle_timeout/1 after Ms without a callback,
%% for every later result without a Timeout, until `{persistent,
%% infinity}'; a plain Timeout for one result only.
-module(sluice_persistent_timeout_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([fires_after_quiet_and_again/1,
         does_not_fire_while_data_keeps_coming/1,
         plain_timeout_overrides_once/1,
         plain_infinity_overrides_once/1,
         cleared_by_persistent_infinity/1,
         replaced_by_another_persistent/1,
         set_with_a_reply_and_a_half_close/1,
         keeps_the_connection_from_parking/1]).

all() ->
    [{group, G} || {G, _, _} <- groups()].

groups() ->
    sluice_test_lib:backend_groups(cases())
        ++ [{park, [], [keeps_the_connection_from_parking]}].

cases() ->
    [fires_after_quiet_and_again,
     does_not_fire_while_data_keeps_coming,
     plain_timeout_overrides_once,
     plain_infinity_overrides_once,
     cleared_by_persistent_infinity,
     replaced_by_another_persistent,
     set_with_a_reply_and_a_half_close].

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

%%% Helpers -------------------------------------------------------------

listener(Config, Opts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, maps:merge(#{handler => {sluice_cmd_handler, self()},
                                                          framing => line},
                                                        Opts)),
    sluice_test_lib:port(Name).

connect(Config) ->
    connect(Config, #{}).

connect(Config, Opts) ->
    {ok, S} = sluice_test_lib:connect(listener(Config, Opts), [{exit_on_close, false}]),
    Pid = receive {init, P} -> P after 5000 -> error(no_init) end,
    {S, Pid}.

now_ms() ->
    erlang:monotonic_time(millisecond).

%% Send a command and wait until the handler has had it: the time it was
%% handled (no later than now).
command(S, Pid, Line) ->
    ok = gen_tcp:send(S, [Line, <<"\n">>]),
    receive {data, Pid, Line} -> now_ms() after 5000 -> error({not_handled, Line}) end.

%% The next handle_timeout/1: when it ran.
timeout(Pid) ->
    timeout(Pid, 5000).

timeout(Pid, Within) ->
    receive {timeout, Pid, At} -> At after Within -> error(no_timeout) end.

no_timeout(Pid, For) ->
    receive {timeout, Pid, _} = M -> error({unexpected, M}) after For -> ok end.

%%% Cases ---------------------------------------------------------------

%% After Ms without a callback: handle_timeout/1, whose result (no
%% Timeout) keeps the persistent one: again Ms later.
fires_after_quiet_and_again(Config) ->
    {S, Pid} = connect(Config),
    T0 = command(S, Pid, <<"persist 100">>),
    T1 = timeout(Pid),
    T2 = timeout(Pid),
    T3 = timeout(Pid),
    ?assert(T1 - T0 >= 100 - 1, {T0, T1}),
    ?assert(T2 - T1 >= 100, {T1, T2}),
    ?assert(T3 - T2 >= 100, {T2, T3}),
    ok = gen_tcp:send(S, <<"clear\n">>),
    ok = gen_tcp:close(S).

%% Results without a Timeout while the client keeps sending (every 40 ms,
%% for 600 ms, under a persistent 150): no timeout meanwhile (the first
%% one comes after the last command); once it stops, one after 150 ms.
does_not_fire_while_data_keeps_coming(Config) ->
    {S, Pid} = connect(Config),
    _ = command(S, Pid, <<"persist 150">>),
    Last = lists:foldl(fun(I, _) ->
                               timer:sleep(40),
                               command(S, Pid, <<"quiet ", (integer_to_binary(I))/binary>>)
                       end, 0, lists:seq(1, 15)),
    At = timeout(Pid),
    ?assert(At - Last >= 150 - 1, {Last, At}),
    ok = gen_tcp:send(S, <<"clear\n">>),
    ok = gen_tcp:close(S).

%% A plain Timeout (shorter than the persistent one) is that result's: it
%% fires after its 50 ms, then the persistent 400 resumes.
plain_timeout_overrides_once(Config) ->
    {S, Pid} = connect(Config),
    _ = command(S, Pid, <<"persist 400">>),
    T0 = command(S, Pid, <<"plain 50">>),
    T1 = timeout(Pid),
    ?assert(T1 - T0 < 350, {plain_not_applied, T0, T1}),
    T2 = timeout(Pid),
    ?assert(T2 - T1 >= 400, {persistent_not_resumed, T1, T2}),
    ok = gen_tcp:send(S, <<"clear\n">>),
    ok = gen_tcp:close(S).

%% `{ok, S, infinity}': no timeout after that result; the next result
%% without one has the persistent one again.
plain_infinity_overrides_once(Config) ->
    {S, Pid} = connect(Config),
    _ = command(S, Pid, <<"persist 100">>),
    _ = command(S, Pid, <<"infinity">>),
    ok = no_timeout(Pid, 400),
    T0 = command(S, Pid, <<"quiet">>),
    T1 = timeout(Pid),
    ?assert(T1 - T0 >= 100 - 1, {T0, T1}),
    ok = gen_tcp:send(S, <<"clear\n">>),
    ok = gen_tcp:close(S).

%% `{persistent, infinity}' clears it: no timeout after that result, nor
%% after later ones without a Timeout.
cleared_by_persistent_infinity(Config) ->
    {S, Pid} = connect(Config),
    _ = command(S, Pid, <<"persist 100">>),
    _ = timeout(Pid),
    _ = command(S, Pid, <<"clear">>),
    ok = no_timeout(Pid, 300),
    _ = command(S, Pid, <<"quiet">>),
    ok = no_timeout(Pid, 300),
    ok = gen_tcp:close(S).

%% A second `{persistent, Ms}' replaces the first, shorter or longer.
replaced_by_another_persistent(Config) ->
    {S, Pid} = connect(Config),
    _ = command(S, Pid, <<"persist 2000">>),
    T0 = command(S, Pid, <<"persist 60">>),
    T1 = timeout(Pid, 1000),
    ?assert(T1 - T0 >= 60 - 1, {T0, T1}),
    T2 = command(S, Pid, <<"persist 300">>),
    T3 = timeout(Pid),
    ?assert(T3 - T2 >= 300 - 1, {T2, T3}),
    ok = gen_tcp:send(S, <<"clear\n">>),
    ok = gen_tcp:close(S).

%% In a reply and in a half-close (reply_shutdown) too.
set_with_a_reply_and_a_half_close(Config) ->
    {S, Pid} = connect(Config),
    T0 = command(S, Pid, <<"persistreply hi 80">>),
    {ok, <<"hi\n">>} = gen_tcp:recv(S, 3, 5000),
    T1 = timeout(Pid),
    ?assert(T1 - T0 >= 80 - 1, {T0, T1}),
    T2 = command(S, Pid, <<"shutpersist bye 120">>),
    {ok, <<"bye\n">>} = gen_tcp:recv(S, 4, 5000),
    T3 = timeout(Pid),
    T4 = timeout(Pid),
    ?assert(T3 - T2 >= 120 - 1, {T2, T3}),
    ?assert(T4 - T3 >= 120, {T3, T4}),
    ok = gen_tcp:close(S),
    receive {handle_close, Pid} -> ok after 5000 -> error(no_close) end.

%% A connection with a persistent Timeout does not park (its timer fires in
%% its own process, as a plain Timeout's does): handle_timeout/1 runs in
%% the same pid past park_after. Cleared, it parks.
keeps_the_connection_from_parking(Config) ->
    Name = ?config(name, Config),
    {S, Pid} = connect(Config, #{transport => inet, hibernate_after => 20, park_after => 40}),
    _ = command(S, Pid, <<"persist 150">>),
    _ = timeout(Pid),
    _ = timeout(Pid),
    ?assertMatch(#{parked := 0}, sluice:info(Name)),
    ?assertEqual([Pid], sluice:connections(Name)),
    _ = command(S, Pid, <<"clear">>),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 3000),
    ok = gen_tcp:close(S).
