%% @doc How a load run is split over engine processes: connections, the
%% opening rate, connect concurrency and source addresses. Pure functions.
%%
%% Two limits shape the split. One engine process may open at most ~20,000
%% files, so no engine gets more than `max_conns_per_engine/0'. And the
%% kernel gives each (source address, server address, port) about 28,000
%% ephemeral ports (of which connect() finds half quickly, see
%% conns_per_address/0), shared by every engine on the host, so source
%% addresses are handed out in disjoint sets where there are enough of
%% them, and picked automatically on loopback when there are none.
-module(sluice_load_plan).

-export([split/2, split/3, engines_needed/1, max_conns_per_engine/0,
         parse_ips/1, format_ips/1, auto_source_ips/3, auto_source_ips/4, assign_ips/2,
         conns_per_address/0]).

-export_type([share/0]).

%% What one engine does: its part of the connections, the rate and the
%% connect concurrency (the rate 0 stays 0: as fast as possible).
-type share() :: #{index := non_neg_integer(), conns := pos_integer(),
                   rate := number(), connect_concurrency := pos_integer()}.

%% @doc Most connections one engine process is given (fd limit 20,000 less
%% room for the process's own descriptors).
-spec max_conns_per_engine() -> pos_integer().
max_conns_per_engine() -> 19000.

%% @doc Connections planned per source address per server address and port.
%% The range has ~28,000 ports, but connect() tries ports of one parity
%% first (the other half is kept for bind()) and scans that whole half
%% before it looks at the rest: past half the range on one address every
%% connect() walks the used half first, and the ramp crawls (docs/load.md
%% has the measurement). So stay under half the range.
-spec conns_per_address() -> pos_integer().
conns_per_address() -> 12000.

%% @doc Engines needed for `Conns' connections.
-spec engines_needed(pos_integer()) -> pos_integer().
engines_needed(Conns) ->
    ceil_div(Conns, max_conns_per_engine()).

%% @doc Split conns, rate and connect concurrency over `K' engines: counts
%% differ by at most one, the rate and concurrency in proportion, so that
%% every engine's ramp ends at the same time. The rate is taken as the
%% run's connections opened per second (split/3 for a per-connection one).
-spec split(#{conns := pos_integer(), rate := number(),
              connect_concurrency := pos_integer()}, pos_integer()) ->
          [share()].
split(Run, K) ->
    split(Run, K, "ping").

%% @doc split/2 for `Scenario': its `--rate' is split only where it counts
%% connections opened per second over the whole run (ping, connect, scale,
%% storm); lockstep's and pipeline's are frames/s per connection, which
%% every engine's connections keep as given.
-spec split(#{conns := pos_integer(), rate := number(),
              connect_concurrency := pos_integer()}, pos_integer(), string()) ->
          [share()].
split(#{conns := N, rate := Rate, connect_concurrency := CC}, K, Scenario) when K >= 1 ->
    PerConn = lists:member(Scenario, ["lockstep", "pipeline", "flood"]),
    Base = N div K,
    Extra = N rem K,
    Counts = [C || I <- lists:seq(0, K - 1),
                   C <- [Base + (case I < Extra of true -> 1; false -> 0 end)], C > 0],
    [#{index => I, conns => C,
       rate => case Rate == 0 orelse PerConn of true -> Rate; false -> Rate * C / N end,
       connect_concurrency => max(1, (CC * C) div N)}
     || {I, C} <- lists:zip(lists:seq(0, length(Counts) - 1), Counts)].

%% @doc Source addresses to use when none were given: none (the kernel's
%% choice) unless the server is on loopback and the connections exceed
%% what one address can hold; then each engine gets addresses of its own
%% from 127.0.0.2 up, enough for its share.
-spec auto_source_ips(inet:ip_address(), [share()], boolean()) -> none | [[inet:ip4_address()]].
auto_source_ips(Host, Shares, Local) ->
    auto_source_ips(Host, Shares, Local, 1).

