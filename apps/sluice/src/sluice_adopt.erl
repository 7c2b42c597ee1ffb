%% @doc A connected socket handed to a running listener (sluice:adopt/3),
%% in the caller, its owner: the checks that leave the socket with the
%% caller when they fail, the listener's admission, the socket's own
%% messages taken out of the caller's mailbox, then the socket handed to
%% one of the listener's connection supervisors, which starts a connection
%% process for it as for an accepted one (sluice_conns_sup) and answers
%% with its pid.
%%
%% An adopted connection is counted as an accepted one (`accepted', then
%% `closed' and a close reason when it ends, under `max_connections'),
%% because from then on it is one: info/1's sums hold without a new term.
%% Nothing here runs on the accept path or in the read loop: a listener
%% that never adopts pays nothing.
%% @private
-module(sluice_adopt).

-export([adopt/3]).

-export_type([adopted/0]).

%% What a socket that delivers to its owner is set with and sends: the
%% module of getopts/setopts, then its data, passive, closed and error
%% messages' tags.
-define(TCP, {inet, tcp, tcp_passive, tcp_closed, tcp_error}).
-define(SSL, {ssl, ssl, ssl_passive, ssl_closed, ssl_error}).

%% What the connection process is told besides its socket: the bytes
%% already read from the client, in order, and for an established TLS
%% socket the `ssl' socket itself (its raw socket is ssl's, and no second
%% handshake is run).
-type adopted() :: #{buffered := binary(), tls := none | ssl:sslsocket()}.

-spec adopt(sluice:name(), term(), map() | list()) -> {ok, pid()} | {error, term()}.
adopt(Name, Sock, Opts) ->
    Buffered = buffered(Name, Sock, Opts),
    connection() andalso erlang:error(badarg, [Name, Sock, Opts]),
    case sluice_registry:lookup(Name) of
        {ok, #{stats := Stats, opts := LOpts = #{transport := TName, num_conns_sups := NS}}} ->
            T = sluice_transport:module(TName),
            Kind = kind(T, Sock),
            Kind =:= badarg andalso erlang:error(badarg, [Name, Sock, Opts]),
            case owned(Kind) of
                ok -> admit(Name, Stats, T, Kind, Buffered, LOpts, NS);
                listening -> erlang:error(badarg, [Name, Sock, Opts]);
                Error -> Error
            end;
        error ->
            {error, not_found}
    end.

%% Whether the caller is a connection's process (its handler's callbacks
%% run there): its socket is its listener's. Adopted from there, two
%% connections served one socket, each counted, and the first one's idle
%% timeout closed it under the second. Its way to another listener is a
%% hand-off (`{handoff, ...}'), the taker adopting. (Every connection
%% process is one of sluice_conn's, proc_lib's initial call says so.)
connection() ->
    case get('$initial_call') of
        {sluice_conn, _, _} -> true;
        _ -> false
    end.

