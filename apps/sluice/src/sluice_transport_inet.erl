%% @doc The inet-driver transport (gen_tcp). Sends are asynchronous port
%% commands: the driver's `{inet_reply, S, Status}' is handled by the
%% connection loop instead of being waited for after every write, which is
%% what lets one process ack millions of frames a second (seed 001).
-module(sluice_transport_inet).
-behaviour(sluice_transport).

-export([listen/2, accept/2, port/1, controlling_process/2, activate/2,
         send_async/2, send/2, setopts/2, peername/1, sockname/1, shutdown/2,
         close/1, park/1, handover/2]).

%% SOL_SOCKET / SO_REUSEPORT on Linux; OTP 25's gen_tcp has no option for it.
-define(SOL_SOCKET, 1).
-define(SO_REUSEPORT, 15).

%% The driver's user-space read buffer: each {tcp, S, Data} carries at most
%% this much. Its default (about 1.5 KB) makes a pipelining client cost one
%% message and one handler call per packet; 64 KiB took pipelined 17-byte
%% frames from 7.8M/s to 85M/s here, and 256 KiB (the C reference's read
%% size) to ~150M/s with half the server CPU per frame (6.4 ns against
%% 10.3 ns; bin/sluice bench --scenario pipeline --server sluice --rounds 5,
%% 2026-11-22): fewer reads, fewer acks, fewer wake-ups of the client. 1 MiB
%% was no faster (8.1 ns). The driver trims the binary to what was read, so
%% a connection that has been read from does not hold 256 KiB (1,000
%% connections that sent one small frame each: +2.1 MB of binaries either
%% way); one that was armed and never read from does: see activate/2.
-define(DEFAULT_BUFFER, 262144).

%% The read buffer a socket is armed with (see activate/2): what an idle
%% connection holds. A Ping or an ack frame fits.
-define(ARM_BUFFER, 512).

%% The read buffer a parked socket is armed with (see park/1). The driver
%% allocates it when armed and holds it until data comes: at 512 bytes it
%% was 538 B of a parked connection's 2.3 KB, at 64 it is 90 B (the rest
%% is the port and driver state, ~1.7 KB). Only the read that wakes a
%% parked connection is this small.
-define(PARK_BUFFER, 64).

%% A client that never reads its replies fills the socket's send queue; the
%% driver then marks the port busy and the connection process is suspended
%% in its next send, where neither the idle timeout nor a drain can reach
%% it. send_timeout bounds that: the driver gives up and closes the socket
%% (send_timeout_close) and the connection ends with {error, timeout}.
-define(DEFAULT_SEND_TIMEOUT, 30000).

-spec listen(inet:port_number(), sluice_transport:listen_opts()) ->
          {ok, gen_tcp:socket()} | {error, term()}.
listen(Port, #{ip := IP, backlog := Backlog, reuseport := ReusePort,
               socket_opts := SocketOpts}) ->
    Family = case tuple_size(IP) of 4 -> inet; 8 -> inet6 end,
    Reuse = case ReusePort of
                true -> [{raw, ?SOL_SOCKET, ?SO_REUSEPORT, <<1:32/native>>}];
                false -> []
            end,
    %% User options come first so that the library's own (binary, raw
    %% packets, passive until the connection process arms it) win.
    %% exit_on_close false: a client that shuts down its sending side
    %% after its last request is still owed the replies; with the default
    %% the driver would close the socket on its FIN and drop them.
    Defaults = [{K, V} || {K, V} <- [{buffer, ?DEFAULT_BUFFER},
                                     {send_timeout, ?DEFAULT_SEND_TIMEOUT},
                                     {send_timeout_close, true}],
                          not lists:keymember(K, 1, SocketOpts)],
    gen_tcp:listen(Port, SocketOpts ++ Defaults ++ Reuse ++
                       [Family, {ip, IP}, binary, {packet, raw}, {active, false},
                        {reuseaddr, true}, {backlog, Backlog}, {nodelay, true},
                        {exit_on_close, false}]).

-spec accept(gen_tcp:socket(), timeout()) -> {ok, gen_tcp:socket()} | {error, term()}.
accept(LSock, Timeout) ->
    gen_tcp:accept(LSock, Timeout).

-spec port(gen_tcp:socket()) -> {ok, inet:port_number()} | {error, term()}.
port(Sock) ->
    inet:port(Sock).

-spec controlling_process(gen_tcp:socket(), pid()) -> ok | {error, term()}.
controlling_process(Sock, Pid) ->
    gen_tcp:controlling_process(Sock, Pid).

