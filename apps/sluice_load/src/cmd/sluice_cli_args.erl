%% @doc The one command-line option parser of `bin/sluice': each option is
%% a spec (key, flag, type, default, help), so that parsing, the one-line
%% errors and `--help' all come from one table. The C programs' options come
%% in as specs too (sluice_cprog reads their tables), and to_args/2 renders
%% the parsed values back into their command lines.
-module(sluice_cli_args).

-export([opt/4, parse/2, check/3, with_options/5, with_options/6, usage/3, option_lines/1,
         help_line/0, to_args/2]).

-export_type([spec/0, type/0]).

-type type() :: integer | {integer, integer(), integer() | infinity}
              | {number, number(), number() | infinity} | string | ip
              | {enum, [atom()]} | {enum_list, [atom()]} | {choice, [string()]}
              | active | timeout | bytes | boolean.
%% `{enum_list, Atoms}' takes a comma list of them (`--scenario lockstep,paced')
%% and gives the list, in the order given, each once.
%% `default' is the value when the option is not given (`undefined': none);
%% `shown', when present, is what --help says instead of the default (a C
%% program's own wording, "number of cores"); `meta' names the value in
%% --help ("SECONDS").
-type spec() :: #{key := atom(), flag := string(), type := type(), default := term(),
                  help := string(), shown => string(), meta => string()}.

