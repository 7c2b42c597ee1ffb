%% @doc The server's own figures, read from its Prometheus endpoint
%% (`bin/sluice serve --metrics-port P' serves http://HOST:P/metrics), so
%% that a load run can report the server's memory per connection:
%% (memory during the hold - memory before the ramp) / connections held,
%% for the BEAM's memory (erlang:memory(total)) and the resident size of
%% the OS process(es). A server on several nodes labels each series with
%% `node="..."' and gives the sum as `node="all"'; that sum is used.
-module(sluice_server_metrics).

-export([fetch/1, parse/1, sample/1, per_conn/2, range/2, memory/3]).

-export_type([sample/0]).

%% The figures the report uses, from one scrape.
-type sample() :: #{connections := number(), beam_memory := number(),
                    resident_memory := number(), t_ms := integer()}.

%% @doc GET the URL; the body as a binary.
-spec fetch(string()) -> {ok, binary()} | {error, string()}.
fetch(Url) ->
    _ = application:ensure_all_started(inets),
    %% httpc resolves over IPv4 unless told: http://[::1]:P/metrics (serve
    %% --ip ::1 --metrics-port) was nxdomain, "no figures"
    ok = httpc:set_options([{ipfamily, ip_family(Url)}]),
    try httpc:request(get, {Url, []}, [{timeout, 5000}, {connect_timeout, 2000}],
                      [{body_format, binary}]) of
        {ok, {{_, 200, _}, _, Body}} -> {ok, Body};
        {ok, {{_, Code, _}, _, _}} -> {error, lists:flatten(io_lib:format("~s: HTTP ~b", [Url, Code]))};
        {error, Reason} -> {error, lists:flatten(io_lib:format("~s: ~p", [Url, Reason]))}
    catch _:Reason ->
            {error, lists:flatten(io_lib:format("~s: ~p", [Url, Reason]))}
    end.

ip_family("http://[" ++ _) -> inet6;
ip_family(_) -> inet.

%% @doc Prometheus text format: `{Name, Labels, Value}' per sample line
%% (comments and malformed lines are skipped).
-spec parse(binary()) -> [{binary(), #{binary() => binary()}, float()}].
parse(Text) ->
    [S || Line <- binary:split(Text, [<<"\n">>, <<"\r\n">>], [global]),
          S <- line(string:trim(Line))].

line(<<>>) -> [];
line(<<"#", _/binary>>) -> [];
line(Line) ->
    case re:run(Line, "^([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{([^}]*)\\})?\\s+(\\S+)",
                [{capture, all, binary}]) of
        {match, [_, Name, _, Labels, Value | _]} ->
            case number(Value) of
                {ok, V} -> [{Name, labels(Labels), V}];
                error -> []
            end;
        _ -> []
    end.

labels(<<>>) -> #{};
labels(Bin) ->
    {match, Pairs} = re:run(Bin, "([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\"",
                            [global, {capture, [1, 2], binary}]),
    maps:from_list([{K, V} || [K, V] <- Pairs]).

number(B) ->
    try {ok, float(binary_to_integer(B))}
    catch error:badarg ->
            try {ok, binary_to_float(B)}
            catch error:badarg -> error
            end
    end.

%% @doc Scrape once: the server's connections, BEAM memory and resident
%% memory, summed over its nodes.
-spec sample(string()) -> {ok, sample()} | {error, string()}.
sample(Url) ->
    case fetch(Url) of
        {ok, Body} ->
            Ss = parse(Body),
            {ok, #{connections => total(<<"sluice_connections">>, Ss),
                   beam_memory => total(<<"sluice_beam_memory_bytes">>, Ss),
                   resident_memory => total(<<"sluice_resident_memory_bytes">>, Ss),
                   t_ms => erlang:system_time(millisecond)}};
        {error, _} = E -> E
    end.

%% The node="all" sample when there is one, else the sum of the series.
total(Name, Ss) ->
    Vs = [{L, V} || {N, L, V} <- Ss, N =:= Name],
    case [V || {#{<<"node">> := <<"all">>}, V} <- Vs] of
        [V | _] -> V;
        [] -> lists:sum([V || {_, V} <- Vs])
    end.

%% @doc The report's memory per connection: the last scrape of the hold
%% (per_conn/2) and the band over its scrapes (range/2), from the scrapes
%% answered before the first engine's window ended; `none' without a
%% baseline or such a scrape. An engine closes its connections as its
%% window ends (at its end, or an interrupt): a scrape after that counted
%% the few connections still there beside the memory of the many, and
%% its memory per connection, the report's, came out inflated. `t_ms' is
%% when the answer came, so the server read its figures before it. The
%% windows are the engines' own (`window_start_unix_ms' + `duration_s',
%% their host's clock); an engine that reports no start bounds nothing.
-spec memory(sample() | none, [sample()], [#{binary() => term()}]) -> map() | none.
memory(none, _Scrapes, _Results) ->
    none;
memory(Base, Scrapes, Results) ->
    Ends = [S + D * 1000 || #{<<"window_start_unix_ms">> := S, <<"duration_s">> := D} <- Results,
                            is_number(S), is_number(D)],
    Held = [H || #{t_ms := T, connections := C} = H <- Scrapes, C > 0,
                 Ends =:= [] orelse T =< lists:min(Ends)],
    case Held of
        [] -> none;
        _ -> (per_conn(Base, lists:last(Held)))#{range => range(Base, Held)}
    end.

%% @doc Memory per connection between a baseline and a sample taken with
%% the connections held: bytes, or `null' when no connection is held.
-spec per_conn(sample(), sample()) -> map().
per_conn(Base, Held) ->
    Conns = maps:get(connections, Held) - maps:get(connections, Base),
    Per = fun(K) when Conns > 0 -> (maps:get(K, Held) - maps:get(K, Base)) / Conns;
             (_) -> null
          end,
    #{connections => Conns,
      beam_bytes_per_conn => Per(beam_memory),
      resident_bytes_per_conn => Per(resident_memory),
      baseline => Base, held => Held}.

%% @doc Lowest and highest memory per connection over the scrapes of the
%% hold (a ping round wakes hibernated connection processes, so one scrape
%% can sit anywhere in that band): `#{scrapes, beam := [Lo, Hi],
%% resident := [Lo, Hi]}'.
-spec range(sample(), [sample()]) -> map().
range(Base, Held) ->
    Ps = [P || H <- Held, #{beam_bytes_per_conn := B} = P <- [per_conn(Base, H)], B =/= null],
    MinMax = fun(K) -> case [maps:get(K, P) || P <- Ps] of
                           [] -> null;
                           Vs -> [lists:min(Vs), lists:max(Vs)]
                       end
             end,
    #{scrapes => length(Ps), beam => MinMax(beam_bytes_per_conn),
      resident => MinMax(resident_bytes_per_conn)}.
