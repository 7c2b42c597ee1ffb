%% @doc What the sluice_load suites share: finding the repository and its
%% built binaries from wherever Common Test runs the suite, and a per-case
%% reaper that kills every OS process a case started, however the case ends.
-module(sluice_load_test_lib).

-export([repo_root/0, priv_dir/0, start_reaper/1, stop_reaper/1, reap/2, ipv6_loopback/0]).
-export([run_lines/3, run_lines/4, sluice/2, sluice/3, sluice_exit/2, signal/2,
         wait_line/3, wait_exit/2, built_bin/1, fake_ssh/3, cookie/0,
         hanging_ssh/2, wait_group_gone/2]).

%% @doc The repository root: the first ancestor of this module (source or
%% beam) that holds bin/sluice.
-spec repo_root() -> {ok, file:filename()} | error.
repo_root() ->
    Starts = [filename:dirname(?FILE), filename:dirname(code:which(?MODULE))],
    first([D || S <- Starts, D <- ancestors(filename:absname(S)),
                filelib:is_regular(filename:join(D, "bin/sluice"))]).

%% @doc For init_per_suite: Config with `{bin, Path}' to a built bin/sluice
%% (the Erlang apps, sluice-run and the C engine), or a `{fail, Why}'.
-spec built_bin(list()) -> list() | {fail, string()}.
built_bin(Config) ->
    case repo_root() of
        {ok, Root} ->
            Built = lists:all(fun(F) -> filelib:is_regular(filename:join(Root, F)) end,
                              ["_build/default/lib/sluice/ebin/sluice.app",
                               "apps/sluice_load/priv/sluice-run",
                               "apps/sluice_load/priv/sluice-load"]),
            case Built of
                true -> [{bin, filename:join(Root, "bin/sluice")} | Config];
                false -> {fail, "bin/sluice is not built: run `make build` in " ++ Root}
            end;
        error ->
            {fail, "repository root (with bin/sluice) not found"}
    end.

%% @doc The directory holding the C binaries (sluice-load, sluice-ref, …):
%% $SLUICE_PRIV, the application's priv, or apps/sluice_load/priv found
%% upwards from here.
-spec priv_dir() -> {ok, file:filename()} | error.
priv_dir() ->
    Env = case os:getenv("SLUICE_PRIV") of
              false -> [];
              "" -> [];
              EnvDir -> [EnvDir]
          end,
    CodePriv = case code:priv_dir(sluice_load) of
                   {error, _} -> [];
                   PrivDir -> [PrivDir]
               end,
    Here = filename:absname(filename:dirname(code:which(?MODULE))),
    Up = [filename:join([Dir, "apps", "sluice_load", "priv"]) || Dir <- ancestors(Here)],
    first([Dir || Dir <- Env ++ CodePriv ++ [filename:join(Here, "../priv")] ++ Up,
                  filelib:is_regular(filename:join(Dir, "sluice-load"))]).

%% @doc For init_per_group of the IPv6 cases: ok when this host listens
%% on ::1, else a skip (IPv6 disabled: net.ipv6.conf.lo.disable_ipv6).
-spec ipv6_loopback() -> ok | {skip, string()}.
ipv6_loopback() ->
    case gen_tcp:listen(0, [inet6, {ip, {0, 0, 0, 0, 0, 0, 0, 1}}]) of
        {ok, L} -> gen_tcp:close(L);
        {error, R} -> {skip, lists:flatten(io_lib:format("no IPv6 loopback (::1): ~p", [R]))}
    end.

%% @doc Adds a reaper to a case's Config (call from init_per_testcase).
-spec start_reaper(list()) -> list().
start_reaper(Config) ->
    [{reaper, spawn(fun() -> reaper([]) end)} | Config].

%% @doc Registers an OS process to be killed at the end of the case.
-spec reap(list(), non_neg_integer()) -> ok.
reap(Config, OsPid) ->
    proplists:get_value(reaper, Config) ! {add, OsPid},
    ok.

%% @doc Kills every registered OS process and all its descendants (call
%% from end_per_testcase): a VM started by bin/sluice is a child of
%% sluice-run, and the C programs or VMs it runs are its descendants.
-spec stop_reaper(list()) -> ok.
stop_reaper(Config) ->
    Reaper = proplists:get_value(reaper, Config),
    Reaper ! {kill_all, self()},
    receive {reaped, Reaper} -> ok after 5000 -> ok end.

reaper(Pids) ->
    receive
        {add, Pid} ->
            reaper([Pid | Pids]);
        {kill_all, From} ->
            Tree = lists:usort(lists:append([sluice_procfs:process_tree(P) || P <- Pids])),
            _ = [os:cmd("kill -9 " ++ integer_to_list(P) ++ " 2>/dev/null") || P <- Tree],
            From ! {reaped, self()}
    end.

ancestors(Dir) ->
    case filename:dirname(Dir) of
        Dir -> [Dir];
        Parent -> [Dir | ancestors(Parent)]
    end.

first([X | _]) -> {ok, X};
first([]) -> error.

%% --- running bin/sluice ---------------------------------------------------

%% @doc Start an executable with its output as lines; registered with the
%% case's reaper. Returns {Port, OsPid}.
-spec run_lines(list(), file:filename(), [string()]) -> {port(), non_neg_integer()}.
run_lines(Config, Exe, Args) ->
    run_lines(Config, Exe, Args, []).

%% @doc run_lines/3 with extra environment variables.
-spec run_lines(list(), file:filename(), [string()], [{string(), string()}]) ->
          {port(), non_neg_integer()}.
run_lines(Config, Exe, Args, Env) ->
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, {env, Env}, exit_status, binary, {line, 4096},
                      stderr_to_stdout, use_stdio, hide]),
    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
    reap(Config, OsPid),
    {Port, OsPid}.

