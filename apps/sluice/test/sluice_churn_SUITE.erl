%% info/1's figures under churn, on every transport: many loopback
%% clients whose connections end every way there is (the client's close,
%% the handler's, a crash, exit(normal), the idle timeout, parking and
%% waking, a hand-off adopted back, STARTTLS (inet), remove_connection/1, a handler that
%% traps exits, a slow terminate/2) while a killer shuts connections down
%% (supervisor:terminate_child/2), kills connection supervisors, their
%% supervisor and acceptors, stops connection supervisors
%% (sys:terminate/2), and drains and resumes the listener; and listeners
%% whose connections a drain cuts before their handler (a PROXY header
%% or a TLS handshake that never comes) while their supervisors are
%% killed. Once every connection has ended: accepted = closed +
%% connections, the close reasons sum to closed, `connections' was never
%% below 0 nor over the limit by more than the admissions in flight, and
%% no connection supervisor's slot keeps a mark (sluice_stats:marks/1).
%% Bounded in time (a few seconds a run); the seed is in the log.
%%
%% This module is also the handler: a command per chunk (and no
%% handle_info/2 nor handle_call/3, so that its connections park).
-module(sluice_churn_SUITE).
-behaviour(sluice_handler).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([figures_add_up_under_churn_and_kills_inet/1,
         figures_add_up_under_churn_and_kills_socket/1,
         figures_add_up_under_churn_and_kills_ssl/1,
         figures_add_up_when_drains_cut_connections_before_their_handler/1]).
-export([init/2, handle_data/2, terminate/2]).

-define(CLIENTS, 24).
-define(RUN_MS, 6000).
-define(MAX, 40).
-define(ACCEPTORS, 4).
-define(WAIT, 15000).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [figures_add_up_under_churn_and_kills_inet,
     figures_add_up_under_churn_and_kills_socket,
     figures_add_up_under_churn_and_kills_ssl,
     figures_add_up_when_drains_cut_connections_before_their_handler].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    {ok, _} = application:ensure_all_started(ssl),
    [{certs, sluice_tls_test_lib:certs()} | Config].

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    ct:log("seed ~p", [sluice_test_lib:seed_rand()]),
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% The handler -------------------------------------------------------

init(_Conn, Name) ->
    {ok, #{name => Name, slow => false}}.

handle_data(<<"echo">>, S) ->
    {reply, <<"echo">>, S};
handle_data(<<"close">>, S) ->
    {close, bye, S};
handle_data(<<"crash">>, _S) ->
    error(churn_crash);
handle_data(<<"exitn">>, _S) ->
    exit(normal);
handle_data(<<"uncount">>, S) ->
    ok = sluice:remove_connection(self()),
    {reply, <<"uncou">>, S};
handle_data(<<"trap">>, S) ->
    process_flag(trap_exit, true),
    {reply, <<"trap">>, S};
handle_data(<<"slowterm">>, S) ->
    {reply, <<"slowterm">>, S#{slow := true}};
handle_data(<<"starttls">>, S) ->
    %% (inet: the listener has tls_opts)
    {starttls, <<"starttls">>, S};
handle_data(<<"handoff">>, S = #{name := Name}) ->
    To = spawn(fun() -> adopter(Name) end),
    {handoff, <<"hand">>, To, S};
handle_data(_Other, S) ->
    {ok, S}.

terminate(_Reason, #{slow := true}) ->
    %% a window for a shutdown or a kill after the connection's end began
    receive after rand:uniform(20) -> ok end;
terminate(_Reason, _S) ->
    ok.

%% The hand-off's new owner gives the socket back to the listener, or
%% closes it if the listener takes it no more (draining, its supervisor
%% restarting).
adopter(Name) ->
    receive
        {sluice_handoff, #{socket := Sock, transport := T}, Buffered} ->
            case sluice:adopt(Name, Sock, #{buffered => Buffered}) of
                {ok, _} -> ok;
                {error, _} -> close_owned(T, Sock)
            end
    after 5000 ->
            ok
    end.

close_owned(sluice_transport_inet, Sock) -> gen_tcp:close(Sock);
close_owned(sluice_transport_socket, Sock) -> socket:close(Sock);
close_owned(sluice_transport_ssl, Sock) -> ssl:close(Sock).

%%% Cases -------------------------------------------------------------

figures_add_up_under_churn_and_kills_inet(Config) ->
    churn(inet, Config).

figures_add_up_under_churn_and_kills_socket(Config) ->
    churn(socket, Config).

figures_add_up_under_churn_and_kills_ssl(Config) ->
    churn(ssl, Config).

%% Connections waiting for a PROXY header or a TLS handshake that never
%% comes (some with its first bytes), drained with a short deadline (the drain
%% cuts the waiting ones) while connection supervisors are killed and
%% stopped meanwhile, several rounds.
figures_add_up_when_drains_cut_connections_before_their_handler(Config) ->
    Name = ?config(name, Config),
    #{server := TlsOpts} = ?config(certs, Config),
    [cut_rounds(Name, L) || L <- [#{transport => inet, proxy_protocol => true},
                                  #{transport => socket, proxy_protocol => true},
                                  #{transport => ssl, tls_opts => TlsOpts}]],
    ok.

cut_rounds(Name, Opts) ->
    sluice_test_lib:start_listener(Name, Opts#{handler => {?MODULE, Name}, num_conns_sups => 3,
                                               handshake_timeout => 60000,
                                               proxy_timeout => 60000}),
    Port = sluice_test_lib:port(Name),
    Sampler = sampler(Name),
    [begin
         Silent = [S || _ <- lists:seq(1, 10), {ok, S} <- [sluice_test_lib:connect(Port)]],
         %% some of them begin: half a PROXY header, or a ClientHello's
         %% first bytes
         [gen_tcp:send(S, <<"PROXY TCP4 ">>) || S <- lists:sublist(Silent, 3)],
         ok = sluice_test_lib:wait_until(
                fun() -> maps:get(connections, sluice:info(Name)) >= 5 end, ?WAIT),
         Victims = sluice_test_lib:conns_sups(Name),
         Killer = spawn_link(fun() ->
                                     receive after rand:uniform(150) -> ok end,
                                     [exit(lists:nth(rand:uniform(length(Victims)), Victims),
                                           kill) || rand:uniform(2) =:= 1],
                                     receive after rand:uniform(100) -> ok end,
                                     _ = catch sys:terminate(lists:last(Victims), shutdown, 500)
                             end),
         _ = sluice:drain(Name, rand:uniform(150)),
         ok = wait_dead(Killer),
         ok = sluice:resume(Name),
         [gen_tcp:close(S) || S <- Silent]
     end || _ <- lists:seq(1, 4)],
    settle_and_check(Name, Sampler),
    sluice_test_lib:stop_listener(Name).

%%% Churn ---------------------------------------------------------------

churn(T, Config) ->
    Name = ?config(name, Config),
    #{server := TlsOpts, client := _} = ?config(certs, Config),
    sluice_test_lib:start_listener(Name, listener_opts(T, TlsOpts, Name)),
    Sampler = sampler(Name),
    Deadline = erlang:monotonic_time(millisecond) + ?RUN_MS,
    Self = self(),
    Clients = [spawn_link(fun() ->
                                  _ = rand:seed(exsss, {I, erlang:unique_integer(), 7}),
                                  client(T, Name, Deadline),
                                  Self ! {done, self()}
                          end) || I <- lists:seq(1, ?CLIENTS)],
    Killer = spawn_link(fun() -> killer(Name, Deadline) end),
    [receive {done, C} -> ok after ?RUN_MS + ?WAIT -> ct:fail({client_stuck, C}) end
     || C <- Clients],
    ok = wait_dead(Killer),
    ok = sluice:resume(Name),
    settle_and_check(Name, Sampler).

listener_opts(T, TlsOpts, Name) ->
    Base = #{handler => {?MODULE, Name}, num_conns_sups => 4, num_acceptors => ?ACCEPTORS,
             max_connections => ?MAX, max_connections_wait => 50, idle_timeout => 300,
             hibernate_after => 20, shutdown_timeout => 200},
    case T of
        inet -> Base#{transport => inet, park_after => 60, tls_opts => TlsOpts,
                      handshake_timeout => 500};
        socket -> Base#{transport => socket};
        ssl -> Base#{transport => ssl, tls_opts => TlsOpts}
    end.

%% One client: connections one after the other until the deadline, each
%% a few commands and then an end, any failure (its connection cut by the
%% killer) taken as that connection's end.
client(T, Name, Deadline) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true ->
            ok;
        false ->
            %% (the port of the moment: a listener started again after
            %% its supervisor was killed has a new one)
            _ = catch connection(T, sluice_test_lib:port(Name)),
            client(T, Name, Deadline)
    end.

connection(T, Port) ->
    case cconnect(T, Port) of
        {ok, C} ->
            try
                Steps = [lists:nth(rand:uniform(4), [<<"echo">>, <<"uncount">>, <<"trap">>,
                                                      <<"slowterm">>])
                         || _ <- lists:seq(1, rand:uniform(3) - 1)],
                _ = [ok = command(T, C, Step) || Step <- Steps],
                ending(T, C, rand:uniform(case T of inet -> 9; _ -> 8 end))
            after
                cclose(T, C)
            end;
        _ ->
            receive after 5 -> ok end
    end.

command(T, C, Cmd) ->
    ok = csend(T, C, Cmd),
    Len = byte_size(Cmd),
    case crecv(T, C, Len, 2000) of
        {ok, _} -> ok;
        Error -> Error
    end.

ending(T, C, 1) -> cclose(T, C);
ending(T, C, 2) -> csend(T, C, <<"close">>), crecv(T, C, 0, 2000);
ending(T, C, 3) -> csend(T, C, <<"crash">>), crecv(T, C, 0, 2000);
ending(T, C, 4) -> csend(T, C, <<"exitn">>), crecv(T, C, 0, 2000);
%% the idle timeout
ending(T, C, 5) -> crecv(T, C, 0, 2000);
%% parked (inet) or hibernated, woken, then closed
ending(T, C, 6) -> receive after 90 -> ok end, command(T, C, <<"echo">>), cclose(T, C);
ending(T, C, 7) -> command(T, C, <<"handoff">>), command(T, C, <<"echo">>), cclose(T, C);
ending(T, C, 8) -> command(T, C, <<"echo">>), cclose(T, C);
%% STARTTLS (inet), then a few commands over TLS and either side's close,
%% or no handshake at all (the handshake timeout, or a drain cuts it)
ending(inet, C, 9) ->
    ok = command(inet, C, <<"starttls">>),
    case rand:uniform(4) of
        1 ->
            crecv(inet, C, 0, 2000);
        _ ->
            {ok, Tls} = ssl:connect(C, [binary, {active, false}, {verify, verify_none}], 2000),
            _ = command(ssl, Tls, <<"echo">>),
            ending(ssl, Tls, rand:uniform(4))
    end.

cconnect(ssl, Port) ->
    ssl:connect({127, 0, 0, 1}, Port, [binary, {active, false}, {verify, verify_none}], 2000);
cconnect(_, Port) ->
    sluice_test_lib:connect(Port).

csend(ssl, C, D) -> ssl:send(C, D);
csend(_, C, D) -> gen_tcp:send(C, D).

crecv(ssl, C, N, Timeout) -> ssl:recv(C, N, Timeout);
crecv(_, C, N, Timeout) -> gen_tcp:recv(C, N, Timeout).

cclose(ssl, C) -> ssl:close(C);
cclose(_, C) -> gen_tcp:close(C).

%% Every 150 ms or so, one of: a connection shut down, a connection
%% supervisor killed, suspended a moment then killed, or stopped, the
%% connection supervisors' supervisor killed, the listener's supervisor
%% killed (the listener starts again, its figures from 0), an acceptor
%% killed, a drain and a resume. (Slow enough for the supervisors' restart
%% intensities: 10 in 10 s.)
killer(Name, Deadline) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true ->
            ok;
        false ->
            receive after 100 + rand:uniform(100) -> ok end,
            _ = catch kill(rand:uniform(10), Name),
            killer(Name, Deadline)
    end.

kill(N, Name) when N =< 4 ->
    Sups = sluice_test_lib:conns_sups(Name),
    Sup = lists:nth(rand:uniform(length(Sups)), Sups),
    case supervisor:which_children(Sup) of
        [] -> ok;
        Children ->
            {_, Pid, _, _} = lists:nth(rand:uniform(length(Children)), Children),
            supervisor:terminate_child(Sup, Pid)
    end;
kill(5, Name) ->
    exit(any_conns_sup(Name), kill);
kill(6, Name) ->
    Sup = any_conns_sup(Name),
    ok = sys:suspend(Sup),
    receive after rand:uniform(20) -> ok end,
    exit(Sup, kill);
kill(7, Name) ->
    sys:terminate(any_conns_sup(Name), shutdown, 1000);
kill(8, Name) ->
    {ok, #{sup := LSup}} = sluice_registry:lookup(Name),
    case rand:uniform(6) of
        1 ->
            {_, SupSup, _, _} = lists:keyfind(sluice_conns_sup_sup, 1,
                                              supervisor:which_children(LSup)),
            exit(SupSup, kill);
        2 ->
            %% the whole listener, started again with new figures
            exit(LSup, kill);
        _ ->
            ok
    end;
kill(9, Name) ->
    case sluice_test_lib:acceptor_pids(Name) of
        [] -> ok;
        Accs -> exit(lists:nth(rand:uniform(length(Accs)), Accs), kill)
    end;
kill(10, Name) ->
    _ = sluice:drain(Name, rand:uniform(50)),
    sluice:resume(Name).

any_conns_sup(Name) ->
    Sups = sluice_test_lib:conns_sups(Name),
    lists:nth(rand:uniform(length(Sups)), Sups).

%%% Checks --------------------------------------------------------------

%% Samples info/1 every few ms until told to stop: the lowest
%% `connections' seen, and the highest count against the limit.
sampler(Name) ->
    Self = self(),
    spawn_link(fun() -> sample(Name, Self, 0, 0) end).

