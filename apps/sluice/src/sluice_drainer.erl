%% @doc The process of sluice:drain_child_spec/2: a child of the user's
%% supervisor, after the listeners it names, that drains them when it is
%% stopped. Children stop in reverse order, so at a release's stop (or
%% any stop of that supervisor) it stops first and the listeners, still
%% accepting until then, are drained before their supervisor shuts them
%% down. The drain runs here and not in the listener's own supervisor:
%% drain/2 suspends a listener by stopping children of that supervisor,
%% which answers no call while it shuts down.
%% @private
-module(sluice_drainer).
-behaviour(gen_server).

-export([start_link/2, init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).
%% the report_cb of the drain's log line
-export([format_left/1]).

-include_lib("kernel/include/logger.hrl").

-spec start_link([sluice:name()], sluice:drain_time()) -> {ok, pid()}.
start_link(Listeners, DrainTime) ->
    gen_server:start_link(?MODULE, {Listeners, DrainTime}, [{hibernate_after, 0}]).

-spec init({[sluice:name()], sluice:drain_time()}) ->
          {ok, {[sluice:name()], sluice:drain_time()}}.
init(State) ->
    %% Its supervisor's shutdown is an exit signal: trapped, it reaches
    %% terminate/2, where the drain is.
    process_flag(trap_exit, true),
    {ok, State}.

-spec handle_call(term(), gen_server:from(), State) -> {reply, {error, badarg}, State}.
handle_call(_Request, _From, State) ->
    {reply, {error, badarg}, State}.

-spec handle_cast(term(), State) -> {noreply, State}.
handle_cast(_Msg, State) ->
    {noreply, State}.

-spec handle_info(term(), State) -> {noreply, State}.
handle_info(_Msg, State) ->
    {noreply, State}.

%% All the listeners at once, so that the stop takes one drain's time and
%% not their sum. A listener gone already (stopped, or being restarted
%% with its supervisor) has nothing to drain.
-spec terminate(term(), {[sluice:name()], sluice:drain_time()}) -> ok.
terminate(_Reason, {Listeners, DrainTime}) ->
    Self = self(),
    Drains = [spawn_monitor(fun() -> Self ! {drained, self(), drain(L, DrainTime)} end)
              || L <- Listeners],
    Left = [receive
                {drained, Pid, R} -> erlang:demonitor(MRef, [flush]), {L, R};
                {'DOWN', MRef, process, Pid, Why} -> {L, Why}
            end || {L, {Pid, MRef}} <- lists:zip(Listeners, Drains)],
    _ = [?LOG_NOTICE(#{what => drained_at_stop, listener => L, left => N},
                     %% no logger domain: OTP's default handler drops
                     %% `[sluice]''s, and a release's log must show this
                     #{report_cb => fun ?MODULE:format_left/1})
         || {L, {ok, N}} <- Left, N > 0],
    ok.

%% @doc terminate/2's report as text. An exported fun, not an anonymous
%% one: the anonymous fun of a module whose code has since been replaced
%% and purged cannot run (a handler that formats the event later got
%% badfun for the line), and is opaque to a handler on another node.
-spec format_left(#{listener := sluice:name(), left := pos_integer(), _ => _}) ->
          {io:format(), [term()]}.
format_left(#{listener := Name, left := Open}) ->
    {"sluice listener ~0tp: ~b connection~s still open at the drain's deadline, closed",
     [Name, Open, plural(Open)]}.

plural(1) -> "";
plural(_) -> "s".

drain(Listener, DrainTime) ->
    try sluice:drain(Listener, DrainTime)
    catch exit:_ -> {error, not_found}
    end.