%% @doc Start `bin/sluice Args' (Config from built_bin/1): {Port, OsPid}.
-spec sluice(list(), [string()]) -> {port(), non_neg_integer()}.
sluice(Config, Args) ->
    sluice(Config, Args, []).

-spec sluice(list(), [string()], [{string(), string()}]) -> {port(), non_neg_integer()}.
sluice(Config, Args, Env) ->
    run_lines(Config, proplists:get_value(bin, Config), Args, Env).

%% @doc Run `bin/sluice Args' to its end: its status and output lines.
-spec sluice_exit(list(), [string()]) -> {non_neg_integer() | timeout, [binary()]}.
sluice_exit(Config, Args) ->
    {Port, _} = sluice(Config, Args),
    wait_exit(Port, 15000).

%% @doc Send signal `Sig' ("TERM", "INT", ...) to an OS process.
-spec signal(string(), non_neg_integer()) -> ok.
signal(Sig, OsPid) ->
    _ = os:cmd("kill -" ++ Sig ++ " " ++ integer_to_list(OsPid)),
    ok.

%% @doc Output lines up to and including the first matching Re: its
%% captures and the lines read.
-spec wait_line(port(), string(), timeout()) -> {[string()], [binary()]}.
wait_line(Port, Re, Timeout) ->
    wait_line(Port, Re, erlang:monotonic_time(millisecond) + Timeout, []).

wait_line(Port, Re, Deadline, Acc) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, {_, Line}}} ->
            case re:run(Line, Re, [{capture, all_but_first, list}]) of
                {match, Captured} -> {Captured, lists:reverse([Line | Acc])};
                nomatch -> wait_line(Port, Re, Deadline, [Line | Acc])
            end;
        {Port, {exit_status, Status}} ->
            error({exited_before_line, Re, Status, lists:reverse(Acc)})
    after Left ->
            error({no_line, Re, lists:reverse(Acc)})
    end.

%% @doc The remaining output lines and the exit status (or timeout).
-spec wait_exit(port(), timeout()) -> {non_neg_integer() | timeout, [binary()]}.
wait_exit(Port, Timeout) ->
    wait_exit(Port, erlang:monotonic_time(millisecond) + Timeout, []).

wait_exit(Port, Deadline, Acc) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, {_, Line}}} -> wait_exit(Port, Deadline, [Line | Acc]);
        {Port, {exit_status, Status}} -> {Status, lists:reverse(Acc)}
    after Left ->
            {timeout, lists:reverse(Acc)}
    end.

%% @doc A stand-in for ssh at Dir/fake-ssh that logs all its arguments
%% (one line a call) to the file it returns, drops the first `Drop' (the
%% host and its options) and runs the rest here as if on another host:
%% with HOME at Dir/remote-home, whose ~/.erlang.cookie is not this
%% user's. A node started through it that joins the caller got the
%% caller's cookie some other way than from its home.
-spec fake_ssh(file:filename(), pos_integer(), string()) -> {file:filename(), file:filename()}.
fake_ssh(Dir, Drop, Name) ->
    Home = filename:join(Dir, Name ++ "-home"),
    Cookie = filename:join(Home, ".erlang.cookie"),
    ok = filelib:ensure_dir(Cookie),
    _ = file:change_mode(Cookie, 8#600),
    ok = file:write_file(Cookie, "NOTTHECALLERSCOOKIE"),
    ok = file:change_mode(Cookie, 8#400),
    Ssh = filename:join(Dir, Name),
    Log = filename:join(Dir, Name ++ ".log"),
    %% empty: a priv_dir is the whole run's (rebar3 ct), shared by the
    %% suites, and a log of the same name from another one was read as
    %% this one's
    ok = file:write_file(Log, ""),
    ok = file:write_file(Ssh, ["#!/bin/sh\necho \"$@\" >> '", Log, "'\n",
                               "shift ", integer_to_list(Drop), "\n",
                               "HOME='", Home, "' exec \"$@\"\n"]),
    ok = file:change_mode(Ssh, 8#755),
    {Ssh, Log}.

%% @doc This user's cookie, which bin/sluice's distributed VM takes.
-spec cookie() -> string().
cookie() ->
    {ok, [[Home]]} = init:get_argument(home),
    {ok, B} = file:read_file(filename:join(Home, ".erlang.cookie")),
    string:trim(binary_to_list(B)).

%% @doc A stand-in for an ssh that cannot connect (an unreachable host):
%% it writes its pid to the file it returns, then waits two minutes (as
%% ssh waits out its connect timeout) before it would run the command.
-spec hanging_ssh(file:filename(), string()) -> {file:filename(), file:filename()}.
hanging_ssh(Dir, Name) ->
    Ssh = filename:join(Dir, Name),
    PidFile = filename:join(Dir, Name ++ ".pid"),
    _ = file:delete(PidFile),
    ok = file:write_file(Ssh, ["#!/bin/sh\necho $$ > '", PidFile, "'\n",
                               "sleep 120\nshift\nexec \"$@\"\n"]),
    ok = file:change_mode(Ssh, 8#755),
    {Ssh, PidFile}.

%% @doc Wait at most `Ms' for every process of process group `Pgid' to be
%% gone: `[]', or the ones still there.
-spec wait_group_gone(non_neg_integer(), non_neg_integer()) -> [string()].
wait_group_gone(Pgid, Ms) ->
    Left = string:lexemes(os:cmd("pgrep -g " ++ integer_to_list(Pgid)), "\n"),
    case Left of
        [] -> [];
        _ when Ms =< 0 -> Left;
        _ -> timer:sleep(50), wait_group_gone(Pgid, Ms - 50)
    end.
