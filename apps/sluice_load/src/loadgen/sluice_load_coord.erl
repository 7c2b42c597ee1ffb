%% @doc Runs one load run over several engine processes (sluice_load_engine)
%% on this node or others, as one: the engines ramp up side by side; once
%% every one of them has resolved all its connections they are all told to
%% start the measured window (the hold) at once, so their rounds line up;
%% meanwhile one combined progress line goes to stderr, and the server's
%% metrics endpoint, when given, is scraped before the ramp (baseline), as
%% the hold starts and every second of it, until an engine begins to close
%% its connections. SIGTERM (or SIGINT through
%% bin/sluice) ends the run early; the engines still report what they
%% measured.
-module(sluice_load_coord).

-export([run/1]).

-export_type([engine/0, outcome/0]).

-type engine() :: #{id := non_neg_integer(), node := node(), args := [string()],
                    conns := pos_integer()}.
-type outcome() :: #{results := [{non_neg_integer(), integer(), binary() | none}],
                     texts := [{non_neg_integer(), binary()}],
                     baseline := sluice_server_metrics:sample() | none,
                     held := sluice_server_metrics:sample() | none,
                     held_all := [sluice_server_metrics:sample()],
                     metrics_error := string() | none,
                     interrupted := boolean()}.

%% @doc Run `Engines' with the binary `Bin'; returns when all have ended.
%% `scenario' names what the progress line counts (pongs, acks...).
-spec run(#{bin := file:filename(), engines := [engine()], progress := boolean(),
            server_metrics := string() | undefined, scenario => string()}) -> outcome().
run(#{bin := Bin, engines := Engines, progress := Progress, server_metrics := Url} = Run) ->
    ok = sluice_signal:install(self()),
    {Baseline, MErr} = case Url of
                           undefined -> {none, none};
                           _ -> case sluice_server_metrics:sample(Url) of
                                    {ok, Sample} -> {Sample, none};
                                    {error, E} -> {none, E}
                                end
                       end,
    Runners = maps:from_list([{Id, start_engine(Bin, E)} || #{id := Id} = E <- Engines]),
    _ = [erlang:monitor(process, Pid) || Pid <- maps:values(Runners)],
    erlang:send_after(1000, self(), tick),
    T0 = erlang:monotonic_time(millisecond),
    S0 = #{runners => Runners, progress => #{}, done => #{}, texts => [],
           go => false, url => Url, show => Progress, t0 => T0, last => {T0, 0, 0},
           baseline => Baseline, held => none, held_all => [], metrics_error => MErr,
           scraping => false, closing => false, interrupted => false, rounds => #{},
           scenario => maps:get(scenario, Run, "ping"),
           conns => lists:sum([C || #{conns := C} <- Engines])},
    S = loop(S0),
    #{results => [{Id, St, J} || {Id, {St, J}} <- lists:sort(maps:to_list(maps:get(done, S)))],
      texts => lists:reverse(maps:get(texts, S)),
      baseline => maps:get(baseline, S), held => maps:get(held, S),
      held_all => lists:reverse(maps:get(held_all, S)),
      metrics_error => maps:get(metrics_error, S),
      interrupted => maps:get(interrupted, S)}.

start_engine(Bin, #{id := Id, node := Node, args := Args}) when Node =:= node() ->
    sluice_load_engine:start(self(), Id, Bin, Args);
start_engine(Bin, #{id := Id, node := Node, args := Args}) ->
    erpc:call(Node, sluice_load_engine, start, [self(), Id, Bin, Args], 15000).

loop(S) ->
    case map_size(maps:get(done, S)) =:= map_size(maps:get(runners, S)) of
        true -> S;
        false -> loop(maybe_go(receive_one(S)))
    end.

receive_one(#{runners := Runners} = S) ->
    receive
        {engine_progress, Id, Line} ->
            case sluice_json:decode(Line) of
                {ok, P} -> closing(past_hold(P), S#{progress := (maps:get(progress, S))#{Id => P}});
                _ -> S
            end;
        {engine_round, Id, Line} ->
            case sluice_json:decode(Line) of
                {ok, R} -> live_round(Id, R, S);
                _ -> S
            end;
        {engine_text, Id, Line} ->
            io:format(standard_error, "engine ~b: ~s~n", [Id, Line]),
            S#{texts := [{Id, Line} | maps:get(texts, S)]};
        {engine_done, Id, Status, Json} ->
            closing(true, S#{done := (maps:get(done, S))#{Id => {Status, Json}}});
        {'DOWN', _, process, Pid, Reason} ->
            case [Id || {Id, P} <- maps:to_list(Runners), P =:= Pid,
                        not maps:is_key(Id, maps:get(done, S))] of
                [Id] ->
                    io:format(standard_error, "engine ~b: lost (~p)~n", [Id, Reason]),
                    closing(true, S#{done := (maps:get(done, S))#{Id => {lost, none}}});
                [] -> S
            end;
        {sluice_signal, sigterm} ->
            _ = [sluice_load_engine:stop(P) || P <- maps:values(Runners)],
            closing(true, S#{interrupted := true});
        {sluice_signal, _} ->
            S;
        tick ->
            erlang:send_after(1000, self(), tick),
            scrape(show(S));
        {scraped, {ok, _}} when map_get(closing, S) ->
            S#{scraping := false};
        {scraped, {ok, Sample}} ->
            S1 = S#{scraping := false, held := held(Sample, S)},
            case maps:get(held, S1) of
                Sample -> S1#{held_all := [Sample | maps:get(held_all, S1)]};
                _ -> S1
            end;
        {scraped, {error, E}} ->
            S#{scraping := false, metrics_error := E}
    end.

%% A round is shown once every engine still running has finished it
%% (merged like the final report's rounds).
live_round(Id, #{<<"round">> := K} = R, #{rounds := Rounds, runners := Runners, done := Done} = S) ->
    Got = maps:put(Id, R, maps:get(K, Rounds, #{})),
    case map_size(Got) >= map_size(Runners) - map_size(Done) of
        true ->
            [M] = maps:get(<<"rounds">>, sluice_load_merge:merge_rounds([#{<<"rounds">> => [X]} || X <- maps:values(Got)])),
            L = maps:get(<<"latency_us">>, M),
            maps:get(show, S) andalso
                io:format(standard_error,
                          "round ~b: up ~b  pings ~b  pongs ~b  timeouts ~b  skipped ~b  "
                          "p50 ~.1f  p99 ~.1f  p99.9 ~.1f  max ~.1f us~n",
                          [K, maps:get(<<"conns_up">>, M), maps:get(<<"pings">>, M),
                           maps:get(<<"pongs">>, M), maps:get(<<"timeouts">>, M),
                           maps:get(<<"skipped">>, M) | [float(maps:get(P, L)) || P <- [<<"p50">>, <<"p99">>, <<"p999">>, <<"max">>]]]),
            S#{rounds := maps:remove(K, Rounds)};
        false ->
            S#{rounds := Rounds#{K => Got}}
    end;
live_round(_Id, _R, S) ->
    S.

%% Every engine has resolved all its connections (or ended): start the
%% window everywhere at once (storm: the hold, once every engine's first
%% wave is over, so that they close and reopen together).
maybe_go(#{go := G} = S) when G =/= false -> S;
maybe_go(#{runners := Runners, progress := Prog, done := Done} = S) ->
    Ready = fun(Id) ->
                    maps:is_key(Id, Done) orelse
                        case maps:get(Id, Prog, #{}) of
                            #{<<"phase">> := <<"ramp">>} -> false;
                            #{<<"phase">> := <<"open">>} -> false;
                            #{<<"phase">> := _} -> true;
                            _ -> false
                        end
            end,
    case lists:all(Ready, maps:keys(Runners)) of
        true ->
            _ = [sluice_load_engine:go(P) || {Id, P} <- maps:to_list(Runners),
                                              not maps:is_key(Id, Done)],
            %% The hold's first scrape now, with every connection up, not
            %% at the next tick: that tick lands anywhere in the second,
            %% and a hold that ended before it, or before its answer (a
            %% --duration of a second or less, a slow server), had no
            %% scrape and the report said "no figures".
            scrape(S#{go := erlang:monotonic_time(millisecond)});
        false -> S
    end.

%% Once an engine may be closing its connections (its run over, an
%% interrupt, storm's close), a scrape can count a few connections still
%% there beside the memory of the many: their memory per connection was
%% the last scrape's, inflated. From then on no scrape is taken or kept.
%% An engine ends its window with no word before it closes (its result
%% comes after): sluice_load_run drops, too, the scrapes answered after
%% the first engine's window ended (sluice_server_metrics:memory/3).
closing(false, S) -> S;
closing(true, S) -> S#{closing := true}.

%% Storm's phases after its hold (sluice-load's README.md, storm).
past_hold(#{<<"phase">> := P}) ->
    lists:member(P, [<<"close">>, <<"reopen">>, <<"done">>]);
past_hold(_) ->
    false.

%% During the hold, keep the latest scrape taken while connections were
%% up (the one used for memory per connection).
held(Sample, #{held := Old}) ->
    case maps:get(connections, Sample) of
        C when C > 0 -> Sample;
        _ -> Old
    end.

scrape(#{url := undefined} = S) -> S;
scrape(#{go := false} = S) -> S;
scrape(#{scraping := true} = S) -> S;
scrape(#{closing := true} = S) -> S;
scrape(#{url := Url} = S) ->
    Self = self(),
    _ = spawn_link(fun() -> Self ! {scraped, sluice_server_metrics:sample(Url)} end),
    S#{scraping := true}.

show(#{show := false} = S) -> S;
show(#{progress := Prog, t0 := T0, last := {LT, LEst, LMsgs}, conns := Conns} = S) ->
    Now = erlang:monotonic_time(millisecond),
    Sum = fun(K) -> lists:sum([maps:get(K, P, 0) || P <- maps:values(Prog)]) end,
    Est = Sum(<<"established">>),
    Msgs = Sum(<<"messages">>),
    Dt = max(1, Now - LT) / 1000,
    Phase = case maps:get(go, S) of
                false -> "ramp";
                G -> io_lib:format("hold ~.1fs", [(Now - G) / 1000])
            end,
    io:format(standard_error,
              "[~6.1fs] up ~b/~b  failed ~b~s  est ~b/s~s  (~s)~s~n",
              [(Now - T0) / 1000, Sum(<<"up">>), Conns, Sum(<<"failed">>), reasons(Prog),
               round((Est - LEst) / Dt),
               replies(maps:get(scenario, S), round((Msgs - LMsgs) / Dt), Sum(<<"timeouts">>)),
               Phase, server_line(S)]),
    S#{last := {Now, Est, Msgs}}.

%% What the engines' `messages' count in the scenario, per second: a
%% lock-step or pipelined frame's ack was said as a pong. Connect counts
%% connections established (est already), and only pings time out.
replies(Sc, Rate, Timeouts) when Sc =:= "ping"; Sc =:= "scale" ->
    io_lib:format("  pongs ~b/s  timeouts ~b", [Rate, Timeouts]);
