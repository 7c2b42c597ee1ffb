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
%% server's memory grows by less than 20 x active x read size + 64 MiB, and
%% once the clients close every connection ends and the memory returns to
%% within 16 MiB of its baseline.
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
    {Peak, MaxQueue, Samples} = peer:call(Peer, ?MODULE, stop_sampler, []),
    During = peer:call(Peer, sluice, info, [nr]),
    [C ! close || C <- Clients],
    ok = wait_peer_info(Peer, connections, 0, 10000),
    After = peer:call(Peer, ?MODULE, settle, []),
    %% A client that does not read its replies keeps an adaptive grant at
    %% its minimum: the bound is the same as for a fixed grant of that.
    Grant = case Active of
                adaptive -> maps:get(min, sluice_opts:adaptive_grant());
                N when is_integer(N) -> N
            end,
    Bound = ?CLIENTS * Grant * ?BUFFER + 64 * 1024 * 1024,
    #{bytes_in := In, bytes_out := Out} = During,
    ct:log("~b clients x ~b MB wanted; written by the clients (queued) ~b MB; read by the server "
           "~b MB, acks sent ~b MB~nserver memory: baseline ~b MB, peak ~b MB (growth ~b MB, "
           "bound ~b MB, ~b samples), after ~b MB; largest connection mailbox ~b messages "
           "(active ~p)",
           [?CLIENTS, ?BYTES bsr 20, lists:sum(Sent) bsr 20, In bsr 20, Out bsr 20, Base bsr 20,
            Peak bsr 20, (Peak - Base) bsr 20, Bound bsr 20, Samples, After bsr 20, MaxQueue,
            Active]),
    %% Back-pressure through TCP: the server read well under what was wanted.
    ?assert(In < ?CLIENTS * ?BYTES div 2, {read_by_server, In}),
    ?assert(Peak - Base < Bound, {growth, Peak - Base, bound, Bound}),
    %% At most Active chunks (the grant the connection tops up), plus the
    %% driver's small `inet_reply' for each ack sent while later chunks
    %% were already queued behind it.
    ?assert(MaxQueue =< 2 * Grant + 2, {mailbox, MaxQueue}),
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

%% Peak total memory and largest mailbox, every 20 ms until asked (the
%% peer is reached through peer:call only: it is not distributed).
-spec start_sampler() -> ok.
start_sampler() ->
    Pid = spawn(fun() -> sample(0, 0, 0) end),
    true = register(sluice_pressure_sampler, Pid),
    ok.

-spec stop_sampler() -> {non_neg_integer(), non_neg_integer(), non_neg_integer()}.
stop_sampler() ->
    sluice_pressure_sampler ! {stop, self()},
    receive {peak, P, Q, N} -> {P, Q, N} after 5000 -> error(no_peak) end.

sample(Peak, MaxQ, N) ->
    receive
        {stop, From} -> From ! {peak, Peak, MaxQ, N}, ok
    after 20 ->
            Q = lists:max([0 | [L || P <- processes(),
                                     {message_queue_len, L} <- [process_info(P, message_queue_len)]]]),
            sample(max(Peak, erlang:memory(total)), max(MaxQ, Q), N + 1)
    end.
