%% @doc Reads the PROXY protocol header (v1 or v2) that a load balancer
%% sends ahead of the client's bytes, when the listener has
%% `proxy_protocol => true'. Called by the connection process before any
%% handshake, on the raw socket; sluice_proxy_header parses.
%%
%% The header must arrive whole within `proxy_timeout' and be no larger
%% than `proxy_max_size' (a v2 header announcing more is refused as soon as
%% its length is read). Whatever the read brought after the header is the
%% client's: it is returned as the prefix of the stream. A client that
%% closes before its first byte is `peer_closed': a load balancer's TCP
%% health check, not a bad header.
%% @private
-module(sluice_proxy).

-export([read/3]).

%% @doc `{ok, none, <<>>}' when the listener expects no header;
%% `{error, peer_closed}' when the client closed (or reset) the
%% connection without sending a byte.
-spec read(module(), sluice_transport:socket(), map()) ->
          {ok, none | sluice_proxy_header:header(), binary()} | {error, term()}.
read(_T, _Sock, #{proxy_protocol := false}) ->
    {ok, none, <<>>};
read(T, Sock, #{proxy_protocol := true, proxy_timeout := Timeout, proxy_max_size := Max}) ->
    %% The timeout is for the whole header, not for each read, so a client
    %% trickling it is cut off in time too.
    read(T, Sock, <<>>, sluice_deadline:at(Timeout), #{max_size => Max}).

read(T, Sock, Buf, Deadline, Opts) ->
    case sluice_proxy_header:parse(Buf, Opts) of
        {ok, Header, Rest} ->
            label(Header),
            {ok, Header, Rest};
        {more, _} ->
            case sluice_deadline:left(Deadline) of
                0 ->
                    {error, timeout};
                Left ->
                    case T:recv(Sock, 0, Left) of
                        {ok, Data} -> read(T, Sock, <<Buf/binary, Data/binary>>, Deadline, Opts);
                        {error, Reason} when Buf =:= <<>> -> {error, nothing_sent(Reason)};
                        {error, Reason} -> {error, Reason}
                    end
            end;
        {error, Reason} ->
            {error, Reason}
    end.

%% A connection that ended before its first byte was closed by its client
%% (gen_tcp and socket say `closed' for a reset too, unless asked for
%% `econnreset'; haproxy closes its checks with one).
nothing_sent(closed) -> peer_closed;
nothing_sent(econnreset) -> peer_closed;
nothing_sent(Reason) -> Reason.

%% The client's real addresses go into this process's logger metadata, so
%% that whatever the connection logs (a handler's lines, a crash report)
%% names them.
label(#{source := Source, destination := Destination}) ->
    logger:update_process_metadata(#{proxy_source => Source,
                                     proxy_destination => Destination});
label(_LocalOrUnknown) ->
    ok.
