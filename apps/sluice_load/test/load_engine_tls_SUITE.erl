%% TLS in the C load engine (sluice-load --tls) and the C reference server
%% (sluice-ref --tls): the scenarios over TLS with every ack checked, the
%% handshake figures of connect, and the failures a user meets first (a
%% plain server, a bad certificate, a bad option).
%%
%% Everything runs on loopback against servers started here on port 0,
%% with throwaway certificates from bench/certs.sh in the suite's priv_dir.
%% Helpers (running the binaries, reading their JSON) are
%% load_engine_SUITE's.
-module(load_engine_tls_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([lockstep_over_tls/1,
         pipeline_over_tls_every_ack_mode/1,
         connect_counts_full_handshakes/1,
         connect_resumes_when_asked/1,
         verify_sni_and_alpn/1,
         wrong_name_fails_verification/1,
         ping_and_echo_over_tls/1,
         plain_server_is_a_handshake_failure/1,
         silent_plain_server_is_a_handshake_timeout/1,
         bad_tls_options_exit_2/1,
         help_lists_the_tls_options/1,
         verify_by_ipv6_address/1]).

-import(load_engine_SUITE, [run/4, load/2, start_ref/2, get/2]).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [lockstep_over_tls, pipeline_over_tls_every_ack_mode,
     connect_counts_full_handshakes, connect_resumes_when_asked,
     verify_sni_and_alpn, wrong_name_fails_verification,
     ping_and_echo_over_tls, plain_server_is_a_handshake_failure,
     silent_plain_server_is_a_handshake_timeout, bad_tls_options_exit_2,
     help_lists_the_tls_options, verify_by_ipv6_address].

init_per_suite(Config) ->
    case {sluice_load_test_lib:priv_dir(), sluice_load_test_lib:repo_root()} of
        {{ok, Priv}, {ok, Root}} ->
            Dir = filename:join(?config(priv_dir, Config), "certs"),
            Out = os:cmd(filename:join(Root, "bench/certs.sh") ++ " " ++ Dir
                         ++ " 2>&1; echo status=$?"),
            ct:log("bench/certs.sh: ~s", [Out]),
            case string:find(Out, "status=0") of
                nomatch -> {fail, "bench/certs.sh failed: " ++ Out};
                _ -> [{bin_dir, Priv}, {certs, Dir} | Config]
            end;
        _ ->
            {fail, "sluice C binaries not found: run `make -C "
                   "apps/sluice_load/c_src` or set SLUICE_PRIV"}
    end.

end_per_suite(_Config) -> ok.

init_per_testcase(_Case, Config) -> sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) -> sluice_load_test_lib:stop_reaper(Config).

cert(Config, Name) -> filename:join(?config(certs, Config), Name).

%% sluice-ref --tls with the ECDSA server certificate, plus Args.
tls_ref(Config, Args) ->
    start_ref(Config, ["--tls", "--certfile", cert(Config, "server.pem"),
                       "--keyfile", cert(Config, "server.key") | Args]).

%%% ------------------------------------------------------------------
%%% Cases: the scenarios over TLS
%%% ------------------------------------------------------------------

%% One frame in flight over TLS: frames acked one by one (the engine checks
%% every id), one full TLS 1.3 handshake, latencies ordered.
lockstep_over_tls(Config) ->
    Port = tls_ref(Config, ["--protocol", "ack"]),
    J = load_ok(Config, ["--scenario", "lockstep", "--tls", "--port", Port]),
    sane(J, 100),
    T = get(J, tls),
    ?assertEqual(<<"TLSv1.3">>, get(T, version)),
    ?assertEqual(1, get(T, handshakes)),
    ?assertEqual(1, get(T, full_handshakes)),
    ?assertEqual(1, get(get(T, handshake_latency_us), samples)).

