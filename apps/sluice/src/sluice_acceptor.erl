%% @doc An acceptor: accepts, enforces the listener's connection limit, and
%% hands the socket to a connection process. It owns nothing but this loop.
%%
%% The limit is one atomic per listener: increment first, then compare, so
%% that a burst of accepts on many acceptors can never admit more than the
%% limit. A connection over the limit is accepted and closed at once (and
%% counted as rejected) instead of being left in the kernel's backlog.
-module(sluice_acceptor).

-include("sluice_counters.hrl").

-export([start_link/3, init/3]).

-include_lib("kernel/include/logger.hrl").

%% Pause after an accept error such as emfile, so that a listener out of
%% descriptors does not spin; short, to accept again soon after they free.
-define(ERROR_BACKOFF_MS, 10).
-define(LOG_INTERVAL_MS, 1000).
-define(START_TIMEOUT, 5000).

-spec start_link(map(), sluice_transport:socket(), pos_integer()) -> {ok, pid()}.
start_link(Listener, LSock, Index) ->
    {ok, proc_lib:spawn_link(?MODULE, init, [Listener, LSock, Index])}.

-spec init(map(), sluice_transport:socket(), pos_integer()) -> no_return().
init(Listener = #{opts := #{num_conns_sups := NS}}, LSock, Index) ->
    loop(Listener, LSock, (Index - 1) rem NS + 1).

loop(L = #{transport := T}, LSock, SupIndex) ->
    case T:accept(LSock, infinity) of
        {ok, Sock} ->
            admit(L, Sock, SupIndex);
        {error, closed} ->
            %% The listen socket is gone: the supervisor is stopping or the
            %% socket was closed under us; either way this acceptor is done.
            exit(closed);
        {error, Reason} ->
            accept_error(L, Reason)
    end,
    loop(L, LSock, SupIndex).

admit(#{atomics := A, counters := C, transport := T, name := Name}, Sock, SupIndex) ->
    case atomics:add_get(A, ?A_CONNS, 1) =< atomics:get(A, ?A_MAX_CONNS) of
        true ->
            counters:add(C, ?C_ACCEPTED, 1),
            start(Name, A, T, Sock, SupIndex);
        false ->
            atomics:sub(A, ?A_CONNS, 1),
            counters:add(C, ?C_REJECTED, 1),
            T:close(Sock)
    end.

start(Name, A, T, Sock, SupIndex) ->
    Result = case sluice_registry:conns_sup(Name, SupIndex) of
                 undefined -> {error, no_conns_sup};
                 Sup -> sluice_conns_sup:start_connection(Sup, Sock, ?START_TIMEOUT)
             end,
    case Result of
        {ok, Pid} ->
            %% From here the conns_sup owns the count; if the handover fails
            %% the connection process times out waiting and exits, and the
            %% conns_sup gives the slot back.
            case T:controlling_process(Sock, Pid) of
                ok -> Pid ! {sluice_go, Sock}, ok;
                {error, _} -> T:close(Sock)
            end;
        {error, _} ->
            atomics:sub(A, ?A_CONNS, 1),
            T:close(Sock)
    end.

accept_error(#{name := Name, atomics := A}, Reason) ->
    ok = sluice_registry:count_accept_error(Name, Reason),
    maybe_log(Name, A, Reason),
    case Reason of
        timeout -> ok;
        econnaborted -> ok;
        _ -> receive after ?ERROR_BACKOFF_MS -> ok end
    end.

%% At most one line a second per listener, however many acceptors fail,
%% with the number of errors that were not logged since the previous line.
maybe_log(Name, A, Reason) ->
    Now = erlang:monotonic_time(millisecond),
    Last = atomics:get(A, ?A_LAST_LOG),
    case Now - Last >= ?LOG_INTERVAL_MS andalso
        atomics:compare_exchange(A, ?A_LAST_LOG, Last, Now) =:= ok of
        true ->
            Suppressed = atomics:exchange(A, ?A_SUPPRESSED, 0),
            ?LOG_WARNING("sluice listener ~p: accept failed: ~p "
                         "(~b more accept errors since the last report)",
                         [Name, Reason, Suppressed]);
        false ->
            atomics:add(A, ?A_SUPPRESSED, 1)
    end.
