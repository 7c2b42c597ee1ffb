%% @doc sluice's public API: start, stop, drain, suspend, inspect and change TCP
%% listeners (and listeners on a Unix socket: `ip => {local, Path}'). A
%% listener is an acceptor pool on one or more listen sockets,
%% connection processes that each drive a `sluice_handler', and counters that
%% tell what happened to every connection.
%%
%% ```
%% {ok, _} = sluice:start_listener(echo, #{port => 5555,
%%                                        handler => {sluice_proto_echo, []}}),
%% #{port := 5555, connections := 0} = sluice:info(echo),
%% ok = sluice:stop_listener(echo, 5000).
%% '''
%%
%% The sluice application runs first (`application:ensure_all_started(sluice)',
%% or `sluice' in your application's `applications'). Before it does, the
%% calls that answer `{error, not_found}' for an unknown listener answer
%% `{error, sluice_not_started}' (format_error/1 says how to mend it), and
%% listeners/0, connections/1 and procs/2 answer `[]'.
-module(sluice).

-export([start_listener/2, stop_listener/1, stop_listener/2, drain/2,
         suspend/1, resume/1, info/1, set_max_connections/2, set_handler_opts/2,
         get_handler_opts/1, set_transport_opts/2, get_transport_opts/1, child_spec/2,
         listeners/0, connections/1, format_error/1]).
-export([child_spec/1, send/2, close/1, call/3, reply/2, peername/1, sockname/1,
         setopts/2, getopts/2, remove_connection/1, recv/3]).
-export([procs/2, wait_for_connections/3, wait_for_connections/4,
         wait_for_connections/5]).
-export([adopt/2, adopt/3]).
-export([drain_child_spec/2]).

-export_type([conn/0, name/0, sockopt/0, sockopt_name/0, dest/0, address/0, drain_time/0]).

-include_lib("kernel/include/logger.hrl").

-type name() :: term().
%% How long a drain waits for the connections, in ms (at most 2^32 - 1).
-type drain_time() :: 0..16#ffffffff | infinity.
%% A connection as send/2, close/1 and call/3 take it: its conn(), its
%% pid, or a name its handler registered it under, as gen_server takes
%% one (an atom, `{Name, Node}', `{global, Name}', `{via, Module, Name}':
%% an Elixir Registry's `{:via, Registry, {Reg, Key}}').
-type dest() :: conn() | pid() | atom() | {atom(), node()} | {global, term()}
              | {via, module(), term()}.
%% What a handler's init/2 gets: which listener, the connection process
%% (for send/2, close/1 and call/3 from other processes), the raw socket
%% with its transport module (for peername/1, sockname/1, setopts/2 and
%% getopts/2); with the PROXY protocol, the header the load balancer sent
%% (`proxy': the client's
%% `source' and `destination' addresses, TLVs); under TLS, `tls':
%% `protocol', `cipher', `sni', `alpn', `peer_cert' (the client's
%% certificate, DER, or `undefined') and `socket' (ssl's socket, for ssl's
%% calls that neither read nor write; sluice:recv/3 reads through it).
-type conn() :: #{listener := name(), pid := pid(), socket := term(), transport := module(),
                  proxy => sluice_proxy_header:header(), tls => map()}.

%% A connection's end as peername/1 and sockname/1 give it: `{IP, Port}'
%% over TCP, `{local, Path}' on a Unix socket (`ip => {local, Path}'),
%% where a client's `Path' is `<<>>' unless it bound its socket to one.
-type address() :: {inet:ip_address(), inet:port_number()} | {local, binary()}.

%% A socket option a handler may set on its connection (setopts/2), with
%% gen_tcp's name and value, the same on every transport. The others are
%% the library's or the listener's (docs/handler.md, "Socket options").
-type sockopt() :: {nodelay, boolean()}
                 | {keepalive, boolean()}
                 | {sndbuf, non_neg_integer()}
                 | {recbuf, non_neg_integer()}
                 | {priority, non_neg_integer()}
                 | {tos, 0..255}
                 | {linger, {boolean(), non_neg_integer()}}.
%% What getopts/2 reads: the names of sockopt().
-type sockopt_name() :: nodelay | keepalive | sndbuf | recbuf | priority | tos | linger.

%% How long suspend/1 gives the acceptors to end by themselves (one
%% waiting for a slot gives up at once, sluice_stats:set_suspended/2): an
%% accept and a handover take microseconds, so only a VM too loaded to run
%% them comes near it.
-define(ACCEPTOR_STOP_MS, 5000).

%% @doc Start a listener under sluice's own supervisor. Options are
%% documented in docs/listener-options.md and checked by sluice_opts; a bad
%% one gives `{error, {bad_option, Key, Value}}' (see format_error/1).
%% `{error, sluice_not_started}' before the sluice application runs.
-spec start_listener(name(), map() | list()) -> {ok, pid()} | {error, term()}.
start_listener(Name, Opts) ->
    %% Checked first: nothing of the options (ssl's start for tls_opts)
    %% is done for a start that cannot be.
    if_running(fun() -> start_valid(Name, Opts) end).

start_valid(Name, Opts) ->
    case sluice_opts:validate(Opts) of
        {ok, Valid} ->
            case can_listen(Name, Valid) of
                ok ->
                    %% a start anew: the listen side a listener of this
                    %% name last opened (stopped, or not restarted) is not
                    %% this one's
                    ok = forget_listen_side(Name),
                    case supervisor:start_child(sluice_sup, top_spec(Name, Valid)) of
                        {ok, Pid} -> give_listen_socket(Valid, Pid);
                        {error, {already_started, _}} -> {error, already_started};
                        {error, already_present} -> {error, already_started};
                        {error, Reason} -> {error, start_error(Reason)}
                    end;
                Error ->
                    Error
            end;
        Error ->
            Error
    end.

%% The usual reasons a listener cannot start (the port is taken, or
%% privileged, or the address is not the host's) are found by binding it
%% here first and letting it go: the caller gets the error and the log one
%% line, where the listener's supervisor would log a report of its whole
%% configuration. (Taken in the instant between, the port still fails the
%% start, with that report.) Port 0 too: it is always free, but its
%% address may not be (eaddrnotavail).
can_listen(Name, Opts) ->
    case sluice_already_started(Name) of
        true -> ok;
        false -> try_listen(Name, Opts)
    end.

%% The calls on a listener by name, before the sluice application runs
%% (or after it stopped): the registry's table is not there, and each
%% raised ets's badarg (start_listener/2 too), stop_listener/1 exited
%% noproc. No listener can run then, but `{error, not_found}' would send
%% the reader to check the listener's name: `{error, sluice_not_started}',
%% which format_error/1 says how to mend. The API's calls only: a
%% connection's path has the application running.
if_running(Fun) ->
    case sluice_registry:running() of
        true -> Fun();
        false -> {error, sluice_not_started}
    end.

