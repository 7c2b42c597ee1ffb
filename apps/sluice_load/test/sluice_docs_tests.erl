%% EUnit checks of the repository's Markdown: every relative link in every
%% Markdown file of the repository (`git ls-files', or a walk of the tree
%% without build output where there is no git) points to a file that exists
%% and, with `#anchor', to a heading of that file; a foo.md named in a
%% page's text exists too; README's index links to every page under docs/.
%% The pages link to one another a lot, and a renamed heading or file breaks
%% links silently.
-module(sluice_docs_tests).
-include_lib("eunit/include/eunit.hrl").
-include_lib("kernel/include/file.hrl").

%% Directories a walk of the tree skips: build output, fetched
%% dependencies, generated API docs, version control.
-define(SKIP_DIRS, ["_build", "deps", "doc", ".git", ".elixir_ls", "node_modules"]).

links_resolve_test() ->
    Root = root(),
    Files = markdown_files(Root),
    ?assert(lists:member("README.md", Files)),
    ?assert(lists:member("bench/frame/README.md", Files)),
    Links = [{F, L} || F <- Files, L <- links(read(Root, F))],
    ?assert(length(Links) > 10),
    ?assertEqual([], [{F, L, Why} || {F, L} <- Links, {error, Why} <- [resolve(Root, F, L)]]).

%% A Markdown file named in a page's text but not linked (bench/README.md
%% once sent readers to a DESIGN.md that is not in the repository) must
%% exist too: from the page, from the root, or as the name of one of the
%% repository's Markdown files ("c_src/README.md").
markdown_names_exist_test() ->
    Root = root(),
    Files = markdown_files(Root),
    Names = [filename:basename(F) || F <- Files],
    Missing = [{F, M} || F <- Files, M <- md_names(read(Root, F)),
                         not filelib:is_regular(filename:join(Root, M)),
                         not filelib:is_regular(filename:join([Root, filename:dirname(F), M])),
                         not lists:member(filename:basename(M), Names)],
    ?assertEqual([], lists:usort(Missing)).

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

