%% STARTTLS: a handler's `{starttls, Reply, State}' on an `inet' listener
%% with `tls_opts' sends Reply in plaintext, then upgrades the connection
%% to TLS on the same socket (sluice_conn_starttls), in every delivery
%% mode; the handler gets the TLS facts (handle_starttls/2); plaintext the
%% client sent after STARTTLS and before the handshake (the STARTTLS
%% command injection of CVE-2011-0411) never reaches the handler: in the
%% same write, as a partial line, or already in the connection's mailbox
%% under a running grant; a client that never handshakes, or sends
%% garbage, ends as `handshake_error' with terminate/2, and a drain
%% closes one still waiting for its ClientHello at its deadline; on a Unix
%% socket it upgrades as over TCP, and with the tls_opts of the last
%% sluice:set_transport_opts/2; after the upgrade
%% the connection drains over TLS, does not park as a plain socket,
%% takes sluice:send/2 from elsewhere, and counts plaintext; a PROXY
%% header may come first. Where no upgrade can happen (`socket', `ssl',
%% no `tls_opts') it is said at start or by a crash naming why.
%%
%% The handler is sluice_starttls_handler (a small SMTP-like line
%% protocol).
-module(sluice_starttls_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([plain_then_starttls_then_tls/1,
         pipelined_in_the_same_write_is_refused/1,
         partial_line_after_starttls_is_refused/1,
         plaintext_in_the_mailbox_is_refused/1,
         plaintext_written_before_the_reply_never_reaches_the_handler/1,
         half_close_after_starttls_gets_the_replies_owed/1,
         silent_client_is_closed_at_handshake_timeout/1,
         garbage_instead_of_client_hello_is_a_handshake_error/1,
         client_certificate_reaches_the_handler/1,
         starttls_from_init/1,
         proxy_header_then_plain_then_starttls/1,
         drain_of_an_upgraded_connection_is_graceful/1,
         drain_closes_a_connection_waiting_for_its_client_hello/1,
         drain_during_the_wait_reaches_the_handler_after_the_upgrade/1,
         starttls_while_draining_is_closed_at_the_drains_deadline/1,
         starttls_over_a_unix_socket/1,
         upgrade_after_set_transport_opts_uses_the_new_tls_opts/1,
         upgraded_connection_does_not_park/1,
         upgraded_connection_told_to_park_hibernates/1,
         send_from_another_process_goes_over_tls/1,
         own_send_before_starttls_goes_over_tls/1,
         tls_opts_on_inet_are_checked_at_start/1,
         tls_opts_on_socket_are_refused/1,
         starttls_without_tls_opts_crashes/1,
         starttls_on_an_ssl_listener_crashes/1,
         a_users_transport_says_whether_it_runs_tls/1]).

-define(LOOPBACK, {127, 0, 0, 1}).
-define(FRAMING, {line, #{delimiter => crlf}}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, modes}, {group, injection}, {group, handshake}, {group, after_upgrade},
     {group, other_features}, {group, unavailable}].

groups() ->
    [{modes, [], [{group, G} || G <- [active_once, active_10, active_adaptive, active_false]]},
     {active_once, [], [plain_then_starttls_then_tls]},
     {active_10, [], [plain_then_starttls_then_tls, plaintext_in_the_mailbox_is_refused]},
     {active_adaptive, [], [plain_then_starttls_then_tls]},
     {active_false, [], [plain_then_starttls_then_tls]},
     {injection, [], [pipelined_in_the_same_write_is_refused,
                      partial_line_after_starttls_is_refused,
                      plaintext_in_the_mailbox_is_refused,
                      plaintext_written_before_the_reply_never_reaches_the_handler,
                      half_close_after_starttls_gets_the_replies_owed]},
     {handshake, [], [silent_client_is_closed_at_handshake_timeout,
                      garbage_instead_of_client_hello_is_a_handshake_error,
                      client_certificate_reaches_the_handler,
                      starttls_from_init,
                      proxy_header_then_plain_then_starttls]},
     {after_upgrade, [], [drain_of_an_upgraded_connection_is_graceful,
                          drain_closes_a_connection_waiting_for_its_client_hello,
                          drain_during_the_wait_reaches_the_handler_after_the_upgrade,
                          starttls_while_draining_is_closed_at_the_drains_deadline,
                          upgraded_connection_does_not_park,
                          upgraded_connection_told_to_park_hibernates,
                          send_from_another_process_goes_over_tls,
                          own_send_before_starttls_goes_over_tls]},
     {other_features, [], [starttls_over_a_unix_socket,
                           upgrade_after_set_transport_opts_uses_the_new_tls_opts]},
     {unavailable, [], [tls_opts_on_inet_are_checked_at_start,
                        tls_opts_on_socket_are_refused,
                        starttls_without_tls_opts_crashes,
                        starttls_on_an_ssl_listener_crashes,
                        a_users_transport_says_whether_it_runs_tls]}].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(active_once, Config) -> [{active, once} | Config];
init_per_group(active_10, Config) -> [{active, 10} | Config];
init_per_group(active_adaptive, Config) -> [{active, adaptive} | Config];
init_per_group(active_false, Config) -> [{active, false} | Config];
init_per_group(_, Config) -> Config.

end_per_group(_, _Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case, proplists:get_value(active, Config)}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% An inet listener with the suite's certificate in tls_opts and the line
%% handler; Extra overrides (handler options under `hopts').
listener(Config, Extra) ->
    Name = ?config(name, Config),
    HOpts = maps:merge(#{test => self()}, maps:get(hopts, Extra, #{})),
    Active = case ?config(active, Config) of undefined -> adaptive; A -> A end,
    Opts = maps:merge(#{transport => inet, tls_opts => sluice_tls_test_lib:server_opts(Config),
                        handler => {sluice_starttls_handler, HOpts}, framing => ?FRAMING,
                        active => Active},
                      maps:without([hopts], Extra)),
    sluice_test_lib:start_listener(Name, Opts),
    sluice_test_lib:port(Name).

