%% @doc The exit codes of every `bin/sluice' command, written once: each
%% command's `--help' prints its own from here, and docs/cli.md holds the
%% same table (sluice_docs_tests checks that every row is there, word for
%% word). A script can tell "the server misbehaved" from "the run was
%% incomplete" from "I was called wrong" without reading the output.
-module(sluice_cli_exit).

-export([codes/1, help/1, doc_rows/0, commands/0]).

-type command() :: string().

%% @doc The commands, in the order `bin/sluice --help' lists them.
-spec commands() -> [command()].
commands() ->
    ["serve", "load", "ref-server", "bench", "soak", "idle-memory"].

%% @doc A command's exit codes and what each means.
-spec codes(command()) -> [{non_neg_integer(), string()}].
codes("serve") ->
    [{0, "stopped by SIGTERM or Ctrl-C, after the drain (connections the drain closes are "
         "expected, not errors)"},
     {1, "could not serve: the address is in use or not available, a TLS file or the "
         "metrics port failed, the nodes could not start (--nodes: Erlang distribution, "
         "epmd, ssh), or every node was lost"},
     usage()];
codes("load") ->
    [{0, "no errors: every connection came up and stayed up, every reply was right"},
     {1, "a protocol error: a reply the protocol does not allow, an --ack that does not match "
         "the server's, or no reply at all (stderr says which); or an engine was lost, or the "
         "nodes could not start (--nodes: Erlang distribution, epmd, ssh; one line on "
         "stderr)"},
     usage(),
     {3, "no connection could be made at all"},
     {4, "the run completed with errors: connections failed or were closed by the server, or "
         "pings timed out (the errors line of the summary; the figures are complete). No "
         "scenario expects the server to close: storm closes its connections itself between "
         "its waves, and those are not errors"}];
codes("ref-server") ->
    [{0, "stopped by SIGTERM or Ctrl-C"},
     {1, "could not serve: the address is in use or not available"},
     {2, "bad usage, a TLS certificate or key that cannot be used included: one line on "
         "stderr"}];
codes("bench") ->
    [{0, "every run measured (a missed speed target does not change it: benchmarks are not "
         "tests); with --list, the runs listed"},
     {1, "a run failed, or the benchmark could not start"},
     usage(),
     {130, "interrupted by SIGTERM or Ctrl-C: the runs done are reported and written"}];
codes("soak") ->
    [{0, "every check passed: the VM is back at its baseline and no well-behaved client lost "
         "an ack (the abusive clients are closed by design)"},
     {1, "a check failed"},
     usage(),
     {130, "interrupted by SIGTERM or Ctrl-C: nothing was checked"}];
codes("idle-memory") ->
    [{0, "measured"},
     {1, "the measurement failed: the connections did not all come up or go idle, or "
         "would not fit under the open-file limit (ulimit -n)"},
     usage(),
     {130, "interrupted by SIGTERM or Ctrl-C"}].

usage() ->
    {2, "bad usage: one line on stderr"}.

%% @doc The exit codes as a `--help' section.
-spec help(command()) -> iolist().
help(Command) ->
    ["\nexit codes:\n",
     [[io_lib:format("  ~-4b ", [Code]), lists:join("\n       ", wrap(Text, 72)), "\n"]
      || {Code, Text} <- codes(Command)]].

%% Lines of at most Width characters (a longer word stands alone).
wrap(Text, Width) ->
    [Last | Lines] = lists:foldl(fun(Word, [Line | Done]) when Line =:= "" -> [Word | Done];
                                    (Word, [Line | Done]) ->
                                         case length(Line) + 1 + length(Word) =< Width of
                                             true -> [Line ++ " " ++ Word | Done];
                                             false -> [Word, Line | Done]
                                         end
                                 end, [""], string:lexemes(Text, " ")),
    lists:reverse([Last | Lines]).

%% @doc The rows of docs/cli.md's table: "| `serve` | 0 | ... |".
-spec doc_rows() -> [string()].
doc_rows() ->
    [lists:flatten(io_lib:format("| `~s` | ~b | ~ts |", [C, Code, Text]))
     || C <- commands(), {Code, Text} <- codes(C)].
