%% @doc Top supervisor: the registry first (listeners look themselves up in
%% it), then one sluice_listener_sup per listener started through the API.
%% @private
-module(sluice_sup).
-behaviour(supervisor).
-export([start_link/0, init/1]).

-spec start_link() -> {ok, pid()} | ignore | {error, term()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    Registry = #{id => sluice_registry,
                 start => {sluice_registry, start_link, []},
                 type => worker, shutdown => 5000},
    {ok, {#{strategy => one_for_one, intensity => 10, period => 10}, [Registry]}}.
