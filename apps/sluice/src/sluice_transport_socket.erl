%% @doc The transport on OTP's `socket' NIF (`transport => socket').
%%
%% The connection process reads for itself: nothing arrives unless it calls
%% `socket:recv(S, 0, nowait)'. activate/2 reads what the kernel has, up to
%% a budget that stands for the active mode, and posts each chunk to its own
%% mailbox as `{tcp, S, Data}', exactly as the inet driver would, so that
%% sluice_conn's loop (and every handler) is the same on both backends. A
%% message to oneself is not a process hop: no other process runs, nothing
%% is scheduled; seed 001 showed that a hop per message is what costs.
%%
%% activate/2 keeps the inet driver's accounting, so sluice_conn's flow
%% control works unchanged: `{active, N}' grants N chunks (added to what is
%% left, as inet:setopts/2 does), each chunk posted uses one, and at zero
%% it posts `{tcp_passive, S}'; `once' and `false' grant one. Reading stops
%% when the grant is used or the kernel is empty; in the second case the
%% NIF holds a select and sends `{'$socket', S, select, Ref}' when data
%% comes, on which sluice_conn calls activate(S, ready). So the mailbox
%% never holds more chunks than granted. `true' reads in bursts of
%% ?TRUE_BURST with a wake-up message queued behind each: unlike the inet
%% driver, which keeps reading into the mailbox, a process that reads for
%% itself cannot read while it is handling, so `true' is bounded here too.
%%
%% Sends never block the loop without limit: `socket:send(S, D, nowait)';
%% if the kernel takes only part, the rest is sent as the socket becomes
%% writable, waiting at most the listener's `send_timeout' (default
%% ?DEFAULT_SEND_TIMEOUT ms) before failing with `{error, timeout}'. While
%% a send waits nothing is read, so a client that never reads is held back
%% by TCP and cannot grow the server's memory.
-module(sluice_transport_socket).
-behaviour(sluice_transport).

-export([listen/2, accept/2, port/1, controlling_process/2, activate/2,
         send_async/2, send/2, setopts/2, peername/1, sockname/1, shutdown/2,
         close/1]).

%% Bytes a recv may return: the equivalent of the inet driver's `buffer'
%% (64 KiB there too, and for the same reason: a pipelining client then
%% costs one handler call per 64 KiB, not per packet).
-define(DEFAULT_BUFFER, 262144).
-define(NEXT, sluice_next).
-define(TRUE_BURST, 100).
-define(SMALL_READ, 4096).
-define(MAX_GRANT, 32767).

%% The read state of the calling connection process: the read size, what
%% to ask for next, chunks still granted, whether the NIF holds a select.
-record(rd, {full :: pos_integer(),
             ask :: pos_integer(),
             grant = 0 :: non_neg_integer(),
             mode = once :: once | n | true,
             pending = false :: boolean()}).
-define(DEFAULT_SEND_TIMEOUT, 60000).

-spec listen(inet:port_number(), sluice_transport:listen_opts()) ->
          {ok, socket:socket()} | {error, term()}.
listen(Port, #{ip := IP, backlog := Backlog, reuseport := ReusePort,
               socket_opts := SocketOpts}) ->
    Family = case tuple_size(IP) of 4 -> inet; 8 -> inet6 end,
    case socket:open(Family, stream, tcp) of
        {ok, L} ->
            Steps = [fun() -> socket:setopt(L, {socket, reuseaddr}, true) end,
                     fun() -> ReusePort =:= false orelse
                                  socket:setopt(L, {socket, reuseport}, true) end,
                     fun() -> sluice_socket_opts:set(L, SocketOpts) end,
                     fun() -> socket:setopt(L, {tcp, nodelay},
                                            proplists:get_value(nodelay, SocketOpts, true)) end,
                     fun() -> socket:bind(L, #{family => Family, addr => IP, port => Port}) end,
                     fun() -> socket:listen(L, Backlog) end,
                     %% What every accepted socket needs that the kernel
                     %% does not copy from the listen socket: kept in the
                     %% listen socket's metadata for accept/2.
                     fun() -> socket:setopt(L, {otp, meta}, accepted_opts(SocketOpts)) end],
            case sluice_socket_opts:steps(Steps) of
                ok -> {ok, L};
                Error -> _ = socket:close(L), Error
            end;
        Error ->
            Error
    end.

accepted_opts(SocketOpts) ->
    #{rcvbuf => proplists:get_value(buffer, SocketOpts, ?DEFAULT_BUFFER),
      send_timeout => case proplists:get_value(send_timeout, SocketOpts, ?DEFAULT_SEND_TIMEOUT) of
                          infinity -> infinity;
                          T -> T
                      end}.

