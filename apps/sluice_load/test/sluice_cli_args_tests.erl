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
     O(scenario, {choice, ["lockstep", "ping"]}, undefined, "what"),
     O(cells, {enum_list, [all, a, b, c]}, [all], "which")].

defaults_filled_test() ->
    ?assertEqual({ok, #{port => 8000, active => 100, ip => {0, 0, 0, 0}, quiet => false,
                        max_frame => 1, rate => undefined, scenario => undefined,
                        cells => [all]}},
                 sluice_cli_args:parse(specs(), [])).

values_and_inline_test() ->
    {ok, M} = sluice_cli_args:parse(specs(), ["--port", "1", "--active=once", "--quiet",
                                              "--ip", "127.0.0.2", "--max-frame=7", "--rate", "2.5",
                                              "--scenario", "ping"]),
    ?assertEqual(#{port => 1, active => once, ip => {127, 0, 0, 2}, quiet => true,
                   max_frame => 7, rate => 2.5, scenario => "ping", cells => [all]}, M).

%% A comma list: its names in the order given, each once.
enum_list_test_() ->
    P = fun(V) -> maps:get(cells, element(2, sluice_cli_args:parse(specs(), ["--cells", V]))) end,
    [?_assertEqual([b], P("b")),
     ?_assertEqual([c, a], P("c,a,c")),
     ?_assertMatch({error, "bad value for --cells: a,x (expected one or a comma list of all|a|b|c)"},
                   sluice_cli_args:parse(specs(), ["--cells", "a,x"])),
     ?_assertMatch({error, "bad value for --cells: a," ++ _},
                   sluice_cli_args:parse(specs(), ["--cells", "a,"]))].

%% An option given twice is refused, whatever the two values: the last one
%% used to win in silence (`bench --scenario a --scenario b' ran b only).
given_twice_test_() ->
    P = fun(Args) -> sluice_cli_args:parse(specs(), Args) end,
    [?_assertEqual({error, "option --port given twice"}, P(["--port", "1", "--port=1"])),
     ?_assertEqual({error, "option --quiet given twice"}, P(["--quiet", "--quiet"])),
     ?_assertEqual({error, "option --cells given twice (for several, one comma list: --cells A,B)"},
                   P(["--cells", "a", "--rate", "1", "--cells", "b"]))].

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
    %% a flag's default as the C programs' flags say it (load --help had
    %% both "false" and "off")
    ?assertMatch({match, _}, re:run(Text, "^  --quiet +quiet \\(default: off\\)$", [multiline])).

%% A number as a user types it, and as the C engine (strtod) takes it:
%% `--duration 1e3', `.3' and `1.' were refused by the CLI and taken by
%% the engine run alone. An integer stays an integer.
numbers_as_typed_test_() ->
    R = fun(V) -> case sluice_cli_args:parse(specs(), ["--rate", V]) of
                      {ok, #{rate := X}} -> X;
                      Error -> Error
                  end
        end,
    [?_assertEqual(1000.0, R("1e3")),
     ?_assertEqual(0.3, R(".3")),
     ?_assertEqual(0.3, R("0.3")),
     ?_assertEqual(1.0, R("1.")),
     ?_assertEqual(0.0025, R("2.5E-3")),
     ?_assertEqual(2, R("2")),
     ?_assertEqual(5, R("+5"))]
        ++ [?_assertMatch({error, "bad value for --rate: " ++ _}, R(V))
            || V <- [".", "e3", "1e", "1.5.2", "0x10", " 5", "inf", "nan", "1e999", "1,5"]].

%% A range says its bounds as a user writes them: 1000000000000, not
%% 1.0e12.
number_range_is_plain_test() ->
    ?assertEqual({error, "bad value for --rate: 2e12 (expected a number 0..1000000000000)"},
                 sluice_cli_args:parse(specs(), ["--rate", "2e12"])).
