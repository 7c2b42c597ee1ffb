%% sluice_socket, the gen_tcp API on OTP's socket NIF: every case runs on
%% gen_tcp (group gen_tcp) and on sluice_socket (group sluice_socket) with
%% the same code, so a case that passes on one and fails on the other is a
%% difference from gen_tcp. The differences kept on purpose have their own
%% case (packet framing).
-module(sluice_socket_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_group/2, end_per_group/2]).
-export([send_and_recv_both_ways/1,
         recv_times_out_then_sees_close/1,
         active_once_delivers_one_chunk/1,
         active_n_counts_down_to_passive/1,
         active_true_delivers_data_then_closed/1,
         controlling_process_moves_delivery_in_order/1,
         list_and_binary_modes/1,
         socket_options_round_trip/1,
         shutdown_write_ends_the_peers_stream_only/1,
         peername_and_sockname_agree/1,
         recv_in_active_mode_is_refused/1,
         only_raw_packets/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 30}}].

all() -> [{group, gen_tcp}, {group, sluice_socket}].

groups() ->
    Cases = [send_and_recv_both_ways, recv_times_out_then_sees_close,
             active_once_delivers_one_chunk, active_n_counts_down_to_passive,
             active_true_delivers_data_then_closed,
             controlling_process_moves_delivery_in_order, list_and_binary_modes,
             socket_options_round_trip, shutdown_write_ends_the_peers_stream_only,
             peername_and_sockname_agree, recv_in_active_mode_is_refused,
             only_raw_packets],
    [{gen_tcp, [], Cases}, {sluice_socket, [], Cases}].

init_per_group(M, Config) ->
    [{m, M} | Config].

end_per_group(_, _Config) ->
    ok.

%% gen_tcp keeps the option and address calls in inet.
call(Config, F, Args) ->
    M = case {?config(m, Config), F} of
            {gen_tcp, _} when F =:= setopts; F =:= getopts; F =:= peername;
                              F =:= sockname -> inet;
            {Mod, _} -> Mod
        end,
    apply(M, F, Args).

%% A connected pair {Client, Server}, both of the module under test, with
%% the given options on both.
pair(Config, Opts) ->
    M = ?config(m, Config),
    {ok, L} = M:listen(0, [{ip, ?LOOPBACK}, {reuseaddr, true} | Opts]),
    {ok, {_, Port}} = call(Config, sockname, [L]),
    {ok, C} = M:connect(?LOOPBACK, Port, Opts, 5000),
    {ok, S} = M:accept(L, 5000),
    ok = M:close(L),
    {C, S}.

recv_n(Config, S, N) ->
    recv_n(Config, S, N, []).

recv_n(_Config, _S, 0, Acc) -> iolist_to_binary(lists:reverse(Acc));
recv_n(Config, S, N, Acc) ->
    M = ?config(m, Config),
    {ok, D} = M:recv(S, 0, 5000),
    recv_n(Config, S, N - iolist_size(D), [D | Acc]).

no_message(S) ->
    receive
        {tcp, S, _} = Msg -> error({unexpected, Msg});
        {tcp_passive, S} = Msg -> error({unexpected, Msg})
    after 100 -> ok
    end.

%%% ------------------------------------------------------------------

