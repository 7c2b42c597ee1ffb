%% @doc The terms an error's sentence quotes, in the syntax of the language
%% its reader writes: Elixir's `inspect/1' where Elixir runs, Erlang's
%% `~p' otherwise. An Elixir user who wrote `%{port: "4000"}' or
%% `handler: {Chat, []}' was quoted `<<"4000">>' and ``{'Elixir.Chat',[]}'',
%% and left to translate back before seeing the fault.
%%
%% format/2 is io_lib:format/2 with one convention: a `~p' (or `~P')
%% argument is a term the user gave or should give, shown in the running
%% language; a `~w' (or `~W') argument is a name the prose uses bare
%% (`bad value for option port'), in Erlang's syntax always (an option's
%% name reads the same in both, where Elixir's `:port' would be a term).
%% Every other directive is io_lib's.
%%
%% Elixir "runs" when its `Kernel' is loaded, as it is once the `elixir'
%% application has started (in `elixir', `iex', `mix' and a release
%% alike); a VM that only has Elixir on its code path is Erlang's. This
%% module never loads it, and sluice does not depend on Elixir: it is
%% called by name. Runs only when an error is put in words.
%% @private
-module(sluice_syntax).

-export([format/2, code/2]).

%% @doc io_lib:format/2, flat, with `~p' terms in Elixir's syntax where
%% Elixir runs (see the module's doc).
-spec format(io:format(), [term()]) -> string().
format(Format, Args) ->
    case erlang:module_loaded(elixir_kernel()) of
        false ->
            lists:flatten(io_lib:format(Format, Args));
        true ->
            Directives = [elixir(D) || D <- io_lib:scan_format(Format, Args)],
            lists:flatten(io_lib:build_text(Directives))
    end.

%% @doc Code for the reader to write (a call, a setting), in the language
%% that runs: `Erlang' or `Elixir', each as written by hand, where a
%% term's syntax alone (format/2) would leave `application:...' to an
%% Elixir user.
-spec code(string(), string()) -> string().
code(Erlang, Elixir) ->
    case erlang:module_loaded(elixir_kernel()) of
        false -> Erlang;
        true -> Elixir
    end.

elixir(#{control_char := C, args := [Term | _]} = D) when C =:= $p; C =:= $P ->
    %% One line whatever the term's size, as `~0p' is (a sentence is
    %% one line), and all of it, as `~p' gives it: no "..." at 50 items.
    D#{control_char := $s, args := [inspect(Term)], encoding := unicode,
       width := none, precision := none};
elixir(D) ->
    D.

inspect(Term) ->
    try
        erlang:apply(elixir_kernel(), inspect,
                     [Term, [{limit, infinity}, {printable_limit, infinity}]])
    catch _:_ ->
        %% (an Elixir too old or half there: the Erlang words still say it)
        io_lib:format("~0tp", [Term])
    end.

%% (a module sluice does not depend on: called by name)
elixir_kernel() -> 'Elixir.Kernel'.
