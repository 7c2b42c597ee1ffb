%% @doc The PROXY protocol's version 1 (text) header, for
%% sluice_proxy_header: `PROXY TCP4|TCP6 Src Dst SrcPort DstPort\r\n' or
%% `PROXY UNKNOWN ...\r\n', at most 107 bytes with its CRLF. Addresses and
%% ports are read as the specification writes them: IPv4 as four decimal
%% numbers without leading zeros, IPv6 as hexadecimal groups (`::' allowed),
%% ports as decimal numbers without leading zeros; one space between
%% fields; a lone CR or LF is an error. An IPv6 address may end in a dotted
%% IPv4 tail (`::ffff:192.0.2.1'): the specification writes hexadecimal
%% groups only, but haproxy writes its addresses with inet_ntop(3), which
%% gives IPv4-mapped ones that way (a `v4v6' bind relaying IPv4 clients
%% over IPv6, or one IPv4 and one IPv6 side), and reads them back with
%% inet_pton(3). encode/1 writes hexadecimal groups only.
%% @private
-module(sluice_proxy_header_v1).

-export([parse/1, encode/1]).

-define(MAX_LINE, 107).
%% The shortest line, `PROXY UNKNOWN\r\n'.
-define(MIN_LINE, 15).

%% @doc Parses a buffer that begins with (a prefix of) `PROXY '; see
%% sluice_proxy_header:parse/2.
-spec parse(binary()) -> {ok, sluice_proxy_header:header(), binary()}
                             | {more, pos_integer()} | {error, term()}.
parse(Bin) ->
    Scope = min(byte_size(Bin), ?MAX_LINE),
    case binary:match(Bin, [<<"\r">>, <<"\n">>], [{scope, {0, Scope}}]) of
        {At, 1} when binary_part(Bin, At, 1) =:= <<"\n">> ->
            {error, {bad_v1, bad_line_end}};
        {At, 1} when At + 2 > ?MAX_LINE ->
            {error, {bad_v1, line_too_long}};
        {At, 1} when At + 1 =:= byte_size(Bin) ->
            partial(binary:part(Bin, 0, At), byte_size(Bin), 1);
        {At, 1} ->
            case Bin of
                <<Line:At/binary, "\r\n", Rest/binary>> -> line(Line, Rest);
                _ -> {error, {bad_v1, bad_line_end}}
            end;
        nomatch when byte_size(Bin) + 2 > ?MAX_LINE ->
            {error, {bad_v1, line_too_long}};
        nomatch ->
            partial(Bin, byte_size(Bin), 2)
    end.

%% An incomplete line (Part, before any CR, of a Size-byte buffer): an
%% error already if Part cannot start a valid line, else at least Min more
%% bytes (the rest of its CRLF), and enough for the shortest line.
partial(Part, Size, Min) ->
    case could_be(Part) of
        true -> {more, max(Min, ?MIN_LINE - Size)};
        false -> {error, {bad_v1, bad_syntax}}
    end.

could_be(Part) when byte_size(Part) =< 6 ->
    prefix(Part, <<"PROXY ">>);
could_be(<<"PROXY UNKNOWN", _/binary>>) ->
    true;
could_be(<<"PROXY ", Proto:4/binary, " ", Fields/binary>>)
  when Proto =:= <<"TCP4">>; Proto =:= <<"TCP6">> ->
    lists:all(fun(C) -> field_char(Proto, C) end, binary_to_list(Fields));
could_be(<<"PROXY ", Proto/binary>>) ->
    lists:any(fun(P) -> prefix(Proto, P) end, [<<"TCP4 ">>, <<"TCP6 ">>, <<"UNKNOWN">>]);
could_be(_) ->
    false.

prefix(Part, Whole) ->
    byte_size(Part) =< byte_size(Whole) andalso binary:part(Whole, 0, byte_size(Part)) =:= Part.

field_char(_, $\s) -> true;
field_char(_, C) when C >= $0, C =< $9 -> true;
field_char(<<"TCP4">>, $.) -> true;
field_char(<<"TCP6">>, C) when C >= $a, C =< $f; C >= $A, C =< $F; C =:= $:; C =:= $. -> true;
field_char(_, _) -> false.

%% A whole line, without its CRLF.
line(<<"PROXY UNKNOWN", More/binary>>, Rest)
  when More =:= <<>>; binary_part(More, 0, 1) =:= <<" ">> ->
    %% What follows UNKNOWN is to be ignored.
    {ok, #{version => 1, command => proxy, transport => unknown}, Rest};
line(Line, Rest) ->
    case binary:split(Line, <<" ">>, [global]) of
        [<<"PROXY">>, Proto, Src, Dst, SrcPort, DstPort]
          when Proto =:= <<"TCP4">>; Proto =:= <<"TCP6">> ->
            Family = case Proto of <<"TCP4">> -> inet; <<"TCP6">> -> inet6 end,
            case {address(Family, Src), address(Family, Dst), port(SrcPort), port(DstPort)} of
                {{ok, S}, {ok, D}, {ok, SP}, {ok, DP}} ->
                    Transport = case Family of inet -> tcp4; inet6 -> tcp6 end,
                    {ok, #{version => 1, command => proxy, transport => Transport,
                           source => {S, SP}, destination => {D, DP}}, Rest};
                {{error, _}, _, _, _} -> {error, {bad_v1, {bad_address, Src}}};
                {_, {error, _}, _, _} -> {error, {bad_v1, {bad_address, Dst}}};
                {_, _, {error, _}, _} -> {error, {bad_v1, {bad_port, SrcPort}}};
                {_, _, _, {error, _}} -> {error, {bad_v1, {bad_port, DstPort}}}
            end;
        _ ->
            {error, {bad_v1, bad_syntax}}
    end.

address(inet, Bin) ->
    case binary:split(Bin, <<".">>, [global]) of
        Parts = [_, _, _, _] ->
            case [decimal(P, 255) || P <- Parts] of
                [{ok, A}, {ok, B}, {ok, C}, {ok, D}] -> {ok, {A, B, C, D}};
                _ -> {error, bad_address}
            end;
        _ ->
            {error, bad_address}
    end;
address(inet6, Bin) ->
    Hex = lists:all(fun(C) -> field_char(<<"TCP6">>, C) andalso C =/= $\s end,
                    binary_to_list(Bin)),
    case Hex andalso inet:parse_ipv6strict_address(binary_to_list(Bin)) of
        {ok, IP} -> {ok, IP};
        _ -> {error, bad_address}
    end.

port(Bin) -> decimal(Bin, 65535).

%% A decimal number up to Max, without leading zeros.
decimal(<<"0">>, _Max) ->
    {ok, 0};
decimal(<<D, _/binary>> = Bin, Max) when D >= $1, D =< $9, byte_size(Bin) =< 5 ->
    case lists:all(fun(C) -> C >= $0 andalso C =< $9 end, binary_to_list(Bin)) of
        true ->
            case binary_to_integer(Bin) of
                N when N =< Max -> {ok, N};
                _ -> {error, too_large}
            end;
        false ->
            {error, not_decimal}
    end;
decimal(_, _) ->
    {error, not_decimal}.

%% @doc The line for a header (transport `tcp4', `tcp6' or `unknown').
-spec encode(sluice_proxy_header:header()) -> binary().
encode(#{transport := unknown}) ->
    <<"PROXY UNKNOWN\r\n">>;
encode(#{transport := T, source := {SIP, SPort}, destination := {DIP, DPort}})
  when T =:= tcp4; T =:= tcp6 ->
    Proto = case T of tcp4 -> "TCP4"; tcp6 -> "TCP6" end,
    iolist_to_binary(["PROXY ", Proto, " ", ntoa(T, SIP), " ", ntoa(T, DIP), " ",
                      integer_to_list(SPort), " ", integer_to_list(DPort), "\r\n"]).

ntoa(tcp4, {_, _, _, _} = IP) ->
    inet:ntoa(IP);
ntoa(tcp6, {_, _, _, _, _, _, _, _} = IP) ->
    %% inet:ntoa/1 writes some addresses with a dotted IPv4 tail
    %% (::ffff:1.2.3.4), which version 1 does not allow.
    case inet:ntoa(IP) of
        S when is_list(S) ->
            case lists:member($., S) of
                false -> S;
                true -> lists:join(":", [integer_to_list(G, 16) || G <- tuple_to_list(IP)])
            end
    end.
