%% The PROXY protocol on the wire (issue 13 item 3), on every transport
%% (groups inet, socket and ssl; under TLS the header comes before the
%% ClientHello): version 1 (TCP4, TCP6, UNKNOWN) and version 2 (PROXY with
%% TLVs, LOCAL) headers reach the handler's conn() as `proxy' and the
%% connection's logger metadata; the bytes after the header reach the
%% handler intact whether they came in the header's write or later, and a
%% header written a byte at a time is read whole. A missing, malformed,
%% oversized or slow header ends the connection with `proxy_error'
%% counted and nothing handed to a handler; a v2 header announcing more
%% than proxy_max_size is refused as soon as its length is read.
%%
%% The headers come from a load balancer emulation (sluice_tls_test_lib's
%% start_lb/3: the header in the same write as the client's first bytes,
%% in a write of its own, or a byte per write), or, for hostile input,
%% from a raw TCP client.
-module(sluice_proxy_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([health_check_is_the_clients_close_and_not_logged/1]).
-export([v1_tcp4_reaches_the_handler/1,
         v1_tcp6_reaches_the_handler/1, v1_tcp6_ipv4_mapped_reaches_the_handler/1,
         v1_unknown_reaches_the_handler/1,
         v2_proxy_with_tlvs_reaches_the_handler/1,
         v2_local_has_no_addresses/1,
         header_a_byte_at_a_time_is_read_whole/1,
         data_in_the_header_write_reaches_the_handler_intact/1,
         own_send_in_init_goes_before_the_reply_to_data_in_the_header_write/1,
         missing_header_is_refused/1,
         malformed_headers_are_refused/1,
         v2_huge_length_is_refused_when_read/1,
         slow_header_is_closed_at_proxy_timeout/1,
         proxy_timeout_infinity_waits_for_the_header/1,
         without_proxy_protocol_a_header_is_data/1]).

-define(SRC4, {{192, 0, 2, 1}, 56324}).
-define(DST4, {{198, 51, 100, 7}, 443}).
-define(SRC6, {{16#2001, 16#db8, 0, 0, 0, 0, 0, 1}, 40000}).
-define(DST6, {{16#2001, 16#db8, 0, 0, 0, 0, 16#ab, 16#cd}, 8443}).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, inet}, {group, socket}, {group, ssl}].

cases() ->
    [v1_tcp4_reaches_the_handler, v1_tcp6_reaches_the_handler,
     v1_tcp6_ipv4_mapped_reaches_the_handler, v1_unknown_reaches_the_handler,
     v2_proxy_with_tlvs_reaches_the_handler, v2_local_has_no_addresses,
     header_a_byte_at_a_time_is_read_whole, data_in_the_header_write_reaches_the_handler_intact,
     own_send_in_init_goes_before_the_reply_to_data_in_the_header_write,
     missing_header_is_refused, malformed_headers_are_refused,
     v2_huge_length_is_refused_when_read, slow_header_is_closed_at_proxy_timeout,
     proxy_timeout_infinity_waits_for_the_header,
     without_proxy_protocol_a_header_is_data,
     health_check_is_the_clients_close_and_not_logged].

groups() ->
    [{T, [], cases()} || T <- [inet, socket, ssl]].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(T, Config) ->
    [{transport, T} | Config].

end_per_group(_, _Config) ->
    ok.

init_per_testcase(Case, Config) ->
    Seed = sluice_test_lib:seed_rand(),
    ct:log("rand seed ~p", [Seed]),
    [{name, {?MODULE, Case, ?config(transport, Config)}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% A listener with proxy_protocol on the group's transport, its handler
%% reporting to this process and echoing.
listener(Config, Extra) ->
    Name = ?config(name, Config),
    T = ?config(transport, Config),
    Tls = case T of
              ssl -> #{tls_opts => sluice_tls_test_lib:server_opts(Config)};
              _ -> #{}
          end,
    Opts = maps:merge(maps:merge(#{transport => T, proxy_protocol => true,
                                   handler => {sluice_conn_report_handler, #{test_pid => self()}}},
                                 Tls), Extra),
    sluice_test_lib:start_listener(Name, Opts),
    sluice_test_lib:port(Name).

%% A client of the group's transport through a load balancer that sends
%% Header (Mode: joined, alone, bytewise).
via_lb(Config, Port, Header, Mode) ->
    LbPort = sluice_tls_test_lib:start_lb(Port, Header, Mode),
    open(Config, LbPort).

open(Config, Port) ->
    case ?config(transport, Config) of
        ssl ->
            {ok, S} = sluice_tls_test_lib:connect(Port, Config),
            {ssl, S};
        _ ->
            {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
            {tcp, S}
    end.

send({ssl, S}, Data) -> ssl:send(S, Data);
send({tcp, S}, Data) -> gen_tcp:send(S, Data).

recv_exactly({ssl, S}, N) -> sluice_tls_test_lib:recv_exactly(S, N, 10000);
recv_exactly({tcp, S}, N) -> sluice_test_lib:recv_exactly(S, N, 10000).

close({ssl, S}) -> ssl:close(S);
close({tcp, S}) -> gen_tcp:close(S).

%% What the handler's init/2 was given, and its process's logger metadata.
reported() ->
    receive {sluice_conn, _Pid, Conn, Meta} -> {Conn, Meta}
    after 5000 -> error(handler_not_started)
    end.

no_handler_called() ->
    receive {sluice_conn, Pid, Conn, _} -> error({handler_called, Pid, Conn})
    after 0 -> ok
    end.

%% The header reaches the handler (conn()'s `proxy' is Expected), the
%% logger metadata names the addresses when there are any, and the
%% client's bytes after the header are echoed intact.
check_reaches(Config, Header, Mode, Expected) ->
    Port = listener(Config, #{}),
    C = via_lb(Config, Port, Header, Mode),
    %% Under TLS the handler starts with the handshake; on TCP with the
    %% client's first bytes (the load balancer may hold the header until
    %% then).
    Hello = <<"hello after the header">>,
    ok = send(C, Hello),
    {Conn, Meta} = reported(),
    ct:log("~p header, ~p: conn() ~p~nlogger metadata ~p", [Mode, Header, Conn, Meta]),
    ?assertEqual(Expected, maps:get(proxy, Conn)),
    case Expected of
        #{source := Src, destination := Dst} ->
            ?assertMatch(#{proxy_source := Src, proxy_destination := Dst}, Meta);
        _ ->
            ?assertEqual(error, maps:find(proxy_source, Meta))
    end,
    ?assertEqual(Hello, recv_exactly(C, byte_size(Hello))),
    More = rand:bytes(10000),
    ok = send(C, More),
    ?assertEqual(More, recv_exactly(C, byte_size(More))),
    close(C),
    Conn.

reason_count(Config, Reason) ->
    maps:get(Reason, maps:get(close_reasons, sluice:info(?config(name, Config)))).

%% A raw TCP client writes Bytes (a list: one write each) and waits for
%% the server to end the connection; {Ms, How} from the first write.
raw_until_closed(Port, Writes) ->
    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
    T0 = erlang:monotonic_time(millisecond),
    [ok = gen_tcp:send(S, W) || W <- Writes],
    {_, End} = sluice_abuse_client:recv_until_end(S, 10000),
    {erlang:monotonic_time(millisecond) - T0, End}.

closed_by_server(End) ->
    ?assert(End =:= closed orelse End =:= econnreset, End).

%%% ------------------------------------------------------------------
%%% Headers that reach the handler
%%% ------------------------------------------------------------------

%% Version 1, TCP4 (written out by hand, as the specification's example
%% has it), in the same write as the client's first bytes.
v1_tcp4_reaches_the_handler(Config) ->
    check_reaches(Config, <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>, joined,
                  #{version => 1, command => proxy, transport => tcp4,
                    source => ?SRC4, destination => ?DST4}).

