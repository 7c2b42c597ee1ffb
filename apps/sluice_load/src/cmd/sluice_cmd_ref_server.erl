%% @doc `bin/sluice ref-server': the C reference server (sluice-ref) in the
%% foreground, with the options of its own table (`--options-json'), parsed
%% and checked here like every other command's. `--protocol' defaults to
%% what `serve' defaults to: the raw binary requires it, the command should
%% answer like `serve' does.
-module(sluice_cmd_ref_server).

-export([run/1, check/1]).

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    case table() of
        {ok, Bin, About, Specs} ->
            sluice_cli_args:with_options(
              "ref-server", About, Specs, Args,
              fun(O) -> sluice_cprog:run(Bin, sluice_cli_args:to_args(Specs, O), []) end);
        {error, _, _} = E ->
            E
    end.

%% @doc The options of `Args', or run/1's usage error, without running the
%% server: what sluice-ref itself refuses (`--tls' without its files) is
%% found when it runs.
-spec check([string()]) -> {ok, map()} | help | {error, pos_integer(), string()}.
check(Args) ->
    case table() of
        {ok, _Bin, _About, Specs} -> sluice_cli_args:check(Specs, Args, fun(_) -> ok end);
        {error, _, _} = E -> E
    end.

table() ->
    case sluice_cprog:table("sluice-ref") of
        {ok, Bin, #{summary := Summary, specs := Table}} ->
            %% the exit codes come with the help, from sluice_cli_exit
            About = string:trim(lists:append([L ++ "\n" || L <- string:split(Summary, "\n", all),
                                                           not lists:prefix("Exit codes:", L)])),
            {ok, Bin, About, [like_serve(S) || S <- Table]};
        {error, Msg} ->
            {error, 1, Msg}
    end.

like_serve(#{key := protocol} = S) ->
    [Default] = [atom_to_list(D) || #{key := protocol, default := D} <- sluice_cmd_serve:specs()],
    S#{default => Default, shown => Default, help => "protocol to serve"};
like_serve(S) ->
    S.
