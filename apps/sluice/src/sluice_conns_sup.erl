%% @doc A connection supervisor: starts connection processes for the
%% acceptors, is linked to each, and keeps the listener's live-connection
%% count right whatever way a connection ends (normal exit, crash, kill).
%%
%% It is a special process rather than a `supervisor' because connections
%% are started and stopped thousands of times a second and never restarted;
%% it still answers the supervisor calls (which_children, count_children)
%% and sys messages so that release tools and observer see a supervisor.
%% A listener runs several (one per scheduler by default) so that starting
%% connections is not serialised through one process.
-module(sluice_conns_sup).

-include("sluice_counters.hrl").

-export([start_link/2, start_connection/3, drain/2]).
-export([init/3]).
-export([system_continue/3, system_terminate/4, system_code_change/4]).

-record(st, {parent :: pid(),
             index :: pos_integer(),
             listener :: map(),
             children = #{} :: #{pid() => true}}).

%% @doc `Listener' is the map that sluice_listener_sup builds: name,
%% counters, atomics, transport module, handler and connection options.
-spec start_link(map(), pos_integer()) -> {ok, pid()}.
start_link(Listener, Index) ->
    proc_lib:start_link(?MODULE, init, [self(), Listener, Index]).

%% @doc Called by an acceptor that owns `Sock' and has already counted it in
%% the listener's live connections; from then on this supervisor owns that
%% count. Returns the new connection process, to which the caller must
%% transfer the socket and then send `{sluice_go, Sock}'.
-spec start_connection(pid(), sluice_transport:socket(), timeout()) ->
          {ok, pid()} | {error, term()}.
start_connection(Sup, Sock, Timeout) ->
    MRef = erlang:monitor(process, Sup, [{alias, reply_demonitor}]),
    Sup ! {sluice_start, MRef, Sock},
    receive
        {MRef, Pid} -> {ok, Pid};
        {'DOWN', MRef, process, _, Reason} -> {error, {conns_sup_down, Reason}}
    after Timeout ->
            erlang:demonitor(MRef, [flush]),
            {error, timeout}
    end.

%% @doc Ask every connection of this supervisor to drain by `Deadline'
%% (erlang:monotonic_time(millisecond)).
-spec drain(pid(), integer()) -> ok.
drain(Sup, Deadline) ->
    Sup ! {sluice_drain, Deadline},
    ok.

-spec init(pid(), map(), pos_integer()) -> no_return().
init(Parent, Listener = #{name := Name, atomics := A}, Index) ->
    process_flag(trap_exit, true),
    %% Load the connection module now: in an interactive-mode VM it would
    %% otherwise be loaded by the first connection, and if the descriptors
    %% have run out by then (emfile) the code server cannot open the .beam
    %% and every connection dies with undef.
    {module, sluice_conn} = code:ensure_loaded(sluice_conn),
    %% A predecessor that was killed left its connections counted; they died
    %% with it (they are linked), so give their slots back.
    Slot = ?A_SUP_BASE + Index,
    Stale = atomics:exchange(A, Slot, 0),
    atomics:sub(A, ?A_CONNS, Stale),
    ok = sluice_registry:set_conns_sup(Name, Index, self()),
    proc_lib:init_ack(Parent, {ok, self()}),
    loop(#st{parent = Parent, index = Index, listener = Listener}).

loop(St = #st{parent = Parent, children = Children, listener = L, index = I}) ->
    receive
        {sluice_start, Tag, Sock} ->
            Pid = proc_lib:spawn_opt(sluice_conn, init, [self(), Sock, L], [link]),
            atomics:add(maps:get(atomics, L), ?A_SUP_BASE + I, 1),
            Tag ! {Tag, Pid},
            loop(St#st{children = Children#{Pid => true}});
        {'EXIT', Parent, Reason} ->
            terminate(Reason, St);
        {'EXIT', Pid, Reason} ->
            case maps:take(Pid, Children) of
                {true, Rest} ->
                    child_gone(L, I),
                    count_crash(Reason, L),
                    loop(St#st{children = Rest});
                error ->
                    loop(St)
            end;
        {sluice_drain, Deadline} ->
            _ = [Pid ! {sluice_drain, Deadline} || Pid <- maps:keys(Children)],
            loop(St);
        {'$gen_call', From, Req} ->
            gen:reply(From, call(Req, St)),
            loop(St);
        {system, From, Req} ->
            sys:handle_system_msg(Req, From, Parent, ?MODULE, [], St);
        _ ->
            loop(St)
    end.

child_gone(#{atomics := A, counters := C}, I) ->
    atomics:sub(A, ?A_CONNS, 1),
    atomics:sub(A, ?A_SUP_BASE + I, 1),
    counters:add(C, ?C_CLOSED, 1).

%% A connection that ends on its own exits normal, having counted its reason;
%% any other exit (a handler that raised, a kill) is counted here.
count_crash(normal, _L) -> ok;
count_crash(_, #{counters := C}) -> counters:add(C, ?C_CLOSE_CRASHED, 1).

call(which_children, #st{children = Children}) ->
    [{sluice_conn, Pid, worker, [sluice_conn]} || Pid <- maps:keys(Children)];
call(count_children, #st{children = Children}) ->
    N = map_size(Children),
    [{specs, 1}, {active, N}, {supervisors, 0}, {workers, N}];
call(_, _) ->
    {error, not_supported}.

%% Shut every connection down (`shutdown' exit), give them the listener's
%% shutdown timeout, kill the rest, and account for each.
-spec terminate(term(), #st{}) -> no_return().
terminate(Reason, #st{children = Children, listener = L, index = I}) ->
    _ = [exit(Pid, shutdown) || Pid <- maps:keys(Children)],
    Timeout = maps:get(shutdown_timeout, L, 5000),
    TRef = case Timeout of
               infinity -> undefined;
               _ -> erlang:start_timer(Timeout, self(), kill_all)
           end,
    wait_children(Children, TRef, L, I),
    exit(Reason).

wait_children(Children, _TRef, _L, _I) when map_size(Children) =:= 0 ->
    ok;
wait_children(Children, TRef, L, I) ->
    receive
        {'EXIT', Pid, _} when is_map_key(Pid, Children) ->
            child_gone(L, I),
            wait_children(maps:remove(Pid, Children), TRef, L, I);
        {timeout, TRef, kill_all} ->
            _ = [exit(Pid, kill) || Pid <- maps:keys(Children)],
            wait_children(Children, undefined, L, I)
    end.

-spec system_continue(pid(), [sys:dbg_opt()], #st{}) -> no_return().
system_continue(_Parent, _Debug, St) ->
    loop(St).

-spec system_terminate(term(), pid(), [sys:dbg_opt()], #st{}) -> no_return().
system_terminate(Reason, _Parent, _Debug, St) ->
    terminate(Reason, St).

-spec system_code_change(#st{}, module(), term(), term()) -> {ok, #st{}}.
system_code_change(St, _Module, _OldVsn, _Extra) ->
    {ok, St}.
