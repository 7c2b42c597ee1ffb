%% sluice_proxy_header as PropEr properties: any valid header (either
%% version, any transport, any TLVs) encodes to bytes that parse back to
%% it, with whatever follows left over, and every shorter prefix of them
%% asks for more (never more than the rest of the header); a v2 length
%% over max_size is refused as soon as it is read; random bytes, and
%% valid headers with a byte changed, give a result, never an exception.
-module(sluice_proxy_header_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% PropEr's macros, spelled out as in sluice_ack_SUITE (Debian's
%% erlang-proper ships no proper.hrl).
-define(FORALL(X, RawType, Prop), proper:forall(RawType, fun(X) -> Prop end)).
-define(LET(X, RawType, Gen), proper_types:bind(RawType, fun(X) -> Gen end, false)).
-define(SUCHTHAT(X, RawType, Cond), proper_types:add_constraint(RawType, fun(X) -> Cond end, true)).
-define(WHENFAIL(Action, Prop), proper:whenfail(fun() -> Action end, fun() -> Prop end)).
-import(proper_types, [binary/0, binary/1, frequency/1, integer/2, list/1, oneof/1]).

-export([all/0, suite/0]).
-export([any_header_parses_back_and_its_prefixes_ask_for_more/1,
         v2_length_over_max_is_refused_once_read/1,
         random_bytes_give_a_result/1,
         a_changed_byte_gives_a_result/1]).

-define(NUMTESTS, 500).
-define(SIG, 16#0D, 16#0A, 16#0D, 16#0A, 16#00, 16#0D, 16#0A, 16#51, 16#55, 16#49, 16#54, 16#0A).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [any_header_parses_back_and_its_prefixes_ask_for_more,
     v2_length_over_max_is_refused_once_read,
     random_bytes_give_a_result, a_changed_byte_gives_a_result].

check(Prop) ->
    ?assertEqual(true, proper:quickcheck(Prop, [{numtests, ?NUMTESTS}, {to_file, user}])).

%%% ------------------------------------------------------------------
%%% Generators
%%% ------------------------------------------------------------------

header() ->
    oneof([v1(), v2()]).

v1() ->
    oneof([#{version => 1, command => proxy, transport => unknown},
           ?LET({S, D}, {{ip4(), port()}, {ip4(), port()}},
                #{version => 1, command => proxy, transport => tcp4,
                  source => S, destination => D}),
           ?LET({S, D}, {{ip6(), port()}, {ip6(), port()}},
                #{version => 1, command => proxy, transport => tcp6,
                  source => S, destination => D})]).

