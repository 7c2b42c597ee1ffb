%% @doc The benchmark's `handwritten' and `gen_tcp-socket' peers: the ack,
%% ping and echo servers a careful engineer writes on plain gen_tcp without
%% a library, to put sluice beside what a user would write instead (issue
%% 16). `handwritten' runs on the inet driver, `gen_tcp-socket' is the same
%% code on `{inet_backend, socket}'. Deliberately not built on sluice, and
%% sharing no code with it.
%%
%% Started by the benchmark in a VM of its own, as the seed server is:
%% `erl -noshell -pa EBIN -run sluice_peer_gen_tcp main inet|socket
%% ack|ping|echo each|last|counted|none'; prints `listening on IP:PORT';
%% SIGTERM halts the VM. Tests start it in their own VM with start/1.
%%
%% The design, and why each choice is the fast one:
%% <ul>
%%  <li>An acceptor pool (10, as sluice's default) on one listen socket,
%%      at high priority; the acceptor that gets a connection becomes its
%%      process (at normal priority) and spawns its replacement first, so
%%      no ownership change (`controlling_process', a synchronous round
%%      through the driver) is on the accept path.</li>
%%  <li>The backlog is the kernel's cap (`net.core.somaxconn'): anything
%%      lower overflows first in a connect storm.</li>
%%  <li>`{active, N}' with N = 100 and re-arming as in sluice: every
%%      chunk uses one unit of credit and the grant is topped up to N once
%%      half of it is used, so a connection that keeps up never goes
%%      passive; `tcp_passive' then only comes to one that fell behind.
%%      Re-arming only on `tcp_passive' (what ranch-style handlers do)
%%      lets the inet driver deselect the socket every N reads and costs a
%%      poll-thread wake-up on the next one; `rearm => passive' keeps it
%%      for comparison (bench/README.md, "The peers").</li>
%%  <li>A 256 KiB `buffer' (sluice's default, the C server's read size):
%%      one message and one parse per read, not per packet.</li>
%%  <li>The ack protocol is parsed a whole chunk at a time: `last' and
%%      `counted' walk the chunk reading only each frame's length, two
%%      frames a step, and read the last whole frame's id once, from where
%%      that frame must begin; `each' appends one id per frame to one
%%      binary. No sub-binary per frame, no copy of a chunk: a frame split
%%      between reads is kept as its id and the payload bytes still to
%%      skip (or the few bytes of a split header). One reply per read.</li>
%%  <li>On inet, replies are asynchronous port commands (the driver's
%%      `inet_reply' is ignored when ok), as seed 001's fastest handler
%%      did: `gen_tcp:send' would wait for the driver after every reply.
%%      On the socket backend `gen_tcp:send' already sends from the
%%      caller, without a round trip through the socket's process.</li>
%%  <li>`nodelay': the replies are small and must go out at once.</li>
%% </ul>
%% Fairness review (would a strong engineer write it faster?). The grant
%% and its re-arming were measured, not assumed: `main/1' takes
%% `active=N rearm=passive|topup' to run the alternatives, and N = 100
%% topped up was at least as good as the others on every cell; the
%% figures and the command are in bench/README.md ("The peers").
%% Considered and not taken: `{active, true}' (a client that outruns the
%% server grows the mailbox without bound: not what a careful engineer
%% ships); passive `gen_tcp:recv' (a round trip through the driver per
%% read); a larger kernel `recbuf' (neither sluice nor the C server sets
%% one); a bigger heap per connection (chunks are off-heap binaries, the
%% loop keeps almost nothing); prim_inet's accept, which skips
%% `gen_tcp:accept''s copying of the listen socket's options, as
%% sluice's acceptors do (an internal API: what a library does, not what
%% one writes without one). The codec is the same walk as sluice's, written
%% separately, with the frame limit a constant: the comparison is of the
%% loop and the socket layer, not of two parsers.
%%
%% What it leaves out, which sluice pays for and a production server
%% needs: idle timeouts, a connection limit, draining, counters,
%% supervision, a frame timeout, memory kept small for idle connections.
%% That makes it an upper bound for a server on gen_tcp, which is what the
%% comparison is for. Frames above 1 MiB close the connection, as in
%% sluice; as there, a chunk no longer than that limit + 12 bytes (every
%% read: the buffer is 256 KiB) cannot hold a whole frame above it, and is
%% walked without comparing each length to the limit.
-module(sluice_peer_gen_tcp).

-export([main/1, start/1, stop/1, handle/2, init_state/2]).

-export_type([protocol/0, ack/0, pstate/0]).

-type protocol() :: ack | ping | echo.
-type ack() :: each | last | counted | none.
%% A protocol's state between reads: the ack protocol's split frame
%% (`none', `{head, Bytes}' or `{skip, Id, Left}'), ping's partial line.
-opaque pstate() :: {ack, each | last | counted, term()} | {ping, binary()} | echo.

-define(ACCEPTORS, 10).
-define(BUFFER, 262144).
-define(ACTIVE, 100).
-define(MAX_FRAME, 1048576).
-define(MAX_LINE, 64).

-record(c, {sock :: gen_tcp:socket() | undefined,
            backend :: inet | socket,
            active :: pos_integer(),
            rearm :: topup | passive,
            %% reads granted to the socket and not yet handled
            credit :: non_neg_integer(),
            proto :: pstate()}).

%% @doc The command line of the VM the benchmark starts: backend,
%% protocol, ack mode, then optionally `active=N' and `rearm=passive' to
%% try the alternatives.
-spec main([string()]) -> ok.
main([Backend, Protocol, Ack | Extra]) ->
    ok = sluice_signal:install(spawn(fun halt_on_signal/0)),
    Opts = maps:from_list([extra(E) || E <- Extra]),
    {ok, #{port := Port}} = start(Opts#{backend => list_to_existing_atom(Backend),
                                        protocol => list_to_existing_atom(Protocol),
                                        ack => list_to_existing_atom(Ack)}),
    io:format("listening on 127.0.0.1:~b~n", [Port]).

