%% @doc gen_tcp's socket options in terms of OTP's `socket' module, for the
%% socket backend (sluice_transport_socket): listeners take the same option
%% names on both backends.
%%
%% Options that exist only in the inet driver's user-space queue
%% (`high_watermark', `low_watermark', `high_msgq_watermark',
%% `low_msgq_watermark', `delay_send', `send_timeout_close') are accepted
%% and have no effect: the socket backend has no such queue. `send_timeout'
%% is applied by the caller, not by the socket.
%% @private
-module(sluice_socket_opts).

-export([set/2, get/2, address/1, sockaddr/2, steps/1, not_inherited_on_local/1]).

-define(DRIVER_ONLY, [high_watermark, low_watermark, high_msgq_watermark,
                      low_msgq_watermark, delay_send, send_timeout_close,
                      send_timeout]).

%% @doc Set gen_tcp-style options; stops at the first that fails, with
%% `{error, {Reason, Option}}'; an unknown one is `{error, {badopt, Opt}}'.
-spec set(socket:socket(), [term()]) -> ok | {error, term()}.
set(_S, []) ->
    ok;
set(S, [Opt | Rest]) ->
    case set1(S, Opt) of
        ok -> set(S, Rest);
        {error, Reason} -> {error, {Reason, Opt}}
    end.

set1(S, {raw, Level, Name, Value}) ->
    socket:setopt_native(S, {Level, Name}, Value);
set1(S, {linger, {OnOff, Secs}}) ->
    socket:setopt(S, {socket, linger}, #{onoff => OnOff, linger => Secs});
set1(S, {K, V}) ->
    case lists:member(K, ?DRIVER_ONLY) of
        true -> ok;
        false ->
            case level_name(K) of
                {ok, LN} -> socket:setopt(S, LN, V);
                error -> {error, badopt}
            end
    end;
set1(_S, _Opt) ->
    {error, badopt}.

%% @doc Read gen_tcp-style options (names as for set/2).
-spec get(socket:socket(), [atom()]) -> {ok, [{atom(), term()}]} | {error, term()}.
get(S, Names) ->
    get(S, Names, []).

get(_S, [], Acc) ->
    {ok, lists:reverse(Acc)};
get(S, [linger | Rest], Acc) ->
    case socket:getopt(S, {socket, linger}) of
        {ok, #{onoff := On, linger := Secs}} -> get(S, Rest, [{linger, {On, Secs}} | Acc]);
        {error, R} -> {error, {R, linger}}
    end;
get(S, [K | Rest], Acc) ->
    case level_name(K) of
        {ok, LN} ->
            case socket:getopt(S, LN) of
                {ok, V} -> get(S, Rest, [{K, value(K, V)} | Acc]);
                {error, R} -> {error, {R, K}}
            end;
        error ->
            {error, {badopt, K}}
    end.

%% The NIF names four type-of-service values (RFC 1349's), where gen_tcp
%% reads the byte.
value(tos, lowdelay) -> 16;
value(tos, throughput) -> 8;
value(tos, reliability) -> 4;
value(tos, mincost) -> 2;
value(_K, V) -> V.

level_name(buffer) -> {ok, {otp, rcvbuf}};
level_name(recbuf) -> {ok, {socket, rcvbuf}};
level_name(sndbuf) -> {ok, {socket, sndbuf}};
level_name(nodelay) -> {ok, {tcp, nodelay}};
level_name(keepalive) -> {ok, {socket, keepalive}};
level_name(priority) -> {ok, {socket, priority}};
level_name(reuseaddr) -> {ok, {socket, reuseaddr}};
level_name(reuseport) -> {ok, {socket, reuseport}};
level_name(tos) -> {ok, {ip, tos}};
level_name(_) -> error.

%% @doc A `socket' address map as gen_tcp gives it: `{IP, Port}', or
%% `{local, Path}' for a Unix socket.
-spec address({ok, socket:sockaddr()} | {error, term()}) ->
          {ok, sluice:address()} | {error, term()}.
address({ok, #{addr := IP, port := Port}}) -> {ok, {IP, Port}};
address({ok, #{family := local, path := Path}}) -> {ok, {local, iolist_to_binary(Path)}};
address({ok, Other}) -> {error, {unsupported_address, Other}};
address({error, _} = E) -> E.

%% @doc `{IP, Port}' as a `socket' address map (a Unix socket's path: no
%% port).
-spec sockaddr(inet:ip_address() | {local, binary()} | any | loopback, inet:port_number()) ->
          socket:sockaddr_in() | socket:sockaddr_in6() | socket:sockaddr_un().
sockaddr({local, Path}, _Port) -> #{family => local, path => Path};
sockaddr(any, Port) -> #{family => inet, addr => any, port => Port};
sockaddr(loopback, Port) -> #{family => inet, addr => loopback, port => Port};
sockaddr(IP, Port) when tuple_size(IP) =:= 4 -> #{family => inet, addr => IP, port => Port};
sockaddr(IP, Port) when tuple_size(IP) =:= 8 -> #{family => inet6, addr => IP, port => Port}.

%% @doc The listener's socket options that a socket accepted on a Unix
%% socket does not inherit from its listen socket (Linux copies the
%% socket-level ones only for TCP: keepalive, linger and the buffer sizes
%% read back as the kernel's defaults), for the transport to set on each
%% one. `priority' is not among them: the transports set it on every
%% accepted socket, TCP's too.
-spec not_inherited_on_local([term()]) -> [term()].
not_inherited_on_local(SocketOpts) ->
    [O || O <- SocketOpts,
          case O of
              {K, _} -> lists:member(K, [recbuf, sndbuf, keepalive, linger]);
              _ -> element(1, O) =:= raw
          end].

%% @doc Runs socket set-up steps in order until one fails: each returns
%% `ok' (or `true' for a step skipped by a guard) or `{error, _}'.
-spec steps([fun(() -> ok | true | {error, term()})]) -> ok | {error, term()}.
steps([]) -> ok;
steps([F | Rest]) ->
    case F() of
        ok -> steps(Rest);
        true -> steps(Rest);
        {error, _} = E -> E
    end.