%% 1 MB each way, recv(S, N) returns exactly N bytes, recv(S, 0) what is
%% there; the bytes arrive whole and in order.
send_and_recv_both_ways(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    Data = rand:bytes(1000000),
    Self = self(),
    spawn_link(fun() -> ok = M:send(C, Data), Self ! sent end),
    ?assertEqual(Data, recv_n(Config, S, byte_size(Data))),
    receive sent -> ok end,
    ok = M:send(S, <<"0123456789">>),
    ?assertEqual({ok, <<"0123">>}, M:recv(C, 4, 5000)),
    ?assertEqual({ok, <<"456789">>}, M:recv(C, 6, 5000)),
    ok = M:close(C),
    ok = M:close(S).

%% A passive recv with a timeout gives {error, timeout} and leaves the
%% socket usable; once the peer closes it gives {error, closed}.
recv_times_out_then_sees_close(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    ?assertEqual({error, timeout}, M:recv(S, 0, 100)),
    ok = M:send(C, <<"late">>),
    ?assertEqual({ok, <<"late">>}, M:recv(S, 0, 5000)),
    ok = M:close(C),
    ?assertEqual({error, closed}, M:recv(S, 0, 5000)),
    ok = M:close(S).

%% {active, once}: one chunk as {tcp, S, Data}, then the socket is passive
%% (getopts says false, nothing more arrives) until re-armed.
active_once_delivers_one_chunk(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    ok = call(Config, setopts, [S, [{active, once}]]),
    ok = M:send(C, <<"one">>),
    receive {tcp, S, <<"one">>} -> ok after 5000 -> error(no_data) end,
    ?assertEqual({ok, [{active, false}]}, call(Config, getopts, [S, [active]])),
    ok = M:send(C, <<"two">>),
    no_message(S),
    ok = call(Config, setopts, [S, [{active, once}]]),
    receive {tcp, S, <<"two">>} -> ok after 5000 -> error(no_data) end,
    ok = M:close(C),
    ok = M:close(S).

%% {active, N}: N chunks, then {tcp_passive, S} and nothing more; a second
%% {active, N} while one is running adds to it.
active_n_counts_down_to_passive(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    ok = call(Config, setopts, [S, [{active, 1}]]),
    ok = call(Config, setopts, [S, [{active, 2}]]),
    ?assertEqual({ok, [{active, 3}]}, call(Config, getopts, [S, [active]])),
    Chunks = [<<"a">>, <<"b">>, <<"c">>, <<"d">>],
    Got = lists:map(fun(Chunk) ->
                            ok = M:send(C, Chunk),
                            receive {tcp, S, D} -> D after 300 -> none end
                    end, Chunks),
    ?assertEqual([<<"a">>, <<"b">>, <<"c">>, none], Got),
    receive {tcp_passive, S} -> ok after 1000 -> error(no_passive) end,
    ?assertEqual({ok, <<"d">>}, M:recv(S, 0, 1000)),
    ok = M:close(C),
    ok = M:close(S).

%% {active, true}: data as messages, then {tcp_closed, S} when the peer
%% closes.
active_true_delivers_data_then_closed(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, true}]),
    ok = M:send(C, <<"hello">>),
    receive {tcp, S, <<"hello">>} -> ok after 5000 -> error(no_data) end,
    ok = M:close(C),
    receive {tcp_closed, S} -> ok after 5000 -> error(no_close) end,
    ok = M:close(S).

%% controlling_process/2 hands the socket over with what the old owner had
%% been sent and not received: the new owner gets every byte, in order, and
%% the old owner nothing more.
controlling_process_moves_delivery_in_order(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, true}]),
    ok = M:send(C, <<"first">>),
    timer:sleep(100),
    Self = self(),
    New = spawn_link(fun() ->
                             receive go -> ok end,
                             Self ! {got, recv_all(S, <<>>, 11)},
                             %% the socket closes with its owner
                             receive stop -> ok end
                     end),
    ok = M:controlling_process(S, New),
    ok = M:send(C, <<"second">>),
    New ! go,
    receive {got, Got} -> ?assertEqual(<<"firstsecond">>, Got) after 5000 -> error(no_handover) end,
    no_message(S),
    ?assertEqual({error, not_owner}, M:controlling_process(S, self())),
    New ! stop,
    ok = M:close(C).

recv_all(_S, Acc, Want) when byte_size(Acc) >= Want -> Acc;
recv_all(S, Acc, Want) ->
    receive {tcp, S, D} -> recv_all(S, <<Acc/binary, D/binary>>, Want)
    after 2000 -> Acc
    end.

