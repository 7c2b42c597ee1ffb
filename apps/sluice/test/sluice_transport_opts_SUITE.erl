%% sluice:set_transport_opts/2 and get_transport_opts/1, ranch's
%% set_transport_options/2 and get_transport_options/1 for what can change
%% on a running listener: a TLS listener's `tls_opts' (a certificate at a
%% new path, an SNI host, ALPN) and `handshake_timeout', a PROXY
%% listener's `proxy_timeout' and `proxy_max_size', and `max_connections'.
%% New connections get the new values, running ones keep theirs; a bad
%% value or an option that cannot change is refused and nothing changes;
%% racing connects get the old or the new options whole; the values stay
%% over suspend/resume, a drain and a connection supervisor's restart.
-module(sluice_transport_opts_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([new_certificate_at_a_new_path_for_new_connections/1,
         sni_host_added/1,
         alpn_protocols_changed/1,
         certificate_rewritten_in_place_is_served_once_set/1,
         bad_tls_opts_are_refused_and_nothing_changes/1,
         options_that_cannot_change_are_refused/1,
         given_back_whole_changes_nothing/1,
         port_stays_the_listeners_own/1,
         own_port_is_not_an_option/1,
         connects_racing_the_switch_get_old_or_new_whole/1,
         calls_at_once_leave_every_conns_sup_on_the_last/1,
         kept_over_suspend_resume_drain_and_conns_sup_restart/1,
         handshake_timeout_changed_for_new_connections/1,
         proxy_options_changed_for_new_connections/1,
         max_connections_changed/1,
         unknown_listener_is_not_found/1]).

-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [new_certificate_at_a_new_path_for_new_connections,
     sni_host_added,
     alpn_protocols_changed,
     certificate_rewritten_in_place_is_served_once_set,
     bad_tls_opts_are_refused_and_nothing_changes,
     options_that_cannot_change_are_refused,
     given_back_whole_changes_nothing,
     port_stays_the_listeners_own,
     own_port_is_not_an_option,
     connects_racing_the_switch_get_old_or_new_whole,
     calls_at_once_leave_every_conns_sup_on_the_last,
     kept_over_suspend_resume_drain_and_conns_sup_restart,
     handshake_timeout_changed_for_new_connections,
     proxy_options_changed_for_new_connections,
     max_connections_changed,
     unknown_listener_is_not_found].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    {ok, _} = application:ensure_all_started(ssl),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(Case, Config) ->
    %% priv_dir is the whole run's: this suite's files go in a directory
    %% of its own, one per case.
    Dir = filename:join([?config(priv_dir, Config), atom_to_list(?MODULE),
                         atom_to_list(Case) ++ "-"
                         ++ integer_to_list(erlang:unique_integer([positive]))]),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    [{name, {?MODULE, Case}}, {dir, Dir} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%%% ------------------------------------------------------------------
%%% Helpers
%%% ------------------------------------------------------------------

%% A fresh certificate and key written as PEM files in a directory of
%% their own under the case's: `{CertDer, [{certfile, F}, {keyfile, F}]}'.
cert(Config, Tag) ->
    Dir = filename:join(?config(dir, Config), Tag),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    #{server := Server} = sluice_tls_test_lib:certs(),
    {proplists:get_value(cert, Server), files(Dir, Server)}.

files(Dir, Server) ->
    lists:sublist(sluice_tls_test_lib:write_pem(Dir, Server), 2).

%% A TLS echo listener; its port.
tls_listener(Config, TlsOpts, Extra) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, Extra#{transport => ssl, tls_opts => TlsOpts,
                                                handler => {sluice_proto_echo, []}}),
    sluice_test_lib:port(Name).

tls_connect(Port, Extra) ->
    ssl:connect(?LOOPBACK, Port, [binary, {active, false}, {verify, verify_none} | Extra],
                5000).

%% The certificate a new connection is served.
served(Port) ->
    served(Port, []).

served(Port, Extra) ->
    {ok, S} = tls_connect(Port, Extra),
    {ok, Der} = ssl:peercert(S),
    ok = ssl:close(S),
    Der.

echoes(S) ->
    ok = ssl:send(S, <<"ping">>),
    ?assertEqual({ok, <<"ping">>}, ssl:recv(S, 4, 5000)).

reasons(Name) ->
    maps:filter(fun(_, N) -> N > 0 end, maps:get(close_reasons, sluice:info(Name))).

