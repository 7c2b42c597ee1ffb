%% @doc Runs one C load engine (`sluice-load') as an OS process through a
%% port, on whatever node it is spawned on, and reports to a coordinator
%% process, possibly on another node:
%%
%%   `{engine_progress, Id, ProgressJson}'  about once a second,
%%   `{engine_round, Id, RoundJson}'        a ping/scale round as it ends,
%%   `{engine_text, Id, Line}'              a line the engine wrote on stderr,
%%   `{engine_done, Id, ExitStatus, ResultJson | none}'  at the end.
%%
%% It takes `go' (start the measured window: the engine runs with
%% `--go-stdin') and `stop' (SIGTERM: the engine reports what it measured).
%% The result comes back on the engine's stdout (`--json /dev/stdout'), so
%% nothing is left in files on a remote host.
%%
%% This module uses nothing from the project but itself: the coordinator
%% loads its object code onto remote nodes, which then need only the C
%% binary.
-module(sluice_load_engine).

-export([start/4, go/1, stop/1]).
-export([init/4]).

%% @doc Start the engine `Bin' with `Args' on this node, reporting to
%% `Coord' under `Id'. Call it on the target node (erpc or spawn).
-spec start(pid(), term(), file:filename(), [string()]) -> pid().
start(Coord, Id, Bin, Args) ->
    proc_lib:spawn(?MODULE, init, [Coord, Id, Bin, Args]).

%% @doc Start the measured window now.
-spec go(pid()) -> ok.
go(Runner) -> Runner ! go, ok.

%% @doc End the run early; the engine still reports.
-spec stop(pid()) -> ok.
stop(Runner) -> Runner ! stop, ok.

-spec init(pid(), term(), file:filename(), [string()]) -> ok.
init(Coord, Id, Bin, Args) ->
    %% The coordinator going away (its node included) ends the engine:
    %% closing the port gives it EOF on stdin, and it stops.
    MRef = erlang:monitor(process, Coord),
    All = Args ++ ["--quiet", "--progress-json", "--go-stdin", "--json", "/dev/stdout"],
    try open_port({spawn_executable, Bin},
                  [{args, All}, {line, 16384}, binary, exit_status, use_stdio,
                   stderr_to_stdout, hide]) of
        Port ->
            OsPid = case erlang:port_info(Port, os_pid) of
                        {os_pid, P} -> P;
                        _ -> undefined
                    end,
            loop(#{coord => Coord, id => Id, port => Port, os_pid => OsPid,
                   mref => MRef, partial => [], result => none, heard => false,
                   stop => false})
    catch error:Reason ->
            Coord ! {engine_text, Id, iolist_to_binary(
                                        io_lib:format("cannot run ~s: ~p", [Bin, Reason]))},
            Coord ! {engine_done, Id, 127, none},
            ok
    end.

loop(#{port := Port, coord := Coord, id := Id, mref := MRef} = S) ->
    receive
        {Port, {data, {noeol, Part}}} ->
            loop(heard(S#{partial := [Part | maps:get(partial, S)]}));
        {Port, {data, {eol, Part}}} ->
            Line = iolist_to_binary(lists:reverse([Part | maps:get(partial, S)])),
            loop(line(Line, heard(S#{partial := []})));
        {Port, {exit_status, Status}} ->
            Coord ! {engine_done, Id, Status, maps:get(result, S)},
            ok;
        go when map_get(stop, S) ->
            %% Stopped before the window opened: the engine reports on the
            %% SIGTERM without it, and may be gone already; writing to its
            %% closed stdin would end the port with epipe, and its report
            %% and exit status with it (the run called it lost).
            loop(S);
        go ->
            %% the engine may have ended already (all its connections
            %% failed): its exit_status is on the way
            catch port_command(Port, <<"go\n">>),
            loop(S);
        stop when not map_get(heard, S) ->
            %% The engine blocks SIGTERM (and reads it from a signalfd) only
            %% once it has parsed its options: a SIGTERM just after the
            %% start killed it with no report (status 143, `lost'). Sent
            %% once it has said something (a progress line a second).
            loop(S#{stop := true});
        stop ->
            _ = signal_term(maps:get(os_pid, S)),
            loop(S#{stop := true});
        {'DOWN', MRef, process, _, _} ->
            _ = signal_term(maps:get(os_pid, S)),
            catch port_close(Port),
            ok
    end.

%% The first output of the engine: its signal handling is in place; a
%% stop asked before is sent now.
heard(#{heard := false, stop := true, os_pid := OsPid} = S) ->
    _ = signal_term(OsPid),
    S#{heard := true};
heard(S) ->
    S#{heard := true}.

line(<<"{\"progress\":true", _/binary>> = L, #{coord := Coord, id := Id} = S) ->
    Coord ! {engine_progress, Id, L},
    S;
line(<<"{\"round\":", _/binary>> = L, #{coord := Coord, id := Id} = S) ->
    Coord ! {engine_round, Id, L},
    S;
line(<<"{", _/binary>> = L, S) ->
    S#{result := L};
line(<<>>, S) ->
    S;
line(L, #{coord := Coord, id := Id} = S) ->
    Coord ! {engine_text, Id, L},
    S.

signal_term(undefined) -> ok;
signal_term(OsPid) -> os:cmd("kill -TERM " ++ integer_to_list(OsPid)).
