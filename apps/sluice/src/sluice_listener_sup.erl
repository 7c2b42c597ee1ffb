%% @doc One listener's supervisor (rest_for_one): the connection
%% supervisors first, then the owner of the listen sockets, then the
%% acceptors, then the process of its alarms (sluice_alarms). Suspending
%% the listener stops the sockets' owner and the acceptors (the sockets
%% close, new connects are refused) and leaves the connections and the
%% alarms running.
%% The listener's figures (sluice_stats) are made here and published in the
%% registry, so that they survive the restart of any child below.
%% @private
-module(sluice_listener_sup).
-behaviour(supervisor).

-export([start_link/2, init/1]).

-include_lib("kernel/include/logger.hrl").

-export_type([listener/0]).

%% What every process of a listener is started with: its name, its
%% validated options (every default filled in by sluice_opts), the
%% transport's callback module and its figures.
-type listener() :: #{name := sluice:name(),
                      opts := sluice_opts:opts(),
                      transport := module(),
                      stats := sluice_stats:stats()}.

-spec start_link(sluice:name(), sluice_opts:opts()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Name, Opts) ->
    case sluice_registry:running() of
        true -> start_registered(Name, Opts);
        false -> not_started(Name)
    end.

%% Embedded (child_spec/1,2) by an application that does not start
%% sluice, the start failed in init/1 with `{noproc, {gen_server, call,
%% [sluice_registry, ...]}}': its owner's supervisor now fails to start
%% with `sluice_not_started' as the child's reason, and the log says what
%% to do in one line, as for a listener that cannot listen
%% (sluice_listen_sockets), since nobody calls format_error/1 on a child's
%% reason. Under sluice_sup the application runs.
not_started(Name) ->
    ?LOG_ERROR("~ts", [sluice_syntax:format("sluice listener ~0p could not start: ~ts",
                                            [Name, sluice:format_error(sluice_not_started)])]),
    {error, sluice_not_started}.

start_registered(Name, Opts0) ->
    %% Under sluice_sup (start_listener/2), restarted by it: with the
    %% listen side its sockets were last opened with, which
    %% set_transport_opts/2 may have changed since the start, rather than
    %% the child spec's (sluice_listen_sockets keeps it). On the start's
    %% port, another's by then, each restart failed, and sluice_sup gave
    %% up, with every listener. Embedded, the owner restarts it.
    Top = whereis(sluice_sup) =:= self(),
    Opts = case Top of
               true -> maps:merge(Opts0, sluice_registry:kept_listen_side(Name));
               false -> Opts0
           end,
    case supervisor:start_link(?MODULE, {Name, Opts, Top}) of
        {ok, Pid} -> {ok, own_listen_socket(Opts, Pid)};
        Other -> Other
    end.

%% A listener embedded with sluice:child_spec/1,2 by a supervisor that
%% owns the `listen_socket' (opened in its init/1) is given it, as
%% sluice:start_listener/2 gives it: it then closes with the listener.
%% Owned by another process it stays that process's.
own_listen_socket(#{listen_socket := LSock, transport := T}, Pid) when LSock =/= none ->
    Mod = sluice_transport:module(T),
    _ = sluice_listen_socket:owner(Mod, LSock) =:= self()
        andalso sluice_listen_socket:give(Mod, LSock, Pid),
    Pid;
own_listen_socket(_Opts, Pid) ->
    Pid.

-spec init({sluice:name(), sluice_opts:opts(), boolean()}) ->
          {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init({Name, Opts = #{num_conns_sups := NS, max_connections := Max, transport := T}, Top}) ->
    Stats = sluice_stats:new(NS, Max),
    case sluice_registry:register_listener(Name, self(),
                                           #{opts => Opts, stats => Stats, top => Top}) of
        ok -> ok;
        %% A shutdown reason: the start fails with it, without a crash
        %% report (sluice:start_listener/2 says `already_started').
        {error, already_started} -> exit({shutdown, already_started})
    end,
    Listener = #{name => Name, opts => Opts, stats => Stats,
                 transport => sluice_transport:module(T)},
    Children = [#{id => sluice_conns_sup_sup,
                  start => {sluice_conns_sup_sup, start_link, [Listener]},
                  type => supervisor, shutdown => infinity},
                #{id => sluice_listen_sockets,
                  start => {sluice_listen_sockets, start_link, [Listener]},
                  type => worker},
                #{id => sluice_acceptors_sup,
                  start => {sluice_acceptors_sup, start_link, [Listener]},
                  type => supervisor, shutdown => infinity},
                %% Last: a suspend/1 (which stops the two before it) leaves
                %% it running; it arms the alarms once it runs, so the
                %% acceptors started before it never find it missing.
                #{id => sluice_alarms,
                  start => {sluice_alarms, start_link, [Listener]},
                  type => worker}],
    {ok, {#{strategy => rest_for_one, intensity => 10, period => 10}, Children}}.