%% @doc auto_source_ips/3 for a scenario that takes `Ports' ephemeral
%% ports per connection (storm: 2, wave 1's wait in TIME_WAIT while wave
%% 2 connects).
-spec auto_source_ips(inet:ip_address(), [share()], boolean(), pos_integer()) ->
          none | [[inet:ip4_address()]].
auto_source_ips({127, _, _, _}, Shares, true, Ports) ->
    Total = lists:sum([C || #{conns := C} <- Shares]),
    case Total * Ports > conns_per_address() of
        false -> none;
        true ->
            {Sets, _} = lists:mapfoldl(
                          fun(#{conns := C}, Next) ->
                                  N = ceil_div(C * Ports, conns_per_address()),
                                  {[int_to_ip(Next + J) || J <- lists:seq(0, N - 1)], Next + N}
                          end, ip_to_int({127, 0, 0, 2}), Shares),
            Sets
    end;
auto_source_ips(_Host, _Shares, _Local, _Ports) ->
    %% IPv6 loopback is ::1 alone: nothing to hand out
    none.

%% @doc Give `K' engines the addresses `Ips': disjoint round-robin slices
%% when there are at least K of them, otherwise all of them to each.
-spec assign_ips([inet:ip_address()], pos_integer()) -> [[inet:ip_address()]].
assign_ips(Ips, K) when length(Ips) >= K ->
    Indexed = lists:zip(lists:seq(0, length(Ips) - 1), Ips),
    [[Ip || {J, Ip} <- Indexed, J rem K =:= I] || I <- lists:seq(0, K - 1)];
assign_ips(Ips, K) ->
    lists:duplicate(K, Ips).

%% @doc Parse the engine's `--source-ips' syntax: comma-separated
%% addresses and ranges `A.B.C.X-Y' or `A.B.C.X-A.B.C.Y' (one /24), IPv6
%% `P::X-P::Y' (one /120: the last byte runs, as in IPv4). One family:
%% `{error, mixed}' for IPv4 and IPv6 together.
-spec parse_ips(string()) -> {ok, [inet:ip_address()]} | error | {error, mixed}.
parse_ips(S) ->
    try
        %% split, not lexemes: an empty entry (`127.0.0.1,,') is refused,
        %% as the engine refuses it, rather than dropped in silence
        Ips = lists:append([range(T) || T <- string:split(S, ",", all)]),
        case lists:usort([tuple_size(Ip) || Ip <- Ips]) of
            [] -> error;
            [_] -> {ok, Ips};
            _ -> {error, mixed}
        end
    catch throw:bad -> error
    end.

range(T) ->
    case string:split(T, "-") of
        [A] -> [ip(A)];
        [A, B] ->
            Lo = ip(A),
            Hi = case lists:member($., B) orelse lists:member($:, B) of
                     true -> ip(B);
                     %% A.B.C.X-Y; an IPv6 last part would be hex
                     false when tuple_size(Lo) =:= 4 -> setelement(4, Lo, octet(B));
                     false -> throw(bad)
                 end,
            span(Lo, Hi)
    end.

%% Lo..Hi when only their last byte differs.
span(Lo, Hi) when tuple_size(Lo) =:= tuple_size(Hi) ->
    N = tuple_size(Lo),
    X = element(N, Lo),
    Y = element(N, Hi),
    (lists:droplast(tuple_to_list(Lo)) =:= lists:droplast(tuple_to_list(Hi))
     andalso X bsr 8 =:= Y bsr 8 andalso Y >= X) orelse throw(bad),
    [setelement(N, Lo, Z) || Z <- lists:seq(X, Y)];
span(_Lo, _Hi) ->
    throw(bad).

ip(S) ->
    T = string:trim(S),
    case inet:parse_ipv4strict_address(T) of
        {ok, Ip} -> Ip;
        _ -> case inet:parse_ipv6strict_address(T) of
                 {ok, Ip} -> Ip;
                 _ -> throw(bad)
             end
    end.

octet(S) ->
    case string:to_integer(S) of
        {N, []} when N >= 0, N =< 255 -> N;
        _ -> throw(bad)
    end.

%% @doc The engine's `--source-ips' value for a list of addresses.
-spec format_ips([inet:ip_address()]) -> string().
format_ips(Ips) ->
    lists:flatten(lists:join(",", [inet:ntoa(Ip) || Ip <- Ips])).

ip_to_int({A, B, C, D}) -> (A bsl 24) bor (B bsl 16) bor (C bsl 8) bor D.
int_to_ip(N) -> {(N bsr 24) band 255, (N bsr 16) band 255, (N bsr 8) band 255, N band 255}.

ceil_div(A, B) -> (A + B - 1) div B.
