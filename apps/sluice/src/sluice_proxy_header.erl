%% @doc The PROXY protocol header (haproxy's proxy-protocol.txt), versions
%% 1 (text) and 2 (binary): what a load balancer sends first on a
%% connection to say whom it relays.
%%
%% parse/1,2 takes the bytes received so far and returns the header and
%% the bytes after it, or how many more bytes it needs at least, or why
%% they cannot be a header. It is meant to be called on each read until it
%% returns `ok' or `error': bytes that cannot begin a header are refused as
%% soon as they are seen (the first byte already, when it is neither `P'
%% nor the v2 signature's), and a v2 header announcing more than
%% `max_size' bytes is refused when its length field arrives, before its
%% bytes are awaited.
%%
%% The header, a map:
%% <ul>
%%  <li>`version': 1 or 2;</li>
%%  <li>`command': `proxy' (version 1 always), or `local' (version 2: the
%%      proxy's own connection, e.g. a health check; use the socket's
%%      endpoints);</li>
%%  <li>`transport': `tcp4', `tcp6', `udp4', `udp6', `unix_stream',
%%      `unix_dgram'; `unknown' (v1 `UNKNOWN') or `unspec' (v2 `LOCAL', or
%%      AF_UNSPEC): no addresses, use the socket's endpoints;</li>
%%  <li>`source', `destination': `{IP, Port}', or `{local, Path}' for
%%      AF_UNIX (v2 only), present when the transport carries them;</li>
%%  <li>`tlvs' (version 2): the TLVs in order (sluice_proxy_header_v2 lists
%%      them); a CRC32C TLV is checked.</li>
%% </ul>
%%
%% Errors: `not_proxy_header'; version 1: `{bad_v1, Why}' with Why
%% `line_too_long', `bad_line_end', `bad_syntax', `{bad_address, Bin}',
%% `{bad_port, Bin}'; version 2: `{too_large, Size, Max}', `{bad_version,
%% V}', `{bad_command, C}', `{bad_family, F}', `{bad_protocol, P}',
%% `{bad_address_length, Len}', `{bad_tlv, Which}', `crc32c_mismatch'.
-module(sluice_proxy_header).

-export([parse/1, parse/2, encode/1]).

-export_type([header/0, address/0, transport/0, tlv/0]).

-type address() :: {inet:ip_address(), inet:port_number()} | {local, binary()}.
-type transport() :: tcp4 | tcp6 | udp4 | udp6 | unix_stream | unix_dgram | unknown | unspec.
-type tlv() :: {alpn | authority | noop | unique_id | netns, binary()}
             | {crc32c, non_neg_integer()}
             | {ssl, #{client := byte(), verify := non_neg_integer(),
                       tlvs => [{atom() | byte(), binary()}]}}
             | {byte(), binary()}.
-type header() :: #{version := 1 | 2,
                    command := proxy | local,
                    transport := transport(),
                    source => address(),
                    destination => address(),
                    tlvs => [tlv()]}.

-define(DEFAULT_MAX_SIZE, 4096).
%% The shortest header, v1's `PROXY UNKNOWN\r\n'.
-define(MIN_SIZE, 15).

%% @doc parse/2 with the default `max_size' (4096 bytes).
-spec parse(binary()) -> {ok, header(), binary()} | {more, pos_integer()} | {error, term()}.
parse(Bin) ->
    parse(Bin, #{}).

%% @doc The header at the start of `Bin' and the bytes after it; or
%% `{more, N}': `Bin' is the start of a header that needs at least N more
%% bytes; or `{error, Reason}'. Option `max_size': the largest v2 header
%% accepted, in bytes (16 to 65551); a v1 header is at most 107 bytes.
-spec parse(binary(), #{max_size => pos_integer()}) ->
          {ok, header(), binary()} | {more, pos_integer()} | {error, term()}.
parse(Bin, Opts) when is_binary(Bin), is_map(Opts) ->
    Max = case maps:get(max_size, Opts, ?DEFAULT_MAX_SIZE) of
              M when is_integer(M), M >= 16, M =< 65551 -> M;
              _ -> error(badarg, [Bin, Opts])
          end,
    case Bin of
        <<>> -> {more, ?MIN_SIZE};
        <<"P", _/binary>> -> sluice_proxy_header_v1:parse(Bin);
        <<16#0D, _/binary>> -> sluice_proxy_header_v2:parse(Bin, Max);
        _ -> {error, not_proxy_header}
    end.

%% @doc The header's bytes: version 1 for `tcp4', `tcp6' or `unknown',
%% version 2 for any transport, as `version' says. Raises `badarg' for a
%% map parse/2 could not return.
-spec encode(header()) -> binary().
encode(H = #{version := 1, command := proxy}) ->
    try sluice_proxy_header_v1:encode(H)
    catch error:_ -> error(badarg, [H])
    end;
encode(H = #{version := 2}) ->
    try sluice_proxy_header_v2:encode(H)
    catch error:_ -> error(badarg, [H])
    end;
encode(H) ->
    error(badarg, [H]).
