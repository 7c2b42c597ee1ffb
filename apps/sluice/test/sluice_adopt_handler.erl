%% The handler of sluice_adopt_SUITE: tells the test what it gets
%% (`{init, Pid, Conn}', `{data, Pid, Data}', `{terminated, Pid, Reason}')
%% and echoes every chunk or frame. `UPGRADE' (alone in its chunk or its
%% line) answers `101\n' and hands the socket off to a process that tells
%% the test `{handed, To, Conn, Buffered}' and runs the fun the test sends
%% it (`{run, Fun}': Fun(Conn, Buffered)). Opts: the test process, or
%% `{recv_in_init, Length, Test}': init/2 reads Length bytes with
%% sluice:recv/3 first, or `{own, Test}': `ADOPT' calls sluice:adopt/2
%% with the connection's own socket (`{adopt_own, Pid, Result}').
-module(sluice_adopt_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, terminate/2]).
-export([to/1]).

init(Conn, {own, Test}) ->
    Test ! {init, self(), Conn},
    {ok, {own, Test, Conn}};
init(Conn, {recv_in_init, Length, Test}) ->
    %% sluice:recv/3 in init/2 (`{init_recv, Pid, Result}' first)
    Test ! {init_recv, self(), sluice:recv(Conn, Length, 5000)},
    init(Conn, Test);
init(Conn, Test) ->
    Test ! {init, self(), Conn},
    {ok, Test}.

handle_data(Data, Test) when Data =:= <<"UPGRADE">>; Data =:= <<"UPGRADE\n">> ->
    {handoff, <<"101\n">>, spawn(?MODULE, to, [Test]), Test};
handle_data(<<"ADOPT">>, St = {own, Test, #{listener := Name, socket := Sock}}) ->
    %% sluice:adopt/2 of the connection's own socket, from its handler
    Test ! {adopt_own, self(), try sluice:adopt(Name, Sock) catch error:E -> {raised, E} end},
    {reply, <<"still\n">>, St};
handle_data(Data, Test) ->
    Test ! {data, self(), Data},
    {reply, Data, Test}.

terminate(Reason, Test) ->
    Test ! {terminated, self(), Reason},
    ok.

to(Test) ->
    receive
        {sluice_handoff, Conn, Buffered} ->
            Test ! {handed, self(), Conn, Buffered},
            receive
                {run, Fun} -> Fun(Conn, Buffered)
            after 10000 -> timeout
            end
    after 10000 -> timeout
    end.
