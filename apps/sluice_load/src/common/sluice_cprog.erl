%% @doc The C programs as the CLI sees them: their option tables (each
%% program prints its own with `--options-json', so the C table stays the
%% one description of its options and the CLI parses, checks and documents
%% them from it) and running one in the foreground.
%%
%% A program run in the foreground has this VM's standard input, output and
%% error (no copy through the VM: progress lines, terminal detection and
%% buffering are the program's own), its exit status becomes the command's,
%% and SIGTERM (SIGINT too, through sluice-run) is passed on to it: it then
%% ends as it would on its own signal (the engine reports, the reference
%% server stops). The program runs in a session of its own (erl_child_setup
%% makes it one), so the VM is what passes a terminal's Ctrl-C on.
-module(sluice_cprog).

-export([table/1, options/1, specs/1, run/3, output/2]).

%% @doc The path of the C program `Name' of this build and its option
%% table (options/1).
-spec table(string()) -> {ok, file:filename(), #{summary := string(),
                                                  specs := [sluice_cli_args:spec()]}}
                         | {error, string()}.
table(Name) ->
    case sluice_build:program(Name) of
        {ok, Path} ->
            case options(Path) of
                {ok, Table} -> {ok, Path, Table};
                {error, _} = E -> E
            end;
        {error, _} = E ->
            E
    end.

%% @doc The option table of the C program at `Path': its summary and its
%% options as sluice_cli_args specs.
-spec options(file:filename()) ->
          {ok, #{summary := string(), specs := [sluice_cli_args:spec()]}} | {error, string()}.
options(Path) ->
    case output(Path, ["--options-json"]) of
        {0, Out} ->
            case sluice_json:decode(Out) of
                {ok, #{<<"summary">> := Summary} = Table} ->
                    {ok, #{summary => unicode:characters_to_list(Summary),
                           specs => specs(Table)}};
                _ ->
                    {error, Path ++ " --options-json printed no option table"}
            end;
        {Status, Out} ->
            {error, lists:flatten(io_lib:format("~s --options-json exited ~p: ~s",
                                                [Path, Status, string:trim(Out)]))}
    end.

%% @doc The specs of a decoded option table. A C option not given is not
%% passed (its default is `undefined'); --help shows the program's own
%% wording of its default.
-spec specs(map()) -> [sluice_cli_args:spec()].
specs(#{<<"options">> := Options}) ->
    [spec(O) || O <- Options].

spec(#{<<"name">> := Name, <<"type">> := Type, <<"help">> := Help} = O) ->
    Flag = binary_to_list(Name),
    Key = binary_to_atom(iolist_to_binary(string:replace(Name, "-", "_", all))),
    Base = #{key => Key, flag => Flag, help => binary_to_list(Help),
             type => type(Type, O),
             default => case Type of <<"flag">> -> false; _ -> undefined end,
             shown => case O of
                          #{<<"default">> := D} -> binary_to_list(D);
                          _ when Type =:= <<"flag">> -> "off";
                          _ -> "none"
                      end},
    case O of
        #{<<"meta">> := Meta} -> Base#{meta => binary_to_list(Meta)};
        _ -> Base
    end.

type(<<"int">>, #{<<"min">> := Lo, <<"max">> := Hi}) -> {integer, round(Lo), round(Hi)};
type(<<"double">>, #{<<"min">> := Lo, <<"max">> := Hi}) -> {number, Lo, Hi};
type(<<"flag">>, _) -> boolean;
type(<<"choice">>, #{<<"choices">> := Cs}) -> {choice, [binary_to_list(C) || C <- Cs]};
type(<<"string">>, _) -> string.

%% @doc Run `Path' with `Args' and the extra environment `Env' in the
%% foreground (see the module doc): the command's result is the program's
%% exit status (128+N when signal N killed it).
-spec run(file:filename(), [string()], [{string(), string()}]) -> sluice_cli:result().
run(Path, Args, Env) ->
    ok = sluice_signal:install(self()),
    try open_port({spawn_executable, Path}, [{args, Args}, {env, Env}, nouse_stdio,
                                             exit_status, hide]) of
        Port ->
            {os_pid, OsPid} = erlang:port_info(Port, os_pid),
            wait(Port, OsPid)
    catch error:Reason ->
            {error, 1, lists:flatten(io_lib:format("cannot run ~s: ~p", [Path, Reason]))}
    end.

wait(Port, OsPid) ->
    receive
        {Port, {exit_status, Status}} ->
            Status;
        {sluice_signal, sigterm} ->
            _ = os:cmd("kill -TERM " ++ integer_to_list(OsPid)),
            wait(Port, OsPid);
        _ ->
            wait(Port, OsPid)
    end.

%% @doc Run `Path' with `Args' to its end; its exit status and its output
%% (standard output and error together).
-spec output(file:filename(), [string()]) -> {non_neg_integer() | error, binary() | string()}.
output(Path, Args) ->
    try open_port({spawn_executable, Path}, [{args, Args}, exit_status, binary,
                                             stderr_to_stdout, hide]) of
        Port -> collect_loop(Port, [])
    catch error:Reason ->
            {error, lists:flatten(io_lib:format("cannot run it: ~p", [Reason]))}
    end.

collect_loop(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect_loop(Port, [D | Acc]);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    end.
