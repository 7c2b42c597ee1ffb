%% Abuse of the TLS handshake and of the PROXY header (issue 13 item 5),
%% on loopback: a ClientHello trickled a byte at a time, a client that
%% stalls mid-handshake, PROXY headers split across reads, v2 headers
%% announcing a huge length, garbage instead of ClientHellos, and 1,000
%% connects that never finish their handshake. Each offending connection
%% ends by a bound (handshake_timeout, proxy_timeout, the size limit),
%% is counted, reaches no handler, and leaves nothing behind: the VM's
%% process and port counts come back to what they were, its memory to
%% within a few MB. Bystanders (TLS connections opened before the abuse,
%% ack each) keep getting every ack throughout, on the same connections.
-module(sluice_tls_abuse_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([trickled_client_hello_is_cut_by_handshake_timeout/1,
         client_stalled_mid_handshake_is_cut_by_handshake_timeout/1,
         garbage_client_hellos_close_only_their_connections/1,
         health_check_is_the_clients_close_and_not_logged/1,
         proxy_headers_split_across_reads_are_served/1,
         v2_headers_with_huge_lengths_are_refused/1,
         thousand_unfinished_handshakes_leave_bystanders_served/1]).

-define(BYSTANDERS, 5).
-define(HANDSHAKE_TIMEOUT, 1000).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [trickled_client_hello_is_cut_by_handshake_timeout,
     client_stalled_mid_handshake_is_cut_by_handshake_timeout,
     garbage_client_hellos_close_only_their_connections,
     health_check_is_the_clients_close_and_not_logged,
     proxy_headers_split_across_reads_are_served,
     v2_headers_with_huge_lengths_are_refused,
     thousand_unfinished_handshakes_leave_bystanders_served].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% A TLS ack-each listener (handshake_timeout 1 s) whose handler reports
%% every init to this process.
listener(Config, Extra) ->
    Name = ?config(name, Config),
    put(proxy_protocol, maps:get(proxy_protocol, Extra, false)),
    sluice_test_lib:start_listener(
      Name, maps:merge(#{transport => ssl, handshake_timeout => ?HANDSHAKE_TIMEOUT,
                         tls_opts => sluice_tls_test_lib:server_opts(Config),
                         handler => {sluice_proto_ack, #{ack => each}}}, Extra)),
    sluice_test_lib:port(Name).

%% Bystanders: TLS connections opened before the abuse, checked with a
%% pipelined batch before and after it (and, in the storm, during it).
%% On a listener with proxy_protocol they send a PROXY header first.
bystanders(Config, Port) ->
    Socks = [bystander(Config, Port, I) || I <- lists:seq(1, ?BYSTANDERS)],
    all_served(Socks),
    Socks.

bystander(Config, Port, I) ->
    case get(proxy_protocol) =:= true andalso Config =/= [] of
        false ->
            {ok, S} = sluice_tls_test_lib:connect(Port, Config),
            S;
        true ->
            {ok, T} = sluice_tls_test_lib:tcp_connect(Port),
            ok = gen_tcp:send(T, sluice_proxy_header:encode(
                                   #{version => 1, command => proxy, transport => tcp4,
                                     source => {{10, 9, 9, I}, 9000 + I},
                                     destination => {{10, 0, 1, 1}, 443}})),
            {ok, S} = ssl:connect(T, sluice_tls_test_lib:client_opts(Config) ++ [binary], 5000),
            S
    end.

all_served(Socks) ->
    ?assertEqual([ok || _ <- Socks], [sluice_tls_test_lib:ack_pipeline(S, 50, 10) || S <- Socks]).

%% Runs Abuse(Port) between a baseline of the VM and a settled state
%% after it (every offending connection gone), with bystanders around it.
%% Returns {AbuseResult, counter changes, VM before, VM after}.
with_bystanders(Config, Port, Abuse) ->
    Name = ?config(name, Config),
    Socks = bystanders(Config, Port),
    Before = sluice:info(Name),
    VM0 = sluice_tls_test_lib:vm_snapshot(),
    Result = Abuse(Socks),
    sluice_test_lib:wait_info(Name, connections, ?BYSTANDERS, 15000),
    all_served(Socks),
    VM1 = settled_vm(VM0, erlang:monotonic_time(millisecond) + 5000),
    After = sluice:info(Name),
    [ssl:close(S) || S <- Socks],
    Delta = delta(Before, After),
    ct:log("result ~p~ncounter changes ~p~nVM before ~p~nVM after ~p",
           [Result, Delta, VM0, VM1]),
    ?assertEqual(maps:get(closed, Delta), maps:get(accepted, Delta)),
    {Result, Delta, VM0, VM1}.

%% The VM once the processes and ports of the abuse are gone (ssl's
%% connection processes end a moment after the connection's own).
settled_vm(VM0 = #{processes := P0, ports := Po0}, Deadline) ->
    VM = sluice_tls_test_lib:vm_snapshot(),
    case VM of
        #{processes := P, ports := Po} when P =< P0, Po =< Po0 -> VM;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> VM;
                false -> timer:sleep(100), settled_vm(VM0, Deadline)
            end
    end.

back_to_baseline(#{processes := P0, ports := Po0, memory := M0},
                 #{processes := P1, ports := Po1, memory := M1}) ->
    ?assert(P1 =< P0, {processes, P0, P1}),
    ?assert(Po1 =< Po0, {ports, Po0, Po1}),
    ?assert(M1 - M0 < 8 * 1024 * 1024, {memory_growth, M1 - M0}).

delta(Before, After) ->
    Keys = [accepted, closed, rejected],
    Reasons = maps:filter(fun(_, V) -> V =/= 0 end,
                          maps:map(fun(K, V) -> V - maps:get(K, maps:get(close_reasons, Before)) end,
                                   maps:get(close_reasons, After))),
    maps:merge(maps:from_list([{K, maps:get(K, After) - maps:get(K, Before)} || K <- Keys]),
               #{close_reasons => Reasons}).

%% Writes Bytes one byte every IntervalMs until the server closes;
%% {BytesSent, Ms}.
trickle(Port, Bytes, IntervalMs) ->
    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
    T0 = erlang:monotonic_time(millisecond),
    Sent = trickle_loop(S, Bytes, IntervalMs, 0),
    {Sent, erlang:monotonic_time(millisecond) - T0}.

trickle_loop(S, <<B, Rest/binary>>, Interval, Sent) ->
    case gen_tcp:send(S, <<B>>) of
        ok ->
            case gen_tcp:recv(S, 0, Interval) of
                {error, timeout} -> trickle_loop(S, Rest, Interval, Sent + 1);
                {ok, _} -> trickle_loop(S, Rest, Interval, Sent + 1);
                {error, _} -> gen_tcp:close(S), Sent + 1
            end;
        {error, _} ->
            gen_tcp:close(S),
            Sent
    end;
trickle_loop(S, <<>>, _Interval, Sent) ->
    _ = sluice_abuse_client:recv_until_end(S, 5000),
    Sent.

%%% ------------------------------------------------------------------
%%% The handshake
%%% ------------------------------------------------------------------

%% A real ClientHello (about 300 bytes) written a byte every 50 ms (it
%% would take 15 s): the connection is closed once handshake_timeout
%% (1 s) has passed since it began, not per byte; counted as
%% handshake_error; the bystanders are served; nothing is left.
trickled_client_hello_is_cut_by_handshake_timeout(Config) ->
    Port = listener(Config, #{}),
    Hello = sluice_tls_test_lib:client_hello(Config, []),
    {{Sent, Ms}, Delta, VM0, VM1} =
        with_bystanders(Config, Port, fun(_) -> trickle(Port, Hello, 50) end),
    ct:log("ClientHello of ~b bytes: ~b sent, cut after ~b ms", [byte_size(Hello), Sent, Ms]),
    ?assert(Ms >= ?HANDSHAKE_TIMEOUT - 50 andalso Ms < ?HANDSHAKE_TIMEOUT + 1000, Ms),
    ?assert(Sent < byte_size(Hello) div 5, Sent),
    ?assertMatch(#{accepted := 1, close_reasons := #{handshake_error := 1}}, Delta),
    back_to_baseline(VM0, VM1).

%% Clients that send their whole ClientHello (TLS 1.3, and 1.2) and then
%% never answer the server's flight, and one that sends half of it: each
%% is closed at handshake_timeout, counted, and leaves nothing behind.
client_stalled_mid_handshake_is_cut_by_handshake_timeout(Config) ->
    Port = listener(Config, #{}),
    Hello13 = sluice_tls_test_lib:client_hello(Config, []),
    Hello12 = sluice_tls_test_lib:client_hello(Config, [{versions, ['tlsv1.2']}]),
    Half = binary:part(Hello13, 0, byte_size(Hello13) div 2),
    Stall = fun(Bytes) ->
                    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
                    T0 = erlang:monotonic_time(millisecond),
                    ok = gen_tcp:send(S, Bytes),
                    {Got, End} = sluice_abuse_client:recv_until_end(S, 5000),
                    {byte_size(Got), End, erlang:monotonic_time(millisecond) - T0}
            end,
    {Results, Delta, VM0, VM1} =
        with_bystanders(Config, Port,
                        fun(_) ->
                                Self = self(),
                                Pids = [spawn_link(fun() -> Self ! {self(), Stall(B)} end)
                                        || B <- [Hello13, Hello12, Half]],
                                [receive {P, R} -> R after 10000 -> error(stuck) end || P <- Pids]
                        end),
    ct:log("stalled clients (bytes from the server, ending, ms): ~p", [Results]),
    [?assert(Ms >= ?HANDSHAKE_TIMEOUT - 50 andalso Ms < ?HANDSHAKE_TIMEOUT + 1000, Ms)
     || {_, _, Ms} <- Results],
    %% The two whole ClientHellos got the server's flight; half of one got
    %% nothing.
    ?assertMatch([{N13, _, _}, {N12, _, _}, {0, _, _}] when N13 > 0 andalso N12 > 0, Results),
    ?assertMatch(#{accepted := 3, close_reasons := #{handshake_error := 3}}, Delta),
    back_to_baseline(VM0, VM1).

%% 200 clients write 1..3000 random bytes (first byte not a handshake
%% record) instead of a ClientHello: each is closed at once, counted, no
%% handler; bystanders served; nothing left.
garbage_client_hellos_close_only_their_connections(Config) ->
    Port = listener(Config, #{}),
    {Ms, Delta, VM0, VM1} =
        with_bystanders(Config, Port,
                        fun(_) ->
                                T0 = erlang:monotonic_time(millisecond),
                                Self = self(),
                                Pids = [spawn_link(fun() ->
                                                           N = rand:uniform(3000) - 1,
                                                           {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
                                                           _ = gen_tcp:send(S, <<($A + rand:uniform(20)),
                                                                                 (rand:bytes(N))/binary>>),
                                                           {_, E} = sluice_abuse_client:recv_until_end(S, 3000),
                                                           Self ! {self(), E}
                                                   end) || _ <- lists:seq(1, 200)],
                                Ends = [receive {P, E} -> E after 10000 -> error(stuck) end
                                        || P <- Pids],
                                ?assertEqual([], [E || E <- Ends, E =/= closed, E =/= econnreset]),
                                erlang:monotonic_time(millisecond) - T0
                        end),
    ct:log("200 garbage clients done in ~b ms", [Ms]),
    ?assert(Ms < ?HANDSHAKE_TIMEOUT, Ms),
    ?assertMatch(#{accepted := 200, close_reasons := #{handshake_error := 200}}, Delta),
    back_to_baseline(VM0, VM1).

%% A load balancer's TCP health check, a connect and a close (FIN or
%% reset) without a byte, is the client's close: counted `peer_closed',
%% not `handshake_error', and not logged. A client that sends garbage, or
%% closes mid-handshake (half a ClientHello), is still a
%% `handshake_error', and the first is logged (at once: no health check
%% took the line). (A stalled one: client_stalled_mid_handshake_...)
%% (Every check was a logged `{handshake_error, closed}' before.)
health_check_is_the_clients_close_and_not_logged(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{}),
    Hello = sluice_tls_test_lib:client_hello(Config, []),
    ok = sluice_log_forwarder:start(self()),
    try
        [ok = sluice_tls_test_lib:health_check(Port, How) || How <- [fin, rst, fin, rst]],
        ok = sluice_test_lib:wait_info(Name, closed, 4, 5000),
        ?assertMatch(#{close_reasons := #{peer_closed := 4, handshake_error := 0}},
                     sluice:info(Name)),
        {ok, Garbage} = sluice_tls_test_lib:tcp_connect(Port),
        ok = gen_tcp:send(Garbage, <<"GET / HTTP/1.1\r\n\r\n">>),
        {_, End} = sluice_abuse_client:recv_until_end(Garbage, 3000),
        ?assert(End =:= closed orelse End =:= econnreset, End),
        Half = binary:part(Hello, 0, byte_size(Hello) div 2),
        ok = sluice_tls_test_lib:health_check(Port, {send, Half}),
        ok = sluice_test_lib:wait_info(Name, closed, 6, 5000),
        ?assertMatch(#{close_reasons := #{peer_closed := 4, handshake_error := 2}},
                     sluice:info(Name)),
        Notices = sluice_tls_test_lib:refused_notices(2000),
        ct:log("notices: ~p", [Notices]),
        ?assertMatch([_], Notices),
        ?assertEqual(nomatch, string:find(hd(Notices), "{handshake_error,closed}"))
    after
        sluice_log_forwarder:stop()
    end.

%%% ------------------------------------------------------------------
%%% The PROXY header
%%% ------------------------------------------------------------------

%% 20 clients each write a v2 PROXY header (with TLVs) in random pieces
%% of 1..3 bytes, 5 ms apart, then make their TLS handshake on the same
%% socket and pipeline acks: every one is served and its handler sees its
%% own source address; bystanders served; nothing left. (The ack handler
%% sits behind sluice_conn_report_handler, which reports each conn() to
%% this process: the acks alone would pass with the header lost.)
proxy_headers_split_across_reads_are_served(Config) ->
    Port = listener(Config, #{proxy_protocol => true,
                              handler => {sluice_conn_report_handler,
                                          #{test_pid => self(),
                                            then => {sluice_proto_ack, #{ack => each}}}}}),
    {Results, Delta, VM0, VM1} =
        with_bystanders(Config, Port,
                        fun(_) ->
                                Self = self(),
                                Pids = [spawn_link(fun() -> Self ! {self(), split_header_client(Config, Port, I)} end)
                                        || I <- lists:seq(1, 20)],
                                [receive {P, R} -> R after 20000 -> error(stuck) end || P <- Pids]
                        end),
    ?assertEqual([ok || _ <- Results], Results),
    ?assertMatch(#{accepted := 20, close_reasons := #{peer_closed := 20}}, Delta),
    %% Every handler's conn() had its client's header: the 20 sources and
    %% unique ids, each once (the bystanders' v1 headers come from
    %% 10.9.9.x and carry no TLVs).
    Reported = reported_proxies(),
    ct:log("proxy of every handler: ~p", [Reported]),
    ?assertEqual(lists:sort([{{{10, 9, 9, I}, 9000 + I}, none} || I <- lists:seq(1, ?BYSTANDERS)]
                            ++ [{{{10, 0, 0, I}, 1000 + I}, <<I:32>>} || I <- lists:seq(1, 20)]),
                 lists:sort(Reported)),
    back_to_baseline(VM0, VM1).

%% {Source, UniqueId} of every handler's conn() reported so far.
reported_proxies() ->
    receive
        {sluice_conn, _, Conn, _} ->
            Proxy = maps:get(proxy, Conn, none),
            Source = case Proxy of #{source := S} -> S; _ -> none end,
            Id = case Proxy of
                     #{tlvs := TLVs} -> proplists:get_value(unique_id, TLVs, none);
                     _ -> none
                 end,
            [{Source, Id} | reported_proxies()]
    after 0 -> []
    end.

split_header_client(Config, Port, I) ->
    Header = sluice_proxy_header:encode(#{version => 2, command => proxy, transport => tcp4,
                                          source => {{10, 0, 0, I}, 1000 + I},
                                          destination => {{10, 0, 1, 1}, 443},
                                          tlvs => [{authority, <<"split.test">>}, {crc32c, 0},
                                                   {unique_id, <<I:32>>}]}),
    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
    [begin ok = gen_tcp:send(S, P), timer:sleep(5) end
     || P <- sluice_test_lib:random_split(Header, 1, 3)],
    {ok, SS} = ssl:connect(S, sluice_tls_test_lib:client_opts(Config) ++ [binary], 5000),
    R = sluice_tls_test_lib:ack_pipeline(SS, 20, 10),
    ok = ssl:close(SS),
    R.

%% 100 clients each write a v2 header whose length field announces 65535
%% bytes, then keep writing (64 KiB): each is refused when the length is
%% read (well before proxy_timeout, 5 s), counted as proxy_error, nothing
%% handed on, nothing allocated for what it announced; bystanders served.
v2_headers_with_huge_lengths_are_refused(Config) ->
    Port = listener(Config, #{proxy_protocol => true, proxy_timeout => 5000}),
    Sig = sluice_proxy_header_v2:signature(),
    {Ms, Delta, VM0, VM1} =
        with_bystanders(Config, Port,
                        fun(_) ->
                                T0 = erlang:monotonic_time(millisecond),
                                Self = self(),
                                Pids = [spawn_link(fun() ->
                                                           {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
                                                           _ = gen_tcp:send(S, <<Sig/binary, 16#21, 16#11, 65535:16>>),
                                                           _ = gen_tcp:send(S, rand:bytes(65536)),
                                                           {_, E} = sluice_abuse_client:recv_until_end(S, 5000),
                                                           Self ! {self(), E}
                                                   end) || _ <- lists:seq(1, 100)],
                                Ends = [receive {P, E} -> E after 10000 -> error(stuck) end || P <- Pids],
                                ?assertEqual([], [E || E <- Ends, E =/= closed, E =/= econnreset]),
                                erlang:monotonic_time(millisecond) - T0
                        end),
    ct:log("100 huge v2 headers refused in ~b ms", [Ms]),
    ?assert(Ms < 2000, Ms),
    ?assertMatch(#{accepted := 100, close_reasons := #{proxy_error := 100}}, Delta),
    back_to_baseline(VM0, VM1).

%%% ------------------------------------------------------------------
%%% The storm
%%% ------------------------------------------------------------------

%% 1,000 connects that never finish the handshake (half send nothing,
%% half send half a ClientHello and stall), opened by 10 clients at once,
%% with handshake_timeout 3 s: while they are pending, the 5 bystanders
%% pipeline a batch every 100 ms and get every ack, and a new TLS client
%% is served (the pending handshakes are held by connection processes,
%% not acceptors); then all 1,000 are closed by the timeout and counted,
%% and the VM's processes, ports and memory come back to the baseline.
%% What a pending handshake costs is in the case's log.
thousand_unfinished_handshakes_leave_bystanders_served(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{handshake_timeout => 3000}),
    Hello = sluice_tls_test_lib:client_hello(Config, []),
    Half = binary:part(Hello, 0, byte_size(Hello) div 2),
    {{Peak, Served}, Delta, VM0, VM1} =
        with_bystanders(Config, Port,
                        fun(Socks) ->
                                Openers = open_pending(Port, Half, 10, 100),
                                sluice_test_lib:wait_info(Name, connections, 1000 + ?BYSTANDERS, 5000),
                                Peak = sluice_tls_test_lib:vm_snapshot(),
                                {ok, New} = sluice_tls_test_lib:connect(Port, Config),
                                ok = sluice_tls_test_lib:ack_pipeline(New, 50, 10),
                                ok = ssl:close(New),
                                T0 = erlang:monotonic_time(millisecond),
                                Served = keep_serving(Name, Socks, 0),
                                ct:log("bystanders: ~b batches in the ~b ms until the last pending "
                                       "handshake ended", [Served, erlang:monotonic_time(millisecond) - T0]),
                                [O ! close || O <- Openers],
                                {Peak, Served}
                        end),
    #{memory := M0, processes := P0} = VM0,
    #{memory := MP, processes := PP} = Peak,
    ct:log("1000 pending handshakes: ~b processes and ~b KB more (~b processes and ~b bytes "
           "per handshake); bystanders served ~b batches meanwhile",
           [PP - P0, (MP - M0) div 1024, (PP - P0) div 1000, (MP - M0) div 1000, Served]),
    ?assert(Served >= 5, Served),
    ?assertMatch(#{accepted := 1001, close_reasons := #{handshake_error := 1000}}, Delta),
    back_to_baseline(VM0, VM1).

%% Openers processes, each holding PerOpener connections that say nothing
%% or Half, until told to close them.
open_pending(Port, Half, Openers, PerOpener) ->
    Self = self(),
    Pids = [spawn_link(fun() ->
                               Cs = [begin
                                         {ok, C} = sluice_tls_test_lib:tcp_connect(Port),
                                         _ = case I rem 2 of
                                                 0 -> gen_tcp:send(C, Half);
                                                 1 -> ok
                                             end,
                                         C
                                     end || I <- lists:seq(1, PerOpener)],
                               Self ! {opened, self()},
                               receive close -> [gen_tcp:close(C) || C <- Cs] end
                       end) || _ <- lists:seq(1, Openers)],
    [receive {opened, P} -> ok after 10000 -> error(opener_stuck) end || P <- Pids],
    Pids.

%% Every 100 ms each bystander pipelines a batch and must get all its
%% acks, until the listener is back to the bystanders alone.
keep_serving(Name, Socks, Batches) ->
    case maps:get(connections, sluice:info(Name)) of
        ?BYSTANDERS ->
            Batches;
        _ ->
            all_served(Socks),
            timer:sleep(100),
            keep_serving(Name, Socks, Batches + 1)
    end.
