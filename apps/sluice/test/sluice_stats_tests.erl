%% The live count of a listener stays exact whatever order an acceptor's
%% claim on a connection supervisor's slot and that supervisor's restart
%% come in (sluice_stats: sup_claim/2, sup_unclaim/3, sup_reset/2).
-module(sluice_stats_tests).
-include_lib("eunit/include/eunit.hrl").

live(S) -> maps:get(connections, sluice_stats:read(S)).

new() ->
    S = sluice_stats:new(2, infinity),
    ok = sluice_stats:sup_reset(S, 1),
    ok = sluice_stats:sup_reset(S, 2),
    S.

%% Admitted, claimed, handed over and started: gone once.
claim_then_gone_test() ->
    S = new(),
    admitted = sluice_stats:admit(S),
    _ = sluice_stats:sup_claim(S, 1),
    ?assertEqual(1, live(S)),
    ok = sluice_stats:sup_gone(S, 1),
    ?assertEqual(0, live(S)).

%% The supervisor was gone before the claim, and its successor has not
%% reset yet: the claim is given back by its reset, not by the acceptor.
unclaim_before_reset_is_given_back_once_test() ->
    S = new(),
    admitted = sluice_stats:admit(S),
    Gen = sluice_stats:sup_claim(S, 1),
    ?assert(sluice_stats:sup_unclaim(S, 1, Gen)),
    ?assertEqual(0, live(S)),
    ok = sluice_stats:sup_reset(S, 1),
    ?assertEqual(0, live(S)).

%% The successor reset after the claim (taking it with it): the acceptor
%% must not give it back again.
reset_after_claim_takes_it_test() ->
    S = new(),
    admitted = sluice_stats:admit(S),
    Gen = sluice_stats:sup_claim(S, 1),
    ok = sluice_stats:sup_reset(S, 1),
    ?assertEqual(0, live(S)),
    ?assertNot(sluice_stats:sup_unclaim(S, 1, Gen)),
    ?assertEqual(0, live(S)).

%% A claim on the new generation is given back by the acceptor.
claim_on_new_generation_test() ->
    S = new(),
    ok = sluice_stats:sup_reset(S, 1),
    admitted = sluice_stats:admit(S),
    Gen = sluice_stats:sup_claim(S, 1),
    ?assert(sluice_stats:sup_unclaim(S, 1, Gen)),
    ?assertEqual(0, live(S)).

%% Connections of one supervisor do not affect the other's slot.
slots_are_per_supervisor_test() ->
    S = new(),
    [admitted = sluice_stats:admit(S) || _ <- [1, 2, 3]],
    _ = sluice_stats:sup_claim(S, 1),
    _ = sluice_stats:sup_claim(S, 2),
    _ = sluice_stats:sup_claim(S, 2),
    ok = sluice_stats:sup_reset(S, 2),
    ?assertEqual(1, live(S)),
    ok = sluice_stats:sup_gone(S, 1),
    ?assertEqual(0, live(S)).

%% The limit is exact under a burst of admissions from many processes.
admission_is_exact_under_contention_test() ->
    S = sluice_stats:new(1, 100),
    Self = self(),
    Pids = [spawn(fun() -> Self ! {self(), [sluice_stats:admit(S) || _ <- lists:seq(1, 50)]} end)
            || _ <- lists:seq(1, 8)],
    Results = lists:append([receive {P, R} -> R end || P <- Pids]),
    ?assertEqual(100, length([a || admitted <- Results])),
    ?assertEqual(100, live(S)).