%% docs/listener-options.md's table of options is the library's: every
%% option sluice_opts has a default for, and `handler', each in one row,
%% and nothing else.
listener_options_documented_test() ->
    Md = read(root(), "docs/listener-options.md"),
    Documented = [list_to_atom(O) || Row <- table_rows(section(Md, "## Options")),
                                     O <- code_spans(first_cell(Row))],
    Options = [handler | maps:keys(sluice_opts:defaults())],
    ?assertEqual(lists:sort(Options), lists:sort(Documented)).

%% The defaults the option tables state (docs/listener-options.md's and
%% apps/sluice/README.md's) are the library's: a default given as a
%% number, a word or an Erlang term in a code span is the option's value
%% in sluice_opts:defaults/0 (socket_opts: what validation makes of it, the
%% library's socket defaults added), one per option of the row (`ip`,
%% `port`). Only the defaults the library computes are said in words.
listener_option_defaults_documented_test() ->
    Defaults = documented_defaults(),
    Computed = [handler, num_conns_sups, backlog, max_connections],
    [begin
         Md = read(root(), File),
         Rows = [{[list_to_atom(O) || O <- code_spans(Opt)], Default}
                 || Row <- table_rows(section(Md, "## Options")),
                    [Opt, Default | _] <- [cells(Row)]],
         ?assert(length(Rows) > 5),
         Literal = [{Os, Default} || {Os, Default} <- Rows, Os -- Computed =:= Os],
         ?assertEqual([], [{File, Os, Default, Values}
                           || {Os, Default} <- Literal,
                              Values <- [leading_values(Default)],
                              Values =/= [maps:get(O, Defaults) || O <- Os]])
     end || File <- ["docs/listener-options.md", "apps/sluice/README.md"]].

%% sluice's exports are the API list of docs/listener-options.md ("API"),
%% arity for arity (`child_spec/1,2` is two).
api_list_is_sluice_exports_test() ->
    Md = read(root(), "docs/listener-options.md"),
    Text = lists:join(" ", section(Md, "## API")),
    Listed = [{list_to_atom(F), list_to_integer(A)}
              || S <- code_spans(lists:flatten(Text)),
                 {match, [F, As]} <- [re:run(S, "^([a-z_]+)/([0-9,]+)$",
                                             [{capture, all_but_first, list}])],
                 A <- string:split(As, ",", all)],
    Exports = [FA || FA = {F, _} <- sluice:module_info(exports), F =/= module_info],
    ?assertEqual(lists:sort(Exports), lists:sort(Listed)).

%% Every close reason info/1 counts is named in the row of `close_reasons`
%% in docs/listener-options.md.
close_reasons_documented_test() ->
    Md = read(root(), "docs/listener-options.md"),
    [Row] = [R || R <- table_rows(section(Md, "## What `info/1` says")),
                  code_spans(first_cell(R)) =:= ["close_reasons"]],
    Reasons = maps:keys(maps:get(close_reasons, sluice_stats:read(sluice_stats:new(1, infinity)))),
    ?assertEqual(11, length(Reasons)),
    ?assertEqual([], [R || R <- Reasons, not lists:member(atom_to_list(R), code_spans(Row))]).

%% The callbacks in the handler tables (docs/handler.md's "Callbacks",
%% apps/sluice/README.md's "The handler behaviour") are sluice_handler's,
%% name and arity, no more and no fewer.
handler_callbacks_documented_test() ->
    Callbacks = lists:sort(sluice_handler:behaviour_info(callbacks)),
    [begin
         Rows = table_rows(section(read(root(), File), Heading)),
         Documented = [{list_to_atom(Name), arity(Args)}
                       || Row <- Rows, S <- [hd(code_spans(first_cell(Row)))],
                          {match, [Name, Args]} <- [re:run(S, "^([a-z_]+)\\((.*)\\)$",
                                                           [{capture, all_but_first, list}])]],
         ?assertEqual({File, Callbacks}, {File, lists:sort(Documented)})
     end || {File, Heading} <- [{"docs/handler.md", "## Callbacks"},
                                {"apps/sluice/README.md", "## The handler behaviour"}]].

%% The results the pages list are sluice_handler's types, tuple for tuple
%% (by tag and size): result/1 for the callbacks, init_result/1 for
%% init/2.
handler_results_documented_test() ->
    Results = type_shapes(result),
    Init = type_shapes(init_result),
    ?assertEqual(11, length(Results)),
    Handler = read(root(), "docs/handler.md"),
    Readme = read(root(), "apps/sluice/README.md"),
    ?assertEqual(Results, lists:usort([shape(S) || Row <- table_rows(section(Handler, "## Results")),
                                                   S <- code_spans(first_cell(Row))])),
    ?assertEqual(Init, paragraph_shapes(Handler, "`init/2` returns")),
    ?assertEqual(Results, paragraph_shapes(Readme, "A result is")),
    [InitRow] = [R || R <- table_rows(section(Readme, "## The handler behaviour")),
                      lists:prefix("init(", hd(code_spans(first_cell(R))))],
    ?assertEqual(Init, lists:usort([shape(S) || S <- code_spans(lists:last(cells(InitRow))),
                                                lists:prefix("{", S)])).

%% The keys of sluice:info/1 (part of the public API) are the rows of
%% docs/listener-options.md's "What info/1 says", no more and no fewer.
info_keys_documented_test() ->
    Md = read(root(), "docs/listener-options.md"),
    Documented = [list_to_atom(K) || Row <- table_rows(section(Md, "## What `info/1` says")),
                                     K <- code_spans(first_cell(Row))],
    {ok, _} = application:ensure_all_started(sluice),
    Name = {?MODULE, info_keys},
    {ok, _} = sluice:start_listener(Name, #{ip => {127, 0, 0, 1}, port => 0,
                                            handler => {sluice_proto_echo, []}}),
    try
        ?assertEqual(lists:sort(maps:keys(sluice:info(Name))), lists:sort(Documented))
    after
        sluice:stop_listener(Name)
    end.

%% docs/architecture.md's layout tables name every module of both
%% applications: by name, as `prefix*' (sluice_proxy_header*) or as a
%% suffix beside its prefix (`sluice_frame` (+ `_length`, ...)). A new
%% module left out of the map (sluice_bench_storm was) fails here.
architecture_names_every_module_test() ->
    Root = root(),
    Md = unicode:characters_to_list(read(Root, "docs/architecture.md")),
    Spans = [code_spans(L) || L <- string:split(Md, "\n", all)],
    Named = fun(M) ->
                    lists:any(fun(Line) -> named(M, Line) end, Spans)
            end,
    Modules = [filename:basename(F, ".erl")
               || App <- ["apps/sluice/src", "apps/sluice_load/src"],
                  F <- filelib:wildcard(App ++ "/**/*.erl", Root)],
    ?assert(length(Modules) > 40),
    ?assertEqual([], [M || M <- Modules, not Named(M)]).

