%% The inet transport (parking included) with faults a test can arm:
%% <ul>
%%  <li>the next accept fails with a given reason (the socket it accepted
%%      is closed), as accept(2) does when a client resets before it is
%%      accepted (econnaborted): a suite sees what an accept error does
%%      without exhausting descriptors;</li>
%%  <li>the next pause first tells a test process, then waits, running,
%%      until the socket has read more bytes (at most 2 s): a chunk the
%%      driver delivers meanwhile reaches the connection while it is busy
%%      deciding to park, the race sluice_conn:queued/0 is about;</li>
%%  <li>the next handover (an acceptor's, of a connection it has just
%%      counted, to a connection supervisor) first tells a test process,
%%      then waits for its go: a suspend can then come in the middle of an
%%      admission.</li>
%% </ul>
%% And, where a suite asks (prefix_to_connection/0), it is a transport
%% that leaves the bytes read after a PROXY header to the connection (no
%% delivers_prefix/0 of its own: its handshake does not take them),
%% rather than inet, which puts them back in its stream. Its tls/0 is
%% inet's (`starttls': its connection state is inet's), unless a suite
%% makes it say another (says_tls/1).
-module(sluice_faulty_transport).
-behaviour(sluice_transport).

-export([fail_next_accept/1, data_before_next_pause/1, hold_next_handover/1, go/1, disarm/0,
         prefix_to_connection/0, says_tls/1]).
-export([listen/2, accept/2, listen_port/1, close_listener/1, controlling_process/2, handover/2,
         recv/3, bytes_received/1, close_socket/1, peername/1, sockname/1,
         handshake/2, activate/2, classify/2, await/2, pause/1, send/2, output_queued/1, shutdown/2,
         close/1, info/1, socket/1]).
-export([park/1, parked_event/1, unpark/1, delivers_prefix/0, tls/0]).

-define(FAULT, {?MODULE, fault}).
-define(PAUSE_FAULT, {?MODULE, pause_fault}).
-define(HANDOVER_FAULT, {?MODULE, handover_fault}).
-define(PREFIX_TO_CONN, {?MODULE, prefix_to_connection}).
-define(TLS, {?MODULE, tls}).
-define(INET, sluice_transport_inet).

-spec fail_next_accept(term()) -> ok.
fail_next_accept(Reason) ->
    persistent_term:put(?FAULT, Reason).

%% The next pause sends `{pausing, ConnPid}' to Pid, then waits for data.
-spec data_before_next_pause(pid()) -> ok.
data_before_next_pause(Pid) ->
    persistent_term:put(?PAUSE_FAULT, Pid).

%% The next handover sends `{handing_over, self()}' to Pid, then waits (at
%% most 5 s) until go/1 is called with the pid it sent.
-spec hold_next_handover(pid()) -> ok.
hold_next_handover(Pid) ->
    persistent_term:put(?HANDOVER_FAULT, Pid).

-spec go(pid()) -> ok.
go(Held) ->
    Held ! {?MODULE, go},
    ok.

%% From now on (until disarm/0) the bytes after a PROXY header are left
%% to the connection, as by a transport without delivers_prefix/0.
-spec prefix_to_connection() -> ok.
prefix_to_connection() ->
    persistent_term:put(?PREFIX_TO_CONN, true).

%% From now on (until disarm/0) tls/0 answers Tls.
-spec says_tls(sluice_transport:tls()) -> ok.
says_tls(Tls) ->
    persistent_term:put(?TLS, Tls).

tls() ->
    persistent_term:get(?TLS, ?INET:tls()).

%% No fault left armed for whatever runs next.
-spec disarm() -> ok.
disarm() ->
    _ = [persistent_term:erase(F)
         || F <- [?FAULT, ?PAUSE_FAULT, ?HANDOVER_FAULT, ?PREFIX_TO_CONN, ?TLS]],
    ok.

delivers_prefix() ->
    not persistent_term:get(?PREFIX_TO_CONN, false) andalso ?INET:delivers_prefix().

handshake(Sock, Opts) ->
    case persistent_term:get(?PREFIX_TO_CONN, false) of
        true -> ?INET:handshake(Sock, maps:remove(prefix, Opts));
        false -> ?INET:handshake(Sock, Opts)
    end.

pause(TS) ->
    case persistent_term:get(?PAUSE_FAULT, none) of
        none ->
            ok;
        Pid ->
            _ = persistent_term:erase(?PAUSE_FAULT),
            Sock = ?INET:socket(TS),
            Pid ! {pausing, self()},
            spin_until_read(Sock, ?INET:bytes_received(Sock),
                            erlang:monotonic_time(millisecond) + 2000)
    end,
    ?INET:pause(TS).

%% No receive here: a receive would take the chunk in, which is what the
%% connection must do itself.
spin_until_read(Sock, Before, Deadline) ->
    case ?INET:bytes_received(Sock) of
        Before ->
            case erlang:monotonic_time(millisecond) < Deadline of
                true -> spin_until_read(Sock, Before, Deadline);
                false -> ok
            end;
        _ ->
            ok
    end.

accept(LSock, Timeout) ->
    case ?INET:accept(LSock, Timeout) of
        {ok, Sock} ->
            case persistent_term:get(?FAULT, none) of
                none ->
                    {ok, Sock};
                Reason ->
                    _ = persistent_term:erase(?FAULT),
                    ok = ?INET:close_socket(Sock),
                    {error, Reason}
            end;
        Error ->
            Error
    end.

listen(Port, Opts) -> ?INET:listen(Port, Opts).
listen_port(LSock) -> ?INET:listen_port(LSock).
close_listener(LSock) -> ?INET:close_listener(LSock).
controlling_process(Sock, Pid) -> ?INET:controlling_process(Sock, Pid).
handover(Sock, Pid) ->
    case persistent_term:get(?HANDOVER_FAULT, none) of
        none ->
            ok;
        Test ->
            _ = persistent_term:erase(?HANDOVER_FAULT),
            Test ! {handing_over, self()},
            receive {?MODULE, go} -> ok after 5000 -> ok end
    end,
    ?INET:handover(Sock, Pid).
output_queued(TS) -> ?INET:output_queued(TS).
recv(Sock, Len, Timeout) -> ?INET:recv(Sock, Len, Timeout).
bytes_received(Sock) -> ?INET:bytes_received(Sock).
close_socket(Sock) -> ?INET:close_socket(Sock).
peername(Sock) -> ?INET:peername(Sock).
sockname(Sock) -> ?INET:sockname(Sock).
activate(TS, Mode) -> ?INET:activate(TS, Mode).
classify(Msg, TS) -> ?INET:classify(Msg, TS).
await(TS, Timeout) -> ?INET:await(TS, Timeout).
park(TS) -> ?INET:park(TS).
parked_event(Msg) -> ?INET:parked_event(Msg).
unpark(TS) -> ?INET:unpark(TS).
send(TS, Data) -> ?INET:send(TS, Data).
shutdown(TS, How) -> ?INET:shutdown(TS, How).
close(TS) -> ?INET:close(TS).
info(TS) -> ?INET:info(TS).
socket(TS) -> ?INET:socket(TS).
