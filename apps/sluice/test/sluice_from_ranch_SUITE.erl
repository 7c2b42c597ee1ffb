%% docs/from-ranch.md's Erlang examples, run as the page shows them: every
%% ```erlang block is either a module, compiled from the page's text and
%% loaded, or a snippet, evaluated in the page's order with the bindings
%% of the snippets before it, with a client doing between them what the
%% page says ("With a client connected"). A block added to the page that
%% is neither run nor counted here fails every_erlang_block_is_run.
%% (The page's Elixir blocks: examples/kv/test/from_ranch_test.exs.)
-module(sluice_from_ranch_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1, end_per_testcase/2]).
-export([every_erlang_block_is_run/1,
         echo_protocol_echoes_and_closes_when_quiet/1,
         tcp_reverse_runs_as_the_page_shows/1]).

-define(PAGE, "docs/from-ranch.md").
-define(LOOPBACK, {127, 0, 0, 1}).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [every_erlang_block_is_run,
     echo_protocol_echoes_and_closes_when_quiet,
     tcp_reverse_runs_as_the_page_shows].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Blocks = erlang_blocks(read_page()),
    {Modules, Snippets} = lists:partition(fun is_module/1, Blocks),
    Loaded = [load(B, ?config(priv_dir, Config)) || B <- Modules],
    [{modules, Loaded}, {snippets, Snippets}, {blocks, Blocks} | Config].

end_per_suite(_Config) ->
    ok.

end_per_testcase(_Case, _Config) ->
    _ = [sluice:stop_listener(L) || L <- [from_ranch_echo, tcp_reverse]],
    ok.

%%% Cases

%% The page's blocks are the two protocols and the two snippets this
%% suite runs, and each snippet parses.
every_erlang_block_is_run(Config) ->
    ?assertEqual([echo_protocol, reverse_protocol], ?config(modules, Config)),
    Snippets = ?config(snippets, Config),
    ?assertEqual(2, length(Snippets)),
    ?assertEqual(length(?config(blocks, Config)), 2 + length(Snippets)),
    _ = [parse(S) || S <- Snippets],
    ok.

%% ranch's echo with a recv timeout of 5 s: chunks come back as they came,
%% and a client that says nothing for 5 s is closed (no handle_timeout/1:
%% reason `timeout').
echo_protocol_echoes_and_closes_when_quiet(_Config) ->
    {ok, _} = sluice:start_listener(from_ranch_echo, #{port => 0,
                                                       handler => {echo_protocol, []}}),
    #{port := Port} = sluice:info(from_ranch_echo),
    {ok, C} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}]),
    ok = gen_tcp:send(C, <<"Hello!">>),
    ?assertEqual({ok, <<"Hello!">>}, gen_tcp:recv(C, 0, 2000)),
    T0 = erlang:monotonic_time(millisecond),
    ?assertEqual({error, closed}, gen_tcp:recv(C, 0, 10000)),
    Quiet = erlang:monotonic_time(millisecond) - T0,
    ?assert(Quiet >= 4900 andalso Quiet < 9000, Quiet),
    ok = wait_closed(from_ranch_echo),
    ?assertMatch(#{close_reasons := #{handler := 1}}, sluice:info(from_ranch_echo)).

%% The first snippet starts tcp_reverse and walks ranch's listener calls;
%% a client's lines come back reversed, two in one packet as two, and a
%% line cut over two packets as one; the second snippet, with that client
%% connected, finds its connection, sends it a message, and drains.
tcp_reverse_runs_as_the_page_shows(Config) ->
    [Start, Connected] = ?config(snippets, Config),
    {value, _, Bindings} = eval(Start, erl_eval:new_bindings()),
    {value, Port} = erl_eval:binding('Port', Bindings),
    {ok, C} = gen_tcp:connect(?LOOPBACK, Port, [binary, {active, false}, {packet, line}]),
    ok = gen_tcp:send(C, <<"hello\r\nwor">>),
    ok = gen_tcp:send(C, <<"ld\r\n">>),
    ?assertEqual({ok, <<"olleh\r\n">>}, gen_tcp:recv(C, 0, 2000)),
    ?assertEqual({ok, <<"dlrow\r\n">>}, gen_tcp:recv(C, 0, 2000)),
    %% The client closes when the drain's FIN comes, as a client does.
    Test = self(),
    Client = spawn_link(fun() -> client(C, Test) end),
    ok = gen_tcp:controlling_process(C, Client),
    Client ! go,
    {value, ok, _} = eval(Connected, Bindings),
    ?assertEqual({line, <<"hello from the server\r\n">>}, receive_client()),
    ?assertEqual(closed, receive_client()),
    ?assertEqual({error, not_found}, sluice:info(tcp_reverse)).

%%% Helpers

client(C, Test) ->
    receive go -> ok end,
    ok = inet:setopts(C, [{active, true}]),
    client_loop(C, Test).

client_loop(C, Test) ->
    receive
        {tcp, C, Line} -> Test ! {client, {line, Line}}, client_loop(C, Test);
        {tcp_closed, C} -> ok = gen_tcp:close(C), Test ! {client, closed}
    end.

receive_client() ->
    receive {client, What} -> What after 10000 -> error(client_said_nothing) end.

wait_closed(Name) ->
    sluice_test_lib:wait_info(Name, connections, 0, 2000).

read_page() ->
    [Root | _] = [D || S <- [filename:dirname(?FILE), filename:dirname(code:which(?MODULE))],
                       D <- ancestors(filename:absname(S)),
                       filelib:is_regular(filename:join(D, ?PAGE))],
    {ok, Md} = file:read_file(filename:join(Root, ?PAGE)),
    unicode:characters_to_list(Md).

ancestors("/") -> ["/"];
ancestors(Dir) -> [Dir | ancestors(filename:dirname(Dir))].

%% The text of every ```erlang block, in the page's order.
erlang_blocks(Md) ->
    blocks(string:split(Md, "\n", all), none, []).

blocks([], none, Acc) ->
    lists:reverse(Acc);
blocks(["```erlang" | Rest], none, Acc) ->
    blocks(Rest, [], Acc);
blocks([_ | Rest], none, Acc) ->
    blocks(Rest, none, Acc);
blocks(["```" | Rest], Lines, Acc) ->
    blocks(Rest, none, [lists:flatten(lists:join("\n", lists:reverse(Lines))) | Acc]);
blocks([L | Rest], Lines, Acc) ->
    blocks(Rest, [L | Lines], Acc).

is_module(Block) ->
    lists:prefix("-module(", Block).

%% A module block, written to a file of its name and compiled as the page
%% has it (macros and all), then loaded.
load(Block, Dir) ->
    {match, [Name]} = re:run(Block, "^-module\\(([a-z_]+)\\)", [{capture, all_but_first, list}]),
    File = filename:join(Dir, Name ++ ".erl"),
    ok = file:write_file(File, Block),
    {ok, Mod, Bin} = compile:file(File, [binary, return_errors, warnings_as_errors]),
    {module, Mod} = code:load_binary(Mod, File, Bin),
    Mod.

parse(Snippet) ->
    {ok, Tokens, _} = erl_scan:string(Snippet),
    {ok, Exprs} = erl_parse:parse_exprs(Tokens),
    Exprs.

eval(Snippet, Bindings) ->
    {value, Value, Bindings2} = erl_eval:exprs(parse(Snippet), Bindings),
    {value, Value, Bindings2}.
