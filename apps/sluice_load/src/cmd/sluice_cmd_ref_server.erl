%% @doc `bin/sluice ref-server': the C reference server (sluice-ref) in the
%% foreground, with the options of its own table (`--options-json'), parsed
%% and checked here like every other command's. `--protocol' defaults to
%% what `serve' defaults to: the raw binary requires it, the command should
%% answer like `serve' does.
-module(sluice_cmd_ref_server).

-export([run/1]).

-spec run([string()]) -> sluice_cli:result().
run(Args) ->
    case sluice_build:program("sluice-ref") of
        {error, Msg} ->
            {error, 1, Msg};
        {ok, Bin} ->
            case sluice_cprog:options(Bin) of
                {ok, #{summary := About, specs := Specs}} ->
                    run(Bin, About, [like_serve(S) || S <- Specs], Args);
                {error, Msg} ->
                    {error, 1, Msg}
            end
    end.

run(Bin, About, Specs, Args) ->
    case sluice_cli_args:parse(Specs, Args) of
        help ->
            io:put_chars(sluice_cli_args:usage("ref-server", About, Specs)),
            0;
        {error, Msg} ->
            {error, 2, Msg};
        {ok, O} ->
            case sluice_cprog:run(Bin, sluice_cli_args:to_args(Specs, O), []) of
                {ok, Status} -> Status;
                {error, Msg} -> {error, 1, Msg}
            end
    end.

like_serve(#{key := protocol} = S) ->
    [Default] = [atom_to_list(D) || #{key := protocol, default := D} <- sluice_cmd_serve:specs()],
    S#{default => Default, shown => Default, help => "protocol to serve"};
like_serve(S) ->
    S.
