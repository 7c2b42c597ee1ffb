%% `bin/sluice' answers any command line with a verdict, never a crash:
%% PropEr drives sluice_cli:check/1 (what run/1 would do, found without
%% running anything) with argv lists built from each command's real option
%% names and near-misses of them (`--port=80', `--port' with no value,
%% repeated options, negative, huge, float, empty, unicode and multi-line
%% values, address ranges, comma lists with empty items, `--', stray words,
%% unknown options, another command's options). The verdict is `run',
%% `help' or a usage error, exit 2, with one flat line. Then a few real
%% `bin/sluice' runs of the command lines that crashed or misbehaved: exit
%% 2 and one line of output, with no "internal error" or term in it.
%%
%% What a C program checks itself (`load' with one engine, `ref-server')
%% and what needs the run (a port in use, a TLS file) is not in check/1;
%% nothing is started (no listener, no node, no engine run).
-module(sluice_cli_prop_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

%% PropEr's macros, spelled out as in sluice_frame_SUITE (Debian's
%% erlang-proper ships no proper.hrl).
-define(FORALL(X, RawType, Prop), proper:forall(RawType, fun(X) -> Prop end)).
-define(LET(X, RawType, Gen), proper_types:bind(RawType, fun(X) -> Gen end, false)).
-define(WHENFAIL(Action, Prop), proper:whenfail(fun() -> Action end, fun() -> Prop end)).
-import(proper_types, [frequency/1, integer/2, list/1, oneof/1, elements/1]).

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([serve_answers_any_command_line/1,
         load_answers_any_command_line/1,
         ref_server_answers_any_command_line/1,
         bench_answers_any_command_line/1,
         soak_answers_any_command_line/1,
         idle_memory_answers_any_command_line/1,
         any_first_word_is_answered/1,
         a_unicode_value_is_a_usage_error/1,
         a_value_with_a_newline_is_one_line/1,
         a_server_metrics_url_that_does_not_parse_is_a_usage_error/1,
         hosts_with_no_host_is_a_usage_error/1,
         a_long_unix_path_is_a_usage_error_in_words/1,
         serve_on_a_unix_path_past_latin1/1,
         bin_sluice_answers_the_counterexamples_in_one_line/1]).

-define(NUMTESTS, 300).
-define(COMMANDS, ["serve", "load", "ref-server", "bench", "soak", "idle-memory"]).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [serve_answers_any_command_line, load_answers_any_command_line,
     ref_server_answers_any_command_line, bench_answers_any_command_line,
     soak_answers_any_command_line, idle_memory_answers_any_command_line,
     any_first_word_is_answered, a_unicode_value_is_a_usage_error,
     a_value_with_a_newline_is_one_line,
     a_server_metrics_url_that_does_not_parse_is_a_usage_error,
     hosts_with_no_host_is_a_usage_error, a_long_unix_path_is_a_usage_error_in_words,
     serve_on_a_unix_path_past_latin1, bin_sluice_answers_the_counterexamples_in_one_line].

init_per_suite(Config) ->
    case sluice_load_test_lib:built_bin(Config) of
        {fail, _} = Fail -> Fail;
        Config1 -> [{flags, all_flags()} | Config1]
    end.

end_per_suite(_Config) ->
    ok.

init_per_testcase(_Case, Config) ->
    sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) ->
    sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------
%%% The verdict
%%% ------------------------------------------------------------------

%% `run', `help', or exit 2 with one flat, printable line that says what
%% is wrong in words, not a term.
verdict(Argv) ->
    try sluice_cli:check(Argv) of
        run -> ok;
        help -> ok;
        {error, 2, Msg} ->
            case one_line(Msg) of
                true -> ok;
                false -> {not_one_line, Msg}
            end;
        Other -> {unexpected, Other}
    catch Class:Reason:Stack ->
            {crashed, Class, Reason, lists:sublist(Stack, 3)}
    end.

one_line(Msg) ->
    io_lib:char_list(Msg)
        andalso Msg =/= []
        andalso not lists:any(fun(C) -> C < 32 orelse C =:= 127 end, Msg)
        andalso string:find(Msg, "internal error") =:= nomatch
        andalso string:find(Msg, "{") =:= nomatch
        andalso string:find(Msg, "#{") =:= nomatch.