%% Pipelined frames over TLS on two connections in each ack mode: every
%% ack checked, bytes are whole frames.
pipeline_over_tls_every_ack_mode(Config) ->
    lists:foreach(
      fun(Mode) ->
              Port = tls_ref(Config, ["--protocol", "ack", "--ack", Mode]),
              J = load_ok(Config, ["--scenario", "pipeline", "--tls",
                                   "--ack", Mode, "--port", Port,
                                   "--conns", "2", "--window", "20000",
                                   "--batch", "500"]),
              sane(J, 10000),
              ?assertEqual(list_to_binary(Mode), get(J, ack)),
              ?assertEqual(2, get(J, conns_up_at_end)),
              ?assertEqual(get(J, messages) * 17, get(J, bytes))
      end, ["each", "last", "counted"]).

%% connect --tls: every connection is one full handshake (no resumption
%% unless asked), counted and timed.
connect_counts_full_handshakes(Config) ->
    Port = tls_ref(Config, ["--protocol", "ping"]),
    J = load_ok(Config, ["--scenario", "connect", "--tls", "--port", Port,
                         "--conns", "200", "--duration", "0.3"]),
    ?assertEqual(200, get(J, messages)),
    ?assertEqual(0, get(J, errors)),
    ?assert(get(J, rate) > 0),
    T = get(J, tls),
    ?assertEqual(200, get(T, handshakes)),
    ?assertEqual(200, get(T, full_handshakes)),
    ?assertEqual(0, get(T, resumed)),
    ?assertEqual(false, get(T, resume)),
    ?assert(get(T, full_handshakes_per_s) > 0),
    L = get(T, handshake_latency_us),
    ?assertEqual(200, get(L, samples)),
    ?assert(get(L, p50) > 0).

%% --tls-resume against a server that issues tickets: once a connection
%% of the thread got one, later handshakes resume.
connect_resumes_when_asked(Config) ->
    Port = tls_ref(Config, ["--protocol", "ping", "--tls-tickets", "1"]),
    J = load_ok(Config, ["--scenario", "connect", "--tls", "--tls-resume",
                         "--probe", "ping", "--threads", "1",
                         "--connect-concurrency", "1", "--port", Port,
                         "--conns", "20", "--duration", "0.2"]),
    T = get(J, tls),
    ?assertEqual(20, get(T, handshakes)),
    ?assert(get(T, full_handshakes) >= 1),
    ?assert(get(T, resumed) >= 10, T).

%% Verification against the test CA, by name (SNI) and by address; ALPN
%% negotiated with the server's list.
verify_sni_and_alpn(Config) ->
    Port = tls_ref(Config, ["--protocol", "ping", "--tls-alpn", "x,h2"]),
    Ca = cert(Config, "ca.pem"),
    J1 = load_ok(Config, ["--scenario", "connect", "--tls", "--tls-verify",
                          "--tls-ca", Ca, "--tls-sni", "localhost",
                          "--tls-alpn", "h2,http/1.1", "--probe", "ping",
                          "--port", Port, "--conns", "5",
                          "--duration", "0.2"]),
    T1 = get(J1, tls),
    ?assertEqual(<<"h2">>, get(T1, alpn)),
    ?assertEqual(<<"localhost">>, get(T1, sni)),
    ?assertEqual(true, get(T1, verify)),
    J2 = load_ok(Config, ["--scenario", "connect", "--tls", "--tls-verify",
                          "--tls-ca", Ca, "--port", Port, "--conns", "5",
                          "--duration", "0.2"]),
    ?assertEqual(null, get(get(J2, tls), sni)),
    ?assertEqual(5, get(J2, messages)).

