%% @doc Owns a listener's listen sockets and supervises its acceptors. The
%% sockets are opened in init/1, so they belong to this process: an acceptor
%% that dies is restarted without the port closing, and suspending the
%% listener is terminating this supervisor (the sockets close with it).
-module(sluice_acceptors_sup).
-behaviour(supervisor).
-export([start_link/1, init/1]).

-spec start_link(map()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Listener) ->
    supervisor:start_link(?MODULE, Listener).

%% init/1 returns {stop, Reason} (e.g. eaddrinuse) when a socket cannot be
%% opened; supervisor passes it on, but its callback type does not list it.
-dialyzer({nowarn_function, init/1}).
-spec init(map()) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init(Listener = #{name := Name, transport := T, opts := Opts}) ->
    #{num_acceptors := NA, num_listen_sockets := NL} = Opts,
    %% On resume (and after a restart) bind the port found the first time,
    %% so that a listener asked for port 0 keeps its port.
    Port0 = case sluice_registry:lookup(Name) of
                {ok, #{port := P}} when is_integer(P) -> P;
                _ -> maps:get(port, Opts)
            end,
    case open_sockets(T, Port0, NL, Opts) of
        {ok, Port, LSocks} ->
            ok = sluice_registry:set(Name, port, Port),
            %% For suspend/1, which waits for them to be closed.
            ok = sluice_registry:set(Name, listen_sockets, LSocks),
            Tuple = list_to_tuple(LSocks),
            Children = [#{id => {sluice_acceptor, I},
                          start => {sluice_acceptor, start_link,
                                    [Listener, element((I - 1) rem NL + 1, Tuple), I]},
                          shutdown => brutal_kill,
                          modules => [sluice_acceptor]}
                        || I <- lists:seq(1, NA)],
            {ok, {#{strategy => one_for_one, intensity => 10, period => 1}, Children}};
        {error, Reason} ->
            {stop, Reason}
    end.

%% The first socket learns the real port when 0 was asked; the others bind
%% that same port (SO_REUSEPORT, set by the option validation when there is
%% more than one).
open_sockets(T, Port, N, Opts) ->
    case T:listen(Port, Opts) of
        {ok, First} ->
            {ok, Real} = T:port(First),
            open_more(T, Real, N - 1, Opts, [First]);
        Error ->
            Error
    end.

open_more(_T, Port, 0, _Opts, Acc) ->
    {ok, Port, lists:reverse(Acc)};
open_more(T, Port, N, Opts, Acc) ->
    case T:listen(Port, Opts) of
        {ok, S} ->
            open_more(T, Port, N - 1, Opts, [S | Acc]);
        Error ->
            _ = [T:close(S) || S <- Acc],
            Error
    end.
