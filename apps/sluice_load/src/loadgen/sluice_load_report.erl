%% @doc The report of a coordinated load run: the merged result printed the
%% way the C engine prints its own summary, plus the server's memory per
%% connection, and the same as one JSON object (`--json').
-module(sluice_load_report).

-export([text/2, json/2]).

-define(G(K, M), maps:get(K, M, 0)).

%% @doc The human summary. `Info' holds `engines', `nodes', `memory'
%% (sluice_server_metrics:per_conn/2 or none) and `server_metrics'.
-spec text(map(), map()) -> iolist().
text(R, Info) ->
    Sc = ?G(<<"scenario">>, R),
    [io_lib:format("sluice load ~s: ~b connection~s, ~b engine~s on ~b node~s (~b thread~s), "
                   "~.2f s measured~s~n",
                   [Sc, ?G(<<"conns">>, R), plural(?G(<<"conns">>, R)),
                    maps:get(engines, Info), plural(maps:get(engines, Info)),
                    maps:get(nodes, Info), plural(maps:get(nodes, Info)),
                    ?G(<<"threads">>, R), plural(?G(<<"threads">>, R)),
                    float(?G(<<"duration_s">>, R)),
                    case maps:get(<<"interrupted">>, R, false) of
                        true -> " (interrupted)";
                        _ -> ""
                    end]),
     scenario_text(Sc, R),
     case Sc of
         <<"connect">> -> [];
         <<"storm">> -> [];
         _ -> [io_lib:format("messages: ~b  rate: ~b/s  bytes: ~b~n",
                             [?G(<<"messages">>, R), round(?G(<<"rate">>, R)), ?G(<<"bytes">>, R)]),
               latency("latency", maps:get(<<"latency_us">>, R, #{}))]
     end,
     connect_text(maps:get(<<"connect">>, R, #{})),
     failures(maps:get(<<"failures">>, R, #{})),
     tls_text(maps:get(<<"tls">>, R, none)),
     kernel_text("kernel over the run", maps:get(<<"kernel">>, R, null)),
     errors_text(R),
     memory_text(maps:get(memory, Info), maps:get(server_metrics, Info))].

%% As the engine words it (c_src/outcome.c), with the exit code.
errors_text(R) ->
    Failures = lists:sum(maps:values(maps:get(<<"failures">>, R, #{}))),
    Lost = ?G(<<"engines_lost">>, R),
    Why = case ?G(<<"exit_code">>, R) of
              1 when Lost > 0 -> " (an engine was lost: see above)";
              1 -> " (protocol error: see above)";
              3 -> " (no connection at all: see connection failures)";
              _ ->
                  Parts = [io_lib:format("~s ~b", [What, N])
                           || {What, N} <- [{"connection failures", Failures},
                                            {"ping timeouts", ?G(<<"timeouts_whole_run">>, R)}],
                              N > 0],
                  case Parts of
                      [] -> "";
                      _ -> [" (", lists:join(", ", Parts), ")"]
                  end
          end,
    io_lib:format("errors: ~b~s; exit ~b~n", [?G(<<"errors">>, R), Why, ?G(<<"exit_code">>, R)]).

scenario_text(Sc, R) when Sc =:= <<"ping">>; Sc =:= <<"scale">> ->
    [io_lib:format("ping: every ~b ms, timeout ~b ms (connection kept on timeout): ~b pings, "
                   "~b pongs, ~b timeouts (~b over the whole run, ramp included), ~b skipped ticks, "
                   "~b late pongs~n",
                   [?G(<<"interval_ms">>, R), ?G(<<"timeout_ms">>, R), ?G(<<"pings">>, R),
                    ?G(<<"pongs">>, R), ?G(<<"timeouts">>, R), ?G(<<"timeouts_whole_run">>, R),
                    ?G(<<"skipped">>, R), ?G(<<"late_pongs">>, R)]),
     io_lib:format("~6s ~8s ~8s ~8s ~8s ~8s ~10s ~10s ~10s ~10s~n",
                   ["round", "up", "pings", "pongs", "timeouts", "skipped", "p50 us", "p99 us",
                    "p99.9 us", "max us"]),
     [begin
          L = maps:get(<<"latency_us">>, Rd, #{}),
          io_lib:format("~6b ~8b ~8b ~8b ~8b ~8b ~10.1f ~10.1f ~10.1f ~10.1f~n",
                        [?G(<<"round">>, Rd), ?G(<<"conns_up">>, Rd), ?G(<<"pings">>, Rd),
                         ?G(<<"pongs">>, Rd), ?G(<<"timeouts">>, Rd), ?G(<<"skipped">>, Rd),
                         float(?G(<<"p50">>, L)), float(?G(<<"p99">>, L)),
                         float(?G(<<"p999">>, L)), float(?G(<<"max">>, L))])
      end || Rd <- lists:sublist(maps:get(<<"rounds">>, R, []), 60)]];
scenario_text(<<"storm">>, #{<<"storm">> := S} = R) ->
    Probe = maps:get(<<"probe">>, S, <<"ping">>),
    [io_lib:format("storm: ~b connections from ~s, back = ~s, hold ~.1f s~n",
                   [?G(<<"conns">>, R),
                    case ?G(<<"source_addresses">>, S) of
                        0 -> "the kernel's choice of source address";
                        N -> io_lib:format("~b source addresses over the engines", [N])
                    end,
                    case Probe of
                        <<"ping">> -> "Ping answered with Pong";
                        _ -> "handshake done"
                    end, float(?G(<<"hold_s">>, S))]),
     wave_text("wave 1 (open, --connect-concurrency)", maps:get(<<"open">>, S, null), R, Probe),
     case lists:member(maps:get(<<"reached">>, S, null), [<<"reopen">>, <<"done">>]) of
         true ->
             [io_lib:format("closed all from this side in ~.3f s~n", [float(?G(<<"close_s">>, S))]),
              wave_text(io_lib:format("wave 2 (all at once: connects made in ~.3f s)",
                                      [float(?G(<<"reopen_connects_issued_s">>, S))]),
                        maps:get(<<"reopen">>, S, null), R, Probe),
              kernel_text("kernel during wave 2", maps:get(<<"reopen_kernel">>, S, null))];
         false ->
             io_lib:format("the run ended before wave 2 (phase ~s)~n", [maps:get(<<"reached">>, S)])
     end];
scenario_text(<<"connect">>, R) ->
    io_lib:format("held at end: ~b of ~b~n", [?G(<<"held_at_end">>, R), ?G(<<"conns">>, R)]);
scenario_text(_, _) ->
    [].

wave_text(_Name, null, _R, _Probe) ->
    [];
wave_text(Name, W, R, Probe) ->
    [io_lib:format("~s: ~b of ~b back in ~.3f s (~b/s), ~b attempts; ", [Name, ?G(<<"back">>, W),
                   ?G(<<"conns">>, R), float(?G(<<"time_s">>, W)), round(?G(<<"rate_per_s">>, W)),
                   ?G(<<"attempts">>, W)]),
     failures(maps:get(<<"failures">>, W, #{}), "failures"),
     latency("  connect latency", maps:get(<<"connect_latency_us">>, W, #{})),
     case Probe of
         <<"ping">> -> latency("  until Pong", maps:get(<<"back_latency_us">>, W, #{}));
         _ -> []
     end].

tls_text(none) ->
    [];
tls_text(T) ->
    Show = fun(null) -> "none";
              (V) when is_binary(V) -> V;
              (Vs) -> lists:join(" / ", Vs)
           end,
    [io_lib:format("tls: ~s ~s, ALPN ~s, SNI ~s, verify ~s; ~b handshakes (~b full, ~b resumed)~n",
                   [Show(maps:get(<<"version">>, T, null)), Show(maps:get(<<"cipher">>, T, null)),
                    Show(maps:get(<<"alpn">>, T, null)), Show(maps:get(<<"sni">>, T, null)),
                    case maps:get(<<"verify">>, T, false) of true -> "on"; _ -> "off" end,
                    ?G(<<"handshakes">>, T), ?G(<<"full_handshakes">>, T), ?G(<<"resumed">>, T)]),
     latency("tls handshake latency (after TCP's)", maps:get(<<"handshake_latency_us">>, T, #{}))].

%% Host-wide counters, never added up over the engines of one host
%% (sluice_load_merge_objects); one line per host when there are several.
kernel_text(_What, null) ->
    [];
kernel_text(What, #{<<"hosts">> := Hosts}) ->
    [kernel_text(io_lib:format("~s on ~s", [What, maps:get(<<"host">>, H, <<"?">>)]), H)
     || H <- Hosts];
kernel_text(What, K) ->
    io_lib:format("~s (host-wide, every listener, /proc/net/netstat): ListenOverflows +~b, "
                  "ListenDrops +~b~n", [What, ?G(<<"listen_overflows">>, K),
                                        ?G(<<"listen_drops">>, K)]).

connect_text(C) ->
    [io_lib:format("connect: ~b established of ~b attempts, ~b/s~n",
                   [?G(<<"established">>, C), ?G(<<"attempts">>, C), round(?G(<<"rate_per_s">>, C))]),
     latency("connect latency", maps:get(<<"latency_us">>, C, #{}))].

latency(Label, #{<<"samples">> := N} = L) when N > 0 ->
    io_lib:format("~s (us): p50 ~.1f  p90 ~.1f  p99 ~.1f  p99.9 ~.1f  max ~.1f  (~b samples)~n",
                  [Label | [float(?G(K, L)) || K <- [<<"p50">>, <<"p90">>, <<"p99">>, <<"p999">>,
                                                     <<"max">>]]] ++ [N]);
latency(Label, _) ->
    io_lib:format("~s: no samples~n", [Label]).

failures(F) ->
    failures(F, "connection failures").

failures(F, Label) when map_size(F) =:= 0 -> [Label, ": none\n"];
failures(F, Label) ->
    [Label, ":", [io_lib:format(" ~s ~b", [K, V]) || {K, V} <- lists:sort(maps:to_list(F))], "\n"].

memory_text(none, undefined) -> [];
memory_text(none, Url) ->
    io_lib:format("server memory: no figures from ~s~n", [Url]);
memory_text(#{connections := C, beam_bytes_per_conn := B, resident_bytes_per_conn := Rss,
              baseline := Base, held := Held} = M, Url) when B =/= null ->
    [io_lib:format("server memory per connection (~s, ~b connections over the baseline, last scrape of the hold): "
                  "BEAM ~b bytes (~.2f KiB), resident ~b bytes (~.2f KiB); "
                  "BEAM ~.1f -> ~.1f MiB, RSS ~.1f -> ~.1f MiB~n",
                  [Url, round(C), round(B), B / 1024, round(Rss), Rss / 1024,
                   mib(beam_memory, Base), mib(beam_memory, Held),
                   mib(resident_memory, Base), mib(resident_memory, Held)]),
     case M of
         #{range := #{scrapes := N, beam := [BLo, BHi], resident := [RLo, RHi]}} when N > 1 ->
             io_lib:format("  over ~b scrapes of the hold: BEAM ~b-~b bytes, resident ~b-~b bytes per connection~n",
                           [N, round(BLo), round(BHi), round(RLo), round(RHi)]);
         _ -> []
     end];
memory_text(_, Url) ->
    io_lib:format("server memory: no connections held in the figures from ~s~n", [Url]).

mib(K, M) -> maps:get(K, M) / 1048576.

plural(1) -> "";
plural(_) -> "s".

%% @doc The JSON object for `--json': the merged result, `server_memory',
%% and each engine's own result under `engine_results'.
-spec json(map(), map()) -> iodata().
json(R, Info) ->
    Mem = case maps:get(memory, Info) of
              none -> null;
              M -> M
          end,
    sluice_json:encode(R#{<<"server_memory">> => Mem,
                                <<"server_metrics">> => case maps:get(server_metrics, Info) of
                                                            undefined -> null;
                                                            U -> list_to_binary(U)
                                                        end,
                                <<"nodes">> => maps:get(nodes, Info),
                                <<"placement">> => maps:get(placement, Info),
                                <<"engine_results">> => maps:get(engine_results, Info)}).