sample(Name, Parent, Low, High) ->
    receive
        {stop, Parent} -> Parent ! {sampled, self(), Low, High}
    after 2 ->
            case catch sluice:info(Name) of
                #{connections := C, uncounted := U} ->
                    sample(Name, Parent, min(Low, C), max(High, C - U));
                _ ->
                    sample(Name, Parent, Low, High)
            end
    end.

settle_and_check(Name, Sampler) ->
    %% Every connection ends by the idle timeout at the latest.
    ok = sluice_test_lib:wait_until(
           fun() ->
                   Info = #{connections := C, parked := P} = sluice:info(Name),
                   Procs = sluice:connections(Name),
                   {C, P, Procs} =:= {0, 0, []}
                       orelse {Info, Procs, [{Pr, catch sys:get_state(Pr, 100)} || Pr <- Procs]}
           end, ?WAIT, 50),
    %% and every supervisor has seen the ends of its connections
    [_ = sys:get_state(S) || S <- sluice_test_lib:conns_sups(Name)],
    Sampler ! {stop, self()},
    {Low, High} = receive {sampled, Sampler, L, H} -> {L, H} after ?WAIT -> error(sampler) end,
    Info = #{accepted := A, closed := Closed, connections := Live, close_reasons := CR,
             uncounted := Uncounted} = sluice:info(Name),
    {ok, #{stats := Stats}} = sluice_registry:lookup(Name),
    Marks = sluice_stats:marks(Stats),
    ct:log("~p~nmarks ~p, lowest connections ~p, highest counted ~p", [Info, Marks, Low, High]),
    ?assertEqual({A, 0, 0}, {Closed + Live, Live, Uncounted}),
    ?assertEqual(Closed, lists:sum(maps:values(CR))),
    ?assertEqual([], [M || M <- Marks, M =/= 0]),
    ?assert(Low >= 0, {lowest_connections, Low}),
    ?assert(High =< ?MAX + ?ACCEPTORS, {highest_counted, High}).

wait_dead(Pid) ->
    sluice_test_lib:wait_until(fun() -> not is_process_alive(Pid) end, ?WAIT).