prop(Cmd, Flags, Config) ->
    ?FORALL(Argv, argv(Flags, ?config(flags, Config)),
            begin
                V = verdict([Cmd | Argv]),
                ?WHENFAIL(ct:pal("bin/sluice ~ts ~tp~n  -> ~tp", [Cmd, Argv, V]), V =:= ok)
            end).

check_prop(Cmd, Specs, Config) ->
    Flags = [{F, T} || #{flag := F, type := T} <- Specs],
    ?assertEqual(true, proper:quickcheck(prop(Cmd, Flags, Config),
                                         [{numtests, ?NUMTESTS}, {to_file, user}])).

%%% ------------------------------------------------------------------
%%% Generators
%%% ------------------------------------------------------------------

%% The real specs of every command (load's and ref-server's from their C
%% programs' tables).
specs("serve") -> sluice_cmd_serve:specs();
specs("bench") -> sluice_cmd_bench:specs();
specs("soak") -> sluice_cmd_soak:specs();
specs("idle-memory") -> sluice_cmd_idle_memory:specs();
specs("load") ->
    {ok, _, #{specs := Engine}} = sluice_cprog:table("sluice-load"),
    sluice_cmd_load:own_specs() ++ Engine;
specs("ref-server") ->
    {ok, _, #{specs := Ref}} = sluice_cprog:table("sluice-ref"),
    Ref.

all_flags() ->
    lists:usort([F || C <- ?COMMANDS, #{flag := F} <- specs(C)]).

%% Mostly the command's own options with a value of their type or a bad
%% one; some near-misses of every kind.
argv(Flags, AllFlags) ->
    ?LET(Items, list(item(Flags, AllFlags)), lists:append(Items)).

item(Flags, AllFlags) ->
    ?LET({{Flag, Type}, Other}, {elements(Flags), elements(AllFlags)},
         frequency([{8, ?LET(V, value(Type), ["--" ++ Flag, V])},
                    {3, ?LET(V, value(Type), ["--" ++ Flag ++ "=" ++ V])},
                    {2, ["--" ++ Flag]},
                    {1, ?LET(V, value(Type), ["--" ++ Other, V])},
                    {1, ?LET(V, value(Type), ["--" ++ Other ++ "=" ++ V])},
                    {1, elements([["--"], ["-"], ["--="], ["--=5"], ["-p", "80"],
                                  ["stray"], ["--no-such-option"], ["--" ++ Flag ++ "x"],
                                  ["-" ++ Flag], [string:uppercase("--" ++ Flag)],
                                  ["--help=yes"], ["日本"], ["--日本", "1"]])}])).

value(Type) ->
    frequency([{4, good(Type)}, {3, odd()}, {1, ?LET(N, integer(-5, 70000), integer_to_list(N))}]).

%% A value of the option's type (sometimes one the checks of several
%% options together refuse).
good(integer) -> ?LET(N, integer(-3, 100), integer_to_list(N));
good({integer, Min, Max}) ->
    Hi = case Max of infinity -> Min + 100000; _ -> Max end,
    ?LET(N, oneof([Min, Hi, integer(Min, min(Hi, Min + 1000))]), integer_to_list(N));
good({number, Min, Max}) ->
    Hi = case Max of infinity -> Min + 1000; _ -> Max end,
    elements([plain(Min), plain(Hi), plain((Min + Hi) / 2), "1e2", ".5", "1."]);
good(string) -> elements(["x", "/tmp/sluice-prop-none", "local", "3", "127.0.0.1", "lockstep"]);
good(ip) -> elements(["127.0.0.1", "::1", "localhost", "0.0.0.0"]);
good({enum, Atoms}) -> elements([atom_to_list(A) || A <- Atoms]);
good({enum_list, Atoms}) ->
    ?LET(L, list(elements(Atoms)), lists:join(",", [atom_to_list(A) || A <- L]));
good({choice, Names}) -> elements(Names);
good(active) -> elements(["false", "once", "true", "adaptive", "1", "32767", "100"]);
good(timeout) -> elements(["1", "5000", "infinity", "4294967295"]);
good(bytes) -> elements(["1", "65536", "infinity"]);
good(boolean) -> elements(["true", "false"]).

%% Near-misses of any option's value.
odd() ->
    elements(["", " ", "-1", "-0", "0", "+5", "1.5", "1,5", "0x10", "1e999", "nan", "inf",
              "99999999999999999999999", "-99999999999999999999999", "4294967296",
              "9223372036854775807", "1_000", "٣", "日本", "ñ", "é,ü", "1\n2", "a\tb", "\e[2J",
              "127.0.0.1-127.0.0.300", "127.0.0.300", "10.0.0.1-10.0.0.5", "::1-::9",
              "fd00::2-fd00::9", "127.0.0.1,::1", ",", ",,", "a,,b", "lockstep,,",
              ",lockstep", "all,lockstep", "local", "local,", "3", "0", "257",
              "http://[::1", "http://", "http://127.0.0.1:1/metrics", "http://x:99999/metrics",
              "ftp://x/metrics", "--port", "--", "=", "infinity", "true", "false", "yes",
              long_path()]).

%% Past a Unix socket's 107 bytes.
long_path() ->
    "/tmp/" ++ lists:duplicate(200, $a).

plain(X) when is_float(X), X == trunc(X) -> integer_to_list(trunc(X));
plain(X) when is_float(X) -> float_to_list(X, [short]);
plain(X) -> integer_to_list(X).

%%% ------------------------------------------------------------------
%%% Properties
%%% ------------------------------------------------------------------

serve_answers_any_command_line(Config) ->
    check_prop("serve", specs("serve"), Config).

load_answers_any_command_line(Config) ->
    check_prop("load", specs("load"), Config).

ref_server_answers_any_command_line(Config) ->
    check_prop("ref-server", specs("ref-server"), Config).

bench_answers_any_command_line(Config) ->
    check_prop("bench", specs("bench"), Config).

soak_answers_any_command_line(Config) ->
    check_prop("soak", specs("soak"), Config).

idle_memory_answers_any_command_line(Config) ->
    check_prop("idle-memory", specs("idle-memory"), Config).

%% The command word itself: a command, a near-miss of one, or anything.
any_first_word_is_answered(Config) ->
    Words = ?COMMANDS ++ ["", "serv", "SERVE", "--serve", "-h", "--help", "help", "日本",
                          "1\n2", "--port"],
    Prop = ?FORALL({W, Argv}, {elements(Words), argv([{"port", {integer, 0, 65535}}],
                                                     ?config(flags, Config))},
                   begin
                       V = verdict([W | Argv]),
                       ?WHENFAIL(ct:pal("bin/sluice ~tp ~tp~n  -> ~tp", [W, Argv, V]), V =:= ok)
                   end),
    ?assertEqual(true, proper:quickcheck(Prop, [{numtests, ?NUMTESTS}, {to_file, user}])).

%%% ------------------------------------------------------------------
%%% The counterexamples PropEr found, in the VM
%%% ------------------------------------------------------------------

%% A bad value with a character past Latin-1 crashed io_lib:format's ~s:
%% `internal error' and a stack, exit 1.
a_unicode_value_is_a_usage_error(_Config) ->
    ?assertEqual({error, 2, "bad value for --port: ٣ (expected an integer 0..65535)"},
                 sluice_cli:check(["serve", "--port", "٣"])),
    ?assertEqual({error, 2, "bad value for --protocol: 日本 (expected ack|ping|echo)"},
                 sluice_cli:check(["serve", "--protocol", "日本"])),
    ?assertMatch({error, 2, "bad value for --port: 日本 " ++ _},
                 sluice_cli:check(["ref-server", "--port", "日本"])),
    ?assertMatch({error, 2, "bad value for --conns: 日本 " ++ _},
                 sluice_cli:check(["load", "--conns", "日本"])),
    %% a number's (re:run without `unicode')
    ?assertEqual({error, 2, "bad value for --duration: ٣ (expected a number 0.1..600)"},
                 sluice_cli:check(["bench", "--duration", "٣"])),
    ?assertMatch({error, 2, "bad value for --rate: ٣ " ++ _},
                 sluice_cli:check(["load", "--rate", "٣"])).

%% What the user typed is quoted in the message: a newline in it made the
%% one line two.
a_value_with_a_newline_is_one_line(_Config) ->
    ?assertEqual({error, 2, "bad value for --port: 1\\n2 (expected an integer 0..65535)"},
                 sluice_cli:check(["serve", "--port", "1\n2"])),
    ?assertEqual({error, 2, "unexpected argument a\\tb\\x1B"},
                 sluice_cli:check(["soak", "a\tb\e"])).

%% `http://[::1' passed the check (it starts with http://): the run went
%% ahead and ended with `server metrics: http://[::1: invalid_uri', exit 3.
a_server_metrics_url_that_does_not_parse_is_a_usage_error(_Config) ->
    Bad = [{Url, V} || Url <- ["http://[::1", "http://", "http:///metrics", "http://a b/metrics"],
                       V <- [sluice_cli:check(["load", "--server-metrics", Url])],
                       V =/= {error, 2, "bad value for --server-metrics: " ++ Url
                                        ++ " (expected http://HOST:PORT/metrics)"}],
    ?assertEqual([], Bad),
    ?assertEqual(run, sluice_cli:check(["load", "--server-metrics",
                                        "http://[::1]:9100/metrics"])),
    ?assertEqual(run, sluice_cli:check(["load", "--server-metrics",
                                        "http://127.0.0.1:9100/metrics"])).

%% `--hosts ,' (or spaces) names no host: the nodes ran on this host, as
%% without --hosts, in silence.
hosts_with_no_host_is_a_usage_error(_Config) ->
    Bad = [{H, V} || H <- [",", ",,", " ", ", ,"],
                     V <- [sluice_cli:check(["serve", "--nodes", "2", "--hosts", H])],
                     V =/= {error, 2, "bad value for --hosts: " ++ H
                                      ++ " (expected local or a comma list of hosts)"}],
    ?assertEqual([], Bad),
    ?assertEqual(run, sluice_cli:check(["serve", "--nodes", "2", "--hosts", "a,b"])),
    ?assertEqual(run, sluice_cli:check(["serve", "--nodes", "2", "--hosts", "local"])).

%% `serve --unix' with a path past a Unix socket's limit answered with the
%% library's error for its `ip' option: `--ip: bad value for option ip:
%% {local,"/tmp/aaa..."} (expected ... {local, Path} ...)'.
a_long_unix_path_is_a_usage_error_in_words(_Config) ->
    ?assertEqual({error, 2, "bad value for --unix: " ++ long_path() ++ " (expected a path of at "
                            "most 107 bytes once made absolute: a Unix socket's limit)"},
                 sluice_cli:check(["serve", "--unix", long_path()])).

%%% ------------------------------------------------------------------
%%% The same, from bin/sluice
%%% ------------------------------------------------------------------

%% `serve --unix /tmp/日本.sock' passed every check, listened, then
%% crashed printing its `listening on' line (`~s'): internal error, exit
%% 1. The line is the path as given (UTF-8), and SIGTERM stops it, exit 0.
serve_on_a_unix_path_past_latin1(Config) ->
    Path = "/tmp/sluice-prop-" ++ os:getpid() ++ "-日本.sock",
    {Port, OsPid} = sluice_load_test_lib:sluice(Config, ["serve", "--unix", Path,
                                                         "--protocol", "ping"]),
    try
        {[], Before} = sluice_load_test_lib:wait_line(Port, "^listening on unix:", 15000),
        ?assertEqual(unicode:characters_to_binary("listening on unix:" ++ Path),
                     lists:last(Before)),
        sluice_load_test_lib:signal("TERM", OsPid),
        ?assertMatch({0, _}, sluice_load_test_lib:wait_exit(Port, 10000))
    after
        _ = file:delete(Path)
    end.
%%% ------------------------------------------------------------------

%% Each exits 2 with one line, `sluice: ...', and no crash report. The
%% `--hosts ,' line used to serve (here bounded by the 15 s wait).
bin_sluice_answers_the_counterexamples_in_one_line(Config) ->
    Lines = [["serve", "--port", "٣"],
             ["ref-server", "--port", "日本"],
             ["load", "--conns", "日本", "--port", "1"],
             ["bench", "--duration", "٣"],
             ["load", "--rate", "٣", "--port", "1"],
             ["serve", "--port", "1\n2"],
             ["load", "--server-metrics", "http://[::1", "--port", "1", "--duration", "0.1"],
             ["serve", "--ip", "127.0.0.1", "--port", "0", "--nodes", "1", "--hosts", ","]],
    Bad = [{Args, Status, Out}
           || Args <- Lines,
              {Status, Out} <- [sluice_load_test_lib:sluice_exit(Config, Args)],
              not (Status =:= 2 andalso length(Out) =:= 1
                   andalso binary:match(hd(Out), <<"sluice: ">>) =:= {0, 8}
                   andalso binary:match(hd(Out), [<<"internal error">>, <<"{">>,
                                                  <<"REPORT">>]) =:= nomatch)],
    ?assertEqual([], Bad).
