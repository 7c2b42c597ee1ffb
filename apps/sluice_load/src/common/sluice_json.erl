%% @doc The tooling's JSON codec: OTP 25 has no json module and the project
%% takes no dependencies. It decodes what the C programs write (the load
%% engine's results, progress and rounds, their option tables) and encodes
%% the benchmark's result files and the coordinator's merged report.
%%
%% Terms: objects are maps (keys atoms, binaries or strings when encoding,
%% binaries when decoding), arrays are lists, strings are binaries, numbers
%% are integers or floats, and `true', `false', `null' are atoms. Any other
%% atom encodes as a string. Non-finite numbers cannot occur in Erlang.
-module(sluice_json).

-export([encode/1, decode/1]).

-export_type([json/0]).

-type json() :: #{binary() | atom() | string() => json()} | [json()] | binary()
              | number() | boolean() | null | atom().

%%% ------------------------------------------------------------------
%%% Encoding
%%% ------------------------------------------------------------------

%% @doc Encode a term as JSON text (no insignificant whitespace except a
%% newline between the members of the top-level object, so the files diff
%% well).
-spec encode(json()) -> iodata().
encode(Map) when is_map(Map) ->
    Members = [[key(K), $:, value(V)] || {K, V} <- sorted(Map)],
    [${, lists:join(",\n", Members), "}\n"];
encode(Other) ->
    value(Other).

value(true) -> <<"true">>;
value(false) -> <<"false">>;
value(null) -> <<"null">>;
value(A) when is_atom(A) -> string(atom_to_binary(A, utf8));
value(B) when is_binary(B) -> string(B);
value(I) when is_integer(I) -> integer_to_binary(I);
value(F) when is_float(F) -> float_text(F);
value(M) when is_map(M) ->
    [${, lists:join($,, [[key(K), $:, value(V)] || {K, V} <- sorted(M)]), $}];
value(L) when is_list(L) ->
    [$[, lists:join($,, [value(V) || V <- L]), $]].

%% Member order: the insertion order of a map is not kept, so sort by key
%% for a stable file.
sorted(M) -> lists:keysort(1, [{key_bin(K), V} || {K, V} <- maps:to_list(M)]).

key(K) -> string(key_bin(K)).

key_bin(K) when is_atom(K) -> atom_to_binary(K, utf8);
key_bin(K) when is_binary(K) -> K;
key_bin(K) when is_list(K) -> unicode:characters_to_binary(K).

float_text(F) ->
    %% Integral floats as integers ("3" rather than "3.0e0") read better.
    case F == trunc(F) andalso abs(F) < 1.0e15 of
        true -> integer_to_binary(trunc(F));
        false -> list_to_binary(float_to_list(F, [short]))
    end.

string(B) -> [$", escape(B, <<>>), $"].

escape(<<>>, Acc) -> Acc;
escape(<<$", R/binary>>, Acc) -> escape(R, <<Acc/binary, "\\\"">>);
escape(<<$\\, R/binary>>, Acc) -> escape(R, <<Acc/binary, "\\\\">>);
escape(<<$\n, R/binary>>, Acc) -> escape(R, <<Acc/binary, "\\n">>);
escape(<<$\r, R/binary>>, Acc) -> escape(R, <<Acc/binary, "\\r">>);
escape(<<$\t, R/binary>>, Acc) -> escape(R, <<Acc/binary, "\\t">>);
escape(<<C, R/binary>>, Acc) when C < 16#20 ->
    Hex = iolist_to_binary(io_lib:format("\\u~4.16.0b", [C])),
    escape(R, <<Acc/binary, Hex/binary>>);
escape(<<C, R/binary>>, Acc) -> escape(R, <<Acc/binary, C>>).

%%% ------------------------------------------------------------------
%%% Decoding
%%% ------------------------------------------------------------------

%% @doc Decode one JSON value (surrounding whitespace allowed).
-spec decode(iodata()) -> {ok, json()} | {error, term()}.
decode(Text) ->
    try
        {V, Rest} = val(ws(iolist_to_binary(Text))),
        case ws(Rest) of
            <<>> -> {ok, V};
            _ -> {error, trailing_garbage}
        end
    catch throw:{json, Why} -> {error, Why};
          error:_ -> {error, syntax}
    end.

ws(<<C, R/binary>>) when C =:= $\s; C =:= $\t; C =:= $\n; C =:= $\r -> ws(R);
ws(B) -> B.

val(<<${, R/binary>>) -> object(ws(R), #{});
val(<<$[, R/binary>>) -> array(ws(R), []);
val(<<$", R/binary>>) -> str(R, <<>>);
val(<<"true", R/binary>>) -> {true, R};
val(<<"false", R/binary>>) -> {false, R};
val(<<"null", R/binary>>) -> {null, R};
val(<<C, _/binary>> = B) when C =:= $-; C >= $0, C =< $9 -> number(B);
val(_) -> throw({json, syntax}).

object(<<$}, R/binary>>, Acc) when map_size(Acc) =:= 0 -> {Acc, R};
object(<<$", R/binary>>, Acc) ->
    {K, R1} = str(R, <<>>),
    <<$:, R2/binary>> = ws(R1),
    {V, R3} = val(ws(R2)),
    case ws(R3) of
        <<$,, R4/binary>> -> object(ws(R4), Acc#{K => V});
        <<$}, R4/binary>> -> {Acc#{K => V}, R4};
        _ -> throw({json, syntax})
    end;
object(_, _) -> throw({json, syntax}).

array(<<$], R/binary>>, []) -> {[], R};
array(B, Acc) ->
    {V, R1} = val(B),
    case ws(R1) of
        <<$,, R2/binary>> -> array(ws(R2), [V | Acc]);
        <<$], R2/binary>> -> {lists:reverse([V | Acc]), R2};
        _ -> throw({json, syntax})
    end.

str(<<$", R/binary>>, Acc) -> {Acc, R};
str(<<$\\, E, R/binary>>, Acc) when E =/= $u ->
    C = case E of
            $" -> $"; $\\ -> $\\; $/ -> $/; $b -> $\b;
            $f -> $\f; $n -> $\n; $r -> $\r; $t -> $\t;
            _ -> throw({json, bad_escape})
        end,
    str(R, <<Acc/binary, C>>);
str(<<"\\u", H:4/binary, R/binary>>, Acc) ->
    Cp = binary_to_integer(H, 16),
    %% Surrogate pairs are left as they are: the engine never writes them.
    str(R, <<Acc/binary, (unicode:characters_to_binary([Cp]))/binary>>);
str(<<C, R/binary>>, Acc) -> str(R, <<Acc/binary, C>>);
str(<<>>, _) -> throw({json, unterminated_string}).

number(B) ->
    {Num, R} = take(B, <<>>),
    V = case binary:match(Num, [<<".">>, <<"e">>, <<"E">>]) of
            nomatch -> binary_to_integer(Num);
            _ -> to_float(Num)
        end,
    {V, R}.

take(<<C, R/binary>>, Acc)
  when C >= $0, C =< $9; C =:= $-; C =:= $+; C =:= $.; C =:= $e; C =:= $E ->
    take(R, <<Acc/binary, C>>);
take(R, Acc) -> {Acc, R}.

%% binary_to_float/1 wants a fraction: "1e5" and "2E-3" are valid JSON.
to_float(Num) ->
    case binary:match(Num, <<".">>) of
        nomatch ->
            [M, E] = binary:split(Num, [<<"e">>, <<"E">>]),
            binary_to_float(<<M/binary, ".0e", E/binary>>);
        _ ->
            binary_to_float(Num)
    end.
