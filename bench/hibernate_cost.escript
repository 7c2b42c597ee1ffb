#!/usr/bin/env escript
%% -*- erlang -*-
%%! -noshell
%% What hibernating costs a process, apart from any server: N processes
%% holding a state about a connection's size (a 45-element list, an
%% 8-key map, a binary) each get, per round, a message they answer
%% ("wake") and, in the second half, first another message: one they
%% only receive, one that makes them collect (erlang:garbage_collect/0),
%% or one that makes them hibernate (erlang:hibernate/3).
%% Prints the extra time per process per cycle over answering alone, and
%% the memory per process after it. Run it on one core:
%%
%%   taskset -c 0 bench/hibernate_cost.escript [N] [ROUNDS]
%%
%% (bench/README.md, "Hibernation: what a wake costs".)
-mode(compile).

main(Args) ->
    [N, Rounds] = case Args of
                      [] -> [5000, 20];
                      [A] -> [list_to_integer(A), 20];
                      [A, B] -> [list_to_integer(A), list_to_integer(B)]
                  end,
    [variant(Name, Msg, N, Rounds)
     || {Name, Msg} <- [{"a message, nothing done", nothing},
                        {"garbage_collect", collect},
                        {"hibernate", hibernate}]],
    ok.

state() ->
    {lists:seq(1, 45), maps:from_list([{K, K} || K <- lists:seq(1, 8)]), <<"x">>}.

loop(S) ->
    receive
        hibernate -> erlang:hibernate(erlang, apply, [fun loop/1, [S]]);
        collect -> erlang:garbage_collect(), loop(S);
        nothing -> loop(S);
        {wake, From} -> From ! ok, _ = lists:seq(1, 20), loop(S)
    end.

variant(Name, Msg, N, Rounds) ->
    Ps = [spawn(fun() -> loop(state()) end) || _ <- lists:seq(1, N)],
    Wake = fun() -> [P ! {wake, self()} || P <- Ps], [receive ok -> ok end || _ <- Ps] end,
    Wake(),
    {Plain, _} = timer:tc(fun() -> [Wake() || _ <- lists:seq(1, Rounds)] end),
    {With, _} = timer:tc(fun() -> [begin [P ! Msg || P <- Ps], Wake() end
                                   || _ <- lists:seq(1, Rounds)] end),
    [P ! Msg || P <- Ps],
    timer:sleep(200),
    Bytes = lists:sum([element(2, process_info(P, memory)) || P <- Ps]) / N,
    io:format("~-30s ~5.2f us more a cycle; ~6.1f bytes a process after it~n",
              [Name, (With - Plain) / (N * Rounds), Bytes]),
    [exit(P, kill) || P <- Ps].
