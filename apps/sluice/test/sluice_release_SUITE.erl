%% sluice in an application stopped as a release stops: SIGTERM to the
%% VM (what systemd and Kubernetes send), which OTP turns into
%% init:stop/0, which stops every application, the user's first. The VM
%% is a peer of the test node with a user's application
%% (sluice_release_app) that embeds a listener; a release built with
%% `mix release' or `rebar3 release' differs only by its boot script
%% (docs/release.md has those runs, by hand).
-module(sluice_release_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_testcase/2, end_per_testcase/2]).
-export([sigterm_drains_with_the_drain_child/1,
         sigterm_without_the_drain_child_closes_at_once/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [sigterm_drains_with_the_drain_child, sigterm_without_the_drain_child_closes_at_once].

%% The peer is started here so that end_per_testcase/2 stops it when a
%% case fails before its SIGTERM (one that got it has exited already).
init_per_testcase(_Case, Config) ->
    [{peer, sluice_test_lib:start_peer(1024, [])} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_peer(?config(peer, Config)),
    ok.

%% With sluice:drain_child_spec/2 after the listener, SIGTERM drains it
%% before the application's supervisor stops it: the client gets the
%% handler's goodbye on a connection still served, and once it closes,
%% the VM exits (well before the drain's 10 s deadline).
sigterm_drains_with_the_drain_child(Config) ->
    Peer = ?config(peer, Config),
    {OsPid, Sock} = start(Peer, drain),
    sigterm(OsPid),
    ?assertEqual({ok, <<"bye\n">>}, gen_tcp:recv(Sock, 0, 10000)),
    %% drained and still served until the client goes
    ok = gen_tcp:send(Sock, <<"still there\n">>),
    ?assertEqual({ok, <<"still there\n">>}, gen_tcp:recv(Sock, 0, 5000)),
    ok = gen_tcp:close(Sock),
    wait_gone(Peer, 8000).

%% Without it (the default), the same SIGTERM shuts the connection down
%% at once: no goodbye, a FIN (no reset), and the VM exits without
%% waiting for the client.
sigterm_without_the_drain_child_closes_at_once(Config) ->
    Peer = ?config(peer, Config),
    {OsPid, Sock} = start(Peer, no_drain),
    sigterm(OsPid),
    ?assertEqual({error, closed}, gen_tcp:recv(Sock, 0, 10000)),
    wait_gone(Peer, 15000),
    gen_tcp:close(Sock).

%% sluice_release_app started in the peer VM, and a client connected to
%% its listener that has had one answer.
start(Peer, Drain) ->
    ok = peer:call(Peer, application, load, [sluice_release_app:spec(Drain)]),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [sluice_release_app]),
    #{port := Port} = peer:call(Peer, sluice, info, [sluice_release_app]),
    OsPid = peer:call(Peer, os, getpid, []),
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}], 5000),
    ok = gen_tcp:send(Sock, <<"hello\n">>),
    {ok, <<"hello\n">>} = gen_tcp:recv(Sock, 0, 5000),
    {OsPid, Sock}.

sigterm(OsPid) ->
    "" = os:cmd("kill -TERM " ++ OsPid).

%% The peer's VM has exited: its controlling process goes down with the
%% connection.
wait_gone(Peer, Timeout) ->
    MRef = erlang:monitor(process, Peer),
    receive {'DOWN', MRef, process, Peer, _} -> ok
    after Timeout -> error(peer_vm_still_running)
    end.
