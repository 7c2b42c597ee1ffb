%% @doc The inet-driver transport (gen_tcp). Sends are asynchronous port
%% commands: the driver's `{inet_reply, S, Status}' is handled by the
%% connection loop instead of being waited for after every write, which is
%% what lets one process ack millions of frames a second (seed 001).
-module(sluice_transport_inet).
-behaviour(sluice_transport).

-export([listen/2, accept/2, port/1, controlling_process/2, activate/2,
         send_async/2, send/2, setopts/2, peername/1, sockname/1, shutdown/2,
         close/1]).

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
%% an idle or slow connection does not hold 256 KiB (1,000 connections that
%% sent one small frame each: +2.1 MB of binaries either way).
-define(DEFAULT_BUFFER, 262144).

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
activate(Sock, Mode) ->
    inet:setopts(Sock, [{active, Mode}]).

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
