%% @doc A small command-line option parser shared by the `bin/sluice'
%% subcommands: each option has a type, a default and a help line, so that
%% errors and `--help' come from one table.
-module(sluice_cli_args).

-export([parse/2, usage/3, option_lines/1]).

-export_type([spec/0]).

-type type() :: integer | {integer, integer(), integer() | infinity} | string
              | ip | {enum, [atom()]} | active | timeout | boolean.
%% {Key, Flag (without "--"), Type, Default, Help}
-type spec() :: {atom(), string(), type(), term(), string()}.

%% @doc Parse `--flag value' and `--flag=value' pairs (and `--flag' alone
%% for booleans) into a map holding every key, defaults filled in.
-spec parse([spec()], [string()]) -> {ok, map()} | help | {error, string()}.
parse(Specs, Args) ->
    Defaults = maps:from_list([{K, D} || {K, _, _, D, _} <- Specs]),
    parse(Specs, Args, Defaults).

parse(_Specs, [], Acc) ->
    {ok, Acc};
parse(_Specs, [H | _], _Acc) when H =:= "--help"; H =:= "-h" ->
    help;
parse(Specs, ["--" ++ FlagVal | Rest], Acc) ->
    {Flag, Inline} = case string:split(FlagVal, "=") of
                         [F, Val] -> {F, {value, Val}};
                         [F] -> {F, none}
                     end,
    case lists:keyfind(Flag, 2, Specs) of
        false ->
            {error, "unknown option --" ++ Flag};
        {Key, _, boolean, _, _} when Inline =:= none ->
            parse(Specs, Rest, Acc#{Key => true});
        {Key, _, Type, _, _} ->
            case {Inline, Rest} of
                {{value, V}, _} -> value(Specs, Key, Flag, Type, V, Rest, Acc);
                {none, [V | Rest2]} -> value(Specs, Key, Flag, Type, V, Rest2, Acc);
                {none, []} -> {error, "option --" ++ Flag ++ " needs a value"}
            end
    end;
parse(_Specs, [Arg | _], _Acc) ->
    {error, "unexpected argument " ++ Arg}.

value(Specs, Key, Flag, Type, V, Rest, Acc) ->
    case convert(Type, V) of
        {ok, Value} -> parse(Specs, Rest, Acc#{Key => Value});
        error -> {error, lists:flatten(io_lib:format("bad value for --~s: ~s (expected ~s)",
                                                     [Flag, V, describe(Type)]))}
    end.

convert(integer, V) -> int(V);
convert({integer, Min, Max}, V) ->
    case int(V) of
        {ok, N} when N >= Min, Max =:= infinity -> {ok, N};
        {ok, N} when N >= Min, N =< Max -> {ok, N};
        _ -> error
    end;
convert(string, V) -> {ok, V};
convert(ip, V) ->
    case inet:parse_address(V) of
        {ok, IP} -> {ok, IP};
        _ -> error
    end;
convert({enum, Atoms}, V) ->
    case [A || A <- Atoms, atom_to_list(A) =:= V] of
        [A] -> {ok, A};
        [] -> error
    end;
convert(active, V) when V =:= "false"; V =:= "once"; V =:= "true" ->
    {ok, list_to_atom(V)};
convert(active, V) -> convert({integer, 1, 32767}, V);
convert(timeout, "infinity") -> {ok, infinity};
convert(timeout, V) -> convert({integer, 1, infinity}, V);
convert(boolean, V) when V =:= "true"; V =:= "false" -> {ok, list_to_atom(V)};
convert(boolean, _) -> error.

int(V) ->
    try list_to_integer(V) of N -> {ok, N}
    catch error:badarg -> error
    end.

describe(integer) -> "an integer";
describe({integer, Min, infinity}) -> io_lib:format("an integer >= ~b", [Min]);
describe({integer, Min, Max}) -> io_lib:format("an integer ~b..~b", [Min, Max]);
describe(string) -> "a string";
describe(ip) -> "an IP address";
describe({enum, Atoms}) -> lists:join("|", [atom_to_list(A) || A <- Atoms]);
describe(active) -> "false|once|true|N (1..32767)";
describe(timeout) -> "milliseconds or infinity";
describe(boolean) -> "true|false".

%% @doc The help text: a synopsis line, then one line per option.
-spec usage(string(), string(), [spec()]) -> iolist().
usage(Command, About, Specs) ->
    [io_lib:format("usage: bin/sluice ~s [options]~n~n~s~n~noptions:~n", [Command, About]),
     option_lines(Specs),
     io_lib:format("  --~-28s ~s~n", ["help", "this text"])].

%% @doc One help line per option, with its default: for a help text made of
%% several sections (`bin/sluice load --help').
-spec option_lines([spec()]) -> iolist().
option_lines(Specs) ->
    %% padded, not ~-28s: that would cut a long enum (--scenario a|b|...)
    [io_lib:format("  ~ts ~s (default: ~s)~n",
                   [string:pad("--" ++ Flag ++ arg(Type), 30), Help, show(Default)])
     || {_, Flag, Type, Default, Help} <- Specs].

arg(boolean) -> "";
arg({enum, Atoms}) -> " " ++ lists:join("|", [atom_to_list(A) || A <- Atoms]);
arg(ip) -> " IP";
arg(active) -> " MODE";
arg(timeout) -> " MS";
arg(string) -> " STR";
arg(_) -> " N".

show(IP) when is_tuple(IP) -> inet:ntoa(IP);
show(undefined) -> "none";
show(V) when is_atom(V) -> atom_to_list(V);
show(V) when is_integer(V) -> integer_to_list(V);
show(V) when is_list(V) -> V.
