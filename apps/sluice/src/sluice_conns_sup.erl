%% @doc A connection supervisor: starts connection processes for the
%% acceptors, is linked to each, and keeps the listener's live-connection
%% count right whatever way a connection ends (normal exit, crash, kill).
%%
%% It is a special process rather than a `supervisor' because connections
%% are started and stopped thousands of times a second and never restarted;
%% it still answers the supervisor calls (which_children, count_children)
%% and sys messages so that release tools and observer see a supervisor.
%% A listener runs several (one per scheduler by default) so that starting
%% connections is not serialised through one process. Each also runs the idle
%% sweep over its own connections (sluice_sweep): it already holds the set
%% of them, and one timer here replaces a timer per connection.
%%
%% It also holds the listener's parked connections: a connection quiet for
%% `park_after' whose handler keeps no process of its own (see
%% sluice_conn's park/1) hands its socket and handler state over here and
%% exits, and its next event (data, the peer's close, the idle timeout, a
%% drain) starts a new connection process with that state. An idle
%% connection then costs its socket and a table row instead of a process:
%% about 1.9 KB of BEAM memory on the inet backend against 3.4 KB
%% hibernated (`bin/sluice idle-memory').
-module(sluice_conns_sup).

-include("sluice_counters.hrl").

-export([start_link/2, start_connection/3, drain/2, parked_sockets/1]).
-export([init/3]).
-export([system_continue/3, system_terminate/4, system_code_change/4]).

-record(st, {parent :: pid(),
             index :: pos_integer(),
             listener :: map(),
             children = #{} :: sluice_sweep:children(),
             %% parked connections: {Sock, Since, HState}, Since being
             %% when it was last active (monotonic ms)
             parked :: ets:tid(),
             %% the latest drain: its deadline and the connections it was
             %% sent to (a connection that parked just before it is drained
             %% as soon as its socket arrives here)
             drain = none :: none | {integer(), sluice_sweep:children()},
             tick :: pos_integer() | infinity,
             sweep :: sluice_sweep:config()}).

%% @doc `Listener' is the map that sluice_listener_sup builds: name,
%% counters, atomics, transport module, handler and connection options.
-spec start_link(map(), pos_integer()) -> {ok, pid()}.
start_link(Listener, Index) ->
    proc_lib:start_link(?MODULE, init, [self(), Listener, Index]).

%% @doc Called by an acceptor that owns `Sock' and has already counted it in
%% the listener's live connections; from then on this supervisor owns that
%% count. Returns the new connection process, to which the caller must
%% transfer the socket and then send `{sluice_go, Sock}' (the connection
%% gives up at once if the caller dies first).
-spec start_connection(pid(), sluice_transport:socket(), timeout()) ->
          {ok, pid()} | {error, term()}.
