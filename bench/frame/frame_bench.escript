#!/usr/bin/env escript
%% -*- erlang -*-
%% Compiles frame_bench.erl (beside this script) and runs it against the
%% library built by `make build'. From the repository root:
%%
%%   taskset -c 0 bench/frame/frame_bench.escript [Rounds]

main(Args) ->
    Rounds = case Args of [N] -> list_to_integer(N); [] -> 5 end,
    Dir = filename:dirname(escript:script_name()),
    Ebin = filename:join([Dir, "..", "..", "_build", "default", "lib", "sluice", "ebin"]),
    true = code:add_patha(Ebin),
    {module, _} = code:ensure_loaded(sluice_frame),
    {ok, Mod, Beam} = compile:file(filename:join(Dir, "frame_bench.erl"), [binary, report]),
    {module, Mod} = code:load_binary(Mod, "frame_bench.erl", Beam),
    Mod:main(Rounds).
