%% @doc Everything the tooling reads from Linux's /proc, in one place, with
%% typed results: this VM's resident memory and descriptors, a process
%% tree's CPU time (the benchmark's server CPU) and the machine's
%% description. (The kernel's listen-queue counters are the library's own
%% reader, sluice_kernel, which `sluice:info/1' reports.) Elsewhere (no
%% /proc) every reader returns its empty value (0, [], `unknown') instead of
%% failing: the figures are reports, not preconditions.
%%
%% The parsers are exported so that they can be tested on fixed text.
-module(sluice_procfs).

-export([rss_bytes/0, open_fds/0, stderr_is_tty/0,
         process_tree/1, parent/1, cpu_ticks/1, clk_tck/0,
         cpu_model/0, kernel_release/0, open_file_limit/0]).
-export([parse_status_kb/2, parse_stat/1, parse_limit/2]).

-export_type([stat/0]).

%% The fields of /proc/PID/stat the tooling uses; times in clock ticks.
-type stat() :: #{ppid := non_neg_integer(), utime := non_neg_integer(),
                  stime := non_neg_integer()}.

%%% ------------------------------------------------------------------
%%% This VM
%%% ------------------------------------------------------------------

%% @doc This OS process's resident set in bytes (VmRSS of
%% /proc/self/status, given in kB: no page size needed); 0 elsewhere.
-spec rss_bytes() -> non_neg_integer().
rss_bytes() ->
    case read("/proc/self/status") of
        {ok, Bin} ->
            case parse_status_kb(Bin, <<"VmRSS">>) of
                {ok, Kb} -> Kb * 1024;
                error -> 0
            end;
        error -> 0
    end.

%% @doc Descriptors this OS process has open.
-spec open_fds() -> non_neg_integer().
open_fds() ->
    case file:list_dir("/proc/self/fd") of
        {ok, L} -> length(L);
        {error, _} -> 0
    end.

