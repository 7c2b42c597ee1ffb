%% @doc The historical baseline of seed 001, as the benchmark runs it: a
%% passive handler that reads the 12-byte header with `gen_tcp:recv(S, 12)',
%% then the payload with `recv(S, Len)', and sends the 8-byte id back (ack
%% each). One process per connection, ranch 1.x's default socket options.
%% Deliberately not built on sluice: it is what sluice is measured against.
%%
%% Started by the benchmark in a VM of its own:
%% `erl -noshell -pa EBIN -run sluice_bench_seed_server main PORT'; prints
%% `listening on IP:PORT'; SIGTERM stops the VM (OTP's default handler).
-module(sluice_bench_seed_server).

-export([main/1, start/1]).

-define(TIMEOUT, 5000). % the seed's recv timeout

-spec main([string()]) -> ok.
main([PortStr]) ->
    %% OTP's own SIGTERM handler (init:stop/0) takes a second; nothing here
    %% needs an orderly stop, and the benchmark waits for the exit.
    ok = sluice_signal:install(spawn(fun halt_on_signal/0)),
    {ok, Port} = start(list_to_integer(PortStr)),
    io:format("listening on 127.0.0.1:~b~n", [Port]),
    ok.

-spec halt_on_signal() -> no_return().
halt_on_signal() ->
    receive {sluice_signal, _} -> erlang:halt(0) end.

%% @doc Listen on 127.0.0.1, `Port' (0: any free port), and accept in a
%% process of its own; returns the port listened on. (The seed listened on
%% every interface; a benchmark opens nothing to the network.)
-spec start(inet:port_number()) -> {ok, inet:port_number()}.
start(Port) ->
    Parent = self(),
    Pid = spawn(fun() ->
                        {ok, L} = gen_tcp:listen(Port, [binary, {active, false}, {ip, loopback},
                                                        {packet, raw}, {reuseaddr, true},
                                                        {nodelay, true}, {backlog, 1024}]),
                        {ok, P} = inet:port(L),
                        Parent ! {self(), P},
                        accept(L)
                end),
    receive {Pid, P} -> {ok, P} end.

accept(L) ->
    case gen_tcp:accept(L) of
        {ok, S} ->
            H = spawn(fun() -> receive go -> loop(S) end end),
            ok = gen_tcp:controlling_process(S, H),
            H ! go,
            accept(L);
        {error, _} ->
            accept(L)
    end.

loop(S) ->
    case gen_tcp:recv(S, 12, ?TIMEOUT) of
        {ok, <<Id:8/binary, Len:32>>} ->
            case recv_payload(S, Len) of
                ok ->
                    _ = gen_tcp:send(S, Id),
                    loop(S);
                error ->
                    gen_tcp:close(S)
            end;
        _ ->
            gen_tcp:close(S)
    end.

%% recv(S, 0) would return whatever is there, not an empty payload.
recv_payload(_S, 0) -> ok;
recv_payload(S, Len) ->
    case gen_tcp:recv(S, Len, ?TIMEOUT) of
        {ok, _} -> ok;
        _ -> error
    end.
