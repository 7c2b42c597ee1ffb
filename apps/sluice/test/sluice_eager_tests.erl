%% The single-read policy (sluice_eager): when a connection's short reads
%% stop being granted one at a time, and for how long.
-module(sluice_eager_tests).

-include_lib("eunit/include/eunit.hrl").

%% Misses in a row from E: {on, E2} after each but the last, what the
%% last returned.
misses(1, E) -> sluice_eager:miss(E);
misses(N, E) ->
    {on, E2} = sluice_eager:miss(E),
    misses(N - 1, E2).

hits(0, E) -> E;
hits(N, E) -> hits(N - 1, sluice_eager:hit(E)).

sixteen_misses_turn_it_off_for_4096_reads_test() ->
    ?assertMatch({on, _}, misses(15, sluice_eager:new())),
    ?assertMatch({off, 4096, _}, misses(16, sluice_eager:new())).

hits_between_misses_do_not_save_a_window_test() ->
    %% 16 misses among 196 single reads: off
    E = lists:foldl(fun(_, Acc) -> {on, A2} = sluice_eager:miss(Acc), hits(12, A2) end,
                    sluice_eager:new(), lists:seq(1, 15)),
    ?assertMatch({off, 4096, _}, sluice_eager:miss(E)).

a_window_with_few_misses_starts_afresh_test() ->
    %% 15 misses and 241 hits: a window of 256 passes, and its misses are
    %% forgotten: 15 more do not turn it off, the 16th does
    {on, E1} = misses(15, sluice_eager:new()),
    E2 = hits(241, E1),
    ?assertMatch({on, _}, misses(15, E2)),
    ?assertMatch({off, 4096, _}, misses(16, E2)).

each_failed_try_doubles_the_backoff_up_to_a_bound_test() ->
    ?assertEqual([4096, 8192, 16384, 32768, 65536, 65536, 65536],
                 backoffs(7, sluice_eager:new())).

a_window_that_passes_resets_the_backoff_test() ->
    {off, 4096, E1} = misses(16, sluice_eager:new()),
    {off, 8192, E2} = misses(16, E1),
    ?assertMatch({off, 4096, _}, misses(16, hits(256, E2))).

backoffs(0, _E) -> [];
backoffs(N, E) ->
    {off, Reads, E2} = misses(16, E),
    [Reads | backoffs(N - 1, E2)].
