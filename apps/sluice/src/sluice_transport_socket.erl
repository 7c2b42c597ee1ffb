%% @doc The transport on OTP's `socket' NIF (`transport => socket').
%%
%% Nothing arrives unless the connection process reads: `socket:recv(S,
%% Size, nowait)' either returns data or arms a select, and the NIF then
%% sends `{'$socket', S, select, Ref}' when data comes. This module reads
%% when classify/2 sees that message (or its own wake-up, below) and the
%% loop's grant allows, and keeps the grant itself: one read is one chunk,
%% and reading stops when the grant is used, so the mailbox never holds
%% more than was granted and a client that outruns its handler is held
%% back by TCP. `true' grants without end.
%%
%% A read that filled the buffer means more is probably waiting, and the
%% NIF sends nothing for data already there: the module then posts itself
%% a wake-up (`{sluice_transport_socket, S, wake}') to read again after
%% the loop has handled this chunk. A message to oneself is not a process
%% hop: nothing else is scheduled.
%%
%% Sends never block the loop without limit: `socket:send(S, D, nowait)';
%% if the kernel takes only part, the rest is sent as the socket becomes
%% writable, waiting at most the listener's `send_timeout' before failing
%% with `{error, timeout}'. While a send waits nothing is read, so a client
%% that never reads is held back by TCP and cannot grow the server's memory.
%% @private
-module(sluice_transport_socket).
-behaviour(sluice_transport).

-export([listen/2, accept/2, listen_port/1, close_listener/1]).
-export([controlling_process/2, handover/2, recv/3, bytes_received/1, close_socket/1,
         peername/1, sockname/1, setopts/2, getopts/2]).
-export([send_slice/0, delivers_prefix/0, handshake_waits/0, tls/0]).
-export([handshake/2, activate/2, classify/2, await/2, pause/1, send/2, output_queued/1,
         shutdown/2, close/1, info/1, socket/1]).
-export([sendfile/4, handoff/2]).
-export([recv_pause/1, recv_read/2, recv_resume/1]).

%% A short read asks for no more than this next time: a socket that
%% delivers small chunks then costs small buffers.
-define(SMALL_READ, 4096).
%% The driver's limit for `{active, N}', kept for the same meaning.
-define(MAX_GRANT, 32767).

%% The read side: `idle' (nothing will come unless we read), `selecting'
%% (the NIF holds a select: its message comes when data does), `woken' (a
%% wake-up to ourselves is queued) or `ready' (data may be there, but the
%% grant was used: read on the next grant).
%% `prefix': bytes read after a PROXY header (handshake/2), the first
%% chunk to deliver, once granted, kept under ?PREFIX(Sock) in the process
%% dictionary: whichever takes them first, the first grant or a handler's
%% sluice:recv/3 (in init/2), takes them out, and the other finds none.
-type reading() :: idle | {selecting, reference()} | woken | ready | closed | prefix.

-define(PREFIX(Sock), {?MODULE, prefix, Sock}).

-record(sk, {sock :: socket:socket(),
             full :: pos_integer(),         % socket_opts' buffer
             ask :: pos_integer(),          % the size of the next read
             grant = 0 :: non_neg_integer(),
             mode = once :: once | n | true,
             reading = idle :: reading(),
             send_timeout :: timeout()}).

%%% Listening

-spec listen(inet:port_number(), sluice_transport:listen_opts()) ->
          {ok, socket:socket()} | {error, term()}.
listen(Port, #{ip := IP, backlog := Backlog, reuseport := ReusePort,
               socket_opts := SocketOpts}) ->
    Family = sluice_transport:family(IP),
    case socket:open(Family, stream, default) of
        {ok, L} ->
            %% Options set on the listen socket are inherited by accepted
            %% sockets (by the kernel), so accept/2 sets none. (On TCP: a
            %% Unix socket's are set again by handshake/2.)
            Steps = [fun() -> socket:setopt(L, {socket, reuseaddr}, true) end,
                     fun() -> ReusePort =:= false orelse
                                  socket:setopt(L, {socket, reuseport}, true) end,
                     fun() -> sluice_socket_opts:set(L, SocketOpts) end,
                     fun() -> socket:bind(L, sluice_socket_opts:sockaddr(IP, Port)) end,
                     fun() -> socket:listen(L, Backlog) end],
            case sluice_socket_opts:steps(Steps) of
                ok -> {ok, L};
                Error -> _ = socket:close(L), Error
            end;
        Error ->
            Error
    end.

-spec accept(socket:socket(), timeout()) -> {ok, socket:socket()} | {error, term()}.
accept(LSock, Timeout) ->
    socket:accept(LSock, Timeout).

-spec listen_port(socket:socket()) -> {ok, inet:port_number()} | {error, term()}.
listen_port(LSock) ->
    case socket:sockname(LSock) of
        {ok, #{port := Port}} -> {ok, Port};
        Error -> Error
    end.

-spec close_listener(socket:socket()) -> ok.
close_listener(LSock) ->
    close_socket(LSock).

%%% Raw sockets

-spec controlling_process(socket:socket(), pid()) -> ok | {error, term()}.
controlling_process(Sock, Pid) ->
    socket:setopt(Sock, {otp, controlling_process}, Pid).

%% @doc The NIF's owner change is one call whatever the socket's state.
-spec handover(socket:socket(), pid()) -> ok | {error, term()}.
handover(Sock, Pid) ->
    controlling_process(Sock, Pid).

-spec recv(socket:socket(), non_neg_integer(), timeout()) -> {ok, binary()} | {error, term()}.
recv(Sock, Length, Timeout) ->
    case socket:recv(Sock, Length, Timeout) of
        {ok, Data} -> {ok, Data};
        {error, {Reason, _Partial}} -> {error, Reason};
        {error, Reason} -> {error, Reason}
    end.

-spec bytes_received(socket:socket()) -> non_neg_integer().
bytes_received(Sock) ->
    try socket:info(Sock) of
        #{counters := #{read_byte := N}} -> N
    catch error:_ -> 0
    end.

-spec close_socket(socket:socket()) -> ok.
close_socket(Sock) ->
    _ = socket:close(Sock),
    ok.

%% @doc The peer's address as gen_tcp gives it: on a Unix socket
%% `{local, Path}', `<<>>' for a client that did not bind its socket to a
%% path.
-spec peername(socket:socket()) -> {ok, sluice:address()} | {error, term()}.
peername(Sock) ->
    sluice_socket_opts:address(socket:peername(Sock)).

-spec sockname(socket:socket()) -> {ok, sluice:address()} | {error, term()}.
sockname(Sock) ->
    sluice_socket_opts:address(socket:sockname(Sock)).

%% @doc A handler's socket options (sluice:setopts/2, which has checked
%% them), from any process, with gen_tcp's names (sluice_socket_opts). An
%% error is the socket's reason alone, as inet:setopts/2 gives it.
-spec setopts(socket:socket(), [sluice:sockopt()]) -> ok | {error, term()}.
setopts(Sock, Opts) ->
    reason_only(sluice_socket_opts:set(Sock, Opts)).

