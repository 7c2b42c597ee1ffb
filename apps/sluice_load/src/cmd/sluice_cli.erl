%% @doc Entry point of `bin/sluice' (the script only finds the build and
%% starts this VM): picks the command, runs it, and prints its error, if
%% any, once. A command returns its exit code or `{error, Code, Message}';
%% nothing is thrown across modules. Every command's exit codes are in
%% sluice_cli_exit.
-module(sluice_cli).

-export([main/0, run/1]).

-export_type([result/0]).

-type result() :: non_neg_integer() | {error, pos_integer(), string()}.

-spec main() -> no_return().
main() ->
    Code = try report(run(init:get_plain_arguments()))
           catch error:terminated ->
                   %% Standard output was closed under us (`bin/sluice bench
                   %% --list | head'): what a C tool killed by SIGPIPE exits
                   %% with, and no trace.
                   141;
                 Class:Reason:Stack ->
                   io:format(standard_error, "sluice: internal error: ~p:~p~n~p~n",
                             [Class, Reason, Stack]),
                   1
           end,
    halt_after_flush(Code).

%% @doc Run the command line `Args' (without the program name).
-spec run([string()]) -> result().
run([]) ->
    io:put_chars(usage()),
    2;
run([H | _]) when H =:= "--help"; H =:= "-h"; H =:= "help" ->
    io:put_chars(usage()),
    0;
run([Cmd | Rest]) ->
    case lists:keyfind(Cmd, 1, commands()) of
        {_, Module, _} -> Module:run(Rest);
        false -> {error, 2, "unknown command " ++ Cmd ++ " (try bin/sluice --help)"}
    end.

%% {Name, module with run/1, one line about it}
commands() ->
    [{"serve", sluice_cmd_serve, "run a sluice server (ack, ping or echo protocol)"},
     {"load", sluice_cmd_load, "drive a server with the C load engine"},
     {"ref-server", sluice_cmd_ref_server, "run the C reference server"},
     {"bench", sluice_cmd_bench,
      "run the benchmark matrix (or one cell of it) beside the C reference"},
     {"soak", sluice_cmd_soak,
      "minutes of mixed load and abuse; checks the VM returns to its baseline"},
     {"idle-memory", sluice_cmd_idle_memory,
      "memory per idle connection on the inet and socket backends"}].

usage() ->
    ["usage: bin/sluice COMMAND [options]\n\ncommands:\n",
     [io_lib:format("  ~-11s ~s~n", [Name, About]) || {Name, _, About} <- commands()],
     "\nbin/sluice COMMAND --help describes every option with its default, and the\n"
     "command's exit codes (2 is always bad usage).\n"].

report(Code) when is_integer(Code) ->
    Code;
report({error, Code, Msg}) ->
    io:format(standard_error, "sluice: ~ts~n", [Msg]),
    Code.

-spec halt_after_flush(non_neg_integer()) -> no_return().
halt_after_flush(Code) ->
    %% halt/1 does not wait for the io server; let it write first.
    %% (A closed stdout, e.g. `| head', must not turn into a crash dump.)
    _ = (catch io:format("")),
    erlang:halt(Code, [{flush, true}]).