%% A plain TCP client that has read the greeting; the connection's pid.
plain_client(Port) ->
    {ok, C} = sluice_test_lib:connect(Port),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ?assertEqual({ok, <<"220 ready\r\n">>}, recv_line(C)),
    {C, Pid}.

recv_line(C) ->
    ok = inet:setopts(C, [{packet, line}]),
    Line = gen_tcp:recv(C, 0, 5000),
    ok = inet:setopts(C, [{packet, raw}]),
    Line.

%% One command over TLS, its reply line.
tls_command(S, Cmd) ->
    ok = ssl:send(S, [Cmd, <<"\r\n">>]),
    ok = ssl:setopts(S, [{packet, line}]),
    Reply = ssl:recv(S, 0, 5000),
    ok = ssl:setopts(S, [{packet, raw}]),
    Reply.

%% STARTTLS on a plain client, up to a TLS client (Extra: client options).
starttls(Config, C, Extra) ->
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    handshake(Config, C, Extra).

handshake(Config, C, Extra) ->
    Defaults = sluice_tls_test_lib:client_opts(Config),
    ssl:connect(C, [binary, {active, false} |
                    Extra ++ [O || O = {K, _} <- Defaults, not lists:keymember(K, 1, Extra)]],
                5000).

reason_count(Name, Reason) ->
    maps:get(Reason, maps:get(close_reasons, sluice:info(Name))).

%% A crash is counted by the connection's supervisor, when it takes the
%% exit: after terminate/2 has told the test.
crashed_once(Name) ->
    sluice_test_lib:wait_until(fun() -> reason_count(Name, crashed) =:= 1 end, 5000).

terminated(Pid) ->
    receive {terminate, Pid, Reason} -> Reason after 5000 -> error({no_terminate, Pid}) end.

%% Every line the handler was handed, in order, with whether it came
%% over TLS.
lines(Pid) ->
    receive {line, Pid, Line, Tls} -> [{Line, Tls} | lines(Pid)] after 0 -> [] end.

expect_closed(C) ->
    ?assertMatch({error, _}, gen_tcp:recv(C, 0, 5000)).

%%% ------------------------------------------------------------------
%%% The main case, in each mode
%%% ------------------------------------------------------------------