%% Over ::1 (skipped without it): TLS lockstep, and verification by the
%% address as for 127.0.0.1: no SNI (an IPv6 --host was taken for a name
%% and sent as SNI, which RFC 6066 reserves for names), the certificate's
%% IP ::1 checked.
verify_by_ipv6_address(Config) ->
    case sluice_load_test_lib:ipv6_loopback() of
        ok ->
            Ca = cert(Config, "ca.pem"),
            Ack = tls_ref(Config, ["--ip", "::1", "--protocol", "ack"]),
            L = load_ok(Config, ["--host", "::1", "--tls", "--port", Ack,
                                 "--duration", "0.3"]),
            ?assert(get(L, messages) > 0),
            Ping = tls_ref(Config, ["--ip", "::1", "--protocol", "ping"]),
            J = load_ok(Config, ["--scenario", "connect", "--tls", "--tls-verify",
                                 "--tls-ca", Ca, "--host", "::1", "--port", Ping,
                                 "--conns", "5", "--duration", "0.2"]),
            ?assertEqual(null, get(get(J, tls), sni)),
            ?assertEqual(5, get(J, messages));
        Skip ->
            Skip
    end.

%% A certificate that does not name the server: every handshake fails,
%% the reason is on stderr, exit 3.
wrong_name_fails_verification(Config) ->
    Port = tls_ref(Config, ["--protocol", "ping"]),
    {Status, Out} = run(Config, "sluice-load",
                        ["--scenario", "connect", "--tls", "--tls-verify",
                         "--tls-ca", cert(Config, "ca.pem"),
                         "--tls-sni", "example.com", "--port", Port,
                         "--conns", "3", "--duration", "0.2", "--quiet"],
                        10000),
    ct:log("~s", [Out]),
    ?assertEqual(3, Status),
    ?assertMatch({match, _}, re:run(Out, "TLS handshake failed on "
                                    "connection [0-2] \\(local 127.0.0.1:"
                                    "[0-9]+\\): certificate verify failed: "
                                    "hostname mismatch")),
    ?assertMatch({match, _}, re:run(Out, "at all \\(tls_handshake 3\\)")).

%% The ping protocol over TLS (rounds of pongs) and the echo protocol over
%% TLS (flood: echoed bytes come back).
ping_and_echo_over_tls(Config) ->
    P1 = tls_ref(Config, ["--protocol", "ping"]),
    J1 = load_ok(Config, ["--scenario", "ping", "--tls", "--port", P1,
                          "--conns", "20", "--interval", "100"]),
    ?assertEqual(0, get(J1, errors)),
    ?assert(get(J1, pongs) >= 150),
    P2 = tls_ref(Config, ["--protocol", "echo"]),
    J2 = load_ok(Config, ["--scenario", "flood", "--tls", "--port", P2,
                          "--conns", "2"]),
    ?assertEqual(0, get(J2, errors)),
    ?assert(get(J2, bytes) > 6000).

%%% ------------------------------------------------------------------
%%% Cases: failures are reported, never silent
%%% ------------------------------------------------------------------

%% TLS against a plain ack server (it reads the ClientHello as a frame far
%% over max-frame and hangs up): a handshake failure that says so, exit 3.
plain_server_is_a_handshake_failure(Config) ->
    Port = start_ref(Config, ["--protocol", "ack"]),
    {Status, Out} = run(Config, "sluice-load",
                        ["--scenario", "lockstep", "--tls", "--port", Port,
                         "--duration", "1"], 10000),
    ct:log("~s", [Out]),
    ?assertEqual(3, Status),
    ?assertMatch({match, _},
                 re:run(Out, "TLS handshake failed on connection 0 \\(local "
                        "127.0.0.1:[0-9]+\\): connection closed by the peer "
                        "during the handshake \\(does it speak TLS\\?\\)")),
    ?assertMatch({match, _}, re:run(Out, "could not connect to 127.0.0.1:"
                                    ++ Port ++ " at all \\(tls_handshake 1\\)")).

