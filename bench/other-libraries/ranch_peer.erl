%% Scratch: the ack/ping/echo protocol on ranch 2.2, as a careful ranch
%% user writes it ({active,100} re-armed on tcp_passive, Transport:send).
-module(ranch_peer).
-behaviour(ranch_protocol).
-export([main/1, start_link/3, init/3]).

main([Proto, Ack]) ->
    {ok, _} = application:ensure_all_started(ranch),
    {ok, _} = ranch:start_listener(peer, ranch_tcp,
                                   #{num_acceptors => 10, max_connections => infinity,
                                     socket_opts => [{ip, {127,0,0,1}}, {port, 0}, {backlog, 4096},
                                                     {nodelay, true}, {buffer, 16384}]},
                                   ?MODULE, {list_to_atom(Proto), list_to_atom(Ack)}),
    io:format("listening on 127.0.0.1:~b~n", [ranch:get_port(peer)]),
    receive after infinity -> ok end.

start_link(Ref, Transport, Opts) ->
    {ok, proc_lib:spawn_link(?MODULE, init, [Ref, Transport, Opts])}.

init(Ref, Transport, {Proto, Ack}) ->
    {ok, S} = ranch:handshake(Ref),
    ok = Transport:setopts(S, [{active, 100}]),
    loop(S, Transport, sluice_peer_gen_tcp:init_state(Proto, Ack)).

loop(S, T, St) ->
    receive
        {tcp, S, Data} ->
            case sluice_peer_gen_tcp:handle(Data, St) of
                {close, R} -> _ = T:send(S, R), T:close(S);
                {<<>>, St2} -> loop(S, T, St2);
                {R, St2} -> ok = T:send(S, R), loop(S, T, St2)
            end;
        {tcp_passive, S} -> ok = T:setopts(S, [{active, 100}]), loop(S, T, St);
        {tcp_closed, S} -> ok;
        {tcp_error, S, _} -> ok
    end.