%% @doc Whether this VM's stderr is a terminal: the C engine's rule for its
%% progress line. A program the VM runs through a port with
%% `stderr_to_stdout' cannot tell for itself, so its parent asks here.
-spec stderr_is_tty() -> boolean().
stderr_is_tty() ->
    case file:read_link("/proc/self/fd/2") of
        {ok, "/dev/pts/" ++ _} -> true;
        {ok, "/dev/tty" ++ _} -> true;
        _ -> false
    end.

%%% ------------------------------------------------------------------
%%% Process trees and CPU time
%%% ------------------------------------------------------------------

%% @doc The parent of OS process `Pid' (what its getppid() returns), or
%% `error' when it is gone or there is no /proc.
-spec parent(non_neg_integer()) -> {ok, non_neg_integer()} | error.
parent(Pid) ->
    case stat(Pid) of
        {ok, #{ppid := PPid}} -> {ok, PPid};
        error -> error
    end.

%% @doc `Root' and all its live descendants, parents first. Found by
%% scanning every /proc/PID/stat: this kernel has no
%% /proc/PID/task/TID/children.
-spec process_tree(non_neg_integer()) -> [non_neg_integer()].
process_tree(Root) ->
    Parents = [{Pid, PPid} || Pid <- pids(), {ok, #{ppid := PPid}} <- [stat(Pid)]],
    descend([Root], Parents, []).

descend([], _Parents, Acc) -> lists:reverse(Acc);
descend([P | Rest], Parents, Acc) ->
    Children = [C || {C, PP} <- Parents, PP =:= P],
    descend(Rest ++ Children, Parents, [P | Acc]).

pids() ->
    case file:list_dir("/proc") of
        {ok, Names} -> [list_to_integer(N) || N <- Names, N =/= [], lists:all(fun is_digit/1, N)];
        {error, _} -> []
    end.

is_digit(C) -> C >= $0 andalso C =< $9.

%% @doc utime+stime in clock ticks, summed over the processes (one that has
%% gone counts zero).
-spec cpu_ticks([non_neg_integer()]) -> non_neg_integer().
cpu_ticks(Pids) ->
    lists:sum([U + S || P <- Pids, {ok, #{utime := U, stime := S}} <- [stat(P)]]).

stat(Pid) ->
    case read("/proc/" ++ integer_to_list(Pid) ++ "/stat") of
        {ok, Bin} -> parse_stat(Bin);
        error -> error
    end.

%% @doc The fields of a /proc/PID/stat line. COMM (field 2) may hold spaces
%% and parentheses, so the fields are counted from after its last ")".
-spec parse_stat(binary()) -> {ok, stat()} | error.
parse_stat(Bin) ->
    case binary:matches(Bin, <<")">>) of
        [] -> error;
        Ms ->
            {Pos, _} = lists:last(Ms),
            Rest = binary:part(Bin, Pos + 1, byte_size(Bin) - Pos - 1),
            %% field 3 (state) first: ppid is field 4, utime 14, stime 15
            case binary:split(Rest, [<<" ">>, <<"\n">>], [global, trim_all]) of
                [_State, PPid | More] when length(More) >= 11 ->
                    try {ok, #{ppid => binary_to_integer(PPid),
                               utime => binary_to_integer(lists:nth(10, More)),
                               stime => binary_to_integer(lists:nth(11, More))}}
                    catch error:badarg -> error
                    end;
                _ -> error
            end
    end.

%% @doc Clock ticks per second, the unit of cpu_ticks/1 (`getconf
%% CLK_TCK': /proc does not say; 100 if that fails).
-spec clk_tck() -> pos_integer().
clk_tck() ->
    case string:to_integer(string:trim(os:cmd("getconf CLK_TCK"))) of
        {N, []} when N > 0 -> N;
        _ -> 100
    end.

%%% ------------------------------------------------------------------
%%% The machine
%%% ------------------------------------------------------------------

%% @doc The first CPU's model name, or `<<"unknown">>'.
-spec cpu_model() -> binary().
cpu_model() ->
    case read("/proc/cpuinfo") of
        {ok, Bin} ->
            case [string:trim(V) || L <- lines(Bin), [K, V] <- [binary:split(L, <<":">>)],
                                    string:trim(K) =:= <<"model name">>] of
                [M | _] -> iolist_to_binary(M);
                [] -> <<"unknown">>
            end;
        error -> <<"unknown">>
    end.

%% @doc The kernel's release string (empty when unknown).
-spec kernel_release() -> binary().
kernel_release() ->
    case read("/proc/sys/kernel/osrelease") of
        {ok, R} -> iolist_to_binary(string:trim(R));
        error -> <<>>
    end.

%% @doc This process's soft limit on open files (`null' when unknown).
-spec open_file_limit() -> non_neg_integer() | unlimited | null.
open_file_limit() ->
    case read("/proc/self/limits") of
        {ok, Bin} ->
            case parse_limit(Bin, <<"Max open files">>) of
                {ok, N} -> N;
                error -> null
            end;
        error -> null
    end.

%% @doc The soft limit of one row of /proc/PID/limits.
-spec parse_limit(binary(), binary()) -> {ok, non_neg_integer() | unlimited} | error.
parse_limit(Bin, Name) ->
    case [L || L <- lines(Bin), binary:longest_common_prefix([L, Name]) =:= byte_size(Name)] of
        [Line | _] ->
            Rest = binary:part(Line, byte_size(Name), byte_size(Line) - byte_size(Name)),
            case string:lexemes(Rest, " ") of
                [<<"unlimited">> | _] -> {ok, unlimited};
                [Soft | _] -> int(Soft);
                [] -> error
            end;
        [] -> error
    end.

%%% ------------------------------------------------------------------

%% @doc A `Key:   N kB' line of /proc/PID/status: N.
-spec parse_status_kb(binary(), binary()) -> {ok, non_neg_integer()} | error.
parse_status_kb(Bin, Key) ->
    case [V || L <- lines(Bin), [K, V] <- [binary:split(L, <<":">>)], K =:= Key] of
        [V | _] ->
            case string:lexemes(V, " \t") of
                [N | _] -> int(N);
                [] -> error
            end;
        [] -> error
    end.

read(Path) ->
    case file:read_file(Path) of
        {ok, Bin} -> {ok, Bin};
        {error, _} -> error
    end.

lines(Bin) -> binary:split(Bin, <<"\n">>, [global, trim_all]).

int(B) ->
    try {ok, binary_to_integer(string:trim(B))}
    catch error:badarg -> error
    end.
