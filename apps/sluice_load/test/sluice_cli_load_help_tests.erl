%% EUnit tests of the `bin/sluice load --help' text (pure functions).
-module(sluice_cli_load_help_tests).
-include_lib("eunit/include/eunit.hrl").

-define(ENGINE_HELP, <<"usage: sluice-load [OPTIONS]\nLoad engine.\n\noptions:\n"
                       "  --duration SECONDS  measured time [default: 10]\n">>).

engine_options_drop_the_engines_synopsis_test() ->
    ?assertEqual(<<"  --duration SECONDS  measured time [default: 10]\n">>,
                 sluice_cli_load_help:engine_options(?ENGINE_HELP)).

engine_help_without_options_line_is_kept_whole_test() ->
    ?assertEqual(<<"--duration S\n">>, sluice_cli_load_help:engine_options(<<"--duration S\n">>)).

coordinator_section_before_engine_section_test() ->
    Text = iolist_to_binary(sluice_cli_load_help:text(
                              [{engines, "engines", integer, undefined, "engine processes"}],
                              ?ENGINE_HELP)),
    {C, _} = binary:match(Text, <<"coordinator options">>),
    {N, _} = binary:match(Text, <<"  --engines N">>),
    {E, _} = binary:match(Text, <<"engine options">>),
    {D, _} = binary:match(Text, <<"  --duration SECONDS">>),
    ?assert(C < N andalso N < E andalso E < D),
    ?assertEqual(nomatch, binary:match(Text, <<"sluice-load [OPTIONS]">>)).