v2() ->
    frequency(
      [{1, #{version => 2, command => local, transport => unspec, tlvs => []}},
       {1, #{version => 2, command => proxy, transport => unspec, tlvs => []}},
       {8, ?LET({T, TLVs}, {oneof([tcp4, udp4, tcp6, udp6, unix_stream, unix_dgram]), tlvs()},
                ?LET({S, D}, {address(T), address(T)},
                     #{version => 2, command => proxy, transport => T, source => S,
                       destination => D, tlvs => TLVs}))}]).

address(T) when T =:= tcp4; T =:= udp4 -> {ip4(), port()};
address(T) when T =:= tcp6; T =:= udp6 -> {ip6(), port()};
address(_) -> {local, ?LET(B, binary(), binary:replace(B, <<0>>, <<"x">>, [global]))}.

ip4() -> {byte(), byte(), byte(), byte()}.
%% Runs of zeros, for the `::' forms.
ip6() -> list_to_tuple([oneof([0, 0, integer(0, 65535)]) || _ <- lists:seq(1, 8)]).
port() -> oneof([0, 65535, integer(0, 65535)]).
byte() -> integer(0, 255).

%% TLVs, with at most one CRC32C.
tlvs() ->
    ?LET({TLVs, Crc}, {list(tlv()), oneof([none, integer(0, 5)])},
         case Crc of
             none -> TLVs;
             At -> {Before, After} = lists:split(min(At, length(TLVs)), TLVs),
                   Before ++ [{crc32c, 0} | After]
         end).

tlv() ->
    oneof([{alpn, binary()}, {authority, binary()}, {noop, binary()}, {netns, binary()},
           {unique_id, ?LET(N, integer(0, 128), binary(N))},
           {?SUCHTHAT(T, byte(), not lists:member(T, [1, 2, 3, 4, 5, 16#20, 16#30])), binary()},
           ?LET({Client, Verify, Subs}, {byte(), integer(0, 16#ffffffff), list(sub_tlv())},
                {ssl, #{client => Client, verify => Verify, tlvs => Subs}})]).

sub_tlv() ->
    {oneof([version, cn, cipher, sig_alg, key_alg,
            ?SUCHTHAT(T, byte(), T < 16#21 orelse T > 16#25)]),
     binary()}.

%% A parsed CRC32C TLV carries the header's checksum, not the 0 encode/1
%% was given.
same(#{tlvs := A} = H1, #{tlvs := B} = H2) ->
    H1#{tlvs := [no_crc(T) || T <- A]} =:= H2#{tlvs := [no_crc(T) || T <- B]};
same(H1, H2) ->
    H1 =:= H2.

no_crc({crc32c, _}) -> crc32c;
no_crc(T) -> T.

-define(PARSE_OPTS, #{max_size => 65551}).

%%% ------------------------------------------------------------------
%%% Properties
%%% ------------------------------------------------------------------

%% Whole, the header parses to itself and leaves what follows; cut
%% anywhere before its end it asks for N more bytes, 1 =< N =< what is
%% missing.
any_header_parses_back_and_its_prefixes_ask_for_more(_Config) ->
    check(?FORALL({H, After}, {header(), binary()},
                  begin
                      Bin = sluice_proxy_header:encode(H),
                      Size = byte_size(Bin),
                      Whole = sluice_proxy_header:parse(<<Bin/binary, After/binary>>, ?PARSE_OPTS),
                      WholeOk = case Whole of
                                    {ok, Parsed, After} -> same(H, Parsed);
                                    _ -> false
                                end,
                      Prefixes = [{K, sluice_proxy_header:parse(binary:part(Bin, 0, K),
                                                                ?PARSE_OPTS)}
                                  || K <- lists:seq(0, Size - 1)],
                      BadPrefixes = [{K, R} || {K, R} <- Prefixes,
                                               not (is_tuple(R) andalso element(1, R) =:= more
                                                    andalso element(2, R) >= 1
                                                    andalso element(2, R) =< Size - K)],
                      ?WHENFAIL(ct:pal("header ~p~nbytes ~p~nwhole ~p~nbad prefixes ~p",
                                       [H, Bin, Whole, BadPrefixes]),
                                WholeOk andalso BadPrefixes =:= [])
                  end)).

%% A v2 header whose length says more than max_size is refused with the
%% 16th byte, however much of it has come, and asks for more before.
v2_length_over_max_is_refused_once_read(_Config) ->
    check(?FORALL({Max, Excess, Body, Fam},
                  {integer(16, 1000), integer(1, 1000), binary(), oneof([16#11, 16#21, 16#00])},
                  begin
                      Len = Max - 16 + Excess,
                      Bin = <<?SIG, 16#21, Fam, Len:16, Body/binary>>,
                      Results = [sluice_proxy_header:parse(binary:part(Bin, 0, K),
                                                           #{max_size => Max})
                                 || K <- lists:seq(1, byte_size(Bin))],
                      {Short, Long} = lists:split(15, Results),
                      ?WHENFAIL(ct:pal("~p", [Results]),
                                lists:all(fun({more, _}) -> true; (_) -> false end, Short)
                                andalso lists:all(
                                          fun(R) -> R =:= {error, {too_large, Len + 16, Max}} end,
                                          Long))
                  end)).

%% Random bytes, alone or after a valid start of either version.
random_bytes_give_a_result(_Config) ->
    check(?FORALL({Start, Bytes},
                  {oneof([<<>>, <<"PROXY ">>, <<"PROXY TCP4 ">>, <<"PROXY TCP6 ">>, <<?SIG>>,
                          <<?SIG, 16#21>>, <<?SIG, 16#21, 16#11>>, <<?SIG, 16#21, 16#31, 0, 216>>]),
                   binary()},
                  result(sluice_proxy_header:parse(<<Start/binary, Bytes/binary>>, ?PARSE_OPTS)))).

%% A valid header with one byte changed.
a_changed_byte_gives_a_result(_Config) ->
    check(?FORALL({H, Where, Xor}, {header(), integer(0, 1000), integer(1, 255)},
                  begin
                      Bin = sluice_proxy_header:encode(H),
                      I = Where rem byte_size(Bin),
                      <<Before:I/binary, B, After/binary>> = Bin,
                      Changed = <<Before/binary, (B bxor Xor), After/binary>>,
                      result(sluice_proxy_header:parse(Changed, ?PARSE_OPTS))
                  end)).

result({ok, #{version := _}, Rest}) when is_binary(Rest) -> true;
result({more, N}) when is_integer(N), N >= 1 -> true;
result({error, _}) -> true;
result(_) -> false.
