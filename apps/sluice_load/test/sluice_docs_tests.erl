%% EUnit checks of the repository's Markdown: every relative link in
%% README.md, docs/, the apps' and the examples' pages and the other *.md
%% files points to a file that exists and, with `#anchor', to a heading of
%% that file; README's index links to every page under docs/. The pages
%% link to one another a lot since the README was split up, and a renamed
%% heading or file breaks links silently.
-module(sluice_docs_tests).
-include_lib("eunit/include/eunit.hrl").

-define(FILES, ["README.md", "docs/*.md", "bench/*.md", "apps/*/*.md", "apps/*/c_src/*.md",
                "examples/*/*.md"]).

links_resolve_test() ->
    Root = root(),
    Files = lists:usort(lists:append([filelib:wildcard(W, Root) || W <- ?FILES])),
    Links = [{F, L} || F <- Files, L <- links(read(Root, F))],
    ?assert(length(Links) > 10),
    ?assertEqual([], [{F, L, Why} || {F, L} <- Links, {error, Why} <- [resolve(Root, F, L)]]).

readme_indexes_every_docs_page_test() ->
    Root = root(),
    Linked = [L || L <- links(read(Root, "README.md"))],
    Pages = filelib:wildcard("docs/*.md", Root),
    ?assertNotEqual([], Pages),
    ?assertEqual([], [P || P <- Pages, not lists:member(P, Linked)]).

%% docs/cli.md's exit-code table is sluice_cli_exit's, row for row, and
%% every command's --help ends with its codes.
exit_codes_documented_test() ->
    Md = unicode:characters_to_list(read(root(), "docs/cli.md")),
    ?assertEqual([], [Row || Row <- sluice_cli_exit:doc_rows(), string:find(Md, Row) =:= nomatch]),
    Documented = [C || "| `" ++ Rest <- string:split(Md, "\n", all),
                       [C, _] <- [string:split(Rest, "`")],
                       lists:member(C, sluice_cli_exit:commands())],
    ?assertEqual(length(sluice_cli_exit:doc_rows()), length(Documented)),
    [?assertNotEqual(nomatch, string:find(lists:flatten(sluice_cli_exit:help(C)),
                                          "\n  2    bad usage"))
     || C <- sluice_cli_exit:commands()].

slugs_follow_github_test() ->
    ?assertEqual(["two-backends-inet-and-socket", "what-make-bench-shows-on-this-machine",
                  "options", "options-1"],
                 anchors(<<"# Two backends: `inet` and `socket`\n"
                           "## What `make bench` shows on this machine\n"
                           "```sh\n# not a heading\n```\n## Options\n### Options\n">>)).

%%% ------------------------------------------------------------------

root() ->
    {ok, Root} = sluice_load_test_lib:repo_root(),
    Root.

read(Root, File) ->
    {ok, Bin} = file:read_file(filename:join(Root, File)),
    Bin.

%% Relative link targets outside code (fenced blocks and `spans').
links(Md) ->
    Text = unicode:characters_to_binary(lists:join("\n", [re:replace(L, "`[^`]*`", "", [global, unicode])
                                            || L <- prose_lines(Md)])),
    case re:run(Text, "\\]\\(([^)\\s]+)\\)", [global, unicode, {capture, all_but_first, list}]) of
        {match, Ms} -> [T || [T] <- Ms, not external(T)];
        nomatch -> []
    end.

external(T) ->
    lists:any(fun(P) -> lists:prefix(P, T) end, ["http://", "https://", "mailto:"]).

resolve(Root, From, Link) ->
    {Path, Anchor} = case string:split(Link, "#") of
                         [P, A] -> {P, A};
                         [P] -> {P, none}
                     end,
    Target = case Path of
                 "" -> From;
                 _ -> normalize(filename:join(filename:dirname(From), Path))
             end,
    Abs = filename:join(Root, Target),
    case {filelib:is_file(Abs), Anchor} of
        {false, _} -> {error, no_such_file};
        {true, none} -> ok;
        {true, _} ->
            case lists:member(Anchor, anchors(read(Root, Target))) of
                true -> ok;
                false -> {error, no_such_anchor}
            end
    end.

%% "docs/../bench/README.md" -> "bench/README.md" (the links are relative
%% to the page, the file names here to the repository root).
normalize(Path) ->
    Parts = lists:foldl(fun(".", Acc) -> Acc;
                           ("..", [_ | Acc]) -> Acc;
                           (P, Acc) -> [P | Acc]
                        end, [], filename:split(Path)),
    filename:join(lists:reverse(Parts)).

%% GitHub's heading anchors: lower case, no punctuation but `-' and `_',
%% spaces to `-'; a repeated one gets `-1', `-2', ...
anchors(Md) ->
    Slugs = [slug(H) || L <- prose_lines(Md),
                        {match, [H]} <- [re:run(L, "^#{1,6}\\s+(.*?)\\s*$", [unicode, {capture, all_but_first, list}])]],
    number(Slugs, #{}).

slug(Heading) ->
    Lower = string:lowercase(Heading),
    Kept = re:replace(Lower, "[^a-z0-9 _-]", "", [global, unicode, {return, list}]),
    lists:flatten(string:replace(Kept, " ", "-", all)).

number([], _Seen) -> [];
number([S | Rest], Seen) ->
    case maps:get(S, Seen, 0) of
        0 -> [S | number(Rest, Seen#{S => 1})];
        N -> [S ++ "-" ++ integer_to_list(N) | number(Rest, Seen#{S => N + 1})]
    end.

%% The lines outside fenced code blocks.
prose_lines(Md) ->
    prose(string:split(unicode:characters_to_list(Md), "\n", all), false).

prose([], _) -> [];
prose([L | Rest], InFence) ->
    case lists:prefix("```", string:trim(L, leading)) of
        true -> prose(Rest, not InFence);
        false when InFence -> prose(Rest, InFence);
        false -> [L | prose(Rest, InFence)]
    end.
