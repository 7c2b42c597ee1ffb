%% @doc What a refused option was probably meant to be, for
%% sluice_opts:format_error/1: the option nearest a misspelt key, sluice's
%% name for a thousand_island or a ranch option (or value), and the usual slips in `tls_opts'
%% (an Elixir string where ssl takes a charlist, `verify_peer' without the
%% authorities), a value read from the environment as a string. Runs only
%% when an error is put in words, never on a listener's or a connection's
%% path.
%% @private
-module(sluice_opts_hint).

-export([unknown/2, handler/1, tls/1, string_value/3, other_library/2]).

%% @doc The words to add after "unknown option K" (`""' for none), given
%% the options a listener knows. Users coming from thousand_island write
%% its names (`read_timeout', `transport_options'...), and "unknown option
%% read_timeout" left them to find sluice's in the docs; a typo
%% (`framming') is said with the option it is nearest.
-spec unknown(term(), [atom()]) -> string().
unknown(K, _Known) when K =:= handler_module; K =:= handler_options ->
    " (the handler and its options are one option: handler => {Module, Opts})";
unknown(transport_module, _Known) ->
    " (thousand_island's: here transport => inet, socket or ssl)";
unknown(transport_options, _Known) ->
    " (thousand_island's: here socket_opts for socket options, tls_opts for ssl's)";
unknown(num_connections, _Known) ->
    " (thousand_island's, per acceptor: here max_connections, for the whole listener: "
    "num_acceptors x num_connections)";
unknown(read_timeout, _Known) ->
    " (thousand_island's: here idle_timeout, ms without a byte from the client; or a "
    "result's Timeout with handle_timeout/1)";
unknown(K, _Known) when K =:= max_connections_retry_count; K =:= max_connections_retry_wait ->
    " (thousand_island's: here max_connections_wait, ms in all a connection over "
    "max_connections waits for a slot: retry_count x retry_wait)";
%% ranch's options (1.x and 2.x) that sluice names otherwise, or has no
%% use for (docs/from-ranch.md's table); those of the same name
%% (num_acceptors, max_connections, socket_opts, alarms...) are taken.
unknown(shutdown, _Known) ->
    " (ranch's: here shutdown_timeout, ms the connections get when the listener stops "
    "without a drain)";
unknown(socket, _Known) ->
    " (ranch 1's: here listen_socket, a listen socket opened by the caller)";
unknown(post_listen_callback, _Known) ->
    " (ranch's: here post_listen, a fun of one listen socket that returns ok or "
    "{error, Reason})";
unknown(ack_timeout, _Known) ->
    " (ranch 1's: here handshake_timeout)";
unknown(connection_type, _Known) ->
    %% ranch's `supervisor' is for a protocol process that supervises
    %% others (its shutdown then infinity): what its user wants is those
    %% processes ended with the connection, and the connection waited for.
    " (ranch's: here every connection is sluice's process running the handler; one "
    "that starts processes links them, and traps exits to end them in terminate/2, "
    "waited for up to shutdown_timeout, which may be infinity)";
unknown(logger, _Known) ->
    " (ranch's: sluice logs through OTP's logger, which Elixir's Logger shows: its "
    "handlers, levels and filters choose where the lines go)";
unknown(name, _Known) ->
    " (a listener's name is start_listener/2's and child_spec/2's first argument; "
    "child_spec/1 alone takes it among the options)";
unknown(K, Known) when is_binary(K) ->
    as_atom(unicode:characters_to_list(K), Known);
unknown(K, Known) when is_list(K) ->
    case io_lib:printable_unicode_list(K) of
        true -> as_atom(K, Known);
        false -> ""
    end;
unknown(K, Known) when is_atom(K) ->
    %% `tls_options', `socket_options': gen_tcp's and ssl's word, three
    %% edits from sluice's `_opts'
    Name = string:replace(atom_to_list(K), "_options", "_opts"),
    case nearest(lists:flatten(Name), Known) of
        none -> "";
        Option -> sluice_syntax:format(" (did you mean ~p?)", [Option])
    end;
unknown(_K, _Known) ->
    "".

%% A key read from a config file or the environment is a string, and
%% "unknown option <<\"port\">>" did not say that the name was right.
as_atom(Name, Known) ->
    case [K || K <- Known, atom_to_list(K) =:= Name] of
        [K | _] -> sluice_syntax:format(" (option names are atoms: ~p)", [K]);
        [] -> ""
    end.

%% The known option at the smallest edit distance, if it is close enough
%% to be the one meant: one edit for a name of up to four letters, two for
%% a longer one (a swapped pair of letters is one edit: `hanlder').
nearest(Name, Known) ->
    Max = case length(Name) =< 4 of
              true -> 1;
              false -> 2
          end,
    Scored = lists:sort([{distance(Name, atom_to_list(K)), K} || K <- Known]),
    case Scored of
        [{D, K} | _] when D =< Max -> K;
        _ -> none
    end.

%% Optimal string alignment distance: Levenshtein's, with a swap of two
%% neighbouring letters as one edit. A table of every cell is plenty for
%% option names, and only an error is put in words here.
distance(A, B) ->
    TA = list_to_tuple(A),
    TB = list_to_tuple(B),
    Cells = [{I, J} || I <- lists:seq(0, length(A)), J <- lists:seq(0, length(B))],
    D = lists:foldl(fun(IJ, D0) -> D0#{IJ => cell(IJ, TA, TB, D0)} end, #{}, Cells),
    maps:get({length(A), length(B)}, D).

cell({I, 0}, _TA, _TB, _D) ->
    I;
cell({0, J}, _TA, _TB, _D) ->
    J;
cell({I, J}, TA, TB, D) ->
    Ca = element(I, TA),
    Cb = element(J, TB),
    Cost = case Ca =:= Cb of
               true -> 0;
               false -> 1
           end,
    Best = lists:min([maps:get({I - 1, J}, D) + 1, maps:get({I, J - 1}, D) + 1,
                      maps:get({I - 1, J - 1}, D) + Cost]),
    case I > 1 andalso J > 1 andalso Ca =:= element(J - 1, TB)
        andalso element(I - 1, TA) =:= Cb of
        true -> min(Best, maps:get({I - 2, J - 2}, D) + 1);
        false -> Best
    end.

%% @doc The words to add after a refused value's "(expected ...)" when
%% the value is another library's name for what sluice takes: ranch's
%% and thousand_island's transport modules, gen_tcp (inet's). `""' for
%% any other.
-spec other_library(atom(), term()) -> string().
other_library(transport, ranch_tcp = T) ->
    sluice_syntax:format("; ~p is ranch's: here inet", [T]);
other_library(transport, gen_tcp = T) ->
    sluice_syntax:format("; for ~p, here inet", [T]);
other_library(transport, T) when T =:= ranch_ssl ->
    sluice_syntax:format("; ~p is ranch's: here ssl, with tls_opts", [T]);
other_library(transport, 'Elixir.ThousandIsland.Transports.TCP' = T) ->
    sluice_syntax:format("; ~p is thousand_island's: here inet", [T]);
other_library(transport, 'Elixir.ThousandIsland.Transports.SSL' = T) ->
    sluice_syntax:format("; ~p is thousand_island's: here ssl, with tls_opts", [T]);
other_library(_K, _V) ->
    "".

%% @doc The words for a handler module that is another library's, by
%% what it exports: a thousand_island handler (`use ThousandIsland.Handler'
%% gives handle_connection/2 and handle_data/3) or a ranch protocol
%% (start_link/3 or /4); `none' for any other module.
-spec handler(module()) -> string() | none.
handler(M) ->
    Exports = try M:module_info(exports) catch _:_ -> [] end,
    Has = fun(F) -> lists:member(F, Exports) end,
    case {Has({handle_connection, 2}) orelse Has({handle_data, 3}),
          Has({start_link, 3}) orelse Has({start_link, 4})} of
        {true, _} ->
            sluice_syntax:format(
              "~p looks like a thousand_island handler (handle_connection/2, "
              "handle_data/3): a sluice handler exports init/2 and "
              "handle_data/2, without the socket, and returns what to send "
              "(docs/from-ranch.md)", [M]);
        {false, true} ->
            sluice_syntax:format(
              "~p looks like a ranch protocol (start_link/3): a sluice handler exports "
              "init/2 and handle_data/2, and sluice runs the receive loop "
              "(docs/from-ranch.md)", [M]);
        {false, false} ->
            none
    end.

%% @doc The words for a `tls_opts' that ssl (or sluice's check) refused,
%% when the reason alone would mislead; `none' otherwise.
-spec tls(term()) -> string() | none.
tls({unknown_option, K}) ->
    sluice_syntax:format("~p is not an ssl server option; socket options go in "
                         "socket_opts", [K]);
tls({sni_hosts, Hosts}) when is_list(Hosts) ->
    %% An Elixir string ("example.com") is a binary; ssl takes host names
    %% as charlists and refuses the whole option without saying which.
    case binary_host(Hosts) of
        false -> none;
        true -> "sni_hosts' host names are strings (charlists), as ssl takes them: "
                "in Elixir ~c\"example.com\", not \"example.com\""
    end;
tls({cacertfile, Empty}) when Empty =:= []; Empty =:= <<>> ->
    %% What ssl says for {verify, verify_peer} without cacertfile or
    %% cacerts: the user wrote no cacertfile, and the certificate and key
    %% the generic words name are there.
    "verify_peer needs the authorities to check the client's certificate against: "
    "cacertfile or cacerts";
tls({K, File, Posix}) when (K =:= certfile orelse K =:= keyfile orelse K =:= cacertfile),
                           is_atom(Posix) ->
    %% sluice's own check of the files (sluice_opts): the generic words
    %% said "whose files exist" beside a bare posix code.
    sluice_syntax:format("~w ~0p cannot be read: ~ts", [K, File, file:format_error(Posix)]);
tls({versions, []}) ->
    "versions names no TLS version: list at least one ('tlsv1.3', 'tlsv1.2'), or leave "
    "versions out for ssl's default";
tls(_Why) ->
    none.

%% Whether a host of sni_hosts is a binary. Walked by hand: the value is
%% one ssl refused, an improper list included (`[{<<"a">>, Opts} | b]'),
%% on which a comprehension raised and format_error/1 with it.
binary_host([{H, _} | _]) when is_binary(H) -> true;
binary_host([_ | Rest]) -> binary_host(Rest);
binary_host(_) -> false.

%% @doc The words to add after a refused value's "(expected ...)" when the
%% value is a string that reads as what was expected: a port or a timeout
%% read from the environment (`System.get_env("PORT")', `os:getenv/1')
%% or a config file, an address written as text. `""' for any other.
%% The plain words ("expected an integer 0..65535") left the reader to
%% see that the quotes around the value were the fault. The value the
%% string reads as is offered only if `Accepts' (the option's own check)
%% takes it: `port => "true"' was told to give the boolean, `port =>
%% "99999"' the integer 99999 and `reuseport => "1"' the integer 1, each
%% refused again.
-spec string_value(atom(), term(), fun((term()) -> boolean())) -> string().
string_value(K, V, Accepts) ->
    case text(V) of
        none -> "";
        Text -> string_hint(K, Text, is_binary(V), Accepts)
    end.

string_hint(ip, Text, _Binary, Accepts) ->
    case inet:parse_address(Text) of
        {ok, IP} ->
            offered(Accepts, IP,
                    sluice_syntax:format("; a string: an address is a tuple, ~0p here "
                                         "(inet:parse_address/1; Elixir: "
                                         ":inet.parse_address(~~c\"~ts\"))", [IP, Text]));
        {error, _} when hd(Text) =:= $/ ->
            "; a string: a Unix socket's path goes in {local, Path} (Elixir: {:local, path})";
        {error, _} ->
            ""
    end;
string_hint(_K, Text, Binary, Accepts) ->
    Convert = case Binary of
                  true -> "binary_to_integer/1; Elixir: String.to_integer/1";
                  false -> "list_to_integer/1; Elixir: List.to_integer/1"
              end,
    case read_as(Text) of
        {ok, N} when is_integer(N) ->
            offered(Accepts, N, io_lib:format("; a string: give the integer, ~b (~s)",
                                              [N, Convert]));
        {ok, infinity} ->
            offered(Accepts, infinity, "; a string: give the atom, infinity (Elixir: :infinity)");
        {ok, B} when is_boolean(B) ->
            offered(Accepts, B, "; a string: give the boolean, " ++ Text);
        none ->
            ""
    end.

offered(Accepts, Value, Words) ->
    case Accepts(Value) of
        true -> lists:flatten(Words);
        false -> ""
    end.

%% What a string reads as: an integer, infinity or a boolean.
read_as(Text) ->
    case string:to_integer(Text) of
        {N, ""} when is_integer(N) -> {ok, N};
        _ when Text =:= "infinity" -> {ok, infinity};
        _ when Text =:= "true" -> {ok, true};
        _ when Text =:= "false" -> {ok, false};
        _ -> none
    end.

%% A binary or a charlist of printable characters, as a charlist.
text(V) when is_binary(V) ->
    case unicode:characters_to_list(V) of
        L when is_list(L) -> text(L);
        _ -> none
    end;
text([_ | _] = V) ->
    case io_lib:printable_unicode_list(V) of
        true -> V;
        false -> none
    end;
text(_) ->
    none.
