%% Drain without loss (issue 7, item 5): `bin/sluice serve' under pipelined
%% load from `bin/sluice load' (the C engine) and from Erlang clients that
%% check every ack, then SIGTERM. No new connection is accepted, every frame
%% the server read is acked before its connection closes, connections end
%% with FIN (not RST), the server exits 0 within the drain deadline, and a
%% new server binds the same port at once (seed 002's EADDRINUSE).
%%
%% "Every frame read is acked" is checked from the server's own counters:
%% with 17-byte frames and one 8-byte ack per frame, acks written x 17 / 8
%% must equal the bytes handed to the handlers, less at most one partial
%% frame per connection. sluice_cli_SUITE covers the idle drain.
-module(sluice_drain_load_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([sigterm_under_pipelined_load_loses_nothing/1]).

-define(PAYLOAD, 5).
-define(FRAME, 17).
-define(RAW_CLIENTS, 4).
-define(ENGINE_CONNS, 4).
-define(DRAIN_MS, 3000).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, inet}, {group, socket}].

%% The same drain on both backends (`serve --backend').
groups() ->
    [{B, [], [sigterm_under_pipelined_load_loses_nothing]} || B <- [inet, socket]].

init_per_group(Backend, Config) ->
    [{backend, atom_to_list(Backend)} | Config].

end_per_group(_Backend, _Config) ->
    ok.

init_per_suite(Config) ->
    sluice_load_test_lib:built_bin(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) ->
    sluice_load_test_lib:stop_reaper(Config).

serve(Config, Port) ->
    {P, OsPid} = sluice_load_test_lib:sluice(
                   Config,
                   ["serve", "--backend", ?config(backend, Config),
                    "--ip", "127.0.0.1", "--port", integer_to_list(Port), "--ack", "each",
                    "--drain-timeout", integer_to_list(?DRAIN_MS)]),
    {[TcpPort], _} = sluice_load_test_lib:wait_line(P, "^listening on [0-9.]+:([0-9]+)$", 15000),
    {P, OsPid, list_to_integer(TcpPort)}.

%% Four Erlang clients and four engine connections pipeline 17-byte frames;
%% after a second of load the server gets SIGTERM. Within a second connects
%% are refused; each Erlang client has its acks in order and then end of
%% stream (closed, not econnreset); the engine reports no reset and no
%% ack error; the server exits 0 within the 3 s drain deadline with acks for
%% every whole frame it read; a new server listens on the same port at once.
sigterm_under_pipelined_load_loses_nothing(Config) ->
    {Serve, OsPid, TcpPort} = serve(Config, 0),
    {Engine, _} = sluice_load_test_lib:sluice(
                    Config,
                    ["load", "--scenario", "pipeline", "--port", integer_to_list(TcpPort),
                     "--conns", integer_to_list(?ENGINE_CONNS), "--duration", "30",
                     "--payload", integer_to_list(?PAYLOAD), "--ack", "each", "--threads", "1",
                     "--window", "4096", "--batch", "256"]),
    Parent = self(),
    Raw = [spawn_link(fun() -> raw_client(Parent, TcpPort) end) || _ <- lists:seq(1, ?RAW_CLIENTS)],
    timer:sleep(1000),
    T0 = erlang:monotonic_time(millisecond),
    _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
    RefusedMs = refused_within(TcpPort, T0, 1000),
    Results = [receive {raw_done, C, R} -> R after 10000 -> {stuck, C} end || C <- Raw],
    {Status, Lines} = sluice_load_test_lib:wait_exit(Serve, ?DRAIN_MS + 5000),
    ExitMs = erlang:monotonic_time(millisecond) - T0,
    {EngineStatus, EngineLines} = sluice_load_test_lib:wait_exit(Engine, 5000),
    ct:log("refused after ~b ms; server exit ~p after ~b ms:~n~s~nraw clients ~p~n"
           "engine exit ~p:~n~s",
           [RefusedMs, Status, ExitMs, [[L, $\n] || L <- Lines], Results, EngineStatus,
            [[L, $\n] || L <- EngineLines]]),
    ?assertEqual(0, Status),
    ?assert(ExitMs < ?DRAIN_MS, {exit_ms, ExitMs}),
    %% FIN after in-order acks for every Erlang client.
    ?assertEqual([closed || _ <- Results], [End || {End, _} <- Results]),
    ?assert(lists:all(fun({_, N}) -> N > 0 end, Results)),
    %% The engine checks every ack; it must not have seen an error or a reset.
    %% (A FIN reads "closed by the server", an error adds its errno.)
    Bad = [L || L <- EngineLines,
                binary:match(L, [<<"protocol error">>, <<"closed by the server (">>]) =/= nomatch],
    ?assertEqual([], Bad),
    %% The server's own books: every whole frame read was acked.
    [DrainLine] = [L || L <- Lines, binary:match(L, <<"drained">>) =/= nomatch],
    {match, [Left, In, Out]} = re:run(DrainLine, "\\(([0-9]+) connections.*; ([0-9]+) bytes read, "
                                      "([0-9]+) bytes written", [{capture, all_but_first, list}]),
    {Acked, Read} = {list_to_integer(Out) div 8, list_to_integer(In)},
    ct:log("frames acked ~b, bytes read ~b (~b whole frames at most)", [Acked, Read, Read div ?FRAME]),
    ?assertEqual("0", Left),
    ?assertEqual(0, list_to_integer(Out) rem 8),
    ?assert(Acked =< Read div ?FRAME),
    ?assert(Acked > Read div ?FRAME - (?RAW_CLIENTS + ?ENGINE_CONNS), {acked, Acked, read, Read}),
    ?assert(lists:sum([N || {_, N} <- Results]) =< Acked),
    %% The port is free at once.
    {_Again, _, TcpPort} = serve(Config, TcpPort),
    ok.

%% Milliseconds after T0 at which a connect was first refused.
refused_within(TcpPort, T0, Max) ->
    case gen_tcp:connect({127, 0, 0, 1}, TcpPort, [], 1000) of
        {error, econnrefused} ->
            erlang:monotonic_time(millisecond) - T0;
        Other ->
            _ = case Other of {ok, S} -> gen_tcp:close(S); _ -> ok end,
            Ms = erlang:monotonic_time(millisecond) - T0,
            ?assert(Ms < Max, {still_accepting_after_ms, Ms}),
            timer:sleep(10),
            refused_within(TcpPort, T0, Max)
    end.

%%% ------------------------------------------------------------------
%%% An Erlang client that pipelines and checks every ack
%%% ------------------------------------------------------------------

raw_client(Parent, TcpPort) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, TcpPort, [binary, {active, false}, {nodelay, true}],
                              5000),
    Me = self(),
    _ = spawn_link(fun() -> send_loop(S, 1) end),
    Parent ! {raw_done, Me, recv_acks(S, 1, <<>>)}.

%% Batches of 64 frames with consecutive ids, as fast as the socket takes
%% them, until the socket is gone.
send_loop(S, Id) ->
    Batch = [<<I:64, ?PAYLOAD:32, "abcde">> || I <- lists:seq(Id, Id + 63)],
    case gen_tcp:send(S, Batch) of
        ok -> send_loop(S, Id + 64);
        {error, _} -> ok
    end.

%% Acks must be 1, 2, 3, ... with nothing skipped; returns how the
%% connection ended and how many frames were acked.
recv_acks(S, Next, Buf) ->
    case gen_tcp:recv(S, 0, 10000) of
        {ok, Data} ->
            case check(<<Buf/binary, Data/binary>>, Next) of
                {ok, Next2, Rest} -> recv_acks(S, Next2, Rest);
                {bad, Got} -> gen_tcp:close(S), {{wrong_ack, Got, expected, Next}, Next - 1}
            end;
        {error, Why} ->
            gen_tcp:close(S),
            {Why, Next - 1}
    end.

check(<<Id:64, Rest/binary>>, Id) -> check(Rest, Id + 1);
check(<<Other:64, _/binary>>, _Id) -> {bad, Other};
check(Rest, Id) -> {ok, Id, Rest}.
