%% TLS as a team moving a service from ranch_ssl uses it: a client that
%% half-closes (OTP 25's ssl has no half-close: what the handler sees and
%% what is counted), TLS 1.3 session tickets (refused at start: they
%% cannot work on an accepted socket), SNI (`sni_hosts', `sni_fun') and client certificates (`verify_peer' with
%% `fail_if_no_peer_cert').
%%
%% Certificates are made in memory (sluice_tls_test_lib:certs/0).
-module(sluice_tls_features_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([client_half_close_is_the_clients_close/1,
         session_tickets_are_refused_at_start/1,
         sni_hosts_and_sni_fun_choose_the_certificate/1,
         missing_client_certificate_is_a_handshake_error/1,
         renewed_certificate_files_are_served_after_clear_pem_cache/1,
         sni_hosts_files_are_checked_at_start/1,
         raising_sni_fun_is_a_handshake_error/1,
         tls_opts_slips_are_said_as_such/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [client_half_close_is_the_clients_close,
     session_tickets_are_refused_at_start,
     sni_hosts_and_sni_fun_choose_the_certificate,
     missing_client_certificate_is_a_handshake_error,
     renewed_certificate_files_are_served_after_clear_pem_cache,
     sni_hosts_files_are_checked_at_start,
     raising_sni_fun_is_a_handshake_error,
     tls_opts_slips_are_said_as_such].

init_per_suite(Config) ->
    sluice_tls_test_lib:init_per_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

%%% Helpers

listener(Config, Name, Handler, Extra) ->
    TlsOpts = maps:get(tls_extra, Extra, []) ++ sluice_tls_test_lib:server_opts(Config),
    Opts = maps:merge(#{transport => ssl, tls_opts => TlsOpts, handler => Handler},
                      maps:without([tls_extra], Extra)),
    sluice_test_lib:start_listener(Name, Opts),
    sluice_test_lib:port(Name).

reasons(Name) ->
    maps:filter(fun(_, N) -> N > 0 end, maps:get(close_reasons, sluice:info(Name))).

start(Config, TlsOpts) ->
    sluice:start_listener(?config(name, Config),
                          #{ip => {127, 0, 0, 1}, port => 0, transport => ssl,
                            tls_opts => TlsOpts ++ sluice_tls_test_lib:server_opts(Config),
                            handler => {sluice_proto_echo, []}}).

%% The client's close_notify, its side of the connection kept open for
%% reading: what OpenSSL's SSL_shutdown/1 does, and what ssl:shutdown(S,
%% write) does not (OTP 25's sends only the FIN). Test code: ssl's
%% internal sender, as sluice_transport_ssl:shutdown/2 uses it.
close_notify({sslsocket, _, [_Connection, Sender]}) ->
    tls_sender:send_and_ack_alert(Sender, {alert, 1, 0, undefined, client, undefined}).

%%% Cases

%% A client sends a request, then half-closes: with a close_notify, or
%% with only the FIN (ssl:shutdown(S, write)). On inet and socket it gets
%% every reply, then the FIN. OTP 25's ssl cannot answer it: a received
%% close_notify stops ssl's connection process (ssl_gen_statem:
%% handle_alert/3, TLS 1.3 included, which answers with its own and
%% closes), and so does the FIN (tls_gen_connection:handle_info/3), so a
%% reply that comes after fails. Whether the reply still made it depends
%% on that race (logged, not asserted). What is asserted is what does not
%% depend on it: the client sees the close, the handler sees the client's
%% close (handle_close/1, terminate(closed)), never handle_error/2, and
%% every connection is counted `peer_closed'. (It was `socket_error' and
%% handle_error({socket_error, closed}) whenever the reply lost the race:
%% nearly always with the FIN.)
client_half_close_is_the_clients_close(Config) ->
    Name = ?config(name, Config),
    Rounds = 8,
    Combos = [{V, A, H} || V <- ['tlsv1.2', 'tlsv1.3'], A <- [adaptive, once],
                           H <- [fin, close_notify]],
    lists:foreach(
      fun({Version, Active, How}) ->
              Port = listener(Config, Name, {sluice_api_handler, #{test => self()}},
                              #{active => Active}),
              Got = [half_close(Port, Config, Version, How) || _ <- lists:seq(1, Rounds)],
              ct:log("~p ~p ~p: the client got ~p", [Version, Active, How, lists:usort(Got)]),
              %% (the last one's reason is counted once its terminate/2 has returned)
              _ = catch sluice_test_lib:wait_reason(Name, peer_closed, Rounds),
              ?assertEqual({{Version, Active, How}, #{peer_closed => Rounds}},
                           {{Version, Active, How}, reasons(Name)}),
              sluice_test_lib:stop_listener(Name)
      end, Combos).

half_close(Port, Config, Version, How) ->
    {ok, S} = sluice_tls_test_lib:connect(Port, Config, [{versions, [Version]}]),
    Pid = receive {init, P, _} -> P after 5000 -> error(no_init) end,
    ok = ssl:send(S, <<"echo half">>),
    ok = case How of
             fin -> ssl:shutdown(S, write);
             close_notify -> close_notify(S)
         end,
    {Got, Closed} = sluice_tls_test_lib:recv_until_closed(S, 5000),
    ?assertEqual(closed, Closed),
    Seen = handler_end(Pid, []),
    ?assertEqual([peer_closed, {terminate, closed}], Seen, {Version, How}),
    _ = ssl:close(S),
    Got.

%% What the handler saw after its data, up to terminate/2.
handler_end(Pid, Acc) ->
    receive
        {data, Pid, _} -> handler_end(Pid, Acc);
        {peer_closed, Pid} -> handler_end(Pid, [peer_closed | Acc]);
        {error, Pid, Why} -> handler_end(Pid, [{handle_error, Why} | Acc]);
        {terminate, Pid, Why} -> lists:reverse([{terminate, Why} | Acc])
    after 5000 -> error({no_terminate, lists:reverse(Acc)})
    end.

%% `session_tickets' (TLS 1.3 resumption) cannot work on a connection
%% accepted as TCP and handed to ssl:handshake/3: ssl starts its ticket
%% store only in ssl:listen/2, and every TLS 1.3 handshake then crashed in
%% ssl as it issued the ticket (the client was told the handshake
%% succeeded, then closed; `crashed', three crash reports a connection).
%% The listener now refuses to start, naming the option; `disabled', ssl's
%% default, is accepted.
session_tickets_are_refused_at_start(Config) ->
    lists:foreach(
      fun(Mode) ->
              R = start(Config, [{session_tickets, Mode}]),
              ct:log("~p: ~p", [Mode, R]),
              ?assertMatch({error, {bad_option, tls_opts, {session_tickets, _}}}, R),
              {error, Error} = R,
              Line = sluice:format_error(Error),
              ct:log("  ~s", [Line]),
              ?assertNotEqual(nomatch, string:find(Line, "session_tickets"))
      end, [stateless, stateful]),
    ?assertMatch({ok, _}, start(Config, [{session_tickets, disabled}])).

%% `sni_hosts' and `sni_fun' pick the certificate by the name the client
%% sends, and the handler's `tls.sni' is that name; a name they do not
%% know gets the listener's own certificate.
sni_hosts_and_sni_fun_choose_the_certificate(Config) ->
    Name = ?config(name, Config),
    %% A second server certificate, of another test CA, for "two.test".
    #{server := Other, client := OtherClient} = sluice_tls_test_lib:certs(),
    {cert, OtherCert} = lists:keyfind(cert, 1, Other),
    {key, OtherKey} = lists:keyfind(key, 1, Other),
    Two = [{cert, OtherCert}, {key, OtherKey}],
    CAs = proplists:get_value(cacerts, sluice_tls_test_lib:client_opts(Config))
        ++ proplists:get_value(cacerts, OtherClient),
    Own = proplists:get_value(cert, sluice_tls_test_lib:server_opts(Config)),
    lists:foreach(
      fun(Sni) ->
              Port = listener(Config, Name, {sluice_conn_report_handler, #{test_pid => self()}},
                              #{tls_extra => [Sni]}),
              lists:foreach(
                fun({Host, Cert}) ->
                        {ok, S} = sluice_tls_test_lib:connect(
                                    Port, Config, [{cacerts, CAs},
                                                   {server_name_indication, Host}]),
                        Conn = receive {sluice_conn, _, C, _} -> C
                               after 5000 -> error(no_init)
                               end,
                        ?assertEqual({ok, Cert}, ssl:peercert(S)),
                        ?assertMatch(#{tls := #{sni := Host}}, Conn),
                        ok = ssl:close(S)
                end, [{"two.test", OtherCert}, {"one.test", Own}]),
              sluice_test_lib:stop_listener(Name)
      end, [{sni_hosts, [{"two.test", Two}]},
            {sni_fun, fun("two.test") -> Two; (_) -> undefined end}]).

%% Mutual TLS: with `{verify, verify_peer}' and `{fail_if_no_peer_cert,
%% true}' a client without a certificate fails the handshake (counted as
%% `handshake_error', no handler started) and one with a certificate the
%% CA signed reaches the handler with it in `tls.peer_cert'.
missing_client_certificate_is_a_handshake_error(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, Name, {sluice_conn_report_handler, #{test_pid => self()}},
                    #{tls_extra => [{verify, verify_peer}, {fail_if_no_peer_cert, true}]}),
    Client = maps:get(client, ?config(certs, Config)),
    %% TLS 1.3: the client finishes first and learns of the refusal after
    case sluice_tls_test_lib:connect(Port, Config) of
        {ok, S} -> ?assertMatch({error, _}, ssl:recv(S, 0, 5000));
        {error, _} -> ok
    end,
    ok = sluice_test_lib:wait_until(fun() -> reasons(Name) =:= #{handshake_error => 1} end, 5000),
    receive {sluice_conn, _, _, _} = Init -> error({handler_started, Init}) after 0 -> ok end,
    {ok, S2} = sluice_tls_test_lib:connect(Port, Config,
                                           [{cert, proplists:get_value(cert, Client)},
                                            {key, proplists:get_value(key, Client)}]),
    Conn = receive {sluice_conn, _, C, _} -> C after 5000 -> error(no_init) end,
    {cert, ClientCert} = lists:keyfind(cert, 1, Client),
    ?assertMatch(#{tls := #{peer_cert := ClientCert}}, Conn),
    ok = ssl:close(S2).

%% Replacing the certificate without a restart, the way a ranch_ssl
%% listener does it: new `certfile' and `keyfile' written in place, then
%% ssl:clear_pem_cache/0 (ssl keeps the files' contents; until then, or
%% until its periodic check of the files (2 min), the old certificate is
%% served). The
%% connections already up keep theirs.
renewed_certificate_files_are_served_after_clear_pem_cache(Config) ->
    Name = ?config(name, Config),
    %% A directory of its own: priv_dir is the whole run's, where other
    %% suites write their server.pem, and ssl's cache may hold theirs
    %% under the same path (which is what this test is about).
    Dir = filename:join(?config(priv_dir, Config),
                        "renew-" ++ integer_to_list(erlang:unique_integer([positive]))),
    ok = file:make_dir(Dir),
    Old = sluice_tls_test_lib:server_opts(Config),
    #{server := New} = sluice_tls_test_lib:certs(),
    Files = [{certfile, _}, {keyfile, _}, _] = sluice_tls_test_lib:write_pem(Dir, Old),
    Port = listener(Config, Name, {sluice_proto_echo, []},
                    #{tls_opts => lists:sublist(Files, 2)}),
    Served = fun() ->
                     {ok, S} = ssl:connect({127, 0, 0, 1}, Port, [binary, {verify, verify_none}],
                                           5000),
                     {ok, Der} = ssl:peercert(S),
                     ok = ssl:close(S),
                     Der
             end,
    ?assertEqual(proplists:get_value(cert, Old), Served()),
    _ = sluice_tls_test_lib:write_pem(Dir, New),
    ok = ssl:clear_pem_cache(),
    ?assertEqual(proplists:get_value(cert, New), Served()).

%% The certificate and key files of each `sni_hosts' entry are checked at
%% start as the listener's own are: a missing one failed every handshake
%% for that name, and the listener started.
sni_hosts_files_are_checked_at_start(Config) ->
    Missing = filename:join(?config(priv_dir, Config), "missing.pem"),
    R = start(Config, [{sni_hosts, [{"two.test", [{certfile, Missing}, {keyfile, Missing}]}]}]),
    ct:log("~p", [R]),
    ?assertMatch({error, {bad_option, tls_opts, {sni_hosts, "two.test", {certfile, _, enoent}}}},
                 R),
    {error, Error} = R,
    ?assertNotEqual(nomatch, string:find(sluice:format_error(Error), "two.test")).

%% Three slips in tls_opts that the generic words ("expected ... a
%% certificate and its key") misled about, with the certificate and key
%% right there: an sni_hosts host name as an Elixir string (a binary:
%% ssl takes charlists, and names only the whole option), verify_peer
%% without authorities (ssl says `{cacertfile, []}', an option the user
%% never wrote), and a misspelt ssl option. Each is said as what it is.
tls_opts_slips_are_said_as_such(Config) ->
    Good = sluice_tls_test_lib:server_opts(Config),
    NoCa = [O || O = {K, _} <- Good, K =/= cacerts, K =/= cacertfile],
    Cases = [{[{sni_hosts, [{<<"two.test">>, Good}]} | Good], "charlists"},
             {[{verify, verify_peer} | NoCa], "cacertfile or cacerts"},
             {[{cerfile, "x.pem"} | Good], "cerfile is not an ssl server option"}],
    lists:foreach(
      fun({TlsOpts, Said}) ->
              R = sluice:start_listener(?config(name, Config),
                                        #{ip => {127, 0, 0, 1}, port => 0, transport => ssl,
                                          tls_opts => TlsOpts,
                                          handler => {sluice_proto_echo, []}}),
              ct:log("~p: ~p", [hd(TlsOpts), R]),
              ?assertMatch({error, {bad_option, tls_opts, _}}, R),
              {error, Error} = R,
              Line = sluice:format_error(Error),
              ct:log("  ~s", [Line]),
              ?assertNotEqual(nomatch, string:find(Line, Said), Line),
              ?assertEqual(nomatch, string:find(Line, "a certificate and its key"), Line)
      end, Cases).

%% An `sni_fun' that raises for the name a client sends crashes ssl's
%% connection process (ssl reports it: the fun must not raise). The
%% connection is a failed handshake, `handshake_error', logged
%% rate-limited; it was `crashed', with a crash report of the connection
%% process on top of ssl's.
raising_sni_fun_is_a_handshake_error(Config) ->
    Name = ?config(name, Config),
    Port = listener(Config, Name, {sluice_conn_report_handler, #{test_pid => self()}},
                    #{tls_extra => [{sni_fun, fun(_) -> error(no_such_host) end}]}),
    lists:foreach(
      fun(_) ->
              ?assertMatch({error, _},
                           sluice_tls_test_lib:connect(Port, Config,
                                                       [{server_name_indication, "x.test"}]))
      end, [1, 2]),
    ok = sluice_test_lib:wait_until(fun() -> reasons(Name) =:= #{handshake_error => 2} end, 5000),
    receive {sluice_conn, _, _, _} = Init -> error({handler_started, Init}) after 0 -> ok end.
