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
%% The budgets keep the flow-control meaning of the active modes: `false'
%% and `once' read one chunk per call (sluice_conn calls again after each
%% chunk); `N' reads up to N chunks while they come full, so the mailbox
%% never holds more than N chunks, and if the last was full queues a
%% wake-up message behind them: the next read comes once they have been
%% handled and their replies sent. A short read leaves a select behind
%% (see read/4): the NIF sends `{'$socket', S, select, Ref}' when more
%% data comes, and sluice_conn calls activate/2 again. `true' is `N' =
%% ?TRUE_BURST: unlike the inet driver, which keeps reading into the
%% mailbox, a process that reads for itself cannot read while it is
%% handling, so `true' is flow-controlled here too.
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
-define(DEFAULT_BUFFER, 65536).
-define(NEXT, sluice_next).
-define(TRUE_BURST, 100).
-define(SMALL_READ, 4096).
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
            case run(Steps) of
                ok -> {ok, L};
                Error -> _ = socket:close(L), Error
            end;
        Error ->
            Error
    end.

run([]) -> ok;
run([F | Rest]) ->
    case F() of
        ok -> run(Rest);
        true -> run(Rest);
        {error, _} = E -> E
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

%% @doc Read into the caller's mailbox what the active mode allows (see the
%% module doc). Must be called by the connection process.
-spec activate(socket:socket(), false | once | true | pos_integer()) -> ok | {error, term()}.
activate(Sock, false) -> read(Sock, 1, once, ask(Sock));
activate(Sock, once) -> read(Sock, 1, once, ask(Sock));
activate(Sock, true) -> read(Sock, ?TRUE_BURST, more, ask(Sock));
activate(Sock, N) when is_integer(N), N > 0 -> read(Sock, N, more, ask(Sock)).

%% Each read asks for a whole buffer: a stream socket then answers a short
%% read with the data *and* a select already made (`{select, {_, Data}}'),
%% so finding the kernel empty costs no second recv (about 2.5 us a read
%% here: a syscall, a 64 KiB buffer, the select). A full buffer means more
%% is probably waiting. `Then': `once' (sluice_conn reads again after each
%% chunk) or `more' (read on while budget is left, then wake up again).
read(Sock, Left, Then, Ask) ->
    case socket:recv(Sock, Ask, nowait) of
        {ok, Data} when Then =:= once ->
            self() ! {tcp, Sock, Data},
            _ = filled(Ask),
            ok;
        {ok, Data} when Left > 1 ->
            self() ! {tcp, Sock, Data},
            read(Sock, Left - 1, Then, filled(Ask));
        {ok, Data} ->
            %% The budget is spent and more may be waiting: read again only
            %% after these chunks have been handled and their replies sent,
            %% through a message that looks like the NIF's own wake-up.
            self() ! {tcp, Sock, Data},
            self() ! {'$socket', Sock, select, ?NEXT},
            _ = filled(Ask),
            ok;
        {select, {_SelectInfo, Data}} ->
            %% The rest of what the kernel had; the NIF's wake-up follows
            %% when more comes.
            self() ! {tcp, Sock, Data},
            short(Data);
        {select, _SelectInfo} ->
            ok;
        {error, {Reason, Data}} when is_binary(Data), byte_size(Data) > 0 ->
            self() ! {tcp, Sock, Data},
            self() ! closed_or_error(Sock, Reason),
            ok;
        {error, {Reason, _}} ->
            self() ! closed_or_error(Sock, Reason),
            ok;
        {error, Reason} ->
            self() ! closed_or_error(Sock, Reason),
            ok
    end.

%% How much to ask for: the whole buffer while reads fill what they ask,
%% ?SMALL_READ after a short one. The NIF allocates what is asked before it
%% reads, and a 64 KiB buffer for a 17-byte frame costs about 0.7 us here;
%% a small read that fills is followed at once by a whole-buffer one.
ask(Sock) ->
    case get(?MODULE) of
        {_Full, Ask} -> Ask;
        undefined -> element(1, buffer(Sock))
    end.

filled(Ask) ->
    case get(?MODULE) of
        {Full, Ask} when Ask < Full -> put(?MODULE, {Full, Full}), Full;
        {_Full, Ask} -> Ask;
        _ -> Ask
    end.

short(Data) ->
    _ = case get(?MODULE) of
            {Full, Ask} when Ask =:= Full, byte_size(Data) < ?SMALL_READ ->
                put(?MODULE, {Full, min(Full, ?SMALL_READ)});
            _ ->
                ok
        end,
    ok.

closed_or_error(Sock, closed) -> {tcp_closed, Sock};
closed_or_error(Sock, Reason) -> {tcp_error, Sock, Reason}.

%% This connection's read size, looked up once per process (the caller
%% owns one socket): {Full, Ask}.
buffer(Sock) ->
    Full = case socket:getopt(Sock, {otp, rcvbuf}) of
               {ok, N} when is_integer(N) -> N;
               _ -> ?DEFAULT_BUFFER
           end,
    put(?MODULE, {Full, Full}),
    {Full, Full}.

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

%% @doc `{active, _}' is accepted and ignored: nothing is ever delivered
%% that the connection process did not read itself, so stopping delivery
%% (what sluice_conn asks before a graceful close) is already true.
-spec setopts(socket:socket(), list()) -> ok | {error, term()}.
setopts(Sock, Opts) ->
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
