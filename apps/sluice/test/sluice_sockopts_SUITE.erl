%% A handler's socket options (sluice:setopts/2, getopts/2): the same
%% cases on every transport (groups `inet', `socket' and `tls'), each
%% checked against the socket itself (inet:getopts/2 on the inet driver's
%% socket and on the TCP socket under TLS, socket:getopt/2 on the NIF's):
%% what a handler sets is on the socket and reads back the same on all
%% three; the options the library owns or the listener's are refused and
%% the connection carries on untouched; a bad value or name is an error
%% the handler gets, not a crash; a closed connection answers `closed';
%% a transport without the optional callbacks, `not_supported'.
-module(sluice_sockopts_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([handler_sets_options_and_reads_them_back/1,
         another_process_sets_and_reads_them/1,
         owned_options_are_refused_and_the_connection_carries_on/1,
         bad_values_are_an_error_not_a_crash/1,
         closed_connection_answers_closed/1,
         transport_without_the_callbacks_is_not_supported/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 30}}].

cases() ->
    [handler_sets_options_and_reads_them_back,
     another_process_sets_and_reads_them,
     owned_options_are_refused_and_the_connection_carries_on,
     bad_values_are_an_error_not_a_crash,
     closed_connection_answers_closed].

all() ->
    [{group, inet}, {group, socket}, {group, tls},
     transport_without_the_callbacks_is_not_supported].

groups() ->
    sluice_test_lib:backend_groups(cases()) ++ [{tls, [], cases()}].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(tls, Config) ->
    {ok, _} = application:ensure_all_started(ssl),
    [{transport, ssl}, {certs, sluice_tls_test_lib:certs()} | Config];
init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case, ?config(transport, Config)}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% Helpers

%% A listener of sluice_api_handler on the group's transport and a client
%% connected to it: {Client, Conn} (the conn() its init/2 got).
connected(Config) ->
    Name = ?config(name, Config),
    Handler = {sluice_api_handler, #{test => self()}},
    Opts = case ?config(transport, Config) of
               ssl -> #{transport => ssl, handler => Handler,
                        tls_opts => sluice_tls_test_lib:server_opts(Config)};
               _ -> #{handler => Handler}
           end,
    _ = sluice_test_lib:start_listener(Name, Opts),
    Port = sluice_test_lib:port(Name),
    {ok, C} = case ?config(transport, Config) of
                  ssl -> sluice_tls_test_lib:connect(Port, Config);
                  _ -> sluice_test_lib:connect(Port)
              end,
    Conn = receive {init, _, Cn} -> Cn after 5000 -> error(no_init) end,
    {C, Conn}.

%% The client's send and receive, on TCP or TLS.
send(C, Data) when is_port(C) -> gen_tcp:send(C, Data);
send(C, Data) -> ssl:send(C, Data).

recv(C, N) when is_port(C) -> gen_tcp:recv(C, N, 5000);
recv(C, N) -> ssl:recv(C, N, 5000).

close(C) when is_port(C) -> gen_tcp:close(C);
close(C) -> ssl:close(C).

%% The connection still answers: an echo of 64 KiB comes back whole (the
%% api handler returns what is not one of its commands: no chunk of this
%% one starts with one).
echoes(C) ->
    Data = binary:copy(<<"0123456789abcdef">>, 4096),
    ok = send(C, Data),
    ?assertEqual({ok, Data}, recv(C, byte_size(Data))).

