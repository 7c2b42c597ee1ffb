%% The single-read policy (sluice_eager): when a connection's short reads
%% stop being granted one at a time, and when they are tried again.
-module(sluice_eager_tests).

-include_lib("eunit/include/eunit.hrl").

%% Apply N times.
times(0, _F, E) -> E;
times(N, F, E) -> times(N - 1, F, F(E)).

new_connection_tries_test() ->
    ?assert(sluice_eager:on(sluice_eager:new())).

sixteen_misses_turn_it_off_test() ->
    E15 = times(15, fun sluice_eager:miss/1, sluice_eager:new()),
    ?assert(sluice_eager:on(E15)),
    ?assertNot(sluice_eager:on(sluice_eager:miss(E15))).

hits_between_misses_do_not_save_a_window_test() ->
    %% 16 misses among 200 single reads: off
    E = times(15, fun(X) -> times(12, fun sluice_eager:hit/1, sluice_eager:miss(X)) end,
              sluice_eager:new()),
    ?assert(sluice_eager:on(E)),
    ?assertNot(sluice_eager:on(sluice_eager:miss(E))).

a_window_with_few_misses_starts_afresh_test() ->
    %% 15 misses and 241 hits: a window of 256 passes, and its misses are
    %% forgotten: 15 more do not turn it off
    E = times(241, fun sluice_eager:hit/1, times(15, fun sluice_eager:miss/1, sluice_eager:new())),
    E2 = times(15, fun sluice_eager:miss/1, E),
    ?assert(sluice_eager:on(E2)),
    ?assertNot(sluice_eager:on(sluice_eager:miss(E2))).

off_for_the_backoff_then_tried_again_test() ->
    Off = times(16, fun sluice_eager:miss/1, sluice_eager:new()),
    ?assertEqual(4096, reads_until_on(Off)).

each_failed_try_doubles_the_backoff_up_to_a_bound_test() ->
    Backoffs = backoffs(7, sluice_eager:new(), []),
    ?assertEqual([4096, 8192, 16384, 32768, 65536, 65536, 65536], Backoffs).

a_window_that_passes_resets_the_backoff_test() ->
    Off1 = times(16, fun sluice_eager:miss/1, sluice_eager:new()),
    Off2 = times(16, fun sluice_eager:miss/1, skip_all(Off1)),
    ?assertEqual(8192, reads_until_on(Off2)),
    Passed = times(256, fun sluice_eager:hit/1, skip_all(Off2)),
    ?assertEqual(4096, reads_until_on(times(16, fun sluice_eager:miss/1, Passed))).

%% The backoff of each of N failed tries in a row.
backoffs(0, _E, Acc) ->
    lists:reverse(Acc);
backoffs(N, E, Acc) ->
    Off = times(16, fun sluice_eager:miss/1, E),
    backoffs(N - 1, skip_all(Off), [reads_until_on(Off) | Acc]).

reads_until_on(E) ->
    reads_until_on(E, 0).

reads_until_on(E, N) ->
    case sluice_eager:on(E) of
        true -> N;
        false -> reads_until_on(sluice_eager:skipped(E), N + 1)
    end.

skip_all(E) ->
    case sluice_eager:on(E) of
        true -> E;
        false -> skip_all(sluice_eager:skipped(E))
    end.