-spec accept(socket:socket(), timeout()) -> {ok, socket:socket()} | {error, term()}.
accept(LSock, Timeout) ->
    case socket:accept(LSock, Timeout) of
        {ok, S} ->
            %% The NIF's read size and the send timeout are per socket.
            {ok, Meta = #{rcvbuf := RcvBuf}} = socket:getopt(LSock, {otp, meta}),
            _ = socket:setopt(S, {otp, rcvbuf}, RcvBuf),
            _ = socket:setopt(S, {otp, meta}, Meta),
            {ok, S};
        Error ->
            Error
    end.

-spec port(socket:socket()) -> {ok, inet:port_number()} | {error, term()}.
port(Sock) ->
    case socket:sockname(Sock) of
        {ok, #{port := Port}} -> {ok, Port};
        Error -> Error
    end.

-spec controlling_process(socket:socket(), pid()) -> ok | {error, term()}.
controlling_process(Sock, Pid) ->
    socket:setopt(Sock, {otp, controlling_process}, Pid).

%% @doc Grant reads as the inet driver's active modes do, and read what is
%% granted and there into the caller's mailbox (see the module doc); `ready'
%% is the NIF's (or our own) wake-up. Must be called by the connection
%% process, which owns one socket: the state is in its process dictionary.
-spec activate(socket:socket(), false | once | true | pos_integer() | ready) ->
          ok | {error, term()}.
activate(Sock, Mode) ->
    St = state(Sock),
    St2 = case Mode of
              ready -> St#rd{pending = false, grant = refill(St)};
              false -> St#rd{mode = once, grant = 1};
              once -> St#rd{mode = once, grant = 1};
              true -> St#rd{mode = true, grant = ?TRUE_BURST};
              K when St#rd.mode =:= n -> St#rd{grant = min(St#rd.grant + K, ?MAX_GRANT)};
              K -> St#rd{mode = n, grant = min(K, ?MAX_GRANT)}
          end,
    case St2 of
        #rd{pending = true} -> put(?MODULE, St2), ok;
        #rd{grant = 0} -> put(?MODULE, St2), ok;
        _ -> pump(Sock, St2)
    end.

%% `true' reads in bursts; the other modes wait for a new grant.
refill(#rd{mode = true, grant = 0}) -> ?TRUE_BURST;
refill(#rd{grant = G}) -> G.

%% Each read asks for a whole buffer: a stream socket then answers a short
%% read with the data *and* a select already made (`{select, {_, Data}}'),
%% so finding the kernel empty costs no second recv (about 2.5 us a read
%% here: a syscall, a buffer, the select). A full buffer means more is
%% probably waiting.
pump(Sock, St = #rd{ask = Ask}) ->
    case socket:recv(Sock, Ask, nowait) of
        {ok, Data} ->
            self() ! {tcp, Sock, Data},
            St2 = used(Sock, St#rd{ask = St#rd.full}),
            case St2#rd.grant of
                0 -> put(?MODULE, St2), ok;
                _ -> pump(Sock, St2)
            end;
        {select, {_SelectInfo, Data}} ->
            %% The rest of what the kernel had; the NIF's wake-up follows
            %% when more comes.
            self() ! {tcp, Sock, Data},
            Small = case byte_size(Data) < ?SMALL_READ of
                        true -> min(St#rd.full, ?SMALL_READ);
                        false -> St#rd.full
                    end,
            put(?MODULE, used(Sock, St#rd{pending = true, ask = Small})),
            ok;
        {select, _SelectInfo} ->
            put(?MODULE, St#rd{pending = true}),
            ok;
        {error, {Reason, Data}} when is_binary(Data), byte_size(Data) > 0 ->
            self() ! {tcp, Sock, Data},
            self() ! closed_or_error(Sock, Reason),
            put(?MODULE, St#rd{grant = 0}),
            ok;
        {error, {Reason, _}} ->
            self() ! closed_or_error(Sock, Reason),
            put(?MODULE, St#rd{grant = 0}),
            ok;
        {error, Reason} ->
            self() ! closed_or_error(Sock, Reason),
            put(?MODULE, St#rd{grant = 0}),
            ok
    end.

%% One chunk delivered. At the end of a grant `N' says `tcp_passive' as the
%% driver does, and `true' queues a wake-up behind its burst, so it reads
%% on after the burst has been handled (unless a select is pending).
used(Sock, St = #rd{grant = 1, mode = n}) ->
    self() ! {tcp_passive, Sock},
    St#rd{grant = 0};
used(Sock, St = #rd{grant = 1, mode = true, pending = false}) ->
    self() ! {'$socket', Sock, select, ?NEXT},
    St#rd{grant = 0};
used(_Sock, St = #rd{grant = G}) ->
    St#rd{grant = G - 1}.

closed_or_error(Sock, closed) -> {tcp_closed, Sock};
closed_or_error(Sock, Reason) -> {tcp_error, Sock, Reason}.

%% This connection's read state; the read size is looked up once.
state(Sock) ->
    case get(?MODULE) of
        #rd{} = St ->
            St;
        undefined ->
            Full = case socket:getopt(Sock, {otp, rcvbuf}) of
                       {ok, N} when is_integer(N) -> N;
                       _ -> ?DEFAULT_BUFFER
                   end,
            #rd{full = Full, ask = Full}
    end.

%% @doc Send without waiting for the peer; blocks only while the kernel's
%% send buffer is full, for at most the send timeout (see the module doc).
-spec send_async(socket:socket(), iodata()) -> ok | {error, term()}.
send_async(Sock, Data) ->
    case socket:send(Sock, Data, nowait) of
        ok -> ok;
        {select, {SelectInfo, Rest}} -> wait_writable(Sock, Rest, SelectInfo, deadline(Sock));
        {select, SelectInfo} -> wait_writable(Sock, Data, SelectInfo, deadline(Sock));
        {error, {Reason, _Rest}} -> {error, Reason};
        {error, Reason} -> {error, Reason}
    end.

deadline(Sock) ->
    case socket:getopt(Sock, {otp, meta}) of
        {ok, #{send_timeout := infinity}} -> infinity;
        {ok, #{send_timeout := T}} -> erlang:monotonic_time(millisecond) + T;
        _ -> erlang:monotonic_time(millisecond) + ?DEFAULT_SEND_TIMEOUT
    end.

wait_writable(Sock, Rest, {select_info, _, Ref} = SelectInfo, Deadline) ->
    Timeout = case Deadline of
                  infinity -> infinity;
                  _ -> max(0, Deadline - erlang:monotonic_time(millisecond))
              end,
    receive
        {'$socket', Sock, select, Ref} ->
            case socket:send(Sock, Rest, nowait) of
                ok -> ok;
                {select, {SI, Rest2}} -> wait_writable(Sock, Rest2, SI, Deadline);
                {select, SI} -> wait_writable(Sock, Rest, SI, Deadline);
                {error, {Reason, _}} -> {error, Reason};
                {error, Reason} -> {error, Reason}
            end;
        {'$socket', Sock, abort, {Ref, Reason}} ->
            {error, Reason}
    after Timeout ->
            _ = socket:cancel(Sock, SelectInfo),
            {error, timeout}
    end.

-spec send(socket:socket(), iodata()) -> ok | {error, term()}.
send(Sock, Data) ->
    case socket:send(Sock, Data) of
        ok -> ok;
        {error, {Reason, _Rest}} -> {error, Reason};
        {error, Reason} -> {error, Reason}
    end.

%% @doc `{active, false}' withdraws what is granted (sluice_conn asks it
%% before a graceful close; nothing is in flight: reads happen only in the
%% caller); the other options go to the socket.
-spec setopts(socket:socket(), list()) -> ok | {error, term()}.
setopts(Sock, Opts) ->
    _ = case lists:keyfind(active, 1, Opts) of
            {active, false} -> put(?MODULE, (state(Sock))#rd{grant = 0, mode = once});
            _ -> ok
        end,
    sluice_socket_opts:set(Sock, [O || O <- Opts, element(1, O) =/= active]).

-spec peername(socket:socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
peername(Sock) ->
    sluice_socket_opts:address(socket:peername(Sock)).

-spec sockname(socket:socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
sockname(Sock) ->
    sluice_socket_opts:address(socket:sockname(Sock)).

-spec shutdown(socket:socket(), read | write | read_write) -> ok | {error, term()}.
shutdown(Sock, How) ->
    socket:shutdown(Sock, How).

-spec close(socket:socket()) -> ok.
close(Sock) ->
    _ = socket:close(Sock),
    ok.