replies(Sc, Rate, _) when Sc =:= "lockstep"; Sc =:= "pipeline" ->
    io_lib:format("  acks ~b/s", [Rate]);
replies("flood", Rate, _) ->
    io_lib:format("  echoes ~b/s", [Rate]);
replies("storm", Rate, _) ->
    io_lib:format("  back ~b/s", [Rate]);
replies(_, _, _) ->
    "".

%% failures by reason over the engines: " (ETIMEDOUT 3, EMFILE 1)"
reasons(Prog) ->
    F = lists:foldl(fun(P, Acc) ->
                            maps:fold(fun(K, V, A) -> maps:update_with(K, fun(X) -> X + V end, V, A) end,
                                      Acc, maps:get(<<"failures">>, P, #{}))
                    end, #{}, maps:values(Prog)),
    case lists:reverse(lists:keysort(2, maps:to_list(F))) of
        [] -> "";
        L -> [" (", lists:join(", ", [[K, " ", integer_to_list(V)] || {K, V} <- L]), ")"]
    end.

server_line(#{baseline := B, held := H}) when is_map(B), is_map(H) ->
    #{connections := C, beam_bytes_per_conn := Beam, resident_bytes_per_conn := Rss} =
        sluice_server_metrics:per_conn(B, H),
    case Beam of
        null -> "";
        _ -> io_lib:format("  server: ~b conns, ~.2f KiB BEAM, ~.2f KiB RSS per conn",
                           [round(C), Beam / 1024, Rss / 1024])
    end;
server_line(_) -> "".