-spec activate(gen_tcp:socket(), false | once | true | pos_integer()) -> ok | {error, term()}.
activate(Sock, false) ->
    %% gen_tcp:recv/2 is this call plus a blocking receive; doing the receive
    %% in the connection loop keeps the process responsive to other messages.
    case prim_inet:async_recv(Sock, 0, -1) of
        {ok, _Ref} -> ok;
        Error -> Error
    end;
activate(Sock, once) ->
    inet:setopts(Sock, [{active, once}]);
activate(Sock, Mode) ->
    %% Arming a socket that has no read buffer makes the driver allocate a
    %% whole `buffer' at once and hold it until data comes: 256 KiB for
    %% every connection that connects and says nothing (1,000 silent
    %% connections: 262 MB). Arm with a small buffer, then put the real size
    %% back: reads that find data allocate that (measured: only the first
    %% read after arming is small; pipelined and lock-step ack no slower).
    %% With the trick: 4.1 KB per silent connection in all. Two more port
    %% calls per N chunks. Not fixed: the chunk that ends an active-N window
    %% leaves its buffer allocated, so a connection that goes quiet right
    %% then holds a whole buffer until its next read (active 2, two Pings:
    %% 262 KB). `once' and `false' re-arm after every chunk and keep the
    %% single call; their quiet connections hold a whole buffer.
    %%
    %% The trick costs a small read after every arming, so it is skipped
    %% when the caller (the connection process) has chunks queued: the
    %% socket is busy, the next read finds data, and a top-up of a busy
    %% socket then costs one port call (pipelined at active 10: 9.2 ns of
    %% server CPU per frame with the trick on every top-up, 6.6 ns at 100).
    %% One queued message may be the driver's inet_reply for the last ack.
    case erlang:process_info(self(), message_queue_len) of
        {message_queue_len, Queued} when Queued > 1 ->
            inet:setopts(Sock, [{active, Mode}]);
        _ ->
            arm_small(Sock, Mode, ?ARM_BUFFER)
    end.

%% Set the active mode with the read buffer at Small for the arming (the
%% driver allocates it then), and put the real size back for later reads.
arm_small(Sock, Mode, Small) ->
    case inet:getopts(Sock, [buffer]) of
        {ok, [{buffer, Size}]} when Size > Small ->
            case inet:setopts(Sock, [{buffer, Small}, {active, Mode}]) of
                ok -> inet:setopts(Sock, [{buffer, Size}]);
                Error -> Error
            end;
        {ok, _} ->
            inet:setopts(Sock, [{active, Mode}]);
        Error ->
            Error
    end.

%% @doc Arm a parked socket: one message (data, closed or error) to its
%% owner, with a tiny read buffer held meanwhile.
-spec park(gen_tcp:socket()) -> ok | {error, term()}.
park(Sock) ->
    arm_small(Sock, once, ?PARK_BUFFER).

%% @doc The owner change of gen_tcp:controlling_process/2 without its
%% safety steps (read the active mode, set it false, move queued messages,
%% set it back): the caller knows the socket is passive and that no message
%% of it is queued. The new owner is linked to the port, the caller
%% (the old owner) unlinked from it.
-spec handover(gen_tcp:socket(), pid()) -> ok | {error, term()}.
handover(Sock, Pid) ->
    try erlang:port_connect(Sock, Pid) of
        true -> true = unlink(Sock), ok
    catch error:_ -> {error, closed}
    end.

-spec send_async(gen_tcp:socket(), iodata()) -> ok | {error, term()}.
send_async(Sock, Data) ->
    try erlang:port_command(Sock, Data) of
        true -> ok
    catch error:_ -> {error, closed}
    end.

-spec send(gen_tcp:socket(), iodata()) -> ok | {error, term()}.
send(Sock, Data) ->
    gen_tcp:send(Sock, Data).

-spec setopts(gen_tcp:socket(), list()) -> ok | {error, term()}.
setopts(Sock, Opts) ->
    inet:setopts(Sock, Opts).

-spec peername(gen_tcp:socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
peername(Sock) ->
    inet:peername(Sock).

-spec sockname(gen_tcp:socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
sockname(Sock) ->
    inet:sockname(Sock).

-spec shutdown(gen_tcp:socket(), read | write | read_write) -> ok | {error, term()}.
shutdown(Sock, How) ->
    gen_tcp:shutdown(Sock, How).

-spec close(gen_tcp:socket()) -> ok.
close(Sock) ->
    gen_tcp:close(Sock).
