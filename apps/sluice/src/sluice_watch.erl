%% @doc sluice:wait_for_connections/3,4,5 (ranch's wait_for_connections/3,4):
%% poll a listener's live count until it compares as asked, the listener
%% is gone, or the timeout has passed. The count is sluice:info/1's
%% `connections' (one atomic read, sluice_stats:live/1), so polling costs
%% the listener nothing.
%% @private
-module(sluice_watch).

-export([valid/4, wait_for_connections/5]).

-type op() :: '>' | '>=' | '==' | '=<' | '<'.
-export_type([op/0]).

%% A poll's wait and the timeout are receive timeouts: at most 2^32 - 1 ms.
-define(MAX_MS, 16#ffffffff).

%% @doc Whether the arguments are ones wait_for_connections/5 takes (the
%% caller raises badarg otherwise, as ranch does): an Op of the five, a
%% count, a `<' that can be met (ranch refuses `< 0' too), an interval (at
%% least 1 ms) and a timeout in ms.
-spec valid(term(), term(), term(), term()) -> boolean().
valid(Op, N, Interval, Timeout) ->
    lists:member(Op, ['>', '>=', '==', '=<', '<'])
        andalso is_integer(N) andalso N >= 0
        andalso not (Op =:= '<' andalso N =:= 0)
        %% 0 would poll without a pause, copying the listener's row each time
        andalso is_ms(Interval) andalso Interval > 0
        andalso (Timeout =:= infinity orelse is_ms(Timeout)).

is_ms(Ms) ->
    is_integer(Ms) andalso Ms >= 0 andalso Ms =< ?MAX_MS.

%% @doc Arguments already valid/4.
-spec wait_for_connections(sluice:name(), op(), non_neg_integer(), non_neg_integer(),
                           timeout()) -> ok | {error, not_found | timeout}.
wait_for_connections(Name, Op, N, Interval, Timeout) ->
    Deadline = case Timeout of
                   infinity -> infinity;
                   _ -> erlang:monotonic_time(millisecond) + Timeout
               end,
    loop(Name, Op, N, Interval, Deadline).

%% The registry is read on every poll: a listener stopped meanwhile is
%% `not_found' (its figures would stay readable, and stale, for ever).
loop(Name, Op, N, Interval, Deadline) ->
    case sluice_registry:lookup(Name) of
        {ok, #{sup := Sup, stats := Stats}} ->
            case is_process_alive(Sup) of
                true ->
                    case compare(Op, sluice_stats:live(Stats), N) of
                        true -> ok;
                        false -> next(Name, Op, N, Interval, Deadline)
                    end;
                false ->
                    {error, not_found}
            end;
        error ->
            {error, not_found}
    end.

next(Name, Op, N, Interval, infinity) ->
    receive after Interval -> loop(Name, Op, N, Interval, infinity) end;
next(Name, Op, N, Interval, Deadline) ->
    case Deadline - erlang:monotonic_time(millisecond) of
        Left when Left =< 0 ->
            {error, timeout};
        Left ->
            receive after min(Interval, Left) -> loop(Name, Op, N, Interval, Deadline) end
    end.

compare('>', Count, N) -> Count > N;
compare('>=', Count, N) -> Count >= N;
compare('==', Count, N) -> Count =:= N;
compare('=<', Count, N) -> Count =< N;
compare('<', Count, N) -> Count < N.
