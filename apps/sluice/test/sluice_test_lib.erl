%% Helpers shared by the sluice Common Test suites: loopback clients, ack
%% frames, polling, finding a listener's connection processes, and peer
%% nodes started with a lower descriptor limit.
-module(sluice_test_lib).

-include_lib("stdlib/include/assert.hrl").

-export([backend_groups/1, init_backend/2, end_backend/2, transport/0]).
-export([start_listener/2, stop_listener/1, port/1,
         connect/1, connect/2, recv_exactly/3, expect_closed/2,
         frame/2, frames/1, random_split/3, seed_rand/0,
         wait_until/2, wait_until/3, wait_info/4, wait_reason/3,
         conn_pids/1, conns_sups/1, acceptor_pids/1,
         ping_results/2, ping_results/3,
         ping_sock/1,
         start_peer/2, stop_peer/1,
         capture_logs/0, captured_logs/0, log/2]).

-define(LOOPBACK, {127, 0, 0, 1}).

%% --- backends ----------------------------------------------------------

%% The network cases run once per transport: groups `inet' and `socket',
%% each holding `Members'. init_backend/2 (from init_per_group) makes the
%% group's transport the one start_listener/2 and transport/0 give, for
%% every case in it, nested groups included.
backend_groups(Members) ->
    [{B, [], Members} || B <- [inet, socket]].

init_backend(Group, Config) when Group =:= inet; Group =:= socket ->
    persistent_term:put({?MODULE, transport}, Group),
    [{transport, Group} | Config];
init_backend(_Group, Config) ->
    Config.

end_backend(Group, _Config) when Group =:= inet; Group =:= socket ->
    _ = persistent_term:erase({?MODULE, transport}),
    ok;
end_backend(_Group, _Config) ->
    ok.

%% The transport of the backend group running (inet outside one).
transport() ->
    persistent_term:get({?MODULE, transport}, inet).

%% --- listeners -------------------------------------------------------

%% A listener on loopback, port 0, on the group's transport, unless Opts
%% say otherwise.
start_listener(Name, Opts) ->
    Defaults = #{ip => ?LOOPBACK, port => 0, transport => transport()},
    {ok, Pid} = sluice:start_listener(Name, maps:merge(Defaults, Opts)),
    Pid.

%% Idempotent: end_per_testcase calls it whatever the case did.
stop_listener(Name) ->
    _ = sluice:stop_listener(Name),
    ok.

port(Name) ->
    #{port := Port} = sluice:info(Name),
    Port.

%% --- clients ---------------------------------------------------------

connect(Port) ->
    connect(Port, []).

connect(Port, Extra) ->
    gen_tcp:connect(?LOOPBACK, Port, Extra ++ [binary, {active, false}, {packet, raw},
                                               {nodelay, true}], 5000).

%% Exactly N bytes, then nothing more for a moment (an extra byte is a
%% failure, not something to ignore).
recv_exactly(Sock, N, Timeout) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    Got = recv_loop(Sock, N, Deadline, []),
    ?assertEqual({error, timeout}, gen_tcp:recv(Sock, 0, 50)),
    Got.

recv_loop(_Sock, 0, _Deadline, Acc) ->
    iolist_to_binary(lists:reverse(Acc));
recv_loop(Sock, N, Deadline, Acc) when N > 0 ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    case gen_tcp:recv(Sock, 0, Left) of
        {ok, Data} when byte_size(Data) =< N ->
            recv_loop(Sock, N - byte_size(Data), Deadline, [Data | Acc]);
        {ok, Data} ->
            error({more_than_expected, N, byte_size(Data)});
        {error, Reason} ->
            error({recv_failed, Reason, missing, N,
                   got, iolist_size(Acc)})
    end.

%% The server closed the connection (FIN, or RST if data was in flight).
expect_closed(Sock, Timeout) ->
    case gen_tcp:recv(Sock, 0, Timeout) of
        {error, closed} -> ok;
        {error, econnreset} -> ok;
        Other -> error({expected_close, Other})
    end.

%% --- ack frames ------------------------------------------------------

frame(Id, Payload) when byte_size(Id) =:= 8 ->
    <<Id/binary, (byte_size(Payload)):32, Payload/binary>>.

%% N frames with distinct ids and random payload sizes (0..2000 bytes);
%% returns {Ids, Stream}.
frames(N) ->
    Ids = [<<I:32, (rand:uniform(16#ffffffff)):32>> || I <- lists:seq(1, N)],
    Stream = [frame(Id, rand:bytes(rand:uniform(2001) - 1)) || Id <- Ids],
    {Ids, iolist_to_binary(Stream)}.

%% Cut Bin into chunks of random sizes Min..Max.
random_split(<<>>, _Min, _Max) ->
    [];
random_split(Bin, Min, Max) ->
    Size = min(byte_size(Bin), Min + rand:uniform(Max - Min + 1) - 1),
    <<Chunk:Size/binary, Rest/binary>> = Bin,
    [Chunk | random_split(Rest, Min, Max)].

%% Seed the process's rand and return the seed, for the log (a failing
%% random split can then be replayed).
seed_rand() ->
    Seed = {erlang:phash2(make_ref()), erlang:unique_integer([positive]),
            erlang:system_time()},
    _ = rand:seed(exsss, Seed),
    Seed.

%% --- polling ---------------------------------------------------------

wait_until(Fun, Timeout) ->
    wait_until(Fun, Timeout, 10).

wait_until(Fun, Timeout, Interval) ->
    Deadline = erlang:monotonic_time(millisecond) + Timeout,
    wait_loop(Fun, Deadline, Interval).

wait_loop(Fun, Deadline, Interval) ->
    case Fun() of
        true -> ok;
        Other ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true -> error({timeout_waiting, Other});
                false -> timer:sleep(Interval), wait_loop(Fun, Deadline, Interval)
            end
    end.

%% Wait until info(Name)'s Key equals Value; fails with the last value seen.
wait_info(Name, Key, Value, Timeout) ->
    wait_for(fun() -> maps:get(Key, sluice:info(Name)) end, Key, Value, Timeout).

%% Wait until the listener has counted N closes for Reason (5 s); fails
%% with the last count seen. A connection counts its reason once its
%% handler's last callbacks have returned (sluice_conn_close:
%% counted_end/4): a test that terminate/2 (or the client's close) told
%% of the end reads the figure a moment too early if it does not wait.
wait_reason(Name, Reason, N) ->
    wait_for(fun() -> maps:get(Reason, maps:get(close_reasons, sluice:info(Name))) end,
             Reason, N, 5000).

%% Wait until Read() gives Value; fails with `{Label, Last, expected, Value}'.
wait_for(Read, Label, Value, Timeout) ->
    wait_until(fun() ->
                       case Read() of
                           Value -> true;
                           Other -> {Label, Other, expected, Value}
                       end
               end, Timeout).

