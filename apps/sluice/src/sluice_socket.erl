%% @doc gen_tcp's API on OTP's `socket' NIF, usable on its own (outside
%% sluice listeners): `listen', `accept', `connect', `send', `recv',
%% `setopts'/`getopts', `controlling_process', `close', `shutdown',
%% `peername', `sockname'. Active modes deliver gen_tcp's messages
%% (`{tcp, S, Data}', `{tcp_passive, S}', `{tcp_closed, S}',
%% `{tcp_error, S, Reason}') with `S' the sluice_socket handle.
%%
%% Differences from gen_tcp, on purpose or not (sluice_socket_SUITE runs
%% the same cases on both and shows them):
%% <ul>
%%  <li>Active modes cost a reader process per socket (sluice_socket_reader)
%%      and a process hop per chunk read: the NIF sends its select message
%%      to whoever called recv, not to the owner. A sluice listener does
%%      not use this module's active modes: its connection process reads
%%      for itself (sluice_transport_socket).</li>
%%  <li>Only `{packet, raw}' (or 0) framing; `binary'/`list' modes.</li>
%%  <li>Options of the inet driver's own queue (watermarks, delay_send)
%%      are accepted and do nothing (sluice_socket_opts).</li>
%% </ul>
%% @private
-module(sluice_socket).

-export([listen/2, accept/1, accept/2, connect/3, connect/4, send/2, recv/2, recv/3,
         setopts/2, getopts/2, controlling_process/2, close/1, shutdown/2,
         peername/1, sockname/1, socket/1]).

-export_type([socket/0]).

-opaque socket() :: {sluice_socket, socket:socket()}.

%% What gen_tcp sets by default on a new socket.
-define(DEFAULTS, #{active => true, mode => list, reader => undefined}).

%%% ------------------------------------------------------------------
%%% Creating sockets
%%% ------------------------------------------------------------------

%% @doc As gen_tcp:listen/2; accepted sockets inherit `active' and the
%% mode (`binary'/`list') as they do with gen_tcp.
-spec listen(inet:port_number(), [term()]) -> {ok, socket()} | {error, term()}.
listen(Port, Opts0) ->
    {Own, Opts} = split_opts(Opts0),
    IP = proplists:get_value(ip, Opts, any),
    Family = family(IP, Opts),
    Backlog = proplists:get_value(backlog, Opts, 5),
    SockOpts = [O || O <- Opts, not is_addr_opt(O)],
    case socket:open(Family, stream, tcp) of
        {ok, L} ->
            Result = sluice_socket_opts:steps([fun() -> sluice_socket_opts:set(L, SockOpts) end,
                            fun() -> socket:bind(L, bind_addr(Family, IP, Port)) end,
                            fun() -> socket:listen(L, Backlog) end,
                            fun() -> socket:setopt(L, {otp, meta}, Own#{reader => undefined}) end]),
            wrap(L, Result);
        Error ->
            Error
    end.

-spec accept(socket()) -> {ok, socket()} | {error, term()}.
accept(L) ->
    accept(L, infinity).

-spec accept(socket(), timeout()) -> {ok, socket()} | {error, term()}.
accept({sluice_socket, L}, Timeout) ->
    case socket:accept(L, Timeout) of
        {ok, S} ->
            {ok, Inherited} = socket:getopt(L, {otp, meta}),
            start(S, Inherited#{reader => undefined});
        Error ->
            Error
    end.

%% @doc As gen_tcp:connect/3,4: `Address' is an IP tuple, a host name or
%% `localhost'.
-spec connect(inet:socket_address() | inet:hostname(), inet:port_number(), [term()]) ->
          {ok, socket()} | {error, term()}.
connect(Address, Port, Opts) ->
    connect(Address, Port, Opts, infinity).

-spec connect(inet:socket_address() | inet:hostname(), inet:port_number(), [term()], timeout()) ->
          {ok, socket()} | {error, term()}.
connect(Address, Port, Opts0, Timeout) ->
    {Own, Opts} = split_opts(Opts0),
    Family = family(Address, Opts),
    case inet:getaddr(Address, Family) of
        {ok, IP} ->
            SockOpts = [O || O <- Opts, not is_addr_opt(O)],
            case socket:open(Family, stream, tcp) of
                {ok, S} ->
                    Local = proplists:get_value(ip, Opts, undefined),
                    Result = sluice_socket_opts:steps([fun() -> sluice_socket_opts:set(S, SockOpts) end,
                                    fun() -> Local =:= undefined orelse
                                                 socket:bind(S, bind_addr(Family, Local, 0)) end,
                                    fun() -> socket:connect(S, sluice_socket_opts:sockaddr(IP, Port),
                                                            Timeout) end]),
                    case Result of
                        ok -> start(S, Own#{reader => undefined});
                        Error -> _ = socket:close(S), Error
                    end;
                Error ->
                    Error
            end;
        Error ->
            Error
    end.

%% A connected socket: its metadata, and a reader if it starts active.
start(S, Meta = #{active := false}) ->
    ok = socket:setopt(S, {otp, meta}, Meta),
    {ok, {sluice_socket, S}};
start(S, Meta = #{active := Active, mode := Mode}) ->
    Reader = sluice_socket_reader:start({sluice_socket, S}, self(), Mode, Active),
    ok = socket:setopt(S, {otp, meta}, Meta#{reader := Reader}),
    {ok, {sluice_socket, S}}.

wrap(S, ok) -> {ok, {sluice_socket, S}};
wrap(S, Error) -> _ = socket:close(S), Error.

%% The options this module keeps itself (delivery and mode); the rest go
%% to the socket.
split_opts(Opts) ->
    lists:foldl(fun(binary, {Own, Rest}) -> {Own#{mode := binary}, Rest};
                   (list, {Own, Rest}) -> {Own#{mode := list}, Rest};
                   ({mode, M}, {Own, Rest}) -> {Own#{mode := M}, Rest};
                   ({active, A}, {Own, Rest}) -> {Own#{active := A}, Rest};
                   ({packet, P}, Acc) when P =:= raw; P =:= 0 -> Acc;
                   (O, {Own, Rest}) -> {Own, Rest ++ [O]}
                end, {maps:remove(reader, ?DEFAULTS), []}, Opts).

is_addr_opt({ip, _}) -> true;
is_addr_opt({ifaddr, _}) -> true;
is_addr_opt({backlog, _}) -> true;
is_addr_opt(inet) -> true;
is_addr_opt(inet6) -> true;
is_addr_opt(_) -> false.

family(IP, _Opts) when is_tuple(IP), tuple_size(IP) =:= 8 -> inet6;
family(_, Opts) ->
    case lists:member(inet6, Opts) of
        true -> inet6;
        false -> inet
    end.

bind_addr(Family, any, Port) -> #{family => Family, addr => any, port => Port};
bind_addr(_Family, IP, Port) -> sluice_socket_opts:sockaddr(IP, Port).

%%% ------------------------------------------------------------------
%%% Data
%%% ------------------------------------------------------------------

-spec send(socket(), iodata()) -> ok | {error, term()}.
send({sluice_socket, S}, Data) ->
    case socket:send(S, Data) of
        ok -> ok;
        {error, {Reason, _Rest}} -> {error, Reason};
        {error, _} = E -> E
    end.

-spec recv(socket(), non_neg_integer()) -> {ok, binary() | string()} | {error, term()}.
recv(Sock, Len) ->
    recv(Sock, Len, infinity).

%% @doc As gen_tcp:recv/3: only in passive mode (`{error, einval}' else).
-spec recv(socket(), non_neg_integer(), timeout()) -> {ok, binary() | string()} | {error, term()}.
recv({sluice_socket, S}, Len, Timeout) ->
    Meta = #{mode := Mode} = meta(S),
    case own_value(active, S, Meta) of
        false ->
            case socket:recv(S, Len, Timeout) of
                {ok, Data} -> {ok, as(Mode, Data)};
                {error, {Reason, _Partial}} -> {error, Reason};
                {error, _} = E -> E
            end;
        _ ->
            {error, einval}
    end.

as(binary, Data) -> Data;
as(list, Data) -> binary_to_list(Data).

%%% ------------------------------------------------------------------
%%% Options and ownership
%%% ------------------------------------------------------------------

%% @doc As inet:setopts/2 (`{active, N}' adds to a count in progress, as
%% with gen_tcp).
-spec setopts(socket(), [term()]) -> ok | {error, term()}.
setopts({sluice_socket, S} = Sock, Opts) ->
    case [P || {packet, P} <- Opts, P =/= raw, P =/= 0] of
        [_ | _] ->
            {error, einval};
        [] ->
            Meta0 = meta(S),
            Meta = lists:foldl(fun own_opt/2, Meta0, Opts),
            case sluice_socket_opts:set(S, [O || O <- Opts, own_opt(O, none) =:= none]) of
                ok when Meta =:= Meta0 -> ok;
                ok -> delivery(Sock, Meta);
                Error -> Error
            end
    end.

%% `set' marks that the caller named `active' (an `{active, N}' equal to
%% the one in progress still adds to it).
own_opt(binary, M) when is_map(M) -> M#{mode := binary};
own_opt(list, M) when is_map(M) -> M#{mode := list};
own_opt({mode, X}, M) when is_map(M) -> M#{mode := X};
own_opt({active, A}, M) when is_map(M) -> M#{active := A, set => make_ref()};
own_opt({packet, _}, M) when is_map(M) -> M;
own_opt(binary, none) -> own;
own_opt(list, none) -> own;
own_opt({K, _}, none) when K =:= mode; K =:= active; K =:= packet -> own;
own_opt(_, M) -> M.

delivery({sluice_socket, S}, Meta0 = #{reader := undefined, active := false}) ->
    socket:setopt(S, {otp, meta}, maps:remove(set, Meta0));
delivery({sluice_socket, S} = Sock, Meta0 = #{reader := undefined}) ->
    Meta = #{active := Active, mode := Mode} = maps:remove(set, Meta0),
    Reader = sluice_socket_reader:start(Sock, self(), Mode, Active),
    socket:setopt(S, {otp, meta}, Meta#{reader := Reader});
delivery({sluice_socket, S}, Meta0 = #{reader := Reader, mode := Mode}) ->
    %% With a reader, `active' is the reader's to keep (`once' and `N' run
    %% out there); it changes only when the caller named it. Synchronous:
    %% once it returns, a passive recv/3 does not race the reader for data.
    Active = case Meta0 of
                 #{set := _, active := A} -> A;
                 _ -> keep
             end,
    ok = sluice_socket_reader:set(Reader, Mode, Active),
    socket:setopt(S, {otp, meta}, maps:remove(set, Meta0)).

%% @doc As inet:getopts/2, for active, mode, packet, binary and the socket
%% options of sluice_socket_opts.
-spec getopts(socket(), [atom()]) -> {ok, [{atom(), term()}]} | {error, term()}.
getopts({sluice_socket, S}, Names) ->
    Meta = meta(S),
    {Own, Rest} = lists:partition(fun(N) -> lists:member(N, [active, mode, packet]) end, Names),
    case sluice_socket_opts:get(S, Rest) of
        {ok, Values} ->
            OwnValues = [{N, own_value(N, S, Meta)} || N <- Own],
            {ok, [{N, proplists:get_value(N, OwnValues ++ Values)} || N <- Names]};
        Error ->
            Error
    end.

own_value(active, _S, #{reader := undefined, active := A}) -> A;
own_value(active, _S, #{reader := Reader}) -> sluice_socket_reader:active(Reader);
own_value(mode, _S, #{mode := M}) -> M;
own_value(packet, _S, _) -> raw.

%% @doc As gen_tcp:controlling_process/2: called by the owner; the chunks
%% already delivered to it and not yet received go to the new owner, in
%% order, before any new one.
-spec controlling_process(socket(), pid()) -> ok | {error, term()}.
controlling_process({sluice_socket, S} = Sock, Pid) ->
    case socket:setopt(S, {otp, controlling_process}, Pid) of
        ok ->
            case meta(S) of
                #{reader := undefined} ->
                    ok;
                #{reader := Reader} ->
                    ok = sluice_socket_reader:hold(Reader),
                    forward(Sock, Pid),
                    sluice_socket_reader:owner(Reader, Pid)
            end;
        {error, {invalid, not_owner}} ->
            {error, not_owner};
        Error ->
            Error
    end.

forward(Sock, Pid) ->
    receive
        {tcp, Sock, _} = M -> Pid ! M, forward(Sock, Pid);
        {tcp_passive, Sock} = M -> Pid ! M, forward(Sock, Pid);
        {tcp_closed, Sock} = M -> Pid ! M, forward(Sock, Pid);
        {tcp_error, Sock, _} = M -> Pid ! M, forward(Sock, Pid)
    after 0 ->
            ok
    end.

-spec close(socket()) -> ok.
close({sluice_socket, S}) ->
    case catch meta(S) of
        #{reader := Reader} when is_pid(Reader) -> sluice_socket_reader:stop(Reader);
        _ -> ok
    end,
    _ = socket:close(S),
    ok.

-spec shutdown(socket(), read | write | read_write) -> ok | {error, term()}.
shutdown({sluice_socket, S}, How) ->
    socket:shutdown(S, How).

-spec peername(socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
peername({sluice_socket, S}) ->
    sluice_socket_opts:address(socket:peername(S)).

-spec sockname(socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
sockname({sluice_socket, S}) ->
    sluice_socket_opts:address(socket:sockname(S)).

%% @doc The underlying `socket:socket()', for what this module lacks.
-spec socket(socket()) -> socket:socket().
socket({sluice_socket, S}) ->
    S.

meta(S) ->
    case socket:getopt(S, {otp, meta}) of
        {ok, M} when is_map(M) -> M;
        _ -> ?DEFAULTS
    end.