%% TLS against a plain server that accepts and never answers: the connect
%% timeout ends the handshake, counted as tls_timeout. (Not sluice-ref's
%% ping server: like sluice's, it closes on a ClientHello, over 64 bytes
%% with no newline.)
silent_plain_server_is_a_handshake_timeout(Config) ->
    {ok, L} = gen_tcp:listen(0, [binary, {active, false}, {ip, {127, 0, 0, 1}}]),
    {ok, TcpPort} = inet:port(L),
    Silent = spawn_link(fun() -> silent(L, []) end),
    {3, J} = load(Config, ["--scenario", "connect", "--tls", "--port",
                           integer_to_list(TcpPort), "--conns", "3",
                           "--connect-timeout", "300"]),
    ?assertEqual(#{<<"tls_timeout">> => 3}, get(J, failures)),
    ?assertEqual(0, get(get(J, tls), handshakes)),
    unlink(Silent),
    exit(Silent, kill),
    gen_tcp:close(L).

%% Accepts every connection and keeps it, reading nothing.
silent(L, Socks) ->
    case gen_tcp:accept(L) of
        {ok, S} -> silent(L, [S | Socks]);
        {error, _} -> ok
    end.

%% Bad TLS options, in the engine and in the server: one line, exit 2,
%% before anything runs.
bad_tls_options_exit_2(Config) ->
    Missing = filename:join(?config(priv_dir, Config), "no-such.pem"),
    Key = cert(Config, "server.key"),
    Pem = cert(Config, "server.pem"),
    Bad = [{"sluice-load", ["--tls-ca", Pem]},
           {"sluice-load", ["--tls-verify"]},
           {"sluice-load", ["--tls", "--tls-ca", Missing]},
           {"sluice-load", ["--tls", "--tls-alpn", "h2,,x"]},
           {"sluice-load", ["--tls", "--tls-version", "1.1"]},
           {"sluice-ref", ["--protocol", "ack", "--tls"]},
           {"sluice-ref", ["--protocol", "ack", "--tls", "--certfile", Pem]},
           {"sluice-ref", ["--protocol", "ack", "--certfile", Pem,
                           "--keyfile", Key]},
           {"sluice-ref", ["--protocol", "ack", "--tls", "--certfile",
                           Missing, "--keyfile", Key]},
           {"sluice-ref", ["--protocol", "ack", "--tls", "--certfile", Key,
                           "--keyfile", Pem]}],
    lists:foreach(
      fun({Bin, Args}) ->
              {Status, Out} = run(Config, Bin, Args, 5000),
              ct:log("~s ~p -> ~p: ~s", [Bin, Args, Status, Out]),
              ?assertEqual(2, Status),
              ?assertEqual(1, length(string:split(string:trim(Out), "\n",
                                                  all)))
      end, Bad).

%% Both binaries' --help list their TLS options.
help_lists_the_tls_options(Config) ->
    {0, Load} = run(Config, "sluice-load", ["--help"], 5000),
    [?assertNotEqual(nomatch, string:find(Load, O))
     || O <- ["--tls ", "--tls-ca FILE", "--tls-verify", "--tls-sni NAME",
              "--tls-alpn LIST", "--tls-resume", "--tls-version V"]],
    {0, Ref} = run(Config, "sluice-ref", ["--help"], 5000),
    [?assertNotEqual(nomatch, string:find(Ref, O))
     || O <- ["--tls ", "--certfile FILE", "--keyfile FILE", "--tls-alpn LIST",
              "--tls-tickets N", "--tls-version V"]].

%%% ------------------------------------------------------------------

load_ok(Config, Args) ->
    {0, J} = load(Config, Args),
    J.

sane(J, MinMessages) ->
    ?assertEqual(0, get(J, errors)),
    ?assert(get(J, messages) >= MinMessages),
    ?assert(get(J, rate) > 0),
    L = get(J, latency_us),
    Ps = [get(L, K) || K <- [p50, p90, p99, p999, max]],
    ?assert(hd(Ps) > 0, Ps),
    ?assertEqual(Ps, lists:sort(Ps)).
