%% EUnit tests of the CLI option parser (pure functions).
-module(sluice_cli_args_tests).
-include_lib("eunit/include/eunit.hrl").

specs() ->
    O = fun sluice_cli_args:opt/4,
    [O(port, {integer, 0, 65535}, 8000, "port"),
     O(active, active, 100, "mode"),
     O(ip, ip, {0, 0, 0, 0}, "address"),
     O(quiet, boolean, false, "quiet"),
     O(max_frame, {integer, 0, infinity}, 1, "frame"),
     (O(rate, {number, 0, 1.0e12}, undefined, "rate"))#{shown => "0", meta => "R"},
     O(scenario, {choice, ["lockstep", "ping"]}, undefined, "what")].

defaults_filled_test() ->
    ?assertEqual({ok, #{port => 8000, active => 100, ip => {0, 0, 0, 0}, quiet => false,
                        max_frame => 1, rate => undefined, scenario => undefined}},
                 sluice_cli_args:parse(specs(), [])).

values_and_inline_test() ->
    {ok, M} = sluice_cli_args:parse(specs(), ["--port", "1", "--active=once", "--quiet",
                                              "--ip", "127.0.0.2", "--max-frame=7", "--rate", "2.5",
                                              "--scenario", "ping"]),
    ?assertEqual(#{port => 1, active => once, ip => {127, 0, 0, 2}, quiet => true,
                   max_frame => 7, rate => 2.5, scenario => "ping"}, M).

errors_test_() ->
    P = fun(Args) -> sluice_cli_args:parse(specs(), Args) end,
    [?_assertMatch({error, "unknown option --nope"}, P(["--nope"])),
     ?_assertMatch({error, "bad value for --port: 70000" ++ _}, P(["--port", "70000"])),
     ?_assertMatch({error, "bad value for --active: 0" ++ _}, P(["--active", "0"])),
     ?_assertMatch({error, "bad value for --rate: -1" ++ _}, P(["--rate", "-1"])),
     ?_assertMatch({error, "bad value for --scenario: nope" ++ _}, P(["--scenario", "nope"])),
     ?_assertMatch({error, "option --port needs a value"}, P(["--port"])),
     ?_assertMatch({error, "unexpected argument x"}, P(["x"]))].

%% --help wins wherever it is, even after an error.
help_anywhere_test() ->
    ?assertEqual(help, sluice_cli_args:parse(specs(), ["--port", "1", "--help"])),
    ?assertEqual(help, sluice_cli_args:parse(specs(), ["--nope", "-h"])).

%% Only what was given goes back on a command line, in the table's order.
to_args_renders_what_was_given_test() ->
    {ok, M} = sluice_cli_args:parse(specs(), ["--scenario", "ping", "--quiet", "--rate", "2"]),
    Given = [S || #{key := K} = S <- specs(), lists:member(K, [rate, quiet, scenario])],
    ?assertEqual(["--quiet", "--rate", "2", "--scenario", "ping"], sluice_cli_args:to_args(Given, M)).

%% A help line per option: the value's name, the help, the default (or
%% what `shown' says instead).
option_lines_test() ->
    Text = lists:flatten(io_lib:format("~ts", [sluice_cli_args:option_lines(specs())])),
    ?assertMatch({match, _}, re:run(Text, "^  --port N +port \\(default: 8000\\)$", [multiline])),
    ?assertMatch({match, _}, re:run(Text, "^  --rate R +rate \\(default: 0\\)$", [multiline])),
    ?assertMatch({match, _}, re:run(Text, "^  --scenario lockstep\\|ping +what \\(default: none\\)$",
                                    [multiline])),
    ?assertMatch({match, _}, re:run(Text, "^  --quiet +quiet \\(default: false\\)$", [multiline])).
