%% @doc A listener's `alarms' (ranch 2's option): call a fun when the
%% listener's live connections (sluice:info/1's `connections') reach a
%% threshold, at most once per cooldown. The option's check and one
%% process per listener, the last child of its supervisor.
%%
%% The count is watched where it changes, at no cost to reads: an acceptor
%% admits a connection with an increment of the live count
%% (sluice_stats:admit/1), which compares the result with one atomic, the
%% lowest threshold of the alarms that are armed. Reached, the acceptor
%% that admitted it takes the alarms off (one compare-and-swap, so that
%% one acceptor tells, not every one after it) and tells this process,
%% which fires what is due, starts their cooldowns and arms the atomic
%% again with the lowest threshold left.
%%
%% A callback runs in a process of its own, never in an acceptor, a
%% connection supervisor or this process: one that raises is logged, one
%% that blocks holds nothing but itself. While an alarm's callback still
%% runs, the alarm does not start another (skipped, logged once): a
%% blocked callback costs one process, not one per cooldown.
%%
%% At the end of a cooldown the alarm fires again if the count is still at
%% or above its threshold (as ranch's does), otherwise at the next
%% connection that reaches it.
%% @private
-module(sluice_alarms).
-behaviour(gen_server).

-export([check/1, format_error/1]).
-export([start_link/1, reached/2, set/2]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-export_type([alarms/0]).

-include_lib("kernel/include/logger.hrl").

-type alarm() :: #{type := num_connections,
                   threshold := pos_integer(),
                   callback := fun((sluice:name(), term(), pid(), [pid()]) -> term()),
                   cooldown => non_neg_integer()}.
-type alarms() :: #{term() => alarm()}.

%% ranch's default cooldown (ms).
-define(DEFAULT_COOLDOWN, 5000).
%% A cooldown is a timer: at most 2^32 - 1 ms, as the listener's other
%% times (sluice_opts).
-define(MAX_COOLDOWN, 16#ffffffff).
%% A threshold is compared in a signed 64-bit atomic (sluice_stats), whose
%% largest value stands for "none armed".
-define(MAX_THRESHOLD, ((1 bsl 63) - 2)).
-define(KEYS, [type, threshold, callback, cooldown]).

%%% The option ---------------------------------------------------------

%% @doc The `alarms' option's check: `ok', or why the first bad alarm (in
%% name order) is bad, for `{bad_option, alarms, Why}'.
-spec check(term()) -> ok | {error, term()}.
check(Alarms) when is_map(Alarms) ->
    check_each(lists:sort(maps:to_list(Alarms)));
check(Alarms) ->
    {error, {not_a_map, Alarms}}.

check_each([]) ->
    ok;
check_each([{Name, Alarm} | Rest]) ->
    case check_alarm(Alarm) of
        ok -> check_each(Rest);
        {error, Why} -> {error, {Name, Why}}
    end.

check_alarm(Alarm) when is_map(Alarm) ->
    Missing = [K || K <- [type, threshold, callback], not is_map_key(K, Alarm)],
    Unknown = lists:sort(maps:keys(Alarm)) -- ?KEYS,
    case {Unknown, Missing} of
        {[K | _], _} -> {error, {unknown_key, K}};
        {[], [K | _]} -> {error, {missing_key, K}};
        {[], []} -> check_values(lists:sort(maps:to_list(Alarm)))
    end;
check_alarm(Alarm) ->
    {error, {not_a_map, Alarm}}.

check_values([]) ->
    ok;
check_values([{K, V} | Rest]) ->
    case good(K, V) of
        true -> check_values(Rest);
        false -> {error, {bad_value, K, V}}
    end.

good(type, T) -> T =:= num_connections;
good(threshold, N) -> is_integer(N) andalso N >= 1 andalso N =< ?MAX_THRESHOLD;
good(callback, F) -> is_function(F, 4);
good(cooldown, Ms) -> is_integer(Ms) andalso Ms >= 0 andalso Ms =< ?MAX_COOLDOWN.

%% @doc The words for check/1's refusal (sluice:format_error/1 of
%% `{bad_option, alarms, Why}'), its values in the syntax of the
%% language running (sluice_syntax).
-spec format_error(term()) -> string().
format_error({not_a_map, V}) ->
    sluice_syntax:format("bad value for option alarms: ~0p (expected a map of alarm "
                         "name => #{type => num_connections, threshold => N, "
                         "callback => Fun, cooldown => Ms})", [V]);
format_error({Name, {not_a_map, V}}) ->
    sluice_syntax:format("bad value for option alarms: alarm ~0p is ~0p (expected a map "
                         "with type, threshold, callback and optionally cooldown)",
                         [Name, V]);
format_error({Name, {unknown_key, treshold}}) ->
    sluice_syntax:format("bad value for option alarms: alarm ~0p has unknown key "
                         "treshold (ranch's old spelling: here threshold)", [Name]);
format_error({Name, {unknown_key, K}}) ->
    sluice_syntax:format("bad value for option alarms: alarm ~0p has unknown key ~0p "
                         "(expected type, threshold, callback, cooldown)", [Name, K]);
format_error({Name, {missing_key, K}}) ->
    sluice_syntax:format("bad value for option alarms: alarm ~0p has no ~w (expected ~s)",
                         [Name, K, expected(K)]);
format_error({Name, {bad_value, K, V}}) ->
    sluice_syntax:format("bad value for option alarms: alarm ~0p's ~w is ~0p (expected ~s)",
                         [Name, K, V, expected(K)]);
format_error(Why) ->
    sluice_syntax:format("bad value for option alarms: ~0p", [Why]).

expected(type) -> "num_connections, the one type";
expected(threshold) -> "an integer 1.." ++ integer_to_list(?MAX_THRESHOLD) ++
                           " (the live connections that fire it)";
expected(callback) -> "a fun of 4 arguments: listener name, alarm name, the listener's "
                          "supervisor, the connections' pids";
expected(cooldown) -> "an integer 0.." ++ integer_to_list(?MAX_COOLDOWN) ++
                          " (ms between two firings; default 5000)".

%%% The process --------------------------------------------------------

-spec start_link(sluice_listener_sup:listener()) -> {ok, pid()} | ignore | {error, term()}.
start_link(Listener) ->
    gen_server:start_link(?MODULE, {self(), Listener}, []).

%% @doc Called by the acceptor that admission told `alarm'.
-spec reached(sluice:name(), sluice_stats:stats()) -> ok.
reached(Name, Stats) ->
    case sluice_stats:disarm_alarms(Stats) of
        true ->
            case sluice_registry:lookup(Name) of
                {ok, #{alarms := Pid}} -> Pid ! reached, ok;
                %% Not started yet, or restarting: it arms at its start.
                _ -> ok
            end;
        false ->
            ok
    end.

%% @doc New alarms (sluice:set_transport_opts/2), already checked. An
%% alarm kept under the same name keeps its cooldown in progress.
-spec set(sluice:name(), alarms()) -> ok.
set(Name, Alarms) ->
    case sluice_registry:lookup(Name) of
        {ok, #{alarms := Pid}} ->
            try gen_server:call(Pid, {set, Alarms}, infinity)
            catch exit:_ -> ok   % restarting: it reads the registry's
            end;
        _ ->
            ok
    end.

-record(alarm, {threshold :: pos_integer(),
                callback :: fun(),
                cooldown :: non_neg_integer(),
                cooling = none :: none | reference(),
                %% the callback still running, and whether a firing
                %% skipped for it was logged
                running = none :: none | {pid(), reference(), boolean()}}).

-record(st, {name :: sluice:name(),
             sup :: pid(),
             stats :: sluice_stats:stats(),
             alarms = #{} :: #{term() => #alarm{}}}).

-spec init({pid(), sluice_listener_sup:listener()}) -> {ok, #st{}}.
init({Sup, #{name := Name, stats := Stats, opts := Opts}}) ->
    ok = sluice_registry:set(Name, alarms, self()),
    %% The registry's options are the last set_transport_opts/2's, which
    %% a restart keeps.
    Alarms = case sluice_registry:lookup(Name) of
                 {ok, #{opts := #{alarms := Now}}} -> Now;
                 _ -> maps:get(alarms, Opts, #{})
             end,
    St = #st{name = Name, sup = Sup, stats = Stats, alarms = records(Alarms, #{})},
    {ok, check_now(St)}.

-spec handle_call(term(), gen_server:from(), #st{}) -> {reply, term(), #st{}}.
handle_call({set, Alarms}, _From, St = #st{alarms = Old}) ->
    _ = [cancel(A) || {N, A} <- maps:to_list(Old), not is_map_key(N, Alarms)],
    {reply, ok, check_now(St#st{alarms = records(Alarms, Old)})};
handle_call(_Req, _From, St) ->
    {reply, {error, unknown_call}, St}.

-spec handle_cast(term(), #st{}) -> {noreply, #st{}}.
handle_cast(_Msg, St) ->
    {noreply, St}.

-spec handle_info(term(), #st{}) -> {noreply, #st{}}.
handle_info(reached, St) ->
    {noreply, check_now(St)};
handle_info({timeout, Ref, {cooled, N}}, St = #st{alarms = Alarms}) ->
    case Alarms of
        #{N := A = #alarm{cooling = Ref}} ->
            {noreply, check_now(St#st{alarms = Alarms#{N := A#alarm{cooling = none}}})};
        _ ->
            {noreply, St}
    end;
handle_info({'DOWN', MRef, process, _, _}, St = #st{alarms = Alarms}) ->
    Done = maps:map(fun(_, A = #alarm{running = {_, R, _}}) when R =:= MRef ->
                            A#alarm{running = none};
                       (_, A) ->
                            A
                    end, Alarms),
    {noreply, St#st{alarms = Done}};
handle_info(_Msg, St) ->
    {noreply, St}.

%% Given alarms as records, each keeping what an alarm of the same name
%% had in progress (its cooldown, its running callback).
records(Alarms, Old) ->
    maps:map(fun(N, Opts = #{threshold := T, callback := F}) ->
                     C = maps:get(cooldown, Opts, ?DEFAULT_COOLDOWN),
                     case Old of
                         #{N := A} -> A#alarm{threshold = T, callback = F, cooldown = C};
                         _ -> #alarm{threshold = T, callback = F, cooldown = C}
                     end
             end, Alarms).

cancel(#alarm{cooling = none}) -> ok;
cancel(#alarm{cooling = Ref}) -> _ = erlang:cancel_timer(Ref), ok.

%% Fire what is due at the count now, then arm the lowest threshold of
%% those not cooling down; the count is read again after arming, for a
%% connection admitted while nothing was armed. Each alarm fires at most
%% once here: one of cooldown 0, armed again at once, fires next for the
%% next connection admitted, not for this loop's next read.
check_now(St) ->
    check_now(St, []).

check_now(St = #st{stats = Stats, alarms = Alarms}, Fired) ->
    Live = sluice_stats:live(Stats),
    Due = lists:sort([N || {N, #alarm{threshold = T, cooling = none}} <- maps:to_list(Alarms),
                           T =< Live, not lists:member(N, Fired)]),
    St2 = lists:foldl(fun(N, S) -> fire(N, Live, S) end, St, Due),
    ok = sluice_stats:arm_alarms(Stats, armed(St2#st.alarms)),
    case Due of
        [] ->
            %% A connection admitted between the count's read and the
            %% arming was compared with no threshold (the alarms were
            %% off): read again, and look again if the count moved.
            case sluice_stats:live(Stats) of
                Live -> St2;
                _ -> check_now(St2, Fired)
            end;
        _ ->
            check_now(St2, Fired ++ Due)
    end.

%% The lowest threshold of the alarms not cooling down (those of cooldown
%% 0 included: they fire again at the next connection admitted at or
%% above it).
armed(Alarms) ->
    lists:min([infinity | [T || #alarm{threshold = T, cooling = none} <- maps:values(Alarms)]]).

fire(N, Live, St = #st{name = Name, sup = Sup, alarms = Alarms}) ->
    A = maps:get(N, Alarms),
    Running = case A#alarm.running of
                  none ->
                      F = A#alarm.callback,
                      {Pid, MRef} = spawn_monitor(fun() -> run(Name, N, Sup, F) end),
                      {Pid, MRef, false};
                  {Pid, MRef, false} ->
                      ?LOG_WARNING("sluice listener ~0p: alarm ~0p reached (~b connections) "
                                   "while its callback ~0p still runs from the last time: "
                                   "not called again until it returns", [Name, N, Live, Pid]),
                      {Pid, MRef, true};
                  Logged ->
                      Logged
              end,
    Cooling = case A#alarm.cooldown of
                  0 -> none;
                  Ms -> erlang:start_timer(Ms, self(), {cooled, N})
              end,
    St#st{alarms = Alarms#{N := A#alarm{running = Running, cooling = Cooling}}}.

%% The callback's process: the pids as ranch gives them, the connections
%% whose processes are up now (the one that reached the threshold is among
%% them: its acceptor handed it over before it told).
run(Name, N, Sup, F) ->
    Pids = sluice:connections(Name),
    try F(Name, N, Sup, Pids)
    catch Class:Why:Stack ->
            ?LOG_ERROR("sluice listener ~0p: alarm ~0p's callback failed: ~0p:~0p ~0p",
                       [Name, N, Class, Why, Stack])
    end.
