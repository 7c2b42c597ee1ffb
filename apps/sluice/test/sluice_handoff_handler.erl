%% The handler of sluice_handoff_SUITE: a line (or chunk) protocol whose
%% `UPGRADE' hands the connection to a taker process (taker/1), which
%% echoes every byte it gets (the hand-off's Buffered first, then what it
%% reads from the socket itself) and reports to the test. Opts: the test
%% process.
%%
%% `PING' -> `PONG\n'; `UPGRADE' -> `101\n' and the hand-off;
%% `RECV-UPGRADE' -> tells the test `{recving, self()}', reads 3 bytes with
%% sluice:recv/3, answers them and `101\n' and hands off;
%% `UPGRADE-DEAD' -> a hand-off to a process that is gone; `WAIT-UPGRADE'
%% -> tells the test `{upgrading, self()}' and hands off once it says
%% `go' (the test puts bytes in the connection's mailbox meanwhile);
%% `UNCOUNT' -> sluice:remove_connection/1 (twice: the second is a
%% no-op), `uncounted\n'; `UPGRADE-SELF' -> a hand-off to the
%% connection's own process; `STARTTLS' -> `go\n' and an upgrade to TLS;
%% `SEND' -> sluice:send/2 of `sent\n', then the
%% reply `replied\n'; `DRAIN-HANDOFF' -> handle_drain/1 will answer
%% with a hand-off. A message `{handoff_now, Reply}' hands off from
%% handle_info/2.
-module(sluice_handoff_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_info/2, handle_drain/1, terminate/2]).
-export([taker/1, upgrade/2]).

init(Conn, Test) ->
    {ok, #{test => Test, conn => Conn}}.

handle_data(Data, S) ->
    upgrade(Data, S).

%% Shared with sluice_handoff_park_handler.
upgrade(<<"PING">>, S) ->
    {reply, <<"PONG\n">>, S};
upgrade(<<"PING\n">>, S) ->
    {reply, <<"PONG\n">>, S};
upgrade(<<"UPGRADE", _/binary>> = Data, S = #{test := Test})
  when Data =:= <<"UPGRADE">>; Data =:= <<"UPGRADE\n">> ->
    {handoff, <<"101\n">>, spawn_taker(Test), S};
upgrade(<<"RECV-UPGRADE">>, S = #{test := Test, conn := Conn}) ->
    Test ! {recving, self()},
    {ok, Got} = sluice:recv(Conn, 3, 5000),
    {handoff, [Got, <<"\n101\n">>], spawn_taker(Test), S};
upgrade(<<"UPGRADE-DEAD">>, S) ->
    Dead = spawn(fun() -> ok end),
    Ref = monitor(process, Dead),
    receive {'DOWN', Ref, _, _, _} -> ok end,
    {handoff, <<"101\n">>, Dead, S};
upgrade(<<"WAIT-UPGRADE">>, S = #{test := Test}) ->
    Test ! {upgrading, self()},
    receive go -> ok end,
    {handoff, <<"101\n">>, spawn_taker(Test), S};
upgrade(<<"STARTTLS">>, S) ->
    {starttls, <<"go\n">>, S};
upgrade(<<"UPGRADE-SELF">>, S) ->
    {handoff, <<"101\n">>, self(), S};
upgrade(<<"SEND">>, S = #{conn := Conn}) ->
    ok = sluice:send(Conn, <<"sent\n">>),
    {reply, <<"replied\n">>, S};
upgrade(<<"DRAIN-HANDOFF">>, S) ->
    {reply, <<"ok\n">>, S#{drain_handoff => true}};
upgrade(<<"UNCOUNT">>, S = #{conn := Conn}) ->
    ok = sluice:remove_connection(Conn),
    ok = sluice:remove_connection(Conn),
    {reply, <<"uncounted\n">>, S};
upgrade(Other, S) ->
    {reply, [<<"ECHO ">>, Other, $\n], S}.

handle_info({handoff_now, Reply}, S = #{test := Test}) ->
    {handoff, Reply, spawn_taker(Test), S};
handle_info(_Msg, S) ->
    {ok, S}.

%% Not a result handle_drain/1 may return: the connection crashes.
handle_drain(S = #{drain_handoff := true, test := Test}) ->
    {handoff, <<"101\n">>, spawn_taker(Test), S};
handle_drain(S) ->
    {close, drained, S}.

terminate(Reason, #{test := Test}) ->
    Test ! {terminated, self(), Reason},
    ok.

spawn_taker(Test) ->
    spawn(?MODULE, taker, [Test]).

%% The new owner: reports the hand-off, echoes Buffered, then echoes what
%% it reads until the client closes, and reports that.
taker(Test) ->
    receive
        {sluice_handoff, Conn = #{transport := T, socket := Sock}, Buffered} ->
            Test ! {handed, self(), Conn, Buffered},
            Mod = native(T),
            ok = case Buffered of
                     <<>> -> ok;
                     _ -> Mod:send(Sock, Buffered)
                 end,
            echo(Mod, Sock, Test)
    after 10000 ->
            Test ! {taker_timeout, self()}
    end.

native(sluice_transport_inet) -> gen_tcp;
native(sluice_transport_socket) -> socket;
native(sluice_transport_ssl) -> ssl.

echo(Mod, Sock, Test) ->
    case Mod:recv(Sock, 0, 10000) of
        {ok, Data} ->
            ok = Mod:send(Sock, Data),
            echo(Mod, Sock, Test);
        {error, Reason} ->
            _ = Mod:close(Sock),
            Test ! {taker_done, self(), Reason}
    end.
