%% How a target's value is printed beside its threshold.
-module(sluice_bench_targets_tests).
-include_lib("eunit/include/eunit.hrl").

%% A value that two decimals would round onto the threshold gets a third,
%% so a FAIL never reads "1.00 >= 1.00" (nor a PASS "1.00 < 1.00").
rounding_onto_the_threshold_shows_three_decimals_test() ->
    ?assertEqual("0.996", sluice_bench_targets:fmt_value(0.996, 1.0)),
    ?assertEqual("1.004", sluice_bench_targets:fmt_value(1.004, 1.0)),
    ?assertEqual("0.951", sluice_bench_targets:fmt_value(0.951, 0.95)).

other_values_print_as_every_ratio_test() ->
    ?assertEqual("0.97", sluice_bench_targets:fmt_value(0.97, 1.0)),
    ?assertEqual("1.00", sluice_bench_targets:fmt_value(1.0, 1.0)),
    ?assertEqual("1.00", sluice_bench_targets:fmt_value(1, 1.0)),
    ?assertEqual("-", sluice_bench_targets:fmt_value(null, 1.0)).
