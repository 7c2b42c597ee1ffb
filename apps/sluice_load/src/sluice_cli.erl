%% @doc Entry point of `bin/sluice' for the subcommands that run in the
%% Erlang VM (`ref-server' is a C binary the script runs directly, and so
%% is `load' unless it spans several engines or nodes: sluice_cli_load). Exit codes: 0 success, 1 failure, 2 bad usage.
-module(sluice_cli).

-export([main/0, fail/2]).

-spec main() -> no_return().
main() ->
    Args = init:get_plain_arguments(),
    Code = try dispatch(Args)
           catch throw:{exit, C} -> C;
                 Class:Reason:Stack ->
                     io:format(standard_error, "sluice: internal error: ~p:~p~n~p~n",
                               [Class, Reason, Stack]),
                     1
           end,
    halt_after_flush(Code).

dispatch([]) -> usage(), 2;
dispatch([H | _]) when H =:= "--help"; H =:= "-h"; H =:= "help" -> usage(), 0;
dispatch(["serve" | Rest]) -> sluice_cli_serve:run(Rest);
dispatch(["bench" | Rest]) -> sluice_bench:run(Rest);
dispatch(["idle-memory" | Rest]) -> sluice_bench_memory:run(Rest);
dispatch(["soak" | Rest]) -> sluice_soak:run(Rest);
dispatch(["load" | Rest]) -> sluice_cli_load:run(Rest);
dispatch([Cmd | _]) ->
    fail(2, "unknown command " ++ Cmd ++ " (try bin/sluice --help)").

usage() ->
    io:put_chars(
      "usage: bin/sluice COMMAND [options]\n\n"
      "commands:\n"
      "  serve       run a sluice server (ack, ping or echo protocol)\n"
      "  load        drive a server with the C load engine\n"
      "  ref-server  run the C reference server\n"
      "  bench       run the benchmark matrix (or one cell of it) beside the C reference\n"
      "  soak        minutes of mixed load and abuse; checks the VM returns to its baseline\n"
      "  idle-memory memory per idle connection on the inet and socket backends\n\n"
      "bin/sluice COMMAND --help describes every option with its default.\n").

%% @doc Print a one-line error on stderr and exit with `Code'.
-spec fail(non_neg_integer(), string()) -> no_return().
fail(Code, Msg) ->
    io:format(standard_error, "sluice: ~s~n", [Msg]),
    throw({exit, Code}).

-spec halt_after_flush(non_neg_integer()) -> no_return().
halt_after_flush(Code) ->
    %% halt/1 does not wait for the io server; let it write first.
    %% (A closed stdout, e.g. `| head', must not turn into a crash dump.)
    _ = (catch io:format("")),
    erlang:halt(Code, [{flush, true}]).
