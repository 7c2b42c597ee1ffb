%% @doc Owns a listener's listen sockets: opens them when it starts and
%% closes them when it stops, with the listener's options as last stored
%% (sluice:set_transport_opts/2 changes the listen side for the next
%% open). A socket of the user's (`listen_socket') is neither opened nor
%% closed here: it is checked and prepared, and outlives this process
%% (sluice_listen_socket). A process of its own so that the sockets
%% outlive any acceptor (an acceptor that dies is restarted and the port
%% stays open), and so that stopping it closes them before
%% supervisor:terminate_child/2 returns: once sluice:suspend/1 returns, new
%% connects are refused, on every transport. A listener on a Unix socket
%% has its file made free before the bind and removed after the close
%% (sluice_local_socket).
%%
%% The listener's `post_listen' fun, if any, is given each listen socket
%% here, once all of them listen and before any acceptor starts (the
%% acceptors are started after this process, rest_for_one): every time
%% they are opened, at start, on resume and when this process is
%% restarted. If it fails for one, or returns ok but leaves the socket
%% closed (`{post_listen, closed}'), every socket is closed (and a Unix
%% socket's file removed) and this process does not start: the listener's
%% start fails with `{post_listen, Reason}'.
%%
%% A socket of the user's can be closed under the listener by any process
%% (gen_tcp:close/1, socket:close/1): its acceptors then end as at a
%% suspend (a transient child each, not restarted: no restart storm). This
%% process watches it (a monitor) to say so: one log line, and the mark
%% `listen_socket_closed' in the registry, which info/1's status and
%% resume/1 read (the listener cannot open it again).
%% @private
-module(sluice_listen_sockets).
-behaviour(gen_server).

-export([start_link/1, try_port/3, port_to_bind/2, cannot_listen/3]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-include_lib("kernel/include/logger.hrl").

%% A restart that finds its port still in use tries again this many
%% times, this far apart, before the listener comes back suspended.
-define(REOPEN_TRIES, 20).
-define(REOPEN_WAIT_MS, 50).

%% The transport and its listen sockets; for a Unix socket also its path
%% and the file bound there (removed when they close); for a socket of the
%% user's (`listen_socket') `{own, Name}' (`own' in a process started
%% before it was watched): it is not closed here. A TCP
%% listener's state keeps the shape it had before Unix sockets, for a
%% process that lives through a code upgrade.
-type state() :: {module(), [sluice_transport:lsock()]}
               | {module(), [sluice_transport:lsock()], {binary(), sluice_local_socket:identity()}}
               | {module(), [sluice_transport:lsock()], own | {own, sluice:name()}}.

-spec start_link(sluice_listener_sup:listener()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Listener) ->
    gen_server:start_link(?MODULE, Listener, []).

%% The options are the registry's, not those this process was started
%% with: sluice:set_transport_opts/2 stores the listen side's there, for
%% the next time the sockets open (a resume, or this process restarted
%% by the listener's supervisor), as ranch's set_transport_options/2.
%%
%% On resume (and after a restart) the port found the first time is bound
%% again, so that a listener asked for port 0 keeps its port, unless the
%% port or address asked for has changed since (port_to_bind/2). The
%% first socket learns the real port when 0 was asked; the others bind
%% that same port (SO_REUSEPORT, which the option validation turns on when
%% there is more than one).
-spec init(sluice_listener_sup:listener()) -> {ok, state()} | ignore | {stop, term()}.
init(Listener = #{name := Name, stats := Stats}) ->
    process_flag(trap_exit, true),
    case sluice_stats:suspended(Stats) andalso not resuming(Name) of
        true -> stay_closed(Name);
        false -> start_sockets(Listener, ?REOPEN_TRIES)
    end.

%% A suspended listener (suspend/1, drain/2, or come back suspended)
%% stays so when its supervisor starts this process again with the
%% children after the one that died (rest_for_one: the connection
%% supervisors' supervisor): OTP starts those a suspend had stopped too.
%% The sockets opened then, and a listener suspended or draining
%% accepted again without a word; one whose port another socket had
%% taken failed each of those restarts, until its supervisor gave up.
%% Only resume/1 opens them (the mark `resuming' in the registry). No
%% sockets: the acceptors' supervisor does not start either
%% (sluice_acceptors_sup).
stay_closed(Name) ->
    _ = sluice_registry:set(Name, listen_sockets, []),
    ignore.

resuming(Name) ->
    case sluice_registry:lookup(Name) of
        {ok, #{resuming := true}} -> true;
        _ -> false
    end.

start_sockets(Listener = #{name := Name, transport := T, opts := Opts0, stats := Stats}, Tries) ->
    Opts = stored_opts(Name, Opts0),
    case init(Name, T, Opts) of
        {stop, Reason} ->
            case restart(Name, Stats) of
                true when Reason =:= eaddrinuse, Tries > 0 ->
                    %% The sockets of a predecessor that was killed close a
                    %% moment after it (its ports' exit signals): the
                    %% supervisor's own retries used to wait that out
                    timer:sleep(?REOPEN_WAIT_MS),
                    start_sockets(Listener, Tries - 1);
                true ->
                    not_reopened(Name, Stats, Reason);
                false ->
                    not_opened(Name, Opts, Reason)
            end;
        Opened ->
            Opened
    end.

%% Sockets that cannot open again when a supervisor restarts this process
%% (it died, or the listener's supervisor did: the port taken meanwhile,
%% a `post_listen' fun that now fails) leave the listener suspended, said
%% in one log line: resume/1 tries again, and answers why it cannot.
%% Failing the restart instead failed it again and again, until the
%% listener's supervisor gave up, then sluice's, which took every other
%% listener and the application down with it. Only a start's and a
%% resume's failure are errors: the caller is there to be told. A restart
%% is a listener that had opened its sockets (this supervisor's, or under
%% sluice_sup the one it replaces: the listen side kept for it) and was
%% not suspended.
not_reopened(Name, Stats, Reason) ->
    ok = sluice_stats:set_suspended(Stats, true),
    _ = sluice_registry:set(Name, listen_sockets, []),
    ?LOG_ERROR("sluice: listener ~0p could not open its sockets again after a "
               "restart: ~ts; it is suspended (~ts)",
               [Name, sluice:format_error(Reason), what_next(Reason)]),
    ignore.

%% The sockets of a start (or a resume) could not open: the start fails
%% with the reason as it is (the error terms callers match). A listener
%% embedded in the user's supervisor (sluice:child_spec/1,2) has no caller
%% to tell: its failure surfaced as `{failed_to_start_child,
%% sluice_listen_sockets, eaddrinuse}' deep in supervisor reports (a
%% release's boot), so it is said here in one line, which listener, where,
%% why in words. Not for start_listener/2 and resume/1: they bind the
%% port first (sluice:try_listen/2), with a warning line of their own when
%% it cannot be had (this process then never starts), and what only this
%% open finds (the port taken in the instant between, a post_listen fun
%% that fails) is in the error their caller gets.
not_opened(Name, Opts, Reason) ->
    _ = embedded(Name) andalso not resuming(Name)
        andalso log_not_opened(Name, Opts, Reason),
    {stop, Reason}.

embedded(Name) ->
    case sluice_registry:lookup(Name) of
        {ok, #{top := false}} -> true;
        _ -> false
    end.

%% Without a logger domain, as the other lines of a listener that cannot
%% listen: OTP's default handler logs only events without one (and
%% `[otp, sasl]''s), so under `[sluice]' an Erlang release's log would not
%% have it; Elixir's Logger shows it either way.
log_not_opened(Name, Opts = #{ip := IP}, Reason) ->
    Port = port_to_bind(Name, Opts),
    ?LOG_ERROR("~ts", [sluice_syntax:format("sluice listener ~0p could not start: cannot "
                                            "listen on ~ts: ~ts",
                                            [Name, where(Opts, IP, Port),
                                             cannot_listen(IP, Port, Reason)])]).

%% The listener's address, or the socket of the user's it was given.
where(#{listen_socket := LSock}, _IP, _Port) when LSock =/= none ->
    "its listen_socket";
where(_Opts, IP, Port) ->
    sluice_opts:format_address(IP, Port).

%% @doc Why a listener cannot listen on `IP' and `Port', in words: the
%% system's for the error (as sluice:format_error/1 says it), and what it
%% means there when the reason is the usual one.
-spec cannot_listen(inet:ip_address() | {local, binary() | string()}, inet:port_number(),
                    term()) -> string().
cannot_listen({local, _Path}, _Port, eaddrinuse) ->
    sluice:format_error(eaddrinuse) ++ ": another process listens on that path";
cannot_listen(_IP, Port, eaddrinuse) when Port > 0 ->
    sluice_syntax:format("~ts: another process listens on port ~b",
                         [sluice:format_error(eaddrinuse), Port]);
cannot_listen(IP, Port, eacces) when is_tuple(IP), tuple_size(IP) >= 4, Port > 0, Port < 1024 ->
    sluice_syntax:format("~ts: port ~b is privileged (below 1024: root, or the "
                         "capability CAP_NET_BIND_SERVICE)",
                         [sluice:format_error(eacces), Port]);
cannot_listen(IP, _Port, eaddrnotavail) when is_tuple(IP), tuple_size(IP) >= 4 ->
    sluice_syntax:format("~ts: ~ts is not an address of this host",
                         [sluice:format_error(eaddrnotavail), inet:ntoa(IP)]);
cannot_listen(_IP, _Port, Reason) ->
    sluice:format_error(Reason).

%% A socket of the user's that is no good any more is not opened again by
%% anything of sluice's (resume/1 refuses it too).
what_next({bad_option, listen_socket, _}) ->
    "its listen_socket cannot be used again: stop the listener and start it with a new one";
what_next(_Reason) ->
    "sluice:resume/1 tries again".

restart(Name, Stats) ->
    not sluice_stats:suspended(Stats) andalso opened_before(Name).

opened_before(Name) ->
    case sluice_registry:lookup(Name) of
        {ok, Row} ->
            is_map_key(listening, Row)
                orelse (maps:get(top, Row, false)
                        andalso sluice_registry:kept_listen_side(Name) =/= #{});
        error ->
            false
    end.

init(Name, T, Opts = #{listen_socket := LSock}) when LSock =/= none ->
    own(Name, T, LSock, Opts);
init(Name, T, Opts = #{ip := {local, Path}}) ->
    ok = remove_left(Name, Path),
    case listen_local(T, Path, Opts) of
        {ok, LSock, Identity} ->
            case post_listen(T, Opts, [LSock]) of
                ok ->
                    ok = sluice_registry:set(Name, local_file, {Path, Identity}),
                    ok = opened(Name, Opts, 0, [LSock]),
                    {ok, {T, [LSock], {Path, Identity}}};
                {error, Reason} ->
                    ok = close_local(T, [LSock], Path, Identity),
                    {stop, Reason}
            end;
        {error, Reason} ->
            {stop, Reason}
    end;
init(Name, T, Opts = #{num_listen_sockets := N}) ->
    Port0 = port_to_bind(Name, Opts),
    %% Several sockets share the port through SO_REUSEPORT, which would also
    %% let them join another listener's sockets that have it: try it alone
    %% first (a single socket's own bind does that by itself; port 0 is
    %% always free).
    case N > 1 andalso Port0 =/= 0 andalso try_port(T, Port0, Opts) of
        {error, Reason} -> {stop, Reason};
        _ -> open(Name, T, Port0, N, Opts)
    end.

%% The listener's options as last stored (those it started with if the
%% registry has none: a row written before this process could read it).
stored_opts(Name, Opts) ->
    case sluice_registry:lookup(Name) of
        {ok, #{opts := Stored}} -> Stored;
        error -> Opts
    end.

%% @doc The port the listener binds when its sockets open next: the one
%% its sockets had last time if it asked for the same port and address
%% since (port 0's real port is kept over a suspend), else the one asked.
-spec port_to_bind(sluice:name(), sluice_opts:opts()) -> inet:port_number().
port_to_bind(Name, #{port := Asked, ip := IP}) ->
    case sluice_registry:lookup(Name) of
        {ok, #{port := P, listening := #{port := Asked, ip := IP}}} when is_integer(P) -> P;
        {ok, #{port := P} = Row} when is_integer(P), not is_map_key(listening, Row) -> P;
        _ -> Asked
    end.

%% A socket of the user's, listened on as it is: it is not opened and,
%% whatever happens, not closed here (the listener's supervisor owns it:
%% sluice_listen_socket). The library's options and `socket_opts' are set
%% on it each time, as on a socket the listener opens, and `post_listen'
%% runs on it.
own(Name, T, LSock, Opts) ->
    Steps = [fun() -> sluice_listen_socket:check(T, LSock) end,
             fun() -> sluice_listen_socket:prepare(T, LSock, Opts) end,
             fun() -> post_listen(T, Opts, [LSock]) end],
    case sluice_socket_opts:steps(Steps) of
        ok ->
            %% info/1 says the address it listens on (the `ip' option is
            %% that address too: sluice_opts)
            {ok, {IP, Port}} = T:sockname(LSock),
            ok = opened(Name, Opts#{ip := IP}, Port, [LSock]),
            _ = monitor_socket(T, LSock),
            {ok, {T, [LSock], {own, Name}}};
        {error, Reason} when is_atom(Reason); element(1, Reason) =/= post_listen ->
            {stop, {bad_option, listen_socket, Reason}};
        {error, Reason} ->
            {stop, Reason}
    end.

%% The sockets listen: published for the acceptors (started next) and
%% info/1, with the options they were opened with (`listening'), which
%% the acceptors and the connection supervisors take theirs from. The
%% connection supervisors are told the options they read from there when
%% these differ from the last sockets' (set_transport_opts/2 changed
%% them), before any acceptor hands them a connection from these sockets.
opened(Name, Opts, Port, LSocks) ->
    Row = case sluice_registry:lookup(Name) of
              {ok, R} -> R;
              error -> #{}
          end,
    Before = maps:get(listening, Row, Opts),
    ok = sluice_registry:set(Name, port, Port),
    ok = sluice_registry:set(Name, listen_sockets, LSocks),
    ok = sluice_registry:set(Name, listening, Opts),
    ok = keep(Row, Name, Opts),
    Keys = sluice_opts_change:per_socket(),
    case maps:with(Keys, Opts) =:= maps:with(Keys, Before) of
        true -> ok;
        false -> tell_conns_sups(Name, Opts, maps:with(Keys, Opts))
    end.

%% A listener of sluice_sup's is restarted by it from its child spec: the
%% listen side that has just opened is kept for that restart
%% (sluice_listener_sup:start_link/2), one that set_transport_opts/2
%% stored and no socket has opened with yet is not (it may not open). A
%% socket of the user's is not opened again: such a listener is not
%% restarted (sluice:start_listener/2).
keep(#{top := true}, Name, Opts = #{listen_socket := none}) ->
    sluice_registry:keep_listen_side(
      Name, maps:with([own_port | sluice_opts_change:listen_side()], Opts));
keep(_Row, _Name, _Opts) ->
    ok.

tell_conns_sups(Name, #{num_conns_sups := NS}, Changes) ->
    _ = [sluice_conns_sup:set_opts(Sup, Changes)
         || I <- lists:seq(1, NS), Sup <- [sluice_registry:conns_sup(Name, I)], is_pid(Sup)],
    ok.

open(Name, T, Port0, N, Opts) ->
    case T:listen(Port0, Opts) of
        {ok, First} ->
            {ok, Port} = T:listen_port(First),
            case open_more(T, Port, N - 1, Opts, [First]) of
                {ok, LSocks} ->
                    case post_listen(T, Opts, LSocks) of
                        ok ->
                            ok = opened(Name, Opts, Port, LSocks),
                            {ok, {T, LSocks}};
                        {error, Reason} ->
                            _ = [T:close_listener(S) || S <- LSocks],
                            {stop, Reason}
                    end;
                {error, Reason} ->
                    {stop, Reason}
            end;
        {error, Reason} ->
            {stop, Reason}
    end.

%% @doc Bind the port once and let it go, to learn whether the listener
%% can have it (taken, privileged). Without SO_REUSEPORT unless the user
%% asked to share the port (`own_port' false: bin/sluice serve --nodes):
%% with it the bind would succeed beside another listener's sockets that
%% have it too, and the clients would be split between two servers
%% without a word. Port 0 is always free, but is bound too: the address
%% may not be the host's (eaddrnotavail).
-spec try_port(module(), inet:port_number(), sluice_opts:opts()) -> ok | {error, term()}.
try_port(T, _Port, Opts = #{ip := {local, Path}}) ->
    %% The path's file is made free and bound as the listener will, then
    %% removed with the socket: left there, it would be the listener's
    %% own stale file.
    case listen_local(T, Path, Opts) of
        {ok, LSock, Identity} -> close_local(T, [LSock], Path, Identity);
        {error, _} = Error -> Error
    end;
try_port(T, Port, Opts) ->
    Alone = case Opts of
                #{own_port := true} -> Opts#{reuseport := false};
                _ -> Opts
            end,
    case T:listen(Port, Alone) of
        {ok, LSock} -> T:close_listener(LSock);
        {error, _} = Error -> Error
    end.

%% The user's fun on each socket in turn, up to the first that fails. A
%% fun that raises is a failure too (caught: this process would otherwise
%% die with the listener's whole state in its crash report), logged with
%% where it raised, which the reason alone does not say.
post_listen(_T, #{post_listen := none}, _LSocks) ->
    ok;
post_listen(T, #{post_listen := Fun}, LSocks) ->
    post_listen_each(T, Fun, LSocks);
post_listen(_T, _NoOption, _LSocks) ->
    %% the options of a listener started before the option existed
    ok.

post_listen_each(_T, _Fun, []) ->
    ok;
post_listen_each(T, Fun, [LSock | Rest]) ->
    Before = listens(T, LSock),
    try Fun(LSock) of
        ok when Before =:= true ->
            case listens(T, LSock) of
                false -> {error, {post_listen, closed}};
                _ -> post_listen_each(T, Fun, Rest)
            end;
        ok ->
            post_listen_each(T, Fun, Rest);
        {error, Reason} -> {error, {post_listen, Reason}};
        Other -> {error, {post_listen, {bad_return, Other}}}
    catch Class:Reason:Stack ->
            ?LOG_ERROR("sluice: the post_listen fun raised ~p:~0p at ~0p",
                       [Class, Reason, Stack]),
            {error, {post_listen, {Class, Reason}}}
    end.

%% A fun that closed its socket and returned ok would otherwise leave a
%% listener that says `running' while every acceptor has exited on the
%% closed socket and every connect is refused, without a word. Whether it
%% still listens is asked as cheaply as the transport can answer: its
%% listen_port/1, which fails on a closed socket (inet: einval; socket:
%% closed). Asked before the fun too: a transport of the user's that
%% cannot answer it for this socket (a Unix socket has no port; it may
%% fail or raise) is not checked, rather than taken for a closed one.
listens(T, LSock) ->
    try T:listen_port(LSock) of
        {ok, _} -> true;
        _ -> false
    catch _:_ -> false
    end.

open_more(_T, _Port, 0, _Opts, Acc) ->
    {ok, lists:reverse(Acc)};
open_more(T, Port, N, Opts, Acc) ->
    case T:listen(Port, Opts) of
        {ok, S} ->
            open_more(T, Port, N - 1, Opts, [S | Acc]);
        Error ->
            _ = [T:close_listener(S) || S <- Acc],
            Error
    end.

-spec handle_call(term(), gen_server:from(), State) -> {reply, {error, unknown_call}, State}.
handle_call(_Req, _From, State) ->
    {reply, {error, unknown_call}, State}.

-spec handle_cast(term(), State) -> {noreply, State}.
handle_cast(_Msg, State) ->
    {noreply, State}.

%% The user's socket closed under the listener (not by it: it closes the
%% socket only with its supervisor, which ends this process first).
-spec handle_info(term(), State) -> {noreply, State}.
handle_info({'DOWN', _, Kind, LSock, _}, State = {_T, [LSock], {own, Name}})
  when Kind =:= port; Kind =:= socket ->
    ?LOG_ERROR("sluice listener ~0p: its listen_socket was closed by another process; "
               "the listener accepts no more (it cannot open the socket again: stop it, "
               "and start it with a new socket)", [Name]),
    ok = sluice_registry:set(Name, listen_socket_closed, true),
    {noreply, State};
handle_info(_Msg, State) ->
    {noreply, State}.

-spec terminate(term(), state()) -> ok.
terminate(_Reason, {T, LSocks}) ->
    _ = [T:close_listener(S) || S <- LSocks],
    ok;
terminate(_Reason, {_T, _LSocks, Own}) when Own =:= own; element(1, Own) =:= own ->
    %% The user's socket stays open while the listener lives (suspended, or
    %% this process restarted): it cannot be opened again. It closes with
    %% its owner, the listener's supervisor.
    ok;
terminate(_Reason, {T, LSocks, {Path, Identity}}) ->
    close_local(T, LSocks, Path, Identity).

%% A monitor on the user's socket, which tells this process when it
%% closes, whoever closes it.
monitor_socket(sluice_transport_socket, LSock) -> socket:monitor(LSock);
monitor_socket(_T, LSock) -> erlang:monitor(port, LSock).

%% The file a killed predecessor of this process left, on a path
%% set_transport_opts/2 has changed since: killed, it removed nothing
%% (terminate/2 does not run), and no bind will come back to that path to
%% replace it as stale (sluice_local_socket:prepare/1). Removed here if it
%% is still the file that process bound (the registry keeps which): its
%% socket closed with it. One on the same path is prepare/1's.
remove_left(Name, Path) ->
    case sluice_registry:lookup(Name) of
        {ok, #{local_file := {Old, Identity}}} when Old =/= Path ->
            sluice_local_socket:remove(Old, Identity);
        _ ->
            ok
    end.

%% The one listen socket on a Unix path (the kernel binds a path once), and
%% which file it made there. The registry's port stays 0: info/1 names the
%% path in `ip'.
listen_local(T, Path, Opts) ->
    case sluice_local_socket:prepare(Path) of
        ok ->
            case T:listen(0, Opts) of
                {ok, LSock} -> {ok, LSock, sluice_local_socket:identity(Path)};
                {error, _} = Error -> Error
            end;
        {error, _} = Error ->
            Error
    end.

close_local(T, LSocks, Path, Identity) ->
    _ = [T:close_listener(S) || S <- LSocks],
    sluice_local_socket:remove(Path, Identity).
