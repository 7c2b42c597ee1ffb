%% @doc The text of `bin/sluice load --help': every option the command
%% takes, in two sections. The coordinator's own options come from its
%% option table; the engine's come from `sluice-load --help' itself, so the
%% C engine stays the one place that documents them (a copy here would
%% drift). Pure: the caller runs the engine and passes its output.
-module(sluice_cli_load_help).

-export([text/2, engine_options/1]).

-define(ABOUT,
        "Drive a server with the C load engine (sluice-load). By default one engine\n"
        "process runs. Any of --engines, --nodes, --server-metrics or --scenario scale\n"
        "runs a coordinator in the VM instead: several engine processes (--engines K\n"
        "per node), on Erlang nodes started with peer (--nodes N local, or --nodes\n"
        "host1,host2 over ssh), their hold started together and their results and\n"
        "histograms merged into one report; with --server-metrics URL the report gives\n"
        "the server's memory per connection from its Prometheus figures.\n"
        "Exit codes: 0 ok, 1 protocol error or failure, 2 bad usage, 3 could not\n"
        "connect at all.\n").

-define(ENGINE_HEADING,
        "engine options (one engine process takes them all; the coordinator gives\n"
        "every engine the others, with the figures above split over the engines,\n"
        "and drives its engines itself with --progress-json, --go-stdin and --check):\n").

%% @doc The whole help: synopsis, the coordinator's section (`CoordSpecs',
%% those of its options that the engine does not take or takes with another
%% meaning) and the engine's section (`EngineHelp', the engine's own
%% `--help' output).
-spec text([sluice_cli_args:spec()], binary()) -> iolist().
text(CoordSpecs, EngineHelp) ->
    ["usage: bin/sluice load [options]\n\n", ?ABOUT, "\n",
     "coordinator options (several engines, nodes, server metrics):\n",
     sluice_cli_args:option_lines(CoordSpecs), "\n",
     ?ENGINE_HEADING, engine_options(EngineHelp)].

%% @doc The option lines of the engine's `--help' (what follows its
%% `options:' line): its synopsis names sluice-load, not this command. All
%% of it if that line is missing, so that nothing is hidden.
-spec engine_options(binary()) -> binary().
engine_options(Help) ->
    case binary:split(Help, <<"\noptions:\n">>) of
        [_, Options] -> Options;
        [_] -> Help
    end.
