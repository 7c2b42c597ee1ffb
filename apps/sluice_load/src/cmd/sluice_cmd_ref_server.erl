%% @doc `bin/sluice ref-server': the C reference server (sluice-ref) in the
%% foreground, with the options of its own table (`--options-json'), parsed
%% and checked here like every other command's. `--protocol' defaults to
%% what `serve' defaults to: the raw binary requires it, the command should
%% answer like `serve' does.
-module(sluice_cmd_ref_server).

-export([run/1]).

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    case sluice_cprog:table("sluice-ref") of
        {ok, Bin, #{summary := Summary, specs := Table}} ->
            Specs = [like_serve(S) || S <- Table],
            %% the exit codes come with the help, from sluice_cli_exit
            About = string:trim(lists:append([L ++ "\n" || L <- string:split(Summary, "\n", all),
                                                           not lists:prefix("Exit codes:", L)])),
            sluice_cli_args:with_options(
              "ref-server", About, Specs, Args,
              fun(O) -> sluice_cprog:run(Bin, sluice_cli_args:to_args(Specs, O), []) end);
        {error, Msg} ->
            {error, 1, Msg}
    end.

like_serve(#{key := protocol} = S) ->
    [Default] = [atom_to_list(D) || #{key := protocol, default := D} <- sluice_cmd_serve:specs()],
    S#{default => Default, shown => Default, help => "protocol to serve"};
like_serve(S) ->
    S.