tls_opts(Name) ->
    {ok, #{tls_opts := TlsOpts}} = sluice:get_transport_opts(Name),
    TlsOpts.

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% A certificate at a new path (a new lineage, a moved mount): served to
%% the connections made after the call; a connection made before keeps
%% its session on the old one and carries on.
new_certificate_at_a_new_path_for_new_connections(Config) ->
    Name = ?config(name, Config),
    {OldCert, OldFiles} = cert(Config, "old"),
    {NewCert, NewFiles} = cert(Config, "new"),
    Port = tls_listener(Config, OldFiles, #{}),
    {ok, Before} = tls_connect(Port, []),
    ?assertEqual({ok, OldCert}, ssl:peercert(Before)),
    echoes(Before),
    ?assertEqual(ok, sluice:set_transport_opts(Name, #{tls_opts => NewFiles})),
    ?assertEqual(NewFiles, tls_opts(Name)),
    ?assertEqual(NewCert, served(Port)),
    echoes(Before),
    ?assertEqual({ok, OldCert}, ssl:peercert(Before)),
    ok = ssl:close(Before),
    ?assertEqual(#{}, maps:without([peer_closed], reasons(Name))).

%% An SNI host added: a client that names it gets its certificate, one
%% that names none the listener's.
sni_host_added(Config) ->
    Name = ?config(name, Config),
    {MainCert, MainFiles} = cert(Config, "main"),
    {TwoCert, TwoFiles} = cert(Config, "two"),
    Port = tls_listener(Config, MainFiles, #{}),
    Sni = [{server_name_indication, "two.test"}],
    ?assertEqual(MainCert, served(Port, Sni)),
    ok = sluice:set_transport_opts(Name, [{tls_opts, [{sni_hosts, [{"two.test", TwoFiles}]}
                                                      | MainFiles]}]),
    ?assertEqual(TwoCert, served(Port, Sni)),
    ?assertEqual(MainCert, served(Port)).

%% ALPN protocols replaced: new connections agree on one of the new list.
alpn_protocols_changed(Config) ->
    Name = ?config(name, Config),
    {_, Files} = cert(Config, "alpn"),
    Port = tls_listener(Config, [{alpn_preferred_protocols, [<<"one">>]} | Files], #{}),
    Offer = [{alpn_advertised_protocols, [<<"one">>, <<"two">>]}],
    Agreed = fun() ->
                     {ok, S} = tls_connect(Port, Offer),
                     {ok, P} = ssl:negotiated_protocol(S),
                     ok = ssl:close(S),
                     P
             end,
    ?assertEqual(<<"one">>, Agreed()),
    ok = sluice:set_transport_opts(Name, #{tls_opts => [{alpn_preferred_protocols, [<<"two">>]}
                                                        | Files]}),
    ?assertEqual(<<"two">>, Agreed()).

%% Files rewritten at the same path, then set: the call checked the new
%% files, and those are what is served (ssl's cache of the old contents
%% is cleared), not the old certificate with whatever key was read anew.
certificate_rewritten_in_place_is_served_once_set(Config) ->
    Name = ?config(name, Config),
    Dir = filename:join(?config(dir, Config), "in-place"),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    #{server := Old} = sluice_tls_test_lib:certs(),
    #{server := New} = sluice_tls_test_lib:certs(),
    Files = files(Dir, Old),
    Port = tls_listener(Config, Files, #{}),
    ?assertEqual(proplists:get_value(cert, Old), served(Port)),
    Files = files(Dir, New),
    ok = sluice:set_transport_opts(Name, #{tls_opts => Files}),
    ?assertEqual(proplists:get_value(cert, New), served(Port)).

%% Refused as at start, with the same errors, and nothing changes: the
%% old certificate is still served and get_transport_opts/1 still says
%% the old options. A call with a good tls_opts and a bad option beside
%% it changes nothing either.
bad_tls_opts_are_refused_and_nothing_changes(Config) ->
    Name = ?config(name, Config),
    {OldCert, OldFiles} = cert(Config, "old"),
    {_, [Cert2, Key2]} = cert(Config, "other"),
    Port = tls_listener(Config, OldFiles, #{}),
    {ok, Before} = sluice:get_transport_opts(Name),
    Missing = filename:join(?config(dir, Config), "missing.pem"),
    [CertFile, KeyFile] = OldFiles,
    Refused = [{#{tls_opts => [{certfile, Missing}, KeyFile]},
                {bad_option, tls_opts, {certfile, Missing, enoent}}},
               {#{tls_opts => [CertFile, Key2]},
                {bad_option, tls_opts,
                 {keyfile, element(2, Key2), {key_does_not_match, certfile}}}},
               {#{tls_opts => [{session_tickets, stateless} | OldFiles]},
                {bad_option, tls_opts, {session_tickets, {not_supported, stateless}}}},
               {#{tls_opts => [{active, true} | OldFiles]},
                {bad_option, tls_opts, {socket_option, active}}},
               {#{tls_opts => [Cert2]},
                {bad_option, tls_opts,
                 {missing, "certfile and keyfile (or cert and key, or certs_keys)"}}},
               {#{tls_opts => [Cert2, Key2], handshake_timeout => 0},
                {bad_option, handshake_timeout, 0}},
               {#{tls_opts => [Cert2, Key2], num_conns_sups => 1},
                {not_changeable, num_conns_sups}},
               {#{tls_opts => [Cert2, Key2], tls_optz => []},
                {unknown_option, tls_optz}},
               {not_options, not_a_map}],
    lists:foreach(
      fun({Opts, Why}) ->
              ?assertEqual({Opts, {error, Why}}, {Opts, sluice:set_transport_opts(Name, Opts)}),
              ?assertEqual({ok, Before}, sluice:get_transport_opts(Name)),
              ?assertEqual(OldCert, served(Port))
      end, Refused),
    Said = sluice:format_error({bad_option, tls_opts, {certfile, Missing, enoent}}),
    ?assertMatch("bad value for option tls_opts" ++ _, Said),
    %% the file and why in words, not only the posix code
    ?assertNotEqual(nomatch, string:find(Said, lists:flatten(
                                                 io_lib:format("(certfile ~0p cannot be read: "
                                                               "no such file or directory)",
                                                               [Missing]))), Said).

%% Every option that cannot change on a running listener is refused by
%% name when given another value: on a plain TCP listener, the PROXY ones
%% without proxy_protocol too. (The TLS ones change on an `inet' listener,
%% for STARTTLS; on `socket', where nothing reads them, they do not.)
options_that_cannot_change_are_refused(Config) ->
    Name = ?config(name, Config),
    %% One listen socket: reuseport is then false (with more it is set).
    sluice_test_lib:start_listener(Name, #{transport => inet, num_conns_sups => 2,
                                           num_listen_sockets => 1,
                                           handler => {sluice_proto_echo, []}}),
    {ok, Before} = sluice:get_transport_opts(Name),
    %% (The listen side changes at the next resume:
    %% sluice_listen_change_SUITE; listen_socket is refused there.)
    Other = [{transport, socket}, {num_conns_sups, 1},
             {max_connections_wait, 1}, {active, once},
             {idle_timeout, 10},
             {hibernate_after, 10}, {park_after, 10}, {gc_after_bytes, 10},
             {shutdown_timeout, 10}, {proxy_protocol, true}, {proxy_timeout, 10},
             {proxy_max_size, 100}, {framing, line},
             {handler, {sluice_proto_ping, []}}],
    _ = [?assertEqual({K, {error, {not_changeable, K}}},
                      {K, sluice:set_transport_opts(Name, #{K => V})})
         || {K, V} <- Other],
    ?assertEqual({ok, Before}, sluice:get_transport_opts(Name)),
    Socket = {Name, socket},
    sluice_test_lib:start_listener(Socket, #{transport => socket,
                                             handler => {sluice_proto_echo, []}}),
    ?assertEqual({error, {not_changeable, handshake_timeout}},
                 sluice:set_transport_opts(Socket, #{handshake_timeout => 10})),
    %% tls_opts there are refused as at start (docs/listener-options.md)
    {_, Files} = cert(Config, "socket"),
    ?assertEqual({error, {bad_option, tls_opts, {transport, socket}}},
                 sluice:set_transport_opts(Socket, #{tls_opts => Files})),
    ok = sluice:stop_listener(Socket),
    %% Every listener option is in the list but max_connections and
    %% alarms (which change: alarms in sluice_watch_SUITE), the TLS ones (above), the listen side's (which change at
    %% the next resume), listen_socket and the handler's own
    %% (get_transport_opts/1 leaves it out).
    ?assertEqual(lists:sort(maps:keys(sluice_opts:defaults()))
                 -- ([handler, max_connections, alarms, tls_opts, handshake_timeout, listen_socket]
                     ++ sluice_opts_change:listen_side()),
                 lists:sort(proplists:get_keys(Other)) -- [handler]),
    ?assertEqual(lists:sort(maps:keys(sluice_opts:defaults())) -- [handler],
                 lists:sort(maps:keys(Before))).

%% The map get_transport_opts/1 gives, given back whole (ranch's way:
%% get, change, set), changes nothing, and with tls_opts changed in it
%% changes those alone.
given_back_whole_changes_nothing(Config) ->
    Name = ?config(name, Config),
    {OldCert, OldFiles} = cert(Config, "old"),
    {NewCert, NewFiles} = cert(Config, "new"),
    Port = tls_listener(Config, OldFiles, #{num_listen_sockets => 2}),
    {ok, Opts} = sluice:get_transport_opts(Name),
    ?assertEqual(ok, sluice:set_transport_opts(Name, Opts)),
    ?assertEqual({ok, Opts}, sluice:get_transport_opts(Name)),
    ?assertEqual(OldCert, served(Port)),
    ?assertEqual(ok, sluice:set_transport_opts(Name, Opts#{tls_opts := NewFiles})),
    ?assertEqual({ok, Opts#{tls_opts := NewFiles}}, sluice:get_transport_opts(Name)),
    ?assertEqual(NewCert, served(Port)),
    ?assertEqual(Port, sluice_test_lib:port(Name)).

%% A listener with several listen sockets has SO_REUSEPORT on them but
%% keeps its port its own: after a change, a resume still tries the port
%% alone first and refuses one that a socket with SO_REUSEPORT has taken
%% meanwhile with its one plain line (validated again, the options had
%% lost that the port was the listener's own, and only the listen
%% sockets' restart failed, with a supervisor report).
port_stays_the_listeners_own(Config) ->
    Name = ?config(name, Config),
    {_, Files} = cert(Config, "own"),
    Port = tls_listener(Config, Files, #{num_listen_sockets => 2}),
    {ok, Opts} = sluice:get_transport_opts(Name),
    ok = sluice:set_transport_opts(Name, Opts#{handshake_timeout := 1000}),
    ok = sluice:suspend(Name),
    %% SO_REUSEPORT (SOL_SOCKET 1, option 15 on Linux): OTP 25 has no name for it
    {ok, Squatter} = gen_tcp:listen(Port, [{ip, ?LOOPBACK}, {raw, 1, 15, <<1:32/native>>}]),
    ok = sluice_log_forwarder:start(self()),
    try
        ?assertEqual({error, eaddrinuse}, sluice:resume(Name))
    after
        sluice_log_forwarder:stop(),
        gen_tcp:close(Squatter)
    end,
    %% Logged by the caller of resume/1 itself, so already here.
    Logs = [Text || {log, _, Text, _} <- logged()],
    ct:log("~p", [Logs]),
    ?assertMatch([_], [L || L <- Logs, string:find(L, "cannot listen on") =/= nomatch]),
    ok = sluice:resume(Name),
    ?assertMatch(#{status := running, port := Port}, sluice:info(Name)).

logged() ->
    receive {log, _, _, _} = L -> [L | logged()] after 0 -> [] end.

%% `own_port' is the library's (validation sets it), not an option:
%% refused as start_listener/2 refuses it, where it was accepted and
%% ignored; and the listener keeps its own port.
own_port_is_not_an_option(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{transport => inet, handler => {sluice_proto_echo, []}}),
    {ok, Before} = sluice:get_transport_opts(Name),
    ?assertEqual({error, {unknown_option, own_port}},
                 sluice:start_listener({Name, 2}, #{own_port => false, port => 0,
                                                    handler => {sluice_proto_echo, []}})),
    ?assertEqual({error, {unknown_option, own_port}},
                 sluice:set_transport_opts(Name, #{own_port => false})),
    ?assertEqual({error, {unknown_option, own_port}},
                 sluice:set_transport_opts(Name, [{handshake_timeout, 1000}, {own_port, false}])),
    ?assertEqual({ok, Before}, sluice:get_transport_opts(Name)).

%% Connects in a loop from two processes while the certificate changes
%% eight times: every handshake succeeds (never the certificate of one
%% call with the key of another) with a certificate that was set, never
%% older than the last call that had returned before its connect began.
connects_racing_the_switch_get_old_or_new_whole(Config) ->
    Name = ?config(name, Config),
    Certs = [cert(Config, "c" ++ integer_to_list(I)) || I <- lists:seq(0, 8)],
    Index = maps:from_list([{Der, I} || {I, {Der, _}} <- lists:zip(lists:seq(0, 8), Certs)]),
    [{_, Files0} | Next] = Certs,
    Port = tls_listener(Config, Files0, #{num_conns_sups => 4}),
    Returned = atomics:new(1, [{signed, false}]),
    Self = self(),
    Connectors = [spawn_link(fun() -> connect_loop(Port, Index, Returned, Self, []) end)
                  || _ <- [1, 2]],
    _ = [begin
             ok = sluice:set_transport_opts(Name, #{tls_opts => Files}),
             ok = atomics:put(Returned, 1, I),
             timer:sleep(20)
         end || {I, {_, Files}} <- lists:zip(lists:seq(1, 8), Next)],
    _ = [C ! stop || C <- Connectors],
    Seen = lists:append([receive {seen, C, L} -> L after 20000 -> error(no_connector) end
                         || C <- Connectors]),
    ct:log("~p connections: ~p", [length(Seen), lists:reverse(Seen)]),
    ?assert(length(Seen) >= 10),
    ?assertEqual([], [{Min, Got} || {Min, Got} <- Seen,
                                    not (is_integer(Got) andalso Got >= Min)]),
    ?assert(length(lists:usort([Got || {_, Got} <- Seen])) > 1),
    {Last, _} = lists:last(Certs),
    ?assertEqual(Last, served(Port)),
    ?assertEqual(#{}, maps:without([peer_closed], reasons(Name))).

connect_loop(Port, Index, Returned, Parent, Acc) ->
    receive
        stop -> Parent ! {seen, self(), Acc}
    after 0 ->
            Min = atomics:get(Returned, 1),
            Got = case tls_connect(Port, []) of
                      {ok, S} ->
                          {ok, Der} = ssl:peercert(S),
                          ok = ssl:close(S),
                          maps:get(Der, Index, unknown);
                      {error, Why} ->
                          {error, Why}
                  end,
            connect_loop(Port, Index, Returned, Parent, [{Min, Got} | Acc])
    end.

%% Eight processes change the handshake timeout at once, ten times: each
%% time, once all have returned, every connection supervisor starts
%% connections with the value get_transport_opts/1 gives (the last
%% call's), not some with one call's and some with another's.
calls_at_once_leave_every_conns_sup_on_the_last(Config) ->
    Name = ?config(name, Config),
    {_, Files} = cert(Config, "at-once"),
    _Port = tls_listener(Config, Files, #{num_conns_sups => 4}),
    Sups = sluice_test_lib:conns_sups(Name),
    4 = length(Sups),
    _ = [begin
             Self = self(),
             Callers = [spawn_link(fun() ->
                                           receive go -> ok end,
                                           Opts = #{handshake_timeout => R * 100 + I},
                                           Result = sluice:set_transport_opts(Name, Opts),
                                           Self ! {set, self(), Result}
                                   end) || I <- lists:seq(1, 8)],
             _ = [C ! go || C <- Callers],
             _ = [receive {set, C, ok} -> ok after 10000 -> error(no_return) end
                  || C <- Callers],
             {ok, #{handshake_timeout := Last}} = sluice:get_transport_opts(Name),
             ?assertEqual({R, [Last]}, {R, lists:usort([sup_opt(S, handshake_timeout)
                                                        || S <- Sups])})
         end || R <- lists:seq(1, 10)],
    ok.

%% An option as a connection supervisor starts connections with it: the
%% listener it holds (its state, read through sys).
sup_opt(Sup, Key) ->
    [V] = [maps:get(Key, Opts) || #{name := _, opts := Opts} <- tuple_to_list(sys:get_state(Sup))],
    V.

%% The new certificate stays through suspend/1 and resume/1, a drain and
%% its resume, a change made while suspended, and the restart of the
%% connection supervisor.
kept_over_suspend_resume_drain_and_conns_sup_restart(Config) ->
    Name = ?config(name, Config),
    {_, Files1} = cert(Config, "one"),
    {Cert2, Files2} = cert(Config, "two"),
    {Cert3, Files3} = cert(Config, "three"),
    Port = tls_listener(Config, Files1, #{num_conns_sups => 1}),
    ok = sluice:set_transport_opts(Name, #{tls_opts => Files2}),
    ok = sluice:suspend(Name),
    ok = sluice:resume(Name),
    ?assertEqual(Cert2, served(Port)),
    ok = sluice_test_lib:wait_until(fun() -> maps:get(connections, sluice:info(Name)) =:= 0 end,
                                    5000),
    ?assertEqual({ok, 0}, sluice:drain(Name, 1000)),
    ok = sluice:resume(Name),
    ?assertEqual(Cert2, served(Port)),
    ok = sluice:suspend(Name),
    ok = sluice:set_transport_opts(Name, #{tls_opts => Files3}),
    ok = sluice:resume(Name),
    ?assertEqual(Cert3, served(Port)),
    [Sup] = sluice_test_lib:conns_sups(Name),
    exit(Sup, kill),
    ok = sluice_test_lib:wait_until(fun() ->
                                            case sluice_test_lib:conns_sups(Name) of
                                                [P] -> P =/= Sup;
                                                _ -> false
                                            end
                                    end, 5000),
    ok = sluice_test_lib:wait_until(fun() -> maps:get(status, sluice:info(Name)) =:= running end,
                                    5000),
    ?assertEqual(Cert3, served(Port)).

%% A shorter handshake timeout reaches the connections made after the
%% call: a client that never starts its handshake is closed (at the
%% listener's first timeout, a minute, this case's timetrap fails it).
handshake_timeout_changed_for_new_connections(Config) ->
    Name = ?config(name, Config),
    {_, Files} = cert(Config, "hs"),
    Port = tls_listener(Config, Files, #{handshake_timeout => 60000}),
    ok = sluice:set_transport_opts(Name, [{handshake_timeout, 100}]),
    ?assertMatch({ok, #{handshake_timeout := 100}}, sluice:get_transport_opts(Name)),
    {ok, S} = sluice_tls_test_lib:tcp_connect(Port),
    ok = sluice_test_lib:expect_closed(S, 20000),
    ok = sluice_test_lib:wait_until(fun() -> reasons(Name) =:= #{handshake_error => 1} end,
                                    5000).

%% On a PROXY protocol listener: a smaller largest header refuses the
%% v2 header (28 bytes) it took before, and a shorter header timeout closes a client
%% that sends none (at the first, a minute, the timetrap fails the case).
proxy_options_changed_for_new_connections(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{transport => inet, proxy_protocol => true,
                                           proxy_timeout => 60000,
                                           handler => {sluice_proto_echo, []}}),
    Port = sluice_test_lib:port(Name),
    Header = sluice_proxy_header:encode(#{version => 2, command => proxy, transport => tcp4,
                                          source => {{192, 0, 2, 1}, 56324},
                                          destination => {{198, 51, 100, 7}, 443},
                                          tlvs => []}),
    Echoed = fun() ->
                     {ok, S} = sluice_test_lib:connect(Port),
                     ok = gen_tcp:send(S, [Header, <<"ping">>]),
                     R = gen_tcp:recv(S, 4, 5000),
                     ok = gen_tcp:close(S),
                     R
             end,
    ?assertEqual({ok, <<"ping">>}, Echoed()),
    ok = sluice:set_transport_opts(Name, #{proxy_max_size => 16}),
    ?assertMatch({error, _}, Echoed()),
    ok = sluice:set_transport_opts(Name, #{proxy_max_size => 4096, proxy_timeout => 100}),
    ?assertEqual({ok, <<"ping">>}, Echoed()),
    {ok, Silent} = sluice_test_lib:connect(Port),
    ok = sluice_test_lib:expect_closed(Silent, 20000),
    ok = sluice_test_lib:wait_until(
           fun() -> maps:get(proxy_error, reasons(Name), 0) =:= 2 end, 5000).

%% max_connections, as set_max_connections/2 changes it; get says the
%% limit now, whichever of the two set it.
max_connections_changed(Config) ->
    Name = ?config(name, Config),
    sluice_test_lib:start_listener(Name, #{transport => inet, max_connections => 10,
                                           handler => {sluice_proto_echo, []}}),
    ok = sluice:set_transport_opts(Name, #{max_connections => 3}),
    ?assertMatch(#{max_connections := 3}, sluice:info(Name)),
    ?assertMatch({ok, #{max_connections := 3}}, sluice:get_transport_opts(Name)),
    ok = sluice:set_max_connections(Name, infinity),
    ?assertMatch({ok, #{max_connections := infinity}}, sluice:get_transport_opts(Name)),
    ?assertEqual({error, {bad_option, max_connections, -1}},
                 sluice:set_transport_opts(Name, #{max_connections => -1})),
    ?assertMatch(#{max_connections := infinity}, sluice:info(Name)).

unknown_listener_is_not_found(_Config) ->
    ?assertEqual({error, not_found}, sluice:set_transport_opts({?MODULE, nobody}, #{})),
    ?assertEqual({error, not_found}, sluice:get_transport_opts({?MODULE, nobody})).
