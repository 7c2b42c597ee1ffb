#!/usr/bin/env escript
%% -*- erlang -*-
%% bench/ab.escript: several servers measured against each other on one
%% engine scenario, many short rounds, interleaved, for a difference of a
%% few percent that one `make bench' run (three rounds, each cell seconds
%% apart) cannot tell from this machine's noise.
%%
%% Every server is started once, pinned to core 0 in a session of its own
%% (as `make bench' starts them), and they all stay up; each round runs the
%% engine (core 1, or $ECORE) against each server in turn, the order
%% rotating from round to round, so that the machine's drift falls on all
%% alike. Printed: each round's rates and the servers' CPU per message
%% (user+sys of the server's whole process tree over the engine's run,
%% warmup included, divided by the rate times the run's length), then for
%% every server after the first the median, mean and standard error of
%% its per-round ratio to the first, by rate and by CPU per message (the
%% first's over this one's: higher is better for both).
%%
%%   bench/ab.escript ROUNDS SECONDS NAME='COMMAND' NAME='COMMAND' ... -- ENGINE ARGS
%%
%% A COMMAND prints `listening on IP:PORT' once it accepts (bin/sluice
%% serve does, and so do the peers' VMs). Example, the collection after
%% reads on and off beside the hand-written peer (bench/README.md, "Reads
%% freed at once"):
%%
%%   S="bin/sluice serve --ip 127.0.0.1 --port 0 --protocol ack --ack last"
%%   bench/ab.escript 30 1 "vm=$S --gc-after-bytes infinity" "sluice=$S" \
%%     "peer=erl +Bi -noshell -noinput -pa _build/default/lib/sluice_load/ebin
%%       -run sluice_peer_gen_tcp main inet ack last" \
%%     -- --scenario pipeline --conns 200 --window 1000 --threads 1 --ack last
-mode(compile).

main(Args) ->
    case lists:splitwith(fun(A) -> A =/= "--" end, Args) of
        {[Rounds, Secs | Servers = [_, _ | _]], ["--" | Engine]} ->
            N = try list_to_integer(Rounds) catch error:badarg -> 0 end,
            S = try seconds(Secs) catch error:badarg -> 0 end,
            (N > 0 andalso S > 0) orelse usage(),
            run(N, Secs, [server(Sv) || Sv <- Servers], Engine);
        _ ->
            usage()
    end.

usage() ->
    io:format(standard_error,
              "usage: bench/ab.escript ROUNDS SECONDS NAME=COMMAND NAME=COMMAND... "
              "-- ENGINE ARGS~n", []),
    halt(2).

server(Spec) ->
    case string:split(Spec, "=") of
        [Name, Cmd] when Name =/= "", Cmd =/= "" -> {Name, Cmd};
        _ -> die("not NAME=COMMAND: ~s", [Spec])
    end.

root() ->
    filename:dirname(filename:dirname(filename:absname(escript:script_name()))).

run(Rounds, Secs, Servers, Engine) ->
    true = code:add_patha(filename:join([root(), "_build", "default", "lib", "sluice_load", "ebin"])),
    Load = filename:join([root(), "apps", "sluice_load", "priv", "sluice-load"]),
    filelib:is_regular(Load) orelse die("~s not built: run make", [Load]),
    Tmp = string:trim(os:cmd("mktemp -d")),
    Started = [start(Name, Cmd, Tmp) || {Name, Cmd} <- Servers],
    try
        report(rounds(Rounds, Secs, Started, Load, Engine, Tmp))
    after
        [os:cmd("kill -TERM -" ++ integer_to_list(Pid) ++ " 2>/dev/null") || {_, Pid, _} <- Started],
        os:cmd("rm -rf " ++ Tmp)
    end.

%% setsid: a session of its own, whose process group is killed at the end.
start(Name, Cmd, Tmp) ->
    Out = filename:join(Tmp, Name ++ ".out"),
    Pid = string:trim(os:cmd("setsid taskset -c " ++ env("SCORE", "0") ++ " " ++ Cmd
                             ++ " > " ++ Out ++ " 2>&1 & echo $!")),
    {Name, list_to_integer(Pid), port(Name, Out, 300)}.

port(Name, _Out, 0) ->
    die("~s printed no `listening on IP:PORT'", [Name]);
port(Name, Out, Tries) ->
    Text = case file:read_file(Out) of
               {ok, T} -> T;
               {error, _} -> <<>>
           end,
    case re:run(Text, "listening on [0-9.]+:([0-9]+)", [{capture, [1], list}]) of
        {match, [Port]} -> Port;
        nomatch -> timer:sleep(100), port(Name, Out, Tries - 1)
    end.

%% One row a round, in the servers' order, of {rate, CPU ns per message};
%% the engine runs them in an order that rotates by one every round.
rounds(Rounds, Secs, Started, Load, Engine, Tmp) ->
    Names = [Name || {Name, _, _} <- Started],
    Rows = [begin
                {A, B} = lists:split((R - 1) rem length(Started), Started),
                Got = [{Name, measure(Load, Engine, Leader, Port, Secs, Tmp)}
                       || {Name, Leader, Port} <- B ++ A],
                Row = [proplists:get_value(Name, Got) || Name <- Names],
                io:format("round ~b:~s~n",
                          [R, [io_lib:format("  ~s ~.4g (~.4g ns/msg)", [N, Rt, C])
                               || {N, {Rt, C}} <- lists:zip(Names, Row)]]),
                Row
            end || R <- lists:seq(1, Rounds)],
    {Names, Rows}.

measure(Load, Engine, Leader, Port, Secs, Tmp) ->
    Tree = sluice_procfs:process_tree(Leader),
    T0 = sluice_procfs:cpu_ticks(Tree),
    Rate = rate(Load, Engine, Port, Secs, Tmp),
    T1 = sluice_procfs:cpu_ticks(Tree),
    Msgs = Rate * (0.5 + seconds(Secs)),
    Cpu = case Msgs > 0 of
              true -> (T1 - T0) * 1.0e9 / sluice_procfs:clk_tck() / Msgs;
              false -> 0.0
          end,
    {Rate, Cpu}.

rate(Load, Engine, Port, Secs, Tmp) ->
    Json = filename:join(Tmp, "run.json"),
    _ = file:delete(Json),
    Cmd = lists:join(" ", ["taskset", "-c", env("ECORE", "1"), Load | Engine]
                     ++ ["--host", "127.0.0.1", "--port", Port, "--warmup", "0.5",
                         "--duration", Secs, "--quiet", "--json", Json, ">/dev/null 2>&1"]),
    _ = os:cmd(lists:flatten(Cmd)),
    Result = case file:read_file(Json) of
                 {ok, Bin} -> sluice_json:decode(Bin);
                 Error -> Error
             end,
    case Result of
        {ok, #{<<"rate">> := R}} when is_number(R) -> float(R);
        _ -> 0.0
    end.

seconds(S) ->
    try list_to_float(S) catch error:badarg -> list_to_integer(S) end.

%% Each server's per-round ratios to the first server's.
report({[First | Names], Rows}) ->
    lists:foreach(
      fun({I, Name}) ->
              {Rs, Cs} = lists:unzip([lists:nth(I, Row) || Row <- Rows]),
              {Rs0, Cs0} = lists:unzip([hd(Row) || Row <- Rows]),
              Rates = sluice_bench_stats:ratios(Rs, Rs0),
              Cpus = sluice_bench_stats:ratios(Cs0, Cs),
              io:format("~s/~s: rate ~s; CPU per message (~s's / ~s's) ~s~n",
                        [Name, First, summary(Rates), First, Name, summary(Cpus)])
      end, lists:zip(lists:seq(2, length(Names) + 1), Names)).

summary([]) -> "n/a";
summary(L) ->
    io_lib:format("median ~.4f mean ~.4f s.e. ~.4f (~b rounds)",
                  [sluice_bench_stats:median(L), mean(L), se(L), length(L)]).

mean(L) -> lists:sum(L) / length(L).

se(L) when length(L) < 2 -> 0.0;
se(L) ->
    M = mean(L),
    math:sqrt(lists:sum([(X - M) * (X - M) || X <- L]) / (length(L) - 1)) / math:sqrt(length(L)).

env(Var, Default) ->
    case os:getenv(Var) of
        false -> Default;
        V -> V
    end.

die(Fmt, Args) ->
    io:format(standard_error, "bench/ab.escript: " ++ Fmt ++ "~n", Args),
    halt(1).
