%% EUnit tests of the pure parts of the load coordinator: the split over
%% engines and source addresses, and the Prometheus text the server memory
%% comes from (histograms and merging: sluice_hist_tests).
-module(sluice_load_plan_tests).

-include_lib("eunit/include/eunit.hrl").

split_adds_up_and_keeps_ramps_equal_test() ->
    Shares = sluice_load_plan:split(#{conns => 100001, rate => 5000.0,
                                      connect_concurrency => 256}, 6),
    ?assertEqual(100001, lists:sum([C || #{conns := C} <- Shares])),
    Cs = [C || #{conns := C} <- Shares],
    ?assert(lists:max(Cs) - lists:min(Cs) =< 1),
    %% every engine opens its share in the same time
    Times = [C / R || #{conns := C, rate := R} <- Shares],
    ?assert(lists:max(Times) - lists:min(Times) < 1.0e-9),
    ?assertEqual(lists:seq(0, 5), [I || #{index := I} <- Shares]).

split_never_makes_empty_engines_test() ->
    ?assertEqual([1, 1], [C || #{conns := C} <- sluice_load_plan:split(
                                                    #{conns => 2, rate => 0, connect_concurrency => 1}, 5)]).

engines_needed_respects_the_fd_limit_test() ->
    ?assertEqual(1, sluice_load_plan:engines_needed(19000)),
    ?assertEqual(6, sluice_load_plan:engines_needed(100000)).

auto_source_ips_only_past_one_address_on_loopback_test() ->
    Small = sluice_load_plan:split(#{conns => 12000, rate => 0, connect_concurrency => 256}, 2),
    ?assertEqual(none, sluice_load_plan:auto_source_ips({127, 0, 0, 1}, Small, true)),
    Big = sluice_load_plan:split(#{conns => 100000, rate => 0, connect_concurrency => 256}, 6),
    Sets = sluice_load_plan:auto_source_ips({127, 0, 0, 1}, Big, true),
    %% 16,667 a piece: two addresses each, none shared
    ?assertEqual([[{127, 0, 0, I}, {127, 0, 0, I + 1}] || I <- lists:seq(2, 12, 2)], Sets),
    ?assertEqual(none, sluice_load_plan:auto_source_ips({10, 0, 0, 1}, Big, true)).

%% storm takes two ports a connection (wave 1's wait in TIME_WAIT while
%% wave 2 connects): addresses from half the connections on.
auto_source_ips_two_ports_a_connection_test() ->
    Shares = sluice_load_plan:split(#{conns => 10000, rate => 0, connect_concurrency => 256}, 2),
    ?assertEqual(none, sluice_load_plan:auto_source_ips({127, 0, 0, 1}, Shares, true, 1)),
    %% 5,000 a piece, 10,000 ports each: one address each, none shared
    ?assertEqual([[{127, 0, 0, 2}], [{127, 0, 0, 3}]],
                 sluice_load_plan:auto_source_ips({127, 0, 0, 1}, Shares, true, 2)).

assign_ips_disjoint_when_enough_test() ->
    {ok, Ips} = sluice_load_plan:parse_ips("127.0.0.2-5"),
    ?assertEqual([[{127, 0, 0, 2}, {127, 0, 0, 4}], [{127, 0, 0, 3}, {127, 0, 0, 5}]],
                 sluice_load_plan:assign_ips(Ips, 2)),
    ?assertEqual([Ips, Ips, Ips, Ips, Ips], sluice_load_plan:assign_ips(Ips, 5)).

parse_ips_syntax_test() ->
    ?assertEqual({ok, [{127, 0, 0, 2}, {127, 0, 0, 3}, {10, 1, 1, 1}]},
                 sluice_load_plan:parse_ips("127.0.0.2-127.0.0.3,10.1.1.1")),
    ?assertEqual(error, sluice_load_plan:parse_ips("127.0.0.5-3")),
    ?assertEqual(error, sluice_load_plan:parse_ips("127.0.0.2-127.0.1.3")),
    ?assertEqual(error, sluice_load_plan:parse_ips("10.0.0")),
    %% an empty entry is refused, not dropped (as the engine refuses it)
    [?assertEqual(error, sluice_load_plan:parse_ips(S))
     || S <- ["127.0.0.1,,", ",127.0.0.1", "127.0.0.1,,127.0.0.2", ","]],
    ?assertEqual("127.0.0.2,127.0.0.3",
                 sluice_load_plan:format_ips([{127, 0, 0, 2}, {127, 0, 0, 3}])).

%% IPv6: an address, a list, a range in the last byte (one /120); no
%% short form (hex), no mixing with IPv4.
parse_ips_ipv6_test() ->
    ?assertEqual({ok, [{0, 0, 0, 0, 0, 0, 0, 1}]}, sluice_load_plan:parse_ips("::1")),
    ?assertEqual({ok, [{16#fd00, 0, 0, 0, 0, 0, 0, 2}, {16#fd00, 0, 0, 0, 0, 0, 0, 3},
                       {16#fd00, 0, 0, 0, 0, 0, 0, 4}, {0, 0, 0, 0, 0, 0, 0, 1}]},
                 sluice_load_plan:parse_ips("fd00::2-fd00::4,::1")),
    ?assertEqual(error, sluice_load_plan:parse_ips("fd00::2-4")),
    ?assertEqual(error, sluice_load_plan:parse_ips("fd00::2-fd00::1:4")),
    ?assertEqual(error, sluice_load_plan:parse_ips("fd00::ff-fd00::100")),
    ?assertEqual(error, sluice_load_plan:parse_ips("fd00::4-fd00::2")),
    ?assertEqual(error, sluice_load_plan:parse_ips("127.0.0.2-::3")),
    ?assertEqual({error, mixed}, sluice_load_plan:parse_ips("::1,127.0.0.1")),
    ?assertEqual("fd00::2,::1",
                 sluice_load_plan:format_ips([{16#fd00, 0, 0, 0, 0, 0, 0, 2},
                                              {0, 0, 0, 0, 0, 0, 0, 1}])),
    ?assertEqual(none, sluice_load_plan:auto_source_ips(
                         {0, 0, 0, 0, 0, 0, 0, 1}, [#{conns => 20000}], true, 2)).

prometheus_text_test() ->
    T = <<"# HELP sluice_connections open\n# TYPE sluice_connections gauge\n"
          "sluice_connections{node=\"a@h\",backend=\"inet\"} 3\n"
          "sluice_connections{node=\"all\"} 5\n"
          "sluice_beam_memory_bytes 1.5e6\n"
          "garbage line\n">>,
    ?assertEqual([{<<"sluice_connections">>, #{<<"node">> => <<"a@h">>, <<"backend">> => <<"inet">>}, 3.0},
                  {<<"sluice_connections">>, #{<<"node">> => <<"all">>}, 5.0},
                  {<<"sluice_beam_memory_bytes">>, #{}, 1.5e6}],
                 sluice_server_metrics:parse(T)).

per_conn_test() ->
    B = #{connections => 10.0, beam_memory => 1000.0, resident_memory => 2000.0, t_ms => 0},
    H = #{connections => 110.0, beam_memory => 201000.0, resident_memory => 402000.0, t_ms => 1},
    ?assertMatch(#{connections := 100.0, beam_bytes_per_conn := 2000.0,
                   resident_bytes_per_conn := 4000.0}, sluice_server_metrics:per_conn(B, H)),
    ?assertMatch(#{beam_bytes_per_conn := null}, sluice_server_metrics:per_conn(B, B)).

%% A scrape answered after an engine's window ended (the engines close
%% their connections then) counts the few connections still there beside
%% the memory of the many: 10 connections and most of the memory gave
%% 18,000 bytes per connection where the hold's scrapes said 2,000. The
%% report uses only the scrapes answered before the first engine's window
%% ended (its own `window_start_unix_ms' + `duration_s'); an engine with no
%% start bounds nothing.
memory_uses_only_scrapes_of_the_hold_test() ->
    Mem = fun(Conns, Beam, T) ->
                  #{connections => Conns, beam_memory => Beam, resident_memory => 2 * Beam,
                    t_ms => T}
          end,
    B = Mem(0.0, 1000.0, 0),
    Scrapes = [Mem(100.0, 201000.0, 10100), Mem(100.0, 221000.0, 11000),
               Mem(10.0, 181000.0, 12020)],
    Engines = [#{<<"window_start_unix_ms">> => 10000, <<"duration_s">> => 2.0},
               #{<<"window_start_unix_ms">> => 10050, <<"duration_s">> => 2.0},
               #{<<"duration_s">> => 0}],
    M = sluice_server_metrics:memory(B, Scrapes, Engines),
    ?assertMatch(#{connections := 100.0, beam_bytes_per_conn := 2200.0,
                   resident_bytes_per_conn := 4400.0,
                   range := #{scrapes := 2, beam := [2000.0, 2200.0]}}, M),
    %% no engine window known: every scrape with connections
    ?assertMatch(#{connections := 10.0, range := #{scrapes := 3}},
                 sluice_server_metrics:memory(B, Scrapes, [#{}])),
    %% the hold's scrapes all came after its end, or none: no figures
    ?assertEqual(none, sluice_server_metrics:memory(B, [lists:last(Scrapes)], Engines)),
    ?assertEqual(none, sluice_server_metrics:memory(none, Scrapes, Engines)).
