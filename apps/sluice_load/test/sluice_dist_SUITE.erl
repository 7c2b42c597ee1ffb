%% `serve --nodes' and `load --nodes' make the CLI's VM a distributed node
%% (sluice_dist): epmd started when none answers, and waited for; when
%% distribution still cannot start, one line and exit 1, no OTP report on
%% the terminal.
%%
%% Every case gives the command a private epmd port (ERL_EPMD_PORT in its
%% environment): a stand-in epmd served by this VM, or a free port where
%% the command starts a real epmd, killed at the end. The host's epmd on
%% 4369, which other suites use, is never touched.
%%
%% Needs `make build' (bin/sluice runs _build/default).
-module(sluice_dist_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([serve_with_an_epmd_that_does_not_answer_is_one_line/1,
         load_with_an_epmd_that_does_not_answer_is_one_line/1,
         a_taken_node_name_is_one_line/1,
         the_epmd_the_command_starts_is_waited_for/1,
         an_epmd_not_answering_yet_is_waited_for/1,
         an_epmd_port_that_is_not_a_port_is_one_line/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [serve_with_an_epmd_that_does_not_answer_is_one_line,
     load_with_an_epmd_that_does_not_answer_is_one_line,
     a_taken_node_name_is_one_line,
     the_epmd_the_command_starts_is_waited_for,
     an_epmd_not_answering_yet_is_waited_for,
     an_epmd_port_that_is_not_a_port_is_one_line].

init_per_suite(Config) ->
    sluice_load_test_lib:built_bin(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) ->
    sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% Something on the epmd port that accepts and closes (as an epmd that
%% is not up yet, or not epmd): the command waits for it, then says in one
%% line that epmd does not answer, and where. It printed an INFO REPORT, a
%% SUPERVISOR REPORT and a 12-line tuple.
serve_with_an_epmd_that_does_not_answer_is_one_line(Config) ->
    {EpmdPort, Fake} = fake_epmd(close),
    try
        {Status, Lines} = run(Config, ["serve", "--nodes", "1", "--port", "0",
                                       "--protocol", "ping"], EpmdPort),
        one_line(Status, Lines, "epmd on 127.0.0.1:" ++ integer_to_list(EpmdPort)
                 ++ " does not answer")
    after
        exit(Fake, kill)
    end.

%% The same for `load --nodes' (sluice_load_nodes), which starts
%% distribution through the same function.
load_with_an_epmd_that_does_not_answer_is_one_line(Config) ->
    {EpmdPort, Fake} = fake_epmd(close),
    try
        {Status, Lines} = run(Config, ["load", "--scenario", "ping", "--nodes", "2",
                                       "--port", "1", "--duration", "1"], EpmdPort),
        one_line(Status, Lines, "epmd on 127.0.0.1:" ++ integer_to_list(EpmdPort)
                 ++ " does not answer")
    after
        exit(Fake, kill)
    end.

%% An epmd that answers, but has the name registered already: net_kernel
%% fails with reports only (the cause is in them, not in its return),
%% which are kept off the terminal and read for the one line.
a_taken_node_name_is_one_line(Config) ->
    {EpmdPort, Fake} = fake_epmd(taken),
    try
        [begin
             {Status, Lines} = run(Config, Args, EpmdPort),
             one_line(Status, Lines, "is taken: another node registered it with epmd on "
                      "127.0.0.1:" ++ integer_to_list(EpmdPort))
         end || Args <- [["serve", "--nodes", "1", "--port", "0", "--protocol", "ping"],
                         ["load", "--scenario", "ping", "--nodes", "1", "--port", "1",
                          "--duration", "1"]]]
    after
        exit(Fake, kill)
    end.

