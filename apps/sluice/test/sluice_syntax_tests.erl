%% EUnit: the terms format_error/1's sentences quote are shown by Elixir's
%% `inspect/1' where Elixir runs (sluice_syntax), the options' names bare.
%% This VM runs no Elixir, and must not load it: a stand-in
%% 'Elixir.Kernel' (its inspect/2 wraps Erlang's text in `ex(...)') is
%% loaded for the cases that need one and removed after. The real Elixir's
%% sentences: examples/kv/test/error_syntax_test.exs.
-module(sluice_syntax_tests).
-include_lib("eunit/include/eunit.hrl").

-define(KERNEL, 'Elixir.Kernel').

%% Without Elixir, the sentence is Erlang's, and asking for it loads no
%% Elixir module, even with an Elixir module named in it.
erlang_vm_test() ->
    ?assertNot(erlang:module_loaded(?KERNEL)),
    ?assertEqual("bad value for option handler: {'Elixir.Chat',[]} (module 'Elixir.Chat' not "
                 "found: not compiled, or not on the code path)",
                 sluice:format_error({bad_option, handler, {'Elixir.Chat', []}})),
    ?assertEqual("the sluice application is not started "
                 "(application:ensure_all_started(sluice) first, or list sluice in your "
                 "application's applications)",
                 sluice:format_error(sluice_not_started)),
    ?assertNot(erlang:module_loaded(?KERNEL)).

elixir_vm_test_() ->
    {setup, fun load_stand_in/0, fun unload_stand_in/1,
     [{"a value is inspected, the option's name is not",
       ?_assertEqual("bad value for option port: ex(<<\"4000\">>) (expected an integer "
                     "0..65535 (0: any free port)); a string: give the integer, 4000 "
                     "(binary_to_integer/1; Elixir: String.to_integer/1)",
                     sluice:format_error({bad_option, port, <<"4000">>}))},
      {"a hint's value too",
       ?_assertEqual("unknown option ex(<<\"port\">>) (option names are atoms: ex(port))",
                     sluice:format_error({unknown_option, <<"port">>}))},
      {"a nested sentence's values too (framing)",
       ?_assertEqual("bad value for option framing: ex({line,[{max,-1}]}) (framing option "
                     "max: ex(-1); expected an integer >= 0 (bytes))",
                     sluice:format_error({bad_option, framing, {line, [{max, -1}]}}))},
      {"~P as ~p, ~w as Erlang's, the other directives as io_lib's",
       ?_assertEqual("ex([1,2,3]) ex({a}) b 'C' 7 x",
                     sluice_syntax:format("~P ~0p ~w ~w ~b ~s", [[1, 2, 3], 2, {a}, b, 'C', 7,
                                                                "x"]))},
      {"code to write is Elixir's (sluice_not_started)",
       ?_assertEqual("the sluice application is not started "
                     "(Application.ensure_all_started(:sluice) first, or list :sluice in your "
                     "application's applications: in mix.exs, a dependency without "
                     "runtime: false)",
                     sluice:format_error(sluice_not_started))},
      {"an inspect/2 that raises leaves Erlang's words",
       ?_assertEqual("bad value for option post_listen: boom (expected none, or a fun of one "
                     "argument (a listen socket) that returns ok or {error, Reason})",
                     sluice:format_error({bad_option, post_listen, boom}))}]}.

%% A module sluice calls by name: no Elixir, no dependency. Its inspect/2
%% checks that all of a term is asked for, as `~p' gives it.
load_stand_in() ->
    false = erlang:module_loaded(?KERNEL),
    Src = ["-module('Elixir.Kernel').",
           "-export([inspect/2]).",
           "inspect(boom, _Opts) -> erlang:error(boom);"
           "inspect(T, Opts) ->"
           "    infinity = proplists:get_value(limit, Opts),"
           "    infinity = proplists:get_value(printable_limit, Opts),"
           "    iolist_to_binary([\"ex(\", io_lib:format(\"~0p\", [T]), \")\"])."],
    Forms = [begin
                 {ok, Tokens, _} = erl_scan:string(S),
                 {ok, Form} = erl_parse:parse_form(Tokens),
                 Form
             end || S <- Src],
    {ok, ?KERNEL, Bin} = compile:forms(Forms, [binary, return_errors]),
    {module, ?KERNEL} = code:load_binary(?KERNEL, "stand-in", Bin),
    ok.

unload_stand_in(ok) ->
    _ = code:purge(?KERNEL),
    true = code:delete(?KERNEL),
    _ = code:purge(?KERNEL),
    ok.
