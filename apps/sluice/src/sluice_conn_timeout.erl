%% @doc A persistent result timeout: `Timeout = {persistent, Ms}' in a
%% result (thousand_island's `{:continue, state, {:persistent, ms}}').
%% handle_timeout/1 is called once no callback has run for Ms after a
%% result without a Timeout, from the result that sets it until one gives
%% `{persistent, infinity}' (or another `{persistent, Ms}'); a result with
%% a plain Timeout has that one, for itself only.
%%
%% The connection's `timer' holds, while one is set,
%% `{persistent, Ms, Ref, At, Due}': Ref the one Erlang timer running (or
%% `undefined'), At when it fires, and Due when handle_timeout/1 is due
%% (monotonic ms, or `infinity' after a result with `infinity'). A result
%% moves Due and leaves the timer alone unless the new Due is earlier than
%% At; when the timer fires before Due (the handler was busy meanwhile) it
%% is started again for what is left. A handler that keeps its one
%% persistent Timeout pays a clock read a callback, not the cancel and
%% start of a timer (a plain Timeout's cost), and a timer start once a Ms
%% at most. A handler that never sets one pays nothing: its results keep
%% today's path (sluice_conn_handler:timer/2), which comes here only for a
%% tuple.
%%
%% A connection with one set never parks (sluice_conn:park/1, as with any
%% result timeout running): its timer fires in its own process.
%% @private
-module(sluice_conn_timeout).

-include("sluice_conn.hrl").

-export([result/3, fired/1]).

-export_type([persistent/0]).

-type persistent() :: {persistent, non_neg_integer(), reference() | undefined,
                         integer(), integer() | infinity}.

%% @doc The Timeout of a result (`none' for a result without one) on a
%% connection whose handler has a persistent Timeout or sets one now.
%% `Max': the longest Timeout that gets a timer (longer ones never fire).
-spec result(none | sluice_handler:timeout_ms() | {persistent, sluice_handler:timeout_ms()},
             #s{}, pos_integer()) -> #s{}.
result({persistent, Ms}, S, Max) when Ms =:= infinity; Ms > Max ->
    %% Cleared: nothing from this result on.
    cancel(S#s.timer),
    S#s{timer = undefined};
result({persistent, Ms}, S = #s{timer = {persistent, _, Ref, At, _}}, _Max) ->
    S#s{timer = arm({persistent, Ms, Ref, At, clock() + Ms}, S)};
result({persistent, Ms}, S = #s{timer = Old}, _Max) ->
    %% From a plain Timeout, or none: its timer is not this one's.
    cancel(Old),
    S#s{timer = arm({persistent, Ms, undefined, 0, clock() + Ms}, S)};
result(Timeout, S = #s{timer = {persistent, Ms, Ref, At, _}}, Max) ->
    Due = case Timeout of
              none -> clock() + Ms;
              infinity -> infinity;
              _ when Timeout > Max -> infinity;
              _ -> clock() + Timeout
          end,
    S#s{timer = arm({persistent, Ms, Ref, At, Due}, S)}.

%% Keep the timer if it fires by Due (then it is started again for what
%% is left, fired/1); start one if none runs, or if it would fire after a
%% Due moved earlier (a plain Timeout shorter than what the timer has
%% left). After `infinity' the one running is left to fire, and stop.
arm(P = {persistent, _, _, _, infinity}, _S) ->
    P;
arm(P = {persistent, _, Ref, At, Due}, _S) when is_reference(Ref), At =< Due ->
    P;
arm({persistent, Ms, Ref, _At, Due}, S) ->
    cancel(Ref),
    {persistent, Ms, start(Due, S), Due, Due}.

%% @doc The persistent timer fired: `{due, S}' if no callback ran since its
%% Due (handle_timeout/1 is called; a result without a Timeout then sets
%% the next Due), otherwise `{later, S}', with a timer for what is left.
-spec fired(#s{}) -> {due | later, #s{}}.
fired(S = #s{timer = {persistent, Ms, _Ref, _At, Due}}) ->
    case Due of
        infinity -> {later, S#s{timer = {persistent, Ms, undefined, 0, infinity}}};
        _ ->
            case clock() >= Due of
                true -> {due, S#s{timer = {persistent, Ms, undefined, 0, infinity}}};
                false -> {later, S#s{timer = {persistent, Ms, start(Due, S), Due, Due}}}
            end
    end.

%% The message is a plain Timeout's, `{timeout, Ref, TimerTag}': a stale
%% one (cancelled after it fired) is dropped as theirs are
%% (sluice_conn:control/2).
start(At, #s{timer_tag = Tag}) ->
    erlang:start_timer(At, self(), Tag, [{abs, true}]).

cancel(undefined) -> ok;
cancel({persistent, _, Ref, _, _}) -> cancel(Ref);
cancel(Ref) -> _ = erlang:cancel_timer(Ref, [{async, true}, {info, false}]), ok.

clock() ->
    erlang:monotonic_time(millisecond).
