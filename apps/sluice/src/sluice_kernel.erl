%% @doc What the kernel saw of the clients that a listener never did: the
%% host's counters of connections dropped at the listen queue
%% (`/proc/net/netstat', Linux): `ListenOverflows' (the accept queue was
%% full: the SYN or the final ACK was dropped, and that client waits a
%% second or more for a retransmit) and `ListenDrops' (every drop at a
%% listen socket, overflows included). They count for every listen socket
%% of the host since boot, so what matters is how they move while a
%% listener is busy. `#{}' where the kernel does not say.
%% @private
-module(sluice_kernel).

-export([listen_drops/0, parse_netstat/1]).

-type drops() :: #{listen_overflows => non_neg_integer(),
                   listen_drops => non_neg_integer()}.

-spec listen_drops() -> drops().
listen_drops() ->
    case file:read_file("/proc/net/netstat") of
        {ok, Text} -> parse_netstat(Text);
        {error, _} -> #{}
    end.

%% @doc The two counters in the text of /proc/net/netstat (exported to be
%% tested on fixed text).
-spec parse_netstat(binary()) -> drops().
parse_netstat(Text) ->
    tcp_ext(binary:split(Text, <<"\n">>, [global])).

%% Two lines: "TcpExt: Name Name ..." then "TcpExt: Value Value ...".
tcp_ext([<<"TcpExt:", Names/binary>>, <<"TcpExt:", Values/binary>> | _]) ->
    Pairs = lists:zip(string:lexemes(Names, " "), string:lexemes(Values, " ")),
    maps:from_list([{Key, binary_to_integer(V)}
                    || {K, V} <- Pairs,
                       Key <- case K of
                                  <<"ListenOverflows">> -> [listen_overflows];
                                  <<"ListenDrops">> -> [listen_drops];
                                  _ -> []
                              end]);
tcp_ext([_ | Rest]) ->
    tcp_ext(Rest);
tcp_ext([]) ->
    #{}.
