%% A user's application for sluice_release_SUITE, as a team writes one:
%% its supervisor holds a listener (sluice_test_handler, which says
%% "bye" when drained and carries on) and, with `drain' in its start
%% argument, sluice:drain_child_spec/2 after it. Loaded from a spec term
%% in a peer VM (application:load/1), so no .app file is needed.
-module(sluice_release_app).
-behaviour(application).
-behaviour(supervisor).

-export([spec/1, start/2, stop/1, init/1]).

%% The application's spec, for application:load/1: `drain' or `no_drain'.
spec(Drain) ->
    {application, ?MODULE, [{description, "a user's application on sluice"},
                            {vsn, "1"}, {modules, [?MODULE]}, {registered, []},
                            {applications, [kernel, stdlib, sluice]},
                            {mod, {?MODULE, Drain}}]}.

start(_Type, Drain) ->
    supervisor:start_link(?MODULE, Drain).

stop(_State) ->
    ok.

init(Drain) ->
    Listener = sluice:child_spec(?MODULE, #{ip => {127, 0, 0, 1}, port => 0,
                                            handler => {sluice_test_handler,
                                                        #{on_drain => {reply, <<"bye\n">>}}}}),
    Children = case Drain of
                   drain -> [Listener, sluice:drain_child_spec([?MODULE], 10000)];
                   no_drain -> [Listener]
               end,
    {ok, {#{strategy => one_for_one}, Children}}.
