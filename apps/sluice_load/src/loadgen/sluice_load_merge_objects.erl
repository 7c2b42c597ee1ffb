%% @doc The engine's nested objects whose fields each have their own rule
%% when several engines' results become one (sluice_load_merge does the
%% rest): `storm' (per wave), `tls', and the kernel's ListenOverflows and
%% ListenDrops (`kernel', `storm.reopen_kernel').
%%
%% The kernel's counters are host-wide: engines of one run on one host
%% read the same counters over nearly the same window, so adding them up
%% would count every drop once per engine. Per host the merge takes the
%% union of the engines' windows (the earliest `before', the latest
%% `after'); over several hosts, which count different listeners, it adds
%% the hosts' figures and lists them.
-module(sluice_load_merge_objects).

-export([storm/1, tls/2, kernel/1]).

-type obj() :: #{binary() => term()}.

%% The order of storm's phases: the merged run reached the phase its
%% slowest engine reached.
-define(PHASES, [<<"open">>, <<"hold">>, <<"close">>, <<"reopen">>, <<"done">>]).

%% @doc One `storm' object from the engines' (each ran its share of the
%% connections, the waves at the same time).
-spec storm([obj()]) -> obj().
storm([First | _] = Ss) ->
    Get = fun(K) -> [maps:get(K, S) || S <- Ss, maps:is_key(K, S)] end,
    First#{<<"source_addresses">> => lists:sum(Get(<<"source_addresses">>)),
           <<"source_addresses_auto">> => lists:member(true, Get(<<"source_addresses_auto">>)),
           <<"reached">> => least_phase(Get(<<"reached">>)),
           <<"open">> => wave(Get(<<"open">>)),
           <<"reopen">> => wave(Get(<<"reopen">>)),
           <<"close_s">> => max_of(Get(<<"close_s">>)),
           <<"reopen_connects_issued_s">> => max_of(Get(<<"reopen_connects_issued_s">>)),
           <<"reopen_kernel">> => kernel(Get(<<"reopen_kernel">>))}.

least_phase(Phases) ->
    case [P || P <- ?PHASES, lists:member(P, Phases)] of
        [Least | _] -> Least;
        [] -> null
    end.

%% A wave: counts added; the time until all were back is the longest of
%% the engines' (their waves start together), the rate over that time.
wave([]) ->
    null;
wave(Ws) ->
    Sum = fun(K) -> lists:sum([maps:get(K, W, 0) || W <- Ws]) end,
    Back = Sum(<<"back">>),
    Time = max_of([maps:get(<<"time_s">>, W, 0) || W <- Ws]),
    Counts = #{<<"attempts">> => Sum(<<"attempts">>),
               <<"handshakes">> => Sum(<<"handshakes">>),
               <<"back">> => Back,
               <<"all_back">> => lists:all(fun(W) -> maps:get(<<"all_back">>, W, false) =:= true
                                           end, Ws),
               <<"time_s">> => Time,
               <<"rate_per_s">> => case Time > 0 of true -> Back / Time; false -> 0 end,
               <<"failures">> => sluice_load_merge:sum_maps([maps:get(<<"failures">>, W, #{})
                                                             || W <- Ws])},
    maps:merge(maps:merge(Counts, latency(<<"connect_latency_us">>, <<"connect_hist">>, Ws)),
               latency(<<"back_latency_us">>, <<"back_hist">>, Ws)).

