%% A plain one_for_one supervisor over the child specs it is given: a
%% user's supervision tree, for embedding listeners in tests.
-module(sluice_test_sup).
-behaviour(supervisor).
-export([init/1]).

init(Specs) ->
    {ok, {#{strategy => one_for_one, intensity => 1, period => 5}, Specs}}.
