%% @doc Which options of a running listener may change
%% (sluice:set_transport_opts/2), and the check of a change: the options
%% given are merged into the listener's and the whole is validated as at
%% start (sluice_opts:validate/1), so a value is refused with the same
%% error it would get at start, and nothing changes unless every option
%% given is good and may change.
%%
%% An option may change only where the listener reads it again:
%% <ul>
%%  <li>for each new connection: `tls_opts' and `handshake_timeout', for
%%      a listener that runs a TLS handshake (uses_tls_opts/1), and
%%      `proxy_timeout' and `proxy_max_size', for one that reads a PROXY
%%      header: each connection reads them from its connection
%%      supervisor's template when it starts (sluice_conn:init/3), so a
%%      new value reaches the connections started after the switch and no
%%      other;</li>
%%  <li>each time the listen sockets open (listen_side/0): `ip' (TCP to
%%      TCP, or one Unix path to another), `port', `backlog',
%%      `reuseport', `num_listen_sockets', `num_acceptors', `socket_opts'
%%      and `post_listen'. Stored at once, used when the listener next
%%      opens its sockets (sluice:resume/1 after suspend/1, or the
%%      sockets' owner restarted by the listener's supervisor), as ranch's
%%      set_transport_options/2 has them: the sockets and acceptors that
%%      run meanwhile are those of the old values, and so are the
%%      connections they accept (`socket_opts' reach the connection
%%      supervisors' template when the new sockets open:
%%      sluice_listen_sockets);</li>
%%  <li>`max_connections', as sluice:set_max_connections/2 changes it;</li>
%%  <li>`alarms', which the listener's sluice_alarms process holds
%%      (sluice_alarms:set/2).</li>
%% </ul>
%% The others are read once, where a change could not be kept to new
%% connections without breaking the running ones: the processes
%% (num_conns_sups, which the figures and the acceptors' hand-over are
%% sized by), the connection state and the connection supervisors' idle
%% sweep, which serves running connections as well (active, framing,
%% idle_timeout, hibernate_after, park_after, gc_after_bytes,
%% shutdown_timeout), whether a step runs at all (transport,
%% proxy_protocol), a socket of the user's (listen_socket: the listener
%% owns it and closes it at stop), and `ip' from TCP to a Unix socket or
%% back (the connections' handling differs). Given with the value they
%% have, they are accepted (the map get_transport_opts/1 gives can be
%% changed and given back whole, as ranch's is); with another, refused as
%% `{not_changeable, Key}', never ignored.
%% @private
-module(sluice_opts_change).

-export([check/2, per_connection/0, per_socket/0, listen_side/0, uses_tls_opts/1]).

%% @doc The changeable options that each connection reads from its
%% connection supervisor's template when it starts.
-spec per_connection() -> [atom()].
per_connection() ->
    [tls_opts, handshake_timeout, proxy_timeout, proxy_max_size].

%% @doc The changeable options used when the listen sockets open next.
-spec listen_side() -> [atom()].
listen_side() ->
    [ip, port, backlog, reuseport, num_listen_sockets, num_acceptors, socket_opts,
     post_listen].

%% @doc Of those, the ones each connection reads too (from its connection
%% supervisor's template): told to the connection supervisors when the
%% sockets that have them open.
-spec per_socket() -> [atom()].
per_socket() ->
    [socket_opts].

%% @doc Whether a listener runs TLS handshakes with its `tls_opts', as
%% its transport says (sluice_transport:tls/1): every connection of an
%% `ssl' listener (`handshake'), and those of an `inet' listener whose
%% handler asks for STARTTLS (`starttls': sluice_conn_starttls reads them
%% from the registry at the upgrade). Elsewhere (`socket', a transport of
%% the user's that does not say) nothing the library knows of reads them.
-spec uses_tls_opts(sluice_opts:opts()) -> boolean().
uses_tls_opts(#{transport := T}) ->
    lists:member(sluice_transport:tls(T), [handshake, starttls]).

%% @doc `Given' (a map or a proplist of listener options) applied to the
%% listener's options `Current': `{ok, New, Changed}' with `Changed' the
%% options whose value is not the current one, or the first error: one
%% that validation refuses, then `{not_changeable, Key}' (in key order).
-spec check(sluice_opts:opts(), term()) ->
          {ok, sluice_opts:opts(), map()} | {error, term()}.
check(Current, Given) ->
    case as_map(Given) of
        {ok, GivenMap} -> check_merged(Current, GivenMap);
        Error -> Error
    end.

as_map(Given) when is_map(Given) -> {ok, Given};
as_map(Given) when is_list(Given) -> sluice_opts:from_list(Given);
as_map(_Given) -> {error, not_a_map}.

check_merged(_Current, #{own_port := _}) ->
    %% Set by validation, not an option (start_listener/2 refuses it as
    %% unknown): taken out of the merge below, it was accepted, ignored.
    {error, {unknown_option, own_port}};
check_merged(Current, Given) ->
    %% `own_port' is set by validation, not given: validated again it
    %% would follow the normalised `reuseport' and no longer say what the
    %% user asked for at start. Unless reuseport is given: then it says
    %% what the user asks for now. A `reuseport' the validation turned on
    %% (for several sockets of the listener's own) is turned off before,
    %% so that it follows a new `num_listen_sockets'.
    %% (Given back with the value it has, as in the map
    %% get_transport_opts/1 gives, it is not asked for.)
    Given1 = case Given of
                 #{reuseport := R} when R =:= map_get(reuseport, Current) ->
                     maps:remove(reuseport, Given);
                 _ ->
                     Given
             end,
    %% A socket of the user's: `ip' is its address (sluice_opts), not an
    %% option given; given back as it is, it is not asked for either.
    {Current1, Given2} =
        case Current of
            #{listen_socket := LSock, ip := IP} when LSock =/= none ->
                {maps:remove(ip, Current), case Given1 of
                                               #{ip := IP} -> maps:remove(ip, Given1);
                                               _ -> Given1
                                           end};
            _ ->
                {Current, Given1}
        end,
    Asked = is_map_key(reuseport, Given1),
    Own = case Asked of
              true -> #{};
              false -> maps:with([own_port], Current)
          end,
    Base = case Current1 of
               #{own_port := true} when not Asked -> Current1#{reuseport := false};
               _ -> Current1
           end,
    Merged = maps:without([own_port], maps:merge(Base, Given2)),
    case sluice_opts:validate(Merged) of
        {ok, Valid} ->
            New = maps:merge(Valid, Own),
            Changed = maps:filter(fun(K, V) -> maps:get(K, Current, V) =/= V end,
                                  maps:without([own_port], New)),
            case lists:sort(maps:keys(Changed)) -- changeable(Current, New) of
                [] -> {ok, New, Changed};
                [K | _] -> {error, {not_changeable, K}}
            end;
        Error ->
            Error
    end.

changeable(Opts = #{ip := IP}, #{ip := IP2}) ->
    %% A Unix socket's connections are handled apart (their socket
    %% options, their addresses): the same kind of address only.
    Listen = case is_local(IP) =:= is_local(IP2) of
                 true -> listen_side();
                 false -> listen_side() -- [ip]
             end,
    [alarms, max_connections | Listen]
        ++ [K || K <- per_connection(), read_by_connections(K, Opts)].

is_local({local, _}) -> true;
is_local(_) -> false.

%% An option the listener's connections never read would change nothing
%% they do: refused, as one that cannot change.
read_by_connections(K, Opts) when K =:= tls_opts; K =:= handshake_timeout ->
    uses_tls_opts(Opts);
read_by_connections(K, #{proxy_protocol := Proxy}) when K =:= proxy_timeout;
                                                       K =:= proxy_max_size ->
    Proxy.