-spec getopts(socket:socket(), [sluice:sockopt_name()]) ->
          {ok, [sluice:sockopt()]} | {error, term()}.
getopts(Sock, Names) ->
    reason_only(sluice_socket_opts:get(Sock, Names)).

reason_only({error, {Reason, _Opt}}) -> {error, Reason};
reason_only(Result) -> Result.

%%% The connection

%% @doc handshake/2 keeps the `prefix' for the first grant (kick/1).
-spec delivers_prefix() -> true.
delivers_prefix() ->
    true.

%% @doc OTP 25's ssl runs over gen_tcp only: no TLS on a socket of the
%% NIF's, and tls_opts are refused.
-spec tls() -> none.
tls() ->
    none.

%% @doc handshake/2 returns at once: it reads nothing from the client.
-spec handshake_waits() -> false.
handshake_waits() ->
    false.

%% Bytes already read after a PROXY header (`prefix') are the first chunk
%% the first grant delivers (kick/1), as the other transports put them
%% back in front of their stream: behind whatever init/2 queued for the
%% process (its own sluice:send/2, a message to itself), as any later
%% chunk comes.
-spec handshake(socket:socket(), sluice_transport:conn_opts()) -> {ok, #sk{}} | {error, term()}.
handshake(Sock, Opts = #{ip := {local, _}, socket_opts := SocketOpts}) ->
    %% A Unix socket's accepted sockets inherit less (sluice_socket_opts).
    case sluice_socket_opts:set(Sock, sluice_socket_opts:not_inherited_on_local(SocketOpts)) of
        ok -> handshake_tcp(Sock, Opts);
        {error, {Reason, _Opt}} -> {error, Reason}
    end;
handshake(Sock, Opts) ->
    handshake_tcp(Sock, Opts).

handshake_tcp(Sock, Opts = #{socket_opts := SocketOpts}) ->
    {buffer, Buffer} = lists:keyfind(buffer, 1, SocketOpts),
    {send_timeout, SendTimeout} = lists:keyfind(send_timeout, 1, SocketOpts),
    Reading = case maps:get(prefix, Opts, <<>>) of
                  <<>> -> idle;
                  Prefix -> put(?PREFIX(Sock), Prefix), prefix
              end,
    case set_priority(Sock, lists:keyfind(priority, 1, SocketOpts)) of
        ok -> {ok, #sk{sock = Sock, full = Buffer, ask = Buffer, send_timeout = SendTimeout,
                       reading = Reading}};
        {error, _} = Error -> Error
    end.

%% The one option a socket accepted on Linux does not inherit from its
%% listen socket (SO_PRIORITY): set on each, as the inet transport does.
%% (It was left at 0 on this backend.)
set_priority(_Sock, false) -> ok;
set_priority(Sock, {priority, P}) -> socket:setopt(Sock, {socket, priority}, P).

-spec activate(#sk{}, sluice_transport:mode()) -> {ok, #sk{}}.
activate(T, false) -> {ok, kick(T#sk{mode = once, grant = 1})};
activate(T, once) -> {ok, kick(T#sk{mode = once, grant = 1})};
activate(T, true) -> {ok, kick(T#sk{mode = true, grant = 1})};
activate(T = #sk{mode = n, grant = G}, K) -> {ok, kick(T#sk{grant = min(G + K, ?MAX_GRANT)})};
activate(T, K) -> {ok, kick(T#sk{mode = n, grant = min(K, ?MAX_GRANT)})}.

%% With a grant and nothing on its way, something must make the next read
%% happen: a wake-up to ourselves (the read itself is done when it is
%% classified, so that what it returns arrives as any other chunk).
kick(T = #sk{grant = 0}) -> T;
kick(T = #sk{reading = R, sock = Sock}) when R =:= idle; R =:= ready ->
    self() ! {?MODULE, Sock, wake},
    T#sk{reading = woken};
kick(T = #sk{reading = prefix, sock = Sock}) ->
    self() ! {?MODULE, Sock, prefix},
    T;
kick(T) -> T.

-spec classify(term(), #sk{}) -> sluice_transport:classified().
classify({'$socket', Sock, select, Ref}, T = #sk{sock = Sock, reading = {selecting, Ref}}) ->
    fired(T);
classify({?MODULE, Sock, wake}, T = #sk{sock = Sock, reading = woken}) ->
    fired(T);
classify({'$socket', Sock, abort, {_Ref, Reason}}, T = #sk{sock = Sock}) ->
    ended(Reason, T#sk{reading = closed});
classify({?MODULE, Sock, ended, Reason}, T = #sk{sock = Sock}) ->
    ended(Reason, T);
classify({'$socket', Sock, _, _}, T = #sk{sock = Sock}) ->
    %% The answer to a select that was cancelled, or to a send.
    {ignore, T};
classify({?MODULE, Sock, wake}, T = #sk{sock = Sock}) ->
    {ignore, T};
classify({?MODULE, Sock, prefix}, T = #sk{sock = Sock, reading = prefix}) ->
    %% The PROXY header's leftover, delivered as a read; the socket may
    %% hold more.
    case erase(?PREFIX(Sock)) of
        undefined -> {ignore, kick(T#sk{reading = ready})};
        Prefix -> {data, Prefix, kick(used(T#sk{reading = ready}))}
    end;
classify({?MODULE, Sock, prefix}, T = #sk{sock = Sock}) ->
    {ignore, T};
classify(_, _) ->
    other.

%% Data may be there: read if the grant allows.
fired(T = #sk{mode = true}) -> read(T);
fired(T = #sk{grant = 0}) -> {ignore, T#sk{reading = ready}};
fired(T) -> read(T).

%% One read. A whole buffer means more is probably waiting; a short read
%% comes back with the NIF's select already made (`{select, {_, Data}}'),
%% so finding the kernel empty costs no second call.
read(T = #sk{sock = Sock, ask = Ask}) ->
    case socket:recv(Sock, Ask, nowait) of
        {ok, Data} ->
            {data, Data, kick(used(T#sk{reading = ready, ask = T#sk.full}))};
        {select, {{select_info, _, Ref}, Data}} ->
            Small = case byte_size(Data) < ?SMALL_READ of
                        true -> min(T#sk.full, ?SMALL_READ);
                        false -> T#sk.full
                    end,
            {data, Data, used(T#sk{reading = {selecting, Ref}, ask = Small})};
        {select, {select_info, _, Ref}} ->
            {ignore, T#sk{reading = {selecting, Ref}}};
        {error, {Reason, Data}} when is_binary(Data), byte_size(Data) > 0 ->
            %% The last data before the end: deliver it, then the end.
            self() ! {?MODULE, Sock, ended, Reason},
            {data, Data, T#sk{reading = closed, grant = 0}};
        {error, {Reason, _}} ->
            ended(Reason, T#sk{reading = closed});
        {error, Reason} ->
            ended(Reason, T#sk{reading = closed})
    end.

used(T = #sk{mode = true}) -> T;
used(T = #sk{grant = G}) -> T#sk{grant = G - 1}.

%% A reset is the peer's close, as the inet driver (and gen_tcp on this
%% NIF) says it unless asked to show econnreset: handle_close/1 and
%% `peer_closed' on both backends.
ended(Reason, T) when Reason =:= closed; Reason =:= econnreset -> {closed, T};
ended(Reason, T) -> {error, Reason, T}.

-spec await(#sk{}, timeout()) -> sluice_transport:awaited().
await(T = #sk{sock = Sock}, Timeout) ->
    Deadline = sluice_deadline:at(Timeout),
    receive
        {'$socket', Sock, _, _} = Msg -> awaited(classify(Msg, T), Deadline);
        {?MODULE, Sock, _} = Msg -> awaited(classify(Msg, T), Deadline);
        {?MODULE, Sock, _, _} = Msg -> awaited(classify(Msg, T), Deadline)
    after Timeout ->
            {timeout, T}
    end.

awaited({ignore, T}, Deadline) -> await(T, remaining(Deadline));
awaited(Result, _Deadline) -> Result.

%% @doc Nothing is in flight once the grant is withdrawn: reads happen
%% only in the caller.
-spec pause(#sk{}) -> {ok, #sk{}}.
pause(T) ->
    {ok, T#sk{grant = 0, mode = once}}.

%% @doc sluice_transport's handoff/2: the chunks delivered, then the new
%% owner. The bytes read after a PROXY header and not yet delivered come
%% first. A read this process still has waiting in the NIF (its select)
%% is not cancelled (its tag is the NIF's opaque term, kept by no one): a
%% read of the new owner's waits behind it only until this process ends,
%% right after, when the NIF drops it and lets the next reader in.
-spec handoff(#sk{}, pid()) -> {ok, socket:socket(), [binary()]} | {error, term()}.
handoff(T, Pid) ->
    case sluice_transport:delivered(?MODULE, T) of
        {ok, Unread, #sk{sock = Sock}} ->
            %% Kept for a first grant not made yet (handshake/2)
            Prefix = case erase(?PREFIX(Sock)) of
                         undefined -> [];
                         Bytes -> [Bytes]
                     end,
            case controlling_process(Sock, Pid) of
                ok -> {ok, Sock, Prefix ++ Unread};
                Error -> Error
            end;
        Error ->
            Error
    end.

%% @doc sluice:recv/3 (sluice_transport). Nothing is delivered unless the
%% loop reads, and it reads when a select it made fires or at its own
%% wake-up: both may be in the mailbox already, or the select may fire
%% while the handler reads, ahead of what recv leaves for the loop
%% (sluice_conn_recv), and the loop would then read the socket's next
%% bytes before the ones recv read past. So delivery is stopped here: the
%% loop's select is taken over by a read of this process's (the NIF has
%% one reader's select per socket) and cancelled, and the messages of
%% both are dropped; what that read finds is the next chunk. Then the
%% PROXY header's leftover if the first grant has not taken it, and the
%% end of the stream that a last read found behind its data.
-spec recv_pause(sluice:conn()) -> {[binary()], sluice_conn_recv:ending()}.
recv_pause(#{socket := Sock}) ->
    Prefix = case erase(?PREFIX(Sock)) of
                 undefined -> [];
                 Bytes -> [Bytes]
             end,
    {Chunks, End} = quiesce(Sock, 0, []),
    ok = dropped(Sock),
    case End of
        none ->
            receive
                {?MODULE, Sock, ended, Reason} -> {Prefix ++ Chunks, ending(Reason)}
            after 0 ->
                    {Prefix ++ Chunks, none}
            end;
        _ ->
            {Prefix ++ Chunks, End}
    end.

%% Read until the kernel has nothing, and cancel the select that read
%% leaves. A client that keeps the kernel full for ?QUIESCE_READS reads
%% in a row is read no further here (the loop's select, if it fires
%% meanwhile, has long fired: its message is dropped).
-define(QUIESCE_READS, 64).

quiesce(_Sock, ?QUIESCE_READS, Acc) ->
    {lists:reverse(Acc), none};
quiesce(Sock, N, Acc) ->
    case socket:recv(Sock, 0, nowait) of
        {ok, Data} ->
            quiesce(Sock, N + 1, [Data | Acc]);
        {select, {SelectInfo, Data}} ->
            _ = socket:cancel(Sock, SelectInfo),
            {lists:reverse([Data | Acc]), none};
        {select, SelectInfo} ->
            _ = socket:cancel(Sock, SelectInfo),
            {lists:reverse(Acc), none};
        {error, {Reason, Data}} when is_binary(Data), byte_size(Data) > 0 ->
            {lists:reverse([Data | Acc]), ending(Reason)};
        {error, {Reason, _}} ->
            {lists:reverse(Acc), ending(Reason)};
        {error, Reason} ->
            {lists:reverse(Acc), ending(Reason)}
    end.

%% The loop's select and wake-up messages, which no longer stand for
%% anything.
dropped(Sock) ->
    receive
        {'$socket', Sock, select, _} -> dropped(Sock);
        {?MODULE, Sock, wake} -> dropped(Sock)
    after 0 -> ok
    end.

ending(Reason) ->
    case ended(Reason, none) of
        {closed, _} -> closed;
        {error, Why, _} -> {error, Why}
    end.

%% @doc Whatever is there, read as the loop reads (a read that does not
%% wait, then a select if the kernel had nothing), and the select a short
%% read leaves cancelled: when this returns no select of the socket is
%% left to fire for the loop (recv_pause/1).
-spec recv_read(sluice:conn(), timeout()) -> {ok, binary()} | {error, term()}.
recv_read(#{socket := Sock}, Timeout) ->
    read_within(Sock, sluice_deadline:at(Timeout)).

read_within(Sock, Deadline) ->
    case socket:recv(Sock, 0, nowait) of
        {ok, Data} ->
            {ok, Data};
        {select, {SelectInfo, Data}} ->
            _ = socket:cancel(Sock, SelectInfo),
            {ok, Data};
        {select, {select_info, _, Ref} = SelectInfo} ->
            receive
                {'$socket', Sock, select, Ref} -> read_within(Sock, Deadline);
                {'$socket', Sock, abort, {Ref, Reason}} -> recv_error(Reason)
            after sluice_deadline:left(Deadline) ->
                    _ = socket:cancel(Sock, SelectInfo),
                    {error, timeout}
            end;
        {error, {_Reason, Data}} when is_binary(Data), byte_size(Data) > 0 -> {ok, Data};
        {error, {Reason, _}} -> recv_error(Reason);
        {error, Reason} -> recv_error(Reason)
    end.

recv_error(Reason) ->
    case ending(Reason) of
        closed -> {error, closed};
        Error -> Error
    end.

%% @doc No grant, and the next one reads at once: the select the loop had
%% made was cancelled (recv_pause/1), and a message of it is ignored
%% (classify/2).
-spec recv_resume(#sk{}) -> #sk{}.
recv_resume(T = #sk{reading = closed}) ->
    T#sk{grant = 0, mode = once};
recv_resume(T) ->
    T#sk{grant = 0, mode = once, reading = ready}.

%% @doc A list reply longer than this goes out in slices
%% (sluice_conn_handler:send/2): OTP's socket:send/3 makes one binary of a list, and
%% the replies to a read of pipelined requests for a large value were held
%% whole.
-spec send_slice() -> pos_integer().
send_slice() ->
    1048576.

%% @doc Send without waiting for the peer; waits only while the kernel's
%% send buffer is full, for at most the send timeout (see the module doc).
-spec send(#sk{}, iodata()) -> ok | {error, term()}.
send(#sk{sock = Sock, send_timeout = Timeout}, Data) ->
    try socket:send(Sock, Data, nowait) of
        ok -> ok;
        {select, {SelectInfo, Rest}} -> wait_writable(Sock, Rest, SelectInfo, sluice_deadline:at(Timeout));
        {select, SelectInfo} -> wait_writable(Sock, Data, SelectInfo, sluice_deadline:at(Timeout));
        {error, {Reason, _Rest}} -> send_error(Reason);
        {error, Reason} -> send_error(Reason)
    catch
        %% Data that is not iodata: an error like the inet transport's,
        %% which the connection tells from the socket's (it checks the
        %% data when a send fails), rather than an exception in it.
        error:badarg -> {error, badarg};
        error:{invalid, {data, _}} -> {error, badarg}
    end.

%% @doc The kernel sends from the file (socket:sendfile/5), waiting while
%% the kernel's send buffer is full, for at most the send timeout, as
%% send/2. (Sends wait for the kernel: nothing queued here goes before.)
-spec sendfile(#sk{}, file:fd(), non_neg_integer(), pos_integer()) ->
          {ok, non_neg_integer()} | {error, term()}.
sendfile(#sk{sock = Sock, send_timeout = Timeout}, Fd, Offset, Bytes) ->
    case socket:sendfile(Sock, Fd, Offset, Bytes, Timeout) of
        {ok, Sent} -> {ok, Sent};
        {error, {Reason, _Sent}} -> send_error(Reason);
        {error, Reason} -> send_error(Reason)
    end.

%% A send to a peer that reset the connection fails with `closed', as on
%% the inet driver (and gen_tcp on this NIF, which takes epipe, a send
%% after the reset was seen, for the reset too).
send_error(Reason) when Reason =:= econnreset; Reason =:= epipe -> {error, closed};
send_error(Reason) -> {error, Reason}.


remaining(infinity) -> infinity;
remaining(Deadline) -> max(0, Deadline - erlang:monotonic_time(millisecond)).

wait_writable(Sock, Rest, {select_info, _, Ref} = SelectInfo, Deadline) ->
    receive
        {'$socket', Sock, select, Ref} ->
            case socket:send(Sock, Rest, nowait) of
                ok -> ok;
                {select, {SI, Rest2}} -> wait_writable(Sock, Rest2, SI, Deadline);
                {select, SI} -> wait_writable(Sock, Rest, SI, Deadline);
                {error, {Reason, _}} -> send_error(Reason);
                {error, Reason} -> send_error(Reason)
            end;
        {'$socket', Sock, abort, {Ref, Reason}} ->
            send_error(Reason)
    after remaining(Deadline) ->
            _ = socket:cancel(Sock, SelectInfo),
            {error, timeout}
    end.

%% @doc Never: send/2 waits until the kernel has taken everything. (This
%% transport reads only what is granted and never reports `passive', so
%% an adaptive grant never grows on it anyway.)
-spec output_queued(#sk{}) -> false.
output_queued(#sk{}) ->
    false.

-spec shutdown(#sk{}, read | write | read_write) -> ok | {error, term()}.
shutdown(#sk{sock = Sock}, How) ->
    socket:shutdown(Sock, How).

-spec close(#sk{}) -> ok.
close(#sk{sock = Sock}) ->
    close_socket(Sock).

-spec info(#sk{}) -> map().
info(#sk{}) ->
    #{}.

-spec socket(#sk{}) -> socket:socket().
socket(#sk{sock = Sock}) ->
    Sock.
