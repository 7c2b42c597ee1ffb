%% @doc An acceptor: accepts, enforces the listener's connection limit, and
%% hands the socket to a connection process. It owns nothing but this loop.
%%
%% The limit is one atomic per listener: increment first, then compare, so
%% that a burst of accepts on many acceptors can never admit more than the
%% limit. A connection over the limit waits up to `max_connections_wait'
%% for a slot, this acceptor accepting nothing meanwhile (the kernel's
%% backlog holds the next): in a reconnect storm the clients are back
%% before their old connections have closed here, and without the wait the
%% newcomers were closed while slots were freeing by the thousand. After
%% that it is closed at once (and counted as rejected) instead of being
%% left in the kernel's backlog, as is every newcomer while the listener
%% stays full.
%%
%% Out of descriptors (emfile, enfile) a connection cannot even be accepted
%% to be refused: it would wait in the backlog until the client gives up.
%% So the first acceptor of each listen socket holds a spare descriptor (an
%% open /dev/null); on emfile it raises the listener's shedding flag and
%% closes the spare: while the flag is up every acceptor closes what it
%% accepts at once (counted as rejected), each close freeing the descriptor
%% for the next, until the backlog is empty; then the spare is opened again
%% and the flag lowered. (The freed descriptor goes to whichever acceptor
%% the driver serves first, hence a flag rather than one acceptor's loop.)
%% Clients over the limit see their connection closed at once, not silence.
%% @private
-module(sluice_acceptor).

-export([start_link/3, init/4]).

-include_lib("kernel/include/logger.hrl").

%% Pause after an accept error such as emfile, so that a listener out of
%% descriptors does not spin; short, to accept again soon after they free.
-define(ERROR_BACKOFF_MS, 10).
%% Attempts, 2 ms apart, to reopen the spare descriptor after shedding.
-define(SPARE_RETRIES, 50).
%% At most this many connections shed per emfile, so that one acceptor is
%% not kept from its other work by a flood.
-define(SHED_MAX, 1000).
-define(SHED_MS, 20).
%% How often an acceptor on a socket of the user's looks up to see whether
%% the listener suspends (wait/1): what a suspend/1 may wait for.
-define(OWN_SOCKET_POLL_MS, 100).

-spec start_link(sluice_listener_sup:listener(), sluice_transport:lsock(), pos_integer()) -> {ok, pid()}.
start_link(Listener, LSock, Index) ->
    %% Synchronous: the listener counts as started only once its spare
    %% descriptor is open. (Started asynchronously, the spare was opened
    %% while the first clients were already taking descriptors, and a storm
    %% right after start_listener/2 could leave it unopened: then nothing
    %% was shed and the excess waited silently; one test run in six.)
    proc_lib:start_link(?MODULE, init, [self(), Listener, LSock, Index]).

-spec init(pid(), sluice_listener_sup:listener(), sluice_transport:lsock(), pos_integer()) -> no_return().
init(Parent, Listener = #{opts := #{num_conns_sups := NS, num_listen_sockets := NL}}, LSock, Index) ->
    %% Accepting must not wait behind connection work: after a storm,
    %% thousands of new connections become runnable at once (to hibernate,
    %% to answer their first request), and a normal-priority acceptor would
    %% wait its turn behind all of them while the kernel's accept queue
    %% overflows and drops SYNs. An acceptor runs only when a connection is
    %% waiting to be accepted, and does little for each.
    _ = process_flag(priority, high),
    %% What an accept error calls must be loaded before descriptors run out:
    %% with none left, the code server cannot open a .beam file.
    _ = [{module, M} = code:ensure_loaded(M) || M <- [sluice_log, sluice_telemetry,
                                                       sluice_registry, sluice_stats]],
    Spare = case Index =< NL of
                true -> open_spare();
                false -> none
            end,
    proc_lib:init_ack(Parent, {ok, self()}),
    loop(Listener, LSock, (Index - 1) rem NS + 1, Spare, wait(Listener)).

%% How long an accept waits. A socket the listener opened is closed to
%% suspend it, which ends the accept; a socket of the user's
%% (`listen_socket') stays open, so its acceptors look up from their
%% accept this often to see whether the listener is suspending
%% (sluice:suspend/1 waits for them).
wait(#{opts := #{listen_socket := LSock}}) when LSock =/= none -> ?OWN_SOCKET_POLL_MS;
wait(_) -> infinity.

loop(L = #{transport := T}, LSock, SupIndex, Spare, Wait) ->
    case T:accept(LSock, Wait) of
        {ok, Sock} ->
            admit(L, Sock, SupIndex),
            loop(L, LSock, SupIndex, reopen(Spare), Wait);
        {error, timeout} when Wait =/= infinity ->
            case sluice_stats:suspended(maps:get(stats, L)) of
                true -> exit(normal);
                false -> loop(L, LSock, SupIndex, Spare, Wait)
            end;
        {error, closed} ->
            %% The listen socket is closed: the listener is suspending
            %% (sluice:suspend/1 closes the sockets first and waits for
            %% the acceptors to end here, between two connections, so that
            %% none is killed holding one it has counted) or its sockets'
            %% owner died (then the listener restarts the acceptors with
            %% new sockets), or another process closed a socket of the
            %% user's (its owner says so, once: sluice_listen_sockets).
            %% Either way this acceptor is done, and not restarted (a
            %% transient child).
            exit(normal);
        {error, Reason} ->
            %% Counted and logged first: shedding a long backlog takes a
            %% while, and the error is news before it is over.
            accept_error(L, Reason),
            Spare2 = try shed(Reason, L, LSock, Spare)
                     catch Class:Why:Stack ->
                             %% Shedding is best effort; it must never
                             %% take the acceptor (and so the port) down.
                             ?LOG_ERROR("sluice acceptor: shedding failed: ~p:~p ~p",
                                        [Class, Why, Stack]),
                             ok = sluice_stats:set_shedding(maps:get(stats, L), false),
                             lost
                     end,
            loop(L, LSock, SupIndex, Spare2, Wait)
    end.

%% The spare descriptor: an open file, `lost' when it could not be opened
%% again after shedding (retried later), `none' for acceptors without one.
open_spare() ->
    case file:open("/dev/null", [read, raw]) of
        {ok, Fd} -> Fd;
        {error, _} -> lost
    end.

open_spare_retry(0) ->
    open_spare();
open_spare_retry(N) ->
    case open_spare() of
        lost -> receive after 2 -> open_spare_retry(N - 1) end;
        Fd -> Fd
    end.

reopen(lost) -> open_spare();
reopen(Spare) -> Spare.

shed(Reason, #{name := Name, transport := T, stats := Stats}, LSock, Spare)
  when (Reason =:= emfile orelse Reason =:= enfile), Spare =/= none, Spare =/= lost ->
    ok = sluice_stats:set_shedding(Stats, true),
    ok = file:close(Spare),
    shed_waiting(Name, T, LSock, Stats, ?SHED_MAX),
    %% The other acceptors shed too meanwhile.
    receive after ?SHED_MS -> ok end,
    %% Still shedding, so another acceptor that has just taken a freed
    %% descriptor closes it at once: retry briefly rather than lose the
    %% spare: without it nothing is shed again while descriptors stay
    %% exhausted.
    Spare2 = open_spare_retry(?SPARE_RETRIES),
    ok = sluice_stats:set_shedding(Stats, false),
    Spare2;
shed(_Reason, _L, _LSock, Spare) ->
    reopen(Spare).

%% Accept and close whatever is waiting, using the one free descriptor.
shed_waiting(_Name, _T, _LSock, _Stats, 0) ->
    ok;
shed_waiting(Name, T, LSock, Stats, N) ->
    case T:accept(LSock, 0) of
        {ok, Sock} ->
            reject(Name, Stats, T, Sock, shedding),
            shed_waiting(Name, T, LSock, Stats, N - 1);
        {error, _} ->
            ok
    end.

admit(#{stats := Stats, transport := T, name := Name,
        opts := #{max_connections_wait := Wait}}, Sock, SupIndex) ->
    case sluice_stats:admit_within(Stats, Wait) of
        admitted ->
            start(Name, Stats, T, Sock, SupIndex);
        alarm ->
            %% Told after the handover, so that the connection that
            %% reached the threshold is among those its callback gets.
            _ = start(Name, Stats, T, Sock, SupIndex),
            sluice_alarms:reached(Name, Stats);
        over_limit ->
            reject(Name, Stats, T, Sock, max_connections),
            sluice_log:over_limit(Name, Stats);
        suspended ->
            %% Waiting for a slot as the listener stopped accepting: no
            %% limit's doing, and not logged as one.
            reject(Name, Stats, T, Sock, suspended);
        shedding ->
            %% Out of descriptors: the emfile that started it is logged.
            reject(Name, Stats, T, Sock, shedding)
    end.

%% Counted, told to telemetry with why (sluice_telemetry:rejected/2), and
%% closed.
reject(Name, Stats, T, Sock, Why) ->
    ok = sluice_stats:rejected(Stats),
    ok = sluice_telemetry:rejected(Name, Why),
    T:close_socket(Sock).

start(Name, Stats, T, Sock, SupIndex) ->
    case sluice_registry:conns_sup(Name, SupIndex) of
        undefined ->
            ok = sluice_stats:release(Stats),
            T:close_socket(Sock);
        Sup ->
            Gen = sluice_stats:sup_claim(Stats, SupIndex),
            case sluice_conns_sup:start_connection(Sup, T, Sock) of
                ok ->
                    ok;
                {error, _} ->
                    _ = sluice_stats:sup_unclaim(Stats, SupIndex, Gen),
                    T:close_socket(Sock)
            end
    end.

accept_error(#{name := Name, stats := Stats}, Reason) ->
    ok = sluice_registry:count_accept_error(Name, Reason),
    ok = sluice_log:accept_failed(Name, Stats, Reason),
    ok = sluice_telemetry:accept_error(Name, Reason),
    case Reason of
        timeout -> ok;
        econnaborted -> ok;
        _ -> receive after ?ERROR_BACKOFF_MS -> ok end
    end.
