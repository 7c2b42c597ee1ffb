%% @doc Owner of the public `sluice_registry' ETS table, where each listener
%% publishes what the API needs to find it (its supervisor, options,
%% figures (sluice_stats), real port, listen sockets, connection
%% supervisors) and where rare events such as accept errors are counted by
%% reason. The table outlives listener restarts; this process removes a
%% listener's rows when its supervisor goes down. It is also the heir of
%% every connection supervisor's table of parked connections, whose sockets
%% it closes if that supervisor dies (sluice_parking).
%% @private
-module(sluice_registry).
-behaviour(gen_server).

-export([start_link/0, running/0, register_listener/3, lookup/1, lookup/2, set/3,
         set_conns_sup/3, conns_sup/2, recv_facts/1, count_accept_error/2, accept_errors/1,
         listeners/0, with_lock/2, keep_listen_side/2, kept_listen_side/1,
         forget_listen_side/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(TAB, ?MODULE).
%% How often a caller of with_lock/2 looks again at a lock held by another.
-define(LOCK_POLL_MS, 2).

-spec start_link() -> {ok, pid()} | ignore | {error, term()}.
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Whether the table is there: it is while the sluice application
%% runs (sluice_sup starts this process first), and without it every
%% read of it raises ets's badarg. For the API's calls (sluice) and a
%% listener's start only, never a connection's path.
-spec running() -> boolean().
running() ->
    ets:whereis(?TAB) =/= undefined.

%% @doc Publish a listener; its rows go when `Sup' goes down.
%% `{error, already_started}' while another live supervisor has the name (a listener under sluice_sup
%% and one embedded with child_spec/1,2, say). A restarted supervisor
%% replaces its dead predecessor.
-spec register_listener(term(), pid(), map()) -> ok | {error, already_started}.
register_listener(Name, Sup, Info) ->
    gen_server:call(?MODULE, {register, Name, Sup, Info}).

-spec lookup(term()) -> {ok, map()} | error.
lookup(Name) ->
    case ets:lookup(?TAB, {listener, Name}) of
        [{_, Info}] -> {ok, Info};
        [] -> error
    end.

-spec lookup(term(), atom()) -> term().
lookup(Name, Key) ->
    {ok, Info} = lookup(Name),
    maps:get(Key, Info).

%% @doc What sluice:recv/3 needs of a connection's listener
%% (sluice_conn_recv): its counters, and whether it frames. Read at each
%% recv: a row of its own, which a lookup copies whole (the listener's
%% row holds its options: a select that took two fields of it cost 8 us).
-spec recv_facts(term()) -> {ok, sluice_stats:stats(), boolean()} | error.
recv_facts(Name) ->
    case ets:lookup(?TAB, {recv, Name}) of
        [{_, Stats, Framed}] -> {ok, Stats, Framed};
        [] -> error
    end.

%% @doc The listen side a listener under sluice_sup last opened its
%% sockets with (sluice_listen_sockets), for sluice_sup's restart of it,
%% which starts from the child spec: the start's options, whose port may
%% be another's by then (sluice:set_transport_opts/2 moved it). A row that
%% outlives the listener's supervisor (its other rows go when it goes
%% down, maybe before the restart reads this), removed when the listener
%% stops or starts anew (forget_listen_side/1).
-spec keep_listen_side(term(), map()) -> ok.
keep_listen_side(Name, Opts) ->
    true = ets:insert(?TAB, {{listen_side, Name}, Opts}),
    ok.

-spec kept_listen_side(term()) -> map().
kept_listen_side(Name) ->
    case ets:lookup(?TAB, {listen_side, Name}) of
        [{_, Opts}] -> Opts;
        [] -> #{}
    end.

-spec forget_listen_side(term()) -> ok.
forget_listen_side(Name) ->
    true = ets:delete(?TAB, {listen_side, Name}),
    ok.

%% @doc Set one field of a listener's row (e.g. its real port once bound).
%% `{error, not_found}' if the listener is gone.
-spec set(term(), atom(), term()) -> ok | {error, not_found}.
set(Name, Key, Value) ->
    gen_server:call(?MODULE, {set, Name, Key, Value}).

-spec set_conns_sup(term(), pos_integer(), pid()) -> ok.
set_conns_sup(Name, Index, Pid) ->
    true = ets:insert(?TAB, {{conns_sup, Name, Index}, Pid}),
    ok.