%% A socket of the user's is the listener's from its start on: its
%% supervisor, which lives as long as the listener, is made its owner, so
%% that it closes when the listener stops and not before (the caller
%% may exit meanwhile). Only its owner may hand it over: the caller,
%% checked before the start (owns_listen_socket/1).
give_listen_socket(#{listen_socket := none}, Pid) ->
    {ok, Pid};
give_listen_socket(#{listen_socket := LSock, transport := T}, Pid) ->
    ok = sluice_listen_socket:give(sluice_transport:module(T), LSock, Pid),
    {ok, Pid}.

owns_listen_socket(#{listen_socket := LSock, transport := T}) ->
    case sluice_listen_socket:owner(sluice_transport:module(T), LSock) =:= self() of
        true -> ok;
        false -> {error, {bad_option, listen_socket, not_owner}}
    end.

try_listen(_Name, Opts = #{listen_socket := LSock}) when LSock =/= none ->
    %% nothing to bind: the socket listens (checked by validation); its
    %% owner must be the caller, who hands it over
    owns_listen_socket(Opts);
try_listen(Name, Opts = #{transport := T, port := Port, ip := IP}) ->
    case sluice_listen_sockets:try_port(sluice_transport:module(T), Port, Opts) of
        ok ->
            ok;
        {error, Reason} ->
            %% (the name as the user wrote it: in Elixir's syntax where
            %% Elixir runs)
            ?LOG_WARNING("~ts", [sluice_syntax:format(
                                   "sluice listener ~0p: cannot listen on ~s: ~ts",
                                   [Name, sluice_opts:format_address(IP, Port),
                                    sluice_listen_sockets:cannot_listen(IP, Port, Reason)])]),
            {error, Reason}
    end.

sluice_already_started(Name) ->
    sluice_registry:lookup(Name) =/= error.

%% Dig the cause (eaddrinuse, eacces, ...) out of the supervisor's wrapping.
start_error({shutdown, {failed_to_start_child, _, Reason}}) -> start_error(Reason);
start_error({shutdown, already_started}) -> already_started;
start_error({Reason, Child}) when element(1, Child) =:= child -> start_error(Reason);
start_error({bad_return, {_, init, {stop, Reason}}}) -> start_error(Reason);
start_error(Reason) -> Reason.

%% @doc child_spec/2 with the name in the options (`name'; the default is
%% `{sluice, Port}', `{sluice, {local, Path}}' for a Unix socket), for supervisors that take a module and one argument:
%% `{sluice, Opts}' in a child list, as Elixir's `{:sluice, opts}' does.
%% Raises on bad options as child_spec/2 does (`not_a_map' for what is
%% neither a map nor a list).
-spec child_spec(term()) -> supervisor:child_spec().
child_spec(Opts) when is_list(Opts) ->
    case sluice_opts:from_list(Opts) of
        {ok, Map} -> child_spec(Map);
        {error, Reason} -> bad_options(Reason)
    end;
child_spec(Opts) when is_map(Opts) ->
    {Name, Rest} = case maps:take(name, Opts) of
                       {N, R} -> {N, R};
                       error -> {default_name(Opts), Opts}
                   end,
    child_spec(Name, Rest);
child_spec(_Opts) ->
    bad_options(not_a_map).

%% `{sluice, Port}', or `{sluice, {local, Path}}' for a Unix socket (whose
%% port is 0, as every listener's on a free port).
default_name(#{ip := {local, _} = Local}) -> {sluice, Local};
default_name(Opts) -> {sluice, maps:get(port, Opts, 0)}.

%% @doc A child spec to embed a listener in the caller's own supervision
%% tree. Raises on bad options: an error whose `message' is
%% format_error/1's sentence and whose `reason' is the term
%% start_listener/2 would return in `{error, Reason}' (see bad_options/1).
-spec child_spec(name(), map() | list()) -> supervisor:child_spec().
child_spec(Name, Opts) ->
    case sluice_opts:validate(Opts) of
        {ok, Valid} -> spec(Name, Valid);
        {error, Reason} -> bad_options(Reason)
    end.

%% child_spec/1,2 run where no `{error, _}' can be returned (a child list,
%% Elixir's `{:sluice, opts}'), so the error raised is the user's one
%% message: Elixir's ArgumentError, which Elixir shows as its message
%% (it showed `{badarg, Reason}' as "argument error: {:bad_option, ...}",
%% the raw term), and a plain map to Erlang, matched as
%% `error:#{reason := Reason}'.
-spec bad_options(term()) -> no_return().
bad_options(Reason) ->
    erlang:error(#{'__struct__' => 'Elixir.ArgumentError',
                   '__exception__' => true,
                   message => unicode:characters_to_binary(format_error(Reason)),
                   reason => Reason}).

%% @doc A child spec for the user's supervisor that drains `Listeners'
%% (a list of names) when that supervisor stops it: put it after them in
%% the child list, and a release's stop (init:stop/0, SIGTERM,
%% application:stop/1) or the supervisor's own shutdown drains them, all
%% at once, for up to `DrainTime' (as drain/2 takes it) before the
%% supervisor stops them. Children stop in reverse order: one placed
%% before a listener would drain it after it is gone. Without it a
%% listener stopped by its supervisor shuts its connections down at once
%% (shutdown_timeout for handlers that trap exits), without
%% handle_drain/1. Its shutdown outlasts the drain (`DrainTime' + 2000 ms,
%% `infinity' with `infinity'). The child stopped alone (terminate_child)
%% drains too, and leaves its listeners suspended (resume/1 serves
%% again). Raises `badarg' for what is not a list or a drain time.
-spec drain_child_spec([name()], drain_time()) -> supervisor:child_spec().
drain_child_spec(Listeners, DrainTime) when is_list(Listeners) ->
    Shutdown = case drain_ms(Listeners, DrainTime) + 2000 of
                   Ms when DrainTime =/= infinity, Ms =< 16#ffffffff -> Ms;
                   _ -> infinity
               end,
    #{id => {sluice_drainer, Listeners},
      start => {sluice_drainer, start_link, [Listeners, DrainTime]},
      type => worker,
      shutdown => Shutdown,
      modules => [sluice_drainer]};
drain_child_spec(Listeners, DrainTime) ->
    erlang:error(badarg, [Listeners, DrainTime]).

%% Under sluice_sup, a listener on a socket of the user's is not restarted
%% if its supervisor dies: the socket, whose owner that supervisor was,
%% closed with it, so each restart failed, and after ten sluice_sup gave
%% up, with every listener of the node and the application. It ends alone
%% (its name free again). Embedded (child_spec/1,2), the failed restart is
%% its owner's supervisor's to handle, which may open a socket anew.
top_spec(Name, Opts = #{listen_socket := LSock}) when LSock =/= none ->
    (spec(Name, Opts))#{restart => temporary};
top_spec(Name, Opts) ->
    spec(Name, Opts).

spec(Name, Opts) ->
    #{id => {sluice_listener, Name},
      start => {sluice_listener_sup, start_link, [Name, Opts]},
      type => supervisor,
      shutdown => infinity,
      modules => [sluice_listener_sup]}.

%% @doc Stop a listener at once: connections are shut down (with the
%% listener's `shutdown_timeout'), the port closes.
-spec stop_listener(name()) -> ok | {error, not_found | sluice_not_started}.
stop_listener(Name) ->
    if_running(fun() -> stop_top(Name) end).

stop_top(Name) ->
    case supervisor:terminate_child(sluice_sup, {sluice_listener, Name}) of
        ok ->
            _ = supervisor:delete_child(sluice_sup, {sluice_listener, Name}),
            forget_listen_side(Name);
        {error, _} ->
            {error, not_found}
    end.

%% The listen side a listener of sluice_sup's last opened its sockets
%% with, kept for a restart (sluice_registry:keep_listen_side/2), is not
%% a new start's, nor kept once it stops; not while one runs.
forget_listen_side(Name) ->
    case supervisor:get_childspec(sluice_sup, {sluice_listener, Name}) of
        {ok, _} -> ok;
        {error, not_found} -> sluice_registry:forget_listen_side(Name)
    end.

%% @doc Drain, then stop: stop accepting at once, tell every connection
%% (its handler's handle_drain/1), wait up to `DrainMs' for them to end,
%% then stop the listener and close whatever is left. `DrainMs' is an
%% integer 0..2^32 - 1 (a receive timeout) or `infinity'; anything else
%% raises `badarg', as drain/2 does.
-spec stop_listener(name(), drain_time()) -> ok | {error, not_found | sluice_not_started}.
stop_listener(Name, DrainMs) ->
    _ = drain_ms(Name, DrainMs),
    if_running(fun() -> drain_and_stop(Name, DrainMs) end).

drain_and_stop(Name, DrainMs) ->
    %% Only a listener this function can stop is drained: an embedded one
    %% (child_spec/1,2) is its owner's to stop, and draining it here
    %% before answering not_found would leave it suspended.
    case supervisor:get_childspec(sluice_sup, {sluice_listener, Name}) of
        {ok, _} ->
            case drain(Name, DrainMs) of
                {ok, _Left} -> stop_top(Name);
                Error -> Error
            end;
        {error, not_found} ->
            {error, not_found}
    end.

%% A drain's time is a receive timeout in the connections (at most
%% 2^32 - 1 ms, about 49.7 days): anything else is the caller's error.
%% `infinity' (thousand_island's stop/2 and OTP's timeouts take it) is
%% that longest time: a drain's deadline is a point in time every
%% connection and supervisor compares with its clock, and one 49.7 days
%% away is never reached by a drain anyone waits for.
drain_ms(_Name, infinity) ->
    16#ffffffff;
drain_ms(_Name, DrainMs) when is_integer(DrainMs), DrainMs >= 0, DrainMs =< 16#ffffffff ->
    DrainMs;
drain_ms(Name, DrainMs) ->
    erlang:error(badarg, [Name, DrainMs]).

%% @doc Suspend the listener and ask every connection to drain; returns when
%% none is left or after `DrainMs', with the number still open at that
%% deadline: those it closes then (waiting for their client's close, or
%% carrying on through the drain) and those whose handler is still in a
%% callback (closed once it returns). Works on
%% embedded listeners too (their owner then stops them). A connection
%% still before its handler at the deadline (waiting for its PROXY header
%% or in its TLS handshake) is closed then, counted `drained', and is not
%% among those still open. `DrainMs' is an integer 0..2^32 - 1 (about
%% 49.7 days) or `infinity' (wait for the last connection, however long:
%% the same as 2^32 - 1); anything else raises `badarg'.
-spec drain(name(), drain_time()) ->
          {ok, non_neg_integer()} | {error, not_found | sluice_not_started}.
drain(Name, DrainTime) ->
    DrainMs = drain_ms(Name, DrainTime),
    if_running(fun() -> drain_listener(Name, DrainMs) end).

drain_listener(Name, DrainMs) ->
    case sluice_registry:lookup(Name) of
        {ok, #{stats := Stats, opts := #{num_conns_sups := NS}}} ->
            Deadline = erlang:monotonic_time(millisecond) + DrainMs,
            %% The suspend and the drain's messages under the listener's
            %% lock (with_sup/2): a resume/1 between them left a running
            %% listener whose connection supervisors drained every
            %% connection it accepted.
            Told = sluice_registry:with_lock(
                     Name, fun() ->
                                   case suspend(Name) of
                                       ok ->
                                           _ = [sluice_conns_sup:drain(Sup, Deadline)
                                                || Sup <- conns_sups(Name, NS)],
                                           ok;
                                       Error ->
                                           Error
                                   end
                           end),
            case Told of
                ok -> {ok, left(Name, NS, Stats, Deadline)};
                Error -> Error
            end;
        error ->
            {error, not_found}
    end.

%% The connections still open at the drain's deadline, as their
%% supervisors count them (sluice_conns_sup:cut/1): those the deadline
%% closes and those still in a callback. Those it found before their
%% handler are cut off at the deadline by their supervisors, who are
%% asked to have done it first (on their own timer it could come a
%% moment after this count), and are not among them.
left(Name, NS, Stats, Deadline) ->
    case wait_empty(Stats, Deadline) of
        empty -> 0;
        deadline -> lists:sum([sluice_conns_sup:cut(Sup) || Sup <- conns_sups(Name, NS)])
    end.

%% `empty' if every connection ended before the deadline; once it has
%% passed, those that end then are the deadline's, even if they are gone
%% by the time the count is read: the live count is read before the
%% clock for that.
wait_empty(Stats, Deadline) ->
    Live = sluice_stats:live(Stats),
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> deadline;
        false when Live =:= 0 -> empty;
        false -> receive after 10 -> wait_empty(Stats, Deadline) end
    end.

%% @doc Stop accepting: the listen sockets close (new connects are refused
%% by the kernel once this returns), connections already open carry on. A
%% connection over `max_connections' that was waiting for a slot
%% (`max_connections_wait') is closed and counted rejected.
-spec suspend(name()) -> ok | {error, not_found | sluice_not_started}.
suspend(Name) ->
    with_sup(Name, fun(Sup, #{stats := Stats}) ->
                           %% The listen sockets close first, and each
                           %% acceptor ends by itself once the connection it
                           %% may be admitting is counted and handed over:
                           %% one killed in between left that connection
                           %% counted for good (sluice_acceptor). One that
                           %% waits for a slot closes that connection at
                           %% once instead (set_suspended/2): it waited out
                           %% max_connections_wait, up to an hour, and this
                           %% call and every drain/2 with it.
                           ok = sluice_stats:set_suspended(Stats, true),
                           Acceptors = [erlang:monitor(process, P) || P <- acceptors(Sup)],
                           case supervisor:terminate_child(Sup, sluice_listen_sockets) of
                               ok -> ok;
                               {error, not_found} -> ok
                           end,
                           ok = wait_down(Acceptors, erlang:monotonic_time(millisecond)
                                          + ?ACCEPTOR_STOP_MS),
                           _ = supervisor:terminate_child(Sup, sluice_acceptors_sup),
                           ok
                   end).

%% The acceptors of a listener that is accepting ([] when it is not).
acceptors(Sup) ->
    case lists:keyfind(sluice_acceptors_sup, 1, supervisor:which_children(Sup)) of
        {_, AccSup, _, _} when is_pid(AccSup) ->
            [P || {_, P, _, _} <- supervisor:which_children(AccSup), is_pid(P)];
        _ ->
            []
    end.

%% Wait until the monitored processes are gone or the deadline has passed
%% (what is left is then killed with its supervisor).
wait_down([], _Deadline) ->
    ok;
wait_down([Ref | Refs], Deadline) ->
    receive
        {'DOWN', Ref, process, _, _} -> wait_down(Refs, Deadline)
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            _ = [erlang:demonitor(R, [flush]) || R <- [Ref | Refs]],
            ok
    end.

%% @doc Accept again, on the same port. After a drain, the connections
%% accepted from now on are served as usual (those it told still close).
%% If another socket has taken the port meanwhile: `{error, eaddrinuse}',
%% and the listener stays suspended. A `listen_socket' that another
%% process closed: `{error, listen_socket_closed}'.
-spec resume(name()) -> ok | {error, term()}.
resume(Name) ->
    with_sup(Name, fun(Sup, #{opts := Opts}) ->
                           ok = resume_conns_sups(Name, Opts),
                           case can_rebind(Name, Sup) of
                               ok ->
                                   case reopen(Name, Sup) of
                                       ok -> restart_acceptors(Sup);
                                       Error -> Error
                                   end;
                               Error ->
                                   Error
                           end
                   end).

%% The port of a listener whose sockets are closed is bound and let go
%% first, as at start (can_listen/2): taken meanwhile by another socket,
%% resume/1 returns the error and the log says it in one line, where the
%% failed restart logged a crash report and a supervisor report.
can_rebind(Name, Sup) ->
    case lists:keyfind(sluice_listen_sockets, 1, supervisor:which_children(Sup)) of
        {_, Pid, _, _} when is_pid(Pid) ->
            case sluice_registry:lookup(Name) of
                {ok, #{listen_socket_closed := true}} -> {error, listen_socket_closed};
                _ -> ok
            end;
        _ ->
            case sluice_registry:lookup(Name) of
                {ok, #{opts := #{listen_socket := LSock}} = Row} when LSock =/= none ->
                    %% the user's socket, which suspend/1 leaves open, unless
                    %% another process closed it (watched while the
                    %% listener accepted: sluice_listen_sockets)
                    own_socket_open(Row);
                {ok, #{opts := Opts}} ->
                    %% the options set_transport_opts/2 stored: a new port
                    %% is tried as at start
                    try_listen(Name, Opts#{port := sluice_listen_sockets:port_to_bind(Name, Opts)});
                _ ->
                    ok
            end
    end.

%% A listener on a socket of the user's resumes only while it is open.
own_socket_open(#{listen_socket_closed := true}) ->
    {error, listen_socket_closed};
own_socket_open(#{opts := #{listen_socket := LSock, transport := T}}) ->
    case sluice_listen_socket:check(sluice_transport:module(T), LSock) of
        {error, closed} -> {error, listen_socket_closed};
        _ -> ok
    end.

%% The sockets' owner opens the sockets of a suspended listener only
%% when resume/1 starts it (marked in the registry while it does):
%% started again with its supervisor's other children, it leaves them
%% closed (sluice_listen_sockets).
reopen(Name, Sup) ->
    _ = sluice_registry:set(Name, resuming, true),
    try
        restart(Sup, sluice_listen_sockets)
    after
        _ = sluice_registry:set(Name, resuming, false)
    end.

%% Sockets without acceptors would take connects that nobody serves: if
%% the acceptors cannot start, the sockets close again and the listener
%% stays suspended.
restart_acceptors(Sup) ->
    case restart(Sup, sluice_acceptors_sup) of
        ok ->
            ok;
        Error ->
            _ = supervisor:terminate_child(Sup, sluice_listen_sockets),
            Error
    end.

%% Each connection supervisor stops draining the connections it starts
%% (one restarted since has no drain to stop).
resume_conns_sups(Name, #{num_conns_sups := NS}) ->
    _ = [sluice_conns_sup:resume(Sup) || Sup <- conns_sups(Name, NS)],
    ok.

%% The connection supervisors of a listener that are up now (one being
%% restarted has no pid for a moment).
conns_sups(Name, NS) ->
    [Sup || I <- lists:seq(1, NS), Sup <- [sluice_registry:conns_sup(Name, I)], is_pid(Sup)].

restart(Sup, Child) ->
    case supervisor:restart_child(Sup, Child) of
        {ok, _} -> ok;
        {error, running} -> ok;
        {error, Reason} -> {error, start_error(Reason)}
    end.

%% A listener that is being stopped is still in the registry for a moment
%% after its supervisor has gone (or while it is going): calling into it
%% then exits (noproc, shutdown), which means the listener is not there.
%% `Fun' gets the supervisor and the one row looked up (`opts', `stats'):
%% looked up again in the middle, the row of a listener stopped meanwhile
%% was gone and the call raised a badmatch.
%% One call at a time per listener (suspend/1, resume/1): a resume that
%% came while a suspend waited for its acceptors reopened the sockets, and
%% the suspend then stopped the acceptors: `suspended', the port open and
%% its connects never served.
with_sup(Name, Fun) ->
    if_running(fun() ->
                       sluice_registry:with_lock(Name, fun() -> with_sup_alone(Name, Fun) end)
               end).

with_sup_alone(Name, Fun) ->
    case sluice_registry:lookup(Name) of
        {ok, Row = #{sup := Sup}} ->
            try Fun(Sup, Row)
            catch exit:{Why, {_, call, _}} when Why =:= noproc; Why =:= normal;
                                                    Why =:= shutdown;
                                                    element(1, Why) =:= shutdown ->
                    {error, not_found}
            end;
        error ->
            {error, not_found}
    end.

%% @doc What the listener is and what happened to it.
-spec info(name()) -> map() | {error, not_found | sluice_not_started}.
info(Name) ->
    if_running(fun() -> info_now(Name) end).

info_now(Name) ->
    case sluice_registry:lookup(Name) of
        {ok, #{sup := Sup} = Info} ->
            case status(Sup) of
                gone -> {error, not_found};
                Status -> info(Name, Status, Info)
            end;
        error ->
            {error, not_found}
    end.

info(Name, Status, #{opts := Opts, stats := Stats} = Info) ->
    maps:merge(sluice_stats:read(Stats),
               %% the address and port the sockets were opened on, which
               %% set_transport_opts/2 does not change until they open again
               #{ip => maps:get(ip, maps:get(listening, Info, Opts)),
                 port => maps:get(port, Info, maps:get(port, Opts)),
                 status => case Info of
                               %% (sluice_listen_sockets)
                               #{listen_socket_closed := true} -> listen_socket_closed;
                               _ -> Status
                           end,
                 accept_errors => sluice_registry:accept_errors(Name),
                 %% host-wide, since boot (see sluice_kernel)
                 kernel => sluice_kernel:listen_drops(),
                 active => maps:get(active, Opts),
                 transport => maps:get(transport, Opts),
                 handler => maps:get(handler, Opts)}).

%% The registry drops a listener's row only once it sees the supervisor go
%% down, so a listener that is stopping can still be looked up: gone.
status(Sup) ->
    try supervisor:which_children(Sup) of
        Children ->
            case lists:keyfind(sluice_acceptors_sup, 1, Children) of
                {_, Pid, _, _} when is_pid(Pid) -> running;
                _ -> suspended
            end
    catch exit:_ ->
            gone
    end.

%% @doc Change the connection limit at run time. Lowering it below the
%% current count closes nothing; new connections are rejected until the
%% count falls under it.
-spec set_max_connections(name(), non_neg_integer() | infinity) -> ok | {error, term()}.
set_max_connections(Name, Max) when Max =:= infinity; is_integer(Max), Max >= 0 ->
    if_running(fun() ->
                       case sluice_registry:lookup(Name) of
                           {ok, #{stats := Stats}} ->
                               sluice_stats:set_max_connections(Stats, Max);
                           error ->
                               {error, not_found}
                       end
               end);
set_max_connections(_Name, Max) ->
    {error, {bad_option, max_connections, Max}}.

%% @doc Change the options the listener's handler gets in `init/2', as
%% ranch:set_protocol_options/2 does the protocol's (the handler module
%% stays; the options are any term, as at start). Connections accepted
%% after this returns get `HandlerOpts'; one being started meanwhile gets
%% the old options or the new. Connections already running keep their
%% state and are told nothing, and a parked one that wakes does not run
%% `init/2' again. Returns once every connection supervisor of the
%% listener has switched (ranch's returns before). The options stay over
%% a suspend/1 and resume/1, a drain, and the restart of a connection
%% supervisor; a restart of the whole listener from its child spec (its
%% supervisor's, or the one child_spec/1,2 made) starts again from the
%% options given there.
-spec set_handler_opts(name(), term()) -> ok | {error, not_found | sluice_not_started}.
set_handler_opts(Name, HandlerOpts) ->
    %% Under the listener's lock (with_sup/2): two calls at once each
    %% switch every connection supervisor in turn, and interleaved they
    %% could leave some on one's options and some on the other's.
    with_sup(Name, fun(_Sup, #{opts := Opts = #{handler := {H, _}, num_conns_sups := NS}}) ->
                           New = Opts#{handler := {H, HandlerOpts}},
                           %% The registry first: a connection supervisor
                           %% that starts from now on reads it there
                           %% (sluice_conns_sup:init/3); one that started
                           %% before is told below.
                           case sluice_registry:set(Name, opts, New) of
                               ok ->
                                   Change = #{handler => {H, HandlerOpts}},
                                   _ = [sluice_conns_sup:set_opts(Sup, Change)
                                        || Sup <- conns_sups(Name, NS)],
                                   ok;
                               {error, not_found} ->
                                   {error, not_found}
                           end
                   end).

%% @doc The options the listener's handler gets in `init/2' now: those it
%% was started with, or the last set_handler_opts/2's (as
%% ranch:get_protocol_options/1).
-spec get_handler_opts(name()) -> {ok, term()} | {error, not_found | sluice_not_started}.
get_handler_opts(Name) ->
    if_running(fun() ->
                       case sluice_registry:lookup(Name) of
                           {ok, #{opts := #{handler := {_, HandlerOpts}}}} -> {ok, HandlerOpts};
                           error -> {error, not_found}
                       end
               end).

%% @doc Change options of a running listener, as
%% ranch:set_transport_options/2 does: `Opts' is a map or a proplist of
%% listener options (docs/listener-options.md); those it does not name
%% keep their value. What can change:
%% <ul>
%%  <li>`tls_opts' and `handshake_timeout' (TLS listeners, and `inet' ones for STARTTLS), `proxy_timeout'
%%      and `proxy_max_size' (listeners with `proxy_protocol'): the
%%      connections accepted after this returns use the new values (one
%%      being started meanwhile uses the old ones or the new, never some
%%      of each); running connections keep theirs and are told nothing.
%%      `tls_opts' are checked as at start, their files read then: `ssl''s
%%      cache of certificate files is cleared (ssl:clear_pem_cache/0), so
%%      that the files served are the ones checked;</li>
%%  <li>`max_connections', as set_max_connections/2;</li>
%%  <li>the listen side: `port', `ip' (of the same kind), `backlog',
%%      `reuseport', `num_listen_sockets', `num_acceptors', `socket_opts'
%%      and `post_listen' are stored at once and used when the listener
%%      next opens its sockets: resume/1 after suspend/1 or drain/2, or
%%      the sockets' owner restarted by the listener's supervisor (as
%%      ranch applies them at the next suspend and resume). Until then
%%      the listener accepts as before and info/1 says the address and
%%      port bound; a port that cannot be had then is resume/1's
%%      error. A listener of start_listener/2 restarted by sluice's
%%      supervisor opens them with the values they last opened with.</li>
%% </ul>
%% Any other option given with the value it has is accepted (the map
%% get_transport_opts/1 gives, changed and given back whole, is taken);
%% with another value it is refused, `{error, {not_changeable, Key}}'.
%% A bad value is refused as at start, `{error, {bad_option, Key, Why}}'
%% (format_error/1 explains it). A refused call changes nothing. Returns
%% once every connection supervisor of the listener has switched; the
%% values stay over suspend/1 and resume/1, a drain and the restart of a
%% connection supervisor, as set_handler_opts/2's do (a restart of the
%% whole listener from its child spec starts from the options given
%% there). Calls for one listener run one at a time.
-spec set_transport_opts(name(), map() | list()) -> ok | {error, term()}.
set_transport_opts(Name, Opts) ->
    with_sup(Name, fun(_Sup, _Opts) ->
                           case current_opts(Name) of
                               {ok, Current} -> change_opts(Name, Current, Opts);
                               error -> {error, not_found}
                           end
                   end).

change_opts(Name, Current, Given) ->
    case sluice_opts_change:check(Current, Given) of
        {ok, New, Changed} ->
            ok = tls_files_read_again(New, Given),
            apply_opts(Name, New, Changed);
        Error ->
            Error
    end.

%% The certificate files just checked are the ones served: ssl keeps a
%% file's contents by its name, and one rewritten in place was served
%% from that cache (and the key beside it, if not cached, read anew:
%% a pair that does not match). Node-wide: other listeners read their
%% files again too, as ssl's own periodic check would have them.
tls_files_read_again(New, Given) ->
    case sluice_opts_change:uses_tls_opts(New) andalso given(tls_opts, Given) of
        true -> ssl:clear_pem_cache();
        false -> ok
    end.

given(Key, Given) when is_map(Given) -> maps:is_key(Key, Given);
given(Key, Given) -> proplists:is_defined(Key, Given).

apply_opts(Name, New = #{num_conns_sups := NS}, Changed) ->
    %% The registry first, as set_handler_opts/2 does: a connection
    %% supervisor that starts from now on reads the new values there.
    case sluice_registry:set(Name, opts, New) of
        ok ->
            ok = apply_max_connections(Name, Changed),
            ok = apply_alarms(Name, Changed),
            tell_conns_sups(Name, NS, maps:with(sluice_opts_change:per_connection(), Changed));
        {error, not_found} ->
            {error, not_found}
    end.

tell_conns_sups(_Name, _NS, Changes) when map_size(Changes) =:= 0 ->
    ok;
tell_conns_sups(Name, NS, Changes) ->
    _ = [sluice_conns_sup:set_opts(Sup, Changes) || Sup <- conns_sups(Name, NS)],
    ok.

apply_max_connections(Name, #{max_connections := Max}) ->
    case sluice_registry:lookup(Name) of
        {ok, #{stats := Stats}} -> sluice_stats:set_max_connections(Stats, Max);
        error -> ok
    end;
apply_max_connections(_Name, _Changed) ->
    ok.

apply_alarms(Name, #{alarms := Alarms}) -> sluice_alarms:set(Name, Alarms);
apply_alarms(_Name, _Changed) -> ok.

%% @doc The listener's options now, but the handler's (get_handler_opts/1):
%% those it was started with, validated (every default filled in), as the
%% last set_transport_opts/2 left them, with `max_connections' the limit
%% now (set_max_connections/2's too). As ranch:get_transport_options/1;
%% changed and given back to set_transport_opts/2 whole, it is taken.
-spec get_transport_opts(name()) -> {ok, map()} | {error, not_found | sluice_not_started}.
get_transport_opts(Name) ->
    if_running(fun() ->
                       case current_opts(Name) of
                           {ok, Current} -> {ok, maps:without([handler, own_port], Current)};
                           error -> {error, not_found}
                       end
               end).

%% The options in the registry with the limit now, which
%% set_max_connections/2 changes in the listener's figures only.
current_opts(Name) ->
    case sluice_registry:lookup(Name) of
        {ok, #{opts := Opts, stats := Stats}} ->
            #{max_connections := Max} = sluice_stats:read(Stats),
            {ok, Opts#{max_connections := Max}};
        error ->
            error
    end.

%% @doc The processes of a listener's live connections (parked
%% connections have none), as ranch:procs/2 gives them: for tools that
%% inspect or trace connections. `[]' for an unknown listener.
-spec connections(name()) -> [pid()].
connections(Name) ->
    case sluice_registry:running() andalso sluice_registry:lookup(Name) of
        {ok, #{opts := #{num_conns_sups := NS}}} ->
            [Pid || Sup <- conns_sups(Name, NS),
                    {_, Pid, _, _} <- try supervisor:which_children(Sup)
                                      catch exit:_ -> [] end];
        _ ->
            %% (error, or false: the application is not running, and no
            %% listener with it)
            []
    end.

%% @doc The pids of a listener's acceptors or of its connections, as
%% ranch:procs/2 gives them. `connections' is connections/1: a parked
%% connection has no process and is not among them, and a connection
%% that was parked and woke, or that upgraded with STARTTLS, is there
%% with the pid it has now. `acceptors' is `[]' while the listener is
%% suspended. `[]' for an unknown listener; another `Type' raises
%% `badarg'.
-spec procs(name(), acceptors | connections) -> [pid()].
procs(Name, connections) ->
    connections(Name);
procs(Name, acceptors) ->
    case sluice_registry:running() andalso sluice_registry:lookup(Name) of
        {ok, #{sup := Sup}} -> try acceptors(Sup) catch exit:_ -> [] end;
        _ -> []
    end;
procs(Name, Type) ->
    erlang:error(badarg, [Name, Type]).

%% @doc wait_for_connections/4 polling every 100 ms.
-spec wait_for_connections(name(), sluice_watch:op(), non_neg_integer()) ->
          ok | {error, not_found | sluice_not_started}.
wait_for_connections(Name, Op, N) ->
    wait_for_connections(Name, Op, N, 100).

%% @doc Return once the listener's live connections (info/1's
%% `connections', parked and uncounted ones included) compare with `N' by
%% `Op' (`Count Op N', with `Op' one of `>', `>=', `==', `=<', `<'), looking every
%% `Interval' ms, as ranch:wait_for_connections/4 does; with no timeout.
%% `{error, not_found}' for a listener that is not there or stops
%% meanwhile (ranch counts it 0). A bad `Op', `N' (a negative, `< 0') or
%% `Interval' raises `badarg', as ranch's does.
-spec wait_for_connections(name(), sluice_watch:op(), non_neg_integer(),
                           non_neg_integer()) -> ok | {error, not_found | sluice_not_started}.
wait_for_connections(Name, Op, N, Interval) ->
    case sluice_watch:valid(Op, N, Interval, infinity) of
        true -> if_running(fun() -> sluice_watch:wait_for_connections(Name, Op, N, Interval,
                                                                      infinity) end);
        false -> erlang:error(badarg, [Name, Op, N, Interval])
    end.

%% @doc wait_for_connections/4 for at most `Timeout' ms (or `infinity'):
%% `{error, timeout}' if the count has not compared so by then.
-spec wait_for_connections(name(), sluice_watch:op(), non_neg_integer(),
                           non_neg_integer(), timeout()) ->
          ok | {error, not_found | sluice_not_started | timeout}.
wait_for_connections(Name, Op, N, Interval, Timeout) ->
    case sluice_watch:valid(Op, N, Interval, Timeout) of
        true -> if_running(fun() -> sluice_watch:wait_for_connections(Name, Op, N, Interval,
                                                                      Timeout) end);
        false -> erlang:error(badarg, [Name, Op, N, Interval, Timeout])
    end.

%% @doc The calling connection no longer counts against its listener's
%% `max_connections' (ranch:remove_connection/1): a newcomer waiting for
%% a slot can take its place. Only the connection's own process (its
%% handler) may ask, with its `Conn' (or its pid): `{error, not_owner}'
%% from any other. It is done as soon as the current callback has returned
%% and the connection's supervisor has seen it (asynchronously, as
%% ranch's); a second call changes nothing. The connection still is in
%% connections/1, is still drained and shut down with the listener, and
%% its end still counts in info/1's `closed'; info/1's `uncounted' says
%% how many of `connections' do not count.
-spec remove_connection(conn() | pid()) -> ok | {error, not_owner}.
remove_connection(#{pid := Pid}) ->
    remove_connection(Pid);
remove_connection(Pid) when Pid =:= self() ->
    %% Told by the connection's loop, which knows its supervisor, once the
    %% callback returns (sluice_conn:control/2).
    self() ! {'$sluice', none, uncount},
    ok;
remove_connection(Pid) when is_pid(Pid) ->
    {error, not_owner}.

%% @doc adopt/3 with no bytes read before.
-spec adopt(name(), term()) -> {ok, pid()} | {error, term()}.
adopt(Name, Socket) ->
    adopt(Name, Socket, #{}).

%% @doc A connected socket its owner (the caller) gives to the running
%% listener `Name', which serves it with its handler as one its acceptors
%% accepted: `{ok, Pid}', the connection's process, which owns the socket
%% from then on. `buffered': bytes the caller read from it and did not
%% handle, the client's first (and counted in `bytes_in'); bytes an
%% active socket has sent the caller and that are still in its mailbox
%% come after them. On `{error, Reason}' the socket is still the
%% caller's, open, and nothing read from it is lost: `not_found',
%% `not_owner', `closed', `suspended' (suspended or draining),
%% `over_limit' (at `max_connections'; adopt/3 does not wait). A socket
%% the listener's transport does not take (docs/handler.md, "Adopting a
%% socket") or options other than `buffered' (iodata) raise `badarg'.
%% The options are a map or a proplist (Elixir: `buffered: bytes').
-spec adopt(name(), term(), #{buffered => iodata()} | [{buffered, iodata()}]) ->
          {ok, pid()} | {error, term()}.
adopt(Name, Socket, Opts) ->
    if_running(fun() -> sluice_adopt:adopt(Name, Socket, Opts) end).

%% @doc The names of the listeners started with start_listener/2 or
%% embedded with child_spec/1,2 that are running or suspended.
-spec listeners() -> [name()].
listeners() ->
    case sluice_registry:running() of
        true -> sluice_registry:listeners();
        false -> []
    end.

%% @doc A one-line, human description of an error start_listener/2
%% returns (or child_spec/1,2 raises): which option, what it expects.
-spec format_error(term()) -> string().
format_error(Reason) ->
    sluice_opts:format_error(Reason).

%% @doc Send on a connection from any process, in order with its own
%% replies. The connection process sends it and counts it in bytes_out.
%% An ordinary process waits until the data is queued on the socket (as
%% gen_tcp:send/2 does) and gets `{error, closed}' if the connection is
%% gone. A connection's own handler does not wait, whichever connection it
%% sends to: `ok' at once, and the data goes out after the target's
%% current callback (two connections sending to each other would otherwise
%% wait for each other for ever). Data that is not iodata raises `badarg'
%% here, and that includes a file: `{sendfile, File, Offset, Length}'
%% pieces go in a handler's reply (sluice_handler, "Sending a file").
-spec send(dest(), iodata()) -> ok | {error, term()}.
send(#{pid := Pid}, Data) ->
    send(Pid, Data);
send(Dest, Data) ->
    %% Data that is not iodata is the caller's error, raised here (badarg,
    %% as gen_tcp:send/2 does): sent on, it failed in the connection and
    %% closed it.
    _ = is_binary(Data) orelse iolist_size(Data),
    case get('$initial_call') of
        {sluice_conn, _, _} ->
            deliver(Dest, {'$sluice', none, {send, Data}});
        _ when Dest =:= self() ->
            deliver(Dest, {'$sluice', none, {send, Data}});
        _ ->
            request(Dest, {send, Data}, infinity)
    end.

%% @doc Close a connection from any process: what it has queued goes out,
%% then FIN; the handler gets nothing more (terminate/2 with reason
%% `closed_by_api'). Returns without waiting for the close, `ok' even if
%% the connection is gone or the name is not registered (as
%% gen_server:cast/2).
-spec close(dest()) -> ok.
close(#{pid := Pid}) ->
    close(Pid);
close(Dest) ->
    deliver(Dest, {'$sluice', none, close}).

%% A message to a connection that may be gone, by pid or by any name
%% gen_server takes, without waiting: `!' alone raised badarg for a name
%% not registered, and did not take `{global, _}' or `{via, _, _}'.
deliver(Pid, Msg) when is_pid(Pid) ->
    Pid ! Msg,
    ok;
deliver(Name, Msg) when is_atom(Name) ->
    try Name ! Msg of _ -> ok catch error:badarg -> ok end;
deliver({global, Name}, Msg) ->
    try global:send(Name, Msg) of _ -> ok catch _:_ -> ok end;
deliver({Name, Node} = Dest, Msg) when is_atom(Name), is_atom(Node) ->
    %% Matched after `{global, _}', as gen reads them. (close/1 took one
    %% with `!' before it took names; a function_clause since.) A local
    %% name not registered raises badarg; a remote one never does.
    try Dest ! Msg of _ -> ok catch error:badarg -> ok end;
deliver({via, Mod, Name}, Msg) ->
    %% A name not registered: global exits, an Elixir Registry raises.
    try Mod:send(Name, Msg) of _ -> ok catch _:_ -> ok end.

%% @doc A request to a connection's handler (handle_call/3), answered with
%% reply/2. The connection is its conn(), its pid or a name its handler
%% registered it under (dest()), as gen_server:call/3 takes one. Fails like
%% gen_server:call/3: an exit if the connection is gone or does not answer
%% within Timeout. A handler without handle_call/3 answers
%% `{error, not_supported}'.
-spec call(dest(), term(), timeout()) -> term().
call(#{pid := Pid}, Request, Timeout) ->
    call(Pid, Request, Timeout);
call(Pid, Request, Timeout) ->
    try gen:call(Pid, '$sluice', {call, Request}, Timeout) of
        {ok, Reply} -> Reply
    catch exit:Reason -> exit({Reason, {?MODULE, call, [Pid, Request, Timeout]}})
    end.

%% @doc Answer a call/3, from handle_call/3 or later.
-spec reply(sluice_handler:from(), term()) -> ok.
reply(From, Reply) ->
    gen:reply(From, Reply).

request(Pid, Req, Timeout) ->
    try gen:call(Pid, '$sluice', Req, Timeout) of
        {ok, Reply} -> Reply
    catch exit:_ -> {error, closed}
    end.

%% @doc The client's address and port (under the PROXY protocol, the load
%% balancer's: the client's are in the conn's `proxy'). On a Unix socket
%% `{local, Path}', `Path' `<<>>' for a client that did not bind its
%% socket to a path (most do not).
-spec peername(conn()) -> {ok, address()} | {error, term()}.
peername(#{socket := Sock, transport := T}) ->
    T:peername(Sock).

%% @doc The server's address and port of the connection (on a Unix socket
%% `{local, Path}', the listener's path).
-spec sockname(conn()) -> {ok, address()} | {error, term()}.
sockname(#{socket := Sock, transport := T}) ->
    T:sockname(Sock).

%% @doc Set socket options on a connection, from its handler or any other
%% process, with gen_tcp's names and values (`nodelay', `keepalive',
%% `sndbuf', `recbuf', `priority', `tos', `linger'), the same on every
%% transport: on `inet' the driver's socket, on `socket' the NIF's, under
%% TLS the TCP socket under it. Every option is checked before any is set:
%% <ul>
%%  <li>one the library owns (`active', `mode', `binary', `list',
%%      `packet', `packet_size', `header', `deliver', `line_delimiter',
%%      `exit_on_close', `show_econnreset', `buffer') or the listener's
%%      (`send_timeout', `send_timeout_close', the inet driver's
%%      watermarks and `delay_send', `raw'; set them in `socket_opts'):
%%      `{error, {not_settable, Name}}';</li>
%%  <li>an unknown one, or a value the listener's `socket_opts' would
%%      refuse: `{error, {bad_option, Opt}}'.</li>
%% </ul>
%% Then they are set in order and the first the kernel refuses stops it
%% with its reason (`{error, eperm}' for a priority above 6 without
%% CAP_NET_ADMIN; `{error, enotsup}' for `nodelay' or `tos' on a Unix
%% socket, which getopts/2 answers too); on a connection that has closed,
%% `{error, closed}'.
%% Nothing is sent to the connection process and nothing it does
%% changes: a refused option leaves the connection as it was. `Opts' that
%% is not a list raises `badarg' in the caller, as send/2 does for what
%% is not iodata. A transport of one's own without the optional callback
%% sluice_transport:setopts/2: `{error, not_supported}'.
-spec setopts(conn(), [sockopt()]) -> ok | {error, term()}.
setopts(Conn = #{socket := Sock, transport := T}, Opts) ->
    is_proper_list(Opts) orelse erlang:error(badarg, [Conn, Opts]),
    case sluice_opts:check_conn_opts(Opts) of
        ok -> sluice_transport:optional(T, setopts, [Sock, Opts], {error, not_supported});
        {error, _} = Error -> Error
    end.

%% @doc Read socket options of a connection, from any process: the names
%% setopts/2 sets, in the order asked. `{ok, [{Name, Value}]}' with the
%% values as gen_tcp gives them, on every transport (the kernel's: Linux
%% doubles `sndbuf' and `recbuf'), or the errors of setopts/2 (a name it
%% does not set is `{not_settable, Name}' or `{bad_option, Name}').
-spec getopts(conn(), [sockopt_name()]) -> {ok, [sockopt()]} | {error, term()}.
getopts(Conn = #{socket := Sock, transport := T}, Names) ->
    is_proper_list(Names) orelse erlang:error(badarg, [Conn, Names]),
    case sluice_opts:check_conn_opt_names(Names) of
        ok -> sluice_transport:optional(T, getopts, [Sock, Names], {error, not_supported});
        {error, _} = Error -> Error
    end.

is_proper_list(L) when is_list(L) ->
    try length(L) of
        _ -> true
    catch error:badarg -> false
    end;
is_proper_list(_) ->
    false.

%% @doc A synchronous read from inside a handler's callback (ranch's
%% `Transport:recv/3', thousand_island's `Socket.recv/3'; in Elixir
%% `:sluice.recv(conn, n, timeout)'), `Conn' the map init/2 got, with
%% gen_tcp's semantics: `Length' 0 returns whatever is there (at least a
%% byte), `Length' N exactly N bytes, waiting for them up to `Timeout' ms
%% (`infinity' for ever). The bytes the connection had already received
%% and not handed to the handler come first. Errors: `{error, timeout}'
%% (nothing is lost: what was read goes to handle_data/2 next),
%% `{error, closed}' (the client closed: the connection then ends as
%% the client's close once the callback returns), `{error, Reason}' for a
%% socket error; `{error, not_owner}' from any process but the
%% connection's own (a parked connection's new process is its own, with
%% the `Conn' of the first), `{error, framed}' on a listener with `framing' (whose
%% frames are the way to read a body), `{error, not_supported}' on a
%% transport of one's own without the optional callbacks. Once the
%% callback returns, bytes read past Length go to handle_data/2 and the
%% connection's delivery resumes (docs/handler.md, "Reading
%% synchronously"). A Length or Timeout of another type raises `badarg'.
-spec recv(conn(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
recv(Conn = #{pid := Pid}, Length, Timeout)
  when is_pid(Pid), is_integer(Length), Length >= 0,
       (Timeout =:= infinity orelse (is_integer(Timeout) andalso Timeout >= 0)) ->
    sluice_conn_recv:recv(Conn, Length, Timeout);
recv(Conn, Length, Timeout) ->
    erlang:error(badarg, [Conn, Length, Timeout]).