%% No epmd on the port yet: the command starts one there (on
%% ERL_EPMD_PORT's port) and waits until it answers before it registers,
%% then serves. Registering right after `epmd -daemon' returned lost the
%% race at times (register/listen error: econnrefused, exit 1).
the_epmd_the_command_starts_is_waited_for(Config) ->
    EpmdPort = free_port(),
    try
        {Port, OsPid} = sluice_load_test_lib:sluice(
                          Config, ["serve", "--nodes", "1", "--ip", "127.0.0.1", "--port", "0",
                                   "--protocol", "ping"],
                          [{"ERL_EPMD_PORT", integer_to_list(EpmdPort)}]),
        {_, Before} = sluice_load_test_lib:wait_line(Port, "^listening on ", 30000),
        %% the epmd it started runs on that port
        ?assertMatch({ok, _}, epmd_names(EpmdPort)),
        ok = sluice_load_test_lib:signal("TERM", OsPid),
        {Status, After} = sluice_load_test_lib:wait_exit(Port, 30000),
        ct:log("~p~n~s", [Status, [[L, $\n] || L <- Before ++ After]]),
        ?assertEqual(0, Status),
        ?assertEqual([], [L || L <- Before ++ After, binary:match(L, <<"REPORT">>) =/= nomatch])
    after
        kill_epmd(EpmdPort)
    end,
    ?assertMatch({error, _}, epmd_names(EpmdPort)).

%% The race itself, made certain: the epmd port is held by something that
%% accepts and closes (an epmd not ready yet) until the command's first
%% connection there, and an epmd is then started on it by this case. The
%% command waits for it and serves; it registered at once, was closed on,
%% and exited 1.
an_epmd_not_answering_yet_is_waited_for(Config) ->
    {EpmdPort, Fake} = fake_epmd({close_once, self()}),
    try
        {Port, OsPid} = sluice_load_test_lib:sluice(
                          Config, ["serve", "--nodes", "1", "--ip", "127.0.0.1", "--port", "0",
                                   "--protocol", "ping"],
                          [{"ERL_EPMD_PORT", integer_to_list(EpmdPort)}]),
        receive {fake_epmd_closed, Fake} -> ok after 30000 -> error(no_connection_to_epmd) end,
        _ = os:cmd("ERL_EPMD_PORT=" ++ integer_to_list(EpmdPort) ++ " " ++ epmd() ++ " -daemon"),
        {_, Before} = sluice_load_test_lib:wait_line(Port, "^listening on ", 30000),
        ok = sluice_load_test_lib:signal("TERM", OsPid),
        {Status, After} = sluice_load_test_lib:wait_exit(Port, 30000),
        ct:log("~p~n~s", [Status, [[L, $\n] || L <- Before ++ After]]),
        ?assertEqual(0, Status)
    after
        exit(Fake, kill),
        kill_epmd(EpmdPort)
    end.

%% ERL_EPMD_PORT that erl passes on but is no port: one line naming it
%% (it was an internal error with a stack trace).
an_epmd_port_that_is_not_a_port_is_one_line(Config) ->
    [begin
         {Port, _} = sluice_load_test_lib:sluice(Config, ["serve", "--nodes", "1", "--port", "0",
                                                          "--protocol", "ping"],
                                                 [{"ERL_EPMD_PORT", Bad}]),
         {Status, Lines} = sluice_load_test_lib:wait_exit(Port, 30000),
         one_line(Status, Lines, "ERL_EPMD_PORT (or -epmd_port) is " ++ Bad ++ ", not a port")
     end || Bad <- ["4369x", "70000"]].

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

run(Config, Args, EpmdPort) ->
    {Port, _} = sluice_load_test_lib:sluice(Config, Args,
                                            [{"ERL_EPMD_PORT", integer_to_list(EpmdPort)}]),
    sluice_load_test_lib:wait_exit(Port, 40000).

%% Exit 1, and the whole output one line: "sluice: cannot start Erlang
%% distribution: " with `Says' in it.
one_line(Status, Lines, Says) ->
    ct:log("~p~n~s", [Status, [[L, $\n] || L <- Lines]]),
    ?assertEqual(1, Status),
    ?assertMatch([<<"sluice: cannot start Erlang distribution: ", _/binary>>], Lines),
    ?assertNotEqual(nomatch, binary:match(hd(Lines), list_to_binary(Says))),
    ?assertEqual(nomatch, binary:match(hd(Lines), <<"REPORT">>)).

%% A stand-in epmd on a free loopback port, served by a process of this
%% VM: `close' closes every connection at once (`close_once' the first,
%% and stops listening); `taken' answers the names
%% request (as epmd does, its port first) and refuses every registration
%% as a name already in use (ALIVE2_RESP with a non-zero result).
fake_epmd(Mode) ->
    Self = self(),
    Pid = spawn(fun() ->
                        {ok, L} = gen_tcp:listen(0, [binary, {ip, {127, 0, 0, 1}}, {packet, 2},
                                                     {active, false}, {reuseaddr, true}]),
                        {ok, P} = inet:port(L),
                        Self ! {fake_epmd, self(), P},
                        accept(L, Mode)
                end),
    receive {fake_epmd, Pid, P} -> {P, Pid} after 5000 -> error(no_fake_epmd) end.

%% ({close_once, To}: the listening socket goes with the first
%% connection, and To is told)
accept(L, {close_once, To}) ->
    {ok, S} = gen_tcp:accept(L),
    ok = gen_tcp:close(S),
    ok = gen_tcp:close(L),
    To ! {fake_epmd_closed, self()};
accept(L, Mode) ->
    {ok, S} = gen_tcp:accept(L),
    _ = case Mode of
            close -> ok;
            taken -> answer(S, gen_tcp:recv(S, 0, 5000))
        end,
    _ = gen_tcp:close(S),
    accept(L, Mode).

answer(S, {ok, <<$n>>}) ->
    {ok, P} = inet:port(S),
    ok = inet:setopts(S, [{packet, raw}]),
    gen_tcp:send(S, <<P:32>>);
answer(S, {ok, <<$x, _/binary>>}) ->
    ok = inet:setopts(S, [{packet, raw}]),
    _ = gen_tcp:send(S, <<$y, 1, 0:16>>),
    %% a registration is held as long as its connection is open
    gen_tcp:recv(S, 0, 5000);
answer(_S, _Other) ->
    ok.

%% A port that nothing listens on (bound, then released).
free_port() ->
    {ok, L} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]),
    {ok, P} = inet:port(L),
    ok = gen_tcp:close(L),
    P.

epmd_names(Port) ->
    Out = os:cmd("ERL_EPMD_PORT=" ++ integer_to_list(Port) ++ " " ++ epmd() ++ " -names 2>&1"),
    case string:find(Out, "up and running on port " ++ integer_to_list(Port)) of
        nomatch -> {error, Out};
        _ -> {ok, Out}
    end.

%% The epmd a case started, and only that one: its own port.
kill_epmd(Port) ->
    _ = os:cmd("ERL_EPMD_PORT=" ++ integer_to_list(Port) ++ " " ++ epmd() ++ " -kill 2>&1"),
    ok.

epmd() ->
    filename:join([code:root_dir(), "erts-" ++ erlang:system_info(version), "bin", "epmd"]).