slugs_follow_github_test() ->
    ?assertEqual(["two-backends-inet-and-socket", "what-make-bench-shows-on-this-machine",
                  "options", "options-1"],
                 anchors(<<"# Two backends: `inet` and `socket`\n"
                           "## What `make bench` shows on this machine\n"
                           "```sh\n# not a heading\n```\n## Options\n### Options\n">>)).

%% A walk finds what git lists (both skip build output), so the check does
%% not depend on how the tree was obtained.
markdown_files_test() ->
    Root = root(),
    case git_markdown_files(Root) of
        {ok, Tracked} -> ?assertEqual([], Tracked -- walk_markdown_files(Root));
        error -> ok
    end.

%%% ------------------------------------------------------------------

root() ->
    {ok, Root} = sluice_load_test_lib:repo_root(),
    Root.

%% Every Markdown file of the repository, relative to Root: the tracked
%% ones when Root is a git checkout (a worktree's .git is a file), else
%% every *.md under Root outside ?SKIP_DIRS.
markdown_files(Root) ->
    case git_markdown_files(Root) of
        {ok, Files} -> Files;
        error -> walk_markdown_files(Root)
    end.

git_markdown_files(Root) ->
    Git = os:find_executable("git"),
    case Git =/= false andalso filelib:is_file(filename:join(Root, ".git")) of
        false -> error;
        true ->
            Port = open_port({spawn_executable, Git},
                             [{args, ["-C", Root, "ls-files", "-z", "--", "*.md"]},
                              binary, exit_status, hide, stderr_to_stdout]),
            case collect(Port, <<>>) of
                {0, Out} ->
                    {ok, lists:usort([unicode:characters_to_list(F)
                                      || F <- binary:split(Out, <<0>>, [global, trim_all]),
                                         filelib:is_regular(filename:join(Root, F))])};
                {_, _} -> error
            end
    end.

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, <<Acc/binary, D/binary>>);
        {Port, {exit_status, S}} -> {S, Acc}
    after 30000 -> port_close(Port), {timeout, Acc}
    end.

walk_markdown_files(Root) ->
    lists:usort(walk(Root, "")).

walk(Root, Rel) ->
    {ok, Names} = file:list_dir(filename:join(Root, Rel)),
    lists:append([entry(Root, join(Rel, N), N) || N <- Names]).

