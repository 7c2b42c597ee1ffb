%% @doc A connection supervisor: starts connection processes for the
%% acceptors, is linked to each, and keeps the listener's live-connection
%% count right whatever way a connection ends (normal exit, crash, kill).
%%
%% It is a special process rather than a `supervisor' because connections
%% are started and stopped thousands of times a second and never restarted;
%% it still answers as a simple_one_for_one supervisor would
%% (which_children, count_children, get_childspec, terminate_child by pid;
%% sys:get_status/1 in a supervisor's shape, for get_callback_module/1 and
%% observer) and keeps sys's debug options (trace, log, statistics), so
%% that release tools and observer see a supervisor.
%% A listener runs several (one per scheduler by default) so that starting
%% connections is not serialised through one process.
%%
%% Because it already holds the set of its connections, it also
%% <ul>
%%  <li>runs the idle sweep over them on a timer (sluice_sweep): one timer
%%      here instead of one per connection;</li>
%%  <li>holds the connections that parked (sluice_parking) and starts a new
%%      process for one when its socket has an event;</li>
%%  <li>passes a drain on to every connection, parked ones included, and
%%      at its deadline closes those still before their handler (the gate,
%%      pass_gate/1).</li>
%% </ul>
%% @private
-module(sluice_conns_sup).

-export([start_link/2, start_connection/3, drain/2, cut/1, at_deadline/1, resume/1,
         set_opts/2]).
%% a connection process, before its handler
-export([pass_gate/1]).
-export([init/3]).
-export([system_continue/3, system_terminate/4, system_code_change/4, format_status/2]).
%% tests
-export([die_at/2]).

-export_type([gate/0]).

%% Between a connection's start and its handler, on a listener where a
%% connection may wait for its client there (the PROXY header, a TLS
%% handshake): a table of the connections that have passed (`{Pid}'),
%% put there by themselves, or that a drain cut off at its deadline
%% (`{Pid, cut}'), put there by this supervisor. Whichever puts a
%% connection's entry first decides (ets:insert_new/2), so that a drain
%% never kills a connection whose handler has started, and a connection it
%% cut never starts its handler. `none': the listener's connections go
%% straight to their handler.
-opaque gate() :: none | ets:tid().

-record(st, {parent :: pid(),
             index :: pos_integer(),
             listener :: sluice_listener_sup:listener(),
             stats :: sluice_stats:stats(),
             %% the stats as its connections have them (of_sup/2): what
             %% this process counts for one of them is marked as theirs is
             own :: sluice_stats:stats(),
             children = #{} :: sluice_sweep:children(),
             %% where hibernated connections report waking (sluice_sweep)
             woke :: sluice_sweep:woke_table(),
             parked :: sluice_parking:table(),
             %% the latest drain: its deadline and the connections it was
             %% sent to (a connection that parked just before it is drained
             %% as soon as its socket arrives here)
             drain = none :: none | {integer(), sluice_sweep:children()},
             %% whether a connection started now is drained too: from a
             %% drain (which stopped the acceptors first, so a start that
             %% comes after it was accepted before) until the listener
             %% accepts again (resume/1)
             drain_new = false :: boolean(),
             %% the connections a drain's deadline is closing (they said so,
             %% at_deadline/1) whose end is not seen yet, and how many
             %% ended so since the latest drain began: drain/2 counts them
             %% among those open at the deadline (cut/1)
             at_deadline = #{} :: #{pid() => true},
             closed_at_deadline = 0 :: non_neg_integer(),
             %% the gate before the handler (pass_gate/1)
             gate = none :: gate(),
             %% the connections that no longer count against the limit
             %% (sluice:remove_connection/1): a live one by its pid, a
             %% parked one by its socket
             uncounted = #{} :: #{pid() | sluice_transport:socket() => true},
             tick :: pos_integer() | infinity,
             sweep :: sluice_sweep:config(),
             %% a tick in progress, done in slices between messages
             sweeping = none :: none | {sluice_sweep:progress(), integer()},
             %% messages handled since the last slice
             handled = 0 :: non_neg_integer(),
             %% a collection to do once the mailbox is empty
             gc_due = false :: boolean(),
             %% what every connection process of this listener starts from
             template :: term(),
             %% sys debug options (sys:trace/2, sys:statistics/2, ...)
             debug = [] :: [sys:dbg_opt()]}).

%% A tick in progress gets a slice at least this often, however busy the
%% supervisor is with starting connections.
-define(MSGS_PER_SLICE, 64).

%% How long a connection supervisor waits at most for its predecessor,
%% whose parent was killed, to shut its connections down
%% (predecessor_gone/3): the default shutdown_timeout and its margin.
-define(PREDECESSOR_WAIT, 6000).

%% @doc Start connection supervisor `Index' of a listener.
-spec start_link(sluice_listener_sup:listener(), pos_integer()) -> {ok, pid()}.
start_link(Listener, Index) ->
    proc_lib:start_link(?MODULE, init, [self(), Listener, Index]).

%% @doc Called by an acceptor that owns `Sock' (passive, fresh from
%% accept) and has counted it in the listener's live connections and in
%% this supervisor's slot (sluice_stats:sup_claim/2): the socket is handed
%% to this supervisor, which starts a connection process for it. The
%% acceptor does not wait for that: after a storm this supervisor's mailbox
%% may hold thousands of ended connections ahead of the request, and the
%% acceptor must go back to accepting before the kernel's accept queue
%% overflows. The count stays exact whatever dies when: if this supervisor
%% dies with the request queued, the socket closes with it and its next
%% generation gives its slot back; if it was gone already, the handover
%% fails and the acceptor gives its claim back (sluice_stats:sup_unclaim/3).
-spec start_connection(pid(), module(), sluice_transport:socket()) -> ok | {error, term()}.
start_connection(Sup, T, Sock) ->
    case T:handover(Sock, Sup) of
        ok -> Sup ! {sluice_start, Sock}, ok;
        {error, Reason} -> {error, Reason}
    end.

