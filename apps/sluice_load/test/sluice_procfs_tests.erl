%% EUnit tests of the /proc parsers (fixed text), and of the readers on
%% this machine.
-module(sluice_procfs_tests).
-include_lib("eunit/include/eunit.hrl").

status_test() ->
    S = <<"Name:\tbeam.smp\nVmPeak:\t  100 kB\nVmRSS:\t   52340 kB\nThreads:\t9\n">>,
    ?assertEqual({ok, 52340}, sluice_procfs:parse_status_kb(S, <<"VmRSS">>)),
    ?assertEqual(error, sluice_procfs:parse_status_kb(S, <<"VmSwap">>)).

%% COMM may hold spaces and parentheses: fields count from the last ")".
stat_test() ->
    S = <<"4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 9 0\n">>,
    ?assertEqual({ok, #{ppid => 17, utime => 250, stime => 31}}, sluice_procfs:parse_stat(S)),
    ?assertEqual(error, sluice_procfs:parse_stat(<<"garbage">>)).

limits_test() ->
    L = <<"Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max cpu time              unlimited            unlimited            seconds   \n"
          "Max open files            20000                40000                files     \n">>,
    ?assertEqual({ok, 20000}, sluice_procfs:parse_limit(L, <<"Max open files">>)),
    ?assertEqual({ok, unlimited}, sluice_procfs:parse_limit(L, <<"Max cpu time">>)),
    ?assertEqual(error, sluice_procfs:parse_limit(L, <<"Max locked memory">>)).

%% On Linux: this VM has a resident set, descriptors and a CPU time.
readers_on_this_machine_test() ->
    ?assert(sluice_procfs:rss_bytes() > 1000000),
    ?assert(sluice_procfs:open_fds() > 2),
    Me = list_to_integer(os:getpid()),
    ?assertEqual(Me, hd(sluice_procfs:process_tree(Me))),
    ?assert(sluice_procfs:cpu_ticks([Me]) > 0),
    ?assertNotEqual(null, sluice_procfs:open_file_limit()).
