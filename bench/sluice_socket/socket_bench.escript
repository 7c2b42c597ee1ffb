#!/usr/bin/env escript
%% -*- erlang -*-
%% Compiles socket_bench.erl (beside this script) into
%% _build/bench/sluice_socket and runs it against the library built by
%% `make build'. From the repository root:
%%
%%   bench/sluice_socket/socket_bench.escript [--rounds R] [--warmup MS]
%%       [--duration MS] [--conns N] [--buffer BYTES|default] [--erl-flags F]
%%       [lockstep] [pipeline] [idle]
%%
%% (no scenario named: all three). It pins its servers and clients itself;
%% run it unpinned. The table goes to stdout, progress to stderr.

main(Args) ->
    Dir = filename:dirname(escript:script_name()),
    Root = filename:join(Dir, "../.."),
    Out = filename:join(Root, "_build/bench/sluice_socket"),
    ok = filelib:ensure_dir(filename:join(Out, "x")),
    {ok, socket_bench} = compile:file(filename:join(Dir, "socket_bench.erl"),
                                      [{outdir, Out}, report]),
    true = code:add_patha(Out),
    Defaults = #{rounds => 3, warmup => 1000, duration => 2000, conns => 5000,
                 buffer => 8192, erl_flags => "",
                 ebin => filename:absname(filename:join(Root, "_build/default/lib/sluice/ebin")),
                 dir => filename:absname(Out)},
    {Opts, Scenarios} = args(Args, Defaults, []),
    socket_bench:main(Opts, case Scenarios of [] -> [lockstep, pipeline, idle]; _ -> Scenarios end).

args([], Opts, Sc) -> {Opts, lists:reverse(Sc)};
args(["--rounds", N | Rest], Opts, Sc) -> args(Rest, Opts#{rounds => list_to_integer(N)}, Sc);
args(["--warmup", N | Rest], Opts, Sc) -> args(Rest, Opts#{warmup => list_to_integer(N)}, Sc);
args(["--duration", N | Rest], Opts, Sc) -> args(Rest, Opts#{duration => list_to_integer(N)}, Sc);
args(["--conns", N | Rest], Opts, Sc) -> args(Rest, Opts#{conns => list_to_integer(N)}, Sc);
args(["--erl-flags", F | Rest], Opts, Sc) -> args(Rest, Opts#{erl_flags => F}, Sc);
args(["--buffer", "default" | Rest], Opts, Sc) -> args(Rest, Opts#{buffer => default}, Sc);
args(["--buffer", N | Rest], Opts, Sc) -> args(Rest, Opts#{buffer => list_to_integer(N)}, Sc);
args([S | Rest], Opts, Sc) when S =:= "lockstep"; S =:= "pipeline"; S =:= "idle" ->
    args(Rest, Opts, [list_to_atom(S) | Sc]);
args([Other | _], _, _) ->
    io:format(standard_error, "unknown argument ~s~n", [Other]),
    halt(2).
