%% @doc Supervises a listener's connection supervisors (one_for_one): a
%% killed sluice_conns_sup is restarted on its own, the acceptors keep
%% accepting and find the new one through the registry.
%% @private
-module(sluice_conns_sup_sup).
-behaviour(supervisor).
-export([start_link/1, init/1]).

-spec start_link(map()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Listener) ->
    supervisor:start_link(?MODULE, Listener).

-spec init(map()) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init(Listener = #{opts := #{num_conns_sups := N, shutdown_timeout := Shutdown,
                            handler := {H, _}}}) ->
    Children = [#{id => {sluice_conns_sup, I},
                  start => {sluice_conns_sup, start_link, [Listener, I]},
                  type => supervisor,
                  %% The conns_sup shuts its connections down itself, with
                  %% the listener's timeout; leave it room to do so.
                  shutdown => case Shutdown of
                                  infinity -> infinity;
                                  _ -> Shutdown + 1000
                              end,
                  %% The handler too: its upgrade changes the states
                  %% of the parked connections the conns_sup holds
                  %% (sluice_conns_sup:system_code_change/4)
                  modules => [sluice_conns_sup, H]}
                || I <- lists:seq(1, N)],
    {ok, {#{strategy => one_for_one, intensity => 10, period => 10}, Children}}.