-spec conns_sup(term(), pos_integer()) -> pid() | undefined.
conns_sup(Name, Index) ->
    try ets:lookup_element(?TAB, {conns_sup, Name, Index}, 2)
    catch error:badarg -> undefined
    end.

-spec count_accept_error(term(), term()) -> ok.
count_accept_error(Name, Reason) ->
    _ = ets:update_counter(?TAB, {accept_error, Name, Reason}, 1,
                           {{accept_error, Name, Reason}, 0}),
    ok.

-spec accept_errors(term()) -> #{term() => non_neg_integer()}.
accept_errors(Name) ->
    maps:from_list(ets:select(?TAB, [{{{accept_error, Name, '$1'}, '$2'}, [],
                                      [{{'$1', '$2'}}]}])).

-spec listeners() -> [term()].
listeners() ->
    ets:select(?TAB, [{{{listener, '$1'}, '_'}, [], ['$1']}]).

%% @doc Run `Fun' alone among the processes that call this with the same
%% listener name: sluice:suspend/1 and resume/1 each take several steps on
%% the listener's supervisor (its sockets, then its acceptors), and
%% interleaved they left the port open with no acceptor (connects taken by
%% the kernel and never served) or acceptors on closed sockets. A row of
%% the table, not a call to this server, which a listener that stops may
%% keep busy; a lock whose holder died is taken over. Re-entrant.
%%
%% Taken in turn: the row holds the callers waiting, in the order they
%% came, and the holder hands the lock to the first of them. A waiter
%% that only looked again every few ms never had it while another process
%% called suspend/1 and resume/1 in a loop (that one took it back within
%% microseconds of letting it go): its drain/2 or set_transport_opts/2
%% waited as long as the loop ran.
-spec with_lock(term(), fun(() -> T)) -> T.
with_lock(Name, Fun) ->
    Key = {lock, Name},
    case lock(Key) of
        held ->
            Fun();
        taken ->
            try Fun()
            after unlock(Key)
            end
    end.

%% The row: {Key, Holder, Waiters}; changed only by compare-and-swap
%% (swap/3), as several processes change it.
lock(Key) ->
    case ets:insert_new(?TAB, {Key, self(), []}) of
        true -> taken;
        false ->
            case ets:lookup(?TAB, Key) of
                [{_, Holder, _}] when Holder =:= self() -> held;
                _ -> wait(Key)
            end
    end.

%% In the queue until the lock is handed over (or found free, or its
%% holder dead: then the first waiter alive takes it).
wait(Key) ->
    case ets:lookup(?TAB, Key) of
        [] ->
            case ets:insert_new(?TAB, {Key, self(), []}) of
                true -> taken;
                false -> wait(Key)
            end;
        [{_, Holder, _}] when Holder =:= self() ->
            taken;
        [{_, Holder} = Old] ->
            %% the shape of a lock taken by this module's code before
            %% the queue (a code upgrade in the middle of a suspend/1)
            _ = is_process_alive(Holder) orelse ets:delete_object(?TAB, Old),
            receive after ?LOCK_POLL_MS -> wait(Key) end;
        [{_, Holder, Waiters} = Row] ->
            Alive = is_process_alive(Holder),
            case lists:member(self(), Waiters) of
                false ->
                    _ = swap(Key, Row, {Key, Holder, Waiters ++ [self()]}),
                    wait(Key);
                true when Alive ->
                    receive after ?LOCK_POLL_MS -> wait(Key) end;
                true ->
                    %% the holder died holding it (or died as it was
                    %% handed the lock): the next in line has it
                    [Next | Rest] = [P || P <- Waiters, P =:= self() orelse is_process_alive(P)],
                    _ = swap(Key, Row, {Key, Next, Rest}),
                    wait(Key)
            end
    end.

%% To the first waiter alive (one killed as it waited is passed over),
%% or free.
unlock(Key) ->
    case ets:lookup(?TAB, Key) of
        [{_, Holder, Waiters} = Row] when Holder =:= self() ->
            Done = case [P || P <- Waiters, is_process_alive(P)] of
                       [] -> ets:select_delete(?TAB, [{{'$1', '$2', '$3'}, same(Row), [true]}]) =:= 1;
                       [Next | Rest] -> swap(Key, Row, {Key, Next, Rest})
                   end,
            %% not done: a waiter came meanwhile
            _ = Done orelse unlock(Key),
            ok;
        _ ->
            ok   % taken over (this process was taken for dead: it never is)
    end.

%% Row replaced by {Key, Holder, Waiters} if it is still Row (the key
%% kept as matched: select_replace/2 takes no other).
swap(_Key, Row, {_, Holder, Waiters}) ->
    ets:select_replace(?TAB, [{{'$1', '$2', '$3'}, same(Row),
                               [{{'$1', {const, Holder}, {const, Waiters}}}]}]) =:= 1.

%% The guards of a match on Row's fields: a listener's name is any term
%% (an atom such as '_' in it would be a pattern's wildcard).
same({Key, Holder, Waiters}) ->
    [{'=:=', '$1', {const, Key}}, {'=:=', '$2', {const, Holder}},
     {'=:=', '$3', {const, Waiters}}].

%% gen_server

-spec init([]) -> {ok, #{reference() => term()}}.
init([]) ->
    _ = ets:new(?TAB, [named_table, public, set, {read_concurrency, true},
                       {write_concurrency, true}]),
    {ok, #{}}.

-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call({register, Name, Sup, Info}, _From, Monitors) ->
    case lookup(Name) of
        {ok, #{sup := Other}} when Other =/= Sup ->
            case is_process_alive(Other) of
                true ->
                    %% Two listeners under one name would share its rows:
                    %% one's connections counted by the other.
                    {reply, {error, already_started}, Monitors};
                false ->
                    insert_listener(Name, Sup, Info, Monitors)
            end;
        _ ->
            insert_listener(Name, Sup, Info, Monitors)
    end;
handle_call({set, Name, Key, Value}, _From, Monitors) ->
    Reply = case lookup(Name) of
                {ok, Info} ->
                    true = ets:insert(?TAB, {{listener, Name}, Info#{Key => Value}}),
                    ok;
                error ->
                    {error, not_found}
            end,
    {reply, Reply, Monitors};
handle_call(_Req, _From, Monitors) ->
    {reply, {error, unknown_call}, Monitors}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_Msg, Monitors) ->
    {noreply, Monitors}.

-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info({'DOWN', MRef, process, Sup, _}, Monitors) ->
    case maps:take(MRef, Monitors) of
        {{Name, Sup}, Rest} ->
            case lookup(Name) of
                {ok, #{sup := Sup} = Info} ->
                    delete_rows(Name),
                    %% sluice_sup's listeners' is for their restart
                    _ = maps:get(top, Info, false) orelse forget_listen_side(Name);
                _ ->
                    ok   % already replaced by a newer supervisor
            end,
            ok = delete_dead_lock(Name),
            {noreply, Rest};
        error ->
            {noreply, Monitors}
    end;
handle_info({'ETS-TRANSFER', Tab, _DeadConnsSup, {sluice_parked, T}}, Monitors) ->
    %% A conns_sup died with parked connections (their sockets are not
    %% linked to it, to save memory): close them, or they would stay open
    %% with nobody to read them.
    ok = sluice_parking:close_orphans(Tab, T),
    {noreply, Monitors};
handle_info(_Msg, Monitors) ->
    {noreply, Monitors}.

%% A restarted listener supervisor replaces the rows of its predecessor.
insert_listener(Name, Sup, Info, Monitors) ->
    delete_rows(Name),
    true = ets:insert(?TAB, {{listener, Name}, Info#{sup => Sup}}),
    _ = case Info of
            #{stats := Stats, opts := #{framing := Framing}} ->
                ets:insert(?TAB, {{recv, Name}, Stats, Framing =/= none});
            _ -> true
        end,
    MRef = erlang:monitor(process, Sup),
    {reply, ok, Monitors#{MRef => {Name, Sup}}}.

%% A lock (with_lock/2) left by a process that died holding it, on a
%% listener that is gone: nobody may come to take it over. One whose holder
%% or a waiter lives is deleted by them.
delete_dead_lock(Name) ->
    case ets:lookup(?TAB, {lock, Name}) of
        [{_, Holder, Waiters} = Row] ->
            _ = lists:any(fun erlang:is_process_alive/1, [Holder | Waiters])
                orelse ets:delete_object(?TAB, Row),
            ok;
        [] ->
            ok
    end.

delete_rows(Name) ->
    _ = ets:select_delete(?TAB, [{{{listener, Name}, '_'}, [], [true]},
                                 {{{conns_sup, Name, '_'}, '_'}, [], [true]},
                                 {{{recv, Name}, '_', '_'}, [], [true]},
                                 {{{accept_error, Name, '_'}, '_'}, [], [true]}]),
    ok.