%% --- the listener's processes ------------------------------------------

conns_sups(Name) ->
    NS = erlang:system_info(schedulers),
    Max = max(NS, 16),
    [Sup || I <- lists:seq(1, Max),
            Sup <- [sluice_registry:conns_sup(Name, I)], is_pid(Sup)].

conn_pids(Name) ->
    sluice:connections(Name).

acceptor_pids(Name) ->
    {ok, #{sup := Sup}} = sluice_registry:lookup(Name),
    {_, AccSup, _, _} = lists:keyfind(sluice_acceptors_sup, 1, supervisor:which_children(Sup)),
    [Pid || {{sluice_acceptor, _}, Pid, _, _} <- supervisor:which_children(AccSup),
            is_pid(Pid)].

%% --- ping clients --------------------------------------------------------

%% Open N ping connections at once, each in its own process; returns
%% [{admitted, Pid, Sock} | {rejected, Reason}] (admitted: got Pong within
%% Timeout; rejected: closed by the server; silent: neither, e.g. left in
%% the backlog by a server out of descriptors). Admitted and silent sockets
%% are handed to the caller.
ping_results(Port, N) ->
    ping_results(Port, N, 5000).

ping_results(Port, N, Timeout) ->
    Parent = self(),
    Pids = [spawn_link(fun() -> ping_client(Parent, Port, Timeout) end) || _ <- lists:seq(1, N)],
    [receive {ping_result, Pid, R} -> R after Timeout + 15000 -> error({ping_client_stuck, Pid}) end
     || Pid <- Pids].

ping_client(Parent, Port, Timeout) ->
    R = case connect(Port) of
            {ok, S} ->
                _ = gen_tcp:send(S, <<"Ping\n">>),
                case gen_tcp:recv(S, 0, Timeout) of
                    {ok, <<"Pong\n">>} ->
                        ok = gen_tcp:controlling_process(S, Parent),
                        {admitted, S};
                    {error, closed} -> gen_tcp:close(S), {rejected, closed};
                    {error, econnreset} -> gen_tcp:close(S), {rejected, econnreset};
                    {error, timeout} -> {silent, S};
                    Other -> gen_tcp:close(S), {unexpected, Other}
                end;
            {error, Reason} ->
                {connect_failed, Reason}
        end,
    case R of
        {silent, Sock} -> ok = gen_tcp:controlling_process(Sock, Parent);
        _ -> ok
    end,
    Parent ! {ping_result, self(), R}.

%% One more Ping on an open connection; true if Pong came back.
ping_sock(Sock) ->
    ok = gen_tcp:send(Sock, <<"Ping\n">>),
    gen_tcp:recv(Sock, 0, 3000) =:= {ok, <<"Pong\n">>}.

%% --- peer nodes ------------------------------------------------------------

%% A peer VM with `ulimit -n Fds', sluice on its code path and started.
%% Connected through standard_io, so the test node need not be distributed;
%% its stdout is then the control channel, so the default logger handler
%% (which would print there) is not installed: use capture_logs/0.
start_peer(Fds, Extra) ->
    Erl = os:find_executable("erl"),
    Ebin = filename:dirname(code:which(sluice)),
    Script = "ulimit -n " ++ integer_to_list(Fds) ++ " && exec \"$0\" \"$@\"",
    TestDir = filename:dirname(code:which(?MODULE)),
    {ok, Peer, _Node} = peer:start_link(#{exec => {"/bin/sh", ["-c", Script, Erl]},
                                          connection => standard_io,
                                          args => ["-pa", Ebin, TestDir,
                                                   "-kernel", "logger",
                                                   "[{handler,default,undefined}]"
                                                   | Extra]}),
    %% The test case process that started it will exit; the peer must not
    %% die with it, end_per_testcase stops it.
    unlink(Peer),
    %% Without the default handler logger falls back to a simple one that
    %% also prints on stdout.
    ok = peer:call(Peer, logger, remove_handler, [simple]),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [sluice]),
    Peer.

stop_peer(undefined) ->
    ok;
stop_peer(Peer) ->
    try peer:stop(Peer) catch _:_ -> ok end,
    ok.

%% --- log capture (runs in a peer, read back with peer:call) ----------------

%% Keep every logger event from now on in an ETS table owned by a process
%% that lives as long as the node. Events are stored raw and formatted when
%% read back: formatting may need modules that cannot be loaded while the
%% node is out of descriptors.
capture_logs() ->
    Parent = self(),
    Owner = spawn(fun() ->
                          _ = ets:new(sluice_test_logs, [named_table, public, duplicate_bag]),
                          Parent ! {table_ready, self()},
                          receive stop -> ok end
                  end),
    receive {table_ready, Owner} -> ok end,
    _ = [{module, M} = code:ensure_loaded(M)
         || M <- [io_lib, io_lib_format, io_lib_pretty, unicode, logger_formatter]],
    ok = logger:add_handler(sluice_test_capture, ?MODULE, #{level => all}).

%% [{Time, Level, FormattedMessage}] in the order logged.
captured_logs() ->
    lists:sort([{T, Level, format(Msg)} || {T, Level, Msg} <- ets:tab2list(sluice_test_logs)]).

format({report, R}) -> lists:flatten(io_lib:format("~p", [R]));
format({string, S}) -> unicode:characters_to_list(S);
format({Format, Args}) -> lists:flatten(io_lib:format(Format, Args)).

%% logger handler callback: keeps what sluice's own modules log (the code
%% server's complaints about emfile are not of interest and are many).
log(#{level := Level, msg := Msg, meta := #{mfa := {Mod, _, _}} = Meta}, _Config) ->
    case atom_to_list(Mod) of
        "sluice" ++ _ ->
            T = maps:get(time, Meta, erlang:system_time(microsecond)),
            true = ets:insert(sluice_test_logs, {T, Level, Msg});
        _ ->
            ok
    end,
    ok;
log(_Event, _Config) ->
    ok.
