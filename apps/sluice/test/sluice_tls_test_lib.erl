%% Helpers for the TLS and PROXY protocol suites: throwaway certificates
%% (made in memory with public_key:pkix_test_data/1, written as PEM files
%% only under a case's priv_dir), TLS clients of the ack and echo
%% protocols, a TCP relay that records the TLS records a server sends, and
%% a logger handler that keeps every event (any module) for counting.
-module(sluice_tls_test_lib).

-include_lib("stdlib/include/assert.hrl").

-export([init_per_suite/1, certs/0, server_opts/1, client_opts/1, write_pem/2]).
-export([client_hello/2]).
-export([client/2, connect/2, connect/3, tcp_connect/1, reset/1, ack_pipeline/3, recv_exactly/3,
         recv_until_closed/2, echo_check/3]).
-export([start_relay/1, relay_result/2]).
-export([start_lb/3]).
-export([capture_all_logs/0, captured/0, stop_capture/0, log/2]).
-export([vm_snapshot/0, settle/0]).
-export([health_check/2, refused_notices/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

%%% Certificates --------------------------------------------------------

%% A TLS suite's init_per_suite/1: sluice and ssl started, the
%% certificates (certs/0) in the config as `certs'.
init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    {ok, _} = application:ensure_all_started(ssl),
    [{certs, certs()} | Config].

%% A CA and a server certificate (P-256: quick to make and to use), and
%% the matching client options: #{server => [...], client => [...]}.
certs() ->
    {ok, _} = application:ensure_all_started(ssl),
    Key = [{key, {namedCurve, secp256r1}}],
    #{server_config := Server, client_config := Client} =
        public_key:pkix_test_data(#{server_chain => #{root => Key, intermediates => [],
                                                      peer => Key},
                                    client_chain => #{root => Key, intermediates => [],
                                                      peer => Key}}),
    #{server => Server, client => Client}.

server_opts(Config) ->
    maps:get(server, proplists:get_value(certs, Config)).

%% The client trusts the test CA but does not check the host name: tests
%% connect to 127.0.0.1 with whatever SNI they want to send.
client_opts(Config) ->
    Client = maps:get(client, proplists:get_value(certs, Config)),
    [{cacerts, proplists:get_value(cacerts, Client)}, {verify, verify_peer},
     {customize_hostname_check, [{match_fun, fun(_, _) -> true end}]},
     {server_name_indication, disable}].

%% The server's certificate and key as PEM files in Dir: [{certfile, F},
%% {keyfile, F}, {cacertfile, F}].
write_pem(Dir, ServerOpts) ->
    {cert, Cert} = lists:keyfind(cert, 1, ServerOpts),
    {key, {KeyType, KeyDer}} = lists:keyfind(key, 1, ServerOpts),
    {cacerts, CAs} = lists:keyfind(cacerts, 1, ServerOpts),
    CertFile = filename:join(Dir, "server.pem"),
    KeyFile = filename:join(Dir, "server.key"),
    CAFile = filename:join(Dir, "ca.pem"),
    ok = file:write_file(CertFile, public_key:pem_encode([{'Certificate', Cert, not_encrypted}])),
    ok = file:write_file(KeyFile, public_key:pem_encode([{KeyType, KeyDer, not_encrypted}])),
    ok = file:write_file(CAFile, public_key:pem_encode([{'Certificate', C, not_encrypted}
                                                        || C <- CAs])),
    [{certfile, CertFile}, {keyfile, KeyFile}, {cacertfile, CAFile}].

%% The first record a TLS client sends (its ClientHello), as it would send
%% it to this server (Extra: more client options, e.g. versions), caught
%% by a listener that never answers.
client_hello(Config, Extra) ->
    {ok, L} = gen_tcp:listen(0, [binary, {ip, ?LOOPBACK}, {active, false}]),
    {ok, P} = inet:port(L),
    Opts = Extra ++ client_opts(Config) ++ [binary, {active, false}],
    Client = spawn(fun() -> ssl:connect(?LOOPBACK, P, Opts, 5000) end),
    {ok, A} = gen_tcp:accept(L, 5000),
    {ok, <<22, _:16, Len:16>> = Head} = gen_tcp:recv(A, 5, 5000),
    {ok, Body} = gen_tcp:recv(A, Len, 5000),
    exit(Client, kill),
    gen_tcp:close(A),
    gen_tcp:close(L),
    <<Head/binary, Body/binary>>.

%%% Clients ---------------------------------------------------------------

%% A passive binary client of the group's transport (`transport' in
%% Config: ssl, or any TCP one), tagged with the module that reads and
%% writes it: `{ssl, S}' or `{gen_tcp, S}', for M:send/2, M:recv/3, M:close/1.
client(Port, Config) ->
    case proplists:get_value(transport, Config) of
        ssl ->
            {ok, S} = connect(Port, Config),
            {ssl, S};
        _ ->
            {ok, S} = sluice_test_lib:connect(Port),
            {gen_tcp, S}
    end.

connect(Port, Config) ->
    connect(Port, Config, []).

%% A passive binary TLS connection to the server on loopback; Extra
%% replaces the defaults it names.
connect(Port, Config, Extra) ->
    Defaults = client_opts(Config) ++ [{active, false}, {nodelay, true}],
    ssl:connect(?LOOPBACK, Port,
                [binary | Extra ++ [O || O = {K, _} <- Defaults, not lists:keymember(K, 1, Extra)]],
                5000).

%% Close a client's TLS connection with a TCP reset, at once, whatever its
%% ssl processes are doing (test code: it reads the TCP socket out of the
%% sslsocket).
reset(SslSock) ->
    {sslsocket, {gen_tcp, Port, _, _}, _} = SslSock,
    _ = inet:setopts(Port, [{linger, {true, 0}}]),
    _ = catch erlang:port_close(Port),
    ok.

%% A load balancer's TCP health check: connect, then close without a byte,
%% with a FIN (`fin') or a reset (`rst', as haproxy ends its checks); or
%% `{send, Bytes}' first (haproxy's check-send-proxy: a PROXY header).
health_check(Port, How) ->
    {ok, S} = tcp_connect(Port),
    case How of
        fin -> ok;
        rst -> ok = inet:setopts(S, [{linger, {true, 0}}]);
        {send, Bytes} -> ok = gen_tcp:send(S, Bytes)
    end,
    gen_tcp:close(S).

%% The texts of the notices of connections closed before their handler
%% (sluice_log:refused/3) that sluice_log_forwarder has sent this process:
%% those that came until the first one, waited for up to Timeout, and
%% those after it up to a moment later.
refused_notices(Timeout) ->
    receive
        {log, notice, Text, _} ->
            case string:find(Text, "closed before its handler") of
                nomatch -> refused_notices(Timeout);
                _ -> [Text | refused_notices(100)]
            end
    after Timeout -> []
    end.

tcp_connect(Port) ->
    gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}, {packet, raw},
                                      {nodelay, true}], 5000).

%% N ack frames (ack => each) in one write on an open TLS socket: all N
%% acks back, in order, and nothing else.
ack_pipeline(S, N, PayloadSize) ->
    Ids = sluice_abuse_client:ids(erlang:unique_integer([positive]) band 16#ffffff * 1000, N),
    ok = ssl:send(S, sluice_abuse_client:frames(Ids, PayloadSize)),
    Expected = iolist_to_binary(Ids),
    case recv_exactly(S, byte_size(Expected), 5000) of
        Expected -> ok;
        Other -> {error, {wrong_acks, byte_size(Other)}}
    end.

%% Exactly N bytes from a TLS socket, then nothing more for a moment.
recv_exactly(S, N, Timeout) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    Got = recv_loop(S, N, Deadline, []),
    ?assertEqual({error, timeout}, ssl:recv(S, 0, 50)),
    Got.

recv_loop(_S, 0, _Deadline, Acc) ->
    iolist_to_binary(lists:reverse(Acc));
recv_loop(S, N, Deadline, Acc) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    case ssl:recv(S, 0, Left) of
        {ok, Data} when byte_size(Data) =< N -> recv_loop(S, N - byte_size(Data), Deadline, [Data | Acc]);
        {ok, Data} -> error({more_than_expected, N, byte_size(Data)});
        {error, Reason} -> error({recv_failed, Reason, missing, N, got, iolist_size(Acc)})
    end.

%% Whatever the server sends until it closes; {Bytes, How}.
recv_until_closed(S, Timeout) ->
    recv_until_closed(S, Timeout, []).

recv_until_closed(S, Timeout, Acc) ->
    case ssl:recv(S, 0, Timeout) of
        {ok, Data} -> recv_until_closed(S, Timeout, [Data | Acc]);
        {error, Why} -> {iolist_to_binary(lists:reverse(Acc)), Why}
    end.

%% Bytes random bytes written in random pieces (1..MaxPiece) by a writer
%% process while this one reads: every byte must come back, in order.
echo_check(S, Bytes, MaxPiece) ->
    Stream = rand:bytes(Bytes),
    Pieces = sluice_test_lib:random_split(Stream, 1, MaxPiece),
    Self = self(),
    Writer = spawn_link(fun() -> [ok = ssl:send(S, P) || P <- Pieces], Self ! {self(), sent} end),
    Got = recv_loop(S, Bytes, erlang:monotonic_time(millisecond) + 20000, []),
    receive {Writer, sent} -> ok after 5000 -> error(writer_stuck) end,
    case Got =:= Stream of
        true -> ok;
        false -> {error, {first_difference, binary:longest_common_prefix([Got, Stream])}}
    end.

%%% A relay that watches the server's TLS records -------------------------

%% A TCP relay on loopback in front of ServerPort, for one connection:
%% it forwards both ways, and reads the server's side as TLS records
%% (5-byte header: type, version, length). Returns {RelayPort, Pid};
%% relay_result/2 gives, once the server has closed, the record types it
%% sent in order and whether its FIN came after the last whole record.
start_relay(ServerPort) ->
    Parent = self(),
    Pid = spawn_link(fun() ->
                             {ok, L} = gen_tcp:listen(0, [binary, {ip, ?LOOPBACK}, {active, false}]),
                             {ok, RP} = inet:port(L),
                             Parent ! {relay_port, self(), RP},
                             {ok, C} = gen_tcp:accept(L, 5000),
                             {ok, S} = gen_tcp:connect(?LOOPBACK, ServerPort,
                                                       [binary, {active, true}, {nodelay, true}]),
                             ok = inet:setopts(C, [{active, true}, {nodelay, true}]),
                             relay(C, S, <<>>, [], Parent)
                     end),
    receive {relay_port, Pid, RP} -> {RP, Pid} after 5000 -> error(relay_not_started) end.

relay(C, S, Buf, Types, Parent) ->
    receive
        {tcp, C, Data} ->
            _ = gen_tcp:send(S, Data),
            relay(C, S, Buf, Types, Parent);
        {tcp_closed, C} ->
            _ = gen_tcp:shutdown(S, write),
            relay(C, S, Buf, Types, Parent);
        {tcp, S, Data} ->
            _ = gen_tcp:send(C, Data),
            {Types2, Rest} = records(<<Buf/binary, Data/binary>>, Types),
            relay(C, S, Rest, Types2, Parent);
        {tcp_closed, S} ->
            Parent ! {relay_done, self(), lists:reverse(Types), Buf},
            _ = gen_tcp:close(C)
    end.

records(<<Type, _Version:16, Len:16, _:Len/binary, Rest/binary>>, Types) ->
    records(Rest, [Type | Types]);
records(Rest, Types) ->
    {Types, Rest}.

%% {RecordTypes, BytesAfterTheLastWholeRecord}: 20 change_cipher_spec,
%% 21 alert, 22 handshake, 23 application data.
relay_result(Pid, Timeout) ->
    receive {relay_done, Pid, Types, Partial} -> {Types, Partial}
    after Timeout -> error(relay_no_fin)
    end.

%%% A load balancer that speaks the PROXY protocol --------------------------

%% A TCP proxy on loopback in front of ServerPort, for one connection: it
%% sends Header to the server, then relays both ways. Mode says how the
%% header goes out:
%% <ul>
%%  <li>`joined': in one write with the client's first bytes (for TLS, the
%%      ClientHello), as a load balancer that buffers does;</li>
%%  <li>`alone': in a write of its own, the client's bytes after it;</li>
%%  <li>`bytewise': one byte per write, 5 ms apart, then the client's
%%      bytes.</li>
%% </ul>
%% Returns the port to connect to.
start_lb(ServerPort, Header, Mode) ->
    Parent = self(),
    Pid = spawn_link(fun() ->
                             {ok, L} = gen_tcp:listen(0, [binary, {ip, ?LOOPBACK}, {active, false}]),
                             {ok, LP} = inet:port(L),
                             Parent ! {lb_port, self(), LP},
                             {ok, C} = gen_tcp:accept(L, 10000),
                             ok = inet:setopts(C, [{nodelay, true}]),
                             {ok, S} = gen_tcp:connect(?LOOPBACK, ServerPort,
                                                       [binary, {active, false}, {nodelay, true}]),
                             lb_header(Mode, Header, C, S),
                             ok = inet:setopts(C, [{active, true}]),
                             ok = inet:setopts(S, [{active, true}]),
                             lb_pump(C, S)
                     end),
    receive {lb_port, Pid, LP} -> LP after 5000 -> error(lb_not_started) end.

lb_header(joined, Header, C, S) ->
    {ok, First} = gen_tcp:recv(C, 0, 10000),
    ok = gen_tcp:send(S, [Header, First]);
lb_header(alone, Header, _C, S) ->
    ok = gen_tcp:send(S, Header),
    timer:sleep(50);
lb_header(bytewise, Header, _C, S) ->
    [begin ok = gen_tcp:send(S, <<B>>), timer:sleep(5) end || <<B>> <= Header],
    ok.

lb_pump(C, S) ->
    receive
        {tcp, C, Data} -> _ = gen_tcp:send(S, Data), lb_pump(C, S);
        {tcp, S, Data} -> _ = gen_tcp:send(C, Data), lb_pump(C, S);
        {tcp_closed, _} -> gen_tcp:close(C), gen_tcp:close(S);
        {tcp_error, _, _} -> gen_tcp:close(C), gen_tcp:close(S)
    end.

%%% Logs --------------------------------------------------------------------

%% Keep every logger event from now on (any module, any level) in a table
%% owned by a process of its own, until stop_capture/0.
capture_all_logs() ->
    Parent = self(),
    Owner = spawn(fun() ->
                          _ = ets:new(sluice_tls_logs, [named_table, public, duplicate_bag]),
                          Parent ! {ready, self()},
                          receive stop -> ok end
                  end),
    receive {ready, Owner} -> ok end,
    ok = logger:add_handler(sluice_tls_capture, ?MODULE, #{level => all, owner => Owner}).

%% [{MonotonicMs, Level, Module, Text}] in the order logged.
captured() ->
    lists:sort([{T, L, M, format(Msg)} || {T, L, M, Msg} <- ets:tab2list(sluice_tls_logs)]).

stop_capture() ->
    {ok, #{owner := Owner}} = logger:get_handler_config(sluice_tls_capture),
    ok = logger:remove_handler(sluice_tls_capture),
    Owner ! stop,
    ok.

format({report, R}) -> lists:flatten(io_lib:format("~0p", [R]));
format({string, S}) -> unicode:characters_to_list(S);
format({Format, Args}) -> lists:flatten(io_lib:format(Format, Args)).

%% logger handler callback
log(#{level := Level, msg := Msg, meta := Meta}, _Config) ->
    Mod = case Meta of #{mfa := {M, _, _}} -> M; _ -> undefined end,
    true = ets:insert(sluice_tls_logs, {erlang:monotonic_time(millisecond), Level, Mod, Msg}),
    ok.

%%% The VM ------------------------------------------------------------------

%% Processes, ports and memory after collecting garbage everywhere.
vm_snapshot() ->
    Memory = settle(),
    #{processes => erlang:system_info(process_count), ports => erlang:system_info(port_count),
      memory => Memory}.

settle() ->
    _ = [erlang:garbage_collect(P) || P <- processes()],
    timer:sleep(100),
    erlang:memory(total).