%% `list' (gen_tcp's default) gives strings, `binary' binaries, in recv and
%% in active messages alike, and setopts switches between them without
%% touching the active state.
list_and_binary_modes(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [{active, false}]),
    ok = M:send(C, <<"abc">>),
    ?assertEqual({ok, "abc"}, M:recv(S, 3, 5000)),
    ok = call(Config, setopts, [S, [binary, {active, once}]]),
    ?assertEqual({ok, [{mode, binary}]}, call(Config, getopts, [S, [mode]])),
    ok = M:send(C, "def"),
    receive {tcp, S, <<"def">>} -> ok after 5000 -> error(no_data) end,
    %% Changing only the mode leaves the spent `once' passive.
    ok = call(Config, setopts, [S, [list]]),
    ok = M:send(C, "ghi"),
    no_message(S),
    ?assertEqual({ok, "ghi"}, M:recv(S, 3, 5000)),
    ok = M:close(C),
    ok = M:close(S).

%% The common socket options read back what was set.
socket_options_round_trip(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    ok = call(Config, setopts, [S, [{nodelay, true}, {keepalive, true}, {sndbuf, 65536},
                                    {recbuf, 65536}]]),
    {ok, Opts} = call(Config, getopts, [S, [nodelay, keepalive, sndbuf, recbuf]]),
    ct:log("~p: ~p", [M, Opts]),
    ?assertMatch([{nodelay, true}, {keepalive, true}, {sndbuf, Snd}, {recbuf, Rcv}]
                   when Snd >= 65536 andalso Rcv >= 65536, Opts),
    ok = call(Config, setopts, [S, [{linger, {true, 0}}]]),
    ?assertEqual({ok, [{linger, {true, 0}}]}, call(Config, getopts, [S, [linger]])),
    ok = M:close(C),
    ok = M:close(S).

%% shutdown(S, write): the peer reads to end of stream, and the other
%% direction still works.
shutdown_write_ends_the_peers_stream_only(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    ok = M:send(S, <<"bye">>),
    ok = M:shutdown(S, write),
    ?assertEqual({ok, <<"bye">>}, M:recv(C, 0, 5000)),
    ok = M:send(C, <<"still">>),
    ?assertEqual({ok, <<"still">>}, M:recv(S, 0, 5000)),
    ?assertEqual({error, closed}, M:recv(C, 0, 5000)),
    ok = M:close(C),
    ok = M:close(S).

%% Each end's sockname is the other's peername, as {IP, Port}.
peername_and_sockname_agree(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, false}]),
    {ok, {?LOOPBACK, _} = CName} = call(Config, sockname, [C]),
    {ok, {?LOOPBACK, _} = SName} = call(Config, sockname, [S]),
    ?assertEqual({ok, CName}, call(Config, peername, [S])),
    ?assertEqual({ok, SName}, call(Config, peername, [C])),
    ok = M:close(C),
    ok = M:close(S).

%% recv/3 on an active socket is refused with einval.
recv_in_active_mode_is_refused(Config) ->
    M = ?config(m, Config),
    {C, S} = pair(Config, [binary, {active, true}]),
    ?assertEqual({error, einval}, M:recv(S, 0, 100)),
    ok = M:close(C),
    ok = M:close(S).

%% A difference kept on purpose: sluice_socket frames nothing; gen_tcp's
%% {packet, line} is refused with einval (gen_tcp accepts it).
only_raw_packets(Config) ->
    {C, S} = pair(Config, [binary, {active, false}]),
    Expected = case ?config(m, Config) of
                   gen_tcp -> ok;
                   sluice_socket -> {error, einval}
               end,
    ?assertEqual(Expected, call(Config, setopts, [S, [{packet, line}]])),
    ?assertEqual(ok, call(Config, setopts, [S, [{packet, raw}]])),
    M = ?config(m, Config),
    ok = M:close(C),
    ok = M:close(S).
