%% @doc The PROXY protocol's version 2 (binary) header, for
%% sluice_proxy_header: a 12-byte signature, version and command, family
%% and protocol, a 16-bit length, then that many bytes of addresses and
%% TLVs.
%%
%% What is read from the address block:
%% <ul>
%%  <li>`LOCAL': nothing. The block, family included, is ignored, as the
%%      specification says (the connection's own endpoints apply).</li>
%%  <li>`PROXY' with AF_INET or AF_INET6 and STREAM or DGRAM: the addresses
%%      and ports, then the TLVs.</li>
%%  <li>`PROXY' with AF_UNIX: the two 108-byte paths, returned as
%%      `{local, Path}' (the bytes before the first NUL), then the TLVs.</li>
%%  <li>`PROXY' with AF_UNSPEC or protocol UNSPEC: nothing (transport
%%      `unspec'); the block is ignored, its layout being unknown.</li>
%% </ul>
%% TLVs are returned in order, duplicates kept: `{alpn, Bin}',
%% `{authority, Bin}', `{crc32c, Int}' (checked: a mismatch is an error),
%% `{noop, Bin}', `{unique_id, Bin}' (at most 128 bytes), `{ssl, #{client,
%% verify, tlvs}}' (client: the bit field, 1 = SSL, 2 = certificate on this
%% connection, 4 = certificate in this session; tlvs: `{version | cn |
%% cipher | sig_alg | key_alg, Bin}' or `{Type, Bin}'), `{netns, Bin}', and
%% any other as `{Type, Bin}'.
%% @private
-module(sluice_proxy_header_v2).

-export([signature/0, parse/2, encode/1]).

-define(SIG, 16#0D, 16#0A, 16#0D, 16#0A, 16#00, 16#0D, 16#0A, 16#51, 16#55, 16#49, 16#54, 16#0A).

%% @doc The 12 bytes every version 2 header begins with.
-spec signature() -> binary().
signature() -> <<?SIG>>.

%% @doc Parses a buffer that begins with (a prefix of) the signature; see
%% sluice_proxy_header:parse/2.
-spec parse(binary(), pos_integer()) -> {ok, sluice_proxy_header:header(), binary()}
                                            | {more, pos_integer()} | {error, term()}.
parse(<<?SIG, Ver:4, Cmd:4, Fam:4, Proto:4, Len:16, Rest/binary>> = Bin, Max) ->
    Total = 16 + Len,
    case first_bytes(Ver, Cmd, Fam, Proto) of
        ok when Total > Max -> {error, {too_large, Total, Max}};
        ok when byte_size(Rest) < Len -> {more, Len - byte_size(Rest)};
        ok ->
            <<Header:Total/binary, After/binary>> = Bin,
            <<_:16/binary, Block/binary>> = Header,
            case block(Cmd, Fam, Proto, Block, Header) of
                {ok, H} -> {ok, H, After};
                {error, _} = E -> E
            end;
        Error ->
            Error
    end;
parse(Bin, _Max) ->
    %% Fewer than 16 bytes: check what is there.
    Sig = <<?SIG>>,
    Known = min(byte_size(Bin), 12),
    case binary:part(Bin, 0, Known) =:= binary:part(Sig, 0, Known) of
        false ->
            {error, not_proxy_header};
        true ->
            Checked = case Bin of
                          <<_:12/binary, Ver:4, Cmd:4, Fam:4, Proto:4, _/binary>> ->
                              first_bytes(Ver, Cmd, Fam, Proto);
                          <<_:12/binary, Ver:4, Cmd:4>> ->
                              first_bytes(Ver, Cmd, 0, 0);
                          _ ->
                              ok
                      end,
            case Checked of
                ok -> {more, 16 - byte_size(Bin)};
                Error -> Error
            end
    end.

%% The version, the command, and (for PROXY) the family and the protocol.
first_bytes(Ver, _, _, _) when Ver =/= 2 -> {error, {bad_version, Ver}};
first_bytes(_, Cmd, _, _) when Cmd > 1 -> {error, {bad_command, Cmd}};
first_bytes(_, 0, _, _) -> ok;
first_bytes(_, _, Fam, _) when Fam > 3 -> {error, {bad_family, Fam}};
first_bytes(_, _, _, Proto) when Proto > 2 -> {error, {bad_protocol, Proto}};
first_bytes(_, _, _, _) -> ok.

block(0, _Fam, _Proto, _Block, _Header) ->
    {ok, #{version => 2, command => local, transport => unspec, tlvs => []}};
block(1, Fam, Proto, _Block, _Header) when Fam =:= 0; Proto =:= 0 ->
    {ok, #{version => 2, command => proxy, transport => unspec, tlvs => []}};
block(1, Fam, Proto, Block, Header) ->
    case addresses(Fam, Block) of
        {ok, Src, Dst, TLVs} ->
            case tlvs(TLVs, Header) of
                {ok, List} ->
                    {ok, #{version => 2, command => proxy, transport => transport(Fam, Proto),
                           source => Src, destination => Dst, tlvs => List}};
                {error, _} = E ->
                    E
            end;
        error ->
            {error, {bad_address_length, byte_size(Block)}}
    end.

addresses(1, <<A:4/binary, B:4/binary, SP:16, DP:16, TLVs/binary>>) ->
    {ok, {ip(A), SP}, {ip(B), DP}, TLVs};
addresses(2, <<A:16/binary, B:16/binary, SP:16, DP:16, TLVs/binary>>) ->
    {ok, {ip(A), SP}, {ip(B), DP}, TLVs};
addresses(3, <<A:108/binary, B:108/binary, TLVs/binary>>) ->
    {ok, {local, path(A)}, {local, path(B)}, TLVs};
addresses(_, _) ->
    error.

ip(<<A, B, C, D>>) -> {A, B, C, D};
ip(<<A:16, B:16, C:16, D:16, E:16, F:16, G:16, H:16>>) -> {A, B, C, D, E, F, G, H}.

path(Bin) ->
    case binary:match(Bin, <<0>>) of
        {At, 1} -> binary:part(Bin, 0, At);
        nomatch -> Bin
    end.

transport(1, 1) -> tcp4;
transport(1, 2) -> udp4;
transport(2, 1) -> tcp6;
transport(2, 2) -> udp6;
transport(3, 1) -> unix_stream;
transport(3, 2) -> unix_dgram.

%% The TLVs after the addresses; Header, the whole header, is what a
%% CRC32C TLV covers.
tlvs(Bin, Header) ->
    tlvs(Bin, Header, byte_size(Header) - byte_size(Bin), []).

tlvs(<<>>, _Header, _At, Acc) ->
    {ok, lists:reverse(Acc)};
tlvs(<<Type, Len:16, Value:Len/binary, Rest/binary>>, Header, At, Acc) ->
    case tlv(Type, Value, Header, At + 3) of
        {ok, TLV} -> tlvs(Rest, Header, At + 3 + Len, [TLV | Acc]);
        {error, _} = E -> E
    end;
tlvs(_, _Header, _At, _Acc) ->
    {error, {bad_tlv, truncated}}.

%% At: where the value begins in Header.
tlv(16#01, V, _, _) -> {ok, {alpn, V}};
tlv(16#02, V, _, _) -> {ok, {authority, V}};
tlv(16#03, <<Crc:32>>, Header, At) ->
    <<Before:At/binary, _:32, After/binary>> = Header,
    case sluice_crc32c:crc32c([Before, <<0:32>>, After]) of
        Crc -> {ok, {crc32c, Crc}};
        _ -> {error, crc32c_mismatch}
    end;
tlv(16#03, _, _, _) -> {error, {bad_tlv, crc32c}};
tlv(16#04, V, _, _) -> {ok, {noop, V}};
tlv(16#05, V, _, _) when byte_size(V) =< 128 -> {ok, {unique_id, V}};
tlv(16#05, _, _, _) -> {error, {bad_tlv, unique_id}};
tlv(16#20, <<Client, Verify:32, Subs/binary>>, _, _) ->
    case sub_tlvs(Subs, []) of
        {ok, List} -> {ok, {ssl, #{client => Client, verify => Verify, tlvs => List}}};
        error -> {error, {bad_tlv, ssl}}
    end;
tlv(16#20, _, _, _) -> {error, {bad_tlv, ssl}};
tlv(16#30, V, _, _) -> {ok, {netns, V}};
tlv(Type, V, _, _) -> {ok, {Type, V}}.

sub_tlvs(<<>>, Acc) ->
    {ok, lists:reverse(Acc)};
sub_tlvs(<<Type, Len:16, Value:Len/binary, Rest/binary>>, Acc) ->
    sub_tlvs(Rest, [{sub_name(Type), Value} | Acc]);
sub_tlvs(_, _Acc) ->
    error.

sub_name(16#21) -> version;
sub_name(16#22) -> cn;
sub_name(16#23) -> cipher;
sub_name(16#24) -> sig_alg;
sub_name(16#25) -> key_alg;
sub_name(Type) -> Type.

sub_type(version) -> 16#21;
sub_type(cn) -> 16#22;
sub_type(cipher) -> 16#23;
sub_type(sig_alg) -> 16#24;
sub_type(key_alg) -> 16#25;
sub_type(Type) when is_integer(Type) -> Type.

%% @doc The header for a map as parse/2 returns (`tlvs' optional); the
%% first `{crc32c, _}' TLV gets the header's checksum, whatever its value.
-spec encode(sluice_proxy_header:header()) -> binary().
encode(H = #{command := local}) ->
    finish(<<16#20, 0>>, <<>>, maps:get(tlvs, H, []));
encode(H = #{command := proxy, transport := unspec}) ->
    finish(<<16#21, 0>>, <<>>, maps:get(tlvs, H, []));
encode(H = #{command := proxy, transport := T, source := Src, destination := Dst}) ->
    {Fam, Proto} = fam_proto(T),
    finish(<<16#21, Fam:4, Proto:4>>, address_block(Fam, Src, Dst), maps:get(tlvs, H, [])).

fam_proto(tcp4) -> {1, 1};
fam_proto(udp4) -> {1, 2};
fam_proto(tcp6) -> {2, 1};
fam_proto(udp6) -> {2, 2};
fam_proto(unix_stream) -> {3, 1};
fam_proto(unix_dgram) -> {3, 2}.

address_block(1, {{A, B, C, D}, SP}, {{E, F, G, H}, DP}) ->
    <<A, B, C, D, E, F, G, H, SP:16, DP:16>>;
address_block(2, {S, SP}, {D, DP}) when tuple_size(S) =:= 8, tuple_size(D) =:= 8 ->
    <<(<< <<X:16>> || X <- tuple_to_list(S) >>)/binary,
      (<< <<X:16>> || X <- tuple_to_list(D) >>)/binary, SP:16, DP:16>>;
address_block(3, {local, S}, {local, D}) when byte_size(S) =< 108, byte_size(D) =< 108 ->
    <<S/binary, 0:(108 - byte_size(S))/unit:8, D/binary, 0:(108 - byte_size(D))/unit:8>>.

finish(VerFam, Addresses, TLVs) ->
    Encoded = [encode_tlv(T) || T <- TLVs],
    Body = iolist_to_binary([Addresses | Encoded]),
    Header = <<?SIG, VerFam/binary, (byte_size(Body)):16, Body/binary>>,
    case crc_at(TLVs, Encoded, 16 + byte_size(Addresses)) of
        none ->
            Header;
        At ->
            %% The checksum covers the header with its own bytes zero, as
            %% encode_tlv/1 wrote them.
            Crc = sluice_crc32c:crc32c(Header),
            <<Before:At/binary, 0:32, After/binary>> = Header,
            <<Before/binary, Crc:32, After/binary>>
    end.

%% Where the (first) CRC32C TLV's value is in the header.
crc_at([{crc32c, _} | _], _, Offset) -> Offset + 3;
crc_at([_ | TLVs], [E | Es], Offset) -> crc_at(TLVs, Es, Offset + byte_size(E));
crc_at([], [], _Offset) -> none.

encode_tlv({alpn, V}) -> tlv_bin(16#01, V);
encode_tlv({authority, V}) -> tlv_bin(16#02, V);
encode_tlv({crc32c, _}) -> tlv_bin(16#03, <<0:32>>);
encode_tlv({noop, V}) -> tlv_bin(16#04, V);
encode_tlv({unique_id, V}) -> tlv_bin(16#05, V);
encode_tlv({ssl, #{client := Client, verify := Verify} = Ssl}) ->
    Subs = [tlv_bin(sub_type(T), V) || {T, V} <- maps:get(tlvs, Ssl, [])],
    tlv_bin(16#20, iolist_to_binary([<<Client, Verify:32>> | Subs]));
encode_tlv({netns, V}) -> tlv_bin(16#30, V);
encode_tlv({Type, V}) when is_integer(Type), Type >= 0, Type =< 255 -> tlv_bin(Type, V).

tlv_bin(Type, V) ->
    Bin = iolist_to_binary(V),
    <<Type, (byte_size(Bin)):16, Bin/binary>>.
