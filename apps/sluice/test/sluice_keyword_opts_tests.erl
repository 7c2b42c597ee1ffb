%% EUnit: options written as an Elixir user writes them. A keyword list
%% is a proplist with atom keys, and `{:sluice, opts}' in a Supervisor's
%% child list calls sluice:child_spec(Opts) with one; framing options in a
%% keyword list (`framing: {:line, max: 1024}') used to be refused because
%% sluice_frame wanted a map.
-module(sluice_keyword_opts_tests).
-include_lib("eunit/include/eunit.hrl").

-define(HANDLER, {sluice_proto_echo, []}).

child_spec_from_a_keyword_list_test() ->
    Spec = sluice:child_spec([{name, kv}, {port, 4040}, {handler, ?HANDLER},
                              {framing, {line, [{max, 1024}]}},
                              {socket_opts, [{nodelay, true}]}]),
    ?assertMatch(#{id := {sluice_listener, kv}, type := supervisor,
                   start := {sluice_listener_sup, start_link, [kv, #{port := 4040}]}}, Spec),
    #{start := {_, _, [_, Opts]}} = Spec,
    ?assertNot(maps:is_key(name, Opts)),
    ?assertEqual({line, [{max, 1024}]}, maps:get(framing, Opts)).

child_spec_names_a_listener_by_its_port_by_default_test() ->
    ?assertMatch(#{id := {sluice_listener, {sluice, 4041}}},
                 sluice:child_spec([{port, 4041}, {handler, ?HANDLER}])),
    ?assertMatch(#{id := {sluice_listener, {sluice, 4042}}},
                 sluice:child_spec(#{port => 4042, handler => ?HANDLER})).

child_spec_raises_on_a_bad_option_test() ->
    ?assertError(#{reason := {bad_option, framing, {line, [{max, -1}]}}},
                 sluice:child_spec([{handler, ?HANDLER}, {framing, {line, [{max, -1}]}}])),
    ?assertError(#{reason := {unknown_option, prot}},
                 sluice:child_spec([{handler, ?HANDLER}, {prot, 1}])).

%% Elixir's `{:sluice, opts}' raises what child_spec/1 raises, shown by
%% its message: an ArgumentError whose message is format_error/1's
%% sentence (it was `{badarg, Reason}', which Elixir shows as "argument
%% error: {:bad_option, :port, 70000}"), the reason beside it.
child_spec_raises_an_argument_error_with_the_sentence_test() ->
    [begin
         try Call() of
             Spec -> error({no_raise, Spec})
         catch error:#{'__struct__' := 'Elixir.ArgumentError', '__exception__' := true,
                       message := Message, reason := Reason} ->
                 ?assertEqual(Expected, Reason),
                 ?assertEqual(unicode:characters_to_binary(sluice:format_error(Expected)),
                              Message),
                 ?assertMatch(<<"bad value for option port: 70000 (expected", _/binary>>,
                              Message)
         end
     end || {Expected, Call} <- [{{bad_option, port, 70000},
                                  fun() -> sluice:child_spec([{handler, ?HANDLER},
                                                              {port, 70000}]) end},
                                 {{bad_option, port, 70000},
                                  fun() -> sluice:child_spec(kv, #{handler => ?HANDLER,
                                                                   port => 70000}) end}]].

framing_options_as_a_keyword_list_test() ->
    Split = fun(B) -> erlang:decode_packet(1, B, []) end,
    [?assertMatch({ok, _}, sluice_frame:new(S))
     || S <- [{line, [{max, 8}, {delimiter, crlf}]}, {line, []},
              {length, 2, [{endian, little}]}, {split, Split, [{max, 10}]}]],
    {ok, Line} = sluice_frame:new({line, [{max, 4}]}),
    ?assertMatch({error, {line_too_long, _, 4}, [<<"ab">>], _},
                 sluice_frame:decode(<<"ab\nabcdef">>, Line)),
    {ok, Little} = sluice_frame:new({length, 2, [{endian, little}]}),
    ?assertMatch({ok, [<<"x">>], _}, sluice_frame:decode(<<1, 0, "x">>, Little)),
    ?assertEqual({error, {unknown_option, packet}},
                 sluice_frame:new({length, 4, [{packet, 4}]})).

first_of_a_repeated_key_wins_test() ->
    %% As Keyword.get/2 and proplists:get_value/2 read it.
    {ok, St} = sluice_frame:new({line, [{max, 2}, {max, 100}]}),
    ?assertMatch({error, {line_too_long, _, 2}, [], _}, sluice_frame:decode(<<"abc">>, St)).

%% `[port: 4000] ++ defaults' and `[name: :a] ++ opts', the Elixir idiom
%% for overriding defaults: the first of a repeated option wins in every
%% entry point, `name' included. child_spec/1 used to take the last.
child_spec_takes_the_first_of_a_repeated_option_test() ->
    Spec = sluice:child_spec([{name, first}, {port, 4000}, {handler, ?HANDLER},
                              {name, second}, {port, 4001}]),
    ?assertMatch(#{id := {sluice_listener, first},
                   start := {_, _, [first, #{port := 4000}]}}, Spec),
    ?assertMatch(#{start := {_, _, [kv, #{port := 4000}]}},
                 sluice:child_spec(kv, [{port, 4000}, {handler, ?HANDLER}, {port, 4001}])).

%% A bare atom is `true' in child_spec/2 as in child_spec/1 (`[:reuseport |
%% opts]'); child_spec/2 used to raise `{badarg, not_a_map}'.
child_spec_reads_a_bare_atom_as_true_test() ->
    [?assertMatch(#{start := {_, _, [_, #{reuseport := true, own_port := false}]}}, S)
     || S <- [sluice:child_spec(kv, [reuseport, {handler, ?HANDLER}]),
              sluice:child_spec([reuseport, {name, kv}, {handler, ?HANDLER}])]].

child_spec_raises_on_a_list_that_is_not_a_proplist_test() ->
    ?assertError(#{reason := not_a_map}, sluice:child_spec([{handler, ?HANDLER}, 42])),
    ?assertError(#{reason := not_a_map}, sluice:child_spec(kv, [{handler, ?HANDLER}, 42])).

%% Neither a map nor a list: the same badarg (it was a function_clause,
%% an Elixir FunctionClauseError rather than an ArgumentError).
child_spec_raises_badarg_on_what_is_not_options_test() ->
    ?assertError(#{reason := not_a_map}, sluice:child_spec(foo)),
    ?assertError(#{reason := not_a_map}, sluice:child_spec(kv, foo)).

%% socket_opts and tls_opts are read as the listener's own options are: the
%% first of a repeated key wins (`socket_opts: [buffer: 4096] ++ base'),
%% and each may be a map. The lists used to go on whole: the inet driver
%% applied the last of a repeated socket option (and the ssl transport
%% sized its reads by the first buffer), ssl took the last of a repeated
%% tls option, and tls_opts as a map was refused.
nested_lists_take_the_first_of_a_repeated_key_test() ->
    Raw1 = {raw, 6, 1, <<1:32/native>>},
    Raw2 = {raw, 6, 1, <<0:32/native>>},
    CertKey = cert_key(),
    {ok, #{socket_opts := SO, tls_opts := TO}} =
        sluice_opts:validate([{handler, ?HANDLER},
                              {socket_opts, [{buffer, 1000}, {nodelay, false}, Raw1,
                                             {buffer, 2000}, {nodelay, true}, Raw2]},
                              {tls_opts, [{verify, verify_none}, {verify, verify_peer}
                                          | CertKey]}]),
    ?assertEqual([{buffer, 1000}, {nodelay, false}, Raw1, Raw2,
                  {send_timeout, 30000}, {send_timeout_close, true}], SO),
    ?assertEqual([{verify, verify_none} | CertKey], TO),
    %% A shadowed value is not checked, as Keyword.get/2 would not read it.
    ?assertMatch({ok, #{socket_opts := [{buffer, 1000} | _]}},
                 sluice_opts:validate([{handler, ?HANDLER},
                                       {socket_opts, [{buffer, 1000}, {buffer, -1}]}])).

tls_opts_as_a_map_test() ->
    TlsOpts = lists:sort([{verify, verify_none} | cert_key()]),
    {ok, #{tls_opts := Read}} = sluice_opts:validate(#{handler => ?HANDLER,
                                                       tls_opts => maps:from_list(TlsOpts)}),
    ?assertEqual(TlsOpts, lists:sort(Read)),
    #{start := {_, _, [kv, #{tls_opts := Spec}]}} =
        sluice:child_spec([{name, kv}, {handler, ?HANDLER},
                           {tls_opts, maps:from_list(TlsOpts)}]),
    ?assertEqual(TlsOpts, lists:sort(Spec)),
    ?assertEqual({error, {bad_option, tls_opts, not_a_list}},
                 sluice_opts:validate(#{handler => ?HANDLER, tls_opts => not_a_list})).

%% An improper list crashed the check of socket_opts (function_clause,
%% from child_spec/1 and start_listener/2 alike) and went on to ssl as
%% tls_opts: both are bad options.
nested_improper_list_is_a_bad_option_test() ->
    ?assertEqual({error, {bad_option, socket_opts, [{nodelay, true} | x]}},
                 sluice_opts:validate([{handler, ?HANDLER},
                                       {socket_opts, [{nodelay, true} | x]}])),
    ?assertEqual({error, {bad_option, tls_opts, [{verify, verify_none} | x]}},
                 sluice_opts:validate([{handler, ?HANDLER},
                                       {tls_opts, [{verify, verify_none} | x]}])).

%% A certificate and its key, in memory: tls_opts on the default transport
%% (inet, for STARTTLS) are checked at start as on ssl, and need them.
cert_key() ->
    #{server := Server} = sluice_tls_test_lib:certs(),
    [lists:keyfind(cert, 1, Server), lists:keyfind(key, 1, Server)].
