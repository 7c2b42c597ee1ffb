%% How a listener looks to OTP's tools: a connection supervisor answers
%% what supervisor's functions, sys and observer ask a supervisor
%% (get_callback_module/1, get_childspec/2, terminate_child/2, sys:get_status/1
%% and the sys debug options), and a parked connection's new process keeps
%% the logger metadata the old one had (the PROXY header's addresses);
%% a connection's crash report names its listener and its client, and a
%% log that drops OTP's crash reports (Elixir's Logger) has the crash too.
%%
%% This module is also the handler of the parking and crash cases: it
%% reports its process's logger metadata on every chunk (then raises on
%% `crash'), and has neither handle_info/2 nor handle_call/3, so that its
%% connections park.
-module(sluice_otp_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([conns_sup_answers_supervisor_calls/1,
         conns_sup_terminate_child_shuts_a_connection_down/1,
         conns_sup_keeps_sys_debug_options/1,
         killed_conns_sup_sup_is_one_report/1,
         parked_connection_keeps_its_logger_metadata/1,
         a_crash_report_names_the_listener_and_the_client/1,
         a_crash_is_logged_where_sasl_reports_are_not/1,
         an_elixir_handlers_first_crash_is_in_elixirs_words/1,
         an_erlang_handlers_result_hint_is_in_erlangs_words_under_elixir/1,
         another_behaviours_result_is_said_with_sluices/1,
         a_bad_results_hint_is_in_an_erlang_nodes_log_once/1]).
%% sluice_handler callbacks
-export([init/2, handle_data/2]).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [conns_sup_answers_supervisor_calls,
     conns_sup_terminate_child_shuts_a_connection_down,
     conns_sup_keeps_sys_debug_options,
     killed_conns_sup_sup_is_one_report,
     parked_connection_keeps_its_logger_metadata,
     a_crash_report_names_the_listener_and_the_client,
     a_crash_is_logged_where_sasl_reports_are_not,
     an_elixir_handlers_first_crash_is_in_elixirs_words,
     an_erlang_handlers_result_hint_is_in_erlangs_words_under_elixir,
     another_behaviours_result_is_said_with_sluices,
     a_bad_results_hint_is_in_an_erlang_nodes_log_once].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_log_forwarder:stop(),
    [sluice_log_forwarder:stop(Id) || Id <- [otp_default, elixir_logger]],
    [sluice_test_lib:stop_listener(N) || N <- sluice:listeners(),
                                         N =:= ?config(name, Config)
                                             orelse element(1, N) =:= ?config(name, Config)],
    ok.

%%% The handler ----------------------------------------------------------

init(_Conn, Opts = #{init_result := Result, test_pid := Pid}) ->
    Pid ! {?MODULE, self(), logger:get_process_metadata()},
    {Result, Opts};
init(_Conn, Opts) ->
    {ok, Opts}.

handle_data(Data, S = #{test_pid := Pid}) ->
    Pid ! {?MODULE, self(), logger:get_process_metadata()},
    case Data of
        <<"crash">> -> error(crash_requested);
        <<"noreply">> -> {noreply, S};
        <<"close">> -> {close, S};
        _ -> {reply, <<"ok">>, S}
    end.

%%% Cases ----------------------------------------------------------------

%% supervisor:get_callback_module/1 reads the supervisor's part of
%% sys:get_status/1 (it crashed with badarg on the raw state);
%% get_childspec/2, delete_child/2 and restart_child/2 answer what a
%% simple_one_for_one supervisor answers (they said not_supported, which
%% their specs do not allow).
conns_sup_answers_supervisor_calls(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                           num_conns_sups => 1, shutdown_timeout => 2000}),
    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = sluice_test_lib:wait_info(Name, connections, 1, 5000),
    [Sup] = sluice_test_lib:conns_sups(Name),
    [Conn] = sluice:connections(Name),
    ?assertEqual(sluice_conns_sup, supervisor:get_callback_module(Sup)),
    {status, Sup, {module, sluice_conns_sup}, [_PDict, running, _Parent, _Debug, Misc]} =
        sys:get_status(Sup),
    %% The shape observer's state page reads (a header, then data).
    ?assertMatch([{header, _}, {data, [{"Status", running} | _]}, {data, [{"State", _}]} | _],
                 Misc),
    ?assertMatch({ok, #{id := sluice_conn, restart := temporary, shutdown := 2000,
                        type := worker, modules := [sluice_conn, sluice_proto_echo]}},
                 supervisor:get_childspec(Sup, Conn)),
    ?assertEqual({error, not_found}, supervisor:get_childspec(Sup, self())),
    ?assertEqual({error, not_found}, supervisor:terminate_child(Sup, self())),
    ?assertEqual({error, simple_one_for_one}, supervisor:delete_child(Sup, sluice_conn)),
    ?assertEqual({error, simple_one_for_one}, supervisor:restart_child(Sup, sluice_conn)),
    %% Nothing of that touched the connection.
    ok = gen_tcp:send(Sock, <<"still here">>),
    ?assertEqual({ok, <<"still here">>}, gen_tcp:recv(Sock, 10, 2000)),
    ok = gen_tcp:close(Sock).

%% supervisor:terminate_child(Sup, Pid), as on a simple_one_for_one
%% supervisor: the connection gets the `shutdown' exit (a handler that
%% traps exits runs terminate/2), is gone when the call returns, and the
%% listener's count follows.
conns_sup_terminate_child_shuts_a_connection_down(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                           num_conns_sups => 1}),
    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = sluice_test_lib:wait_info(Name, connections, 1, 5000),
    [Conn] = sluice:connections(Name),
    {ok, Other} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = sluice_test_lib:wait_info(Name, connections, 2, 5000),
    [Sup] = sluice_test_lib:conns_sups(Name),
    ?assertEqual(ok, supervisor:terminate_child(Sup, Conn)),
    ?assertNot(is_process_alive(Conn)),
    ?assertEqual({error, closed}, gen_tcp:recv(Sock, 0, 2000)),
    ?assertEqual(1, maps:get(connections, sluice:info(Name))),
    %% counted closed, with a reason: the figures still add up
    ?assertMatch(#{closed := 1, close_reasons := #{drained := 1}}, sluice:info(Name)),
    ?assertEqual([{specs, 1}, {active, 1}, {supervisors, 0}, {workers, 1}],
                 supervisor:count_children(Sup)),
    ?assertEqual({error, not_found}, supervisor:terminate_child(Sup, Conn)),
    ok = gen_tcp:send(Other, <<"y">>),
    ?assertEqual({ok, <<"y">>}, gen_tcp:recv(Other, 1, 2000)),
    ok = gen_tcp:close(Other).

%% Killing a listener's connection supervisors' supervisor is one
%% report: the listener's supervisor's (it restarts it), not one more per
%% connection supervisor, whose end is its parent's (OTP's supervisors
%% log two each in that case: a gen_server's and a crash report). A
%% connection supervisor that ends for a reason of its own still has its
%% crash report. (Until 2026-11: a crash report per connection
%% supervisor, 4 here, besides the supervisor's.)
killed_conns_sup_sup_is_one_report(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                           num_conns_sups => 4}),
    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = sluice_test_lib:wait_info(Name, connections, 1, 5000),
    Sups = sluice_test_lib:conns_sups(Name),
    4 = length(Sups),
    {ok, #{sup := LSup}} = sluice_registry:lookup(Name),
    {_, SupSup, _, _} = lists:keyfind(sluice_conns_sup_sup, 1, supervisor:which_children(LSup)),
    ok = sluice_log_forwarder:start(self()),
    exit(SupSup, kill),
    ok = sluice_test_lib:expect_closed(Sock, 5000),
    ok = restarted(Name, Sups),
    %% Each report is sent from the process that logs it before it ends
    %% or restarts anything: all are here now.
    Reports = reports(),
    ct:log("~p", [Reports]),
    ?assertMatch([{error, #{pid := LSup}}], Reports),
    #{close_reasons := #{drained := 1}, connections := 0} = sluice:info(Name),
    %% A connection supervisor's own end (here sys:terminate/2 with a
    %% reason that is no shutdown) is reported as before: its crash report
    %% and its supervisor's.
    [Sup | _] = sluice_test_lib:conns_sups(Name),
    ok = sys:terminate(Sup, boom),
    ok = restarted(Name, [Sup]),
    Own = reports(),
    ct:log("~p", [Own]),
    ?assertMatch([_, _], Own),
    ?assert(lists:keymember(Sup, 1, [{P, L} || {_, #{pid := P}} = L <- Own])),
    ok.

%% Old are gone and the listener has its 4 connection supervisors again.
restarted(Name, Old) ->
    sluice_test_lib:wait_until(
      fun() ->
              New = sluice_test_lib:conns_sups(Name),
              length(New) =:= 4 andalso [P || P <- New, lists:member(P, Old)] =:= []
                  andalso not lists:any(fun erlang:is_process_alive/1, Old)
      end, 5000).

%% The error reports logged so far, in order.
reports() ->
    receive
        {log, error, _Text, Meta} -> [{error, Meta} | reports()];
        {log, _Level, _Text, _Meta} -> reports()
    after 0 -> []
    end.

%% sys:statistics/2, sys:log/2 and sys:trace/2 on a connection
%% supervisor: they answered ok and then recorded nothing (the debug
%% options were dropped at the next message).
conns_sup_keeps_sys_debug_options(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                           num_conns_sups => 1}),
    [Sup] = sluice_test_lib:conns_sups(Name),
    ok = sys:statistics(Sup, true),
    ok = sys:log(Sup, true),
    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = sluice_test_lib:wait_info(Name, connections, 1, 5000),
    _ = supervisor:which_children(Sup),
    {ok, Stats} = sys:statistics(Sup, get),
    ct:log("statistics ~p", [Stats]),
    ?assert(is_list(Stats)),
    ?assert(proplists:get_value(messages_in, Stats) >= 2),
    {ok, Log} = sys:log(Sup, get),
    ?assertMatch([_ | _], [E || E = {in, {'$gen_call', _, which_children}} <- Log]),
    ok = sys:statistics(Sup, false),
    ok = sys:log(Sup, false),
    ?assertEqual({ok, no_statistics}, sys:statistics(Sup, get)),
    ok = gen_tcp:close(Sock).

%% A parked connection's next process keeps the logger metadata of the
%% one that parked: the PROXY header's addresses, which the docs promise
%% on whatever the connection logs (listener-options.md), were lost on the
%% first wake.
parked_connection_keeps_its_logger_metadata(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, #{test_pid => self()}},
                                           transport => inet, proxy_protocol => true,
                                           park_after => 50, num_conns_sups => 1}),
    {ok, Sock} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = gen_tcp:send(Sock, <<"PROXY TCP4 192.0.2.1 198.51.100.2 4321 443\r\nfirst">>),
    {ok, <<"ok">>} = gen_tcp:recv(Sock, 2, 2000),
    Expected = #{proxy_source => {{192, 0, 2, 1}, 4321},
                 proxy_destination => {{198, 51, 100, 2}, 443}},
    {Pid1, Meta1} = receive {?MODULE, P1, M1} -> {P1, M1} after 2000 -> error(no_report) end,
    ?assertMatch(#{proxy_source := _}, Meta1),
    ?assertEqual(Expected, maps:with(maps:keys(Expected), Meta1)),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 5000),
    ok = gen_tcp:send(Sock, <<"again">>),
    {ok, <<"ok">>} = gen_tcp:recv(Sock, 2, 2000),
    {Pid2, Meta2} = receive {?MODULE, P2, M2} -> {P2, M2} after 2000 -> error(no_report) end,
    %% A new process (it did park), with the same metadata.
    ?assertNotEqual(Pid1, Pid2),
    ?assertEqual(Meta1, Meta2),
    ok = gen_tcp:close(Sock).

%% The crash report of a handler that raised has the reason and the
%% stacktrace (proc_lib's), and, in the process's logger metadata (which
%% the report carries, and prints with the process dictionary), the
%% listener and the client's address: it named only sluice_conn:init/3
%% and a pid. One report, on every transport; the handler never sees
%% those keys.
a_crash_report_names_the_listener_and_the_client(Config) ->
    Name = ?config(name, Config),
    #{server := TlsOpts, client := _} = sluice_tls_test_lib:certs(),
    ok = sluice_log_forwarder:start(self()),
    [crash_report({Name, T}, Opts)
     || {T, Opts} <- [{inet, #{}}, {socket, #{}}, {ssl, #{tls_opts => TlsOpts}}]].

crash_report(L = {_, T}, Opts) ->
    sluice_test_lib:start_listener(L, Opts#{handler => {?MODULE, #{test_pid => self()}},
                                            transport => T}),
    Port = sluice_test_lib:port(L),
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}]),
    {ok, Client} = inet:sockname(Sock),
    {Send, Close} = case T of
                        ssl ->
                            {ok, Tls} = ssl:connect(Sock, [{verify, verify_none}], 5000),
                            {fun(D) -> ssl:send(Tls, D) end, fun() -> ssl:close(Tls) end};
                        _ ->
                            {fun(D) -> gen_tcp:send(Sock, D) end, fun() -> gen_tcp:close(Sock) end}
                    end,
    ok = Send(<<"crash">>),
    {Pid, HandlerMeta} = receive {?MODULE, P, M} -> {P, M} after 5000 -> error(no_report) end,
    ?assertEqual(undefined, HandlerMeta),
    {Text, Meta} = receive
                       {log, error, Tx, Md = #{pid := Pid, domain := [otp, sasl]}} -> {Tx, Md}
                   after 5000 -> error({no_crash_report, T})
                   end,
    ct:log("~p:~n~s", [T, Text]),
    ?assertMatch(#{sluice_listener := L, sluice_peer := Client}, Meta),
    ?assertNotEqual(nomatch, string:find(Text, "crash_requested")),
    ?assertNotEqual(nomatch, string:find(Text, "{sluice_otp_SUITE,handle_data,2,")),
    ?assertNotEqual(nomatch, string:find(Text, "sluice_peer")),
    %% (and sluice's own line of the crash, for the logs without crash
    %% reports: a_crash_is_logged_where_sasl_reports_are_not)
    receive {log, _, Tx2, #{pid := Pid} = M2} when map_get(domain, M2) =/= [sluice] ->
            ct:fail({second_report, T, Tx2})
    after 300 -> ok
    end,
    Close(),
    sluice_test_lib:stop_listener(L).

%% Elixir's Logger (1.14, default `handle_sasl_reports: false') drops the
%% events of the domain [otp, sasl], as proc_lib's crash report is: a
%% handler's crash left no line there, where a thousand_island handler's
%% (a GenServer's "terminating" report, domain [otp]) has one. sluice logs
%% the crash under the domain [sluice] as well: a handler filtering as
%% Logger does (Logger.Handler with `sasl: false' drops
%% `[:otp, :sasl | _]') gets that one line, with the reason, the handler's
%% frame and the client; a handler filtering as OTP's default one does
%% (kernel's filters for it, below) still gets the crash report alone.
a_crash_is_logged_where_sasl_reports_are_not(Config) ->
    Name = ?config(name, Config),
    Domain = fun logger_filters:domain/2,
    ok = sluice_log_forwarder:start(elixir_logger, self(),
                                    #{filters => [{sasl, {Domain, {stop, sub, [otp, sasl]}}}],
                                      filter_default => log}),
    ok = sluice_log_forwarder:start(otp_default, self(),
                                    #{filters => [{domain, {Domain, {log, super, [otp, sasl]}}},
                                                  {no_domain, {Domain, {log, undefined, []}}}],
                                      filter_default => stop}),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, #{test_pid => self()}}}),
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, sluice_test_lib:port(Name),
                                 [binary, {active, false}]),
    {ok, {_, ClientPort}} = inet:sockname(Sock),
    ok = gen_tcp:send(Sock, <<"crash">>),
    Pid = receive {?MODULE, P, _} -> P after 5000 -> error(no_data) end,
    Line = receive {log, elixir_logger, error, Tx, #{pid := Pid}} -> Tx
           after 5000 -> ct:fail(no_line_where_sasl_reports_are_dropped)
           end,
    ct:log("~s", [Line]),
    [?assertNotEqual(nomatch, string:find(Line, Part), Part)
     || Part <- [io_lib:format("~0p", [Name]), "crash_requested",
                 "sluice_otp_SUITE:handle_data/2", "127.0.0.1:" ++ integer_to_list(ClientPort)]],
    Report = receive {log, otp_default, error, Tx2, #{pid := Pid}} -> Tx2
             after 5000 -> ct:fail(no_crash_report)
             end,
    ?assertNotEqual(nomatch, string:find(Report, "crash_requested")),
    %% Once each: no line twice, no crash report where Logger keeps none.
    receive {log, Id, _, Again, #{pid := Pid}} -> ct:fail({twice, Id, Again})
    after 300 -> ok
    end,
    ok = gen_tcp:close(Sock).

%% In a VM where Elixir runs but nothing has formatted an exception yet
%% (its `Exception' module not loaded: a fresh node, here a peer with
%% Elixir's code on its path), the [sluice] crash line of a handler that
%% is an Elixir module is in Elixir's words: `** (exit) :boom', as
%% Logger prints a crash. (Until 2026-11 the first such crash was in
%% Erlang's, "exception exit: boom", unless its reason was an Elixir
%% exception.) Elixir is one of the packages `make deps' installs.
an_elixir_handlers_first_crash_is_in_elixirs_words(_Config) ->
    on_peer([elixir_ebin(), sluice_ebin()],
            fun(Peer) ->
                    ?assertNot(peer:call(Peer, erlang, module_loaded, ['Elixir.Exception'])),
                    Erlang = crash_text(Peer, an_erlang_handler, boom),
                    Elixir = crash_text(Peer, 'Elixir.Boom', boom),
                    ct:log("~s~n~s", [Erlang, Elixir]),
                    ?assertNotEqual(nomatch, string:find(Erlang, "exception exit: boom")),
                    ?assertNotEqual(nomatch, string:find(Elixir, "** (exit) :boom"))
            end).

%% The hint after another behaviour's result quotes the handler's source:
%% in an Elixir VM where Exception is loaded (anything formatted an
%% exception), an Erlang handler's `{noreply, S}' is still said in
%% Erlang's words (it was told `{:noreply, state}'), an Elixir handler's
%% in Elixir's; a handler named like an Elixir module in a VM without
%% Elixir gets Erlang's words and the line does not crash.
an_erlang_handlers_result_hint_is_in_erlangs_words_under_elixir(_Config) ->
    Reason = fun(Handler) -> {bad_return_value, {Handler, handle_data, {noreply, s}}} end,
    Text = fun(Node, Handler) -> crash_text(Node, Handler, Reason(Handler)) end,
    ErlangHint = "{noreply, State} is a gen_server's result: a sluice callback returns {ok, State}",
    ElixirHint = "{:noreply, state} is a GenServer's result: a sluice callback returns {:ok, state}",
    on_peer([elixir_ebin(), sluice_ebin()],
            fun(Peer) ->
                    {module, _} = peer:call(Peer, code, ensure_loaded, ['Elixir.Exception']),
                    Erlang = Text(Peer, an_erlang_handler),
                    Elixir = Text(Peer, 'Elixir.Boom'),
                    %% and the hint's own line (the crash report's log)
                    ErlangLine = hint_text(Peer, an_erlang_handler),
                    ElixirLine = hint_text(Peer, 'Elixir.Boom'),
                    ct:log("~s~n~s~n~s~n~s", [Erlang, Elixir, ErlangLine, ElixirLine]),
                    ?assertNotEqual(nomatch, string:find(Erlang, ErlangHint), Erlang),
                    ?assertNotEqual(nomatch, string:find(Elixir, ElixirHint), Elixir),
                    ?assertNotEqual(nomatch, string:find(ErlangLine, ErlangHint), ErlangLine),
                    ?assertNotEqual(nomatch, string:find(ElixirLine, ElixirHint), ElixirLine)
            end),
    on_peer([sluice_ebin()],
            fun(Bare) ->
                    Named = Text(Bare, 'Elixir.NotElixir'),
                    NamedLine = hint_text(Bare, 'Elixir.NotElixir'),
                    ct:log("~s~n~s", [Named, NamedLine]),
                    ?assertNotEqual(nomatch, string:find(Named, ErlangHint), Named),
                    ?assertNotEqual(nomatch, string:find(NamedLine, ErlangHint), NamedLine)
            end).

%% Fun(Peer) on a fresh node (OTP peer, over its standard I/O) with the
%% directories Paths in front of its code path; the node stopped after.
on_peer(Paths, Fun) ->
    {ok, Peer, _} = peer:start_link(#{connection => standard_io,
                                      args => lists:append([["-pa", P] || P <- Paths])}),
    try Fun(Peer)
    after peer:stop(Peer)
    end.

%% sluice_log:format_crash/1's text on the node Peer for an exit with
%% Reason from a connection of Handler.
crash_text(Peer, Handler, Reason) ->
    {Format, Args} = peer:call(Peer, sluice_log, format_crash,
                               [#{listener => boom, handler => Handler,
                                  peer => {ok, {{127, 0, 0, 1}, 4000}}, class => exit,
                                  reason => Reason, stacktrace => []}]),
    lists:flatten(io_lib:format(Format, Args)).

%% sluice_log:format_hint/1's text on the node Peer for a `{noreply, s}'
%% from Handler's handle_data/2.
hint_text(Peer, Handler) ->
    {Format, Args} = peer:call(Peer, sluice_log, format_hint,
                               [#{listener => boom, handler => Handler, callback => handle_data,
                                  result => {noreply, s}}]),
    lists:flatten(io_lib:format(Format, Args)).

sluice_ebin() ->
    filename:dirname(code:which(sluice_log)).

elixir_ebin() ->
    Ebin = case os:find_executable("elixir") of
               false -> ct:fail("no elixir: make deps installs it");
               Exe -> filename:join([filename:dirname(filename:dirname(resolved(Exe))),
                                     "lib", "elixir", "ebin"])
           end,
    true = filelib:is_dir(Ebin),
    Ebin.

resolved(File) ->
    case file:read_link_all(File) of
        {ok, Target} -> resolved(filename:absname(Target, filename:dirname(File)));
        {error, _} -> File
    end.

%% A gen_server's result from a handler crashes the connection as any
%% result that is not one (`bad_return_value', unchanged), and the
%% [sluice] crash line says what sluice takes in its place, in Erlang's
%% words for an Erlang handler ("bad return value" alone did not).
another_behaviours_result_is_said_with_sluices(Config) ->
    Name = ?config(name, Config),
    Domain = fun logger_filters:domain/2,
    ok = sluice_log_forwarder:start(elixir_logger, self(),
                                    #{filters => [{sasl, {Domain, {stop, sub, [otp, sasl]}}}],
                                      filter_default => log}),
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, #{test_pid => self()}}}),
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, sluice_test_lib:port(Name),
                                 [binary, {active, false}]),
    ok = gen_tcp:send(Sock, <<"noreply">>),
    Pid = receive {?MODULE, P, _} -> P after 5000 -> error(no_data) end,
    Line = receive {log, elixir_logger, error, Tx, #{pid := Pid}} -> Tx
           after 5000 -> ct:fail(no_crash_line)
           end,
    ct:log("~s", [Line]),
    [?assertNotEqual(nomatch, string:find(Line, Part), Part)
     || Part <- ["bad_return_value", "{noreply, State} is a gen_server's result: a sluice "
                 "callback returns {ok, State}"]],
    ?assertEqual({error, closed}, gen_tcp:recv(Sock, 0, 5000)),
    ok = sluice_test_lib:wait_info(Name, closed, 1, 5000),
    ?assertMatch(#{close_reasons := #{crashed := 1}}, sluice:info(Name)).

%% The hint after another behaviour's result was only in sluice's
%% [sluice] line, which OTP's default handler drops: an Erlang node's
%% log (plain `erl', a release) had the crash report alone, "bad return
%% value" and no word of what to return. It now has the hint once, in a
%% line of its own just before the crash report (in the crash report's
%% domain, [otp, sasl]), and not a second copy of the crash; a log filtering as Elixir's Logger does
%% still has one event of the crash, sluice's, with the hint once. From
%% handle_data/2 (a thousand_island and a gen_server result) and from
%% init/2, which goes the same way.
a_bad_results_hint_is_in_an_erlang_nodes_log_once(Config) ->
    Name = ?config(name, Config),
    Domain = fun logger_filters:domain/2,
    %% OTP's default handler's filters (kernel's, as `erl' and a release
    %% install it) and Elixir's Logger's (handle_sasl_reports: false)
    ok = sluice_log_forwarder:start(otp_default, self(),
                                    #{filters => [{domain, {Domain, {log, super, [otp, sasl]}}},
                                                  {no_domain, {Domain, {log, undefined, []}}}],
                                      filter_default => stop}),
    ok = sluice_log_forwarder:start(elixir_logger, self(),
                                    #{filters => [{sasl, {Domain, {stop, sub, [otp, sasl]}}}],
                                      filter_default => log}),
    Close = "{close, State} is a thousand_island handler's result: here {close, Reason, State}, "
            "e.g. {close, normal, State}",
    NoReply = "{noreply, State} is a gen_server's result: a sluice callback returns {ok, State}",
    Opts = #{test_pid => self()},
    sluice_test_lib:start_listener(Name, #{handler => {?MODULE, Opts}}),
    sluice_test_lib:start_listener({Name, init}, #{handler => {?MODULE, Opts#{init_result =>
                                                                                   noreply}}}),
    [begin
         {OtpLog, ElixirLog} = crash_logs(L, Data),
         ct:log("~p ~s:~n~p~n~p", [L, Data, OtpLog, ElixirLog]),
         %% Erlang's log: the hint once, then the crash report, once
         ?assertEqual(1, count(Hint, OtpLog), OtpLog),
         ?assertMatch([{_, #{domain := [otp, sasl]}}, {_, #{domain := [otp, sasl]}}], OtpLog),
         [{HintLine, _}, {Report, _}] = OtpLog,
         ?assertEqual(nomatch, string:find(HintLine, "bad_return_value"), HintLine),
         ?assertNotEqual(nomatch, string:find(Report, "bad_return_value"), Report),
         ?assertNotEqual(nomatch, string:find(HintLine, Cb), HintLine),
         %% Elixir's: sluice's line alone, with the hint once
         ?assertMatch([{_, #{domain := [sluice]}}], ElixirLog),
         ?assertEqual(1, count(Hint, ElixirLog), ElixirLog)
     end || {L, Data, Hint, Cb} <- [{Name, <<"close">>, Close, "handle_data/2"},
                                    {Name, <<"noreply">>, NoReply, "handle_data/2"},
                                    {{Name, init}, none, NoReply, "init/2"}]],
    ok = sluice_test_lib:wait_info(Name, closed, 2, 5000),
    ?assertMatch(#{close_reasons := #{crashed := 2}}, sluice:info(Name)).

%% The events each forwarder got from the connection that crashed after
%% Data (none: in init/2), as [{Text, Meta}], OTP's and Elixir's. The
%% crash report is the last event the connection's process logs (proc_lib
%% logs it as it exits), and its events come in order: once it is here,
%% so is every other, and nothing is waited for.
crash_logs(L, Data) ->
    {ok, Sock} = gen_tcp:connect({127, 0, 0, 1}, sluice_test_lib:port(L),
                                 [binary, {active, false}]),
    _ = Data =:= none orelse gen_tcp:send(Sock, Data),
    Pid = receive {?MODULE, P, _} -> P after 5000 -> error({no_connection, L, Data}) end,
    Otp = otp_log(Pid, []),
    Elixir = flush_log(elixir_logger, Pid),
    ?assertEqual({error, closed}, gen_tcp:recv(Sock, 0, 5000)),
    ok = gen_tcp:close(Sock),
    {Otp, Elixir}.

otp_log(Pid, Acc) ->
    receive
        {log, otp_default, _, Text, Meta = #{pid := Pid}} ->
            case Meta of
                #{error_logger := #{type := crash_report}} -> lists:reverse(Acc, [{Text, Meta}]);
                _ -> otp_log(Pid, [{Text, Meta} | Acc])
            end
    after 5000 ->
        ct:fail({no_crash_report, Pid, lists:reverse(Acc)})
    end.

flush_log(Id, Pid) ->
    receive {log, Id, _, Text, Meta = #{pid := Pid}} -> [{Text, Meta} | flush_log(Id, Pid)]
    after 0 -> []
    end.

count(Part, Log) ->
    lists:sum([length(string:split(Text, Part, all)) - 1 || {Text, _} <- Log]).