start_connection(Sup, Sock, Timeout) ->
    MRef = erlang:monitor(process, Sup, [{alias, reply_demonitor}]),
    Sup ! {sluice_start, MRef, Sock, self()},
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
    atomics:put(A, parked_slot(Listener, Index), 0),
    ok = sluice_registry:set_conns_sup(Name, Index, self()),
    proc_lib:init_ack(Parent, {ok, self()}),
    Idle = maps:get(idle_timeout, Listener, infinity),
    HibAfter = maps:get(hibernate_after, Listener, infinity),
    ParkAfter = case parkable(Listener) of
                    true -> maps:get(park_after, Listener);
                    false -> infinity
                end,
    Tick = sluice_sweep:tick(Idle, min(HibAfter, ParkAfter)),
    ok = schedule_sweep(Tick),
    loop(#st{parent = Parent, index = Index, listener = Listener,
             tick = Tick, parked = parked_table(Listener),
             sweep = #{idle => Idle, hibernate_after => HibAfter, park_after => ParkAfter}}).

%% The table of parked connections. Their sockets are not linked to this
%% process (a link costs about 120 bytes a connection, 6 % of a parked
%% one): if it is killed, the table passes to sluice_registry, which
%% closes them (sluice_registry:handle_info/2, 'ETS-TRANSFER').
parked_table(#{transport := T}) ->
    ets:new(sluice_parked, [set, private,
                            {heir, whereis(sluice_registry), {sluice_parked, T}}]).

%% @doc The sockets of the parked connections in a table of parked_table/1
%% (sluice_registry closes them if their conns_sup dies).
-spec parked_sockets(ets:tid()) -> [sluice_transport:socket()].
parked_sockets(Tab) ->
    ets:select(Tab, [{{'$1', '_', '_'}, [], ['$1']}]).

%% Whether a listener's long-quiet connections park (hand their socket to
%% their conns_sup and exit): `park_after' is not infinity, the transport
%% can hold a socket armed for its owner's process (inet), the active mode
%% is not `false' (its pending read belongs to the connection process) and
%% the handler has no handle_info/2 (a handler that expects messages needs
%% its process). Otherwise the sweep never tells a connection to park.
parkable(#{transport := T, handler := {H, _}} = L) ->
    %% function_exported/3 is false for a module not loaded yet.
    {module, T} = code:ensure_loaded(T),
    {module, H} = code:ensure_loaded(H),
    maps:get(park_after, L, infinity) =/= infinity
        andalso maps:get(active, L) =/= false
        andalso erlang:function_exported(T, park, 1)
        andalso not erlang:function_exported(H, handle_info, 2).

now_ms() -> erlang:monotonic_time(millisecond).

%% The listener's count of this supervisor's parked connections.
count_parked(#st{listener = L = #{atomics := A}, index = I}, Delta) ->
    atomics:add(A, parked_slot(L, I), Delta).

parked_slot(#{opts := #{num_conns_sups := NS}}, Index) ->
    ?A_SUP_BASE + NS + Index.

schedule_sweep(infinity) -> ok;
schedule_sweep(Tick) -> _ = erlang:start_timer(Tick, self(), sluice_sweep), ok.

loop(St = #st{parent = Parent, children = Children, listener = L, index = I}) ->
    receive
        {sluice_start, Tag, Sock, Acceptor} ->
            Pid = proc_lib:spawn_opt(sluice_conn, init, [self(), Sock, Acceptor, L], [link]),
            atomics:add(maps:get(atomics, L), ?A_SUP_BASE + I, 1),
            Tag ! {Tag, Pid},
            loop(St#st{children = Children#{Pid => sluice_sweep:new_entry(now_ms())}});
        {'EXIT', Parent, Reason} ->
            terminate(Reason, St);
        {'EXIT', Pid, Reason} ->
            case maps:take(Pid, Children) of
                {_Entry, Rest} ->
                    child_gone(L, I),
                    count_crash(Reason, L),
                    loop(St#st{children = Rest});
                error ->
                    loop(St)
            end;
        {sluice_woke, Pid} ->
            loop(St#st{children = sluice_sweep:woke(Pid, now_ms(), Children)});
        {sluice_park, Pid, Sock, HState} ->
            loop(park(Pid, Sock, HState, St));
        {tcp, Sock, Data} ->
            loop(unpark(Sock, {data, Data}, St));
        {tcp_closed, Sock} ->
            loop(unpark(Sock, closed, St));
        {tcp_error, Sock, Reason} ->
            loop(unpark(Sock, {error, Reason}, St));
        {timeout, _TRef, sluice_sweep} ->
            Now = now_ms(),
            Swept = sluice_sweep:sweep(Children, Now, St#st.sweep),
            St2 = lists:foldl(fun(Sock, Acc) -> unpark(Sock, idle_timeout, Acc) end,
                              St#st{children = Swept}, expired(Now, St)),
            ok = schedule_sweep(St#st.tick),
            %% Each sweep leaves the rewritten parts of the children map as
            %% garbage; collecting now (live data: about 50 bytes a
            %% connection) keeps this heap near its live size instead of
            %% several copies of the map, per connection more than a
            %% hibernated connection holds itself.
            true = erlang:garbage_collect(),
            loop(St2);
        {sluice_drain, Deadline} ->
            _ = [Pid ! {sluice_drain, Deadline} || Pid <- maps:keys(Children)],
            Parked = parked_sockets(St#st.parked),
            loop(lists:foldl(fun(Sock, Acc) -> unpark(Sock, {sluice_drain, Deadline}, Acc) end,
                             St#st{drain = {Deadline, Children}}, Parked));
        {'$gen_call', From, Req} ->
            gen:reply(From, call(Req, St)),
            loop(St);
        {system, From, Req} ->
            sys:handle_system_msg(Req, From, Parent, ?MODULE, [], St);
        _ ->
            loop(St)
    end.

%% A connection has handed its socket over (sluice_conn's park/1) and is
%% exiting: it stays counted, its socket is armed to tell this process of
%% its next event. One that the sweep has meanwhile timed out, or that a
%% drain was sent to, is woken for that at once.
park(Pid, Sock, HState, St = #st{children = Children, listener = #{transport := T}}) ->
    case maps:take(Pid, Children) of
        {{Seen, Since}, Rest} ->
            true = ets:insert(St#st.parked, {Sock, Since, HState}),
            true = unlink(Sock),
            count_parked(St, 1),
            St2 = St#st{children = Rest},
            case {T:park(Sock), Seen, St#st.drain} of
                {{error, Reason}, _, _} -> unpark(Sock, {error, Reason}, St2);
                {ok, closing, _} -> unpark(Sock, idle_timeout, St2);
                {ok, _, {Deadline, #{Pid := _}}} -> unpark(Sock, {sluice_drain, Deadline}, St2);
                {ok, _, _} -> St2
            end;
        error ->
            %% Not ours (cannot happen: only our children are told to sleep).
            T:close(Sock),
            St
    end.

%% A parked connection's event: a new connection process takes over the
%% socket and the handler state, and is handed the event.
unpark(Sock, Event, St = #st{children = Children, listener = L, parked = Tab}) ->
    case ets:take(Tab, Sock) of
        [{Sock, _Since, HState}] ->
            #{transport := T} = L,
            count_parked(St, -1),
            Pid = proc_lib:spawn_opt(sluice_conn, unpark, [self(), Sock, HState, L], [link]),
            Event2 = case handover(T, Sock, Pid, Event) of
                         ok -> Event;
                         {error, Reason} -> T:close(Sock), {error, Reason}
                     end,
            Pid ! {sluice_go, Sock, Event2},
            St#st{children = Children#{Pid => sluice_sweep:new_entry(now_ms())}};
        [] ->
            St
    end.

%% A parked socket is in `once' mode. After its one message (data, closed,
%% error) it is passive and nothing of it can be in this mailbox: a plain
%% change of owner will do (T:handover/2; gen_tcp's controlling_process/2
%% costs three port calls and a scan of this whole mailbox, and this process
%% wakes every parked connection of its listener: at 100,000 connections
%% pinged every 10 s it took the pings' p99 from 20-40 ms to 200-300 ms).
%% On a drain or an idle timeout the socket is still armed, and data that
%% comes meanwhile must go to the new owner: controlling_process/2 moves it.
handover(T, Sock, Pid, Event) when Event =:= closed; element(1, Event) =:= data;
                                   element(1, Event) =:= error ->
    T:handover(Sock, Pid);
handover(T, Sock, Pid, _Event) ->
    T:controlling_process(Sock, Pid).

%% Parked connections quiet for the idle timeout.
expired(_Now, #st{sweep = #{idle := infinity}}) ->
    [];
expired(Now, #st{sweep = #{idle := Idle}, parked = Tab}) ->
    Cutoff = Now - Idle,
    ets:select(Tab, [{{'$1', '$2', '_'}, [{'=<', '$2', Cutoff}], ['$1']}]).

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
    %% Parked connections have no process: not counted here (the
    %% listener's live connections are, see sluice:info/1).
    N = map_size(Children),
    [{specs, 1}, {active, N}, {supervisors, 0}, {workers, N}];
call(_, _) ->
    {error, not_supported}.

%% Shut every connection down (`shutdown' exit), give them the listener's
%% shutdown timeout, kill the rest, and account for each.
-spec terminate(term(), #st{}) -> no_return().
terminate(Reason, #st{children = Children, listener = L, index = I, parked = Tab}) ->
    _ = [exit(Pid, shutdown) || Pid <- maps:keys(Children)],
    %% Parked connections: closed here, like a connection that is shut down.
    #{transport := T} = L,
    _ = [begin T:close(Sock), child_gone(L, I) end || Sock <- parked_sockets(Tab)],
    atomics:put(maps:get(atomics, L), parked_slot(L, I), 0),
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