entry(Root, Rel, Name) ->
    Abs = filename:join(Root, Rel),
    case file:read_link_info(Abs) of
        {ok, #file_info{type = directory}} ->
            case lists:member(Name, ?SKIP_DIRS) of
                true -> [];
                false -> walk(Root, Rel)
            end;
        {ok, #file_info{type = regular}} ->
            case filename:extension(Name) of
                ".md" -> [Rel];
                _ -> []
            end;
        _ -> []
    end.

join("", Name) -> Name;
join(Dir, Name) -> filename:join(Dir, Name).

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

%% Every foo.md or dir/foo.md in a page's text, code included; links are
%% left out whole (links_resolve_test checks their targets, and the text of
%% a link elsewhere may name a file there).
md_names(Md) ->
    Text = re:replace(Md, "\\[[^]]*\\]\\([^)]*\\)", "", [global, unicode]),
    case re:run(Text, "[A-Za-z0-9_./-]+\\.md\\b", [global, unicode, {capture, all, list}]) of
        {match, Ms} -> lists:usort([M || [M] <- Ms, not external(M)]);
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

%% Whether a module is named among a line's code spans: itself, a
%% `Prefix*' it starts with, or a `_Suffix' beside its `Prefix'.
named(M, Spans) ->
    lists:any(fun(Span) ->
                      Span =:= M
                          orelse (lists:suffix("*", Span)
                                  andalso lists:prefix(lists:droplast(Span), M))
                          orelse (lists:prefix("_", Span) andalso lists:suffix(Span, M)
                                  andalso lists:member(lists:sublist(M, length(M) - length(Span)), Spans))
              end, Spans).

%% The text from a heading to the next heading of any level.
section(Md, Heading) ->
    Lines = string:split(unicode:characters_to_list(Md), "\n", all),
    [_ | After] = lists:dropwhile(fun(L) -> L =/= Heading end, Lines),
    lists:takewhile(fun(L) -> not lists:prefix("#", L) end, After).

%% A table's body rows (not its header, not the |---| line).
table_rows(Lines) ->
    case [L || L = "|" ++ _ <- Lines] of
        [_Header, _Rule | Rows] -> Rows;
        _ -> []
    end.

first_cell("|" ++ Row) ->
    hd(string:split(Row, "|")).

%% A row's cells (a `\|' inside a cell is not a border), without the
%% empty ones outside the first and last borders.
cells(Row) ->
    Cells = re:split(Row, "(?<!\\\\)\\|", [{return, list}, unicode]),
    lists:droplast(tl(Cells)).

%% The values a default cell starts with: numbers, words and code spans
%% read as Erlang terms, separated by `, ' (`{0,0,0,0}`, `0`), up to the
%% first thing that is none of them ("4 (at most ...)" is 4).
leading_values(Cell) ->
    leading_values(string:trim(Cell, leading), []).

leading_values(Text, Acc) ->
    case re:run(Text, "^(?:`([^`]*)`|([A-Za-z0-9_]+))(, )?", [{capture, all, list}, unicode]) of
        {match, [Whole, Span | Rest]} ->
            Token = case Rest of
                        [Word | _] when Span =:= "" -> Word;
                        _ -> Span
                    end,
            Acc2 = [term(Token) | Acc],
            case lists:suffix(", ", Whole) of
                true -> leading_values(lists:nthtail(length(Whole), Text), Acc2);
                false -> lists:reverse(Acc2)
            end;
        nomatch ->
            lists:reverse(Acc)
    end.

term(S) ->
    {ok, Tokens, _} = erl_scan:string(S ++ "."),
    {ok, T} = erl_parse:parse_term(Tokens),
    T.

%% sluice_opts:defaults/0, with socket_opts as a listener gets them.
documented_defaults() ->
    {ok, #{socket_opts := SO}} = sluice_opts:validate(#{handler => {sluice_proto_echo, []}}),
    (sluice_opts:defaults())#{socket_opts := SO}.

arity("") -> 0;
arity(Args) -> length(string:split(Args, ",", all)).

%% `{reply, IoData, S, Timeout}` -> {reply, 4}
shape(Span) ->
    [Tag | _] = Elements = string:split(string:trim(Span, both, "{}"), ",", all),
    {list_to_atom(string:trim(Tag)), length(Elements)}.

%% The result shapes named in the paragraph that starts with Start.
paragraph_shapes(Md, Start) ->
    Lines = string:split(unicode:characters_to_list(Md), "\n", all),
    [_ | _] = Para = lists:takewhile(fun(L) -> L =/= "" end,
                                     lists:dropwhile(fun(L) -> not lists:prefix(Start, L) end,
                                                     Lines)),
    lists:usort([shape(S) || S <- code_spans(lists:flatten(lists:join(" ", Para))),
                             lists:prefix("{", S)]).

%% The tuples of a union type of sluice_handler's, by tag and size.
type_shapes(Name) ->
    {ok, {_, [{abstract_code, {_, Forms}}]}} =
        beam_lib:chunks(code:which(sluice_handler), [abstract_code]),
    [{type, _, union, Tuples}] = [Def || {attribute, _, type, {N, Def, _}} <- Forms, N =:= Name],
    lists:usort([{Tag, length(Es)} || {type, _, tuple, [{atom, _, Tag} | _] = Es} <- Tuples]).

code_spans(Text) ->
    case re:run(Text, "`([^`]+)`", [global, unicode, {capture, all_but_first, list}]) of
        {match, Ms} -> [S || [S] <- Ms];
        nomatch -> []
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
