#!/usr/bin/env escript
%% -*- erlang -*-
%% bench/halfclose_loss.escript: a client floods an echo
%% (sluice_proto_echo) with a small recbuf (4096), half-closes
%% (shutdown write) and reads the rest. Prints, per size and run, the
%% bytes lost (sent - echoed back), and the listener's close reasons.
%% On OTP 25's inet driver a FIN read while the port is busy (queue above
%% high_watermark) drops the driver's output queue (tcp_recv_closed), and
%% the connection usually sees only tcp_closed (peer_closed): silent loss.
%%
%%   REPRO_PACE=20 bench/halfclose_loss.escript _build/default/lib inet 4 1.0 3.3 5.6
%%   REPRO_PACE=20 bench/halfclose_loss.escript _build/default/lib socket 4 1.0 3.3 5.6
-mode(compile).

main([Root, Backend, Runs | Sizes]) ->
    [code:add_patha(D) || D <- filelib:wildcard(Root ++ "/*/ebin")],
    {ok, _} = application:ensure_all_started(sluice),
    T = list_to_atom(Backend),
    {ok, _} = sluice:start_listener(l, #{ip => {127,0,0,1}, port => 0, transport => T,
                                        handler => {sluice_proto_echo, []}}),
    #{port := Port} = sluice:info(l),
    R = [begin
             Size = round(list_to_float(S) * 1000000),
             Lost = [run(Port, Size) || _ <- lists:seq(1, list_to_integer(Runs))],
             io:format("~s ~8.2f MB lost: ~w~n", [Backend, Size / 1.0e6, Lost]),
             Lost
         end || S <- Sizes],
    All = lists:append(R),
    io:format("~s total: ~w runs, ~w with loss, ~w bytes lost~n",
              [Backend, length(All), length([L || L <- All, L =/= 0]), lists:sum(All)]),
    timer:sleep(200),
    io:format("~s close_reasons: ~p~n", [Backend, maps:get(close_reasons, sluice:info(l))]),
    halt(0).

run(Port, Size) ->
    {ok, S} = gen_tcp:connect({127,0,0,1}, Port, [binary, {active, false}, {recbuf, 4096}, {show_econnreset, true}]),
    Chunk = binary:copy(<<"x">>, 65536),
    Self = self(),
    W = spawn_link(fun() -> send(S, Chunk, Size), ok = gen_tcp:shutdown(S, write), Self ! sent end),
    %% The client reads only once it has sent everything and half-closed
    %% (or after 3 s, if the two sides' buffers cannot hold it all).
    receive sent -> ok after wait() -> ok end,
    Got = recv(S, 0),
    receive sent -> ok after 1000 -> unlink(W), exit(W, kill) end,
    gen_tcp:close(S),
    Size - Got.

send(_S, _Chunk, 0) -> ok;
send(S, Chunk, Left) ->
    N = min(Left, byte_size(Chunk)),
    ok = gen_tcp:send(S, binary:part(Chunk, 0, N)),
    send(S, Chunk, Left - N).

recv(S, N) ->
    case gen_tcp:recv(S, 0, 10000) of
        {ok, D} -> pace(), recv(S, N + byte_size(D));
        {error, closed} -> N;
        {error, E} -> io:format("client recv: ~p after ~p bytes~n", [E, N]), N
    end.

%% REPRO_WAIT: ms the client waits for its writer before reading (0: reads
%% while it sends); REPRO_PACE: us the client sleeps after each read.
wait() -> list_to_integer(os:getenv("REPRO_WAIT", "0")).
pace() ->
    case list_to_integer(os:getenv("REPRO_PACE", "0")) of
        0 -> ok;
        Us -> T = erlang:monotonic_time(microsecond) + Us, spin(T)
    end.
spin(T) -> case erlang:monotonic_time(microsecond) < T of true -> timer:sleep(0), spin(T); false -> ok end.