extra("active=" ++ N) -> {active, list_to_integer(N)};
extra("rearm=" ++ R) -> {rearm, list_to_existing_atom(R)}.

-spec halt_on_signal() -> no_return().
halt_on_signal() ->
    receive {sluice_signal, _} -> erlang:halt(0) end.

%% @doc Listen on 127.0.0.1 (`port', default 0: any free one) and start the
%% acceptors. `backend' (inet or socket), `protocol' and `ack' are
%% required; `active' and `rearm' default to the design above.
-spec start(#{backend := inet | socket, protocol := protocol(), ack := ack(),
              port => inet:port_number(), active => pos_integer(),
              rearm => topup | passive}) ->
          {ok, #{port := inet:port_number(), pid := pid()}} | {error, term()}.
start(#{backend := Backend, protocol := Protocol, ack := Ack} = Opts) ->
    Parent = self(),
    Active = maps:get(active, Opts, ?ACTIVE),
    Template = #c{backend = Backend, active = Active,
                  rearm = maps:get(rearm, Opts, topup), credit = Active,
                  proto = init_state(Protocol, Ack)},
    Pid = spawn(fun() ->
                        case listen(Backend, maps:get(port, Opts, 0), Active) of
                            {ok, L} ->
                                {ok, P} = inet:port(L),
                                [spawn(fun() -> accept(L, Template) end)
                                 || _ <- lists:seq(1, ?ACCEPTORS)],
                                Parent ! {self(), {ok, P}},
                                receive stop -> gen_tcp:close(L) end;
                            Error ->
                                Parent ! {self(), Error}
                        end
                end),
    receive
        {Pid, {ok, P}} -> {ok, #{port => P, pid => Pid}};
        {Pid, Error} -> Error
    end.

%% @doc Close the listen socket (connections carry on until closed).
-spec stop(#{pid := pid()}) -> ok.
stop(#{pid := Pid}) ->
    Pid ! stop,
    ok.

listen(Backend, Port, Active) ->
    gen_tcp:listen(Port, [{inet_backend, Backend}, binary, {packet, raw},
                          {ip, {127, 0, 0, 1}}, {reuseaddr, true},
                          {backlog, somaxconn()}, {active, Active},
                          {buffer, ?BUFFER}, {nodelay, true},
                          %% a client that half-closes still gets the
                          %% answers to what it sent: the driver would
                          %% otherwise close the socket at the EOF, before
                          %% this process has answered the reads before it
                          {exit_on_close, false},
                          {send_timeout, 30000}, {send_timeout_close, true}]).

somaxconn() ->
    case file:read_file("/proc/sys/net/core/somaxconn") of
        {ok, Text} ->
            case string:to_integer(Text) of
                {N, _} when is_integer(N), N > 0 -> min(N, 65535);
                _ -> 1024
            end;
        _ -> 1024
    end.

%% The accepted socket inherits the listen socket's options, `{active, N}'
%% included: the acceptor becomes its owner and its process. Acceptors run
%% at high priority: after a storm of connects, thousands of new
%% connections are runnable at once, and a normal-priority acceptor waits
%% behind them while the kernel's accept queue overflows (its clients then
%% wait a second for a SYN retransmit); the connection itself runs at
%% normal priority.
accept(L, Template) ->
    _ = process_flag(priority, high),
    case gen_tcp:accept(L) of
        {ok, S} ->
            _ = spawn(fun() -> accept(L, Template) end),
            _ = process_flag(priority, normal),
            loop(Template#c{sock = S});
        {error, closed} ->
            ok;
        {error, _} ->
            %% emfile and the like: try again after a breath
            timer:sleep(10),
            accept(L, Template)
    end.

%%% ------------------------------------------------------------------
%%% The connection
%%% ------------------------------------------------------------------

loop(C = #c{sock = S}) ->
    receive
        {tcp, S, Data} -> data(Data, C);
        {inet_reply, S, ok} -> loop(C);
        {tcp_passive, S} -> passive(C);
        {tcp_closed, S} -> gen_tcp:close(S);
        {tcp_error, S, _} -> gen_tcp:close(S);
        {inet_reply, S, {error, _}} -> gen_tcp:close(S)
    end.

data(Data, C = #c{sock = S, backend = B, proto = P}) ->
    case handle(Data, P) of
        {close, <<>>} -> gen_tcp:close(S);
        {close, Reply} -> send(B, S, Reply), gen_tcp:close(S);
        {<<>>, P2} -> next(C#c{proto = P2});
        {Reply, P2} -> send(B, S, Reply), next(C#c{proto = P2})
    end.

send(inet, S, Data) ->
    try erlang:port_command(S, Data) of
        true -> ok
    catch error:_ -> ok % closed: its tcp_closed follows
    end;
send(socket, S, Data) ->
    _ = gen_tcp:send(S, Data),
    ok.

next(C = #c{rearm = topup, active = N, credit = Cr}) ->
    case Cr - 1 of
        Left when Left > N div 2 -> loop(C#c{credit = Left});
        %% an integer grant adds to what the socket has left
        Left -> rearm(N - Left, C#c{credit = N})
    end;
next(C) ->
    loop(C).

%% Top-up: every read before `tcp_passive' has been handled, so credit
%% left means a top-up already re-armed the socket.
passive(C = #c{rearm = topup, credit = Cr}) when Cr > 0 ->
    loop(C);
passive(C = #c{active = N}) ->
    rearm(N, C#c{credit = N}).

%% A grant the socket refuses does not end the connection: on
%% {inet_backend, socket} a client's FIN makes the grant fail (einval)
%% while its last reads and the tcp_closed after them are still queued
%% here, and closing at once lost them (up to 40% of a 1 MB echo,
%% sluice_peer_SUITE). The loop goes on until tcp_closed or tcp_error.
rearm(N, C = #c{sock = S}) ->
    _ = inet:setopts(S, [{active, N}]),
    loop(C).

%%% ------------------------------------------------------------------
%%% The protocols, a whole chunk at a time
%%% ------------------------------------------------------------------

%% @doc A protocol's state before the first read.
-spec init_state(protocol(), ack()) -> pstate().
init_state(ack, Mode) when Mode =:= each; Mode =:= last; Mode =:= counted ->
    {ack, Mode, none};
init_state(ping, _) -> {ping, <<>>};
init_state(echo, _) -> echo.

%% @doc One read: the reply (possibly empty) and the new state, or
%% `{close, LastReply}' on a protocol error.
-spec handle(binary(), pstate()) -> {binary(), pstate()} | {close, binary()}.
handle(Data, echo) ->
    {Data, echo};
handle(Data, {ping, Tail}) ->
    ping(case Tail of <<>> -> Data; _ -> <<Tail/binary, Data/binary>> end, 0);
handle(Data, {ack, Mode, Split}) ->
    case ack(Mode, Data, Split) of
        {close, _} = Close -> Close;
        {Acks, Split2} -> {Acks, {ack, Mode, Split2}}
    end.

ping(<<"Ping\n", R/binary>>, N) ->
    ping(R, N + 1);
%% Any other line, or more than ?MAX_LINE bytes without a newline, closes
%% the connection after the Pongs owed, as in sluice: closing at the first
%% byte that could not begin `Ping\n' kept a connection sluice keeps (a
%% client's `Px' still waiting for its newline) from the comparison.
ping(R, N) ->
    case binary:match(R, <<"\n">>) of
        nomatch when byte_size(R) =< ?MAX_LINE -> {pongs(N), {ping, binary:copy(R)}};
        _ -> {close, pongs(N)}
    end.

pongs(0) -> <<>>;
pongs(N) -> binary:copy(<<"Pong\n">>, N).

%% The frame split at the previous read's end: its header's first bytes,
%% or its id and how much of its payload is still to come.
ack(Mode, Data, none) ->
    frames(Mode, Data, none, 0);
ack(Mode, Data, {head, Part}) ->
    Need = 12 - byte_size(Part),
    case Data of
        <<More:Need/binary, Rest/binary>> ->
            case <<Part/binary, More/binary>> of
                <<_:8/binary, Len:32>> when Len > ?MAX_FRAME -> {close, <<>>};
                <<Id:8/binary, Len:32>> -> skip(Mode, Id, Len, Rest)
            end;
        _ ->
            {<<>>, {head, <<Part/binary, Data/binary>>}}
    end;
ack(Mode, Data, {skip, Id, Left}) ->
    skip(Mode, Id, Left, Data).

skip(Mode, Id, Left, Data) ->
    case Data of
        <<_:Left/binary, Rest/binary>> -> frames(Mode, Rest, Id, 1);
        _ -> {<<>>, {skip, Id, Left - byte_size(Data)}}
    end.

%% `Prev': the id of a frame completed at the start of this read (`none'),
%% `PrevN' how many (0 or 1).
frames(each, Buf, Prev, _) ->
    each(Buf, case Prev of none -> <<>>; _ -> Prev end);
frames(last, Buf, Prev, _) ->
    case walk(Buf) of
        {-1, R} -> tail(R, case Prev of none -> <<>>; _ -> Prev end);
        {Len, R} -> tail(R, last_id(Buf, R, Len))
    end;
frames(counted, Buf, Prev, PrevN) ->
    case walk_count(Buf) of
        {_, 0, R} when PrevN =:= 0 -> tail(R, <<>>);
        {_, 0, R} -> tail(R, <<Prev/binary, PrevN:32>>);
        {Len, N, R} -> tail(R, <<(last_id(Buf, R, Len))/binary, (N + PrevN):32>>)
    end.

each(Buf, Acc) when byte_size(Buf) - 12 =< ?MAX_FRAME ->
    each_all(Buf, Acc);
each(Buf, Acc) ->
    each_max(Buf, Acc).

each_all(<<Hi:32, Lo:32, Len:32, _:Len/binary, R/binary>>, Acc) ->
    each_all(R, <<Acc/binary, Hi:32, Lo:32>>);
each_all(R, Acc) ->
    tail(R, Acc).

each_max(<<Hi:32, Lo:32, Len:32, _:Len/binary, R/binary>>, Acc) when Len =< ?MAX_FRAME ->
    each_max(R, <<Acc/binary, Hi:32, Lo:32>>);
each_max(R, Acc) ->
    tail(R, Acc).

%% The last whole frame ends where R begins and is 12 + Len bytes long.
last_id(Buf, R, Len) ->
    At = byte_size(Buf) - byte_size(R) - 12 - Len,
    <<_:At/binary, Id:8/binary, _/binary>> = Buf,
    Id.

%% {Len of the last whole frame (-1: none), what follows the whole frames}
walk(Buf) when byte_size(Buf) - 12 =< ?MAX_FRAME -> walk_all(Buf, -1);
walk(Buf) -> walk_max(Buf, -1).

walk_all(<<_:64, A:32, _:A/binary, _:64, B:32, _:B/binary, R/binary>>, _) ->
    walk_all(R, B);
walk_all(<<_:64, A:32, _:A/binary, R/binary>>, _) ->
    {A, R};
walk_all(R, Last) ->
    {Last, R}.

walk_max(<<_:64, A:32, _:A/binary, _:64, B:32, _:B/binary, R/binary>>, _)
  when A =< ?MAX_FRAME, B =< ?MAX_FRAME ->
    walk_max(R, B);
walk_max(<<_:64, A:32, _:A/binary, R/binary>>, _) when A =< ?MAX_FRAME ->
    {A, R};
walk_max(R, Last) ->
    {Last, R}.

walk_count(Buf) when byte_size(Buf) - 12 =< ?MAX_FRAME -> walk_count_all(Buf, -1, 0);
walk_count(Buf) -> walk_count_max(Buf, -1, 0).

walk_count_all(<<_:64, A:32, _:A/binary, _:64, B:32, _:B/binary, R/binary>>, _, N) ->
    walk_count_all(R, B, N + 2);
walk_count_all(<<_:64, A:32, _:A/binary, R/binary>>, _, N) ->
    {A, N + 1, R};
walk_count_all(R, Last, N) ->
    {Last, N, R}.

walk_count_max(<<_:64, A:32, _:A/binary, _:64, B:32, _:B/binary, R/binary>>, _, N)
  when A =< ?MAX_FRAME, B =< ?MAX_FRAME ->
    walk_count_max(R, B, N + 2);
walk_count_max(<<_:64, A:32, _:A/binary, R/binary>>, _, N) when A =< ?MAX_FRAME ->
    {A, N + 1, R};
walk_count_max(R, Last, N) ->
    {Last, N, R}.

%% What is left after the whole frames: nothing, a split frame to keep
%% (copied: the few bytes kept must not hold the whole read buffer), or
%% a header announcing a frame too large, which closes after the acks.
tail(<<>>, Acks) ->
    {Acks, none};
tail(<<_:8/binary, Len:32, _/binary>>, Acks) when Len > ?MAX_FRAME ->
    {close, Acks};
tail(<<Id:8/binary, Len:32, Payload/binary>>, Acks) ->
    {Acks, {skip, binary:copy(Id), Len - byte_size(Payload)}};
tail(Head, Acks) ->
    {Acks, {head, binary:copy(Head)}}.
