%% Clients that never read (issue 7, item 2): 20 clients each try to send
%% 32 MB of small frames without ever reading their acks. The server must
%% hold back through TCP (stop reading once its replies cannot leave), not by
%% growing a mailbox or a send queue: its memory stays under a bound set by
%% its options (connections x active x read buffer, plus slack), far below
%% what the clients wanted to send, and comes back once they leave.
%%
%% The server runs in a peer VM so that its memory is not mixed with the
%% clients'; the peak is sampled there every 20 ms. Figures are in the
%% case's log (ct:log) and in the closing report of the issue.
-module(sluice_pressure_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
%% For #s.grant only: the grants a connection re-arms with are read from
%% its calls to sluice_conn:activate/2 (grant_tracer/0).
-include_lib("sluice/src/sluice_conn.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([never_reading_clients_are_held_back_by_tcp/1,
         never_reading_client_is_cut_by_send_timeout/1]).
%% run in the peer
-export([start_sampler/0, stop_sampler/0, settle/0]).

-define(CLIENTS, 20).
-define(BYTES, 32 * 1024 * 1024).
-define(PAYLOAD, 4).              % 16-byte frames: acks are half the input
-define(SEND_MS, 3000).
%% The inet transport's default read size (sluice_transport_inet).
-define(BUFFER, 262144).

suite() -> [{timetrap, {seconds, 60}}].

all() -> [{group, inet}, {group, socket}].

groups() ->
    [{inet, [], cases()}, {socket, [], cases()}].

cases() ->
    [never_reading_clients_are_held_back_by_tcp, never_reading_client_is_cut_by_send_timeout].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(socket, Config) ->
    case code:which(sluice_transport_socket) of
        non_existing -> {skip, "the socket transport (sluice_transport_socket) is not built yet"};
        _ -> [{transport, socket} | Config]
    end;
init_per_group(inet, Config) ->
    [{transport, inet} | Config].

end_per_group(_, _Config) ->
    ok.

init_per_testcase(never_reading_clients_are_held_back_by_tcp, Config) ->
    [{peer, sluice_test_lib:start_peer(1024, [])} | Config];
