%% EUnit tests of how a C program's option table (`--options-json')
%% becomes the CLI's specs (pure functions).
-module(sluice_cprog_tests).
-include_lib("eunit/include/eunit.hrl").

-define(TABLE, <<"{\"program\":\"sluice-x\",\"summary\":\"X.\",\"options\":["
                 "{\"name\":\"scenario\",\"type\":\"choice\",\"meta\":\"NAME\",\"default\":\"a\","
                 "\"help\":\"what\",\"choices\":[\"a\",\"b\"]},"
                 "{\"name\":\"conns\",\"type\":\"int\",\"meta\":\"N\",\"default\":\"1\","
                 "\"help\":\"connections\",\"min\":1,\"max\":4000000},"
                 "{\"name\":\"duration\",\"type\":\"double\",\"meta\":\"SECONDS\",\"default\":\"10\","
                 "\"help\":\"time\",\"min\":0.000,\"max\":10000000.000},"
                 "{\"name\":\"source-ips\",\"type\":\"string\",\"meta\":\"LIST\",\"help\":\"addresses\"},"
                 "{\"name\":\"quiet\",\"type\":\"flag\",\"help\":\"no summary\"}]}\n">>).

specs() ->
    {ok, Table} = sluice_json:decode(?TABLE),
    sluice_cprog:specs(Table).

%% Types, keys and flags as the C table says; nothing given means nothing
%% passed (default undefined, flags false); --help shows the C default.
specs_from_the_table_test() ->
    [Sc, Conns, Dur, Ips, Quiet] = specs(),
    ?assertMatch(#{key := scenario, flag := "scenario", type := {choice, ["a", "b"]},
                   default := undefined, shown := "a", meta := "NAME"}, Sc),
    ?assertMatch(#{key := conns, type := {integer, 1, 4000000}, shown := "1"}, Conns),
    ?assertMatch(#{key := duration, type := {number, 0.0, 1.0e7}}, Dur),
    ?assertMatch(#{key := source_ips, flag := "source-ips", type := string, shown := "none"}, Ips),
    ?assertMatch(#{key := quiet, type := boolean, default := false}, Quiet).

%% Parsed and rendered back: the C program gets exactly what was given.
round_trip_test() ->
    {ok, M} = sluice_cli_args:parse(specs(), ["--duration=0.5", "--quiet", "--source-ips",
                                              "127.0.0.2-3"]),
    ?assertEqual(["--duration", "0.5", "--source-ips", "127.0.0.2-3", "--quiet"],
                 sluice_cli_args:to_args(specs(), M)),
    ?assertMatch({error, "bad value for --conns: 0" ++ _},
                 sluice_cli_args:parse(specs(), ["--conns", "0"])).