%% A plain command, STARTTLS, then commands over TLS: the handler sees
%% each in order, the plain ones as plain, the TLS facts once, and the
%% counters count plaintext on both sides of the upgrade.
plain_then_starttls_then_tls(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"EHLO me\r\n">>),
    ?assertEqual({ok, <<"250 EHLO me\r\n">>}, recv_line(C)),
    {ok, S} = starttls(Config, C, [{alpn_advertised_protocols, [<<"smtp">>]}]),
    Tls = receive {starttls, Pid, T} -> T after 5000 -> error(no_starttls) end,
    ct:log("~p", [Tls]),
    ?assertMatch(#{protocol := _, cipher := _, sni := _, alpn := _, peer_cert := undefined},
                 Tls),
    ?assert(is_atom(maps:get(protocol, Tls))),
    [?assertEqual({ok, <<"250 line ", (integer_to_binary(I))/binary, "\r\n">>},
                  tls_command(S, [<<"line ">>, integer_to_binary(I)])) || I <- lists:seq(1, 20)],
    {ok, <<"TLS ", _/binary>>} = tls_command(S, <<"TLS?">>),
    ?assertEqual({ok, <<"221 bye\r\n">>}, tls_command(S, <<"QUIT">>)),
    ?assertEqual(quit, terminated(Pid)),
    Lines = lines(Pid),
    ?assertEqual([{<<"EHLO me">>, false}, {<<"STARTTLS">>, false}],
                 lists:sublist(Lines, 2)),
    ?assertEqual(24, length(Lines)),
    ?assert(lists:all(fun({_, Tls1}) -> Tls1 end, lists:nthtail(2, Lines))),
    _ = ssl:close(S),
    sluice_test_lib:wait_info(Name, connections, 0, 5000),
    #{bytes_in := In, bytes_out := Out} = sluice:info(Name),
    %% plaintext both ways: 9 + 10 in the clear, then the lines
    PlainIn = 9 + 10 + lists:sum([byte_size(<<"line ", (integer_to_binary(I))/binary, "\r\n">>)
                                  || I <- lists:seq(1, 20)]) + 6 + 6,
    ?assertEqual(PlainIn, In),
    ?assert(Out > 11 + 13 + 14),
    ok = sluice_test_lib:wait_reason(Name, handler, 1).

%%% ------------------------------------------------------------------
%%% Injection: plaintext after STARTTLS never reaches the handler
%%% ------------------------------------------------------------------

%% CVE-2011-0411's test: the command after STARTTLS in the same write.
%% Closed as a protocol error, without the "go ahead", and the handler
%% never sees the injected line, before or after a handshake.
pipelined_in_the_same_write_is_refused(Config) ->
    refused(Config, <<"STARTTLS\r\nMAIL FROM:<evil>\r\n">>).

%% The start of a line after STARTTLS, held by the framer.
partial_line_after_starttls_is_refused(Config) ->
    refused(Config, <<"STARTTLS\r\nMAIL FR">>).

refused(Config, Bytes) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"EHLO me\r\n", Bytes/binary>>),
    %% the reply owed to EHLO, then the close: no "220 go ahead"
    ?assertEqual({ok, <<"250 EHLO me\r\n">>}, recv_line(C)),
    expect_closed(C),
    ?assertEqual({protocol_error, starttls_pipelined}, terminated(Pid)),
    ?assertEqual([{<<"EHLO me">>, false}, {<<"STARTTLS">>, false}], lines(Pid)),
    ok = sluice_test_lib:wait_reason(Name, protocol_error, 1).

