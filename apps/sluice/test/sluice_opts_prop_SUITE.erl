%% The options' contract as PropEr properties (docs/listener-options.md,
%% sluice:format_error/1): start_listener/2 with any map, any list and
%% any other term answers `{ok, Pid}' or `{error, Reason}', never raises
%% or exits; format_error/1 words every such Reason as a flat string that
%% names the option at fault; child_spec/1,2 returns a spec or raises
%% only its ArgumentError-shaped map; and set_transport_opts/2,
%% set_handler_opts/2 and set_max_connections/2 on a running listener
%% answer ok or an error, after which the listener still serves.
%%
%% The values are drawn per option from what sluice_opts checks: near
%% misses (negative, zero, huge, floats, numbers as strings and binaries,
%% atoms near the right ones, improper lists, nested maps and tuples, ip
%% tuples of the wrong arity or range, odd Unix paths) and arbitrary
%% terms, with unknown and non-atom keys. Loopback only: an `ip' the
%% generator makes valid is 127.0.0.1, a Unix path one under priv_dir,
%% and a port a free one of the kernel's (0) or one that cannot be had.
-module(sluice_opts_prop_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% PropEr's macros, spelled out as in sluice_ack_SUITE (Debian's
%% erlang-proper ships no proper.hrl).
-define(FORALL(X, RawType, Prop), proper:forall(RawType, fun(X) -> Prop end)).
-define(LET(X, RawType, Gen), proper_types:bind(RawType, fun(X) -> Gen end, false)).
-define(WHENFAIL(Action, Prop), proper:whenfail(fun() -> Action end, fun() -> Prop end)).
-import(proper_types, [frequency/1, integer/0, integer/2, list/1, oneof/1,
                       float/0, atom/0, any/0, resize/2, exactly/1, elements/1]).

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([validate_answers_and_format_error_names_the_option/1,
         start_listener_answers_and_cleans_up/1,
         start_listener_takes_any_term/1,
         child_spec_returns_or_raises_argument_error/1,
         keyword_lists_as_maps/1,
         tls_opts_answer/1,
         listen_sockets_answer/1,
         changes_on_a_running_listener_keep_it_serving/1]).

-define(HANDLER, {sluice_proto_echo, []}).
-define(LOOPBACK, {127, 0, 0, 1}).
-define(RUNNING, prop_running).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [validate_answers_and_format_error_names_the_option,
     start_listener_answers_and_cleans_up,
     start_listener_takes_any_term,
     child_spec_returns_or_raises_argument_error,
     keyword_lists_as_maps,
     tls_opts_answer,
     listen_sockets_answer,
     changes_on_a_running_listener_keep_it_serving].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    %% Unix paths the generator makes valid live here (short: sun_path),
    %% and the PEM files of tls_opts: good ones, and wrong ones
    Dir = filename:join("/tmp", "sluice_prop_" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    persistent_term:put({?MODULE, dir}, Dir),
    Server = maps:get(server, sluice_tls_test_lib:certs()),
    Good = sluice_tls_test_lib:write_pem(Dir, Server),
    Garbage = filename:join(Dir, "garbage.pem"),
    ok = file:write_file(Garbage, <<"-----BEGIN CERTIFICATE-----\nnot base64\n">>),
    Empty = filename:join(Dir, "empty.pem"),
    ok = file:write_file(Empty, <<>>),
    persistent_term:put({?MODULE, tls}, #{files => Good, server => Server,
                                          others => [Garbage, Empty, Dir]}),
    [{dir, Dir} | Config].

end_per_testcase(_Case, Config) ->
    case ?config(tc_status, Config) of
        ok -> ok;
        _ -> ct:pal("last start_listener/2 options: ~p",
                    [persistent_term:get({?MODULE, current}, none)])
    end,
    _ = persistent_term:erase({?MODULE, current}),
    _ = sluice:stop_listener(?RUNNING),
    _ = [sluice:stop_listener(N) || N <- names()],
    _ = file:del_dir_r(?config(dir, Config)),
    ok.

check(Prop, N) ->
    ?assertEqual(true, proper:quickcheck(Prop, [{numtests, N}, {to_file, user},
                                                {max_size, 20}])).

%%% ------------------------------------------------------------------
%%% Properties
%%% ------------------------------------------------------------------

%% sluice_opts alone (no socket opened): every map answers, every error
%% is worded. Many runs, since this is cheap.
validate_answers_and_format_error_names_the_option(_Config) ->
    check(?FORALL(Opts, opts(),
                  ?WHENFAIL(ct:pal("opts: ~p", [Opts]),
                            validate_answers(Opts))), 1000).

validate_answers(Opts) ->
    case answer(fun() -> sluice_opts:validate(Opts) end) of
        {returned, {ok, M}} when is_map(M) -> true;
        {returned, {error, Reason}} -> worded(Reason);
        Other -> ct:pal("validate/1: ~p", [Other]), false
    end.

start_listener_answers_and_cleans_up(_Config) ->
    check(?FORALL(Opts, opts(),
                  ?WHENFAIL(ct:pal("opts: ~p", [Opts]),
                            start_answers(prop_start, Opts))), 300).

start_listener_takes_any_term(_Config) ->
    check(?FORALL(Opts, oneof([any_term(), list(kv()), list(any_term())]),
                  ?WHENFAIL(ct:pal("opts: ~p", [Opts]),
                            start_answers(prop_any, Opts))), 300).

start_answers(Name, Opts) ->
    persistent_term:put({?MODULE, current}, Opts),
    R = bounded(fun() -> sluice:start_listener(Name, Opts) end),
    _ = sluice:stop_listener(Name),
    case R of
        {returned, {ok, Pid}} when is_pid(Pid) -> true;
        {returned, {error, Reason}} -> worded(Reason);
        Other -> ct:pal("start_listener/2: ~p", [Other]), false
    end.

child_spec_returns_or_raises_argument_error(_Config) ->
    check(?FORALL({Which, Opts}, {oneof([1, 2]), oneof([opts(), any_term(), list(kv())])},
                  ?WHENFAIL(ct:pal("child_spec/~p: ~p", [Which, Opts]),
                            child_spec_answers(Which, Opts))), 1000).

child_spec_answers(Which, Opts) ->
    Call = case Which of
               1 -> fun() -> sluice:child_spec(Opts) end;
               2 -> fun() -> sluice:child_spec(prop_spec, Opts) end
           end,
    case answer(Call) of
        {returned, #{id := _, start := _}} ->
            true;
        {raised, error, #{'__struct__' := 'Elixir.ArgumentError', '__exception__' := true,
                          message := Message, reason := Reason}, _} ->
            is_binary(Message) andalso worded(Reason)
                andalso Message =:= unicode:characters_to_binary(sluice:format_error(Reason));
        Other ->
            ct:pal("child_spec: ~p", [Other]), false
    end.

%% Elixir's form: the same options as a keyword list answer as the map
%% (the first of a repeated key wins, there is none here).
keyword_lists_as_maps(_Config) ->
    check(?FORALL(Opts, opts(),
                  ?WHENFAIL(ct:pal("opts: ~p", [Opts]),
                            keyword_answers(Opts))), 1000).

keyword_answers(Opts) ->
    KW = [{K, keyword(V)} || {K, V} <- maps:to_list(Opts)],
    Map = answer(fun() -> sluice_opts:validate(Opts) end),
    case answer(fun() -> sluice_opts:validate(KW) end) of
        {returned, {ok, _}} -> true;
        {returned, {error, Reason}} -> worded(Reason) andalso is_tuple(Map);
        Other -> ct:pal("validate/1 of ~p: ~p", [KW, Other]), false
    end.

%% socket_opts, tls_opts, alarms and framing's options as Elixir writes
%% them: keyword lists for maps.
keyword(M) when is_map(M) -> [{K, keyword(V)} || {K, V} <- maps:to_list(M)];
keyword(V) -> V.

%% TLS: a certificate and key that are good (as files or in memory),
%% with options drawn over them (the first of a repeated key wins), on
%% each transport.
tls_opts_answer(_Config) ->
    check(?FORALL(Opts, tls_listener(),
                  ?WHENFAIL(ct:pal("opts: ~p", [Opts]),
                            start_answers(prop_start, Opts))), 300).

%% A socket of the user's (listen_socket): listening or not, closed, of
%% the other backend, UDP, TLS, with the options it cannot take. Opened in
%% the case, so that none outlives it.
listen_sockets_answer(_Config) ->
    check(?FORALL({Kind, Opts}, {elements(socket_kinds()), opts()},
                  ?WHENFAIL(ct:pal("socket ~p, opts: ~p", [Kind, Opts]),
                            begin
                                S = open_socket(Kind),
                                try start_answers(prop_start, Opts#{listen_socket => S})
                                after close_socket(S)
                                end
                            end)), 300).

socket_kinds() ->
    [inet_listen, inet_listen6, inet_connected, inet_closed, udp, socket_listen,
     socket_closed, socket_bound, inet_backend_socket].

open_socket(inet_listen) ->
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]), L;
open_socket(inet_listen6) ->
    case gen_tcp:listen(0, [inet6, {ip, {0, 0, 0, 0, 0, 0, 0, 1}}]) of
        {ok, L} -> L;
        {error, _} -> open_socket(inet_listen)
    end;
open_socket(inet_connected) ->
    {ok, L} = gen_tcp:listen(0, [{ip, ?LOOPBACK}]),
    {ok, P} = inet:port(L),
    {ok, C} = gen_tcp:connect(?LOOPBACK, P, []),
    ok = gen_tcp:close(L),
    C;
open_socket(inet_closed) ->
    L = open_socket(inet_listen),
    ok = gen_tcp:close(L),
    L;
open_socket(udp) ->
    {ok, U} = gen_udp:open(0, [{ip, ?LOOPBACK}]), U;
open_socket(socket_listen) ->
    S = open_socket(socket_bound),
    ok = socket:listen(S),
    S;
open_socket(socket_closed) ->
    S = open_socket(socket_listen),
    ok = socket:close(S),
    S;
open_socket(socket_bound) ->
    {ok, S} = socket:open(inet, stream, tcp),
    ok = socket:bind(S, #{family => inet, addr => ?LOOPBACK, port => 0}),
    S;
open_socket(inet_backend_socket) ->
    {ok, L} = gen_tcp:listen(0, [{inet_backend, socket}, {ip, ?LOOPBACK}]), L.

%% (the listener closed a socket it took: closing it again is harmless)
close_socket(S) when is_port(S) -> catch gen_tcp:close(S), catch gen_udp:close(S), ok;
close_socket({'$socket', _} = S) -> _ = catch socket:close(S), ok;
close_socket(S) -> _ = catch gen_tcp:close(S), ok.

%% One listener runs; random changes are applied to it, each answered,
%% and after each the listener still echoes a line.
changes_on_a_running_listener_keep_it_serving(_Config) ->
    {ok, _} = sluice:start_listener(?RUNNING, #{ip => ?LOOPBACK, port => 0,
                                                handler => ?HANDLER}),
    check(?FORALL(Change, change(),
                  ?WHENFAIL(ct:pal("change: ~p", [Change]),
                            change_answers(Change))), 300).

change_answers({Fun, Arg}) ->
    R = answer(fun() -> sluice:Fun(?RUNNING, Arg) end),
    Answered = case R of
                   {returned, ok} -> true;
                   {returned, {error, Reason}} -> worded(Reason);
                   Other -> ct:pal("~p: ~p", [Fun, Other]), false
               end,
    %% a limit of 0 (or an alarm's) is a right answer, but refuses the
    %% echo below: put back
    ok = sluice:set_max_connections(?RUNNING, infinity),
    Answered andalso serves().

serves() ->
    #{port := Port} = sluice:info(?RUNNING),
    {ok, S} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}], 5000),
    ok = gen_tcp:send(S, <<"ping\n">>),
    Echo = recv_line(S, <<>>),
    ok = gen_tcp:close(S),
    Echo =:= <<"ping\n">>.

recv_line(S, Acc) ->
    case gen_tcp:recv(S, 0, 5000) of
        {ok, B} ->
            case <<Acc/binary, B/binary>> of
                <<"ping\n">> = Line -> Line;
                More when byte_size(More) < 5 -> recv_line(S, More);
                More -> More
            end;
        {error, Why} ->
            {error, Why}
    end.

%% answer/1 timed: a call slower than 10 s fails with its input, and the
%% input of a call that never answers is said by end_per_testcase/2
%% after the timetrap.
bounded(Fun) ->
    T0 = erlang:monotonic_time(millisecond),
    R = answer(Fun),
    case erlang:monotonic_time(millisecond) - T0 of
        Ms when Ms > 10000 -> {slow, Ms, R};
        _ -> R
    end.

%% How a call ended: returned, or raised (and how).
answer(Fun) ->
    try Fun() of
        V -> {returned, V}
    catch Class:Reason:Stack -> {raised, Class, Reason, hd(Stack ++ [none])}
    end.

%% format_error/1's words: a flat string (chardata that flattens), that
%% names the option at fault where the reason names one.
worded(Reason) ->
    case answer(fun() -> sluice:format_error(Reason) end) of
        {returned, Words} ->
            Flat = answer(fun() -> unicode:characters_to_list(Words) end),
            case Flat of
                {returned, L} when is_list(L), L =/= [] ->
                    names_option(Reason, L) orelse
                        begin ct:pal("~p worded ~ts", [Reason, L]), false end;
                _ ->
                    ct:pal("~p worded as no string: ~p", [Reason, Words]), false
            end;
        Other ->
            ct:pal("format_error(~p): ~p", [Reason, Other]), false
    end.

names_option({bad_option, K, _}, L) when is_atom(K) -> has(atom_to_list(K), L);
names_option({not_for_local, K, _}, L) -> has(atom_to_list(K), L);
names_option({not_with_listen_socket, K, _}, L) -> has(atom_to_list(K), L);
names_option({missing_option, K}, L) -> has(atom_to_list(K), L);
names_option({not_changeable, K}, L) -> has(atom_to_list(K), L);
names_option({unknown_option, _}, L) -> has("unknown option", L);
names_option(_, _) -> true.

has(Part, L) ->
    string:find(L, Part) =/= nomatch.

%%% ------------------------------------------------------------------
%%% Generators
%%% ------------------------------------------------------------------

%% Every option sluice_opts knows.
keys() ->
    [ip, port, handler, transport, num_acceptors, num_listen_sockets, num_conns_sups,
     reuseport, backlog, max_connections, max_connections_wait, active, socket_opts,
     idle_timeout, hibernate_after, park_after, gc_after_bytes, shutdown_timeout,
     tls_opts, handshake_timeout, proxy_protocol, proxy_timeout, proxy_max_size,
     framing, post_listen, listen_socket, alarms].

%% A map of options: a handler nearly always (without it only the missing
%% handler is said), the loopback address unless drawn, a few options
%% with values from near misses and anywhere, and now and then an
%% unknown or non-atom key.
opts() ->
    ?LET({Handler, Pairs, Extra},
         {frequency([{9, ?HANDLER}, {1, value(handler)}]),
          list(?LET(K, elements(keys() -- [handler]), {K, value(K)})),
          frequency([{4, []}, {1, list(odd_key())}])},
         begin
             M = maps:from_list(Extra ++ Pairs),
             M1 = maps:merge(#{ip => ?LOOPBACK, port => 0}, M),
             case Handler of
                 absent -> M1;
                 _ -> M1#{handler => Handler}
             end
         end).

odd_key() ->
    {oneof([atom(), elements([hanlder, handler_module, num_acceptor, 'Port', own_port,
                              name, prot, socket_opt, transport_options, certfile]),
            "port", <<"port">>, integer(), any_term()]),
     any_term()}.

kv() ->
    oneof([?LET(K, elements(keys()), {K, value(K)}), odd_key(), atom()]).

value(K) ->
    frequency([{5, near(K)}, {2, wrong()}, {1, any_term()}]).

%% Near misses shared by every option.
wrong() ->
    oneof([integer(-100, 0), elements([-1, 0, 1, 16#7fffffff, 16#80000000, 16#ffffffff,
                                       16#100000000, 1 bsl 63, 1 bsl 64, 1 bsl 200,
                                       -(1 bsl 64)]),
           float(), elements([1.0, 0.0, -0.0, 1.5e300]),
           elements(["1", "0", "-1", "4000", <<"1">>, <<"4000">>, "infinity",
                     <<"infinity">>, "", <<>>, "true", <<"true">>]),
           elements([true, false, nil, undefined, none, infinity, infinite, ok, error]),
           improper(), nested()]).

%% (exactly/1: PropEr takes a list for a type, and an improper one
%% crashed its shrinking)
improper() ->
    oneof([exactly(L) || L <- [[a | b], [{nodelay, true} | true], [1, 2 | 3],
                               [{max, 1} | {max, 2}], [[] | []], [{certfile, "x"} | x]]]).

nested() ->
    ?LET(V, resize(4, any_term()),
         oneof([#{a => V}, #{V => V}, {V}, {V, V}, {V, V, V}, [V], [{V, V}], [[V]]])).

any_term() ->
    resize(6, any()).

%% Values near an option's own.
near(ip) ->
    oneof([?LOOPBACK, {127, 0, 0, 1, 0}, {127, 0, 0}, {256, 0, 0, 1}, {-1, 0, 0, 1},
           {127.0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 1}, {0, 0, 0, 0, 0, 0, 0, 65536},
           {0, 0, 0, 0, 0, 0, 1}, {}, "127.0.0.1", <<"127.0.0.1">>, localhost, loopback,
           any, {local, path()}, {local, path(), extra}, {local}, {remote, "x"},
           ?LET(T, list(integer(-1, 300)), list_to_tuple(T))]);
near(port) ->
    oneof([0, -1, 65535, 65536, 1, 80, integer(), "4000", <<"0">>, 0.0]);
near(handler) ->
    oneof([absent, sluice_proto_echo, {sluice_proto_echo}, {sluice_proto_echo, [], x},
           {nonexisting_handler_xyz, []}, {"sluice_proto_echo", []}, {lists, []},
           {sluice_handler, []}, {'Elixir.Foo', []}, {self, []}]);
near(transport) ->
    oneof([inet, socket, ssl, tcp, gen_tcp, ranch_tcp, ranch_ssl, tls, 'Elixir.Inet',
           lists, "inet", <<"ssl">>, {inet}, sluice_transport_inet, sluice_transport]);
near(K) when K =:= num_acceptors; K =:= num_listen_sockets; K =:= num_conns_sups;
             K =:= backlog ->
    oneof([1, 2, 0, -1, 65535, 65536, 1 bsl 70, 2.0, "10", infinity]);
near(K) when K =:= reuseport; K =:= proxy_protocol ->
    oneof([true, false, "true", 1, 0, yes, nil, v1, v2]);
near(max_connections) ->
    oneof([0, 1, infinity, infinite, (1 bsl 63) - 2, (1 bsl 63) - 1, 1 bsl 63, -1,
           "1000", 1.0e3]);
near(max_connections_wait) ->
    oneof([0, 1, 3600000, 3600001, -1, infinity, 1.0]);
near(active) ->
    oneof([adaptive, false, once, true, 1, 32767, 32768, 0, -1, twice, "once", 1.0]);
near(K) when K =:= idle_timeout; K =:= hibernate_after; K =:= park_after;
             K =:= handshake_timeout; K =:= proxy_timeout; K =:= shutdown_timeout ->
    oneof([1, 5000, infinity, 0, -1, 16#ffffffff, 16#ffffffff - 1000, 16#100000000,
           infinite, hibernate, "5000", 5000.0]);
near(gc_after_bytes) ->
    oneof([1, 16384, infinity, 0, -1, 1 bsl 70, 1.0e6]);
near(proxy_max_size) ->
    oneof([16, 15, 65551, 65552, 4096, 0, -16]);
near(socket_opts) ->
    oneof([list(socket_opt()), ?LET(L, list(socket_opt()), maps:from_list(
                                                              [O || O = {_, _} <- L])),
           exactly([{nodelay, true} | {buffer, 1}]), nodelay, {nodelay, true}, #{nodelay => 1}]);
near(tls_opts) ->
    oneof([[], list(tls_opt()), ?LET(L, list(tls_opt()), maps:from_list([O || O = {_, _} <- L])),
           exactly([{certfile, "x"} | y]), certfile, {certfile, "x"}, #{certfile => #{}}]);
near(framing) ->
    oneof([none, line, crlf, lf, length, {line}, {line, frame_opts()},
           {length, oneof([1, 2, 4, 3, 0, 8, -1, x])},
           {length, oneof([1, 2, 4, 3])
           , frame_opts()},
           {split, fun(B) -> {ok, B, <<>>} end}, {split, fun() -> ok end},
           {split, not_a_fun}, {split, fun(B) -> {ok, B, <<>>} end, frame_opts()},
           {split, fun(B) -> B end, frame_opts(), x}, {line, frame_opts(), x},
           {length, 2, frame_opts(), x}, {raw}, "line", <<"line">>]);
near(post_listen) ->
    oneof([none, fun(_) -> ok end, fun(_) -> {error, nope} end, fun(_) -> weird end,
           fun(_) -> error(boom) end, fun(_) -> exit(boom) end, fun(_) -> throw(boom) end,
           fun(S) -> _ = catch gen_tcp:close(S), _ = catch socket:close(S), ok end,
           fun(S) -> _ = catch gen_tcp:close(S), _ = catch socket:close(S), {error, x} end,
           fun() -> ok end, fun(_, _) -> ok end, {m, f}, {erlang, is_port}]);
near(listen_socket) ->
    oneof([none, undefined, make_ref(), self(), hd(erlang:ports()), {'$inet', x, y},
           {'$socket', make_ref()}, 1, "socket", {sslsocket, x, y}]);
near(alarms) ->
    oneof([#{}, [], ?LET(L, list({any_term(), alarm()}), maps:from_list(L)),
           list({atom(), alarm()}), list({atom(), ?LET(A, alarm(), keyword(A))}),
           exactly(#{a => [x | y]}), exactly([{a, [{type, num_connections} | x]}]), exactly([x | y]), #{a => 1},
           [{a, #{}}, b]]).

socket_opt() ->
    oneof([{elements([buffer, recbuf, sndbuf, nodelay, keepalive, priority, tos, linger,
                      send_timeout, send_timeout_close, high_watermark, low_watermark,
                      high_msgq_watermark, low_msgq_watermark, delay_send, raw, active,
                      packet, mode, binary, reuseaddr, certfile, ip, port, backlog,
                      inet6, ipv6_v6only, foo]),
             oneof([true, false, 0, 1, -1, 255, 256, 16#7fffffff, 16#80000000,
                    64 * 1024 * 1024, 64 * 1024 * 1024 + 1, infinity, {true, 5},
                    {false, -1}, {true, 1 bsl 40}, {5, true}, "1", 1.5, once, line])},
           {raw, oneof([0, 1, 6, -1, 1 bsl 40, x]), oneof([0, 1, 9, 100, -1, 1 bsl 40, x]),
            oneof([<<>>, <<1:32/native>>, <<1:64>>, "1", 1, <<1:3>>])},
           {raw, 1, 2}, {raw, 1, 2, <<1:32>>, x}, binary, list, inet6, nodelay, {},
           {nodelay}, {nodelay, true, x}, {"nodelay", true}, {1, 2}]).

tls_opt() ->
    oneof([{elements([certfile, keyfile, cacertfile, cert, key, certs_keys, versions,
                      verify, alpn_preferred_protocols, sni_hosts, sni_fun, ciphers,
                      signature_algs, password, fail_if_no_peer_cert, active, foo,
                      reuse_sessions, handshake, log_level]),
             oneof([path(), "/nonexistent/x.pem", <<"/nonexistent/x.pem">>, "", <<>>,
                    ['tlsv1.3'], ['tlsv1.9'], [tlsv1], verify_peer, verify_none, true,
                    1, -1, [], exactly([x | y]), #{}, {der, x}, [#{}], [#{certfile => "x"}],
                    [{"host", []}], {asn1, x}, fun(_) -> ok end, any_term()])},
           certfile, {certfile}, {certfile, "x", y}, {"certfile", "x"}, {1, 2}]).

frame_opts() ->
    oneof([#{}, [], [{max, oneof([0, 1, -1, 1 bsl 64, 1.0, infinity, "8"])}],
           #{max => oneof([0, 8, -1, x])}, [{delimiter, oneof([lf, crlf, cr, <<"\n">>, x])}],
           [{endian, oneof([big, little, middle, native])}],
           [{includes_header, oneof([true, false, yes])}], [{foo, 1}], exactly([x | y]), [x],
           #{1 => 2}, exactly([{max, 1} | {max, 2}]), any_term()]).

alarm() ->
    ?LET({Type, Threshold, Cooldown, Callback, Extra},
         {oneof([num_connections, connections, "num_connections", any_term()]),
          oneof([0, 1, 10, -1, 1.0, infinity, 1 bsl 64, "10"]),
          oneof([0, 1, 1000, -1, infinity, 1 bsl 64, 1.0]),
          oneof([fun(_, _, _, _) -> ok end, fun(_) -> ok end, {m, f}, undefined,
                 fun(_, _, _, _) -> exit(boom) end]),
          list({oneof([atom(), any_term()]), any_term()})},
         begin
             Base = #{type => Type, threshold => Threshold, cooldown => Cooldown,
                      callback => Callback},
             maps:merge(maps:from_list(Extra),
                        maps:filter(fun(_, _) -> rand:uniform(5) > 1 end, Base))
         end).

%% Odd Unix paths, and good ones under the case's directory.
path() ->
    Dir = persistent_term:get({?MODULE, dir}, "/tmp"),
    oneof(["", <<>>, "a\0b", <<"a", 0, "b">>, <<0, "abstract">>, [0],
           lists:duplicate(200, $a), binary:copy(<<"a">>, 200), [$a, [$b, [$c]]],
           exactly([$a | b]), [1.0], [-1], [16#110000], [16#10FFFF], <<255, 254>>, [255, 254],
           "/", ".", "..", "/nonexistent/dir/x.sock",
           ?LET(N, integer(0, 1000), filename:join(Dir, "s" ++ integer_to_list(N))),
           ?LET(N, integer(0, 1000), list_to_binary(filename:join(Dir, "b" ++
                                                                    integer_to_list(N)))),
           x, 1, {a}, #{}]).

tls_listener() ->
    #{files := Files, server := Server} = persistent_term:get({?MODULE, tls}),
    InMemory = [O || O = {K, _} <- Server, K =:= cert orelse K =:= key],
    ?LET({T, Base, Extra, Other},
         {elements([ssl, ssl, inet, socket]), elements([Files, InMemory, []]),
          list(tls_opt2()), frequency([{3, #{}}, {1, opts_no_handler()}])},
         maps:merge(Other, #{handler => ?HANDLER, ip => ?LOOPBACK, port => 0,
                             transport => T, tls_opts => Extra ++ Base})).

tls_opt2() ->
    #{files := Files, server := Server, others := Others} =
        persistent_term:get({?MODULE, tls}),
    File = elements([F || {_, F} <- Files] ++ Others ++
                        ["/nonexistent/x.pem", <<"/nonexistent">>, "", x, 1, [$a, 1.0]]),
    {cert, Der} = lists:keyfind(cert, 1, Server),
    {key, Key} = lists:keyfind(key, 1, Server),
    Cert = elements([Der, <<>>, <<1, 2, 3>>, [Der], [Der, <<>>], x]),
    KeyV = elements([Key, {'ECPrivateKey', <<>>}, {'RSAPrivateKey', <<1>>}, {rsa, x}, <<>>,
                     #{algorithm => ecdsa, sign_fun => x}, x]),
    oneof([{certfile, File}, {keyfile, File}, {cacertfile, File},
           {cert, Cert}, {key, KeyV}, {cacerts, elements([[Der], [<<>>], [], x, [x]])},
           {certs_keys, elements([[], [#{}], [#{certfile => "/nonexistent"}],
                                  [#{cert => Der, key => Key}], [#{cert => <<>>, key => x}],
                                  [x], x, #{}])},
           {certs_keys, ?LET(F, File, [#{certfile => F, keyfile => F}])},
           {password, elements(["", "x", <<"x">>, 1, fun() -> "x" end])},
           {versions, elements([['tlsv1.3'], ['tlsv1.2'], ['tlsv1.9'], [], tlsv1, [x]])},
           {verify, elements([verify_peer, verify_none, verify, true])},
           {fail_if_no_peer_cert, elements([true, false, 1])},
           {sni_hosts, elements([[], [{"h", []}], [{<<"h">>, []}], [{h, []}], x,
                                 exactly([{"h", []} | x]), [{"h", exactly([{certfile, x} | y])}],
                                 [{"h", [{certfile, "/nonexistent"}, {keyfile, "/n"}]}],
                                 [{"h", x}], [x], [{"h", [x]}]])},
           {sni_hosts, ?LET(F, File, [{"h", [{certfile, F}, {keyfile, F}]}])},
           {sni_fun, elements([fun(_) -> [] end, fun() -> [] end, x])},
           {signature_algs, elements([[], [rsa_pss_rsae_sha256], [{sha256, ecdsa}],
                                      [ecdsa_secp384r1_sha384], x, [x]])},
           {session_tickets, elements([disabled, stateless, stateful, x])},
           {handshake, elements([hello, full, x])},
           {alpn_preferred_protocols, elements([[<<"h2">>], ["h2"], [], x, [<<>>]])},
           {ciphers, elements([[], x, "x", [x], ssl:cipher_suites(default, 'tlsv1.2')])},
           {reuse_sessions, elements([true, false, save, x])},
           {log_level, elements([debug, none, x])},
           {elements([nodelay, active, packet, foo, ip, port, cb_info, ssl_imp]),
            any_term()},
           tls_opt()]).

%% A change on the running listener.
change() ->
    oneof([{set_transport_opts, oneof([opts_no_handler(), any_term(), list(kv())])},
           {set_handler_opts, any_term()},
           {set_max_connections, oneof([near(max_connections), wrong(), any_term()])}]).

opts_no_handler() ->
    ?LET(M, opts(), maps:without([handler, ip, port], M)).

names() ->
    [prop_start, prop_any, prop_spec].