%% Version 1, TCP6 (with `::'), in a write of its own.
v1_tcp6_reaches_the_handler(Config) ->
    check_reaches(Config, <<"PROXY TCP6 2001:db8::1 2001:db8::ab:cd 40000 8443\r\n">>, alone,
                  #{version => 1, command => proxy, transport => tcp6,
                    source => ?SRC6, destination => ?DST6}).

%% Version 1, TCP6 with IPv4-mapped addresses as haproxy writes them
%% (inet_ntop(3): a dotted tail) when it relays an IPv4 client over IPv6
%% (a `v4v6' bind): served, not refused as malformed.
v1_tcp6_ipv4_mapped_reaches_the_handler(Config) ->
    check_reaches(Config, <<"PROXY TCP6 ::ffff:192.0.2.1 ::ffff:198.51.100.7 56324 443\r\n">>,
                  joined,
                  #{version => 1, command => proxy, transport => tcp6,
                    source => {{0, 0, 0, 0, 0, 16#ffff, 16#c000, 16#0201}, 56324},
                    destination => {{0, 0, 0, 0, 0, 16#ffff, 16#c633, 16#6407}, 443}}).

%% Version 1, UNKNOWN (what follows it is ignored): no addresses.
v1_unknown_reaches_the_handler(Config) ->
    check_reaches(Config, <<"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n">>, joined,
                  #{version => 1, command => proxy, transport => unknown}).

%% Version 2, PROXY over TCP/IPv4 with TLVs (ALPN, authority, unique id,
%% an SSL TLV with sub-TLVs, a custom type, and a CRC32C checked over the
%% whole header): all of them reach conn(), in order.
v2_proxy_with_tlvs_reaches_the_handler(Config) ->
    TLVs = [{alpn, <<"h2">>}, {authority, <<"example.test">>}, {crc32c, 0},
            {unique_id, <<"req-42">>},
            {ssl, #{client => 7, verify => 0,
                    tlvs => [{version, <<"TLSv1.3">>}, {cn, <<"client.example.test">>}]}},
            {16#E0, <<"custom">>}],
    Header = sluice_proxy_header:encode(#{version => 2, command => proxy, transport => tcp4,
                                          source => ?SRC4, destination => ?DST4, tlvs => TLVs}),
    {ok, Expected, <<>>} = sluice_proxy_header:parse(Header),
    Conn = check_reaches(Config, Header, alone, Expected),
    #{proxy := #{tlvs := Got}} = Conn,
    ?assertMatch([{alpn, <<"h2">>}, {authority, <<"example.test">>}, {crc32c, _},
                  {unique_id, <<"req-42">>},
                  {ssl, #{client := 7, tlvs := [{version, <<"TLSv1.3">>},
                                                 {cn, <<"client.example.test">>}]}},
                  {16#E0, <<"custom">>}], Got).

%% Version 2, LOCAL (a health check from the balancer itself) with an
%% address block that, as the specification says, is ignored: no
%% addresses in conn() or the logs (the socket's own apply).
v2_local_has_no_addresses(Config) ->
    Sig = sluice_proxy_header_v2:signature(),
    Block = <<192, 0, 2, 1, 198, 51, 100, 7, 56324:16, 443:16>>,
    Header = <<Sig/binary, 16#20, 16#11, (byte_size(Block)):16, Block/binary>>,
    Conn = check_reaches(Config, Header, joined,
                         #{version => 2, command => local, transport => unspec, tlvs => []}),
    ?assertEqual(false, maps:is_key(source, maps:get(proxy, Conn))).

%% Both versions, written one byte per write, 5 ms apart: read whole.
header_a_byte_at_a_time_is_read_whole(Config) ->
    check_reaches(Config, <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>, bytewise,
                  #{version => 1, command => proxy, transport => tcp4,
                    source => ?SRC4, destination => ?DST4}),
    sluice_test_lib:stop_listener(?config(name, Config)),
    V2 = sluice_proxy_header:encode(#{version => 2, command => proxy, transport => tcp6,
                                      source => ?SRC6, destination => ?DST6,
                                      tlvs => [{authority, <<"bytewise.test">>}]}),
    check_reaches(Config, V2, bytewise,
                  #{version => 2, command => proxy, transport => tcp6, source => ?SRC6,
                    destination => ?DST6, tlvs => [{authority, <<"bytewise.test">>}]}).

%% What follows the header in the same read is the client's, in every
%% delivery mode (false, once, 1, 10, adaptive, true): on TCP, 100 KB of random
%% bytes in the header's own write (more than one read brings) come back
%% intact, then more in random pieces; under TLS the ClientHello in the
%% header's write is the start of the TLS stream (the handshake succeeds),
%% and 256 KiB echo intact after it.
data_in_the_header_write_reaches_the_handler_intact(Config) ->
    Name = ?config(name, Config),
    lists:foreach(fun(Active) ->
                          ct:log("active ~p", [Active]),
                          Port = listener(Config, #{active => Active}),
                          data_in_header_write(Config, Port),
                          ?assertMatch({#{proxy := #{source := ?SRC4}}, _}, reported()),
                          sluice_test_lib:stop_listener(Name)
                  end, [false, once, 1, 10, adaptive, true]).

data_in_header_write(Config, Port) ->
    Header = <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>,
    case ?config(transport, Config) of
        ssl ->
            {ssl, S} = via_lb(Config, Port, Header, joined),
            ?assertEqual(ok, sluice_tls_test_lib:echo_check(S, 262144, 20000)),
            ssl:close(S);
        _ ->
            {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
            First = rand:bytes(100000),
            ok = gen_tcp:send(S, [Header, First]),
            ?assertEqual(First, sluice_test_lib:recv_exactly(S, byte_size(First), 10000)),
            More = rand:bytes(200000),
            Self = self(),
            spawn_link(fun() ->
                               [ok = gen_tcp:send(S, P) || P <- sluice_test_lib:random_split(More, 1, 5000)],
                               Self ! sent
                       end),
            ?assertEqual(More, sluice_test_lib:recv_exactly(S, byte_size(More), 10000)),
            receive sent -> ok end,
            gen_tcp:close(S)
    end.

%% A handler's own sluice:send/2 in init/2 goes out after init/2 and
%% before the reply to the client's first bytes, as without the PROXY
%% protocol, also when those bytes came in the header's read (in every
%% delivery mode). They were handed to the handler before the loop took
%% the send from the mailbox, and the client got "first" before "hello".
own_send_in_init_goes_before_the_reply_to_data_in_the_header_write(Config) ->
    Name = ?config(name, Config),
    Header = <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>,
    lists:foreach(
      fun(Active) ->
              Port = listener(Config, #{active => Active,
                                        handler => {sluice_conn_report_handler,
                                                    #{test_pid => self(),
                                                      send_in_init => <<"hello\n">>}}}),
              Got = case ?config(transport, Config) of
                        ssl ->
                            %% The bytes after the header are the ClientHello.
                            {ssl, S} = via_lb(Config, Port, Header, joined),
                            ok = ssl:send(S, <<"first">>),
                            sluice_tls_test_lib:recv_exactly(S, 11, 5000);
                        _ ->
                            {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
                            ok = gen_tcp:send(S, [Header, <<"first">>]),
                            sluice_test_lib:recv_exactly(S, 11, 5000)
                    end,
              ?assertEqual({Active, <<"hello\nfirst">>}, {Active, Got}),
              _ = reported(),
              sluice_test_lib:stop_listener(Name)
      end, [false, once, 1, adaptive, true]).

%%% ------------------------------------------------------------------
%%% Headers that are refused
%%% ------------------------------------------------------------------

%% A load balancer's TCP health check, a connect and a close (FIN or
%% reset) without a byte, is the client's close: counted `peer_closed',
%% not `proxy_error', and not logged; on `ssl' so is one that sends its
%% PROXY header and closes before a byte of TLS (haproxy's
%% check-send-proxy). A client that sends something else, or closes
%% mid-header, is still a `proxy_error', and the first is logged (at once:
%% no health check took the second's line). (Every check was a logged
%% `{proxy_error, closed}' before.)
health_check_is_the_clients_close_and_not_logged(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{}),
    Header = <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>,
    Checks = [fin, rst, fin, rst] ++ [{send, Header} || ?config(transport, Config) =:= ssl],
    N = length(Checks),
    ok = sluice_log_forwarder:start(self()),
    try
        [ok = sluice_tls_test_lib:health_check(Port, How) || How <- Checks],
        ok = sluice_test_lib:wait_info(Name, closed, N, 5000),
        ?assertEqual({N, 0, 0}, {reason_count(Config, peer_closed),
                                 reason_count(Config, proxy_error),
                                 reason_count(Config, handshake_error)}),
        {_, End} = raw_until_closed(Port, [<<"GET / HTTP/1.1\r\n\r\n">>]),
        closed_by_server(End),
        ok = sluice_tls_test_lib:health_check(Port, {send, <<"PROXY TCP4 192.0.2.1 ">>}),
        ok = sluice_test_lib:wait_info(Name, closed, N + 2, 5000),
        ?assertEqual({N, 2}, {reason_count(Config, peer_closed),
                              reason_count(Config, proxy_error)}),
        Notices = sluice_tls_test_lib:refused_notices(2000),
        ct:log("notices: ~p", [Notices]),
        ?assertMatch([_], Notices),
        ?assertNotEqual(nomatch, string:find(hd(Notices), "not_proxy_header"))
    after
        sluice_log_forwarder:stop()
    end,
    no_handler_called().

%% No header: a client that starts with its own bytes (an HTTP request;
%% under TLS also a real TLS client) is closed at once, counted as
%% proxy_error, and no handler starts.
missing_header_is_refused(Config) ->
    Port = listener(Config, #{}),
    {Ms, End} = raw_until_closed(Port, [<<"GET / HTTP/1.1\r\nHost: x\r\n\r\n">>]),
    ct:log("plain request: closed after ~b ms (~p)", [Ms, End]),
    closed_by_server(End),
    ?assert(Ms < 1000, Ms),
    Expected = case ?config(transport, Config) of
                   ssl ->
                       ?assertMatch({error, _}, sluice_tls_test_lib:connect(Port, Config)),
                       2;
                   _ ->
                       1
               end,
    sluice_test_lib:wait_info(?config(name, Config), connections, 0, 2000),
    ?assertEqual(Expected, reason_count(Config, proxy_error)),
    ?assertEqual(0, reason_count(Config, handshake_error)),
    no_handler_called().

%% Malformed headers, each closed at once and counted, none handed on: a
%% v1 line with a field missing, an address out of range, a port with a
%% leading zero, a bare LF, no CRLF within 107 bytes; a v2 header with
%% version 3, with command 2, and one whose address block is shorter than
%% its family needs.
malformed_headers_are_refused(Config) ->
    Port = listener(Config, #{}),
    Sig = sluice_proxy_header_v2:signature(),
    Bad = [<<"PROXY TCP4 192.0.2.1 198.51.100.7 56324\r\n">>,
           <<"PROXY TCP4 192.0.2.256 198.51.100.7 56324 443\r\n">>,
           <<"PROXY TCP4 192.0.2.1 198.51.100.7 056324 443\r\n">>,
           <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\n">>,
           <<"PROXY UNKNOWN ", (binary:copy(<<"x">>, 120))/binary>>,
           <<Sig/binary, 16#31, 16#11, 12:16, 0:96>>,
           <<Sig/binary, 16#22, 16#11, 12:16, 0:96>>,
           <<Sig/binary, 16#21, 16#11, 4:16, 0:32>>],
    lists:foreach(fun(B) ->
                          {Ms, End} = raw_until_closed(Port, [B, <<"and then some data">>]),
                          ct:log("~p: closed after ~b ms (~p)", [B, Ms, End]),
                          closed_by_server(End),
                          ?assert(Ms < 1000, Ms)
                  end, Bad),
    sluice_test_lib:wait_info(?config(name, Config), connections, 0, 2000),
    ?assertEqual(length(Bad), reason_count(Config, proxy_error)),
    no_handler_called().

%% A v2 header whose length field announces 65535 bytes (above the
%% default proxy_max_size, 4096) is refused once its 16 fixed bytes are
%% in, without waiting for the bytes it announces or for proxy_timeout
%% (5 s here); so is one announcing 4097 with proxy_max_size 4096. With
%% proxy_max_size 65551 the same 65535-byte length is accepted and waited
%% for (then the timeout ends it).
v2_huge_length_is_refused_when_read(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{proxy_timeout => 5000}),
    Sig = sluice_proxy_header_v2:signature(),
    lists:foreach(fun(Len) ->
                          {Ms, End} = raw_until_closed(Port, [<<Sig/binary, 16#21, 16#11, Len:16>>]),
                          ct:log("v2 announcing ~b bytes: closed after ~b ms (~p)", [Len, Ms, End]),
                          closed_by_server(End),
                          ?assert(Ms < 500, Ms)
                  end, [65535, 4097 - 16]),
    sluice_test_lib:wait_info(Name, connections, 0, 2000),
    ?assertEqual(2, reason_count(Config, proxy_error)),
    sluice_test_lib:stop_listener(Name),
    Port2 = listener(Config, #{proxy_timeout => 800, proxy_max_size => 65551}),
    {Ms2, End2} = raw_until_closed(Port2, [<<Sig/binary, 16#21, 16#11, 65535:16>>]),
    ct:log("with proxy_max_size 65551: closed after ~b ms (~p)", [Ms2, End2]),
    closed_by_server(End2),
    ?assert(Ms2 >= 750 andalso Ms2 < 2000, Ms2),
    no_handler_called().

%% proxy_timeout (600 ms here) bounds the whole header: a client that
%% sends part of one and stops, and one that trickles a valid header a
%% byte every 100 ms (it would need 4.5 s), are both closed at about
%% 600 ms, counted, never handed on.
slow_header_is_closed_at_proxy_timeout(Config) ->
    Port = listener(Config, #{proxy_timeout => 600}),
    {Ms, End} = raw_until_closed(Port, [<<"PROXY TCP4 192.0.2.1 ">>]),
    ct:log("half a header: closed after ~b ms (~p)", [Ms, End]),
    closed_by_server(End),
    ?assert(Ms >= 550 andalso Ms < 1500, Ms),
    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
    T0 = erlang:monotonic_time(millisecond),
    Sent = trickle(S, <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>, 0),
    Ms2 = erlang:monotonic_time(millisecond) - T0,
    ct:log("trickled header: ~b bytes sent, closed after ~b ms", [Sent, Ms2]),
    ?assert(Ms2 >= 550 andalso Ms2 < 1500, Ms2),
    ?assert(Sent < 20, Sent),
    sluice_test_lib:wait_info(?config(name, Config), connections, 0, 2000),
    ?assertEqual(2, reason_count(Config, proxy_error)),
    no_handler_called().

%% proxy_timeout infinity (a valid value): the header is waited for
%% however long it takes; one that comes in two parts 500 ms apart reaches
%% the handler.
proxy_timeout_infinity_waits_for_the_header(Config) ->
    Port = listener(Config, #{proxy_timeout => infinity}),
    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
    ok = gen_tcp:send(S, <<"PROXY TCP4 192.0.2.1 ">>),
    timer:sleep(500),
    ok = gen_tcp:send(S, <<"198.51.100.7 56324 443\r\n">>),
    %% Under TLS the handler starts after the handshake, on the same socket.
    Close = case ?config(transport, Config) of
                ssl ->
                    {ok, SS} = ssl:connect(S, sluice_tls_test_lib:client_opts(Config), 5000),
                    fun() -> ssl:close(SS) end;
                _ ->
                    fun() -> gen_tcp:close(S) end
            end,
    ?assertMatch({#{proxy := #{source := ?SRC4, destination := ?DST4}}, _}, reported()),
    Close().

trickle(S, <<B, Rest/binary>>, Sent) ->
    case gen_tcp:send(S, <<B>>) of
        ok ->
            case gen_tcp:recv(S, 0, 100) of
                {error, timeout} -> trickle(S, Rest, Sent + 1);
                _ -> gen_tcp:close(S), Sent + 1
            end;
        {error, _} ->
            Sent
    end;
trickle(S, <<>>, Sent) ->
    gen_tcp:close(S),
    Sent.

%% A listener without proxy_protocol takes a PROXY header as the client's
%% data: on TCP it is echoed back as it came and conn() has no `proxy';
%% under TLS it is where a ClientHello should be: a failed handshake.
without_proxy_protocol_a_header_is_data(Config) ->
    Port = listener(Config, #{proxy_protocol => false}),
    Header = <<"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\n">>,
    case ?config(transport, Config) of
        ssl ->
            {_, End} = raw_until_closed(Port, [Header]),
            closed_by_server(End),
            sluice_test_lib:wait_info(?config(name, Config), connections, 0, 2000),
            ?assertEqual({1, 0}, {reason_count(Config, handshake_error),
                                  reason_count(Config, proxy_error)}),
            no_handler_called();
        _ ->
            {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
            ok = gen_tcp:send(S, Header),
            ?assertEqual(Header, sluice_test_lib:recv_exactly(S, byte_size(Header), 5000)),
            {Conn, _} = reported(),
            ?assertEqual(false, maps:is_key(proxy, Conn)),
            gen_tcp:close(S)
    end.
