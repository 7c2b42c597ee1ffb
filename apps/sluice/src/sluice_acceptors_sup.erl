%% @doc Supervises a listener's acceptors (one_for_one): an acceptor that
%% dies is restarted on its own, on the same listen socket. The sockets
%% belong to sluice_listen_sockets, started before this supervisor; the
%% acceptors are spread over them in turn.
%% @private
-module(sluice_acceptors_sup).
-behaviour(supervisor).
-export([start_link/1, init/1]).

-spec start_link(sluice_listener_sup:listener()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Listener) ->
    supervisor:start_link(?MODULE, Listener).

-spec init(sluice_listener_sup:listener()) ->
          {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}} | ignore.
init(#{name := Name} = Listener) ->
    case sluice_registry:lookup(Name) of
        %% The sockets did not open again after a restart: the listener
        %% is suspended (sluice_listen_sockets:init/1), with no acceptors
        {ok, #{listen_sockets := []}} -> ignore;
        {ok, Row} -> acceptors(Listener, Row)
    end.

acceptors(Listener0 = #{stats := Stats}, Row = #{listen_sockets := LSocks}) ->
    %% The options the sockets were just opened with (sluice_listen_sockets),
    %% which set_transport_opts/2 may have changed since the listener
    %% started: `num_acceptors' among them.
    Listener = #{opts := #{num_acceptors := NA}} =
        Listener0#{opts := maps:get(listening, Row, maps:get(opts, Listener0))},
    %% The listener accepts again (started, resumed, or restarted by its
    %% supervisor): its acceptors wait for slots as they should.
    ok = sluice_stats:set_suspended(Stats, false),
    Tuple = list_to_tuple(LSocks),
    NL = tuple_size(Tuple),
    Children = [#{id => {sluice_acceptor, I},
                  start => {sluice_acceptor, start_link,
                            [Listener, element((I - 1) rem NL + 1, Tuple), I]},
                  %% Ends by itself once its listen socket is closed
                  %% (sluice_acceptor); killed only when the listener stops.
                  restart => transient,
                  shutdown => brutal_kill,
                  modules => [sluice_acceptor]}
                || I <- lists:seq(1, NA)],
    {ok, {#{strategy => one_for_one, intensity => 10, period => 1}, Children}}.