%% @doc Ask every connection of this supervisor to drain by `Deadline'
%% (erlang:monotonic_time(millisecond)).
-spec drain(pid(), integer()) -> ok.
drain(Sup, Deadline) ->
    Sup ! {sluice_drain, Deadline},
    ok.

%% @doc At a drain's deadline: close the connections it was sent to that
%% are still before their handler (the PROXY header, the TLS handshake:
%% blocked there, they cannot see the drain), counted `drained', and
%% return once they are gone. The supervisor does so itself at the
%% deadline; drain/2 asks too, so that what it returns does not count
%% them whichever comes first.
%%
%% Returns how many of its connections were open at the deadline: those
%% still here (their handler in a callback, or closing), and those the
%% deadline closed since the drain began (each says so before it ends,
%% at_deadline/1). Read from the connections' own word rather than the
%% live count a moment after the deadline: a connection that waited for
%% its client's close until the deadline closes then, on its own timer,
%% and was counted or not as that timer raced the count (`serve' said
%% "0 connections closed at the deadline" for an idle client 3 times in
%% 4, as did drain/2).
-spec cut(pid()) -> non_neg_integer().
cut(Sup) ->
    try gen:call(Sup, '$gen_call', sluice_cut, infinity) of
        {ok, Open} -> Open
    catch
        %% Gone: its connections went with it.
        exit:_ -> 0
    end.

%% @doc Called by a connection process that a drain's deadline closes
%% (it waited for its client's close, or carried on through the drain),
%% before it ends: its supervisor counts it among those open at the
%% deadline (cut/1). Its end comes after this message (both are its
%% signals), so it is never missed nor counted twice.
-spec at_deadline(pid()) -> ok.
at_deadline(Sup) ->
    Sup ! {sluice_at_deadline, self()},
    ok.

%% @doc Called by a connection process once it is ready for its handler
%% (or has failed before it): `false' if a drain has cut it off meanwhile
%% (it must then end without a word: this supervisor counts it), `true'
%% if it goes on as its own, which no drain cuts any more.
-spec pass_gate(gate()) -> boolean().
pass_gate(none) ->
    true;
pass_gate(Gate) ->
    ets:insert_new(Gate, {self()}).

%% @doc The listener accepts again (sluice:resume/1): connections started
%% from now on are not drained (those told before still are). A call, made
%% before the acceptors start again, so that no connection they accept
%% reaches this supervisor before it.
-spec resume(pid()) -> ok.
resume(Sup) ->
    try gen:call(Sup, '$gen_call', sluice_resume, infinity) of
        {ok, ok} -> ok
    catch
        %% Gone: the one that replaces it starts with no drain.
        exit:_ -> ok
    end.

%% @doc New values of listener options for the connections started from
%% now on: the handler's (sluice:set_handler_opts/2) or those
%% sluice_opts_change:per_connection/0 names
%% (sluice:set_transport_opts/2). A call, so that a connection accepted
%% after it returns gets them.
-spec set_opts(pid(), map()) -> ok.
set_opts(Sup, Changes) ->
    try gen:call(Sup, '$gen_call', {sluice_opts, Changes}, infinity) of
        {ok, ok} -> ok
    catch
        %% Gone: the one that replaces it reads them in the registry.
        exit:_ -> ok
    end.

-spec init(pid(), sluice_listener_sup:listener(), pos_integer()) -> no_return().
init(Parent, Listener0 = #{name := Name, transport := T, stats := Stats}, Index) ->
    process_flag(trap_exit, true),
    %% An acceptor waits for this process to start each connection, so it
    %% runs at the acceptors' priority (see sluice_acceptor); its own work
    %% between messages (the sweep) comes in slices.
    _ = process_flag(priority, high),
    %% Load what a connection runs now: in an interactive-mode VM it would
    %% otherwise be loaded by the first connection, and if the descriptors
    %% have run out by then (emfile) the code server cannot open the .beam
    %% and every connection dies with undef.
    _ = [{module, M} = code:ensure_loaded(M)
         || M <- [sluice_conn, sluice_conn_handler, sluice_conn_close, sluice_proxy,
                  sluice_telemetry, sluice_log, sluice_stats, sluice_frame, T,
                  %% every connection at its end (sluice_conn_recv:pending/1), and what
                  %% a handler's result may call for at any time
                  sluice_conn_recv, sluice_conn_halfclose, sluice_conn_timeout,
                  sluice_conn_handoff, sluice_deadline]
                 ++ starttls_modules(Listener0)],
    _ = sluice_telemetry:refresh(),
    ok = predecessor_gone(Name, Index, Listener0),
    ok = sluice_stats:sup_reset(Stats, Index),
    ok = sluice_registry:set_conns_sup(Name, Index, self()),
    %% Read after this process is published: a set_handler_opts/2 or
    %% set_transport_opts/2 that wrote the registry after this read finds
    %% this process to tell.
    Listener = current_opts(Listener0),
    proc_lib:init_ack(Parent, {ok, self()}),
    Sweep = sluice_sweep:config(Listener, sluice_parking:parkable(Listener)),
    Tick = sluice_sweep:tick(Sweep),
    ok = schedule_sweep(Tick),
    Woke = sluice_sweep:woke_table(),
    Gate = gate(Listener),
    loop(#st{parent = Parent, index = Index, listener = Listener, stats = Stats,
             own = sluice_stats:of_sup(Stats, Index),
             tick = Tick, sweep = Sweep, parked = sluice_parking:new(T), woke = Woke,
             gate = Gate, template = template(Listener, Index, Woke, Gate)}).

%% This supervisor's predecessor in its slot, if it is still shutting its
%% connections down, is waited for (for up to the listener's
%% shutdown_timeout and the kill after it, terminate/2): killing this
%% process's parent ends it as any other (its end is its parent's), but
%% nothing waits for it, and the parent's successor starts this one at
%% once. Its counts (each connection closed as it goes) landed in the slot
%% after this one's reset had counted them all: every one of them closed
%% twice, and the slot's count below zero, which the next reset took for
%% 4 billion lost connections (`closed' and `crashed' 2^32 too many,
%% `connections' 2^32 below zero). One that was killed is gone already.
%% The wait is bounded (?PREDECESSOR_WAIT, less for a shorter
%% shutdown_timeout): the listener accepts nothing meanwhile, and its
%% restart, and a stop_listener/1 behind it, waited as long as the
%% predecessor did, forever for a handler that traps exits and ignores
%% the shutdown under shutdown_timeout infinity. Then it is killed: its
%% connections end with it as any killed supervisor's (counted `crashed'
%% by the reset; one that traps exits and lives on counts nothing more,
%% its marks' generation being the old one).
predecessor_gone(Name, Index, #{opts := #{shutdown_timeout := Shutdown}}) ->
    case sluice_registry:conns_sup(Name, Index) of
        Pid when is_pid(Pid), Pid =/= self() ->
            MRef = erlang:monitor(process, Pid),
            receive
                {'DOWN', MRef, process, Pid, _} -> ok
            after predecessor_wait(Shutdown) ->
                    exit(Pid, kill),
                    receive {'DOWN', MRef, process, Pid, _} -> ok end
            end;
        _ ->
            ok
    end.

%% Room for the predecessor to kill what its shutdown_timeout left and
%% count it (as sluice_conns_sup_sup's child spec leaves it), within
%% ?PREDECESSOR_WAIT.
predecessor_wait(infinity) -> ?PREDECESSOR_WAIT;
predecessor_wait(Shutdown) -> min(Shutdown + 1000, ?PREDECESSOR_WAIT).

%% The connections' template, whose stats are their copy (they mark the
%% close reasons they count in this supervisor's slot: sluice_stats:of_sup/2).
template(L = #{stats := Stats}, Index, Woke, Gate) ->
    sluice_conn:template(L#{stats := sluice_stats:of_sup(Stats, Index)}, Woke, Gate).

%% What an upgrade runs (STARTTLS: an inet listener with tls_opts), loaded
%% with the rest for the same reason.
starttls_modules(#{transport := sluice_transport_inet, opts := #{tls_opts := [_ | _]}}) ->
    [sluice_conn_starttls, sluice_transport_ssl];
starttls_modules(_) ->
    [].

%% Only where a connection can wait for its client before its handler:
%% the PROXY header, a handshake that waits (the transport's
%% handshake_waits/0: TLS's; a transport of the user's without it may).
gate(#{transport := T, opts := Opts}) ->
    case maps:get(proxy_protocol, Opts, false) orelse
        sluice_transport:optional(T, handshake_waits, [], true) of
        true -> ets:new(sluice_gate, [set, public, {write_concurrency, true}]);
        false -> none
    end.

%% The options that change while the listener runs as the registry has
%% them: those of the last sluice:set_handler_opts/2 and
%% set_transport_opts/2, which a connection supervisor restarted since
%% keeps (its own supervisor starts it with the listener's start options).
current_opts(L = #{name := Name, opts := Opts}) ->
    case sluice_registry:lookup(Name) of
        {ok, Row = #{opts := Now}} ->
            Live = maps:with([handler | sluice_opts_change:per_connection()], Now),
            %% `socket_opts' as the listen sockets open now have them
            %% (set_transport_opts/2 stores new ones for the next time
            %% they open: sluice_listen_sockets tells this process then).
            Listening = maps:with(sluice_opts_change:per_socket(),
                                  maps:get(listening, Row, #{})),
            L#{opts := maps:merge(maps:merge(Opts, Live), Listening)};
        error ->
            L
    end.

%% A set_opts/2: the new values in both the template of the connections
%% started from now on and this process's copy of the listener.
changed_opts(Changes, St = #st{listener = L = #{opts := Opts}}) ->
    L2 = L#{opts := maps:merge(Opts, Changes)},
    Template = case maps:is_key(socket_opts, Changes) of
                   %% `buffer' shapes the connection's state itself (its
                   %% read size, its grant's bounds): made anew, as at start
                   true -> template(L2, St#st.index, St#st.woke, St#st.gate);
                   false -> sluice_conn:template_opts(St#st.template, Changes)
               end,
    St#st{listener = L2, template = Template}.

now_ms() -> erlang:monotonic_time(millisecond).

%% sys:trace/2, sys:log/2, sys:statistics/2 and sys:install/2 see every
%% message this process takes, as on a gen_server.
debug_in(_Msg, St = #st{debug = []}) ->
    St;
debug_in(Msg, St = #st{debug = Debug}) ->
    St#st{debug = sys:handle_debug(Debug, fun print_event/3, self(), {in, Msg})}.

print_event(Dev, {in, Msg}, Pid) ->
    io:format(Dev, "*DBG* ~tp (sluice_conns_sup) got ~tp~n", [Pid, Msg]).

schedule_sweep(infinity) -> ok;
schedule_sweep(Tick) -> _ = erlang:start_timer(Tick, self(), sluice_sweep), ok.

loop(St = #st{sweeping = {_, _}, handled = H}) when H >= ?MSGS_PER_SLICE ->
    loop(slice(St#st{handled = 0}));
loop(St = #st{parent = Parent, handled = H}) ->
    receive
        {'EXIT', Parent, Reason} ->
            terminate(parents(Reason), St);
        {system, From, Req} ->
            sys:handle_system_msg(Req, From, Parent, ?MODULE, St#st.debug, St);
        Msg ->
            loop(handle(Msg, debug_in(Msg, St#st{handled = H + 1})))
    after between_messages(St) ->
            loop(idle_work(St))
    end.

%% This process ends because its parent did: a reason that is no
%% shutdown (the parent was killed, or crashed) is reported once, by the
%% parent's supervisor, and again in a crash report of each of a
%% listener's connection supervisors was noise (as a shutdown, it writes
%% none). Still a reason that is not `normal': sockets handed here and
%% not yet started close with it. Its own faults (a crash, sys:terminate/2)
%% keep their reason and their report.
parents(Reason) when Reason =:= normal; Reason =:= shutdown -> Reason;
parents({shutdown, _} = Reason) -> Reason;
parents(Reason) -> {shutdown, {parent, Reason}}.

handle({sluice_start, Sock}, St) ->
    Pid = proc_lib:spawn_opt(sluice_conn, init, [self(), Sock, St#st.template], [link]),
    #{transport := T} = St#st.listener,
    %% A socket that closed meanwhile fails in the connection's first call.
    _ = T:handover(Sock, Pid),
    started(Pid, Sock, St);
handle({'$gen_call', From, {sluice_adopt, Sock, Adopted}}, St) ->
    %% sluice:adopt/3 (sluice_adopt): a socket its owner handed here, which
    %% becomes a connection as an accepted one does, but for what its
    %% process is told (sluice_conn:adopted/4). Answered with the pid.
    Pid = proc_lib:spawn_opt(sluice_conn, adopted, [self(), Sock, Adopted, St#st.template],
                             [link]),
    #{transport := T} = St#st.listener,
    %% An established TLS socket is made the connection's by the
    %% connection itself (a call to ssl's process, which this one does
    %% not wait for).
    _ = case Adopted of
            #{tls := none} -> T:handover(Sock, Pid);
            #{tls := _Ssl} -> ok
        end,
    gen:reply(From, {ok, Pid}),
    started(Pid, Sock, St);
handle({'EXIT', Pid, Reason}, St0 = #st{children = Children}) ->
    St1 = undrained(Pid, closed_at_deadline(Pid, St0)),
    Gated = gated(Pid, St1),
    case maps:take(Pid, Children) of
        {_Entry, Rest} ->
            St = recounted(Pid, St1),
            ended(Gated, Reason, crashed, St),
            gone(St),
            St#st{children = Rest};
        error ->
            St1
    end;
handle({sluice_uncount, Pid}, St = #st{children = Children, uncounted = Uncounted})
  when is_map_key(Pid, Children), not is_map_key(Pid, Uncounted) ->
    ok = sluice_stats:uncount(St#st.stats, St#st.index),
    St#st{uncounted = Uncounted#{Pid => true}};
handle({sluice_uncount, _Pid}, St) ->
    %% Uncounted already (a second call is a no-op), or gone.
    St;
handle({sluice_at_deadline, Pid}, St = #st{children = Children, at_deadline = AtDeadline})
  when is_map_key(Pid, Children) ->
    St#st{at_deadline = AtDeadline#{Pid => true}};
handle({sluice_at_deadline, _Pid}, St) ->
    St;
handle({sluice_park, Pid, Sock, HState, TS}, St) ->
    park(Pid, Sock, HState, TS, St);
handle({timeout, _TRef, sluice_sweep}, St = #st{children = Children}) ->
    %% A tick still in progress is replaced: what it had not looked at is
    %% looked at by this one.
    slice(St#st{sweeping = {sluice_sweep:start(Children), now_ms()}, handled = 0});
handle({timeout, _TRef, {sluice_cut, Pids}}, St) ->
    _ = cut_off(Pids, St),
    St;
handle({sluice_drain, Deadline}, St = #st{children = Children}) ->
    _ = [Pid ! {sluice_drain, Deadline} || Pid <- maps:keys(Children)],
    ok = schedule_cut(Deadline, waiting(St), St),
    lists:foldl(fun(Sock, Acc) -> unpark(Sock, {sluice_drain, Deadline}, Acc) end,
                St#st{drain = {Deadline, Children}, drain_new = true,
                      closed_at_deadline = 0},
                sluice_parking:sockets(St#st.parked));
handle({'$gen_call', From, sluice_cut}, St) ->
    %% Those cut now, and those the deadline's timer cut a moment ago
    %% whose 'EXIT' is not handled yet: the drain counts what is left as
    %% soon as this answers, and a connection killed but not yet counted
    %% closed was one too many.
    Cut = case St#st.drain of
              {_, Drained} ->
                  _ = cut_off(maps:keys(Drained), St),
                  [Pid || Pid <- maps:keys(Drained), was_cut(Pid, St)];
              none -> []
          end,
    St2 = lists:foldl(fun wait_cut/2, St, Cut),
    gen:reply(From, map_size(St2#st.children) + sluice_parking:size(St2#st.parked)
                    + St2#st.closed_at_deadline),
    St2;
handle({'$gen_call', From, sluice_resume}, St) ->
    gen:reply(From, ok),
    St#st{drain_new = false};
handle({'$gen_call', From, {sluice_opts, Changes}}, St) ->
    gen:reply(From, ok),
    changed_opts(Changes, St);
handle({'$gen_call', From, {terminate_child, Pid}}, St = #st{children = Children})
  when is_map_key(Pid, Children) ->
    St2 = terminate_child(Pid, St),
    gen:reply(From, ok),
    St2;
handle({'$gen_call', From, Req}, St) ->
    gen:reply(From, call(Req, St)),
    St;
handle(Msg, St = #st{listener = #{transport := T}}) ->
    case sluice_transport:optional(T, parked_event, [Msg], false) of
        {Sock, Event} -> unpark(Sock, Event, St);
        _ -> St
    end.

%% A connection process has its socket: told to go, put among the
%% children, and drained at once if it came in just as the listener
%% stopped accepting.
started(Pid, Sock, St = #st{children = Children}) ->
    Pid ! {sluice_go, Sock},
    Now = now_ms(),
    Entry = sluice_sweep:new_entry(Sock, Now, Now),
    case St#st.drain of
        {Deadline, Drained} when St#st.drain_new ->
            %% Accepted just before the listener stopped accepting.
            Pid ! {sluice_drain, Deadline},
            ok = schedule_cut(Deadline, [Pid], St),
            St#st{children = Children#{Pid => Entry}, drain = {Deadline, Drained#{Pid => Entry}}};
        _ ->
            St#st{children = Children#{Pid => Entry}}
    end.

%% How a connection process that exited with `Reason' is counted here:
%% not at all if it counted its own reason (own_reason/2); one a drain
%% cut off before its handler, `drained' whatever it died of (the kill,
%% mostly); any other as `Other' (`crashed' for an exit this process
%% only saw, a shutdown's reason for one it shut down). Before gone/1, and
%% marked as a connection's own count is: this process killed between the
%% two leaves the connection counted in its slot with its mark, which its
%% successor counts closed and not `crashed' again
%% (sluice_stats:sup_reset/2).
ended(Gated, Reason, Other, #st{own = Own}) ->
    case own_reason(Gated, Reason) of
        true -> ok;
        false when Gated =:= cut -> sluice_stats:ended(Own, drained);
        false -> sluice_stats:ended(Own, Other)
    end.

%% A connection process's entry in the gate, taken out as it is gone:
%% `cut' (a drain cut it off), `passed', or `none'.
gated(_Pid, #st{gate = none}) ->
    none;
gated(Pid, #st{gate = Gate}) ->
    case ets:take(Gate, Pid) of
        [{Pid, cut}] -> cut;
        [{Pid}] -> passed;
        [] -> none
    end.

%% A woken parked connection resumes its handler: it is past the gate,
%% which its new process never goes through (sluice_conn:unpark/5), and a
%% drain must not take it for one still before its handler.
passed(_Pid, #st{gate = none}) ->
    ok;
passed(Pid, #st{gate = Gate}) ->
    true = ets:insert(Gate, {Pid}),
    ok.

%% The connections a drain finds before their handler: those that have
%% not passed the gate (usually few: a handshake takes milliseconds).
waiting(#st{gate = none}) ->
    [];
waiting(#st{gate = Gate, children = Children}) ->
    [Pid || Pid <- maps:keys(Children), not ets:member(Gate, Pid)].

%% The cut at a drain's deadline (cut/1) of the connections it found
%% before their handler, on this supervisor's own timer: drain/2's caller
%% may be gone by then, and with `infinity' for proxy_timeout or
%% handshake_timeout nothing else would ever close them. Each drain's
%% timer cuts the connections that drain found: of two drains, the
%% earlier deadline stands, as for handlers, and one after a resume does
%% not cut the connections accepted since at the first one's.
schedule_cut(_Deadline, [], _St) ->
    ok;
schedule_cut(_Deadline, _Pids, #st{gate = none}) ->
    ok;
schedule_cut(Deadline, Pids, _St) ->
    _ = erlang:start_timer(Deadline, self(), {sluice_cut, Pids}, [{abs, true}]),
    ok.

%% Kill those of `Pids' that are still here and have not passed the gate,
%% having closed it on them first; returns them. Killed: blocked in a
%% receive of their transport's, they see no message, and a `shutdown'
%% might be trapped by a transport of the user's. The socket closes with
%% the process (ssl's connection process ends when its owner does). One
%% that passed is left to its handler, which the drain reached as it went
%% through (and which closes at the same deadline, by its own timer).
cut_off(_Pids, #st{gate = none}) ->
    [];
cut_off(Pids, #st{gate = Gate, children = Children}) ->
    Cut = [Pid || Pid <- Pids, is_map_key(Pid, Children), ets:insert_new(Gate, {Pid, cut})],
    _ = [exit(Pid, kill) || Pid <- Cut],
    Cut.

was_cut(_Pid, #st{gate = none}) ->
    false;
was_cut(Pid, #st{gate = Gate, children = Children}) ->
    is_map_key(Pid, Children) andalso ets:lookup(Gate, Pid) =:= [{Pid, cut}].

wait_cut(Pid, St) ->
    receive
        {'EXIT', Pid, Reason} -> handle({'EXIT', Pid, Reason}, St)
    end.

%% A connection that said the drain's deadline closed it (at_deadline/1)
%% is gone: counted among those open at the deadline.
closed_at_deadline(Pid, St = #st{at_deadline = AtDeadline, closed_at_deadline = N})
  when is_map_key(Pid, AtDeadline) ->
    St#st{at_deadline = maps:remove(Pid, AtDeadline), closed_at_deadline = N + 1};
closed_at_deadline(_Pid, St) ->
    St.

%% A connection process is gone (closed, or parked: its socket is woken
%% for the drain then, park/5): the drain needs it no more. Kept, the
%% drain's map held every connection it was sent to, about 1 MB for
%% 10,000, until the next drain, after a resume too.
undrained(Pid, St = #st{drain = {Deadline, Drained}}) when is_map_key(Pid, Drained) ->
    St#st{drain = {Deadline, maps:remove(Pid, Drained)}};
undrained(_Pid, St) ->
    St.

%% Work for when no message is waiting: the rest of a tick, then a
%% garbage collection.
between_messages(#st{sweeping = {_, _}}) -> 0;
between_messages(#st{gc_due = true}) -> 0;
between_messages(_) -> infinity.

idle_work(St = #st{sweeping = {_, _}}) ->
    slice(St#st{handled = 0});
idle_work(St) ->
    %% A tick rewrites the entries of the connections that did something,
    %% leaving the old ones as garbage; collecting once things are quiet
    %% keeps this heap near its live size instead of several copies of the
    %% map, which would cost more per connection than a hibernated
    %% connection holds itself.
    true = erlang:garbage_collect(),
    St#st{gc_due = false}.

slice(St = #st{sweeping = {P, Now}, children = Children0}) ->
    %% Before looking at any entry: which hibernated connections woke.
    Children = sluice_sweep:take_woken(St#st.woke, now_ms(), Children0),
    case sluice_sweep:continue(P, Children, Now, St#st.sweep) of
        {more, P2, Children2, Changed} ->
            St#st{sweeping = {P2, Now}, children = Children2,
                  gc_due = St#st.gc_due orelse Changed};
        {done, Children2, Changed} ->
            St2 = lists:foldl(fun(Sock, Acc) -> unpark(Sock, idle_timeout, Acc) end,
                              St#st{children = Children2, sweeping = none},
                              expired(Now, St)),
            ok = schedule_sweep(St#st.tick),
            St2#st{gc_due = St#st.gc_due orelse Changed}
    end.

%% A connection has handed its socket over (sluice_conn's park/1) and is
%% exiting: it stays counted, and its socket is armed to tell this process
%% of its next event. One that the sweep has meanwhile timed out, or that
%% a drain was sent to, is woken for that at once.
park(Pid, Sock, HState, TS, St = #st{children = Children, listener = #{transport := T}}) ->
    case maps:take(Pid, Children) of
        {Entry, Rest} ->
            ok = sluice_parking:put(St#st.parked, Sock, sluice_sweep:idle_since(Entry), HState, TS),
            true = unlink(Sock),
            ok = sluice_stats:parked(St#st.stats, St#st.index, 1),
            St2 = St#st{children = Rest, uncounted = moved(Pid, Sock, St#st.uncounted)},
            case {T:park(TS), sluice_sweep:closing(Entry), St#st.drain} of
                {{error, Reason}, _, _} -> unpark(Sock, {error, Reason}, St2);
                {ok, true, _} -> unpark(Sock, idle_timeout, St2);
                {ok, _, {Deadline, #{Pid := _}}} -> unpark(Sock, {sluice_drain, Deadline}, St2);
                {ok, _, _} -> St2
            end;
        error ->
            %% Not ours (cannot happen: only our children are told to park).
            T:close_socket(Sock),
            St
    end.

%% A parked connection's event: a new connection process takes over the
%% socket and the states, and is handed the event.
unpark(Sock, Event, St = #st{children = Children, listener = L, parked = Tab}) ->
    case sluice_parking:take(Tab, Sock) of
        {ok, IdleSince, HState, TS} ->
            #{transport := T} = L,
            ok = sluice_stats:parked(St#st.stats, St#st.index, -1),
            Pid = proc_lib:spawn_opt(sluice_conn, unpark,
                                     [self(), Sock, HState, TS, St#st.template], [link]),
            Event2 = case handover(T, Sock, Pid, Event) of
                         ok -> Event;
                         {error, Reason} -> T:close_socket(Sock), {error, Reason}
                     end,
            Pid ! {sluice_go, Sock, Event2},
            ok = passed(Pid, St),
            Uncounted = moved(Sock, Pid, St#st.uncounted),
            Now = now_ms(),
            Entry = case Event of
                        {data, _} ->
                            sluice_sweep:new_entry(Sock, Now, Now);
                        _ ->
                            %% Woken for a drain (the other events end
                            %% it): still idle since it last received a
                            %% byte, and the sweep must not take the bytes
                            %% it received before it parked for new ones.
                            sluice_sweep:new_entry(Sock, Now, IdleSince,
                                                   T:bytes_received(Sock))
                    end,
            St#st{children = Children#{Pid => Entry}, uncounted = Uncounted};
        error ->
            St
    end.

%% An uncounted connection parks (its socket is its key here) or wakes (its
%% new process is).
moved(From, To, Uncounted) ->
    case maps:take(From, Uncounted) of
        {true, Rest} -> Rest#{To => true};
        error -> Uncounted
    end.

%% A connection (its pid, or a parked one's socket) is gone: if it was
%% uncounted, taken off the uncounted ones first, before gone/1 takes it
%% off the live ones (sluice_stats:admit/1 says why).
recounted(Key, St = #st{uncounted = Uncounted}) ->
    case maps:take(Key, Uncounted) of
        {true, Rest} ->
            ok = sluice_stats:uncounted_gone(St#st.stats, St#st.index),
            St#st{uncounted = Rest};
        error ->
            St
    end.

%% A parked socket is in `once' mode. After its one message (data, closed,
%% error) it is passive and nothing of it can be in this mailbox: a plain
%% change of owner will do (T:handover/2; controlling_process/2 would cost
%% more port calls and a scan of this whole mailbox, and this process wakes
%% every parked connection of its share of the listener). On a drain or an
%% idle timeout the socket is still armed, and data that comes meanwhile
%% must go to the new owner: controlling_process/2 moves it.
handover(T, Sock, Pid, Event) when Event =:= closed; element(1, Event) =:= data;
                                   element(1, Event) =:= error ->
    T:handover(Sock, Pid);
handover(T, Sock, Pid, _Event) ->
    T:controlling_process(Sock, Pid).

%% Parked connections that have received nothing for the idle timeout.
expired(_Now, #st{sweep = #{idle := infinity}}) ->
    [];
expired(Now, #st{sweep = #{idle := Idle}, parked = Tab}) ->
    sluice_parking:expired(Tab, Now - Idle).

%% A connection is gone, its close reason counted (by itself, or here by
%% ended/4) and marked: it leaves the slot with its mark.
gone(#st{stats = Stats, index = I}) ->
    sluice_stats:sup_gone(Stats, I).

%% @doc For tests: connection supervisor `Sup' kills itself at `Point' of
%% its next count of a connection's end (sluice_stats:die_at/2), as a
%% kill landing there would. A system message: nothing is added to what
%% it does for each connection.
-spec die_at(pid(), sluice_stats:die_point()) -> ok.
die_at(Sup, Point) ->
    _ = sys:replace_state(Sup, fun(St = #st{stats = Stats}) ->
                                       St#st{stats = sluice_stats:die_at(Stats, Point)}
                               end),
    ok.

%% Whether a connection that exited with Reason counted its own close
%% reason: one that ended normally did (sluice_conn_close:counted_end/3),
%% but for one a drain cut before its handler, which exits normally
%% uncounted, and one that parked as it was shut down (unparked/3).
own_reason(cut, _Reason) -> false;
own_reason(_Gated, Reason) -> Reason =:= normal.

call(which_children, St = #st{children = Children}) ->
    Modules = modules(St),
    [{sluice_conn, Pid, worker, Modules} || Pid <- maps:keys(Children)];
call(count_children, #st{children = Children}) ->
    %% Parked connections have no process: not counted here (the
    %% listener's live connections are, see sluice:info/1).
    N = map_size(Children),
    [{specs, 1}, {active, N}, {supervisors, 0}, {workers, N}];
call({get_childspec, Pid}, St = #st{children = Children}) when is_map_key(Pid, Children) ->
    {ok, child_spec(St)};
call({get_childspec, _}, _St) ->
    {error, not_found};
%% As a simple_one_for_one supervisor answers: a child is terminated by
%% its pid (handled in handle/2), there is nothing to restart or delete.
call({terminate_child, Pid}, _St) when is_pid(Pid) ->
    {error, not_found};
call({Req, _}, _St) when Req =:= terminate_child; Req =:= restart_child;
                         Req =:= delete_child ->
    {error, simple_one_for_one};
call(_, _) ->
    {error, not_supported}.

%% What every connection is, as supervisor:get_childspec/2 gives a
%% simple_one_for_one supervisor's children: temporary (never restarted),
%% shut down with the listener's shutdown_timeout.
child_spec(St = #st{listener = #{opts := #{shutdown_timeout := Timeout}}}) ->
    #{id => sluice_conn, start => {sluice_conn, init, []}, restart => temporary,
      significant => false, shutdown => Timeout, type => worker, modules => modules(St)}.

%% A connection runs sluice_conn's code and the handler's: release_handler
%% suspends, and sys:change_code/4s, the processes whose modules name what
%% a release upgrades, so that an appup's `{update, Handler, {advanced,
%% Extra}}' reaches the handler's code_change/3 in every connection (as
%% ranch's list the protocol module).
modules(#st{listener = #{opts := #{handler := {H, _}}}}) ->
    [sluice_conn, H].

%% supervisor:terminate_child(Sup, Pid) of a connection: as a supervisor
%% does it, a `shutdown' exit and the listener's shutdown_timeout, then
%% `kill'. Counted closed, and (unless the connection ended normally and
%% counted its own reason, as a handler that traps exits does) with the
%% reason a shutdown counts as, `drained': close_reasons still add up to
%% closed, the listener carrying on.
terminate_child(Pid, St = #st{listener = #{opts := #{shutdown_timeout := Timeout}}}) ->
    exit(Pid, shutdown),
    Reason = receive
                 {'EXIT', Pid, R} -> unparked(Pid, R, St)
             after Timeout ->
                     exit(Pid, kill),
                     receive {'EXIT', Pid, R} -> unparked(Pid, R, St) end
             end,
    Gated = gated(Pid, St),
    St2 = recounted(Pid, St),
    shut_down(Gated, Reason, St2),
    St2#st{children = maps:remove(Pid, St#st.children)}.

%% A connection this supervisor shut down is gone: counted closed and,
%% unless it ended normally having counted its own reason (as a handler
%% that traps exits does), as a shutdown counts, `drained'.
shut_down(Gated, Reason, St) ->
    ended(Gated, Reason, {shutdown, Reason}, St),
    gone(St).

%% How a connection shut down (terminate_child/2, terminate/2) ended: one
%% that had parked just before (it exited normally, its park message,
%% which came before its exit, is still in the mailbox behind what this
%% process is doing) is a parked one, closed here and counted as a
%% shutdown, as those already parked are. Its normal exit, taken for a
%% connection that had counted its own reason, left it with no reason
%% and took a mark off that it had never made.
unparked(Pid, normal, #st{listener = #{transport := T}}) ->
    receive
        {sluice_park, Pid, Sock, _HState, _TS} ->
            T:close_socket(Sock),
            shutdown
    after 0 ->
            normal
    end;
unparked(_Pid, Reason, _St) ->
    Reason.

%% Shut every connection down (`shutdown' exit), give them the listener's
%% shutdown timeout, kill the rest, and account for each as
%% terminate_child/2 does: a listener that carries on after this
%% supervisor (its own supervisor gave up and was restarted, sys:terminate/2)
%% still has close_reasons that add up to closed. Parked connections are
%% closed here, like a connection that is shut down.
-spec terminate(term(), #st{}) -> no_return().
terminate(Reason, St = #st{children = Children, listener = L, parked = Tab}) ->
    _ = [exit(Pid, shutdown) || Pid <- maps:keys(Children)],
    #{transport := T, opts := #{shutdown_timeout := Timeout}} = L,
    _ = [begin T:close_socket(Sock), shut_down(none, shutdown, recounted(Sock, St)) end
         || Sock <- sluice_parking:sockets(Tab)],
    ok = sluice_stats:parked_reset(St#st.stats, St#st.index),
    TRef = case Timeout of
               infinity -> undefined;
               _ -> erlang:start_timer(Timeout, self(), kill_all)
           end,
    wait_children(Children, TRef, St),
    exit(Reason).

wait_children(Children, _TRef, _St) when map_size(Children) =:= 0 ->
    ok;
wait_children(Children, TRef, St) ->
    receive
        {'EXIT', Pid, Why} when is_map_key(Pid, Children) ->
            Gated = gated(Pid, St),
            St2 = recounted(Pid, St),
            shut_down(Gated, unparked(Pid, Why, St), St2),
            wait_children(maps:remove(Pid, Children), TRef, St2);
        {timeout, TRef, kill_all} ->
            _ = [exit(Pid, kill) || Pid <- maps:keys(Children)],
            wait_children(Children, undefined, St)
    end.

-spec system_continue(pid(), [sys:dbg_opt()], #st{}) -> no_return().
system_continue(_Parent, Debug, St) ->
    loop(St#st{debug = Debug}).

-spec system_terminate(term(), pid(), [sys:dbg_opt()], #st{}) -> no_return().
system_terminate(Reason, _Parent, _Debug, St) ->
    terminate(Reason, St).

%% The handler's upgrade (release_handler finds this process too by the
%% handler among its modules, sluice_conns_sup_sup): the parked
%% connections' states, which have no process for sys to reach, through
%% the handler's code_change/3, all or none (an error is sys's answer, as
%% a connection's is, and nothing is changed). Whether the listener parks
%% was read at its start and is not read again: a connection whose handler
%% has gained handle_info/2 or handle_call/3 declines to park
%% (sluice_conn:park/1).
-spec system_code_change(#st{}, module(), term(), term()) -> {ok, #st{}} | term().
system_code_change(St = #st{listener = #{opts := #{handler := {H, _}}}, parked = Tab}, H,
                   OldVsn, Extra) ->
    Change = fun(Parked) -> sluice_conn:code_change_parked(Parked, H, OldVsn, Extra) end,
    case changed_parking(Change) of
        {ok, Parking} ->
            case sluice_parking:change_states(Tab, Change) of
                ok -> {ok, lists:foldl(fun park_changed/2, St, Parking)};
                Error -> Error
            end;
        Error ->
            Error
    end;
system_code_change(St, _Module, _OldVsn, _Extra) ->
    {ok, St}.

%% A connection that parked while this process was suspended (the sweep's
%% nudge was on its way when the upgrade began) has its state in the
%% mailbox, not in the table: taken in after the code change, it kept
%% the old version's state, and the connection crashed in the new code
%% when it woke. Those states are changed with the table's, all or none:
%% peeked at here, taken out (park_changed/2) only once every one has
%% been changed. The mailbox is read only at a code change.
changed_parking(Change) ->
    %% As sluice_conn's queued/0: a receive takes in what has arrived.
    receive '$sluice_conns_sup_nothing' -> ok after 0 -> ok end,
    {messages, Msgs} = erlang:process_info(self(), messages),
    change_parking([M || M = {sluice_park, _, _, _, _} <- Msgs], Change, []).

change_parking([], _Change, Acc) ->
    {ok, lists:reverse(Acc)};
change_parking([{sluice_park, Pid, Sock, Parked, TS} | Rest], Change, Acc) ->
    case Change(Parked) of
        {ok, Parked2} -> change_parking(Rest, Change, [{Pid, Sock, Parked2, TS} | Acc]);
        Error -> Error
    end.

park_changed({Pid, Sock, Parked, TS}, St) ->
    receive
        {sluice_park, Pid, Sock, _Old, _TS} -> park(Pid, Sock, Parked, TS, St)
    end.

%% sys:get_status/1 as a supervisor answers it (a gen_server's status with
%% the supervisor's own part): supervisor:get_callback_module/1, which
%% reads `{supervisor, [{"Callback", Module}]}' from it, and observer's
%% state page work on a connection supervisor too.
-spec format_status(normal | terminate, list()) -> list().
format_status(_Opt, [_PDict, SysState, Parent, Debug, St]) ->
    [{header, "Status for sluice connection supervisor " ++
          pid_to_list(self())},
     {data, [{"Status", SysState}, {"Parent", Parent},
             {"Logged events", sys:get_log(Debug)}]},
     {data, [{"State", St}]},
     {supervisor, [{"Callback", ?MODULE}]}].