%% A connection lost with its supervisor is counted closed (as `crashed')
%% exactly once, whichever of the acceptor's unclaim and the successor's
%% reset gives it back: accepted stays closed plus live.
lost_connection_is_closed_once_in_either_order_test() ->
    Figures = fun(S) ->
                      #{accepted := A, closed := C, close_reasons := #{crashed := X}} =
                          sluice_stats:read(S),
                      {A, C, X, live(S)}
              end,
    Unclaimed = new(),
    admitted = sluice_stats:admit(Unclaimed),
    Gen1 = sluice_stats:sup_claim(Unclaimed, 1),
    ?assert(sluice_stats:sup_unclaim(Unclaimed, 1, Gen1)),
    ok = sluice_stats:sup_reset(Unclaimed, 1),
    ?assertEqual({1, 1, 1, 0}, Figures(Unclaimed)),
    Reset = new(),
    [admitted = sluice_stats:admit(Reset) || _ <- [1, 2]],
    Gen2 = sluice_stats:sup_claim(Reset, 1),
    _ = sluice_stats:sup_claim(Reset, 1),
    ok = sluice_stats:sup_reset(Reset, 1),
    ?assertNot(sluice_stats:sup_unclaim(Reset, 1, Gen2)),
    ?assertEqual({2, 2, 2, 0}, Figures(Reset)).

%% A connection that counted its own reason (through its supervisor's
%% copy, of_sup/2) and was gone before its supervisor saw it: the
%% successor's reset counts it closed, not `crashed' again; one whose end
%% the supervisor saw takes its mark off (sup_gone/2); the other
%% supervisor's slot and a copy-less count (the supervisor's own) leave
%% no mark.
own_reason_is_not_counted_crashed_again_test() ->
    Figures = fun(S) ->
                      #{closed := C, close_reasons := CR} = sluice_stats:read(S),
                      {C, maps:filter(fun(_, V) -> V > 0 end, CR), live(S)}
              end,
    S = new(),
    [admitted = sluice_stats:admit(S) || _ <- lists:seq(1, 5)],
    [_ = sluice_stats:sup_claim(S, 1) || _ <- lists:seq(1, 4)],
    _ = sluice_stats:sup_claim(S, 2),
    Conn1 = sluice_stats:of_sup(S, 1),
    %% seen by the supervisor
    ok = sluice_stats:ended(Conn1, closed),
    ok = sluice_stats:sup_gone(S, 1),
    %% not seen: the client's close, the handler's
    ok = sluice_stats:ended(Conn1, closed),
    ok = sluice_stats:ended_by_handler(Conn1, bye),
    %% the other supervisor's
    ok = sluice_stats:ended(sluice_stats:of_sup(S, 2), idle_timeout),
    %% 1 seen, 3 lost of which 2 had their reasons: 1 crashed
    ok = sluice_stats:sup_reset(S, 1),
    ?assertEqual({4, #{peer_closed => 2, handler => 1, idle_timeout => 1, crashed => 1}, 1},
                 Figures(S)),
    ok = sluice_stats:sup_reset(S, 2),
    ?assertEqual({5, #{peer_closed => 2, handler => 1, idle_timeout => 1, crashed => 1}, 0},
                 Figures(S)).

%% A connection of a supervisor that its successor has reset (the
%% connection outlived it: a handler that traps exits) counts no reason
%% of its own: the reset counted it `crashed'; and it leaves no mark in
%% the successor's slot, whose own connections count as before. A mark
%% taken off where there is none (sup_gone/2) leaves the slot at none.
a_connection_of_a_reset_supervisor_counts_nothing_test() ->
    Figures = fun(S) ->
                      #{closed := C, close_reasons := CR} = sluice_stats:read(S),
                      {C, maps:filter(fun(_, V) -> V > 0 end, CR), live(S)}
              end,
    S = new(),
    [admitted = sluice_stats:admit(S) || _ <- [1, 2, 3]],
    _ = sluice_stats:sup_claim(S, 1),
    _ = sluice_stats:sup_claim(S, 2),
    Old = sluice_stats:of_sup(S, 1),
    ok = sluice_stats:sup_reset(S, 1),
    ok = sluice_stats:ended(Old, {shutdown, killed}),
    ok = sluice_stats:ended_by_handler(Old, bye),
    ?assertEqual({1, #{crashed => 1}, 2}, Figures(S)),
    ?assertEqual([0, 0], sluice_stats:marks(S)),
    _ = sluice_stats:sup_claim(S, 1),
    New = sluice_stats:of_sup(S, 1),
    ok = sluice_stats:ended(New, closed),
    ?assertEqual([1, 0], sluice_stats:marks(S)),
    ok = sluice_stats:sup_gone(S, 1),
    ok = sluice_stats:sup_gone(S, 2),
    ?assertEqual([0, 0], sluice_stats:marks(S)),
    ?assertEqual({3, #{crashed => 1, peer_closed => 1}, 0}, Figures(S)).

%% A supervisor killed in the middle of its count of a connection's end
%% (sup_gone/2, die_at/2: it kills itself there): before it, or after the
%% connection left its slot with its mark, every connection is closed
%% once with one reason, whatever the gone count modulo 4 has wrapped to
%% (here after 6 ends); between the live count and the slot, only the
%% live count is taken off twice (sup_gone/2 says why).
killed_supervisor_counts_each_end_once_test() ->
    Figures = fun(S) ->
                      #{accepted := A, closed := C, close_reasons := CR} = sluice_stats:read(S),
                      {A, C, maps:filter(fun(_, V) -> V > 0 end, CR), live(S)}
              end,
    Killed = fun(S, Point) ->
                     {Pid, MRef} = spawn_monitor(fun() ->
                                                         sluice_stats:sup_gone(
                                                           sluice_stats:die_at(S, Point), 1)
                                                 end),
                     receive {'DOWN', MRef, process, Pid, Why} -> Why end
             end,
    Run = fun(Point) ->
                  S = new(),
                  [admitted = sluice_stats:admit(S) || _ <- lists:seq(1, 9)],
                  [_ = sluice_stats:sup_claim(S, 1) || _ <- lists:seq(1, 9)],
                  Conn = sluice_stats:of_sup(S, 1),
                  %% six ended and seen gone, a seventh ended (its reason
                  %% marked), its supervisor killed counting its end; two
                  %% more die with it
                  [begin ok = sluice_stats:ended(Conn, closed), ok = sluice_stats:sup_gone(S, 1) end
                   || _ <- lists:seq(1, 6)],
                  ok = sluice_stats:ended(Conn, idle_timeout),
                  ?assertEqual(killed, Killed(S, Point)),
                  ok = sluice_stats:sup_reset(S, 1),
                  ?assertEqual([0, 0], sluice_stats:marks(S)),
                  %% and the successor counts on from there
                  admitted = sluice_stats:admit(S),
                  _ = sluice_stats:sup_claim(S, 1),
                  ok = sluice_stats:ended(sluice_stats:of_sup(S, 1), closed),
                  ok = sluice_stats:sup_gone(S, 1),
                  Figures(S)
          end,
    Whole = {10, 10, #{peer_closed => 7, idle_timeout => 1, crashed => 2}, 0},
    ?assertEqual(Whole, Run(start)),
    ?assertEqual(Whole, Run(slot)),
    ?assertEqual({10, 10, #{peer_closed => 7, idle_timeout => 1, crashed => 2}, -1},
                 Run(conns)).

%% Bytes that never reached the kernel (sluice_transport's unsent/1) are
%% counted apart: `bytes_out' leaves them out, `bytes_unsent' has them,
%% and their sum, every byte queued, only goes up.
unsent_bytes_are_counted_apart_test() ->
    S = new(),
    ok = sluice_stats:sent(S, 100),
    ?assertMatch(#{bytes_out := 100, bytes_unsent := 0}, sluice_stats:read(S)),
    ok = sluice_stats:unsent(S, 40),
    ok = sluice_stats:unsent(S, 0),
    ?assertMatch(#{bytes_out := 60, bytes_unsent := 40}, sluice_stats:read(S)),
    ok = sluice_stats:sent(S, 5),
    ?assertMatch(#{bytes_out := 65, bytes_unsent := 40}, sluice_stats:read(S)).