%% @doc One `tls' object from the engines' (`Results': the engines' whole
%% results, for the span of their connects).
-spec tls([obj()], [obj()]) -> obj().
tls([First | _] = Ts, Results) ->
    Sum = fun(K) -> lists:sum([maps:get(K, T, 0) || T <- Ts]) end,
    Full = Sum(<<"full_handshakes">>),
    %% as the merged connect rate: the engines connect at the same time
    Span = max_of([maps:get(<<"span_s">>, C, 0) || #{<<"connect">> := C} <- Results]),
    maps:merge(First#{<<"version">> => one_or_all(<<"version">>, Ts),
                      <<"cipher">> => one_or_all(<<"cipher">>, Ts),
                      <<"alpn">> => one_or_all(<<"alpn">>, Ts),
                      <<"handshakes">> => Sum(<<"handshakes">>),
                      <<"full_handshakes">> => Full,
                      <<"resumed">> => Sum(<<"resumed">>),
                      <<"full_handshakes_per_s">> => case Span > 0 of
                                                         true -> Full / Span;
                                                         false -> 0
                                                     end},
               latency(<<"handshake_latency_us">>, <<"handshake_hist">>, Ts)).

%% What the engines negotiated: one value when they agree (they talk to
%% the same server), all of them when they do not.
one_or_all(K, Ts) ->
    case lists:usort([V || T <- Ts, V <- [maps:get(K, T, null)], V =/= null]) of
        [] -> null;
        [V] -> V;
        Vs -> Vs
    end.

%% @doc One kernel object from the engines' (`null' where an engine could
%% not read /proc/net/netstat): the same shape as an engine's for one
%% host; `scope' "hosts", the sum and a `hosts' list for several.
-spec kernel([obj() | null]) -> obj() | null.
kernel(Ks) ->
    case [K || K <- Ks, is_map(K)] of
        [] -> null;
        Valid ->
            Hosts = lists:usort([maps:get(<<"host">>, K, <<>>) || K <- Valid]),
            case [host_kernel([K || K <- Valid, maps:get(<<"host">>, K, <<>>) =:= H]) || H <- Hosts] of
                [One] -> One;
                Many ->
                    [First | _] = Many,
                    Sum = fun(F) -> lists:sum([maps:get(F, H) || H <- Many]) end,
                    #{<<"scope">> => <<"hosts">>,
                      <<"source">> => maps:get(<<"source">>, First, null),
                      <<"listen_overflows">> => Sum(<<"listen_overflows">>),
                      <<"listen_drops">> => Sum(<<"listen_drops">>),
                      <<"hosts">> => Many}
            end
    end.

%% The engines of one host: the union of their windows, from the raw
%% counters; the largest delta where an engine gave none.
host_kernel([First | _] = Ks) ->
    case lists:all(fun(K) -> is_map_key(<<"before">>, K) andalso is_map_key(<<"after">>, K) end, Ks) of
        true ->
            Edge = fun(Side, F, Pick) -> Pick([maps:get(F, maps:get(Side, K)) || K <- Ks]) end,
            Before = maps:from_list([{F, Edge(<<"before">>, F, fun lists:min/1)} || F <- counters()]),
            After = maps:from_list([{F, Edge(<<"after">>, F, fun lists:max/1)} || F <- counters()]),
            First#{<<"before">> => Before, <<"after">> => After,
                   <<"listen_overflows">> => maps:get(<<"ListenOverflows">>, After)
                                             - maps:get(<<"ListenOverflows">>, Before),
                   <<"listen_drops">> => maps:get(<<"ListenDrops">>, After)
                                         - maps:get(<<"ListenDrops">>, Before)};
        false ->
            First#{<<"listen_overflows">> => max_of([maps:get(<<"listen_overflows">>, K, 0) || K <- Ks]),
                   <<"listen_drops">> => max_of([maps:get(<<"listen_drops">>, K, 0) || K <- Ks])}
    end.

counters() -> [<<"ListenOverflows">>, <<"ListenDrops">>].

%% A latency object (`LatKey', microseconds) and its histogram (`HistKey')
%% merged: percentiles from the summed buckets, the exact mean from the
%% engines' means.
latency(LatKey, HistKey, Objs) ->
    H = sluice_hist:merge([maps:get(HistKey, O) || O <- Objs, is_map_key(HistKey, O)]),
    Mean = sluice_load_merge:mean([maps:get(LatKey, O, #{}) || O <- Objs]),
    #{HistKey => H, LatKey => (sluice_hist:latency(H))#{<<"mean">> => Mean}}.

max_of([]) -> 0;
max_of(L) -> lists:max(L).
