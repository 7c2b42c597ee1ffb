%% @doc What the benchmark reads from /proc and the system: the CPU time of
%% a server's process tree, and the description of the machine.
%%
%% `bin/sluice serve' is a tree, not one process: taskset execs the script,
%% which execs sluice-run, which forks the VM (beam.smp), which forks
%% erl_child_setup. The server's CPU is the user+system time of every live
%% process in that tree; the tree is found by scanning /proc once the
%% server is listening (this kernel has no /proc/PID/task/TID/children).
-module(sluice_bench_proc).

-export([tree/1, ticks/1, clk_tck/0, machine/0]).

%% @doc `Root' and all its live descendants.
-spec tree(non_neg_integer()) -> [non_neg_integer()].
tree(Root) ->
    Parents = [{Pid, PPid} || Pid <- all_pids(), {ok, PPid} <- [ppid(Pid)]],
    descend([Root], Parents, []).

descend([], _Parents, Acc) -> lists:reverse(Acc);
descend([P | Rest], Parents, Acc) ->
    Children = [C || {C, PP} <- Parents, PP =:= P],
    descend(Rest ++ Children, Parents, [P | Acc]).

all_pids() ->
    {ok, Names} = file:list_dir("/proc"),
    [list_to_integer(N) || N <- Names, N =/= [], lists:all(fun is_digit/1, N)].

is_digit(C) -> C >= $0 andalso C =< $9.

ppid(Pid) ->
    case stat_fields(Pid) of
        {ok, [_State, PPid | _]} -> {ok, binary_to_integer(PPid)};
        _ -> error
    end.

%% @doc utime+stime, in clock ticks, summed over the processes (a process
%% that has gone counts zero).
-spec ticks([non_neg_integer()]) -> non_neg_integer().
ticks(Pids) ->
    lists:sum([T || P <- Pids, {ok, T} <- [proc_ticks(P)]]).

proc_ticks(Pid) ->
    case stat_fields(Pid) of
        %% fields 14 and 15 of proc(5); the list starts at field 3
        {ok, Fields} when length(Fields) >= 13 ->
            {ok, binary_to_integer(lists:nth(12, Fields))
                 + binary_to_integer(lists:nth(13, Fields))};
        _ -> error
    end.

%% The fields after "PID (COMM) ": COMM may hold spaces and parentheses,
%% so split after the last ")".
stat_fields(Pid) ->
    case file:read_file("/proc/" ++ integer_to_list(Pid) ++ "/stat") of
        {ok, Bin} ->
            case binary:matches(Bin, <<")">>) of
                [] -> error;
                Ms ->
                    {Pos, _} = lists:last(Ms),
                    Rest = binary:part(Bin, Pos + 1, byte_size(Bin) - Pos - 1),
                    {ok, binary:split(Rest, [<<" ">>, <<"\n">>], [global, trim_all])}
            end;
        _ -> error
    end.

%% @doc Clock ticks per second (`getconf CLK_TCK'; 100 if that fails).
-spec clk_tck() -> pos_integer().
clk_tck() ->
    case string:to_integer(string:trim(os:cmd("getconf CLK_TCK"))) of
        {N, []} when N > 0 -> N;
        _ -> 100
    end.

%% @doc The machine, for the reports.
-spec machine() -> map().
machine() ->
    #{nproc => erlang:system_info(logical_processors_available),
      nproc_online => erlang:system_info(logical_processors_online),
      cpu_model => cpu_model(),
      otp_release => list_to_binary(erlang:system_info(otp_release)),
      erts_version => list_to_binary(erlang:system_info(version)),
      kernel => kernel(),
      clk_tck => clk_tck(),
      open_file_limit => open_file_limit(),
      erl_flags => list_to_binary(os:getenv("SLUICE_ERL_FLAGS", ""))}.

cpu_model() ->
    case file:read_file("/proc/cpuinfo") of
        {ok, Bin} ->
            Models = [string:trim(V) || L <- binary:split(Bin, <<"\n">>, [global]),
                                        [K, V] <- [binary:split(L, <<":">>)],
                                        string:trim(K) =:= <<"model name">>],
            case Models of
                [M | _] -> iolist_to_binary(M);
                [] -> <<"unknown">>
            end;
        _ -> <<"unknown">>
    end.

kernel() ->
    {Family, Name} = os:type(),
    Release = case file:read_file("/proc/sys/kernel/osrelease") of
                  {ok, R} -> string:trim(R);
                  _ -> <<>>
              end,
    iolist_to_binary([atom_to_list(Family), "/", atom_to_list(Name), " ", Release]).

open_file_limit() ->
    case string:to_integer(string:trim(os:cmd("ulimit -n"))) of
        {N, []} -> N;
        _ -> null
    end.
