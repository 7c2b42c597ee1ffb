%% @doc The inet-driver transport (gen_tcp).
%%
%% Sends are asynchronous port commands: the driver's `{inet_reply, S, _}'
%% is classified (ignored when ok) instead of being waited for after every
%% write, which is what lets one process answer a pipelining client
%% without stopping at each reply (seed 001).
%%
%% The read buffer (`buffer' in socket_opts) is what one `{tcp, S, Data}'
%% carries at most; a large one means one message and one handler call per
%% read rather than per packet. The driver allocates it when a socket is
%% armed and holds it until data comes, so arming an idle connection would
%% pin a whole buffer: activate/2 arms a grant with a small one (see
%% arm/4), and `once' with one sized to the last read. Only arming a socket whose grant has run out
%% (or a first one) allocates: a top-up that adds to a grant still running
%% does not, and is a single call. docs/backends.md has the measurements.
%% @private
-module(sluice_transport_inet).
-behaviour(sluice_transport).

-export([listen/2, accept/2, listen_port/1, close_listener/1]).
-export([controlling_process/2, recv/3, bytes_received/1, close_socket/1,
         peername/1, sockname/1, setopts/2, getopts/2]).
-export([handshake/2, activate/2, classify/2, await/2, pause/1, send/2, output_queued/1,
         unsent/1, shutdown/2, close/1, info/1, socket/1]).
-export([sendfile/4]).
-export([queued/1]).
-export([release/1, handoff/2]).
-export([recv_pause/1, recv_read/2, recv_resume/1]).
-export([handover/2, park/1, parked_event/1, unpark/1]).
-export([delivers_prefix/0, handshake_waits/0, tls/0]).
-export([listen_options/1, sent_ack/1, data_tag/1]).

%% SOL_SOCKET / SO_REUSEPORT on Linux; OTP 25's gen_tcp has no option for it.
-define(SOL_SOCKET, 1).
-define(SO_REUSEPORT, 15).

%% The read buffer a quiet socket is armed with: a Ping or an ack frame fits.
-define(ARM_BUFFER, 512).
%% The read buffer of a parked socket: only the read that wakes it.
-define(PARK_BUFFER, 64).

%% The reason of the message that ends a wait for the driver's sendfile
%% at send_timeout (sendfile/4): no driver's.
-define(SENDFILE_TIMED_OUT, '$sluice_send_timeout').

%% The inet driver's default high_watermark: from this many bytes queued
%% it marks the port busy.
-define(BUSY_QUEUE, 8192).

-record(inet, {sock :: gen_tcp:socket(),
               %% socket_opts' buffer: what reads use once armed
               buffer :: pos_integer(),
               %% `once': whether the last read filled the buffer: more is
               %% waiting, and re-arming need not guard against holding a
               %% whole buffer
               busy = false :: boolean(),
               %% whether the driver has grant left as far as this state
               %% has seen (no `tcp_passive' since the last arming): adding
               %% to a running grant allocates nothing
               armed = false :: boolean(),
               %% the driver's read buffer setting now: `buffer', or the
               %% small one while armed `once' for small reads
               cur :: pos_integer(),
               %% the buffer the next `once' arms with when the last read
               %% did not fill its own: twice that read, in powers of two
               %% from ?ARM_BUFFER up to `buffer' (once_buffer/3)
               once_buf :: pos_integer()}).

%%% Listening

-spec listen(inet:port_number(), sluice_transport:listen_opts()) ->
          {ok, gen_tcp:socket()} | {error, term()}.
listen(Port, Opts) ->
    gen_tcp:listen(Port, listen_options(Opts)).

%% @doc gen_tcp's listen options for the listener options (also the TCP
%% layer under the ssl transport). User socket options come first, and the
%% library's own after them win: binary, raw packets, passive until the
%% connection process arms it. exit_on_close false: a client that shuts
%% down its sending side after its last request is still owed the
%% replies; with the default the driver would close the socket on its FIN.
%% (Not all of them if the FIN is read while the port is busy: the driver
%% then empties its queue; docs/backends.md, "A half-close while replies
%% are backed up".)
-spec listen_options(sluice_transport:listen_opts()) -> [gen_tcp:listen_option()].
listen_options(#{ip := IP, backlog := Backlog, reuseport := ReusePort,
                 socket_opts := SocketOpts}) ->
    Family = sluice_transport:family(IP),
    Reuse = case ReusePort of
                true -> [{raw, ?SOL_SOCKET, ?SO_REUSEPORT, <<1:32/native>>}];
                false -> []
            end,
    SocketOpts ++ Reuse ++
        [Family, {ip, IP}, binary, {packet, raw}, {active, false},
         {reuseaddr, true}, {backlog, Backlog}, {exit_on_close, false}].

%% @doc gen_tcp:accept/2 without its option copy. gen_tcp copies ten
%% options from the listen socket to each accepted one (a getsockopt each
%% on the listen socket, then setsockopt on the new one, each wrapped in
%% more calls by the driver): dozens of system calls per connection. On
%% Linux an accepted TCP socket inherits all of them from the listen
%% socket but SO_PRIORITY, which handshake/2 sets when the listener has it
%% (one accepted on a Unix socket inherits less, which handshake/2 sets
%% too). The driver's own settings (binary, packet, buffer, active,
%% send_timeout...) are copied by the driver itself. What is left is gen_tcp's
%% registration of the port's module, which gen_tcp and inet calls on the
%% socket rely on.
-spec accept(gen_tcp:socket(), timeout()) -> {ok, gen_tcp:socket()} | {error, term()}.
accept(LSock, Timeout) ->
    case prim_inet:async_accept(LSock, case Timeout of infinity -> -1; T -> T end) of
        {ok, Ref} ->
            receive
                {inet_async, LSock, Ref, {ok, Sock}} ->
                    true = inet_db:register_socket(Sock, module_of(LSock, Sock)),
                    {ok, Sock};
                {inet_async, LSock, Ref, Error} ->
                    Error
            end;
        {error, einval} = Error ->
            %% What prim_inet answers for a listen socket already closed
            %% (an accept pending when it closes gets `closed'): said as
            %% the other transports say it, so that an acceptor stops.
            case erlang:port_info(LSock, id) of
                undefined -> {error, closed};
                _ -> Error
            end;
        Error ->
            Error
    end.

%% The listen socket's module (inet_tcp, inet6_tcp), which the accepted
%% socket shares. The listen socket may have closed since the accept
%% completed (sluice:suspend/1 closes it while the acceptors run; the
%% acceptor then crashed on a badmatch and the client it had was dropped):
%% the accepted socket is still good, and its address says its family.
module_of(LSock, Sock) ->
    case inet_db:lookup_socket(LSock) of
        {ok, Mod} -> Mod;
        {error, _} -> family_module(Sock)
    end.

family_module(Sock) ->
    case prim_inet:sockname(Sock) of
        {ok, {local, _}} -> local_tcp;
        {ok, {IP, _}} when tuple_size(IP) =:= 8 -> inet6_tcp;
        _ -> inet_tcp
    end.

-spec listen_port(gen_tcp:socket()) -> {ok, inet:port_number()} | {error, term()}.
listen_port(LSock) ->
    inet:port(LSock).

-spec close_listener(gen_tcp:socket()) -> ok.
close_listener(LSock) ->
    gen_tcp:close(LSock).

%%% Raw sockets

-spec controlling_process(gen_tcp:socket(), pid()) -> ok | {error, term()}.
controlling_process(Sock, Pid) ->
    gen_tcp:controlling_process(Sock, Pid).

-spec recv(gen_tcp:socket(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
recv(Sock, Length, Timeout) ->
    gen_tcp:recv(Sock, Length, Timeout).

%% @doc The driver's count of bytes read from the socket. (port_info/2's
%% `input' stays 0 for the inet driver.)
-spec bytes_received(gen_tcp:socket()) -> non_neg_integer().
bytes_received(Sock) ->
    case inet:getstat(Sock, [recv_oct]) of
        {ok, [{recv_oct, N}]} -> N;
        {error, _} -> 0
    end.

-spec close_socket(gen_tcp:socket()) -> ok.
close_socket(Sock) ->
    close_port(Sock).

%% gen_tcp:close/1 first asks the driver for the socket's linger option,
%% a getsockopt system call, then subscribes to the emptying of its output
%% queue so as to keep the caller until what is queued is out; when
%% nothing is queued it closes the port at once, whatever the linger
%% option says (prim_inet:close/1). Every connection closes, and a system
%% call costs microseconds on these machines (a storm closes 15,000 at
%% once), so the queue is looked at first, without one (port_info/2 reads
%% the port's own counter): empty, the port is closed as prim_inet would
%% close it; anything queued, gen_tcp:close/1 keeps the caller until it is
%% out, as before. (2,000 closes in a loop: 2.6 us less each, median of 5
%% pairs; one system call and two driver calls fewer a connection.) Only
%% the owner closes, and only it sends on a connection's socket unless a
%% handler hands the socket to another process, which gen_tcp:close/1
%% would race with the same way. (This transport's sockets are always
%% inet driver ports: sluice_opts takes no inet_backend.)
close_port(Sock) ->
    case erlang:port_info(Sock, queue_size) of
        {queue_size, 0} ->
            _ = (catch erlang:port_close(Sock)),
            %% (the port's exit, for an owner that traps exits, as
            %% prim_inet:close_port/1 takes it)
            receive {'EXIT', Sock, _} -> ok after 0 -> ok end;
        _ ->
            gen_tcp:close(Sock)
    end.

%% @doc The peer's address; on a Unix socket `{local, Path}', `<<>>' for
%% a client that did not bind its socket to a path (most do not).
-spec peername(gen_tcp:socket()) -> {ok, sluice:address()} | {error, term()}.
peername(Sock) ->
    inet:peername(Sock).

-spec sockname(gen_tcp:socket()) -> {ok, sluice:address()} | {error, term()}.
sockname(Sock) ->
    inet:sockname(Sock).

%% @doc A handler's socket options (sluice:setopts/2, which has checked
%% them), from any process: the driver takes them from any. On a Unix
%% socket TCP's and IP's (`nodelay', `tos') are `enotsup', as the socket
%% backend has the kernel say: the driver set `nodelay' as `ok' without
%% setting anything, and left it out of what getopts/2 read.
-spec setopts(gen_tcp:socket(), [sluice:sockopt()]) -> ok | {error, term()}.
setopts(Sock, Opts) ->
    case tcp_only_on_local(Sock, [K || {K, _} <- Opts]) of
        true -> {error, enotsup};
        false -> closed_or(Sock, inet:setopts(Sock, Opts))
    end.

-spec getopts(gen_tcp:socket(), [sluice:sockopt_name()]) ->
          {ok, [sluice:sockopt()]} | {error, term()}.
getopts(Sock, Names) ->
    case tcp_only_on_local(Sock, Names) of
        true -> {error, enotsup};
        false -> closed_or(Sock, inet:getopts(Sock, Names))
    end.

%% Whether the names include TCP's or IP's own and the socket is a Unix
%% one (gen_tcp registers it with module local_tcp: no system call).
tcp_only_on_local(Sock, Names) ->
    lists:any(fun(K) -> K =:= nodelay orelse K =:= tos end, Names)
        andalso inet_db:lookup_socket(Sock) =:= {ok, local_tcp}.

%% The driver answers `einval' for a socket that has closed, as for a value
%% the kernel refuses: a closed one is `closed', as on the socket backend.
closed_or(Sock, {error, einval} = Error) ->
    case erlang:port_info(Sock, id) of
        undefined -> {error, closed};
        _ -> Error
    end;
closed_or(_Sock, Result) ->
    Result.

%%% The connection

%% @doc handshake/2 puts the `prefix' back in front of the stream
%% (gen_tcp:unrecv/2).
-spec delivers_prefix() -> true.
delivers_prefix() ->
    true.

%% @doc A connection may be upgraded to TLS in-band (STARTTLS,
%% sluice_conn_starttls): tls_opts are checked when given.
-spec tls() -> starttls.
tls() ->
    starttls.

%% @doc handshake/2 returns at once: it reads nothing from the client.
-spec handshake_waits() -> false.
handshake_waits() ->
    false.

%% @doc Nothing to negotiate; the one option an accepted socket does not
%% inherit from its listen socket (see accept/2) is set here, in the
%% connection process, when the listener has it. Bytes already read after
%% a PROXY header (`prefix') are put back in front of the stream, as the
%% TLS transport does: the first grant delivers them, behind whatever
%% init/2 queued for the process (its own sluice:send/2, a message to
%% itself), as any later chunk comes.
-spec handshake(gen_tcp:socket(), sluice_transport:conn_opts()) -> {ok, #inet{}} | {error, term()}.
handshake(Sock, Opts = #{ip := {local, _}, socket_opts := SocketOpts}) ->
    %% A Unix socket's accepted sockets inherit less (sluice_socket_opts).
    case inet:setopts(Sock, sluice_socket_opts:not_inherited_on_local(SocketOpts)) of
        ok -> handshake_tcp(Sock, Opts);
        Error -> Error
    end;
handshake(Sock, Opts) ->
    handshake_tcp(Sock, Opts).

handshake_tcp(Sock, Opts = #{socket_opts := SocketOpts}) ->
    _ = case maps:get(prefix, Opts, <<>>) of
            <<>> -> ok;
            Prefix -> gen_tcp:unrecv(Sock, Prefix)
        end,
    {buffer, Buffer} = lists:keyfind(buffer, 1, SocketOpts),
    case lists:keyfind(priority, 1, SocketOpts) of
        false ->
            {ok, new(Sock, Buffer)};
        Priority ->
            case inet:setopts(Sock, [Priority]) of
                ok -> {ok, new(Sock, Buffer)};
                Error -> Error
            end
    end.

new(Sock, Buffer) ->
    #inet{sock = Sock, buffer = Buffer, cur = Buffer, once_buf = min(Buffer, ?ARM_BUFFER)}.

%% @doc `false' starts one asynchronous read (gen_tcp:recv/2 is this call
%% and a blocking receive; the connection loop does the receive, so it
%% still sees other messages). The other modes set the socket's active
%% mode; an integer adds to the driver's count.
-spec activate(#inet{}, sluice_transport:mode()) -> {ok, #inet{}} | {error, term()}.
activate(T = #inet{sock = Sock}, false) ->
    case prim_inet:async_recv(Sock, 0, -1) of
        {ok, _Ref} -> {ok, T};
        %% One is pending already (the driver takes one at a time): a
        %% handler's sluice:recv/3 timed out waiting for its answer, which
        %% is still the next chunk (recv_read/2)
        {error, ealready} -> {ok, T};
        Error -> Error
    end;
activate(T = #inet{sock = Sock, busy = Busy, buffer = Buffer, cur = Cur, once_buf = OB},
         once) ->
    %% Re-armed after every chunk, in one port call: with a buffer sized
    %% to the last read (what the driver allocates now and holds until
    %% data comes, so an idle connection holds that, not a whole `buffer')
    %% unless that read filled the buffer it had. The driver keeps the
    %% setting, so a client whose reads keep their size changes it only
    %% once.
    Want = case Busy of
               true -> Buffer;
               false -> OB
           end,
    ok_or_error(inet:setopts(Sock, with_buffer(Want, Cur, once)),
                T#inet{cur = Want, armed = false});
activate(T = #inet{armed = true, sock = Sock}, N) when is_integer(N) ->
    %% A top-up of a grant still running: the driver allocates no buffer.
    ok_or_error(inet:setopts(Sock, [{active, N}]), T);
activate(T = #inet{sock = Sock, buffer = Buffer}, Mode) ->
    %% A grant armed anew (the first, or one that ran out): whether data
    %% waits is not known here (a running grant's reads bypass classify/2,
    %% data_tag/1), so the arming holds the small buffer.
    ok_or_error(arm(Sock, Mode, min(Buffer, ?ARM_BUFFER), Buffer),
                T#inet{armed = is_integer(Mode), cur = Buffer}).

%% The options that arm Mode with the driver's buffer at Want, which is
%% Cur now: the buffer is set only when it changes.
with_buffer(Cur, Cur, Mode) -> [{active, Mode}];
with_buffer(Want, _Cur, Mode) -> [{buffer, Want}, {active, Mode}].

%% Set the active mode with the read buffer at Small for the arming (the
%% driver allocates it then), and put the real size back for later reads:
%% a quiet connection then holds Small bytes, not a whole buffer. Two more
%% port calls than a plain arming: made when a grant is armed anew and
%% when a socket is parked.
arm(Sock, Mode, Small, Buffer) when Small < Buffer ->
    case inet:setopts(Sock, [{buffer, Small}, {active, Mode}]) of
        ok -> inet:setopts(Sock, [{buffer, Buffer}]);
        Error -> Error
    end;
arm(Sock, Mode, _Small, _Buffer) ->
    inet:setopts(Sock, [{active, Mode}]).

ok_or_error(ok, T) -> {ok, T};
ok_or_error({error, _} = E, _T) -> E.

-spec classify(term(), #inet{}) -> sluice_transport:classified().
classify({tcp, Sock, Data}, T = #inet{sock = Sock, cur = B, busy = Busy, once_buf = OB,
                                      buffer = Buffer}) ->
    N = byte_size(Data),
    if
        N >= B, Busy -> {data, Data, T};
        N >= B -> {data, Data, T#inet{busy = true}};
        %% still in the size class of once_buffer/3: nothing to change
        not Busy, 2 * N =< OB, (OB =:= ?ARM_BUFFER orelse 4 * N > OB) -> {data, Data, T};
        true -> {data, Data, T#inet{busy = false, once_buf = once_buffer(N, Buffer, ?ARM_BUFFER)}}
    end;
classify({inet_reply, Sock, ok}, T = #inet{sock = Sock}) ->
    {ignore, T};
classify({tcp_passive, Sock}, T = #inet{sock = Sock}) ->
    {passive, T#inet{armed = false}};
classify({inet_async, Sock, _Ref, {ok, Data}}, T = #inet{sock = Sock}) ->
    {data, Data, T};
classify({tcp_closed, Sock}, T = #inet{sock = Sock}) ->
    {closed, T};
classify({inet_async, Sock, _Ref, {error, closed}}, T = #inet{sock = Sock}) ->
    {closed, T};
classify({tcp_error, Sock, Reason}, T = #inet{sock = Sock}) ->
    {error, Reason, T};
classify({inet_async, Sock, _Ref, {error, Reason}}, T = #inet{sock = Sock}) ->
    {error, Reason, T};
classify({inet_reply, Sock, {error, Reason}}, T = #inet{sock = Sock}) ->
    {error, Reason, T};
classify(_, _) ->
    other.

-spec await(#inet{}, timeout()) -> sluice_transport:awaited().
await(T = #inet{sock = Sock}, Timeout) ->
    receive
        {tcp, Sock, Data} -> {data, Data, T};
        {inet_async, Sock, _Ref, {ok, Data}} -> {data, Data, T};
        {tcp_closed, Sock} -> {closed, T};
        {inet_async, Sock, _Ref, {error, closed}} -> {closed, T};
        {tcp_error, Sock, Reason} -> {error, Reason, T};
        {inet_async, Sock, _Ref, {error, Reason}} -> {error, Reason, T};
        {inet_reply, Sock, {error, Reason}} -> {error, Reason, T}
    after Timeout ->
            {timeout, T}
    end.

%% @doc `{active, false}' is synchronous in the driver: every chunk it sent
%% before is in the mailbox when this returns. (A pending asynchronous
%% read of mode `false' cannot be cancelled; its answer comes later.)
-spec pause(#inet{}) -> {ok, #inet{}} | {error, term()}.
pause(T = #inet{sock = Sock}) ->
    ok_or_error(inet:setopts(Sock, [{active, false}]), T#inet{armed = false}).

%% @doc The socket for another layer to take over (a STARTTLS,
%% sluice_conn_starttls): delivery stopped (pause/1), and every message of
%% the socket already in this process's mailbox taken out, so that none
%% reaches the connection after the upgrade (where it would be a stray
%% message for handle_info/2): the chunks, in order (the client's bytes
%% read so far and not handled), and the acknowledgements of sends, the
%% end of a grant, or the socket's close or error. A read of mode `false'
%% still pending is not cancelled: its answer comes later (await/2).
-spec release(#inet{}) -> {ok, gen_tcp:socket(), [binary()]} | {error, term()}.
release(T = #inet{sock = Sock}) ->
    case pause(T) of
        {ok, _} ->
            case delivered(Sock, true, []) of
                {Chunks, none} -> {ok, Sock, Chunks};
                {_, closed} -> {error, closed};
                {_, {error, _} = Error} -> Error
            end;
        Error ->
            Error
    end.

%% @doc sluice_transport's handoff/2: the socket released as for a
%% STARTTLS (release/1: the acknowledgements of sends and the end of a
%% grant are taken out too, which gen_tcp:controlling_process/2 would move
%% to the new owner as messages it never asked for), then its new owner.
-spec handoff(#inet{}, pid()) -> {ok, gen_tcp:socket(), [binary()]} | {error, term()}.
handoff(T, Pid) ->
    case release(T) of
        {ok, Sock, Unread} ->
            case gen_tcp:controlling_process(Sock, Pid) of
                ok -> {ok, Sock, Unread};
                Error -> Error
            end;
        Error ->
            Error
    end.

%% What a paused socket had delivered, taken out of the mailbox in order:
%% its chunks, the end of a grant, and its end (`closed', `{error, _}') or
%% `none'. The acknowledgements of sends too if `Acks' (the socket is
%% leaving this process: release/1), else they stay for the loop
%% (recv_pause/1).
delivered(Sock, Acks, Acc) ->
    receive
        {tcp, Sock, Data} -> delivered(Sock, Acks, [Data | Acc]);
        {inet_async, Sock, _Ref, {ok, Data}} -> delivered(Sock, Acks, [Data | Acc]);
        {tcp_passive, Sock} -> delivered(Sock, Acks, Acc);
        {inet_reply, Sock, ok} when Acks -> delivered(Sock, Acks, Acc);
        {tcp_closed, Sock} -> {lists:reverse(Acc), closed};
        {inet_async, Sock, _Ref, {error, closed}} -> {lists:reverse(Acc), closed};
        {inet_async, Sock, _Ref, {error, Reason}} -> {lists:reverse(Acc), {error, Reason}};
        {tcp_error, Sock, Reason} -> {lists:reverse(Acc), {error, Reason}};
        {inet_reply, Sock, {error, Reason}} when Acks -> {lists:reverse(Acc), {error, Reason}}
    after 0 ->
            {lists:reverse(Acc), none}
    end.

%% @doc sluice:recv/3 (sluice_transport): delivery stopped, and the
%% socket's chunks, the end of a grant and its end taken out of the
%% mailbox. A read of mode `false' still pending is not cancelled: its
%% answer comes later (recv_read/2 waits for it).
-spec recv_pause(sluice:conn()) -> {[binary()], sluice_conn_recv:ending()}.
recv_pause(#{socket := Sock}) ->
    %% A port that has closed cannot be paused, and says so when read
    _ = inet:setopts(Sock, [{active, false}]),
    delivered(Sock, false, []).

%% @doc gen_tcp:recv/3 for whatever is there. With `active => false' the
%% loop keeps a read pending (the callback is not handle_data/2's), and
%% the driver takes one read at a time: while it is pending, its answer is
%% the next chunk, waited for here. It may also have been answered after
%% recv_pause/1 looked at the mailbox: a gen_tcp:recv/3 then read on
%% behind that answer, waited for the client's next bytes while those sat
%% in the mailbox, and timed out (sluice_recv_SUITE's
%% length_zero_from_handle_info, 1 run in 7). So the driver is asked first
%% with a read that does not wait (its answer comes at once, and no read
%% of this one is left pending): refused, the loop's read is pending;
%% taken, any answer of the loop's is in the mailbox ahead of it (the
%% port's messages keep their order), and only with neither is the socket
%% read and waited on.
-spec recv_read(sluice:conn(), timeout()) -> {ok, binary()} | {error, term()}.
recv_read(#{socket := Sock}, Timeout) ->
    case prim_inet:async_recv(Sock, 0, 0) of
        {error, ealready} ->
            receive
                {inet_async, Sock, _Ref, {ok, Data}} -> {ok, Data};
                {inet_async, Sock, _Ref, {error, Reason}} -> {error, Reason}
            after Timeout -> {error, timeout}
            end;
        {ok, Ref} ->
            case polled(Sock, Ref, []) of
                {[], timeout} -> gen_tcp:recv(Sock, 0, Timeout);
                {[], Error} -> Error;
                %% An end behind bytes is said at the next read
                {Chunks, _} -> {ok, iolist_to_binary(Chunks)}
            end;
        {error, _} ->
            %% A closed port is einval to the poll, `closed' to gen_tcp
            gen_tcp:recv(Sock, 0, Timeout)
    end.

%% The answers of the loop's read (if it had been answered) and of the
%% poll (Ref), in order.
polled(Sock, Ref, Acc) ->
    receive
        {inet_async, Sock, Ref, {ok, Data}} -> {lists:reverse([Data | Acc]), none};
        {inet_async, Sock, Ref, {error, timeout}} -> {lists:reverse(Acc), timeout};
        {inet_async, Sock, Ref, Error} -> {lists:reverse(Acc), Error};
        {inet_async, Sock, _Loop, {ok, Data}} -> polled(Sock, Ref, [Data | Acc]);
        {inet_async, Sock, _Loop, Error} ->
            %% the poll's answer comes at once: not left for the loop
            receive {inet_async, Sock, Ref, _} -> ok end,
            {lists:reverse(Acc), Error}
    end.

%% @doc Paused again, and the end of a grant given meanwhile dropped: the
%% loop grants anew.
-spec recv_resume(#inet{}) -> #inet{}.
recv_resume(T = #inet{sock = Sock}) ->
    T2 = case pause(T) of
             {ok, Paused} -> Paused;
             {error, _} -> T#inet{armed = false}
         end,
    receive {tcp_passive, Sock} -> ok after 0 -> ok end,
    T2.

-spec send(#inet{}, iodata()) -> ok | {error, term()}.
send(#inet{sock = Sock}, Data) ->
    try erlang:port_command(Sock, Data) of
        true -> ok
    catch error:_ -> {error, closed}
    end.

%% @doc The kernel sends from the file (file:sendfile/5 on the port),
%% after what the driver still queues (it writes that first: replies
%% keep their order). file:sendfile/5 waits for the driver's answer
%% without a timeout, and the driver has none for it (its send_timeout is
%% for sends that find the port busy): a client that reads nothing would
%% keep the connection there for good. A timer of the socket's
%% send_timeout ends the wait with a message of the answer's shape,
%% `{sendfile, Sock, {error, ?SENDFILE_TIMED_OUT}}', which no driver
%% sends; the connection then ends, and closing the port stops the
%% driver's sendfile.
-spec sendfile(#inet{}, file:fd(), non_neg_integer(), pos_integer()) ->
          {ok, non_neg_integer()} | {error, term()}.
sendfile(#inet{sock = Sock}, Fd, Offset, Bytes) ->
    case inet:getopts(Sock, [send_timeout]) of
        {ok, [{send_timeout, Timeout}]} -> sendfile(Sock, Fd, Offset, Bytes, Timeout);
        {error, _} -> {error, closed}
    end.

sendfile(Sock, Fd, Offset, Bytes, infinity) ->
    file:sendfile(Fd, Sock, Offset, Bytes, []);
sendfile(Sock, Fd, Offset, Bytes, Timeout) ->
    TimedOut = {sendfile, Sock, {error, ?SENDFILE_TIMED_OUT}},
    Timer = erlang:send_after(Timeout, self(), TimedOut),
    case file:sendfile(Fd, Sock, Offset, Bytes, []) of
        {error, ?SENDFILE_TIMED_OUT} ->
            {error, timeout};
        Result ->
            %% A timer that fired as the driver answered has sent its
            %% message, which must not reach the handler as a stray one.
            _ = erlang:cancel_timer(Timer) =:= false andalso receive TimedOut -> true end,
            Result
    end.

%% @doc Every port_command/2 (send/2) is answered with `{inet_reply, Sock,
%% ok}' when the data was queued; classify/2 would ignore it.
-spec sent_ack(#inet{}) -> {inet_reply, port()}.
sent_ack(#inet{sock = Sock}) ->
    {inet_reply, Sock}.

%% @doc Under a grant every read is `{tcp, Sock, Data}'; classify/2 would
%% only note its size for `once' (`busy', `once_buf'), which a grant does
%% not use: a grant armed anew holds the small buffer first (activate/2).
-spec data_tag(#inet{}) -> {tcp, port()}.
data_tag(#inet{sock = Sock}) ->
    {tcp, Sock}.

%% @doc The driver queues what the kernel's send buffer cannot take.
-spec output_queued(#inet{}) -> boolean().
output_queued(#inet{sock = Sock}) ->
    queued(Sock).

%% @doc Whether a gen_tcp socket's driver queue (also the TCP socket under
%% TLS) holds as much as makes the driver busy (its default
%% high_watermark): the peer is not keeping up with its replies. A few
%% bytes queued for a moment are a peer that reads a little late, not one
%% that does not read.
-spec queued(gen_tcp:socket()) -> boolean().
queued(Sock) ->
    case erlang:port_info(Sock, queue_size) of
        {queue_size, N} -> N >= ?BUSY_QUEUE;
        undefined -> false
    end.

%% @doc Bytes send/2 handed to the driver that never reached the kernel
%% and never will: what the driver dropped when a send timed out and
%% closed the socket (`send_timeout_close') or a write failed, and every
%% send after that, each taken (port_command/2 returns at once) and
%% refused later by an `inet_reply' error the connection only reaches
%% behind the chunks it is still echoing (a client that reads nothing had
%% 7 MB counted as sent where the kernel took 4.7). The port's `output'
%% (all it was given) less the driver's `send_oct' (written to the
%% kernel) and what it still queues, which gen_tcp:close/1 (close/1)
%% waits to send.
-spec unsent(#inet{}) -> non_neg_integer().
unsent(#inet{sock = Sock}) ->
    case {erlang:port_info(Sock, output), inet:getstat(Sock, [send_oct]),
          erlang:port_info(Sock, queue_size)} of
        {{output, Given}, {ok, [{send_oct, Written}]}, {queue_size, Queued}} ->
            max(0, Given - Written - Queued);
        _ ->
            0
    end.

-spec shutdown(#inet{}, read | write | read_write) -> ok | {error, term()}.
shutdown(#inet{sock = Sock}, How) ->
    gen_tcp:shutdown(Sock, How).

-spec close(#inet{}) -> ok.
close(#inet{sock = Sock}) ->
    close_port(Sock).

-spec info(#inet{}) -> map().
info(#inet{}) ->
    #{}.

-spec socket(#inet{}) -> gen_tcp:socket().
socket(#inet{sock = Sock}) ->
    Sock.

%%% Parking

%% @doc Arm a parked socket: one message (data, closed or error) to its
%% owner, with a tiny read buffer held meanwhile.
-spec park(#inet{}) -> ok | {error, term()}.
park(#inet{sock = Sock, buffer = Buffer}) ->
    arm(Sock, once, min(Buffer, ?PARK_BUFFER), Buffer).

-spec parked_event(term()) -> {gen_tcp:socket(), {data, binary()} | closed | {error, term()}} | other.
parked_event({tcp, Sock, Data}) -> {Sock, {data, Data}};
parked_event({tcp_closed, Sock}) -> {Sock, closed};
parked_event({tcp_error, Sock, Reason}) -> {Sock, {error, Reason}};
parked_event(_) -> other.

%% @doc The owner change of gen_tcp:controlling_process/2 without its
%% safety steps (read the active mode, set it false, move queued messages,
%% set it back): the caller knows the socket is passive and that no message
%% of it is queued. The new owner is linked to the port, the caller (the
%% old owner) unlinked from it.
-spec handover(gen_tcp:socket(), pid()) -> ok | {error, term()}.
handover(Sock, Pid) ->
    try erlang:port_connect(Sock, Pid) of
        true -> true = unlink(Sock), ok
    catch error:_ -> {error, closed}
    end.

-spec unpark(#inet{}) -> #inet{}.
unpark(#inet{sock = Sock, buffer = Buffer}) ->
    %% park/1 left the driver's buffer setting at `buffer', as a new socket has it
    new(Sock, Buffer).

%% The buffer for the next `once' after a read of N bytes that did not
%% fill its buffer: the smallest power of two from ?ARM_BUFFER that holds
%% twice N, at most `buffer'. A request/response client's next request
%% then fits in one read, and the size class moves only when its requests
%% change size by about twice.
once_buffer(_N, Buffer, C) when C >= Buffer -> Buffer;
once_buffer(N, _Buffer, C) when 2 * N =< C -> C;
once_buffer(N, Buffer, C) -> once_buffer(N, Buffer, 2 * C).
