%% @doc One listener's supervisor (rest_for_one): the connection supervisors
%% first, then the acceptors with their listen sockets. The shared counters
%% and atomics are made here and published in the registry, so that they
%% survive the restart of any child below.
-module(sluice_listener_sup).
-behaviour(supervisor).

-include("sluice_counters.hrl").

-export([start_link/2, init/1]).

-define(MAX_ATOMIC, 16#7fffffffffffffff).

-spec start_link(term(), sluice_opts:opts()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Name, Opts) ->
    supervisor:start_link(?MODULE, {Name, Opts}).

-spec init({term(), sluice_opts:opts()}) ->
          {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init({Name, Opts}) ->
    #{num_conns_sups := NS, max_connections := Max, transport := Transport} = Opts,
    C = counters:new(?C_SIZE, [write_concurrency]),
    A = atomics:new(?A_SUP_BASE + 2 * NS, [{signed, true}]),
    atomics:put(A, ?A_MAX_CONNS, max_to_int(Max)),
    atomics:put(A, ?A_LAST_LOG, erlang:monotonic_time(millisecond) - 60000),
    ok = sluice_registry:register_listener(Name, self(),
                                           #{opts => Opts, counters => C, atomics => A}),
    Listener = #{name => Name, opts => Opts, counters => C, atomics => A,
                 transport => sluice_transport:module(Transport),
                 handler => maps:get(handler, Opts),
                 active => maps:get(active, Opts),
                 idle_timeout => maps:get(idle_timeout, Opts),
                 hibernate_after => maps:get(hibernate_after, Opts),
                 park_after => maps:get(park_after, Opts),
                 shutdown_timeout => maps:get(shutdown_timeout, Opts)},
    Children = [#{id => sluice_conns_sup_sup,
                  start => {sluice_conns_sup_sup, start_link, [Listener]},
                  type => supervisor, shutdown => infinity},
                #{id => sluice_acceptors_sup,
                  start => {sluice_acceptors_sup, start_link, [Listener]},
                  type => supervisor, shutdown => infinity}],
    {ok, {#{strategy => rest_for_one, intensity => 10, period => 10}, Children}}.

max_to_int(infinity) -> ?MAX_ATOMIC;
max_to_int(N) -> N.