init_per_testcase(Case, Config) ->
    [{peer, undefined}, {name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(proplists:get_value(name, Config)),
    sluice_test_lib:stop_peer(?config(peer, Config)).

%% A client that never reads and never leaves suspends its connection
%% process in a send; the send timeout (here 500 ms; 30 s by default)
%% ends it: both such connections close while their clients are still
%% writing, counted as socket errors, and a bystander is served throughout.
never_reading_client_is_cut_by_send_timeout(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{transport => ?config(transport, Config),
                                           socket_opts => [{sndbuf, 65536}, {send_timeout, 500}],
                                           handler => {sluice_proto_ack, #{ack => each}}}),
    Port = sluice_test_lib:port(Name),
    Bystander = sluice_abuse_client:connect(Port),
    Parent = self(),
    Clients = [spawn_link(fun() ->
                                  {S, _} = sluice_abuse_client:never_read(Port, ?BYTES, ?PAYLOAD, 4000),
                                  Parent ! {self(), done},
                                  receive close -> gen_tcp:close(S) end
                          end) || _ <- [1, 2]],
    sluice_test_lib:wait_until(fun() -> maps:get(connections, sluice:info(Name)) =:= 3 end, 2000),
    T0 = erlang:monotonic_time(millisecond),
    sluice_test_lib:wait_info(Name, connections, 1, 4000),
    ct:log("never-reading connections cut after ~b ms; ~p",
           [erlang:monotonic_time(millisecond) - T0, sluice:info(Name)]),
    ?assertMatch(#{close_reasons := #{socket_error := 2}}, sluice:info(Name)),
    ?assertEqual(ok, sluice_abuse_client:pipeline(Bystander, 100, 10)),
    [receive {C, done} -> C ! close end || C <- Clients],
    gen_tcp:close(Bystander).

%% 20 clients (receive buffer fixed at 64 KiB) write 16-byte frames for 3 s
%% without reading, to an ack-each server (send buffer 64 KiB, the default
%% active and read size): each client is blocked long before 32 MB, the
%% server's memory grows by less than 20 x active x read size + 64 MiB (for
%% `adaptive', its smallest grant), no mailbox holds more chunks of data
%% than the largest grant its connection had (nor other messages piled up
%% beside them), and once the clients close every connection ends and the
%% memory returns to within 16 MiB of its baseline.
never_reading_clients_are_held_back_by_tcp(Config) ->
    Peer = ?config(peer, Config),
    {ok, _} = peer:call(Peer, sluice, start_listener,
                        [nr, #{ip => {127, 0, 0, 1}, port => 0,
                               transport => ?config(transport, Config),
                               socket_opts => [{sndbuf, 65536}],
                               handler => {sluice_proto_ack, #{ack => each}}}]),
    #{port := Port, active := Active} = peer:call(Peer, sluice, info, [nr]),
    Base = peer:call(Peer, ?MODULE, settle, []),
    ok = peer:call(Peer, ?MODULE, start_sampler, []),
    Parent = self(),
    Clients = [spawn_link(fun() ->
                                  {S, Sent} = sluice_abuse_client:never_read(Port, ?BYTES, ?PAYLOAD, ?SEND_MS),
                                  Parent ! {self(), Sent},
                                  receive
                                      %% A reset: a plain close would wait
                                      %% for the client's own unsent data.
                                      close -> ok = inet:setopts(S, [{linger, {true, 0}}]),
                                               gen_tcp:close(S)
                                  end
                          end) || _ <- lists:seq(1, ?CLIENTS)],
    Sent = [receive {C, N} -> N after 20000 -> error(client_stuck) end || C <- Clients],
    {Peak, {MaxQueue, MaxChunks, Held}, Samples, GrantsByConn} =
        peer:call(Peer, ?MODULE, stop_sampler, []),
    During = peer:call(Peer, sluice, info, [nr]),
    [C ! close || C <- Clients],
    ok = wait_peer_info(Peer, connections, 0, 10000),
    After = peer:call(Peer, ?MODULE, settle, []),
    %% The grant each connection had: an adaptive one may grow while the
    %% client's replies still leave (its receive buffer and the server's
    %% send buffer take them, and it looks like a pipelining client that
    %% reads), until they back up.
    Grants = maps:values(GrantsByConn),
    ?assertEqual(?CLIENTS, length(Grants), GrantsByConn),
    {Min, Max} = case Active of
                     adaptive -> {maps:get(min, sluice_opts:adaptive_grant()),
                                  maps:get(max_bytes, sluice_opts:adaptive_grant()) div ?BUFFER};
                     N when is_integer(N) -> {N, N}
                 end,
    ?assert(lists:all(fun(G) -> G >= Min andalso G =< Max end, Grants), {Min, Max, Grants}),
    Grant = lists:max(Grants),
    %% Issue 7's bound, for the smallest grant.
    Bound = ?CLIENTS * Min * ?BUFFER + 64 * 1024 * 1024,
    #{bytes_in := In, bytes_out := Out} = During,
    ct:log("~b clients x ~b MB wanted; written by the clients (queued) ~b MB; read by the server "
           "~b MB, acks sent ~b MB~nserver memory: baseline ~b MB, peak ~b MB (growth ~b MB, "
           "bound ~b MB, ~b samples), after ~b MB; largest connection mailbox ~b messages, "
           "at most ~b of them chunks of data (active ~p; largest grant of each connection ~w)"
           "~nthe longest mailbox seen: ~w",
           [?CLIENTS, ?BYTES bsr 20, lists:sum(Sent) bsr 20, In bsr 20, Out bsr 20, Base bsr 20,
            Peak bsr 20, (Peak - Base) bsr 20, Bound bsr 20, Samples, After bsr 20, MaxQueue,
            MaxChunks, Active, lists:sort(Grants), Held]),
    %% Back-pressure through TCP: the server read well under what was wanted.
    ?assert(In < ?CLIENTS * ?BYTES div 2, {read_by_server, In}),
    ?assert(Peak - Base < Bound, {growth, Peak - Base, bound, Bound}),
    %% The flow control's own bound: no more chunks than a grant. Beside
    %% them, messages that carry no data and come at most once per chunk
    %% or per grant: the driver's `inet_reply' for each ack sent while
    %% later chunks were queued, its `tcp_passive' each time a grant ran
    %% out, and one nudge of the sweep's to a connection whose send has
    %% blocked for a second (seen under load: 6 chunks, 7 replies, 2
    %% passives and the nudge). None of them piles up with the flood.
    ?assert(MaxChunks =< Grant, {chunks, MaxChunks, grant, Grant, Held}),
    ?assert(MaxQueue =< 3 * Grant, {mailbox, MaxQueue, grant, Grant, Held}),
    ?assert(After - Base < 16 * 1024 * 1024, {after_growth, After - Base}).

wait_peer_info(Peer, Key, Value, Timeout) ->
    sluice_test_lib:wait_until(fun() ->
                                       case peer:call(Peer, sluice, info, [nr]) of
                                           #{Key := Value} -> true;
                                           Other -> {Key, maps:get(Key, Other)}
                                       end
                               end, Timeout).

%%% ------------------------------------------------------------------
%%% In the peer
%%% ------------------------------------------------------------------

%% Memory after collecting garbage everywhere (so that a baseline and an
%% "after" compare live data, not collection timing).
-spec settle() -> non_neg_integer().
settle() ->
    _ = [erlang:garbage_collect(P) || P <- processes()],
    timer:sleep(100),
    erlang:memory(total).

%% Peak total memory and the largest mailbox (in messages, in chunks of
%% data, and what the longest held), every 20 ms until asked (the peer is
%% reached through peer:call only: it is not distributed); and from then
%% on, the largest grant each new connection re-arms with.
-spec start_sampler() -> ok.
start_sampler() ->
    Pid = spawn(fun() -> sample(0, {0, 0, []}, 0) end),
    true = register(sluice_pressure_sampler, Pid),
    grant_tracer(),
    ok.

-spec stop_sampler() -> {non_neg_integer(),
                         {non_neg_integer(), non_neg_integer(), [chunk | atom()]},
                         non_neg_integer(), #{pid() => pos_integer()}}.
stop_sampler() ->
    sluice_pressure_sampler ! {stop, self()},
    receive {peak, P, Q, N} -> {P, Q, N, grants()} after 5000 -> error(no_peak) end.

sample(Peak, Max, N) ->
    receive
        {stop, From} -> From ! {peak, Peak, Max, N}, ok
    after 20 ->
            %% Not the grants' tracer's: it may have a burst of them.
            Qs = [{P, L} || P <- processes() -- [whereis(sluice_pressure_grants)],
                            {message_queue_len, L} <- [process_info(P, message_queue_len)],
                            L > 0],
            sample(max(Peak, erlang:memory(total)), lists:foldl(fun mailbox/2, Max, Qs), N + 1)
    end.

%% The largest mailbox so far, in messages, and the most chunks of data
%% (messages that carry a binary) one held, with what that one held.
mailbox({P, Len}, {MaxLen, MaxChunks, Held}) ->
    case process_info(P, messages) of
        {messages, Ms} ->
            Kinds = [kind(M) || M <- Ms],
            Chunks = length([chunk || chunk <- Kinds]),
            {max(MaxLen, Len), max(MaxChunks, Chunks),
             case length(Ms) > length(Held) of
                 true -> Kinds;
                 false -> Held
             end};
        undefined ->
            {MaxLen, MaxChunks, Held}
    end.

kind(M) when is_tuple(M) ->
    case lists:any(fun is_binary/1, tuple_to_list(M)) of
        true -> chunk;
        false -> element(1, M)
    end;
kind(M) ->
    M.

%% Every process created from now on (the connections) is traced on its
%% calls to sluice_conn:activate/2, which arms the transport for the
%% first grant and re-arms it at every top-up, with the new grant in its
%% state: the match spec puts only that in the trace message.
grant_tracer() ->
    Tracer = spawn(fun() -> trace_grants(#{}) end),
    true = register(sluice_pressure_grants, Tracer),
    1 = erlang:trace_pattern({sluice_conn, activate, 2},
                             [{['_', '$1'], [], [{message, {element, #s.grant, '$1'}}]}], [local]),
    _ = erlang:trace(new_processes, true, [call, {tracer, Tracer}]),
    ok.

trace_grants(Max) ->
    receive
        {trace, Pid, call, {sluice_conn, activate, _}, Grant} ->
            trace_grants(Max#{Pid => max(Grant, maps:get(Pid, Max, 0))});
        {grants, From} ->
            From ! {grants, Max}
    end.

grants() ->
    _ = erlang:trace(new_processes, false, [call]),
    _ = erlang:trace_pattern({sluice_conn, activate, 2}, false, [local]),
    sluice_pressure_grants ! {grants, self()},
    receive {grants, Max} -> Max after 5000 -> error(no_grants) end.