%% The options: only `buffered', iodata. Anything else is the caller's
%% mistake, raised as the API's other functions raise theirs. A list is
%% read as a listener's options are (sluice_opts:from_list/1): Elixir's
%% trailing keyword list, `adopt(name, socket, buffered: bytes)', was
%% refused with a bare `badarg'.
buffered(Name, Sock, Opts) when is_map(Opts) ->
    buffered(Name, Sock, Opts, Opts);
buffered(Name, Sock, Opts) when is_list(Opts) ->
    case sluice_opts:from_list(Opts) of
        {ok, Map} -> buffered(Name, Sock, Map, Opts);
        {error, not_a_map} -> erlang:error(badarg, [Name, Sock, Opts])
    end;
buffered(Name, Sock, Opts) ->
    erlang:error(badarg, [Name, Sock, Opts]).

buffered(Name, Sock, Map, Opts) ->
    case maps:keys(Map) -- [buffered] of
        [] ->
            try iolist_to_binary(maps:get(buffered, Map, <<>>))
            catch error:badarg -> erlang:error(badarg, [Name, Sock, Opts])
            end;
        _ ->
            erlang:error(badarg, [Name, Sock, Opts])
    end.

%% What the socket is, for the listener's transport: `{inet, Port}' (a
%% gen_tcp socket on the inet driver: the `inet' transport's, and the TCP
%% layer `ssl' runs its handshake on, as after an accept), `{socket, S, Info}'
%% (OTP's socket, with its socket:info/1), `{tls, Port, SslSock}' (an established `ssl' socket, as
%% an ssl listener's hand-off gives it), or `badarg'. A gen_tcp socket on
%% `{inet_backend, socket}' is a tuple of gen_tcp's own, which no
%% transport takes: its socket belongs to a gen_tcp process.
kind(T, Sock) when is_port(Sock), T =:= sluice_transport_inet;
                   is_port(Sock), T =:= sluice_transport_ssl ->
    case erlang:port_info(Sock, name) of
        {name, "tcp_inet"} -> {inet, Sock};
        undefined -> {closed, Sock};
        _ -> badarg
    end;
kind(sluice_transport_socket, Sock) ->
    %% (socket's type is opaque, and OTP 25 has no is_socket/1: whatever
    %% socket:info/1 takes is one.)
    try socket:info(Sock) of
        Info when is_map(Info) -> {socket, Sock, Info}
    catch error:_ -> badarg
    end;
kind(sluice_transport_ssl, Ssl = {sslsocket, {gen_tcp, Port, _, _}, [_ | _]})
  when is_port(Port) ->
    {tls, Port, Ssl};
kind(_T, _Sock) ->
    badarg.

%% Whether the caller owns the socket and it is open. A listen socket is
%% the caller's mistake (`listening': badarg, as a socket of the wrong
%% kind); a connected one without a peer any more (reset by the client,
%% maybe while its owner read its first bytes: getpeername(2) says
%% ENOTCONN then) is `closed'.
owned({closed, _}) ->
    {error, closed};
owned({inet, Port}) ->
    case erlang:port_info(Port, connected) of
        {connected, Self} when Self =:= self() ->
            case inet:peername(Port) of
                {error, enotconn} -> listening(lists:member(listen, status(Port)));
                Peer -> connected(Peer)
            end;
        {connected, _} -> {error, not_owner};
        undefined -> {error, closed}
    end;
owned({socket, S, #{owner := Owner, rstates := RStates}}) ->
    case {lists:member(closed, RStates), Owner =:= self()} of
        {true, _} -> {error, closed};
        {false, true} ->
            case socket:peername(S) of
                {error, enotconn} -> listening(lists:member(listening, RStates));
                Peer -> connected(Peer)
            end;
        {false, false} -> {error, not_owner}
    end;
owned({tls, _Port, Ssl}) ->
    %% ssl keeps its owner to itself, and lets any process change it:
    %% the owner is the process its connection monitors (its user).
    [Conn | _] = element(3, Ssl),
    case erlang:process_info(Conn, monitors) of
        {monitors, Monitors} ->
            case lists:member({process, self()}, Monitors) of
                true -> connected(ssl:peername(Ssl));
                false -> {error, not_owner}
            end;
        undefined -> {error, closed}
    end.

connected({ok, _}) -> ok;
connected({error, enotconn}) -> {error, closed};
connected({error, einval}) -> {error, closed};
connected({error, _} = Error) -> Error.

listening(true) -> listening;
listening(false) -> {error, closed}.

status(Port) ->
    case prim_inet:getstatus(Port) of
        {ok, Status} -> Status;
        {error, _} -> []
    end.

%% Admitted as an accept is (sluice_stats:admit/1: the limit, with no
%% wait, and `accepted' counted), but not while the listener is suspended
%% or draining: it takes no new connections then, from anyone.
admit(Name, Stats, T, Kind, Buffered, LOpts, NS) ->
    case sluice_stats:suspended(Stats) of
        true ->
            {error, suspended};
        false ->
            admit_to(sup(Name, NS), Name, Stats, T, Kind, Buffered, LOpts)
    end.

%% The connection supervisor, found before anything of the socket is
%% touched: one being restarted (its pid in sluice_registry is a dead
%% one's) refuses with the socket as it was, its messages still in the
%% caller's mailbox and its options and active mode unchanged.
sup(Name, NS) ->
    Index = erlang:system_info(scheduler_id) rem NS + 1,
    Sup = sluice_registry:conns_sup(Name, Index),
    case is_pid(Sup) andalso is_process_alive(Sup) of
        true -> {Index, Sup};
        false -> none
    end.

admit_to(none, _Name, _Stats, _T, _Kind, _Buffered, _LOpts) ->
    {error, not_found};
admit_to(Sup, Name, Stats, T, Kind, Buffered, LOpts) ->
    case sluice_stats:admit(Stats) of
        Admitted when Admitted =:= admitted; Admitted =:= alarm ->
            case hand(Stats, T, Kind, Buffered, LOpts, Sup) of
                {ok, Pid} ->
                    _ = Admitted =:= alarm andalso sluice_alarms:reached(Name, Stats),
                    {ok, Pid};
                Error ->
                    Error
            end;
        %% Out of descriptors (shedding): the listener takes no more
        %% connections, as at its limit.
        _OverLimitOrShedding ->
            {error, over_limit}
    end.

%% Delivery stopped and the socket's messages taken out of the mailbox
%% (their bytes after Buffered), the listener's socket options set as an
%% accepted socket has them from its listen socket, then the socket to a
%% connection supervisor. A failure before the handover gives the
%% admission back (sluice_stats:withdraw/1) and leaves the socket with
%% the caller as it was: its messages sent back to it in their order,
%% then its active mode set again.
hand(Stats, T, Kind, Buffered, LOpts, Sup) ->
    case passive(Kind) of
        {ok, Taken, Was} ->
            Adopted = #{buffered => iolist_to_binary([Buffered | chunks(Taken)]),
                        tls => case Kind of {tls, _, Ssl} -> Ssl; _ -> none end},
            case socket_opts(Kind, LOpts) of
                ok ->
                    case start(Stats, T, Kind, Adopted, Sup) of
                        {kept, Error} ->
                            give_back(Kind, Taken, Was),
                            Error;
                        Started ->
                            Started
                    end;
                Error ->
                    ok = sluice_stats:withdraw(Stats),
                    give_back(Kind, Taken, Was),
                    Error
            end;
        {closed, Taken, Was} ->
            ok = sluice_stats:withdraw(Stats),
            give_back(Kind, Taken, Was),
            {error, closed}
    end.

give_back(Kind, Taken, Was) ->
    _ = [self() ! M || M <- Taken],
    _ = case Kind of
            {inet, Port} when Was =/= false -> inet:setopts(Port, [{active, Was}]);
            {tls, _, Ssl} when Was =/= false -> ssl:setopts(Ssl, [{active, Was}]);
            _ -> ok
        end,
    ok.

%% A socket in an active mode has sent the caller what it read: those
%% messages are the client's next bytes, taken here in order (after
%% delivery stopped: a synchronous call, after which no more come), with
%% the active mode it had. The end of the stream among them (the peer
%% closed, an error) means there is nothing to adopt: `closed'.
passive({inet, Port}) ->
    passive(?TCP, Port);
passive({socket, _S, _}) ->
    %% OTP's socket sends its owner no data: nothing to take.
    {ok, [], false};
passive({tls, _Port, Ssl}) ->
    passive(?SSL, Ssl).

passive(Tags = {Mod, _, _, _, _}, S) ->
    case Mod:getopts(S, [active]) of
        {ok, [{active, Was}]} ->
            case Mod:setopts(S, [{active, false}]) of
                ok -> taken(Tags, S, Was, []);
                {error, _} -> {closed, [], false}
            end;
        {error, _} ->
            {closed, [], false}
    end.

taken(Tags = {_, Data, Passive, Closed, Error}, S, Was, Acc) ->
    receive
        {Data, S, _} = M -> taken(Tags, S, Was, [M | Acc]);
        {Passive, S} = M -> taken(Tags, S, Was, [M | Acc]);
        {Closed, S} = M -> {closed, lists:reverse(Acc, [M]), Was};
        {Error, S, _} = M -> {closed, lists:reverse(Acc, [M]), Was}
    after 0 -> {ok, lists:reverse(Acc), Was}
    end.

%% The bytes of the messages taken.
chunks(Taken) ->
    [Data || {Tag, _, Data} <- Taken, Tag =:= tcp orelse Tag =:= ssl].

%% What an accepted socket inherits from its listen socket, which an
%% adopted one was not accepted from: the listener's `socket_opts' and,
%% on the inet driver, the delivery the connection loop expects
%% (sluice_transport_inet:listen_options/1), gen_tcp's defaults included
%% where its owner may have changed them: with `{deliver, port}' the
%% connection never saw a byte, with a `header' it crashed on a list, and
%% `show_econnreset' made a client's reset a socket error. An
%% established TLS socket's TCP socket is ssl's, left as ssl set it; the
%% ssl socket delivers binaries, unframed, as the listener's own do.
socket_opts({inet, Port}, #{socket_opts := SocketOpts}) ->
    inet:setopts(Port, SocketOpts ++ [binary, {packet, raw}, {active, false},
                                      {exit_on_close, false}, {header, 0},
                                      {deliver, term}, {show_econnreset, false}]);
socket_opts({socket, S, _}, #{socket_opts := SocketOpts}) ->
    sluice_socket_opts:set(S, SocketOpts);
socket_opts({tls, _, Ssl}, _) ->
    ssl:setopts(Ssl, [binary, {packet, raw}]).

%% To a connection supervisor, as an acceptor hands a socket (counted in
%% its slot first: sluice_stats:sup_claim/2), then a call: the supervisor
%% starts the connection and answers with its pid. A handover that fails
%% (the supervisor died since sup/2 found it, or the socket closed)
%% leaves the socket with the caller: `kept', its admission withdrawn.
start(Stats, T, Kind, Adopted, {Index, Sup}) ->
    Gen = sluice_stats:sup_claim(Stats, Index),
    case handover(T, Kind, Sup) of
        ok ->
            try gen:call(Sup, '$gen_call', {sluice_adopt, raw(Kind), Adopted}, infinity) of
                {ok, Reply} -> Reply
            catch
                %% Gone with the socket (it was linked to it) and
                %% its count (sluice_stats:sup_reset/2): the
                %% listener stopped meanwhile.
                exit:_ -> {error, not_found}
            end;
        {error, Reason} ->
            _ = sluice_stats:sup_withdraw(Stats, Index, Gen),
            %% (the inet driver's port_connect/2 to a dead process is
            %% a badarg, which the transport says as `closed')
            {kept, {error, case is_process_alive(Sup) of
                               true -> Reason;
                               false -> not_found
                           end}}
    end.

raw({inet, Port}) -> Port;
raw({socket, S, _}) -> S;
raw({tls, Port, _}) -> Port.

handover(T, {tls, _, Ssl}, Sup) ->
    _ = T,
    ssl:controlling_process(Ssl, Sup);
handover(T, Kind, Sup) ->
    %% Passive, and nothing of it left in the mailbox (passive/1).
    T:handover(raw(Kind), Sup).
