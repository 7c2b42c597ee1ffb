%% EUnit tests of the CLI option parser (pure functions).
-module(sluice_cli_args_tests).
-include_lib("eunit/include/eunit.hrl").

specs() ->
    [{port, "port", {integer, 0, 65535}, 8000, "port"},
     {active, "active", active, 100, "mode"},
     {ip, "ip", ip, {0, 0, 0, 0}, "address"},
     {quiet, "quiet", boolean, false, "quiet"}].

defaults_filled_test() ->
    ?assertEqual({ok, #{port => 8000, active => 100, ip => {0, 0, 0, 0}, quiet => false}},
                 sluice_cli_args:parse(specs(), [])).

values_and_inline_test() ->
    {ok, M} = sluice_cli_args:parse(specs(), ["--port", "1", "--active=once", "--quiet",
                                              "--ip", "127.0.0.2"]),
    ?assertEqual(#{port => 1, active => once, ip => {127, 0, 0, 2}, quiet => true}, M).

errors_test_() ->
    [?_assertMatch({error, "unknown option --nope"}, sluice_cli_args:parse(specs(), ["--nope"])),
     ?_assertMatch({error, "bad value for --port: 70000" ++ _},
                   sluice_cli_args:parse(specs(), ["--port", "70000"])),
     ?_assertMatch({error, "bad value for --active: 0" ++ _},
                   sluice_cli_args:parse(specs(), ["--active", "0"])),
     ?_assertMatch({error, "option --port needs a value"}, sluice_cli_args:parse(specs(), ["--port"])),
     ?_assertEqual(help, sluice_cli_args:parse(specs(), ["--port", "1", "--help"]))].