%% In the connection process, by its handler.
in_handler(#{pid := Pid}, Req) ->
    sluice:call(Pid, Req, 5000).

%% Options read from the socket itself, not through sluice: the inet
%% driver's (also the TCP socket under TLS), or the NIF's at the levels
%% the kernel keeps them.
on_socket(#{socket := Sock, transport := sluice_transport_socket}, Names) ->
    [{K, native(K, Sock)} || K <- Names];
on_socket(#{socket := Sock}, Names) ->
    {ok, L} = inet:getopts(Sock, Names),
    L.

native(K, Sock) ->
    {ok, V} = socket:getopt(Sock, level(K)),
    case {K, V} of
        {linger, #{onoff := On, linger := Secs}} -> {On, Secs};
        {tos, lowdelay} -> 16;
        _ -> V
    end.

level(nodelay) -> {tcp, nodelay};
level(keepalive) -> {socket, keepalive};
level(sndbuf) -> {socket, sndbuf};
level(recbuf) -> {socket, rcvbuf};
level(priority) -> {socket, priority};
level(tos) -> {ip, tos};
level(linger) -> {socket, linger}.

%% The library's own settings of a socket, where the socket has them (the
%% NIF's has no active mode, packet or driver buffer): they must not move.
library_settings(#{socket := Sock, transport := sluice_transport_socket}) ->
    {ok, Otp} = socket:getopt(Sock, {otp, rcvbuf}),
    [{rcvbuf, Otp}];
library_settings(#{socket := Sock}) ->
    {ok, L} = inet:getopts(Sock, [mode, packet, packet_size, header, deliver, exit_on_close,
                                  buffer, send_timeout, send_timeout_close]),
    L.

%%% Cases

%% A handler sets each option the listener left at another value and reads
%% it back; the socket itself has it; the connection carries on.
handler_sets_options_and_reads_them_back(Config) ->
    {C, Conn} = connected(Config),
    Names = [nodelay, keepalive, sndbuf, recbuf, priority, tos, linger],
    Before = on_socket(Conn, Names),
    %% the listener's nodelay (true by default) and the kernel's others
    ?assertMatch([{nodelay, true}, {keepalive, false}, _, _, {priority, 0}, {tos, 0},
                  {linger, {false, _}}], Before),
    Set = [{nodelay, false}, {keepalive, true}, {sndbuf, 65536}, {recbuf, 32768},
           {priority, 3}, {tos, 16}, {linger, {true, 7}}],
    ?assertEqual(ok, in_handler(Conn, {setopts, Set})),
    {ok, Read} = in_handler(Conn, {getopts, Names}),
    ct:log("before ~p~nread ~p", [Before, Read]),
    ?assertEqual(Names, [K || {K, _} <- Read]),
    ?assertEqual(on_socket(Conn, Names), Read),
    %% Linux doubles the buffer sizes it is given
    [?assert(V >= proplists:get_value(K, Set)) || {K, V} <- Read, K =:= sndbuf orelse K =:= recbuf],
    ?assertEqual([{nodelay, false}, {keepalive, true}, {priority, 3}, {tos, 16},
                  {linger, {true, 7}}],
                 [O || O = {K, _} <- Read, K =/= sndbuf, K =/= recbuf]),
    %% and back
    ?assertEqual(ok, in_handler(Conn, {setopts, [{nodelay, true}, {linger, {true, 1}}]})),
    ?assertEqual({ok, [{nodelay, true}, {linger, {true, 1}}]},
                 in_handler(Conn, {getopts, [nodelay, linger]})),
    ?assertEqual([{nodelay, true}, {linger, {true, 1}}], on_socket(Conn, [nodelay, linger])),
    ?assertEqual({ok, []}, in_handler(Conn, {getopts, []})),
    echoes(C).

%% Any process holding the conn() can set and read them, as peername/1.
another_process_sets_and_reads_them(Config) ->
    {C, Conn} = connected(Config),
    ?assertEqual(ok, sluice:setopts(Conn, [{nodelay, false}, {keepalive, true}])),
    ?assertEqual({ok, [{keepalive, true}, {nodelay, false}]},
                 sluice:getopts(Conn, [keepalive, nodelay])),
    ?assertEqual([{nodelay, false}, {keepalive, true}], on_socket(Conn, [nodelay, keepalive])),
    echoes(C).

%% The options the connection loop and the transports rely on, and the
%% listener's, are refused whole, in setopts/2 and getopts/2: nothing of a
%% list holding one is set, the library's settings stay as they were and
%% the connection still echoes, on every transport.
owned_options_are_refused_and_the_connection_carries_on(Config) ->
    {C, Conn} = connected(Config),
    Library = library_settings(Conn),
    Owned = [{active, true}, {mode, list}, {packet, line}, {packet_size, 10}, {header, 2},
             {deliver, term}, {line_delimiter, $x}, {exit_on_close, true},
             {show_econnreset, true}, {buffer, 10}, {send_timeout, 1},
             {send_timeout_close, false}, {high_watermark, 1}, {low_watermark, 1},
             {high_msgq_watermark, 1}, {low_msgq_watermark, 1}, {delay_send, true},
             {raw, 6, 1, <<0:32>>}],
    [?assertEqual({error, {not_settable, element(1, O)}}, in_handler(Conn, {setopts, [O]}))
     || O <- Owned],
    [?assertEqual({error, {not_settable, K}}, in_handler(Conn, {setopts, [K]}))
     || K <- [binary, list]],
    [?assertEqual({error, {not_settable, element(1, O)}}, in_handler(Conn, {getopts, [element(1, O)]}))
     || O <- Owned],
    %% A good option first does not get set either.
    ?assertEqual({error, {not_settable, packet}},
                 in_handler(Conn, {setopts, [{nodelay, false}, {packet, line}]})),
    ?assertEqual([{nodelay, true}], on_socket(Conn, [nodelay])),
    %% The inet transport moves `buffer' itself as it arms (the small
    %% buffer first, the listener's after a full read): only the refused
    %% value must not be there.
    {Buffer, Rest} = lists:partition(fun({K, _}) -> K =:= buffer end, library_settings(Conn)),
    ?assertEqual(lists:keydelete(buffer, 1, Library), Rest),
    ?assertNotEqual([{buffer, 10}], Buffer),
    echoes(C),
    echoes(C).

%% A bad value, an unknown name or what is not an option is an error the
%% handler gets back; the connection carries on, its handler reports no
%% error. Options that are not a list raise badarg in the caller.
bad_values_are_an_error_not_a_crash(Config) ->
    {C, Conn = #{pid := Pid}} = connected(Config),
    Bad = [{nodelay, 3}, {keepalive, yes}, {tos, 256}, {tos, -1}, {sndbuf, -1},
           {recbuf, 1 bsl 40}, {priority, foo}, {linger, true}, {linger, {true, -1}},
           {nodelya, true}, {nodelay, true, x}, {nodelay}, foo, 42, "nodelay"],
    [?assertEqual({error, {bad_option, O}}, in_handler(Conn, {setopts, [O]})) || O <- Bad],
    ?assertEqual({error, {bad_option, {sndbuf, -1}}},
                 in_handler(Conn, {setopts, [{nodelay, false}, {sndbuf, -1}]})),
    ?assertEqual([{nodelay, true}], on_socket(Conn, [nodelay])),
    [?assertEqual({error, {bad_option, N}}, in_handler(Conn, {getopts, [N]}))
     || N <- [nodelya, {nodelay, true}, 42]],
    ?assertError(badarg, sluice:setopts(Conn, {nodelay, true})),
    ?assertError(badarg, sluice:setopts(Conn, [{nodelay, true} | x])),
    ?assertError(badarg, sluice:getopts(Conn, nodelay)),
    echoes(C),
    ?assert(is_process_alive(Pid)),
    receive {error, Pid, Why} -> error({handle_error, Why}) after 0 -> ok end.

%% Once the connection has ended its socket is closed: `{error, closed}'
%% on every transport (the inet driver says einval).
closed_connection_answers_closed(Config) ->
    {C, Conn = #{pid := Pid}} = connected(Config),
    ok = close(C),
    receive {terminate, Pid, _} -> ok after 5000 -> error(no_terminate) end,
    %% (under TLS ssl's own process closes the TCP socket, a moment later)
    ok = sluice_test_lib:wait_until(fun() ->
                                            R = sluice:getopts(Conn, [nodelay]),
                                            R =:= {error, closed} orelse R
                                    end, 5000),
    ?assertEqual({error, closed}, sluice:setopts(Conn, [{nodelay, false}])),
    ?assertEqual({error, closed}, sluice:getopts(Conn, [nodelay])),
    %% the checks come first
    ?assertEqual({error, {not_settable, active}}, sluice:setopts(Conn, [{active, once}])).

%% A transport of one's own without the optional callbacks (the test's
%% faulty transport has none): not supported, nothing crashes.
transport_without_the_callbacks_is_not_supported(Config) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, #{transport => sluice_faulty_transport,
                                               handler => {sluice_api_handler, #{test => self()}}}),
    {ok, C} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    Conn = receive {init, _, Cn} -> Cn after 5000 -> error(no_init) end,
    ?assertEqual({error, not_supported}, in_handler(Conn, {setopts, [{nodelay, false}]})),
    ?assertEqual({error, not_supported}, in_handler(Conn, {getopts, [nodelay]})),
    ?assertEqual({error, {not_settable, active}}, in_handler(Conn, {setopts, [{active, true}]})),
    echoes(C).