%% @doc A spec whose flag is the key with `-' for `_' (`max_frame' is
%% `--max-frame').
-spec opt(atom(), type(), term(), string()) -> spec().
opt(Key, Type, Default, Help) ->
    #{key => Key, flag => lists:flatten(string:replace(atom_to_list(Key), "_", "-", all)),
      type => Type, default => Default, help => Help}.

%% @doc Parse `--flag value' and `--flag=value' pairs (and `--flag' alone
%% for booleans) into a map holding every key, defaults filled in. `--help'
%% or `-h' anywhere asks for the help, whatever else is on the line. An
%% option given twice is an error rather than the last one winning in
%% silence (`--scenario a --scenario b' ran only b): several values go in
%% one comma list where the option takes one.
-spec parse([spec()], [string()]) -> {ok, map()} | help | {error, string()}.
parse(Specs, Args) ->
    case lists:member("--help", Args) orelse lists:member("-h", Args) of
        true -> help;
        false -> parse(Specs, Args, maps:from_list([{K, D} || #{key := K, default := D} <- Specs]),
                       #{})
    end.

%% @doc A command's usual start: `--help' prints its help (exit 0), a bad
%% option is a usage error (exit 2), and otherwise `Fun' runs with the
%% parsed options.
-spec with_options(string(), string(), [spec()], [string()],
                   fun((map()) -> sluice_cli:result())) -> sluice_cli:result().
with_options(Command, About, Specs, Args, Fun) ->
    with_options(Command, About, Specs, Args, fun(_) -> ok end, Fun).

%% @doc with_options/5 with the command's own checks of the parsed
%% options (check/3's `Check'), made before `Fun' runs.
-spec with_options(string(), string(), [spec()], [string()],
                   fun((map()) -> ok | {error, string()}),
                   fun((map()) -> sluice_cli:result())) -> sluice_cli:result().
with_options(Command, About, Specs, Args, Check, Fun) ->
    case check(Specs, Args, Check) of
        help ->
            io:put_chars(usage(Command, About, Specs)),
            0;
        {error, _, _} = E ->
            E;
        {ok, Opts} ->
            Fun(Opts)
    end.

%% @doc with_options/5's verdict without running anything: the options
%% `Check' makes of the parsed ones (`{ok, Opts}'), `help', or the usage
%% error. `Check' returns `ok' or `{error, Message}'.
-spec check([spec()], [string()], fun((map()) -> ok | {error, string()})) ->
          {ok, map()} | help | {error, 2, string()}.
check(Specs, Args, Check) ->
    case parse(Specs, Args) of
        {ok, Opts} ->
            case Check(Opts) of
                ok -> {ok, Opts};
                {error, Msg} -> {error, 2, Msg}
            end;
        help -> help;
        {error, Msg} -> {error, 2, Msg}
    end.

%% `Given': the keys given so far.
parse(_Specs, [], Acc, _Given) ->
    {ok, Acc};
parse(Specs, ["--" ++ FlagVal | Rest], Acc, Given) ->
    {Flag, Inline} = case string:split(FlagVal, "=") of
                         [F, Val] -> {F, {value, Val}};
                         [F] -> {F, none}
                     end,
    case [S || #{flag := SF} = S <- Specs, SF =:= Flag] of
        [] ->
            {error, "unknown option --" ++ Flag};
        [#{key := Key} = Spec | _] when is_map_key(Key, Given) ->
            {error, "option --" ++ Flag ++ " given twice" ++ twice_hint(Spec)};
        [#{key := Key, type := boolean} | _] when Inline =:= none ->
            parse(Specs, Rest, Acc#{Key => true}, Given#{Key => true});
        [Spec | _] ->
            case {Inline, Rest} of
                {{value, V}, _} -> value(Specs, Spec, V, Rest, Acc, Given);
                {none, [V | Rest2]} -> value(Specs, Spec, V, Rest2, Acc, Given);
                {none, []} -> {error, "option --" ++ Flag ++ " needs a value"}
            end
    end;
parse(_Specs, [Arg | _], _Acc, _Given) ->
    {error, "unexpected argument " ++ Arg}.

twice_hint(#{type := {enum_list, _}, flag := Flag}) ->
    " (for several, one comma list: --" ++ Flag ++ " A,B)";
twice_hint(_) ->
    "".

value(Specs, #{key := Key, flag := Flag, type := Type}, V, Rest, Acc, Given) ->
    case convert(Type, V) of
        {ok, Value} -> parse(Specs, Rest, Acc#{Key => Value}, Given#{Key => true});
        %% ~ts: a value is what the user typed, any character (`--port ٣')
        error -> {error, lists:flatten(io_lib:format("bad value for --~s: ~ts (expected ~ts)",
                                                     [Flag, V, describe(Type)]))}
    end.

convert(integer, V) -> int(V);
convert({integer, Min, Max}, V) -> in_range(int(V), Min, Max);
convert({number, Min, Max}, V) -> in_range(number(V), Min, Max);
convert(string, "") -> error;
convert(string, V) -> {ok, V};
convert(ip, V) ->
    %% An address, or a host name (`localhost'): IPv4 first, as a client
    %% of that name would most often try.
    case inet:parse_address(V) of
        {ok, IP} -> {ok, IP};
        _ ->
            case inet:getaddr(V, inet) of
                {ok, IP} -> {ok, IP};
                _ -> case inet:getaddr(V, inet6) of
                         {ok, IP} -> {ok, IP};
                         _ -> error
                     end
            end
    end;
convert({enum, Atoms}, V) ->
    case [A || A <- Atoms, atom_to_list(A) =:= V] of
        [A] -> {ok, A};
        [] -> error
    end;
convert({enum_list, Atoms}, V) ->
    Converted = [convert({enum, Atoms}, I) || I <- string:split(V, ",", all)],
    case lists:member(error, Converted) of
        false -> {ok, lists:uniq([A || {ok, A} <- Converted])};
        true -> error
    end;
convert({choice, Names}, V) ->
    case lists:member(V, Names) of
        true -> {ok, V};
        false -> error
    end;
convert(active, V) when V =:= "false"; V =:= "once"; V =:= "true"; V =:= "adaptive" ->
    {ok, list_to_atom(V)};
convert(active, V) -> convert({integer, 1, 32767}, V);
convert(timeout, "infinity") -> {ok, infinity};
convert(timeout, V) -> convert({integer, 1, infinity}, V);
convert(bytes, V) -> convert(timeout, V);  % the same values: 1.. or infinity
convert(boolean, V) when V =:= "true"; V =:= "false" -> {ok, list_to_atom(V)};
convert(boolean, _) -> error.

in_range({ok, N}, Min, infinity) when N >= Min -> {ok, N};
in_range({ok, N}, Min, Max) when N >= Min, N =< Max -> {ok, N};
in_range(_, _, _) -> error.

int(V) ->
    try list_to_integer(V) of N -> {ok, N}
    catch error:badarg -> error
    end.

%% A decimal number as a user types it and as the C programs' strtod(3)
%% reads it: `5', `-2', `0.3', `.3', `1.', `1e3', `2.5E-3'
%% (list_to_float/1 wants digits on both sides of the point and takes no
%% `1e3'). An integer stays one.
number(V) ->
    case re:run(V, "^([+-]?)([0-9]*)(?:\\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?$",
                %% unicode: any character may come (`--rate ٣' failed re:run)
                [unicode, {capture, all_but_first, list}]) of
        {match, [_, [], []]} -> error;
        {match, [_, [], [], _]} -> error;
        {match, [_, _]} -> int(V);
        {match, [Sign, Int, Frac | Exp]} -> float(Sign, Int, Frac, Exp);
        nomatch -> error
    end.

float(Sign, Int, Frac, Exp) ->
    Digits = fun([]) -> "0"; (D) -> D end,
    E = case Exp of [] -> "0"; [X] -> X end,
    try list_to_float(Sign ++ Digits(Int) ++ "." ++ Digits(Frac) ++ "e" ++ E) of
        F -> {ok, F}
    catch error:badarg -> error  % past a double
    end.

describe(integer) -> "an integer";
describe({integer, Min, infinity}) -> io_lib:format("an integer >= ~b", [Min]);
describe({integer, Min, Max}) -> io_lib:format("an integer ~b..~b", [Min, Max]);
describe({number, Min, infinity}) -> io_lib:format("a number >= ~s", [plain(Min)]);
describe({number, Min, Max}) -> io_lib:format("a number ~s..~s", [plain(Min), plain(Max)]);
describe(string) -> "a non-empty string";
describe(ip) -> "an IP address or a host name";
describe({enum, Atoms}) -> lists:join("|", [atom_to_list(A) || A <- Atoms]);
describe({enum_list, Atoms}) -> ["one or a comma list of ", describe({enum, Atoms})];
describe({choice, Names}) -> lists:join("|", Names);
describe(active) -> "adaptive|false|once|true|N (1..32767)";
describe(timeout) -> "milliseconds or infinity";
describe(bytes) -> "a number of bytes or infinity";
describe(boolean) -> "true|false".

%% @doc The help text: a synopsis line, one line per option, the
%% command's exit codes.
-spec usage(string(), string(), [spec()]) -> iolist().
usage(Command, About, Specs) ->
    [io_lib:format("usage: bin/sluice ~s [options]~n~n~s~n~noptions:~n", [Command, About]),
     option_lines(Specs),
     help_line(),
     sluice_cli_exit:help(Command)].

%% @doc The line --help itself gets in a help text.
-spec help_line() -> iolist().
help_line() ->
    io_lib:format("  ~ts this text~n", [string:pad("--help", 30)]).

%% @doc One help line per option, with its default: for a help text made of
%% several sections (`bin/sluice load --help').
-spec option_lines([spec()]) -> iolist().
option_lines(Specs) ->
    %% padded, not ~-30s: that would cut a long list of choices
    [io_lib:format("  ~ts ~ts (default: ~ts)~n",
                   [string:pad("--" ++ Flag ++ arg(S), 30), Help, shown(S)])
     || #{flag := Flag, help := Help} = S <- Specs].

arg(#{type := boolean}) -> "";
arg(#{type := {enum, Atoms}}) -> " " ++ lists:join("|", [atom_to_list(A) || A <- Atoms]);
arg(#{type := {enum_list, Atoms}} = S) -> arg(S#{type := {enum, Atoms}}) ++ ",...";
arg(#{type := {choice, Names}}) -> " " ++ lists:join("|", Names);
arg(#{meta := Meta}) -> " " ++ Meta;
arg(#{type := ip}) -> " IP";
arg(#{type := active}) -> " MODE";
arg(#{type := timeout}) -> " MS";
arg(#{type := bytes}) -> " BYTES";
arg(#{type := string}) -> " STR";
arg(#{type := {number, _, _}}) -> " X";
arg(_) -> " N".

shown(#{shown := Shown}) -> Shown;
shown(#{type := boolean, default := false}) -> "off";  % a flag, as the C programs say it
shown(#{type := boolean, default := true}) -> "on";
shown(#{default := D}) -> show(D).

%% A bound as a user writes it: 10000000, not 1.0e7 (the C programs' table
%% gives its bounds as doubles).
plain(X) when is_float(X), X == trunc(X), abs(X) < 1.0e15 -> integer_to_list(trunc(X));
plain(X) -> show(X).

show(IP) when is_tuple(IP) -> inet:ntoa(IP);
show(undefined) -> "none";
show(V) when is_atom(V) -> atom_to_list(V);
show(V) when is_integer(V) -> integer_to_list(V);
show(V) when is_float(V) -> float_to_list(V, [short]);
show([A | _] = L) when is_atom(A) -> lists:flatten(lists:join(",", [atom_to_list(X) || X <- L]));
show(V) when is_list(V) -> V.

%% @doc The command line that stands for the options of `Specs' that were
%% given (a value other than `undefined', a boolean that is true): what a
%% C program is run with after the CLI has checked its options.
-spec to_args([spec()], map()) -> [string()].
to_args(Specs, Values) ->
    lists:append([arg_value(S, maps:get(K, Values, undefined)) || #{key := K} = S <- Specs]).

arg_value(_, undefined) -> [];
arg_value(#{type := boolean}, false) -> [];
arg_value(#{type := boolean, flag := F}, true) -> ["--" ++ F];
arg_value(#{flag := F}, V) -> ["--" ++ F, show(V)].
