%% EUnit: the API reference (`make docs', edoc) stays complete. Every
%% module of the library is either public (listed here and in
%% apps/sluice/README.md, "Versioned API") or marked `@private'; every
%% exported function of a public module has an `@doc' unless it is marked
%% `@private' or `@hidden' itself (callbacks of the library's own, say).
%% A new export without a doc, or a new module that is neither, fails here
%% rather than leaving a hole in the reference.
-module(sluice_doc_tests).
-include_lib("eunit/include/eunit.hrl").
-include_lib("xmerl/include/xmerl.hrl").

-define(PUBLIC, [sluice, sluice_handler, sluice_frame, sluice_transport, sluice_telemetry,
                 sluice_proxy_header, sluice_proto_ack, sluice_proto_echo, sluice_proto_ping]).

%% edoc reads every source file once for the three checks.
api_reference_test_() ->
    {setup, fun docs/0,
     fun(Docs) ->
             [{"public modules are the documented ones", ?_test(public_modules(Docs))},
              {"every public function has a doc", ?_test(public_functions(Docs))},
              {"every module has a doc", ?_test(module_docs(Docs))}]
     end}.

public_modules(Docs) ->
    Public = [M || {M, Doc} <- Docs, attr(private, Doc) =/= "yes", attr(hidden, Doc) =/= "yes"],
    ?assertEqual(lists:sort(?PUBLIC), lists:sort(Public)).

public_functions(Docs) ->
    Undocumented = [{M, list_to_atom(attr(name, F)), list_to_integer(attr(arity, F))}
                    || {M, Doc} <- Docs, lists:member(M, ?PUBLIC),
                       F <- functions(Doc),
                       attr(exported, F) =:= "yes", attr(private, F) =/= "yes",
                       attr(hidden, F) =/= "yes", not has(description, F)],
    ?assertEqual([], Undocumented).

module_docs(Docs) ->
    ?assertEqual([], [M || {M, Doc} <- Docs, not has(description, Doc)]).

%%% ------------------------------------------------------------------

%% {Module, edoc's XML of it} for every module of the library. edoc:get_doc/2
%% raises on a syntax error in a doc comment (an unmatched backquote, a bad
%% tag), so that fails here too.
docs() ->
    Src = filename:join(code:lib_dir(sluice), "src"),
    Files = filelib:wildcard(filename:join(Src, "*.erl")),
    ?assert(length(Files) > 10),
    [edoc:get_doc(F, [{private, true}, {hidden, true}, {includes, [Src]}]) || F <- Files].

functions(#xmlElement{content = C}) ->
    lists:append([Fs || #xmlElement{name = functions, content = Fs} <- C]).

attr(Name, #xmlElement{attributes = As}) ->
    case lists:keyfind(Name, #xmlAttribute.name, As) of
        #xmlAttribute{value = V} -> V;
        false -> undefined
    end.

has(Name, #xmlElement{content = C}) ->
    lists:keymember(Name, #xmlElement.name, [E || E = #xmlElement{} <- C]).
