%% The handler of sluice_adopt_SUITE: tells the test what it gets
%% (`{init, Pid, Conn}', `{data, Pid, Data}', `{terminated, Pid, Reason}')
%% and echoes every chunk or frame. `UPGRADE' (alone in its chunk or its
%% line) answers `101\n' and hands the socket off to a process that tells
%% the test `{handed, To, Conn, Buffered}' and runs the fun the test sends
%% it (`{run, Fun}': Fun(Conn, Buffered)). Opts: the test process.
-module(sluice_adopt_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, terminate/2]).
-export([to/1]).

init(Conn, Test) ->
    Test ! {init, self(), Conn},
    {ok, Test}.

handle_data(Data, Test) when Data =:= <<"UPGRADE">>; Data =:= <<"UPGRADE\n">> ->
    {handoff, <<"101\n">>, spawn(?MODULE, to, [Test]), Test};
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
