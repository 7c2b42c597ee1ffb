%% @doc The reconnect storm's own figures in a benchmark (issue 15): what a
%% rate alone does not say. For each storm run, wave 2 (every client back
%% at once): the time until all were back, connect latency p50, p99 and
%% max (a SYN dropped by a full accept queue shows as a second or more),
%% the kernel's ListenOverflows during the wave, and failures by reason.
-module(sluice_bench_storm).

-export([figures/1, text/1, rows/1]).

%% @doc The storm figures of one run from the engine's JSON (`none' for
%% other scenarios, or a JSON without them).
-spec figures(map()) -> map() | none.
figures(#{<<"storm">> := #{<<"reopen">> := Reopen} = Storm}) ->
    Latency = object(<<"connect_latency_us">>, Reopen),
    Kernel = object(<<"reopen_kernel">>, Storm),
    #{back => maps:get(<<"back">>, Reopen, null),
      attempts => maps:get(<<"attempts">>, Reopen, null),
      time_s => maps:get(<<"time_s">>, Reopen, null),
      connect_us => maps:with([<<"p50">>, <<"p99">>, <<"max">>], Latency),
      listen_overflows => maps:get(<<"listen_overflows">>, Kernel, null),
      failures => maps:get(<<"failures">>, Reopen, #{})};
figures(_) ->
    none.

%% A JSON object of the engine's, `#{}' when absent or null: the engine
%% writes `"reopen_kernel": null' when it cannot read /proc/net/netstat
%% (no such file in the container, or no descriptor left), and that
%% null took the whole benchmark down, its results unwritten.
object(Key, Json) ->
    case maps:get(Key, Json, #{}) of
        #{} = M -> M;
        _ -> #{}
    end.

%% @doc Per storm run, one line (empty when no run has storm figures).
-spec text([map()]) -> iolist().
text(Runs) ->
    case rows(Runs) of
        [] -> [];
        Rows ->
            ["reconnect storm, wave 2 (every client back at once), per run:\n",
             [io_lib:format("  ~-16s round ~s  ~s back in ~s s  connect p50 ~s p99 ~s max ~s ms"
                            "  ListenOverflows ~s  failures: ~s~n", signed(Row)) || Row <- Rows],
             "\n"]
    end.

%% ListenOverflows as an increase ("+3"), "-" when the engine could not
%% read it.
signed(Row) ->
    {Before, [Over | After]} = lists:split(7, Row),
    Before ++ [case Over of "-" -> Over; _ -> "+" ++ Over end | After].

%% @doc The same per run as table rows (server, round, back, time, connect
%% p50/p99/max in ms, ListenOverflows, failures), for the HTML report.
-spec rows([map()]) -> [[string()]].
rows(Runs) ->
    [[atom_to_list(Sv), integer_to_list(Round), num(Back) ++ " of " ++ num(N), num(T),
      ms(L, <<"p50">>), ms(L, <<"p99">>), ms(L, <<"max">>), num(Over), failures(F)]
     || #{server := Sv, round := Round,
          storm := #{back := Back, attempts := N, time_s := T, connect_us := L,
                     listen_overflows := Over, failures := F}} <- Runs].

ms(L, K) ->
    case maps:get(K, L, null) of
        null -> "-";
        Us -> lists:flatten(io_lib:format("~.1f", [Us / 1000]))
    end.

num(null) -> "-";
num(N) when is_integer(N) -> integer_to_list(N);
num(X) when is_float(X) -> lists:flatten(io_lib:format("~.2f", [X])).

failures(F) when map_size(F) =:= 0 -> "none";
failures(F) ->
    lists:flatten(lists:join(", ", [io_lib:format("~s ~p", [K, V])
                                    || {K, V} <- lists:sort(maps:to_list(F))])).