%% A command written after STARTTLS, before the reply: held until it is
%% in the connection's mailbox under the running grant (the handler waits
%% in its STARTTLS clause meanwhile), then refused in the same way.
plaintext_in_the_mailbox_is_refused(Config) ->
    Name = ?config(name, Config),
    Active = case ?config(active, Config) of undefined -> 10; A -> A end,
    Port = listener([{active, Active} | Config], #{hopts => #{hold => true}}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    receive {holding, Pid} -> ok after 5000 -> error(no_hold) end,
    ok = gen_tcp:send(C, <<"RCPT TO:<evil>\r\n">>),
    sluice_test_lib:wait_until(
      fun() ->
              {messages, Msgs} = process_info(Pid, messages),
              lists:any(fun(M) -> element(1, M) =:= tcp end, Msgs)
      end, 5000),
    Pid ! proceed,
    expect_closed(C),
    ?assertEqual({protocol_error, starttls_pipelined}, terminated(Pid)),
    ?assertEqual([{<<"STARTTLS">>, false}], lines(Pid)),
    ok = sluice_test_lib:wait_reason(Name, protocol_error, 1).

%% A command written after STARTTLS in its own write, before the client
%% reads the reply, with no hold: wherever it lands (the mailbox, or the
%% socket where ssl reads it as the start of the TLS stream) it is never
%% a line of the handler's, and the connection ends as a protocol error
%% or a failed handshake.
plaintext_written_before_the_reply_never_reaches_the_handler(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ok = gen_tcp:send(C, <<"RCPT TO:<evil>\r\n">>),
    _ = gen_tcp:recv(C, 0, 5000),
    expect_closed(C),
    Reason = terminated(Pid),
    ct:log("ended as ~p", [Reason]),
    ?assertMatch({R, _} when R =:= protocol_error; R =:= handshake_error, Reason),
    ?assertEqual([{<<"STARTTLS">>, false}], lines(Pid)),
    ok = sluice_test_lib:wait_until(
           fun() -> reason_count(Name, protocol_error) + reason_count(Name, handshake_error) =:= 1 end,
           5000).

%% A client that sends EHLO and STARTTLS in one write, then closes its
%% side, gets the reply owed to EHLO (not the "go ahead") before the
%% close, as it would without STARTTLS; its FIN already in the mailbox
%% when the upgrade starts, the reply was lost.
half_close_after_starttls_gets_the_replies_owed(Config) ->
    Name = ?config(name, Config),
    Port = listener([{active, 10} | Config], #{hopts => #{hold => true}}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"EHLO me\r\nSTARTTLS\r\n">>),
    receive {holding, Pid} -> ok after 5000 -> error(no_hold) end,
    ok = gen_tcp:shutdown(C, write),
    sluice_test_lib:wait_until(
      fun() ->
              {messages, Msgs} = process_info(Pid, messages),
              lists:any(fun(M) -> element(1, M) =:= tcp_closed end, Msgs)
      end, 5000),
    Pid ! proceed,
    ?assertEqual({ok, <<"250 EHLO me\r\n">>}, recv_line(C)),
    expect_closed(C),
    ?assertEqual(closed, terminated(Pid)),
    ok = sluice_test_lib:wait_reason(Name, peer_closed, 1).

%%% ------------------------------------------------------------------
%%% The handshake
%%% ------------------------------------------------------------------

%% The client reads "go ahead" and never starts its handshake: closed at
%% handshake_timeout as handshake_error, with terminate/2.
silent_client_is_closed_at_handshake_timeout(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{handshake_timeout => 300}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    expect_closed(C),
    ?assertEqual({handshake_error, timeout}, terminated(Pid)),
    ok = sluice_test_lib:wait_reason(Name, handshake_error, 1).

%% Plaintext where the ClientHello should be: handshake_error at once
%% (well before the timeout), never a line of the handler's.
garbage_instead_of_client_hello_is_a_handshake_error(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{handshake_timeout => 30000}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    ok = gen_tcp:send(C, <<"MAIL FROM:<evil>\r\n">>),
    _ = gen_tcp:recv(C, 0, 5000),
    expect_closed(C),
    ?assertMatch({handshake_error, _}, terminated(Pid)),
    ?assertEqual([{<<"STARTTLS">>, false}], lines(Pid)),
    ok = sluice_test_lib:wait_reason(Name, handshake_error, 1).

%% verify_peer: the client's certificate is in the TLS facts.
client_certificate_reaches_the_handler(Config) ->
    #{client := ClientCfg, server := ServerCfg} = ?config(certs, Config),
    TlsOpts = [{verify, verify_peer}, {fail_if_no_peer_cert, true},
               {cacerts, proplists:get_value(cacerts, ServerCfg) ++
                    proplists:get_value(cacerts, ClientCfg)}
               | [O || O = {K, _} <- ServerCfg, K =/= cacerts]],
    Port = listener(Config, #{tls_opts => TlsOpts}),
    {C, Pid} = plain_client(Port),
    {ok, S} = starttls(Config, C, [{cert, proplists:get_value(cert, ClientCfg)},
                                   {key, proplists:get_value(key, ClientCfg)}]),
    #{peer_cert := Der} = receive {starttls, Pid, T} -> T after 5000 -> error(no_starttls) end,
    ?assertEqual(proplists:get_value(cert, ClientCfg), Der),
    ?assertEqual({ok, <<"CERT\r\n">>}, tls_command(S, <<"PEER?">>)),
    _ = ssl:close(S).

%% init/2 may upgrade at once, after a plain greeting.
starttls_from_init(Config) ->
    Port = listener(Config, #{hopts => #{init_starttls => true}}),
    {ok, C} = sluice_test_lib:connect(Port),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ?assertEqual({ok, <<"220 tls now\r\n">>}, recv_line(C)),
    {ok, S} = handshake(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    {ok, <<"TLS ", _/binary>>} = tls_command(S, <<"TLS?">>),
    _ = ssl:close(S).

%% A PROXY header, a plain exchange, then STARTTLS: the header's
%% addresses stay in Conn, and the upgrade works as without it.
proxy_header_then_plain_then_starttls(Config) ->
    Port = listener(Config, #{proxy_protocol => true}),
    {ok, C} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(C, <<"PROXY TCP4 192.0.2.1 192.0.2.2 1234 25\r\nEHLO me\r\n">>),
    {Pid, Conn} = receive {init, P, Cn} -> {P, Cn} after 5000 -> error(no_init) end,
    ?assertMatch(#{proxy := #{source := {{192, 0, 2, 1}, 1234}}}, Conn),
    ?assertEqual({ok, <<"220 ready\r\n">>}, recv_line(C)),
    ?assertEqual({ok, <<"250 EHLO me\r\n">>}, recv_line(C)),
    {ok, S} = starttls(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    ?assertEqual({ok, <<"250 hello\r\n">>}, tls_command(S, <<"hello">>)),
    _ = ssl:close(S).

%%% ------------------------------------------------------------------
%%% After the upgrade
%%% ------------------------------------------------------------------

%% A drain closes an upgraded connection as an ssl listener's: gracefully
%% (what the client sent is answered), counted as drained.
drain_of_an_upgraded_connection_is_graceful(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{}),
    {C, Pid} = plain_client(Port),
    {ok, S} = starttls(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    ?assertEqual({ok, <<"250 one\r\n">>}, tls_command(S, <<"one">>)),
    Self = self(),
    spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 3000)} end),
    ?assertEqual({<<>>, closed}, sluice_tls_test_lib:recv_until_closed(S, 3000)),
    _ = ssl:close(S),
    receive {drained, R} -> ?assertEqual({ok, 0}, R) after 5000 -> error(drain_stuck) end,
    ?assertEqual(drained, terminated(Pid)),
    ok = sluice_test_lib:wait_reason(Name, drained, 1).

%% A drain while the connection waits for the client's ClientHello after
%% "go ahead" (its handler started: no gate of the connection supervisor
%% covers it): closed at the drain's deadline as `drained', with
%% terminate/2, however long handshake_timeout is, and counted among
%% those open at the deadline as a handler that carries on is (drain/2
%% counted it or not as the deadline's timer raced its count).
drain_closes_a_connection_waiting_for_its_client_hello(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{handshake_timeout => infinity}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    ?assertEqual({ok, 1}, sluice:drain(Name, 200)),
    ?assertEqual(drained, terminated(Pid)),
    expect_closed(C),
    ok = sluice_test_lib:wait_reason(Name, drained, 1).

%% A drain that comes while the connection waits for the ClientHello, and
%% a client that handshakes before its deadline: the handler is told of
%% the drain once on TLS (without handle_drain/1, it closes `drained'
%% gracefully, over TLS).
drain_during_the_wait_reaches_the_handler_after_the_upgrade(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{handshake_timeout => infinity}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    erlang:trace(Pid, true, ['receive']),
    Self = self(),
    spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 10000)} end),
    receive {trace, Pid, 'receive', {sluice_drain, _}} -> ok
    after 5000 -> error(drain_not_sent)
    end,
    {ok, S} = handshake(Config, C, []),
    ?assertEqual({<<>>, closed}, sluice_tls_test_lib:recv_until_closed(S, 5000)),
    _ = ssl:close(S),
    receive {drained, R} -> ?assertEqual({ok, 0}, R) after 5000 -> error(drain_stuck) end,
    ?assertEqual(drained, terminated(Pid)),
    ok = sluice_test_lib:wait_reason(Name, drained, 1).

%% A handler that carried on through a drain, then asked for STARTTLS:
%% a client that never sends its ClientHello is closed at the drain's
%% deadline all the same (its timer's message waits behind the wait).
starttls_while_draining_is_closed_at_the_drains_deadline(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{handshake_timeout => infinity, hopts => #{carry_on => true}}),
    {C, Pid} = plain_client(Port),
    Self = self(),
    spawn_link(fun() -> Self ! {drained, sluice:drain(Name, 500)} end),
    receive {drain, Pid} -> ok after 5000 -> error(no_drain) end,
    ok = gen_tcp:send(C, <<"STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    ?assertEqual(drained, terminated(Pid)),
    expect_closed(C),
    receive {drained, {ok, _}} -> ok after 5000 -> error(drain_stuck) end,
    ok = sluice_test_lib:wait_reason(Name, drained, 1).

%%% ------------------------------------------------------------------
%%% With the other features of a listener
%%% ------------------------------------------------------------------

%% An `inet' listener on a Unix socket upgrades as over TCP (ssl runs
%% over the driver's Unix socket; the accepted socket's options that
%% handshake/2 sets again, keepalive here, are kept).
starttls_over_a_unix_socket(Config) ->
    %% not under priv_dir: the path must fit sun_path (107 bytes)
    Path = "/tmp/sluice-starttls-" ++ os:getpid() ++ ".sock",
    listener(Config, #{ip => {local, Path}, socket_opts => [{keepalive, true}]}),
    {ok, C} = gen_tcp:connect({local, Path}, 0, [binary, {active, false}], 5000),
    {Pid, Conn} = receive {init, P, Cn} -> {P, Cn} after 5000 -> error(no_init) end,
    ?assertEqual({ok, <<"220 ready\r\n">>}, recv_line(C)),
    {ok, S} = starttls(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    {ok, <<"TLS ", _/binary>>} = tls_command(S, <<"TLS?">>),
    ?assertEqual({ok, {local, <<>>}}, sluice:peername(Conn)),
    ?assertEqual({ok, [{keepalive, true}]}, sluice:getopts(Conn, [keepalive])),
    ?assertEqual({ok, <<"221 bye\r\n">>}, tls_command(S, <<"QUIT">>)),
    ?assertEqual(quit, terminated(Pid)),
    %% the listener's stop (end_per_testcase) removes the file
    _ = ssl:close(S).

%% sluice:set_transport_opts/2 on an `inet' listener: a connection
%% accepted before the call that upgrades after it uses the new tls_opts
%% (docs/listener-options.md: "on inet: upgraded after the call"), seen
%% here by the ALPN protocol each set prefers.
upgrade_after_set_transport_opts_uses_the_new_tls_opts(Config) ->
    Name = ?config(name, Config),
    Base = sluice_tls_test_lib:server_opts(Config),
    Port = listener(Config, #{tls_opts => [{alpn_preferred_protocols, [<<"old">>]} | Base]}),
    {C, Pid} = plain_client(Port),
    ok = sluice:set_transport_opts(Name, #{tls_opts => [{alpn_preferred_protocols, [<<"new">>]}
                                                        | Base]}),
    {ok, S} = starttls(Config, C, [{alpn_advertised_protocols, [<<"old">>, <<"new">>]}]),
    Tls = receive {starttls, Pid, T} -> T after 5000 -> error(no_starttls) end,
    ?assertEqual(<<"new">>, maps:get(alpn, Tls)),
    _ = ssl:close(S).

%% A listener that parks its quiet connections: a plain one parks (its
%% pid changes), an upgraded one is told to park and stays, and carries
%% on over TLS (parked as a plain socket, its supervisor crashed).
upgraded_connection_does_not_park(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{park_after => 50, hibernate_after => 20}),
    {C, Pid} = plain_client(Port),
    {ok, S} = starttls(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    erlang:trace(Pid, true, ['receive']),
    receive {trace, Pid, 'receive', {sluice_sweep, park}} -> ok
    after 5000 -> error(never_told_to_park)
    end,
    ?assertEqual({ok, <<"250 still here\r\n">>}, tls_command(S, <<"still here">>)),
    ?assert(is_process_alive(Pid)),
    ?assertEqual(0, maps:get(parked, sluice:info(Name))),
    [{<<"still here">>, true}] = [L || L = {<<"still here">>, _} <- lines(Pid)],
    _ = ssl:close(S).

%% Told to park, an upgraded connection hibernates in its place, and is
%% not told again until something wakes it: reported awake, it was told
%% at every tick and, with park_after shorter than hibernate_after, never
%% hibernated at all. Hibernated so, it still answers, and is still
%% closed at its idle timeout. (Asked every 100 ms, more than the sweep's
%% tick: process_info/2 is a signal the process handles, which the sweep
%% takes for activity until it has told the connection to park.)
upgraded_connection_told_to_park_hibernates(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, #{park_after => 50, hibernate_after => 60000,
                              idle_timeout => 4000}),
    {C, Pid} = plain_client(Port),
    {ok, S} = starttls(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    hibernated(Pid),
    ?assertEqual({ok, <<"250 awake\r\n">>}, tls_command(S, <<"awake">>)),
    hibernated(Pid),
    ?assertEqual({<<>>, closed}, sluice_tls_test_lib:recv_until_closed(S, 10000)),
    ?assertEqual(idle_timeout, terminated(Pid)),
    ?assertEqual(0, maps:get(parked, sluice:info(Name))),
    ok = sluice_test_lib:wait_reason(Name, idle_timeout, 1),
    _ = ssl:close(S).

hibernated(Pid) ->
    sluice_test_lib:wait_until(
      fun() ->
              process_info(Pid, current_function) =:= {current_function, {erlang, hibernate, 3}}
      end, 3000, 100).

%% sluice:send/2 from another process goes out over TLS.
send_from_another_process_goes_over_tls(Config) ->
    Port = listener(Config, #{}),
    {C, Pid} = plain_client(Port),
    {ok, S} = starttls(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    ?assertEqual(ok, sluice:send(Pid, <<"pushed\r\n">>)),
    ?assertEqual({ok, <<"pushed\r\n">>}, ssl:recv(S, 8, 5000)),
    _ = ssl:close(S).

%% The handler's own sluice:send/2 in the callback that returns starttls
%% goes out after the reply, as after any callback's: that is after the
%% upgrade, over TLS (docs/handler.md says so: what must go out in
%% plaintext belongs in the reply).
own_send_before_starttls_goes_over_tls(Config) ->
    Port = listener(Config, #{}),
    {C, Pid} = plain_client(Port),
    ok = gen_tcp:send(C, <<"SEND STARTTLS\r\n">>),
    ?assertEqual({ok, <<"220 go ahead\r\n">>}, recv_line(C)),
    {ok, S} = handshake(Config, C, []),
    receive {starttls, Pid, _} -> ok after 5000 -> error(no_starttls) end,
    ?assertEqual({ok, <<"250 sent\r\n">>}, ssl:recv(S, 10, 5000)),
    _ = ssl:close(S).

%%% ------------------------------------------------------------------
%%% Where no upgrade can happen
%%% ------------------------------------------------------------------

%% tls_opts on inet are checked at start as on ssl.
tls_opts_on_inet_are_checked_at_start(Config) ->
    ?assertMatch({error, {bad_option, tls_opts, {missing, _}}},
                 sluice:start_listener(?config(name, Config),
                                       #{port => 0, transport => inet,
                                         tls_opts => [{verify, verify_none}],
                                         handler => {sluice_starttls_handler, #{}}})),
    ?assertMatch({error, {bad_option, tls_opts, {certfile, "/no/such.pem", enoent}}},
                 sluice:start_listener(?config(name, Config),
                                       #{port => 0, transport => inet,
                                         tls_opts => [{certfile, "/no/such.pem"},
                                                      {keyfile, "/no/such.key"}],
                                         handler => {sluice_starttls_handler, #{}}})).

%% OTP's ssl cannot run over a `socket' socket: tls_opts there are refused,
%% with a message that says why.
tls_opts_on_socket_are_refused(Config) ->
    {error, Error} = sluice:start_listener(?config(name, Config),
                                           #{port => 0, transport => socket,
                                             tls_opts => sluice_tls_test_lib:server_opts(Config),
                                             handler => {sluice_starttls_handler, #{}}}),
    ?assertEqual({bad_option, tls_opts, {transport, socket}}, Error),
    ?assertMatch("bad value for option tls_opts: {transport,socket} (tls_opts are for " ++ _,
                 sluice:format_error(Error)).

%% STARTTLS where the listener has no tls_opts (inet, socket): the
%% connection crashes with a reason that says why, after the replies
%% owed, without the "go ahead".
starttls_without_tls_opts_crashes(Config) ->
    lists:foreach(
      fun({Transport, Why}) ->
              Name = {?config(name, Config), Transport},
              sluice_test_lib:start_listener(Name, #{transport => Transport, framing => ?FRAMING,
                                                     handler => {sluice_starttls_handler,
                                                                 #{test => self()}}}),
              {C, Pid} = plain_client(sluice_test_lib:port(Name)),
              ok = gen_tcp:send(C, <<"EHLO me\r\nSTARTTLS\r\n">>),
              ?assertEqual({ok, <<"250 EHLO me\r\n">>}, recv_line(C)),
              expect_closed(C),
              ?assertEqual({starttls_unavailable, Why}, terminated(Pid)),
              crashed_once(Name),
              sluice_test_lib:stop_listener(Name)
      end, [{inet, no_tls_opts}, {socket, {transport, socket}}]).

%% On an ssl listener the connection is TLS already.
starttls_on_an_ssl_listener_crashes(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{transport => ssl, framing => ?FRAMING,
                                           tls_opts => sluice_tls_test_lib:server_opts(Config),
                                           handler => {sluice_starttls_handler,
                                                       #{test => self()}}}),
    {ok, S} = sluice_tls_test_lib:connect(sluice_test_lib:port(Name), Config),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ok = ssl:send(S, <<"STARTTLS\r\n">>),
    ?assertEqual({starttls_unavailable, already_tls}, terminated(Pid)),
    ?assertEqual({ok, <<"220 ready\r\n">>}, ssl:recv(S, 0, 5000)),
    ?assertMatch({error, _}, ssl:recv(S, 0, 5000)),
    crashed_once(Name).

%% Whether a transport runs TLS is its tls/0's to say, not its name's: the
%% faulty transport (inet's connection state) says `starttls' as inet
%% does, and its listener then has its tls_opts checked at start (a
%% missing file refused), may change them while it runs, and upgrades a
%% connection; made to say `none', its tls_opts are refused at start and
%% a STARTTLS crashes as on `socket'; made to say `handshake', tls_opts
%% are required.
a_users_transport_says_whether_it_runs_tls(Config) ->
    Name = ?config(name, Config),
    Opts = #{transport => sluice_faulty_transport, framing => ?FRAMING,
             handler => {sluice_starttls_handler, #{test => self()}}},
    Missing = [{certfile, "/no/such.pem"}, {keyfile, "/no/such.key"}],
    try
        ?assertEqual({error, {bad_option, tls_opts, {certfile, "/no/such.pem", enoent}}},
                     sluice:start_listener(Name, Opts#{tls_opts => Missing})),
        Base = sluice_tls_test_lib:server_opts(Config),
        sluice_test_lib:start_listener(Name, Opts#{tls_opts => [{alpn_preferred_protocols,
                                                                 [<<"old">>]} | Base]}),
        ok = sluice:set_transport_opts(Name, #{tls_opts => [{alpn_preferred_protocols,
                                                             [<<"new">>]} | Base]}),
        {C, Pid} = plain_client(sluice_test_lib:port(Name)),
        {ok, S} = starttls(Config, C, [{alpn_advertised_protocols, [<<"old">>, <<"new">>]}]),
        Tls = receive {starttls, Pid, T} -> T after 5000 -> error(no_starttls) end,
        ?assertEqual(<<"new">>, maps:get(alpn, Tls)),
        ?assertMatch({ok, <<"TLS ", _/binary>>}, tls_command(S, <<"TLS?">>)),
        _ = ssl:close(S),
        sluice_test_lib:stop_listener(Name),

        ok = sluice_faulty_transport:says_tls(none),
        ?assertEqual({error, {bad_option, tls_opts, {transport, sluice_faulty_transport}}},
                     sluice:start_listener(Name, Opts#{tls_opts => Base})),
        ?assertMatch("bad value for option tls_opts: " ++ _,
                     sluice:format_error({bad_option, tls_opts,
                                          {transport, sluice_faulty_transport}})),
        sluice_test_lib:start_listener(Name, Opts),
        {C2, Pid2} = plain_client(sluice_test_lib:port(Name)),
        ok = gen_tcp:send(C2, <<"STARTTLS\r\n">>),
        expect_closed(C2),
        ?assertEqual({starttls_unavailable, {transport, sluice_faulty_transport}},
                     terminated(Pid2)),
        sluice_test_lib:stop_listener(Name),

        ok = sluice_faulty_transport:says_tls(handshake),
        ?assertMatch({error, {bad_option, tls_opts, {missing, _}}},
                     sluice:start_listener(Name, Opts))
    after
        sluice_faulty_transport:disarm()
    end.
