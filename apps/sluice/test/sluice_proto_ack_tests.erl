%% EUnit: sluice_proto_ack's options, read as the listener's own are.
-module(sluice_proto_ack_tests).
-include_lib("eunit/include/eunit.hrl").

mode({ok, St}) -> element(2, St).

%% In a list the first of a repeated key wins, as proplists and Elixir's
%% Keyword read it (`[{ack, each} | Defaults]'): the last one did.
first_of_a_repeated_option_wins_test() ->
    ?assertEqual(each, mode(sluice_proto_ack:init(#{}, [{ack, each}, {ack, counted}]))),
    ?assertEqual(counted, mode(sluice_proto_ack:init(#{}, #{ack => counted}))),
    ?assertEqual(last, mode(sluice_proto_ack:init(#{}, []))).

%% Options that are not a map or a list of pairs close the connection
%% with `{bad_handler_opts, Opts}', as a bad value does (they crashed it:
%% badarg in maps:from_list/1, badmap in maps:get/3).
bad_options_are_refused_not_a_crash_test() ->
    [?assertEqual({close, {bad_handler_opts, O}}, sluice_proto_ack:init(#{}, O))
     || O <- [[each], [{ack, each}, counted], each, {ack, each}, #{ack => sometimes}]].
