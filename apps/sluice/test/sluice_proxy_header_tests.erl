%% EUnit examples of sluice_proxy_header: the specification's examples
%% (haproxy's proxy-protocol.txt) in both versions, every kind of malformed
%% header, the size bounds, `more' answers on partial headers, encode/1,
%% and sluice_crc32c against published check values. The PropEr
%% properties are in sluice_proxy_header_SUITE.
-module(sluice_proxy_header_tests).
-include_lib("eunit/include/eunit.hrl").

-define(SIG, 16#0D, 16#0A, 16#0D, 16#0A, 16#00, 16#0D, 16#0A, 16#51, 16#55, 16#49, 16#54, 16#0A).

parse(Bin) -> sluice_proxy_header:parse(Bin).

%%% ------------------------------------------------------------------
%%% Version 1
%%% ------------------------------------------------------------------

%% The specification's example, before an HTTP request.
v1_spec_example_test() ->
    ?assertEqual({ok, #{version => 1, command => proxy, transport => tcp4,
                        source => {{192, 168, 0, 1}, 56324},
                        destination => {{192, 168, 0, 11}, 443}},
                  <<"GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n">>},
                 parse(<<"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
                         "GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n">>)).

%% The specification's longest lines are accepted: 56, 104, 15 and 107
%% bytes.
v1_longest_lines_test() ->
    ?assertMatch({ok, #{transport := tcp4, source := {{255, 255, 255, 255}, 65535}}, <<>>},
                 parse(<<"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n">>)),
    F = <<"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff">>,
    Tcp6 = <<"PROXY TCP6 ", F/binary, " ", F/binary, " 65535 65535\r\n">>,
    ?assertEqual(104, byte_size(Tcp6)),
    ?assertMatch({ok, #{transport := tcp6, destination := {{65535, 65535, 65535, 65535, 65535,
                                                             65535, 65535, 65535}, 65535}}, <<>>},
                 parse(Tcp6)),
    ?assertEqual({ok, #{version => 1, command => proxy, transport => unknown}, <<"x">>},
                 parse(<<"PROXY UNKNOWN\r\nx">>)),
    Worst = <<"PROXY UNKNOWN ", F/binary, " ", F/binary, " 65535 65535\r\n">>,
    ?assertEqual(107, byte_size(Worst)),
    ?assertMatch({ok, #{transport := unknown}, <<>>}, parse(Worst)),
    %% One byte longer, or no CRLF within 107 bytes: refused.
    ?assertEqual({error, {bad_v1, line_too_long}},
                 parse(<<"PROXY UNKNOWN ", F/binary, "f ", F/binary, " 65535 65535\r\n">>)),
    ?assertEqual({more, 1}, parse(binary:part(Worst, 0, 106))),
    ?assertEqual({error, {bad_v1, line_too_long}},
                 parse(<<"PROXY UNKNOWN ", (binary:copy(<<"f">>, 92))/binary>>)).

v1_ipv6_forms_test() ->
    ?assertMatch({ok, #{source := {{0, 0, 0, 0, 0, 0, 0, 1}, 0},
                        destination := {{16#2001, 16#db8, 0, 0, 0, 0, 0, 16#AB}, 1}}, <<>>},
                 parse(<<"PROXY TCP6 ::1 2001:DB8::ab 0 1\r\n">>)).

%% IPv4-mapped addresses as haproxy writes them (inet_ntop(3): a dotted
%% IPv4 tail), when it relays an IPv4 client over IPv6 (a `v4v6' bind) or
%% mixes the families: read, not refused. A bad tail still is.
v1_ipv4_mapped_tcp6_test() ->
    Line = <<"PROXY TCP6 ::ffff:192.0.2.1 ::ffff:198.51.100.7 56324 443\r\n">>,
    ?assertEqual({ok, #{version => 1, command => proxy, transport => tcp6,
                        source => {{0, 0, 0, 0, 0, 16#ffff, 16#c000, 16#0201}, 56324},
                        destination => {{0, 0, 0, 0, 0, 16#ffff, 16#c633, 16#6407}, 443}},
                  <<"x">>},
                 parse(<<Line/binary, "x">>)),
    %% Every prefix of it asks for more.
    [?assertMatch({more, _}, parse(binary:part(Line, 0, N))) || N <- lists:seq(0, byte_size(Line) - 1)],
    [?assertEqual({error, {bad_v1, {bad_address, A}}},
                  parse(<<"PROXY TCP6 ", A/binary, " ::1 1 2\r\n">>))
     || A <- [<<"::ffff:1.2.3">>, <<"::ffff:01.2.3.4">>, <<"::ffff:1.2.3.256">>,
              <<"1.2.3.4">>, <<"::ffff:1.2.3.4.5">>]].

v1_malformed_test() ->
    Bad = fun(Line) -> parse(<<Line/binary, "\r\n">>) end,
    [?assertEqual({error, {bad_v1, Why}}, Bad(Line)) || {Line, Why} <-
        [{<<"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3">>, bad_syntax},
         {<<"PROXY TCP4 1.2.3.4  5.6.7.8 1 2">>, bad_syntax},
         {<<"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2">>, bad_syntax},
         {<<"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ">>, bad_syntax},
         {<<"PROXY TCP5 1.2.3.4 5.6.7.8 1 2">>, bad_syntax},
         {<<"PROXY tcp4 1.2.3.4 5.6.7.8 1 2">>, bad_syntax},
         {<<"PROXY UNKNOWNX">>, bad_syntax},
         {<<"PROXY">>, bad_syntax},
         {<<"PROXY ">>, bad_syntax},
         {<<"PROXY TCP4 1.2.3.4 5.6.7.8 1">>, bad_syntax},
         {<<"PROXY TCP4 1.2.3 5.6.7.8 1 2">>, {bad_address, <<"1.2.3">>}},
         {<<"PROXY TCP4 1.2.3.4 5.6.7.256 1 2">>, {bad_address, <<"5.6.7.256">>}},
         {<<"PROXY TCP4 01.2.3.4 5.6.7.8 1 2">>, {bad_address, <<"01.2.3.4">>}},
         {<<"PROXY TCP4 ::1 5.6.7.8 1 2">>, {bad_address, <<"::1">>}},
         {<<"PROXY TCP6 1.2.3.4 ::1 1 2">>, {bad_address, <<"1.2.3.4">>}},
         {<<"PROXY TCP6 ::1 1::2::3 1 2">>, {bad_address, <<"1::2::3">>}},
         {<<"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2">>, {bad_port, <<"65536">>}},
         {<<"PROXY TCP4 1.2.3.4 5.6.7.8 1 02">>, {bad_port, <<"02">>}},
         {<<"PROXY TCP4 1.2.3.4 5.6.7.8 1 -2">>, {bad_port, <<"-2">>}}]].

%% The line must end with CRLF: a lone LF, or a CR followed by anything
%% else, is refused.
v1_line_end_test() ->
    ?assertEqual({error, {bad_v1, bad_line_end}}, parse(<<"PROXY UNKNOWN\n">>)),
    ?assertEqual({error, {bad_v1, bad_line_end}}, parse(<<"PROXY UNKNOWN\rx\n">>)),
    ?assertEqual({error, {bad_v1, bad_line_end}}, parse(<<"PROXY UNKNOWN\r\r\n">>)).

%% Partial lines: how much more at least; garbage as soon as it shows.
v1_partial_test() ->
    ?assertEqual({more, 15}, parse(<<>>)),
    ?assertEqual({more, 14}, parse(<<"P">>)),
    ?assertEqual({more, 2}, parse(<<"PROXY UNKNOWN">>)),
    ?assertEqual({more, 1}, parse(<<"PROXY UNKNOWN\r">>)),
    ?assertEqual({more, 2}, parse(<<"PROXY TCP4 192.168.0.1 192.168.0.11 56324 44">>)),
    ?assertEqual({more, 1}, parse(<<"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r">>)),
    [?assertEqual({error, {bad_v1, bad_syntax}}, parse(B))
     || B <- [<<"PX">>, <<"PXXXXXXXXX">>, <<"PROXY_">>, <<"PROXY TCP5">>, <<"PROXY UNKN0">>,
              <<"PROXY TCP4 1.2.3.x">>, <<"PROXY TCP6 ::g">>, <<"PROXY TCP4 1\t">>]],
    ?assertEqual({error, not_proxy_header}, parse(<<"GET / HTTP/1.1\r\n">>)),
    ?assertEqual({error, not_proxy_header}, parse(<<22, 3, 1>>)).

v1_encode_test() ->
    ?assertEqual(<<"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n">>,
                 sluice_proxy_header:encode(#{version => 1, command => proxy, transport => tcp4,
                                              source => {{192, 168, 0, 1}, 56324},
                                              destination => {{192, 168, 0, 11}, 443}})),
    ?assertEqual(<<"PROXY UNKNOWN\r\n">>,
                 sluice_proxy_header:encode(#{version => 1, command => proxy,
                                              transport => unknown})),
    %% No dotted tail in an IPv6 address.
    Mapped = {0, 0, 0, 0, 0, 16#ffff, 16#0102, 16#0304},
    H6 = #{version => 1, command => proxy, transport => tcp6,
           source => {Mapped, 1}, destination => {{0, 0, 0, 0, 0, 0, 0, 1}, 2}},
    E6 = sluice_proxy_header:encode(H6),
    ?assertEqual(nomatch, binary:match(E6, <<".">>)),
    ?assertEqual({ok, H6, <<>>}, parse(E6)),
    ?assertError(badarg, sluice_proxy_header:encode(#{version => 1, command => proxy,
                                                      transport => udp4})),
    ?assertError(badarg, sluice_proxy_header:encode(#{version => 1, command => local,
                                                      transport => unknown})).

%%% ------------------------------------------------------------------
%%% Version 2
%%% ------------------------------------------------------------------

%% The specification's TCP4 example in version 2, with a CRC32C TLV whose
%% value was computed by an independent (bitwise, not table-driven)
%% implementation, and an AUTHORITY TLV; then an HTTP request.
v2_tcp4_example_test() ->
    Header = <<?SIG, 16#21, 16#11, 16#00, 16#21,
               192, 168, 0, 1, 192, 168, 0, 11, 16#DC, 16#04, 16#01, 16#BB,
               16#03, 16#00, 16#04, 16#CC, 16#5B, 16#C6, 16#6B,
               16#02, 16#00, 16#0B, "example.com">>,
    Expected = #{version => 2, command => proxy, transport => tcp4,
                 source => {{192, 168, 0, 1}, 56324}, destination => {{192, 168, 0, 11}, 443},
                 tlvs => [{crc32c, 16#CC5BC66B}, {authority, <<"example.com">>}]},
    ?assertEqual({ok, Expected, <<"GET / HTTP/1.1\r\n">>},
                 parse(<<Header/binary, "GET / HTTP/1.1\r\n">>)),
    ?assertEqual(Header,
                 sluice_proxy_header:encode(Expected#{tlvs := [{crc32c, 0},
                                                              {authority, <<"example.com">>}]})),
    %% A changed address, port, checksum or TLV value byte: the checksum
    %% no longer matches.
    [?assertEqual({error, crc32c_mismatch}, parse(flip(Header, I)))
     || I <- lists:seq(16, 27) ++ lists:seq(31, 34) ++ lists:seq(38, 48)],
    ?assertEqual({error, {bad_version, 6}}, parse(flip(Header, 12))),
    ?assertEqual({error, {bad_family, 5}}, parse(flip(Header, 13))).

flip(Bin, I) ->
    <<Before:I/binary, B, After/binary>> = Bin,
    <<Before/binary, (B bxor 16#40), After/binary>>.

v2_tcp6_udp_unix_test() ->
    IP6 = <<16#20, 16#01, 16#0d, 16#b8, 0:96>>,
    ?assertEqual({ok, #{version => 2, command => proxy, transport => tcp6,
                        source => {{16#2001, 16#db8, 0, 0, 0, 0, 0, 0}, 1},
                        destination => {{0, 0, 0, 0, 0, 0, 0, 1}, 2}, tlvs => []}, <<>>},
                 parse(<<?SIG, 16#21, 16#21, 0, 36, IP6/binary, 0:120, 1, 1:16, 2:16>>)),
    ?assertMatch({ok, #{transport := udp4, source := {{10, 0, 0, 1}, 53}}, <<>>},
                 parse(<<?SIG, 16#21, 16#12, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 53:16, 53:16>>)),
    ?assertMatch({ok, #{transport := udp6}, <<>>},
                 parse(<<?SIG, 16#21, 16#22, 0, 36, 0:288>>)),
    Path = fun(P) -> <<P/binary, 0:(108 - byte_size(P))/unit:8>> end,
    ?assertEqual({ok, #{version => 2, command => proxy, transport => unix_stream,
                        source => {local, <<"/run/a.sock">>}, destination => {local, <<"/b">>},
                        tlvs => [{noop, <<>>}]}, <<>>},
                 parse(<<?SIG, 16#21, 16#31, 0, 219, (Path(<<"/run/a.sock">>))/binary,
                         (Path(<<"/b">>))/binary, 4, 0:16>>)),
    ?assertMatch({ok, #{transport := unix_dgram}, <<>>},
                 parse(<<?SIG, 16#21, 16#32, 0, 216, 0:1728>>)).

%% LOCAL: the block, family included, is ignored; so is an UNSPEC
%% family or protocol with PROXY.
v2_local_and_unspec_test() ->
    Local = #{version => 2, command => local, transport => unspec, tlvs => []},
    ?assertEqual({ok, Local, <<"x">>}, parse(<<?SIG, 16#20, 16#00, 0, 0, "x">>)),
    ?assertEqual({ok, Local, <<>>}, parse(<<?SIG, 16#20, 16#11, 0, 12, 1:96>>)),
    ?assertEqual({ok, Local, <<>>}, parse(<<?SIG, 16#20, 16#FF, 0, 3, "abc">>)),
    Unspec = #{version => 2, command => proxy, transport => unspec, tlvs => []},
    ?assertEqual({ok, Unspec, <<>>}, parse(<<?SIG, 16#21, 16#00, 0, 0>>)),
    ?assertEqual({ok, Unspec, <<>>}, parse(<<?SIG, 16#21, 16#10, 0, 5, "stuff">>)),
    ?assertEqual(<<?SIG, 16#20, 0, 0, 0>>, sluice_proxy_header:encode(Local)).

v2_tlvs_test() ->
    Ssl = <<1, 0:32, 16#21, 7:16, "TLSv1.3", 16#22, 11:16, "example.com", 16#23, 3:16, "AES",
            16#24, 3:16, "RSA", 16#25, 3:16, "EC2", 16#26, 1:16, "?">>,
    TLVs = <<1, 2:16, "h2", 2, 1:16, "a", 4, 3:16, 0:24, 5, 2:16, "id", 16#20, (byte_size(Ssl)):16,
             Ssl/binary, 16#30, 2:16, "ns", 16#E0, 1:16, "c">>,
    Bin = <<?SIG, 16#21, 16#11, (12 + byte_size(TLVs)):16, 0:96, TLVs/binary>>,
    Expected = [{alpn, <<"h2">>}, {authority, <<"a">>}, {noop, <<0:24>>}, {unique_id, <<"id">>},
                {ssl, #{client => 1, verify => 0,
                        tlvs => [{version, <<"TLSv1.3">>}, {cn, <<"example.com">>},
                                 {cipher, <<"AES">>}, {sig_alg, <<"RSA">>}, {key_alg, <<"EC2">>},
                                 {16#26, <<"?">>}]}},
                {netns, <<"ns">>}, {16#E0, <<"c">>}],
    {ok, H = #{tlvs := Got}, <<>>} = parse(Bin),
    ?assertEqual(Expected, Got),
    ?assertEqual(Bin, sluice_proxy_header:encode(H)).

v2_malformed_test() ->
    V2 = fun(VerCmd, Fam, Block) ->
                 parse(<<?SIG, VerCmd, Fam, (byte_size(Block)):16, Block/binary>>)
         end,
    ?assertEqual({error, {bad_version, 1}}, V2(16#11, 16#11, <<0:96>>)),
    ?assertEqual({error, {bad_version, 3}}, V2(16#31, 16#11, <<0:96>>)),
    ?assertEqual({error, {bad_command, 2}}, V2(16#22, 16#11, <<0:96>>)),
    ?assertEqual({error, {bad_family, 4}}, V2(16#21, 16#41, <<0:96>>)),
    ?assertEqual({error, {bad_protocol, 3}}, V2(16#21, 16#13, <<0:96>>)),
    ?assertEqual({error, {bad_address_length, 11}}, V2(16#21, 16#11, <<0:88>>)),
    ?assertEqual({error, {bad_address_length, 35}}, V2(16#21, 16#21, <<0:280>>)),
    ?assertEqual({error, {bad_address_length, 215}}, V2(16#21, 16#31, <<0:1720>>)),
    ?assertEqual({error, {bad_tlv, truncated}}, V2(16#21, 16#11, <<0:96, 1, 0:8>>)),
    ?assertEqual({error, {bad_tlv, truncated}}, V2(16#21, 16#11, <<0:96, 1, 5:16, "abcd">>)),
    ?assertEqual({error, {bad_tlv, crc32c}}, V2(16#21, 16#11, <<0:96, 3, 3:16, 0:24>>)),
    ?assertEqual({error, crc32c_mismatch}, V2(16#21, 16#11, <<0:96, 3, 4:16, 0:32>>)),
    ?assertEqual({error, {bad_tlv, unique_id}}, V2(16#21, 16#11, <<0:96, 5, 129:16, 0:1032>>)),
    ?assertEqual({error, {bad_tlv, ssl}}, V2(16#21, 16#11, <<0:96, 16#20, 4:16, 0:32>>)),
    ?assertEqual({error, {bad_tlv, ssl}},
                 V2(16#21, 16#11, <<0:96, 16#20, 7:16, 1, 0:32, 16#21, 0>>)).

%% The length field is checked against max_size as soon as it arrives,
%% without waiting for the bytes it announces.
v2_size_bound_test() ->
    Head = <<?SIG, 16#21, 16#11, 16#FF, 16#FF>>,
    ?assertEqual({error, {too_large, 65551, 4096}}, parse(Head)),
    ?assertEqual({more, 65535}, sluice_proxy_header:parse(Head, #{max_size => 65551})),
    ?assertEqual({error, {too_large, 116, 100}},
                 sluice_proxy_header:parse(<<?SIG, 16#21, 16#11, 0, 100>>, #{max_size => 100})),
    ?assertError(badarg, sluice_proxy_header:parse(Head, #{max_size => 15})).

%% Partial v2 headers: the exact rest once the length is known, at least
%% the fixed part before; a wrong signature byte, version or command at
%% once.
v2_partial_test() ->
    Sig = <<?SIG>>,
    [?assertEqual({more, 16 - N}, parse(binary:part(Sig, 0, N))) || N <- lists:seq(1, 12)],
    ?assertEqual({more, 3}, parse(<<Sig/binary, 16#21>>)),
    ?assertEqual({more, 12}, parse(<<Sig/binary, 16#21, 16#11, 0, 12>>)),
    ?assertEqual({more, 2}, parse(<<Sig/binary, 16#21, 16#11, 0, 12, 0:80>>)),
    ?assertEqual({error, not_proxy_header}, parse(<<16#0D, 16#0A, 16#0D, 16#0B>>)),
    ?assertEqual({error, not_proxy_header},
                 parse(<<16#0D, 16#0A, 16#0D, 16#0A, 16#00, 16#0D, 16#0A, 16#52>>)),
    ?assertEqual({error, {bad_version, 1}}, parse(<<Sig/binary, 16#11>>)),
    ?assertEqual({error, {bad_command, 15}}, parse(<<Sig/binary, 16#2F>>)),
    ?assertEqual({error, {bad_family, 5}}, parse(<<Sig/binary, 16#21, 16#51>>)).

%%% ------------------------------------------------------------------
%%% CRC-32C
%%% ------------------------------------------------------------------

%% The check value and RFC 3720 B.4's vectors; erlang:crc32/1 differs.
crc32c_test() ->
    ?assertEqual(16#E3069283, sluice_crc32c:crc32c(<<"123456789">>)),
    ?assertEqual(16#8A9136AA, sluice_crc32c:crc32c(<<0:256>>)),
    ?assertEqual(16#62A8AB43, sluice_crc32c:crc32c(binary:copy(<<255>>, 32))),
    ?assertEqual(16#46DD794E, sluice_crc32c:crc32c(list_to_binary(lists:seq(0, 31)))),
    ?assertEqual(16#113FDB5C, sluice_crc32c:crc32c(list_to_binary(lists:seq(31, 0, -1)))),
    ?assertNotEqual(erlang:crc32(<<"123456789">>), sluice_crc32c:crc32c(<<"123456789">>)),
    ?assertEqual(sluice_crc32c:crc32c(<<"123456789">>),
                 sluice_crc32c:crc32c(sluice_crc32c:crc32c(<<"1234">>), [<<"56">>, "789"])).
