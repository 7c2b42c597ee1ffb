%% The adaptive grant's rule (sluice_conn:adapt_grant/5): it grows while
%% the client reads its replies and wants more, and falls back to its
%% minimum as soon as the replies back up, whatever it had grown to. (The
%% pressure suite holds real connections to the grant they had; it cannot
%% tell whether a grant shrank: a never-reading client's connection blocks
%% in its send before most top-ups.)
-module(sluice_conn_tests).

-include_lib("eunit/include/eunit.hrl").

-define(MIN, 10).
-define(MAX, 64).

adapt(G, Queued, WantsMore) ->
    sluice_conn:adapt_grant(G, ?MIN, ?MAX, Queued, WantsMore).

doubles_while_the_client_wants_more_up_to_the_maximum_test() ->
    Grants = lists:foldl(fun(_, [G | _] = Acc) -> [adapt(G, false, true) | Acc] end,
                         [?MIN], lists:seq(1, 5)),
    ?assertEqual([10, 20, 40, 64, 64, 64], lists:reverse(Grants)).

stays_while_the_client_keeps_up_test() ->
    ?assertEqual(40, adapt(40, false, false)),
    ?assertEqual(?MIN, adapt(?MIN, false, false)).

falls_to_the_minimum_once_the_replies_back_up_test() ->
    [?assertEqual(?MIN, adapt(G, true, WantsMore))
     || G <- [?MIN, 20, 40, ?MAX], WantsMore <- [true, false]].
