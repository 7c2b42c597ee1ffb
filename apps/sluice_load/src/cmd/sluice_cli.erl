%% @doc Entry point of `bin/sluice' (the script only finds the build and
%% starts this VM): picks the command, runs it, and prints its error, if
%% any, once. A command returns its exit code or `{error, Code, Message}';
%% nothing is thrown across modules. Every command's exit codes are in
%% sluice_cli_exit.
-module(sluice_cli).

-export([main/0, run/1, check/1, put_line/2]).

-export_type([result/0]).

-type result() :: non_neg_integer() | {error, pos_integer(), string()}.

-spec main() -> no_return().
main() ->
    %% A SIGTERM from now on waits for the command's handler (and one that
    %% came earlier, held by sluice-run, comes now).
    ok = sluice_signal:hold(),
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
        false -> {error, 2, unknown(Cmd)}
    end.

%% @doc What `run/1' would do with `Args', found without running anything:
%% `run' (the options are good), `help', or the usage error it would print
%% and exit with (`help' too for no command at all: the usage, exit 2).
%% The checks a C program makes itself (`load' with one
%% engine, `ref-server') and those that need the run (a port in use, a TLS
%% file) are not here.
-spec check([string()]) -> run | help | {error, pos_integer(), string()}.
check([]) ->
    help;
check([H | _]) when H =:= "--help"; H =:= "-h"; H =:= "help" ->
    help;
check([Cmd | Rest]) ->
    case lists:keyfind(Cmd, 1, commands()) of
        {_, Module, _} ->
            case Module:check(Rest) of
                {ok, _} -> run;
                help -> help;
                {error, Code, Msg} -> {error, Code, one_line(Msg)}
            end;
        false -> {error, 2, one_line(unknown(Cmd))}
    end.

unknown(Cmd) ->
    "unknown command " ++ Cmd ++ " (try bin/sluice --help)".

%% {Name, module with run/1 and check/1, one line about it}
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
    %% a message may quote an argument (`--port ٣', `ñ')
    put_line(standard_error, ["sluice: ", one_line(Msg)]),
    Code.

%% @doc Write `Chars' and a newline to `Device' in the encoding the
%% command line came in (file:native_name_encoding/0), for a line that may
%% quote an argument: stdout and stderr are Latin-1 devices, where `~ts'
%% writes `٣' as `\x{663}' and `~s' fails on it.
-spec put_line(io:device(), unicode:chardata()) -> ok.
put_line(Device, Chars) ->
    _ = case unicode:characters_to_binary([Chars, $\n], unicode, file:native_name_encoding()) of
            Bin when is_binary(Bin) -> file:write(Device, Bin);
            _ -> io:format(Device, "~ts~n", [Chars])
        end,
    ok.

%% A message quotes what the user typed, which may hold a newline or
%% another control character (`--port $'1\n2''): written as is, the one
%% line of a usage error would be two, or move the cursor.
one_line(Msg) ->
    lists:flatmap(fun($\n) -> "\\n";
                     ($\t) -> "\\t";
                     (C) when C < 32; C =:= 127 -> lists:flatten(io_lib:format("\\x~2.16.0B", [C]));
                     (C) -> [C]
                  end, lists:flatten(io_lib:format("~ts", [Msg]))).

-spec halt_after_flush(non_neg_integer()) -> no_return().
halt_after_flush(Code) ->
    %% halt/1 does not wait for the io server; let it write first.
    %% (A closed stdout, e.g. `| head', must not turn into a crash dump.)
    %% A write to a closed stdout does not fail the io:put_chars/1 that
    %% made it: the io server's port exits after, and only a later request
    %% fails. A command whose last write found stdout closed (`load --help
    %% | true') exits as a C tool killed by SIGPIPE would, as the commands
    %% that write more already did (main/0).
    erlang:halt(case stdout_lost() of
                    true -> 141;
                    false -> Code
                end, [{flush, true}]).

%% Whether what was written to stdout found it closed: the io server is
%% gone (it ends only when its port does), or its port is. The io server
%% has handed the port every earlier write by the time it answers
%% io:format(""), and a write that meets a closed pipe fails the port
%% then and there, so the port's state says it at once: no queue is every
%% byte in the kernel's pipe. Only bytes still queued (a full pipe, or a
%% port task that has not run yet) are waited for, up to 50 ms, for the
%% server to go; every command waited those 50 ms before (a `bin/sluice
%% serve' stopped 60 ms after its SIGTERM, a twentieth of a second on each
%% of the benchmark's runs).
stdout_lost() ->
    case {catch io:format(""), whereis(user)} of
        {ok, User} when is_pid(User) ->
            Ref = erlang:monitor(process, User),
            Wait = case output_port(User) of
                       gone -> 0;
                       written -> 0;
                       queued -> 50
                   end,
            receive {'DOWN', Ref, process, User, _} -> true
            after Wait ->
                    erlang:demonitor(Ref, [flush]),
                    output_port(User) =:= gone
            end;
        _ ->
            %% the io server failed the request, or is gone since
            true
    end.

%% The io server's output port: gone (closed by a failed write, or the
%% server with it), every byte given to the kernel, or bytes still queued
%% in it.
output_port(User) ->
    case erlang:process_info(User, links) of
        {links, Links} ->
            case [P || P <- Links, is_port(P)] of
                [] -> gone;
                Ports -> lists:foldl(fun(P, Acc) -> worst(queue(P), Acc) end, written, Ports)
            end;
        undefined ->
            gone
    end.

queue(P) ->
    case erlang:port_info(P, queue_size) of
        {queue_size, 0} -> written;
        {queue_size, _} -> queued;
        undefined -> gone
    end.

worst(gone, _) -> gone;
worst(_, gone) -> gone;
worst(queued, _) -> queued;
worst(_, queued) -> queued;
worst(written, written) -> written.
