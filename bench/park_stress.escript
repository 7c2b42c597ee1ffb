#!/usr/bin/env escript
%% -*- erlang -*-
%% bench/park_stress.escript: Pings around the park threshold, many of
%% them, counting the ones that go unanswered. A connection that parks
%% (`park_after') and wakes thousands of times a second has races no
%% single test meets often: the one fixed in sluice_conn:queued/0 lost
%% about 1 Ping in 100,000 (sluice_park_SUITE met it in some full CI runs).
%%
%% Each round starts an inet ping listener in this VM (hibernate_after 5,
%% park_after 10, as sluice_park_SUITE's threshold case), connects CLIENTS
%% clients, and each sends PINGS Pings one at a time, 0-25 ms apart at
%% random, waiting up to 3 s for each Pong. A Ping without its Pong is
%% lost: the round reports it with the server socket's state (owner,
%% active mode, bytes read and written). Exit 0 when nothing was lost,
%% 1 otherwise.
%%
%%   bench/park_stress.escript [CLIENTS [PINGS [ROUNDS]]]   (300 40 10)
%%
%% 300 x 40 x 10 is 120,000 Pings in about 8 s on a 2-core host. With
%% two busy loops beside it, `300 40 40' twice: the build before that fix
%% lost 3 and 3 Pings of 480,000, the fixed one 0 and 0 (bench/README.md,
%% "Parking under stress").
-mode(compile).

main(Args) ->
    [Clients, Pings, Rounds] = args(Args, [300, 40, 10]),
    Root = filename:dirname(filename:dirname(filename:absname(escript:script_name()))),
    Ebin = filename:join([Root, "_build", "default", "lib", "sluice", "ebin"]),
    filelib:is_dir(Ebin) orelse die("~s not built: run make", [Ebin]),
    true = code:add_patha(Ebin),
    {ok, _} = application:ensure_all_started(sluice),
    Lost = lists:sum([round(I, Rounds, Clients, Pings) || I <- lists:seq(1, Rounds)]),
    io:format("~b Pings lost of ~b~n", [Lost, Clients * Pings * Rounds]),
    halt(case Lost of 0 -> 0; _ -> 1 end).

args(Args, Defaults) ->
    length(Args) =< length(Defaults) orelse usage(),
    Given = [try list_to_integer(A) catch error:badarg -> usage() end || A <- Args],
    [N || N <- Given, N < 1] =:= [] orelse usage(),
    Given ++ lists:nthtail(length(Given), Defaults).

usage() ->
    io:format(standard_error, "usage: bench/park_stress.escript [CLIENTS [PINGS [ROUNDS]]]~n", []),
    halt(2).

die(Fmt, Args) ->
    io:format(standard_error, "park_stress: " ++ Fmt ++ "~n", Args),
    halt(2).

round(I, Rounds, Clients, Pings) ->
    Name = {park_stress, I},
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0, transport => inet,
                                            handler => {sluice_proto_ping, []},
                                            hibernate_after => 5, park_after => 10}),
    #{port := Port} = sluice:info(Name),
    Self = self(),
    Pids = [spawn_link(fun() -> client(Self, Port, Pings) end) || _ <- lists:seq(1, Clients)],
    Lost = lists:sum([receive {done, P, L} -> L after 120000 -> die("round ~b stuck", [I]) end
                      || P <- Pids]),
    #{parked := Parked} = sluice:info(Name),
    [P ! stop || P <- Pids],
    ok = sluice:stop_listener(Name),
    io:format("round ~b/~b: ~b Pings, ~b lost, ~b of ~b connections parked at the end~n",
              [I, Rounds, Clients * Pings, Lost, Parked, Clients]),
    Lost.

client(Parent, Port, Pings) ->
    {ok, S} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {nodelay, true}]),
    Lost = length([lost || _ <- lists:seq(1, Pings), ping(S) =:= lost]),
    Parent ! {done, self(), Lost},
    receive stop -> gen_tcp:close(S) end.

ping(S) ->
    timer:sleep(rand:uniform(26) - 1),
    ok = gen_tcp:send(S, <<"Ping\n">>),
    case gen_tcp:recv(S, 5, 3000) of
        {ok, <<"Pong\n">>} ->
            ok;
        Other ->
            describe(S, Other),
            %% The next Ping's recv may take this one's late Pong: drain
            %% what is there so that one loss is counted once.
            _ = gen_tcp:recv(S, 0, 100),
            lost
    end.

%% The server side of a client socket: its owner (a connection process,
%% or the conns_sup if parked), active mode and byte counts.
describe(S, Got) ->
    {ok, {_, Local}} = inet:sockname(S),
    Server = [P || P <- erlang:ports(), erlang:port_info(P, name) =:= {name, "tcp_inet"},
                   inet:peername(P) =:= {ok, {{127, 0, 0, 1}, Local}}],
    io:format("lost: client port ~b got ~p; server side ~p~n",
              [Local, Got, [{P, erlang:port_info(P, connected), inet:getopts(P, [active]),
                             inet:getstat(P, [recv_oct, send_oct])} || P <- Server]]).
