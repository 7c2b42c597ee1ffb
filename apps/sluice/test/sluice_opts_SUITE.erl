%% Options on running listeners, on both backends: a proplist starts a
%% listener as the map would (bare atoms true, the first of a repeated key
%% winning); option values that passed validation and then failed at
%% start (a crash report and a raw reason), at the first connection or at
%% stop are refused as `{bad_option, K, V}' with nothing logged; the
%% largest values still accepted really work; set_max_connections/2
%% refuses a limit out of range with an error, not a badarg; `priority'
%% reaches every connection.
-module(sluice_opts_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2,
         init_per_testcase/2, end_per_testcase/2]).
-export([proplist_starts_a_listener/1,
         first_of_a_repeated_option_wins/1,
         bad_socket_option_values_are_bad_options/1,
         largest_socket_option_values_serve/1,
         set_max_connections_refuses_a_limit_out_of_range/1,
         largest_shutdown_timeout_stops_cleanly/1,
         priority_is_set_on_every_connection/1,
         unknown_options_are_said_with_what_was_meant/1,
         ranch_options_are_said_with_sluices_names/1,
         another_librarys_handler_is_said_as_such/1,
         a_string_value_is_said_as_one/1,
         a_string_hint_offers_only_what_the_option_takes/1]).

-define(LOOPBACK, {127, 0, 0, 1}).
-define(HANDLER, {sluice_proto_echo, []}).
-define(INT_MAX, 16#7fffffff).

suite() -> [{timetrap, {seconds, 30}}].

all() ->
    [{group, inet}, {group, socket}].

groups() ->
    sluice_test_lib:backend_groups(
      [proplist_starts_a_listener, first_of_a_repeated_option_wins,
       bad_socket_option_values_are_bad_options, largest_socket_option_values_serve,
       set_max_connections_refuses_a_limit_out_of_range,
       largest_shutdown_timeout_stops_cleanly,
       priority_is_set_on_every_connection,
       unknown_options_are_said_with_what_was_meant,
       ranch_options_are_said_with_sluices_names,
       another_librarys_handler_is_said_as_such,
       a_string_value_is_said_as_one,
       a_string_hint_offers_only_what_the_option_takes]).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_log_forwarder:stop(),
    sluice_test_lib:stop_listener(?config(name, Config)),
    ok.

base() ->
    [{ip, ?LOOPBACK}, {port, 0}, {transport, sluice_test_lib:transport()},
     {handler, ?HANDLER}].

echo_ok(Port) ->
    {ok, S} = sluice_test_lib:connect(Port),
    ok = gen_tcp:send(S, <<"ping">>),
    Got = sluice_test_lib:recv_exactly(S, 4, 2000),
    ok = gen_tcp:close(S),
    Got =:= <<"ping">>.

%% Everything logged while Fun ran (sluice_log_forwarder), as text.
logged_during(Fun) ->
    ok = sluice_log_forwarder:start(self()),
    try Fun() of
        Result ->
            sluice_log_forwarder:stop(),
            {Result, flush_logs()}
    after
        sluice_log_forwarder:stop()
    end.

flush_logs() ->
    receive {log, _, Text, _} -> [Text | flush_logs()] after 200 -> [] end.

%% `[reuseport | Opts]', as proplists and Elixir keyword lists have it,
%% starts the listener with reuseport (it was `{error, not_a_map}').
proplist_starts_a_listener(Config) ->
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, [reuseport | base()]),
    {ok, #{opts := #{reuseport := true, own_port := false}}} = sluice_registry:lookup(Name),
    ?assert(echo_ok(sluice_test_lib:port(Name))).

%% `[{idle_timeout, 100} | Defaults]' closes an idle client after 100 ms,
%% not after the 60 s further down the list (the last used to win).
first_of_a_repeated_option_wins(Config) ->
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, [{idle_timeout, 100}, {idle_timeout, 60000} | base()]),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = sluice_test_lib:expect_closed(S, 5000).

%% A thousand_island user's options (an Elixir keyword list), a typo, a
%% key read from a config file as a string, and the name among
%% start_listener/2's options: each is refused, nothing starts, and
%% format_error/1 says what was meant (it said "unknown option
%% read_timeout" and left the reader to find idle_timeout in the docs).
%% set_transport_opts/2's typos are said the same way.
unknown_options_are_said_with_what_was_meant(Config) ->
    Name = ?config(name, Config),
    Cases = [{{read_timeout, 5000}, "idle_timeout"},
             {{transport_options, [{nodelay, true}]}, "socket_opts"},
             {{transport_module, 'Elixir.ThousandIsland.Transports.SSL'}, "transport =>"},
             {{num_connections, 16384}, "max_connections"},
             {{max_connections_retry_wait, 1000}, "max_connections_wait"},
             {{framming, line}, "did you mean framing?"},
             {{idle_timout, 5000}, "did you mean idle_timeout?"},
             {{tls_options, []}, "did you mean tls_opts?"},
             {{<<"framing">>, line}, "option names are atoms: framing"},
             {{name, Name}, "first argument"}],
    lists:foreach(
      fun({Opt = {K, _}, Said}) ->
              R = sluice:start_listener(Name, [Opt | base()]),
              ?assertEqual({error, {unknown_option, K}}, R),
              Line = sluice:format_error(element(2, R)),
              ct:log("~0p: ~s", [Opt, Line]),
              ?assertNotEqual(nomatch, string:find(Line, Said), Line)
      end, Cases),
    ?assertEqual([], [N || N <- sluice:listeners(), N =:= Name]),
    {ok, _} = sluice:start_listener(Name, base()),
    R = sluice:set_transport_opts(Name, [{max_conections, 10}]),
    ?assertEqual({error, {unknown_option, max_conections}}, R),
    ?assertNotEqual(nomatch, string:find(sluice:format_error(element(2, R)),
                                         "did you mean max_connections?")).

%% A ranch user's options (1.x and 2.x, docs/from-ranch.md's table) that
%% sluice names otherwise or has no use for, and ranch's transports: each
%% is refused, nothing starts, and format_error/1 says sluice's name or
%% what to do, as for thousand_island's (it said "unknown option
%% shutdown", "unknown option socket", and listed inet, socket and ssl
%% for `transport => ranch_tcp' without saying which one it is). The
%% options ranch and sluice share start.
ranch_options_are_said_with_sluices_names(Config) ->
    Name = ?config(name, Config),
    Unknown = [{{shutdown, 5000}, "(ranch's: here shutdown_timeout, ms the connections get "
                                  "when the listener stops without a drain)"},
               {{socket, make_ref()}, "(ranch 1's: here listen_socket, a listen socket "
                                      "opened by the caller)"},
               {{post_listen_callback, fun(_) -> ok end}, "(ranch's: here post_listen, "},
               {{ack_timeout, 5000}, "(ranch 1's: here handshake_timeout)"},
               {{connection_type, supervisor}, "(ranch's: here every connection is sluice's "
                                               "process running the handler; "},
               {{logger, logger}, "(ranch's: sluice logs through OTP's logger"}],
    lists:foreach(
      fun({Opt = {K, _}, Said}) ->
              R = sluice:start_listener(Name, [Opt | base()]),
              ?assertEqual({error, {unknown_option, K}}, R),
              Line = sluice:format_error(element(2, R)),
              ct:log("~0p: ~s", [Opt, Line]),
              Start = "unknown option " ++ atom_to_list(K) ++ " " ++ Said,
              ?assertNotEqual(nomatch, string:prefix(Line, Start), Line)
      end, Unknown),
    Transports = [{ranch_tcp, "; ranch_tcp is ranch's: here inet"},
                  {gen_tcp, "; for gen_tcp, here inet"},
                  {ranch_ssl, "; ranch_ssl is ranch's: here ssl, with tls_opts"},
                  {'Elixir.ThousandIsland.Transports.TCP',
                   "; 'Elixir.ThousandIsland.Transports.TCP' is thousand_island's: here inet"}],
    lists:foreach(
      fun({T, Said}) ->
              R = sluice:start_listener(Name, [{transport, T} | base()]),
              ?assertEqual({error, {bad_option, transport, T}}, R),
              Line = sluice:format_error(element(2, R)),
              ct:log("~0p: ~s", [T, Line]),
              %% the sentence there was, then the hint
              ?assertEqual(lists:flatten(
                             io_lib:format("bad value for option transport: ~0p (expected inet "
                                           "(gen_tcp, the inet driver), socket (OTP's socket "
                                           "NIF), ssl (TLS) or a module implementing the "
                                           "sluice_transport behaviour)~s", [T, Said])),
                           Line)
      end, Transports),
    ?assertEqual([], [N || N <- sluice:listeners(), N =:= Name]),
    %% the names they share are sluice's
    {ok, _} = sluice:start_listener(Name, [{num_acceptors, 2}, {num_conns_sups, 2},
                                           {num_listen_sockets, 1}, {max_connections, 10},
                                           {handshake_timeout, 1000}, {socket_opts, []},
                                           {alarms, #{}} | base()]).

%% A thousand_island handler (`use ThousandIsland.Handler': callbacks
%% with the socket) or a ranch protocol given as the handler is refused
%% and said as what it looks like, with sluice's callbacks; the generic
%% "expected ... init/2 and handle_data/2 exported" sent its porter to
%% check exports that looked right to them.
another_librarys_handler_is_said_as_such(Config) ->
    Name = ?config(name, Config),
    Cases = [{'Elixir.Hunt.TIHandler', [{handle_connection, 2}, {handle_data, 3}],
              "looks like a thousand_island handler"},
             {hunt_ranch_protocol, [{start_link, 3}], "looks like a ranch protocol"}],
    lists:foreach(
      fun({M, Exports, Said}) ->
              {module, M} = load_module_exporting(M, Exports),
              R = sluice:start_listener(Name, [{handler, {M, []}} | base()]),
              ?assertEqual({error, {bad_option, handler, {M, []}}}, R),
              Line = sluice:format_error(element(2, R)),
              ct:log("~s", [Line]),
              ?assertNotEqual(nomatch, string:find(Line, Said), Line),
              ?assertNotEqual(nomatch, string:find(Line, "init/2"), Line),
              _ = code:purge(M),
              true = code:delete(M)
      end, Cases),
    %% Any other module that is not a handler keeps the generic words.
    ?assertMatch("bad value for option handler: {lists,[]} (expected {Module, Opts} " ++ _,
                 sluice:format_error({bad_option, handler, {lists, []}})).

%% A value read from the environment or a config file is a string
%% (Elixir's `port: System.get_env("PORT")'): refused as before, the
%% error term unchanged, and format_error/1 says that the string is the
%% fault and what to give instead ("bad value for option port:
%% <<\"4000\">> (expected an integer 0..65535 ...)" left the quotes to
%% be noticed). A string that reads as nothing expected keeps the plain
%% words.
a_string_value_is_said_as_one(Config) ->
    Name = ?config(name, Config),
    Cases = [{{port, <<"4000">>}, "a string: give the integer, 4000 (binary_to_integer/1; "
              "Elixir: String.to_integer/1)"},
             {{port, "4000"}, "give the integer, 4000 (list_to_integer/1"},
             {{idle_timeout, <<"infinity">>}, "give the atom, infinity (Elixir: :infinity)"},
             {{max_connections, <<"1000">>}, "give the integer, 1000"},
             {{reuseport, <<"true">>}, "give the boolean, true"},
             {{ip, <<"127.0.0.1">>}, "an address is a tuple, {127,0,0,1} here "
              "(inet:parse_address/1; Elixir: :inet.parse_address(~c\"127.0.0.1\"))"},
             {{ip, "::1"}, "an address is a tuple, {0,0,0,0,0,0,0,1} here"},
             {{ip, <<"/run/app.sock">>}, "a Unix socket's path goes in {local, Path}"}],
    lists:foreach(
      fun({Opt = {K, V}, Said}) ->
              R = sluice:start_listener(Name, [Opt | base()]),
              ?assertEqual({error, {bad_option, K, V}}, R),
              Line = sluice:format_error(element(2, R)),
              ct:log("~0p: ~s", [Opt, Line]),
              ?assertNotEqual(nomatch, string:find(Line, "(expected "), Line),
              ?assertNotEqual(nomatch, string:find(Line, Said), Line)
      end, Cases),
    [?assertEqual(nomatch, string:find(sluice:format_error({bad_option, K, V}), "a string"))
     || {K, V} <- [{port, <<"four">>}, {port, 70000}, {ip, <<"localhost">>}, {port, [1, 2]}]],
    ?assertEqual([], [N || N <- sluice:listeners(), N =:= Name]).

%% The hint for a string offers the value the string reads as only if
%% the option takes it: `port => "true"' was told "give the boolean,
%% true", `reuseport => "1"' "give the integer, 1", `port => "99999"'
%% "give the integer, 99999", each refused in turn. Those keep the plain
%% words; a string that reads as a value the option takes keeps its hint.
a_string_hint_offers_only_what_the_option_takes(_Config) ->
    Misleading = [{port, <<"true">>}, {port, "infinity"}, {port, <<"99999">>},
                  {reuseport, <<"1">>}, {proxy_protocol, "0"},
                  {max_connections, <<"-1">>}, {idle_timeout, "0"},
                  {num_acceptors, <<"false">>}, {shutdown_timeout, <<"0">>}],
    lists:foreach(
      fun({K, V}) ->
              Line = sluice:format_error({bad_option, K, V}),
              ct:log("~0p: ~s", [{K, V}, Line]),
              ?assertNotEqual(nomatch, string:find(Line, "(expected "), Line),
              ?assertEqual(nomatch, string:find(Line, "a string"), Line)
      end, Misleading),
    Kept = [{{active, <<"true">>}, "give the boolean, true"},
            {{active, "5"}, "give the integer, 5"},
            {{max_connections, <<"infinity">>}, "give the atom, infinity"},
            {{reuseport, "false"}, "give the boolean, false"}],
    [?assertNotEqual(nomatch, string:find(sluice:format_error({bad_option, K, V}), Said))
     || {{K, V}, Said} <- Kept].

%% A module made here that exports functions of these arities, each
%% returning ok.
load_module_exporting(M, Exports) ->
    Forms = [{attribute, 1, module, M}, {attribute, 1, export, Exports}]
        ++ [{function, 1, F, A, [{clause, 1, [{var, 1, '_'} || _ <- lists:seq(1, A)], [],
                                  [{atom, 1, ok}]}]} || {F, A} <- Exports],
    {ok, M, Bin} = compile:forms(Forms),
    code:load_binary(M, atom_to_list(M) ++ ".beam", Bin).

%% On the socket backend these failed the start with a crash report and
%% `{{invalid, ...}, Opt}' (or `{einval, Opt}'); on inet they started with
%% their high bits dropped. Now both refuse them up front, log nothing,
%% and a listener with good options starts under the same name after.
bad_socket_option_values_are_bad_options(Config) ->
    Name = ?config(name, Config),
    Bad = [{buffer, 0}, {buffer, 1 bsl 36}, {recbuf, 1 bsl 40}, {priority, 1 bsl 40},
           {linger, {true, 1 bsl 40}}, {raw, 1, 2, <<>>}, {raw, 99999, 99999, <<1, 2, 3, 4>>}],
    {Results, Logs} =
        logged_during(fun() ->
                              [{O, sluice:start_listener(Name, [{socket_opts, [O]} | base()])}
                               || O <- Bad]
                      end),
    ct:log("results ~p~nlogged ~p", [Results, Logs]),
    [?assertEqual({O, {error, {bad_option, socket_opts, O}}}, R) || R = {O, _} <- Results],
    ?assertEqual([], Logs),
    ?assertEqual([], [N || N <- sluice:listeners(), N =:= Name]),
    {ok, _} = sluice:start_listener(Name, base()),
    ?assert(echo_ok(sluice_test_lib:port(Name))).

%% The largest values still accepted are ones both backends take: the
%% listener starts and serves (a 64 MiB `buffer' is a 64 MiB read on the
%% socket backend).
largest_socket_option_values_serve(Config) ->
    Name = ?config(name, Config),
    SO = [{buffer, 64 * 1024 * 1024}, {recbuf, ?INT_MAX}, {sndbuf, ?INT_MAX},
          {linger, {true, ?INT_MAX}}, {send_timeout, ?INT_MAX}, {tos, 255},
          {high_msgq_watermark, ?INT_MAX}],
    {ok, _} = sluice:start_listener(Name, [{socket_opts, SO} | base()]),
    ?assert(echo_ok(sluice_test_lib:port(Name))),
    ?assert(echo_ok(sluice_test_lib:port(Name))).

%% `priority' (SO_PRIORITY) is the one socket option an accepted socket
%% does not inherit from its listen socket on Linux: the inet transport
%% set it on each connection, the socket transport did not, and its
%% connections ran at priority 0. Read on the connection's own socket.
priority_is_set_on_every_connection(Config) ->
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, [{socket_opts, [{priority, 5}]},
                                           {handler, {sluice_api_handler, #{test => self()}}}
                                           | base()]),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    #{socket := Sock} = receive {init, _, Conn} -> Conn after 5000 -> error(no_init) end,
    Priority = case ?config(transport, Config) of
                   inet -> inet:getopts(Sock, [priority]);
                   socket -> sluice_socket_opts:get(Sock, [priority])
               end,
    ?assertEqual({ok, [{priority, 5}]}, Priority),
    ok = gen_tcp:close(S).

%% 2^63 does not fit the atomic that holds the limit: an error (it was a
%% badarg, though the spec says `ok | {error, _}'), and the limit is left
%% as it was; the largest that fits is taken.
set_max_connections_refuses_a_limit_out_of_range(Config) ->
    Name = ?config(name, Config),
    {ok, _} = sluice:start_listener(Name, [{max_connections, 5} | base()]),
    ?assertEqual({error, {bad_option, max_connections, 1 bsl 63}},
                 sluice:set_max_connections(Name, 1 bsl 63)),
    ?assertMatch(#{max_connections := 5}, sluice:info(Name)),
    ?assertMatch({error, {bad_option, max_connections, _}},
                 sluice:start_listener({Name, 2}, [{max_connections, 1 bsl 63} | base()])),
    ?assertEqual(ok, sluice:set_max_connections(Name, (1 bsl 63) - 2)),
    ?assertMatch(#{max_connections := 9223372036854775806}, sluice:info(Name)),
    ?assert(echo_ok(sluice_test_lib:port(Name))).

%% The largest shutdown_timeout accepted stops without a crash (a
%% connection supervisor's shutdown is 1000 ms more: at 2^32 - 1000 the
%% stop crashed with timeout_value); one above it is refused at start.
largest_shutdown_timeout_stops_cleanly(Config) ->
    Name = ?config(name, Config),
    Max = (1 bsl 32) - 1001,
    ?assertEqual({error, {bad_option, shutdown_timeout, Max + 1}},
                 sluice:start_listener(Name, [{shutdown_timeout, Max + 1} | base()])),
    {ok, _} = sluice:start_listener(Name, [{shutdown_timeout, Max} | base()]),
    Port = sluice_test_lib:port(Name),
    {ok, S} = sluice_test_lib:connect(Port),
    ?assert(echo_ok(Port)),
    {Stopped, Logs} = logged_during(fun() -> sluice:stop_listener(Name) end),
    ct:log("logged ~p", [Logs]),
    ?assertEqual(ok, Stopped),
    ?assertEqual([], Logs),
    ok = sluice_test_lib:expect_closed(S, 2000).
