%% EUnit: sluice_opts' reading of option lists and the bounds it puts on
%% values that used to pass validation and then fail later: when the
%% listener started (a crash report and a raw reason instead of
%% `{bad_option, K, V}'), when it stopped, at the first connection (the
%% whole VM aborted), or at set_max_connections/2 (badarg).
-module(sluice_opts_tests).
-include_lib("eunit/include/eunit.hrl").

-define(HANDLER, {sluice_proto_echo, []}).
-define(BASE, [{ip, {127, 0, 0, 1}}, {port, 0}, {handler, ?HANDLER}]).
-define(INT_MAX, 16#7fffffff).
-define(MIB, (1024 * 1024)).

valid(Opts) ->
    case sluice_opts:validate(Opts) of
        {ok, V} -> V;
        Error -> erlang:error({not_valid, Opts, Error})
    end.

with(K, V) ->
    maps:from_list([{K, V} | ?BASE]).

on(Transport, SocketOpts) ->
    (with(socket_opts, SocketOpts))#{transport => Transport}.

%% --- lists: proplists and Elixir keyword lists -------------------------

%% `[reuseport | Opts]' as proplists read it: {reuseport, true}. It was
%% refused as `not_a_map'.
bare_atom_in_a_list_is_true_test() ->
    ?assertMatch(#{reuseport := true, own_port := false}, valid([reuseport | ?BASE])),
    ?assertMatch(#{proxy_protocol := true}, valid([proxy_protocol | ?BASE])).

%% `[{port, 4000} | Defaults]' overrides Defaults, as Keyword.get/2 and
%% proplists:get_value/2 read it. The last used to win.
first_of_a_repeated_key_wins_test() ->
    ?assertMatch(#{idle_timeout := 100},
                 valid([{idle_timeout, 100}, {idle_timeout, 60000} | ?BASE])),
    ?assertMatch(#{port := 4000}, valid([{port, 4000} | ?BASE] ++ [{port, 99999}])),
    ?assertMatch(#{reuseport := true, own_port := false},
                 valid([reuseport, {reuseport, false} | ?BASE])).

from_list_test() ->
    ?assertEqual({ok, #{a => true, b => 1}}, sluice_opts:from_list([a, {b, 1}, {a, 2}, {b, 3}])),
    ?assertEqual({ok, #{}}, sluice_opts:from_list([])),
    ?assertEqual({error, not_a_map}, sluice_opts:from_list([{a, 1}, 2])),
    ?assertEqual({error, not_a_map}, sluice_opts:from_list([{a, 1, 2}])),
    ?assertEqual({error, not_a_map}, sluice_opts:from_list([{a, 1} | b])).

not_a_proplist_is_not_a_map_test() ->
    ?assertEqual({error, not_a_map}, sluice_opts:validate([1, 2])),
    ?assertEqual({error, not_a_map}, sluice_opts:validate([{handler, ?HANDLER} | port])),
    ?assertEqual("options must be a map or a proplist", sluice:format_error(not_a_map)).

%% --- max_connections ----------------------------------------------------

%% The limit lives in a signed 64-bit atomic (sluice_stats): 2^63 and up
%% passed validation and then failed the start with badarg.
max_connections_fits_its_atomic_test() ->
    Max = (1 bsl 63) - 2,
    ?assertMatch(#{max_connections := Max}, valid(with(max_connections, Max))),
    ?assertMatch(#{max_connections := infinity}, valid(with(max_connections, infinity))),
    [?assertEqual({error, {bad_option, max_connections, N}},
                  sluice_opts:validate(with(max_connections, N)))
     || N <- [(1 bsl 63) - 1, 1 bsl 63, 1 bsl 64, -1, ten]],
    ?assertMatch("bad value for option max_connections: 9223372036854775808 (expected an "
                 "integer 0..9223372036854775806" ++ _,
                 sluice:format_error({bad_option, max_connections, 1 bsl 63})).

%% set_max_connections/2's path at run time: the same check, an error
%% instead of badarg, and the limit left as it was.
set_max_connections_checks_the_bound_test() ->
    St = sluice_stats:new(1, 10),
    ?assertEqual({error, {bad_option, max_connections, 1 bsl 63}},
                 sluice_stats:set_max_connections(St, 1 bsl 63)),
    ?assertMatch(#{max_connections := 10}, sluice_stats:read(St)),
    ?assertEqual(ok, sluice_stats:set_max_connections(St, (1 bsl 63) - 2)),
    ?assertMatch(#{max_connections := 9223372036854775806}, sluice_stats:read(St)),
    ?assertEqual(ok, sluice_stats:set_max_connections(St, infinity)),
    ?assertMatch(#{max_connections := infinity}, sluice_stats:read(St)).

%% --- shutdown_timeout ---------------------------------------------------

%% A connection supervisor's own shutdown is shutdown_timeout + 1000 ms
%% (sluice_conns_sup_sup), which must be a receive timeout (2^32 - 1 at
%% most): 2^32 - 1000 used to start and then crash the stop.
shutdown_timeout_leaves_room_for_the_supervisor_test() ->
    Max = (1 bsl 32) - 1001,
    ?assertMatch(#{shutdown_timeout := Max}, valid(with(shutdown_timeout, Max))),
    ?assertMatch(#{shutdown_timeout := infinity}, valid(with(shutdown_timeout, infinity))),
    [?assertEqual({error, {bad_option, shutdown_timeout, T}},
                  sluice_opts:validate(with(shutdown_timeout, T)))
     || T <- [(1 bsl 32) - 1000, 1 bsl 40, 0]],
    ?assertMatch("bad value for option shutdown_timeout: 4294966296 (expected an integer "
                 "1..4294966295" ++ _,
                 sluice:format_error({bad_option, shutdown_timeout, (1 bsl 32) - 1000})).

%% The counts (acceptors, listen sockets, connection supervisors) and the
%% backlog go up to 65535, and the error says so: `num_acceptors => 70000'
%% was refused as "expected a positive integer", which 70000 is.
counts_say_their_bound_test() ->
    [begin
         ?assertMatch({ok, _}, sluice_opts:validate(with(K, 65535))),
         [?assertEqual({error, {bad_option, K, N}}, sluice_opts:validate(with(K, N)))
          || N <- [65536, 0]],
         ?assertEqual(lists:flatten(io_lib:format("bad value for option ~p: 70000 (expected an "
                                                  "integer 1..65535)", [K])),
                      sluice:format_error({bad_option, K, 70000}))
     end || K <- [num_acceptors, num_listen_sockets, num_conns_sups, backlog]].

%% The handshake's and the PROXY header's timeouts are receive timeouts
%% (2^32 - 1 ms at most: proxy_timeout 2^40 crashed every connection on the
%% socket backend with a bad receive timeout); the idle, hibernation and
%% parking times are held to the same rule.
ms_timeouts_fit_a_receive_test() ->
    Max = (1 bsl 32) - 1,
    [begin
         ?assertMatch(#{K := Max}, valid(with(K, Max))),
         ?assertMatch(#{K := infinity}, valid(with(K, infinity))),
         [?assertEqual({error, {bad_option, K, T}}, sluice_opts:validate(with(K, T)))
          || T <- [Max + 1, 1 bsl 40, 0]]
     end || K <- [idle_timeout, hibernate_after, park_after, handshake_timeout, proxy_timeout]].

%% --- socket_opts ----------------------------------------------------------

%% The socket backend allocates a read of `buffer' bytes: 64 GiB aborted
%% the VM (prim_socket_nif's ALLOC_BIN) at the first connection.
buffer_is_capped_test() ->
    [begin
         ?assertMatch(#{}, valid(on(T, [{buffer, 64 * ?MIB}]))),
         ?assertMatch(#{}, valid(on(T, [{buffer, 1}]))),
         [?assertEqual({error, {bad_option, socket_opts, {buffer, B}}},
                       sluice_opts:validate(on(T, [{buffer, B}])))
          || B <- [64 * ?MIB + 1, 1 bsl 36, 0]]
     end || T <- [inet, socket]].

%% Values one backend refused only when the listener opened its socket
%% (a crash report and `{{invalid, ...}, Opt}') and the other took with
%% their high bits dropped: now a bad option on both, before anything
%% starts.
socket_option_values_are_checked_for_both_backends_test() ->
    Bad = [{buffer, 0}, {recbuf, 1 bsl 40}, {recbuf, ?INT_MAX + 1}, {sndbuf, 1 bsl 32},
           {priority, 1 bsl 40}, {tos, 256}, {tos, 99999}, {send_timeout, 1 bsl 31},
           {linger, {true, 1 bsl 40}}, {linger, {true, -1}}, {linger, true},
           {high_watermark, 1 bsl 40}, {low_watermark, -1},
           {high_msgq_watermark, 0}, {low_msgq_watermark, 1 bsl 40},
           {raw, 1 bsl 40, 2, <<1:32/native>>}, {raw, -1, 2, <<1:32/native>>},
           {raw, x}],
    [?assertEqual({T, {error, {bad_option, socket_opts, O}}},
                  {T, sluice_opts:validate(on(T, [O]))})
     || T <- [inet, socket], O <- Bad],
    ?assertMatch("bad value for option socket_opts: {buffer,0} (expected " ++ _,
                 sluice:format_error({bad_option, socket_opts, {buffer, 0}})).

%% What ranch 2 takes in socket_opts (port, ip, backlog; ranch_ssl's
%% certificates) and what gen_tcp
%% users put there (active, packet, binary, reuseaddr) is refused as
%% before, and the error's text says where it goes instead of listing
%% every key socket_opts takes after "bad value".
misplaced_socket_options_say_where_they_go_test() ->
    Said = [{O, sluice:format_error(E)}
            || O <- [{port, 5555}, {ip, {127, 0, 0, 1}}, {backlog, 2048}, {active, once},
                     {packet, line}, binary, {reuseaddr, true}, {inet_backend, socket},
                     {certfile, "server.pem"}],
               {error, {bad_option, socket_opts, _} = E} <- [sluice_opts:validate(on(inet, [O]))]],
    ?assertEqual(9, length(Said)),
    ?assertEqual("bad value for option socket_opts: {port,5555} (port is a listener option, "
                 "not a socket option: port => 5555 beside handler)",
                 proplists:get_value({port, 5555}, Said)),
    ?assertMatch("bad value for option socket_opts: {active,once} (active is a listener "
                 "option" ++ _, proplists:get_value({active, once}, Said)),
    ?assertNotEqual(nomatch, string:find(proplists:get_value({packet, line}, Said), "framing")),
    ?assertNotEqual(nomatch, string:find(proplists:get_value({certfile, "server.pem"}, Said),
                                         "tls_opts")),
    [?assertEqual({O, nomatch}, {O, string:find(Text, "expected a list")}) || {O, Text} <- Said],
    %% A real socket option with a bad value still gets the list.
    ?assertNotEqual(nomatch, string:find(sluice:format_error({bad_option, socket_opts,
                                                               {nodelay, 3}}),
                                         "expected a list")).

%% A framing spec of the right shape with one bad option keeps the error
%% term `{bad_option, framing, Spec}', and its text says which option and
%% what it takes: it was the list of every spec's shape, which the spec
%% already had.
a_bad_framing_option_is_named_test() ->
    Said = fun(Spec) ->
                   {error, {bad_option, framing, Spec} = E} =
                       sluice_opts:validate(#{port => 0, handler => ?HANDLER, framing => Spec}),
                   sluice:format_error(E)
           end,
    ?assertEqual("bad value for option framing: {line,#{max => -1}} (framing option max: -1; "
                 "expected an integer >= 0 (bytes))", Said({line, #{max => -1}})),
    ?assertMatch("bad value for option framing: {line,[{delim,crlf}]} (unknown framing option "
                 "delim; expected delimiter and max (line)" ++ _, Said({line, [{delim, crlf}]})),
    ?assertEqual("bad value for option framing: {length,4,#{endian => mid}} (framing option "
                 "endian: mid; expected big or little)", Said({length, 4, #{endian => mid}})),
    %% a spec of no known shape still gets the shapes
    ?assertMatch("bad value for option framing: {length,3} (expected none, or a framing spec"
                 ++ _, Said({length, 3})).

%% A framing spec whose options are an improper list (sluice_opts_prop_SUITE's
%% counterexample) is a bad framing, said as one: sluice_frame's reading of
%% a keyword list raised function_clause from lists:all/2, out of
%% validate/1, start_listener/2 and child_spec/1,2.
an_improper_list_of_framing_options_is_a_bad_framing_test() ->
    [begin
         ?assertEqual({error, {bad_spec, Spec}}, sluice_frame:new(Spec)),
         {error, {bad_option, framing, Spec} = E} =
             sluice_opts:validate(#{port => 0, handler => ?HANDLER, framing => Spec}),
         ?assertEqual({error, E},
                      sluice_opts:validate([{handler, ?HANDLER}, {framing, Spec}])),
         ?assertMatch("bad value for option framing: " ++ _, sluice:format_error(E)),
         ?assertError(#{reason := E},
                      sluice:child_spec(#{handler => ?HANDLER, framing => Spec}))
     end || Spec <- [{line, [{max, 1} | {max, 2}]}, {line, [{max, 1} | x]},
                     {length, 2, [{endian, big} | little]},
                     {split, fun(B) -> {ok, B, <<>>} end, [{max, 1} | x]}]].

%% `{versions, []}' in tls_opts (sluice_opts_prop_SUITE's counterexample,
%% beside a certificate and its key): OTP 25's ssl:handle_options/2 never
%% returned on it, and validate/1 (start_listener/2, child_spec/1,2,
%% set_transport_opts/2) with it. Refused, and said, within a deadline.
empty_tls_versions_are_refused_test_() ->
    {timeout, 60, fun empty_tls_versions_are_refused/0}.

empty_tls_versions_are_refused() ->
    Dir = filename:join("/tmp", "sluice_versions_" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    try
        [C, K, _] = sluice_tls_test_lib:write_pem(
                      Dir, maps:get(server, sluice_tls_test_lib:certs())),
        Opts = #{port => 0, handler => ?HANDLER, transport => ssl,
                 tls_opts => [C, K, {versions, []}]},
        {Pid, Ref} = spawn_monitor(fun() -> exit({done, sluice_opts:validate(Opts)}) end),
        R = receive {'DOWN', Ref, _, _, {done, Done}} -> Done
            after 20000 -> exit(Pid, kill), no_answer
            end,
        ?assertEqual({error, {bad_option, tls_opts, {versions, []}}}, R),
        Said = sluice:format_error({bad_option, tls_opts, {versions, []}}),
        ?assertMatch("bad value for option tls_opts: {versions,[]} (versions names no TLS "
                     "version" ++ _, Said)
    after
        _ = file:del_dir_r(Dir)
    end.

%% A handler module that is not there is said as such; one that is there
%% but is not a handler (a ranch protocol's start_link/3) gets what a
%% handler exports.
missing_handler_module_is_said_as_such_test() ->
    ?assertEqual("bad value for option handler: {'Elixir.Echo',[]} (module 'Elixir.Echo' "
                 "not found: not compiled, or not on the code path)",
                 sluice:format_error({bad_option, handler, {'Elixir.Echo', []}})),
    ?assertMatch("bad value for option handler: {lists,[]} (expected {Module, Opts} " ++ _,
                 sluice:format_error({bad_option, handler, {lists, []}})).

%% A misspelt handler (`hanlder: {KV, t}'), or thousand_island's
%% handler_module/handler_options, is an unknown option: it was said as
%% `{missing_option, handler}', the one key the user had written. With
%% nothing unknown, a missing handler is still said as missing.
an_unknown_key_is_said_before_a_missing_handler_test() ->
    ?assertEqual({error, {unknown_option, hanlder}},
                 sluice_opts:validate([{port, 0}, {hanlder, ?HANDLER}])),
    ?assertError(#{reason := {unknown_option, handler_module}},
                 sluice:child_spec([{port, 0}, {handler_module, 'Elixir.Echo'}])),
    ?assertMatch("unknown option handler_module (the handler and its options are one "
                 "option: handler => {Module, Opts})",
                 sluice:format_error({unknown_option, handler_module})),
    ?assertEqual({error, {missing_option, handler}}, sluice_opts:validate(#{port => 0})).

%% The largest of each is taken, as gen_tcp and the socket NIF take it.
socket_option_bounds_are_accepted_test() ->
    Good = [{recbuf, ?INT_MAX}, {sndbuf, 0}, {priority, 0}, {tos, 255},
            {send_timeout, ?INT_MAX}, {send_timeout, infinity}, {send_timeout, 0},
            {linger, {true, ?INT_MAX}}, {linger, {false, 0}},
            {high_watermark, ?INT_MAX}, {low_watermark, 0},
            {high_msgq_watermark, ?INT_MAX}, {low_msgq_watermark, 1}],
    [?assertMatch({T, {ok, _}}, {T, sluice_opts:validate(on(T, [O]))})
     || T <- [inet, socket], O <- Good].

%% A low watermark above its high one, both given: the inet driver set
%% them without a word, moving one to the other as the list's order said
%% (high 1000 then low 5000: both 1000); now a bad option on both backends,
%% in either order, as a list or a map. Equal, or one given alone, is taken.
low_watermark_above_high_is_a_bad_option_test() ->
    [?assertEqual({T, {error, {bad_option, socket_opts, Low}}},
                  {T, sluice_opts:validate(on(T, SO))})
     || T <- [inet, socket],
        {High, Low} <- [{{high_watermark, 1000}, {low_watermark, 5000}},
                        {{high_msgq_watermark, 10}, {low_msgq_watermark, 11}}],
        SO <- [[High, Low], [Low, High], maps:from_list([High, Low])]],
    [?assertMatch({T, {ok, _}}, {T, sluice_opts:validate(on(T, SO))})
     || T <- [inet, socket],
        SO <- [[{high_watermark, 5000}, {low_watermark, 5000}],
               [{low_watermark, 10000}], [{high_watermark, 100}],
               [{low_msgq_watermark, 4}, {high_msgq_watermark, 8}]]].

%% A raw option is judged by the kernel, on a throwaway socket: one it
%% refuses is a bad option on both backends (the inet driver used to say
%% nothing, the socket backend failed the start with an errno).
raw_options_are_judged_by_the_kernel_test() ->
    {SolSocket, SoKeepalive} = case os:type() of
                                   {unix, linux} -> {1, 9};
                                   _ -> {16#ffff, 8}
                               end,
    Keepalive = {raw, SolSocket, SoKeepalive, <<1:32/native>>},
    [begin
         ?assertMatch({T, {ok, _}}, {T, sluice_opts:validate(on(T, [Keepalive]))}),
         ?assertMatch({T, {ok, _}},
                      {T, sluice_opts:validate((on(T, [Keepalive]))#{ip => {0, 0, 0, 0, 0, 0, 0, 1}})}),
         [?assertEqual({T, {error, {bad_option, socket_opts, O}}},
                       {T, sluice_opts:validate(on(T, [Keepalive, O]))})
          || O <- [{raw, SolSocket, SoKeepalive, <<>>}, {raw, 99999, 99999, <<1, 2, 3, 4>>}]]
     end || T <- [inet, socket]].

%% The errors start_listener/2 returns that are not options' are said in
%% words too.
start_errors_are_said_in_words_test() ->
    ?assertEqual("address already in use", sluice:format_error(eaddrinuse)),
    ?assertEqual("permission denied", sluice:format_error(eacces)),
    ?assertEqual("a listener of that name is running", sluice:format_error(already_started)),
    ?assertEqual("no_such_reason", sluice:format_error(no_such_reason)),
    ?assertEqual("{some,term}", sluice:format_error({some, term})).

%% set_transport_opts/2's `{not_changeable, Key}' is said in words, with
%% what it does change.
not_changeable_is_said_in_words_test() ->
    Said = sluice:format_error({not_changeable, num_conns_sups}),
    ?assertMatch("option num_conns_sups cannot be changed while the listener runs" ++ _, Said),
    ?assertNotEqual(nomatch, string:find(Said, "max_connections")).

%% A tls_opts error is said in words whatever the value ssl refused: an
%% improper list of sni_hosts (which start_listener/2 returns as ssl
%% refused it) raised bad_generator in format_error/1.
tls_hint_of_an_improper_sni_hosts_test() ->
    Said = fun(V) -> sluice:format_error({bad_option, tls_opts, {sni_hosts, V}}) end,
    ?assertNotEqual(nomatch, string:find(Said([{<<"x">>, []} | b]), "charlists")),
    ?assertEqual(nomatch, string:find(Said([{"x", []} | b]), "charlists")),
    ?assertEqual(nomatch, string:find(Said([a | b]), "charlists")),
    ?assertNotEqual(nomatch, string:find(Said([{"x", []}, {<<"y">>, []}]), "charlists")).

%% An unknown key is said with what it was probably meant to be, and
%% with nothing when no option is near it: a far name gets no guess.
unknown_option_hints_test() ->
    Said = fun(K) -> sluice:format_error({unknown_option, K}) end,
    ?assertEqual("unknown option hanlder (did you mean handler?)", Said(hanlder)),
    ?assertEqual("unknown option prot (did you mean port?)", Said(prot)),
    ?assertEqual("unknown option socket_options (did you mean socket_opts?)",
                 Said(socket_options)),
    ?assertEqual("unknown option \"port\" (option names are atoms: port)", Said("port")),
    ?assertEqual("unknown option xyz", Said(xyz)),
    ?assertEqual("unknown option options", Said(options)),
    ?assertEqual("unknown option <<\"nope\">>", Said(<<"nope">>)),
    ?assertEqual("unknown option {a,b}", Said({a, b})).
