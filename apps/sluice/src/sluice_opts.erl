%% @doc Validation of listener options. Every option is checked here, once,
%% at start, so that the accept and receive paths never meet a bad value and a
%% user gets an error that names the option and what it expects.
%% @private
-module(sluice_opts).

-export([validate/1, from_list/1, check_max_connections/1, check_conn_opts/1,
         check_conn_opt_names/1, defaults/0,
         default_max_connections/0, default_backlog/0, adaptive_grant/0,
         format_error/1, format_address/2]).

-export_type([opts/0, error/0]).

-type opts() :: #{ip := inet:ip_address() | {local, binary()},
                  port := inet:port_number(),
                  handler := {module(), term()},
                  transport := inet | socket | ssl | module(),
                  num_acceptors := pos_integer(),
                  num_listen_sockets := pos_integer(),
                  num_conns_sups := pos_integer(),
                  reuseport := boolean(),
                  %% set by validate/1: the port is this listener's alone
                  %% (reuseport was not asked for)
                  own_port => boolean(),
                  backlog := pos_integer(),
                  max_connections := non_neg_integer() | infinity,
                  max_connections_wait := non_neg_integer(),
                  active := false | once | true | pos_integer() | adaptive,
                  socket_opts := [gen_tcp:option()],
                  idle_timeout := timeout(),
                  hibernate_after := timeout(),
                  park_after := timeout(),
                  gc_after_bytes := pos_integer() | infinity,
                  shutdown_timeout := timeout(),
                  tls_opts := [ssl:tls_server_option()],
                  handshake_timeout := timeout(),
                  proxy_protocol := boolean(),
                  proxy_timeout := timeout(),
                  proxy_max_size := pos_integer(),
                  framing := none | sluice_frame:spec(),
                  post_listen := none | fun((sluice_transport:lsock()) -> ok | {error, term()}),
                  listen_socket := none | sluice_transport:lsock(),
                  alarms := sluice_alarms:alarms()}.
-type error() :: {unknown_option, term()}
               | {missing_option, atom()}
               | {bad_option, atom(), term()}
               | {ssl_not_started, term()}
               | {not_for_local, atom(), term()}
               | {not_with_listen_socket, atom(), term()}
               | not_a_map.

%% Descriptors kept back from the VM's limit for listen sockets, files,
%% distribution and the like, so that the connection limit is reached before
%% accept(2) starts failing with emfile.
-define(FD_RESERVE_MIN, 64).

%% The socket options a user may pass through to the transport. Framing,
%% delivery mode and ownership belong to the library, so `active', `packet',
%% `mode', `list', `binary' and `header' are refused.
-define(SOCKET_OPTS, [buffer, recbuf, sndbuf, nodelay, keepalive, priority,
                      tos, linger, send_timeout, send_timeout_close,
                      high_watermark, low_watermark, high_msgq_watermark,
                      low_msgq_watermark, delay_send, raw]).

%% The socket options a handler may change on its own connection while it
%% runs (sluice:setopts/2; getopts/2 reads the same): the kernel's, which
%% the library neither reads back nor depends on, with the values
%% socket_opts takes (socket_opt_value/2), and the same on every
%% transport.
-define(CONN_OPTS, [recbuf, sndbuf, nodelay, keepalive, priority, tos, linger]).

%% Options a handler may not change, refused as `{not_settable, Name}':
%% <ul>
%%  <li>the delivery the connection loop relies on: `active' is its grant
%%      (sluice_conn; on the socket backend it is not on the socket at all),
%%      `mode', `binary', `list', `packet', `packet_size', `header',
%%      `deliver', `line_delimiter' the shape of every chunk, `exit_on_close'
%%      the half-close a handler is owed replies after (plain TCP) or the
%%      close ssl waits for (TLS), `show_econnreset' what a reset looks
%%      like;</li>
%%  <li>`buffer': the size of the loop's reads, which the transports keep
%%      in their state and change as they arm (sluice_transport_inet,
%%      sluice_transport_socket, and the TCP reads under TLS);</li>
%%  <li>the listener's, kept out of a connection's reach because they are
%%      not on the socket on every backend: `send_timeout' (the socket
%%      transport keeps it in its state), `send_timeout_close' and the
%%      inet driver's queue (`high_watermark', `low_watermark',
%%      `high_msgq_watermark', `low_msgq_watermark', `delay_send'), which
%%      the socket backend does not have, and `raw': the inet driver
%%      answers `ok' for a raw option the kernel refuses (and reads one
%%      as nothing), where the socket backend says the kernel's error, so
%%      it is checked once, at start (check_raw/1).</li>
%% </ul>
-define(OWNED_OPTS, [active, mode, binary, list, packet, packet_size, header, deliver,
                     line_delimiter, exit_on_close, show_econnreset, buffer, send_timeout,
                     send_timeout_close, high_watermark, low_watermark, high_msgq_watermark,
                     low_msgq_watermark, delay_send, raw]).

%% The socket options every listener gets unless it sets them itself; both
%% backends read them from here.
%% <ul>
%%  <li>`buffer': the most one read returns, so one handler call per read
%%      rather than per packet (bench/README.md, "Defaults");</li>
%%  <li>`send_timeout' (ms): a client that never reads its replies fills
%%      the socket's send queue, and the connection would wait in its next
%%      send where neither the idle timeout nor a drain can reach it: after
%%      this long the send fails and the connection ends;</li>
%%  <li>`send_timeout_close': and the socket is closed (inet driver);</li>
%%  <li>`nodelay': replies are small and go out at once.</li>
%% </ul>
-define(SOCKET_DEFAULTS, [{buffer, 262144}, {send_timeout, 30000},
                          {send_timeout_close, true}, {nodelay, true}]).

%% Socket options that are TCP's or IP's and mean nothing on a Unix
%% socket: the socket NIF refuses them there (enotsup, which failed the
%% listen) where the inet driver ignores `nodelay' and refuses `tos'
%% (einval). A listener on a Unix socket leaves them out, the library's
%% default `nodelay' included, so that one `socket_opts' serves a TCP
%% listener and a Unix one alike.
-define(TCP_ONLY_OPTS, [nodelay, tos]).

%% The longest Unix socket path, in bytes: Linux's sun_path holds 108
%% with the terminating NUL.
-define(MAX_LOCAL_PATH, 107).

%% The largest C `int', what setsockopt(2) takes for recbuf, sndbuf,
%% priority, linger's seconds and a raw option's level and name, and what
%% the inet driver keeps a send timeout or a watermark in. Above it the
%% inet driver keeps the low 32 bits without a word (recbuf 2^40 is set as
%% 0, send_timeout 2^31 reads back negative) and the socket NIF refuses the
%% value only when the listener opens its socket: refused here, on both.
-define(INT_MAX, 16#7fffffff).

%% The most `buffer' may be (64 MiB). The socket backend allocates a
%% binary of this size for every read ({otp, rcvbuf}): one the VM cannot
%% allocate aborts the whole node at the first connection (64 GiB did),
%% and the inet driver keeps only its low 32 bits. A read never returns
%% more than the kernel's receive buffer holds, which Linux caps at
%% net.core.rmem_max / tcp_rmem (6 MiB by default, tens of MiB on hosts
%% tuned for long fat links): 64 MiB is above any of those, so the cap
%% costs no one a byte of a read.
-define(MAX_BUFFER, (64 * 1024 * 1024)).

%% The most acceptors, listen sockets, connection supervisors and backlog
%% a listener takes (a backlog is cut to net.core.somaxconn by the kernel
%% anyway).
-define(MAX_COUNT, 65535).

%% The largest `max_connections': sluice_stats keeps the limit in a signed
%% 64-bit atomic, whose largest value, 2^63 - 1, stands for `infinity'.
%% Larger did not fit (badarg from atomics:put/3 at start, or from
%% set_max_connections/2); 2^63 - 1 itself would read back as `infinity'.
-define(MAX_CONNECTIONS, ((1 bsl 63) - 2)).

%% The largest `shutdown_timeout' (ms): sluice_conns_sup_sup gives each
%% connection supervisor this plus 1000 ms as its supervisor shutdown,
%% which a receive timeout must hold (2^32 - 1 ms at most); more crashed
%% the stop with timeout_value. About 49.7 days; `infinity' is accepted
%% for longer and means what it does to a supervisor: wait for ever.
-define(MAX_SHUTDOWN_TIMEOUT, (16#ffffffff - 1000)).

%% The longest idle_timeout, hibernate_after, park_after, handshake_timeout
%% and proxy_timeout (ms): the handshake's and the PROXY header's are
%% receive timeouts, which hold at most 2^32 - 1 ms (a longer one crashed
%% each connection with timeout_value), and the others are held to the
%% same rule; longer is `infinity'.
-define(MAX_TIMEOUT, 16#ffffffff).

-spec defaults() -> map().
defaults() ->
    #{ip => {0, 0, 0, 0},
      port => 0,
      transport => inet,
      num_acceptors => 10,
      %% Four listen sockets on the port (SO_REUSEPORT, among this
      %% listener's own sockets only: sluice_listen_sockets) hold four
      %% accept queues of net.core.somaxconn each. In a reconnect storm
      %% the old connections' closes fill the VM's run queue, the listen
      %% socket's readiness waits its turn behind them and the count
      %% sits at max_connections until they are gone: the kernel's
      %% queues must hold the wave meanwhile. A storm of 15,000 with
      %% somaxconn 4096 overflowed two queues in 5 runs of 12 (2,190-6,806
      %% SYNs dropped, clients back 1-4 s late), four in none of 12
      %% (docs/listener-options.md, "Accept storms").
      num_listen_sockets => 4,
      num_conns_sups => erlang:system_info(schedulers),
      reuseport => false,
      backlog => default_backlog(),
      max_connections => default_max_connections(),
      %% A connection over the limit waits this long (ms) for a slot before
      %% it is closed: in a reconnect storm the old connections are still
      %% closing when their clients are back (sluice_acceptor).
      max_connections_wait => 1000,
      %% A grant of reads that grows while the client reads its replies
      %% and stays small when it does not (sluice_conn: top_up/2;
      %% bench/README.md, "Defaults").
      active => adaptive,
      socket_opts => [],
      idle_timeout => 60000,
      %% A connection quiet this long hibernates (sluice_sweep): its heap
      %% goes back until the next message.
      hibernate_after => 1000,
      %% Off unless asked for: a parked connection's next event starts a
      %% new process, so its pid changes (sluice_parking:parkable/1 says
      %% which handlers can park; docs/listener-options.md has the memory
      %% it saves and what it costs).
      park_after => infinity,
      %% A connection process collects its garbage (a minor collection)
      %% once it has read this many bytes since the last one, so the reads
      %% it handled are freed while their memory is still in the caches
      %% (sluice_conn:collect/0).
      gc_after_bytes => 16384,
      shutdown_timeout => 5000,
      %% ssl server options (certificates, ALPN, SNI, versions...), passed
      %% to ssl:handshake/3 as they are; needed with transport ssl, and
      %% for STARTTLS on transport inet.
      tls_opts => [],
      %% A TLS handshake not done in this long ends the connection.
      handshake_timeout => 5000,
      %% A PROXY protocol header (v1 or v2) before anything else, from a
      %% load balancer (sluice_proxy): read within proxy_timeout, no larger
      %% than proxy_max_size, or the connection ends.
      proxy_protocol => false,
      proxy_timeout => 5000,
      proxy_max_size => 4096,
      %% Whole frames to handle_data/2 instead of chunks (sluice_frame).
      framing => none,
      %% A fun given each listen socket once it listens, before the first
      %% accept (ranch's post_listen_callback): sluice_listen_sockets.
      post_listen => none,
      %% A socket that already listens, opened by the user (systemd's
      %% socket activation, a port bound before dropping privileges),
      %% listened on instead of one the listener opens (ranch 1's
      %% `socket'): sluice_listen_socket.
      listen_socket => none,
      %% Funs called when the live connections reach a threshold
      %% (ranch's alarms): sluice_alarms.
      alarms => #{}}.

%% @doc The bounds of `active => adaptive' (sluice_conn): the grant of
%% reads starts at `min', where the mailbox of a client that outruns its
%% handler stays small, and grows while the client reads its replies, up
%% to as many reads of the listener's `buffer' as fit in `max_bytes'.
-spec adaptive_grant() -> #{min := pos_integer(), max_bytes := pos_integer()}.
adaptive_grant() ->
    #{min => 10, max_bytes => 16 * 1024 * 1024}.

%% @doc The kernel's own cap on a listen backlog (Linux's
%% net.core.somaxconn), as Go and nginx take it: a listen(2) backlog above
%% it is cut to it, and one below it overflows first in a connect storm,
%% when the kernel then drops SYNs and those clients wait a second for a
%% retransmit. 1024 where the kernel does not say.
-spec default_backlog() -> pos_integer().
default_backlog() ->
    case file:read_file("/proc/sys/net/core/somaxconn") of
        {ok, Text} ->
            case string:to_integer(Text) of
                {N, _} when is_integer(N), N > 0 -> min(N, 65535);
                _ -> 1024
            end;
        {error, _} ->
            1024
    end.

%% @doc The VM's own descriptor limit less a reserve: the connection limit
%% then bites before accept(2) fails with emfile.
-spec default_max_connections() -> pos_integer().
default_max_connections() ->
    MaxFds = max_fds(),
    Reserve = max(?FD_RESERVE_MIN, MaxFds div 20),
    max(1, MaxFds - Reserve).

max_fds() ->
    lists:foldl(fun(PollSet, Acc) when is_list(PollSet) ->
                        case proplists:get_value(max_fds, PollSet) of
                            N when is_integer(N) -> max(N, Acc);
                            _ -> Acc
                        end;
                   (_, Acc) -> Acc
                end, 0, erlang:system_info(check_io)).

-spec validate(map() | list()) -> {ok, opts()} | {error, error()}.
validate(Opts) when is_list(Opts) ->
    case from_list(Opts) of
        {ok, M} -> validate(M);
        {error, _} = E -> E
    end;
validate(Opts) when is_map(Opts) ->
    case maps:is_key(handler, Opts) of
        false ->
            {error, missing_handler(Opts)};
        true ->
            try
                Merged = nested(maps:merge(defaults(), Opts)),
                maps:foreach(fun check/2, Merged),
                ok = check_local(Merged),
                ok = check_listen_socket(Opts, Merged),
                Own = own_address(Merged),
                ok = check_tls(Own),
                ok = check_watermarks(Own),
                ok = check_raw(Own),
                {ok, normalize(Own)}
            catch throw:Error -> {error, Error}
            end
    end;
validate(_) ->
    {error, not_a_map}.

%% Without a handler, an unknown option is the likelier fault: `hanlder',
%% or thousand_island's `handler_module', was said as a missing handler,
%% which sent readers looking for what they had written.
missing_handler(Opts) ->
    case [K || K <- maps:keys(Opts), not maps:is_key(K, defaults())] of
        [K | _] -> {unknown_option, K};
        [] -> {missing_option, handler}
    end.

%% Every option a listener takes, for the hint of an unknown one.
known() ->
    lists:usort([handler | maps:keys(defaults())]).

%% @doc Options in a list, read as proplists and Elixir's Keyword read
%% them: a bare atom is `{Atom, true}' (`[reuseport | Opts]') and the first
%% of a repeated key wins, so `[{port, 4000} | Defaults]' overrides
%% Defaults. Every entry point that takes a list (start_listener/2,
%% child_spec/1,2) reads it here. Anything else in the list (or an
%% improper list) is `not_a_map'.
-spec from_list(list()) -> {ok, map()} | {error, not_a_map}.
from_list(L) ->
    from_list(L, #{}).

from_list([], Acc) ->
    {ok, Acc};
from_list([{K, V} | Rest], Acc) ->
    from_list(Rest, first(K, V, Acc));
from_list([K | Rest], Acc) when is_atom(K) ->
    from_list(Rest, first(K, true, Acc));
from_list(_, _) ->
    {error, not_a_map}.

first(K, _V, Acc) when is_map_key(K, Acc) -> Acc;
first(K, V, Acc) -> Acc#{K => V}.

%% socket_opts and tls_opts are read as the options around them are
%% (from_list/1): a map is the list of its pairs, and of a repeated key in
%% a list the first wins (`socket_opts: [buffer: 4096] ++ Base'), so that
%% what is checked is what the transport and ssl get: given the whole list,
%% the inet driver and ssl applied the last of a repeated key. Every raw
%% option ({raw, Level, Name, Value}) is kept; whatever is not a pair with
%% an atom key is left for check/2 to refuse. An improper list is refused
%% here (it crashed the check, or went on to ssl).
nested(Opts) ->
    maps:map(fun(K, V) when K =:= socket_opts; K =:= tls_opts -> first_of_each(K, V);
                (alarms, V) -> alarms_map(V);
                (_, V) -> V
             end, Opts).

%% `alarms' as Elixir writes options, a keyword list of keyword lists
%% (`alarms: [crowded: [type: :num_connections, ...]]'), is read as the
%% options around it are (from_list/1) into the map of maps the alarms
%% take; it was refused as "expected a map". What is no list of options
%% is left as it was given, for sluice_alarms' check to refuse.
alarms_map(L) when is_list(L) ->
    case from_list(L) of
        {ok, M} -> alarms_map(M);
        {error, not_a_map} -> L
    end;
alarms_map(M) when is_map(M) ->
    maps:map(fun(_Name, A) when is_list(A) ->
                     case from_list(A) of
                         {ok, AM} -> AM;
                         {error, not_a_map} -> A
                     end;
                (_Name, A) ->
                     A
             end, M);
alarms_map(Other) ->
    Other.

first_of_each(_K, M) when is_map(M) ->
    maps:to_list(M);
first_of_each(K, L) when is_list(L) ->
    try length(L) of
        _ -> firsts(L, #{})
    catch error:badarg -> bad(K, L)
    end;
first_of_each(_K, Other) ->
    Other.

firsts([], _Seen) ->
    [];
firsts([O = {K, _} | Rest], Seen) when is_atom(K) ->
    case is_map_key(K, Seen) of
        true -> firsts(Rest, Seen);
        false -> [O | firsts(Rest, Seen#{K => true})]
    end;
firsts([O | Rest], Seen) ->
    [O | firsts(Rest, Seen)].

%% @doc The check of `max_connections' at start, for
%% sluice:set_max_connections/2 (through sluice_stats) to apply at run time.
-spec check_max_connections(term()) -> ok | {error, error()}.
check_max_connections(Max) ->
    try check(max_connections, Max) of
        true -> ok
    catch throw:Error -> {error, Error}
    end.

%% A Unix socket: its path made absolute (so that the file bound, the one
%% a stop removes and the one info/1 names are the same whatever the
%% VM's working directory is by then), one listen socket (the kernel lets
%% one socket bind a path: num_listen_sockets is at most that, as it is
%% at most num_acceptors) and no TCP or IP options.
normalize(Opts = #{listen_socket := LSock}) when LSock =/= none ->
    %% The one socket given, which the listener does not share (its
    %% reuseport is its opener's business).
    normalize_tcp(Opts#{num_listen_sockets := 1, reuseport := false});
normalize(Opts = #{ip := {local, Path}, socket_opts := SO}) ->
    Local = Opts#{ip := {local, local_path(Path)}, num_listen_sockets := 1,
                  socket_opts := [O || O <- SO, not tcp_only(O)]},
    normalize_tcp(Local);
normalize(Opts) ->
    normalize_tcp(Opts).

tcp_only({K, _}) -> lists:member(K, ?TCP_ONLY_OPTS);
tcp_only(_) -> false.

normalize_tcp(Opts = #{socket_opts := SO, num_listen_sockets := NL, num_acceptors := NA}) ->
    Defaults = [D || D = {K, _} <- ?SOCKET_DEFAULTS, not lists:keymember(K, 1, SO),
                     not (is_local(Opts) andalso tcp_only(D))],
    Shared = maps:get(reuseport, Opts),
    %% Every listen socket needs an acceptor of its own (the kernel hands
    %% a connection to one socket of the port): no more sockets than
    %% acceptors.
    N = min(NL, NA),
    %% `own_port': the port is this listener's alone (its sockets share it
    %% only with each other), unless the user asked for reuseport.
    Opts#{socket_opts := SO ++ Defaults,
          num_listen_sockets := N,
          reuseport := N > 1 orelse Shared,
          own_port => not Shared}.

check(ip, {local, Path} = IP) ->
    is_local_path(Path) orelse bad(ip, IP);
check(ip, IP) ->
    is_ip(IP) orelse bad(ip, IP);
check(port, P) ->
    (is_integer(P) andalso P >= 0 andalso P =< 65535) orelse bad(port, P);
check(handler, H = {M, _}) when is_atom(M) ->
    _ = code:ensure_loaded(M),
    erlang:function_exported(M, init, 2)
        andalso erlang:function_exported(M, handle_data, 2)
        orelse bad(handler, H);
check(handler, H) ->
    bad(handler, H);
check(transport, T) ->
    sluice_transport:is_transport(T) orelse bad(transport, T);
check(K, N) when K =:= num_acceptors; K =:= num_listen_sockets;
                 K =:= num_conns_sups; K =:= backlog ->
    (is_integer(N) andalso N > 0 andalso N =< ?MAX_COUNT) orelse bad(K, N);
check(reuseport, B) ->
    is_boolean(B) orelse bad(reuseport, B);
check(max_connections, infinity) ->
    true;
check(max_connections, N) ->
    (is_integer(N) andalso N >= 0 andalso N =< ?MAX_CONNECTIONS)
        orelse bad(max_connections, N);
check(gc_after_bytes, infinity) ->
    true;
check(gc_after_bytes, N) ->
    (is_integer(N) andalso N > 0) orelse bad(gc_after_bytes, N);
check(max_connections_wait, N) ->
    (is_integer(N) andalso N >= 0 andalso N =< 3600000) orelse bad(max_connections_wait, N);
check(active, A) ->
    A =:= false orelse A =:= once orelse A =:= true orelse A =:= adaptive
        orelse (is_integer(A) andalso A > 0 andalso A =< 32767)
        orelse bad(active, A);
check(socket_opts, SO) when is_list(SO) ->
    lists:foreach(fun check_socket_opt/1, SO);
check(socket_opts, SO) ->
    bad(socket_opts, SO);
check(tls_opts, L) ->
    is_list(L) orelse bad(tls_opts, L);
check(proxy_protocol, B) ->
    is_boolean(B) orelse bad(proxy_protocol, B);
check(proxy_max_size, N) ->
    (is_integer(N) andalso N >= 16 andalso N =< 65551) orelse bad(proxy_max_size, N);
check(framing, none) ->
    true;
check(framing, Spec) ->
    case sluice_frame:new(Spec) of
        {ok, _} -> true;
        {error, _} -> bad(framing, Spec)
    end;
check(post_listen, none) ->
    true;
check(post_listen, F) ->
    is_function(F, 1) orelse bad(post_listen, F);
check(listen_socket, _) ->
    %% its kind depends on the transport: check_listen_socket/2
    true;
check(alarms, A) ->
    case sluice_alarms:check(A) of
        ok -> true;
        {error, Why} -> bad(alarms, Why)
    end;
check(shutdown_timeout, T) ->
    T =:= infinity orelse (is_integer(T) andalso T > 0 andalso T =< ?MAX_SHUTDOWN_TIMEOUT)
        orelse bad(shutdown_timeout, T);
check(K, T) when K =:= idle_timeout; K =:= hibernate_after;
                 K =:= park_after; K =:= handshake_timeout; K =:= proxy_timeout ->
    T =:= infinity orelse (is_integer(T) andalso T > 0 andalso T =< ?MAX_TIMEOUT)
        orelse bad(K, T);
check(K, _) ->
    throw({unknown_option, K}).

%% What a Unix socket cannot do, said by the option that asks for it: a
%% port (there is none: ranch's `port => 0' is the one taken), and
%% reuseport (the kernel lets one socket bind a path: there is no sharing
%% it with another listener or OS process).
check_local(#{ip := {local, _}, port := Port}) when Port =/= 0 ->
    throw({not_for_local, port, Port});
check_local(#{ip := {local, _}, reuseport := true}) ->
    throw({not_for_local, reuseport, true});
check_local(_) ->
    ok.

%% A listen socket of the user's is listened on as it is: the options that
%% say how to open one cannot apply to it, and are refused rather than
%% ignored when given (in `Given', the options as the caller wrote them:
%% the defaults merged in are not the caller's). Then the socket itself:
%% sluice_listen_socket:check/2.
check_listen_socket(_Given, #{listen_socket := none}) ->
    ok;
check_listen_socket(Given, #{listen_socket := LSock, transport := T}) ->
    Defaults = defaults(),
    _ = [throw({not_with_listen_socket, K, V})
         || K <- [ip, port, backlog, reuseport],
            {ok, V} <- [maps:find(K, Given)],
            V =/= maps:get(K, Defaults)],
    _ = case maps:find(num_listen_sockets, Given) of
            {ok, N} when N =/= 1 -> throw({not_with_listen_socket, num_listen_sockets, N});
            _ -> ok
        end,
    case sluice_listen_socket:check(sluice_transport:module(T), LSock) of
        ok -> ok;
        {error, Why} -> bad(listen_socket, Why)
    end.

%% A socket of the user's: its address is the listener's `ip' (the
%% default, {0,0,0,0}, said IPv4 of an IPv6 socket, and the socket
%% options' raw ones were tried on an IPv4 socket: check_raw/1). Never
%% given (check_listen_socket/2): set_transport_opts/2 leaves the stored
%% one out (sluice_opts_change).
own_address(Opts = #{listen_socket := LSock, transport := T}) when LSock =/= none ->
    case socket_ip(T, LSock) of
        {ok, IP} -> Opts#{ip := IP};
        error -> Opts
    end;
own_address(Opts) ->
    Opts.

%% (any term may be given as the socket: one that is none is refused
%% after, by sluice_listen_socket:check/2)
socket_ip(T, LSock) ->
    try (sluice_transport:module(T)):sockname(LSock) of
        {ok, {IP, _Port}} when is_tuple(IP) -> {ok, IP};
        _ -> error
    catch _:_ -> error
    end.

is_local(#{ip := {local, _}}) -> true;
is_local(_) -> false.

%% A path the kernel can bind: not empty, no NUL (Linux's abstract
%% namespace, a leading NUL, is not supported: there is no file to find
%% stale or to remove), and no longer than sun_path once absolute.
is_local_path(Path) when is_binary(Path); is_list(Path) ->
    try local_path(Path) of
        Abs when is_binary(Abs) ->
            byte_size(Abs) =< ?MAX_LOCAL_PATH andalso Path =/= <<>> andalso Path =/= []
                andalso binary:match(Abs, <<0>>) =:= nomatch;
        _NotUnicode ->
            false
    catch error:_ ->
            %% not a file name (an improper or deep list of other terms)
            false
    end;
is_local_path(_) ->
    false.

%% The path as the kernel will have it: absolute, in the file name
%% encoding's bytes.
local_path(Path) ->
    case filename:absname(Path) of
        Bin when is_binary(Bin) -> Bin;
        Chars -> unicode:characters_to_binary(Chars)
    end.

%% TLS needs a certificate and its key, and ssl reads tls_opts only at
%% each handshake: they are checked here, at start, so that a mistake (a
%% missing file, a bad value) is named once, not in every connection's
%% failure. Whether the transport runs TLS is its own to say
%% (sluice_transport:tls/1): `handshake' (ssl) needs them; `starttls'
%% (inet, for STARTTLS, sluice_conn_starttls) has them checked as for
%% ssl when given, so that a bad certificate is named now, not at the
%% first upgrade; `none' (socket: OTP 25's ssl runs over gen_tcp only, a
%% `socket' connection cannot be upgraded) refuses them, since nothing
%% would read them. A transport that does not say gets them unchecked.
check_tls(#{transport := T, tls_opts := L}) ->
    case {sluice_transport:tls(T), L} of
        {handshake, _} -> check_certs(L);
        {starttls, [_ | _]} -> check_certs(L);
        {none, [_ | _]} -> bad(tls_opts, {transport, sluice_transport:name(
                                                       sluice_transport:module(T))});
        _ -> ok
    end.

check_certs(L) ->
    Has = fun(K) -> lists:keymember(K, 1, L) end,
    (Has(certs_keys) orelse ((Has(certfile) orelse Has(cert)) andalso (Has(keyfile) orelse Has(key))))
        orelse bad(tls_opts, {missing, "certfile and keyfile (or cert and key, or certs_keys)"}),
    [readable(K, F) || {K, F} <- L, K =:= certfile orelse K =:= keyfile orelse K =:= cacertfile],
    %% The rest as ssl will read them (sluice_transport_ssl:check_opts/1).
    %% An ssl that cannot start (not installed) is no fault of the
    %% options: said as such, not as a bad tls_opts value.
    case sluice_transport_ssl:check_opts(L) of
        ok -> ok;
        {error, {ssl_not_started, _} = NotStarted} -> throw(NotStarted);
        {error, Why} -> bad(tls_opts, Why)
    end.

readable(K, F) ->
    case file:read_file_info(F) of
        {ok, _} -> ok;
        {error, Why} -> bad(tls_opts, {K, F, Why})
    end.

check_socket_opt(O = {raw, P, N, V}) ->
    (is_int(P, 0) andalso is_int(N, 0) andalso is_binary(V))
        orelse bad(socket_opts, O);
check_socket_opt(O = {K, V}) ->
    lists:member(K, ?SOCKET_OPTS) orelse bad(socket_opts, O),
    socket_opt_value(K, V) orelse bad(socket_opts, O);
check_socket_opt(O) ->
    bad(socket_opts, O).

socket_opt_value(K, V) when K =:= nodelay; K =:= keepalive;
                            K =:= send_timeout_close; K =:= delay_send ->
    is_boolean(V);
socket_opt_value(buffer, V) ->
    is_integer(V) andalso V >= 1 andalso V =< ?MAX_BUFFER;
socket_opt_value(send_timeout, V) ->
    V =:= infinity orelse is_int(V, 0);
socket_opt_value(linger, {B, T}) ->
    is_boolean(B) andalso is_int(T, 0);
socket_opt_value(linger, _) ->
    false;
%% The IP header's type-of-service is one byte: both backends keep the low
%% 8 bits of a larger value (99999 was set as 156).
socket_opt_value(tos, V) ->
    is_integer(V) andalso V >= 0 andalso V =< 255;
%% The inet driver refuses 0 (einval when the socket opens); the socket
%% backend ignores message-queue watermarks, so they are held to inet's.
socket_opt_value(K, V) when K =:= high_msgq_watermark; K =:= low_msgq_watermark ->
    is_int(V, 1);
%% Only as {raw, Level, Name, Binary}.
socket_opt_value(raw, _) ->
    false;
%% recbuf, sndbuf (0: the kernel's least), priority, high_watermark,
%% low_watermark.
socket_opt_value(_, V) ->
    is_int(V, 0).

%% @doc Checks the socket options a handler sets on its connection
%% (sluice:setopts/2), all of them before any is set: each must be one of
%% ?CONN_OPTS with a value the listener's socket_opts would take. One the
%% library owns is `{not_settable, Name}', anything else (an unknown name,
%% a bad value) `{bad_option, Opt}'.
-spec check_conn_opts([term()]) ->
          ok | {error, {not_settable, atom()} | {bad_option, term()}}.
check_conn_opts(Opts) ->
    conn_check(fun check_conn_opt/1, Opts).

%% @doc The same for the names getopts/2 reads: those setopts/2 sets.
-spec check_conn_opt_names([term()]) ->
          ok | {error, {not_settable, atom()} | {bad_option, term()}}.
check_conn_opt_names(Names) ->
    conn_check(fun check_conn_opt_name/1, Names).

conn_check(Check, L) ->
    try lists:foreach(Check, L)
    catch
        throw:{bad_option, socket_opts, O} -> {error, {bad_option, O}};
        throw:{not_settable, _} = Why -> {error, Why}
    end.

check_conn_opt(O) when is_tuple(O), tuple_size(O) >= 2, is_atom(element(1, O)) ->
    owned(element(1, O)),
    lists:member(element(1, O), ?CONN_OPTS) orelse bad(socket_opts, O),
    check_socket_opt(O);
check_conn_opt(K) when is_atom(K) ->
    %% a bare `binary' or `list', as inet:setopts/2 takes them
    owned(K),
    bad(socket_opts, K);
check_conn_opt(O) ->
    bad(socket_opts, O).

check_conn_opt_name(O) when is_tuple(O), tuple_size(O) >= 2, is_atom(element(1, O)) ->
    %% `{raw, Level, Name, Size}', as inet:getopts/2 reads a raw option
    owned(element(1, O)),
    bad(socket_opts, O);
check_conn_opt_name(K) when is_atom(K) ->
    owned(K),
    lists:member(K, ?CONN_OPTS) orelse bad(socket_opts, K);
check_conn_opt_name(O) ->
    bad(socket_opts, O).

owned(K) ->
    lists:member(K, ?OWNED_OPTS) andalso throw({not_settable, K}).

%% A low watermark above its high one is refused, on both backends: the
%% inet driver moved one to the other without a word, whichever came last
%% in the list winning (high 1000 then low 5000 was set as 1000 and 1000;
%% low 5000 then high 1000 as 5000 and 5000). Only a pair given together
%% is compared: one alone meets the driver's default for the other, which
%% the driver moves as gen_tcp does.
check_watermarks(#{socket_opts := SO}) ->
    _ = [watermarks(High, Low, SO) || {High, Low} <- [{high_watermark, low_watermark},
                                                      {high_msgq_watermark, low_msgq_watermark}]],
    ok.

watermarks(HighK, LowK, SO) ->
    case {lists:keyfind(HighK, 1, SO), lists:keyfind(LowK, 1, SO)} of
        {{HighK, High}, {LowK, Low} = O} when Low > High -> bad(socket_opts, O);
        _ -> ok
    end.

%% An integer from Min up to a C int's largest.
is_int(V, Min) ->
    is_integer(V) andalso V >= Min andalso V =< ?INT_MAX.

%% A raw option is the kernel's to judge (whether its level and name exist
%% and take that value): the inet driver did not say when the kernel
%% refused one, and the socket backend failed the start with a bare errno.
%% Each is set here on a throwaway socket of the listener's family, so
%% both backends refuse the same ones, as bad options. Where no such socket
%% can be opened (no socket NIF on the platform, no free descriptor), the
%% transport is left to find out as before.
check_raw(#{ip := IP, socket_opts := SO}) ->
    %% (a list by now, nested/1 and check/2 have seen to it)
    case [O || O = {raw, _, _, _} <- SO] of
        [] -> ok;
        Raw -> probe_raw(family(IP), Raw)
    end.

family({local, _}) -> local;
family(IP) when tuple_size(IP) =:= 8 -> inet6;
family(_) -> inet.

probe_raw(Family, Raw) ->
    try socket:open(Family, stream, default) of
        {ok, S} ->
            try
                _ = [case socket:setopt_native(S, {L, N}, V) of
                         ok -> ok;
                         {error, _} -> bad(socket_opts, O)
                     end || O = {raw, L, N, V} <- Raw],
                ok
            after
                socket:close(S)
            end;
        {error, _} ->
            ok
    catch error:_ ->
            ok
    end.

is_ip({A, B, C, D}) ->
    lists:all(fun(X) -> is_integer(X) andalso X >= 0 andalso X =< 255 end, [A, B, C, D]);
is_ip(T) when is_tuple(T), tuple_size(T) =:= 8 ->
    lists:all(fun(X) -> is_integer(X) andalso X >= 0 andalso X =< 65535 end,
              tuple_to_list(T));
is_ip(_) ->
    false.

-spec bad(atom(), term()) -> no_return().
bad(K, V) ->
    throw({bad_option, K, V}).

%% Whether option K takes V on its own (check/2, without the options
%% around it): for format_error/1's hints, which offer a value only if
%% it would not be refused in turn.
accepts(K, V) ->
    try check(K, V) of
        _ -> true
    catch _:_ -> false
    end.

%% @doc `IP:Port' as a user writes it: `[::1]:8080' for IPv6, and
%% `unix:Path' for a Unix socket, as nginx and haproxy write one.
-spec format_address(inet:ip_address() | {local, binary() | string()}, inet:port_number()) ->
          string().
format_address({local, Path}, _Port) ->
    lists:flatten(io_lib:format("unix:~ts", [Path]));
format_address(IP, Port) when tuple_size(IP) =:= 8 ->
    "[" ++ inet:ntoa(IP) ++ "]:" ++ integer_to_list(Port);
format_address(IP, Port) ->
    inet:ntoa(IP) ++ ":" ++ integer_to_list(Port).

%% @doc A one-line, human description of a validation error.
%%
%% The sentences are made by sluice_syntax:format/2, which shows a `~p'
%% term in the syntax of the language running (Elixir's where Elixir
%% runs): a value or key the user gave, or one to give, goes in `~p'; an
%% option's name the prose uses goes in `~w', bare in either language.
-spec format_error(term()) -> string().
format_error({unknown_option, K}) ->
    %% With what it was probably meant to be: a thousand_island name, a
    %% typo's nearest option, a string where an atom goes.
    sluice_syntax:format("unknown option ~p~s",
                         [K, sluice_opts_hint:unknown(K, known())]);
format_error({missing_option, K}) ->
    sluice_syntax:format("missing option ~w", [K]);
format_error({bad_option, socket_opts, O}) ->
    case misplaced(O) of
        {true, Hint} ->
            sluice_syntax:format("bad value for option socket_opts: ~0p (~s)", [O, Hint]);
        false ->
            sluice_syntax:format("bad value for option socket_opts: ~0p (expected ~s)",
                                 [O, expected(socket_opts)])
    end;
format_error({bad_option, handler, H = {M, _}}) when is_atom(M) ->
    %% A module that is not there (a typo, an Elixir alias without its
    %% namespace, not compiled) is said as such: "expected a module that
    %% implements the behaviour" sent readers to check a module that does.
    case code:which(M) of
        non_existing ->
            sluice_syntax:format("bad value for option handler: ~0p (module ~p not "
                                 "found: not compiled, or not on the code path)",
                                 [H, M]);
        _ ->
            %% A thousand_island handler or a ranch protocol is said as
            %% one: the generic words sent its porter to check exports
            %% that look right to someone used to the other library.
            Words = case sluice_opts_hint:handler(M) of
                        none -> "expected " ++ expected(handler);
                        Hint -> Hint
                    end,
            sluice_syntax:format("bad value for option handler: ~0p (~s)", [H, Words])
    end;
format_error({bad_option, framing, Spec}) ->
    %% The spec's shape may be right and one of its options wrong (a
    %% negative max, an unknown key): sluice_frame:new/1 says which, where
    %% the list of every spec's shape would leave the reader to find it.
    sluice_syntax:format("bad value for option framing: ~0p (~s)",
                         [Spec, framing_error(sluice_frame:new(Spec))]);
format_error({bad_option, tls_opts, {transport, socket} = V}) ->
    sluice_syntax:format("bad value for option tls_opts: ~0p (tls_opts are for "
                         "transport ssl, or for STARTTLS on transport inet: OTP's "
                         "ssl cannot run over a socket of transport socket)", [V]);
format_error({bad_option, tls_opts, {transport, T} = V}) ->
    sluice_syntax:format("bad value for option tls_opts: ~0p (transport ~p says it "
                         "runs no TLS: its tls/0 is none)", [V, T]);
format_error({bad_option, tls_opts, {no_tls13_signature, _} = Why}) ->
    tls13_error(Why, "");
format_error({bad_option, tls_opts, {no_tls13_signature, _, _} = Why}) ->
    tls13_error(Why, "");
format_error({bad_option, tls_opts, {sni_hosts, Host, Refusal} = Why})
  when element(1, Refusal) =:= no_tls13_signature ->
    tls13_error(Why, Refusal, sluice_syntax:format("for sni_hosts' host ~0p, ", [Host]));
format_error({bad_option, tls_opts, Why}) ->
    %% The generic words name a certificate and its key, which misled
    %% where the fault is elsewhere (an sni_hosts name as an Elixir
    %% string, verify_peer without authorities).
    Hint = case sluice_opts_hint:tls(Why) of
               none -> "expected " ++ expected(tls_opts);
               Words -> Words
           end,
    sluice_syntax:format("bad value for option tls_opts: ~0p (~s)", [Why, Hint]);
format_error({bad_option, listen_socket, Why}) ->
    sluice_syntax:format("bad value for option listen_socket: ~s",
                         [sluice_listen_socket:format_error(Why)]);
format_error({bad_option, alarms, Why}) ->
    sluice_alarms:format_error(Why);
format_error({bad_option, K, V}) ->
    sluice_syntax:format("bad value for option ~w: ~0p (expected ~s)~s~s",
                         [K, V, expected(K),
                          sluice_opts_hint:string_value(K, V, fun(C) -> accepts(K, C) end),
                          sluice_opts_hint:other_library(K, V)]);
format_error({not_for_local, port, Port}) ->
    sluice_syntax:format("bad value for option port: ~0p (a Unix socket, ip => "
                         "{local, Path}, has no port: leave port out, or 0)", [Port]);
format_error({not_for_local, reuseport, _}) ->
    "reuseport does not apply to a Unix socket (ip => {local, Path}): a path is bound by "
    "one socket only, and cannot be shared with another listener or process";
format_error({not_with_listen_socket, K, V}) ->
    sluice_syntax:format("option ~w => ~0p does not apply with listen_socket: the socket "
                         "given already listens, on the address, port and backlog it "
                         "was opened with, alone; leave ~w out", [K, V, K]);
format_error({ssl_not_started, Reason}) ->
    sluice_syntax:format("transport ssl needs OTP's ssl application, which could not "
                         "be started: ~0p", [Reason]);
format_error(not_a_map) ->
    "options must be a map or a proplist";
format_error({post_listen, closed}) ->
    %% also a fun's own {error, closed}: the same advice either way
    "the post_listen fun left a listen socket closed (it must not close the socket or give "
    "it away; the listener's sockets were closed)";
format_error({post_listen, Reason}) ->
    sluice_syntax:format("the post_listen fun failed on a listen socket: ~0p "
                         "(the listener's sockets were closed)", [Reason]);
format_error({not_changeable, K}) ->
    %% set_transport_opts/2's refusal: which options it does change, which
    %% "{not_changeable,post_listen}" left to the docs.
    sluice_syntax:format("option ~w cannot be changed while the listener runs: "
                         "set_transport_opts/2 changes max_connections, alarms, tls_opts and "
                         "handshake_timeout where connections run TLS, proxy_timeout "
                         "and proxy_max_size with proxy_protocol, and (from the next "
                         "resume) port, ip of the same kind, backlog, reuseport, "
                         "num_listen_sockets, num_acceptors, socket_opts and "
                         "post_listen; for the others stop the listener and start it "
                         "again", [K]);
format_error(listen_socket_closed) ->
    %% resume/1's answer
    "the listener's listen_socket was closed by another process: the listener cannot open "
    "it again (stop it, and start it with a new socket)";
format_error(already_started) ->
    "a listener of that name is running";
format_error(sluice_not_started) ->
    %% The API's answer before the application runs, and an embedded
    %% listener's start's (sluice_listener_sup): how to mend it, in the
    %% reader's language.
    "the sluice application is not started (" ++
        sluice_syntax:code("application:ensure_all_started(sluice) first, or list sluice in "
                           "your application's applications",
                           "Application.ensure_all_started(:sluice) first, or list :sluice "
                           "in your application's applications: in mix.exs, a dependency "
                           "without runtime: false") ++ ")";
format_error(Posix) when is_atom(Posix) ->
    %% What start_listener/2 returns when the port cannot be had
    %% (eaddrinuse, eacces, eaddrnotavail): the system's words for it.
    case inet:format_error(Posix) of
        "unknown POSIX error" -> atom_to_list(Posix);
        Text -> Text
    end;
format_error(Other) ->
    sluice_syntax:format("~p", [Other]).

%% The words for sluice_tls_key's refusal, by case: a key TLS 1.3 cannot
%% sign with at all (another curve, DSA) needs another key, or TLS 1.2
%% alone; a key it signs with whose scheme `signature_algs' leaves out
%% is fine, and the option is what to change. With several certificates
%% (certs_keys) the key named is the one ssl signs with, which is not the
%% first that could: said, since the user may see a good key among them.
tls13_error(Why, For) ->
    tls13_error(Why, Why, For).

tls13_error(Why, Refusal, For) ->
    sluice_syntax:format("bad value for option tls_opts: ~0p (~s~s)",
                         [Why, For, no_tls13_signature(Refusal)]).

no_tls13_signature({no_tls13_signature, Taken, Keys}) when length(Keys) > 0 ->
    sluice_syntax:format("of certs_keys' certificates (keys: ~s), ssl signs a TLS 1.3 "
                         "handshake with the one it ranks first (EdDSA, then ECDSA by curve, "
                         "largest first, then RSASSA-PSS, then RSA; never DSA), whether or not "
                         "its key can sign. Here ~s. Or take that certificate out of certs_keys",
                         [lists:join("; ", [key_name(K) || K <- Keys]),
                          no_tls13_signature({no_tls13_signature, Taken})]);
no_tls13_signature({no_tls13_signature, Key}) ->
    case tls13_scheme(Key) of
        none ->
            sluice_syntax:format("the certificate's key, ~s, can sign none of the TLS 1.3 "
                                 "signature schemes: every TLS 1.3 handshake would fail with "
                                 "insufficient_security. TLS 1.3 signs with ECDSA on secp256r1, "
                                 "secp384r1 or secp521r1, RSA (rsa_pss_*) or EdDSA, and no DSA; "
                                 "use such a key, or {versions, ['tlsv1.2']} for clients that "
                                 "accept this one over TLS 1.2", [key_name(Key)]);
        Scheme ->
            sluice_syntax:format("the certificate's key, ~s, can sign TLS 1.3, but "
                                 "signature_algs leaves out its scheme, ~p: every TLS 1.3 "
                                 "handshake would fail with insufficient_security. The key is "
                                 "fine: add ~p to signature_algs, or leave signature_algs out "
                                 "(ssl's default offers it)",
                                 [key_name(Key), Scheme, Scheme])
    end;
no_tls13_signature(Other) ->
    sluice_syntax:format("~0p", [Other]).

key_name({ecdsa, Curve}) -> sluice_syntax:format("ECDSA on ~w", [Curve]);
key_name(dsa) -> "DSA";
key_name(rsa) -> "RSA";
key_name(rsa_pss) -> "RSASSA-PSS";
key_name(ed25519) -> "Ed25519";
key_name(ed448) -> "Ed448";
key_name(Other) -> sluice_syntax:format("~0p", [Other]).

%% The TLS 1.3 scheme (RFC 8446, 4.2.3) that signs with a key, `none'
%% where TLS 1.3 has none (the other curves; brainpool's only on an ssl
%% that lists them, not this one's), as sluice_tls_key reads them.
tls13_scheme({ecdsa, secp256r1}) -> ecdsa_secp256r1_sha256;
tls13_scheme({ecdsa, secp384r1}) -> ecdsa_secp384r1_sha384;
tls13_scheme({ecdsa, secp521r1}) -> ecdsa_secp521r1_sha512;
tls13_scheme(rsa) -> rsa_pss_rsae_sha256;
tls13_scheme(rsa_pss) -> rsa_pss_pss_sha256;
tls13_scheme(ed25519) -> eddsa_ed25519;
tls13_scheme(ed448) -> eddsa_ed448;
tls13_scheme(_) -> none.

%% What is wrong in a framing spec, from sluice_frame:new/1's error.
framing_error({error, {unknown_option, K}}) ->
    sluice_syntax:format("unknown framing option ~0p; expected ~s", [K, framing_opts()]);
framing_error({error, {bad_option, K, V}}) ->
    sluice_syntax:format("framing option ~w: ~0p; expected ~s", [K, V, framing_opt(K)]);
framing_error(_) ->
    "expected " ++ expected(framing).

framing_opts() ->
    "delimiter and max (line); endian, includes_header and max (length); max (split)".

framing_opt(max) -> "an integer >= 0 (bytes)";
framing_opt(delimiter) -> "lf or crlf";
framing_opt(endian) -> "big or little";
framing_opt(includes_header) -> "true or false".

%% ranch 2 takes `port', `ip' and `backlog' in its socket_opts (and
%% ranch_ssl the certificates), and
%% gen_tcp users write `{active, once}', `{packet, line}' or `binary'
%% there: a socket option that is not one is said as such, with where it
%% goes, rather than as a bad value followed by every key socket_opts
%% takes, which leaves the reader to find that the key is the fault.
misplaced({K, V}) when is_atom(K) ->
    case maps:is_key(K, defaults()) of
        true ->
            {true, sluice_syntax:format("~w is a listener option, not a socket option: "
                                        "~w => ~0p beside handler", [K, K, V])};
        false ->
            libraries(K)
    end;
misplaced(K) when is_atom(K) ->
    libraries(K);
misplaced(_) ->
    false.

libraries(K) when K =:= packet; K =:= packet_size; K =:= line_delimiter ->
    {true, "sluice cuts frames itself: the listener's framing option (line, "
           "{length, N}, {split, Fun})"};
libraries(K) when K =:= binary; K =:= list; K =:= mode; K =:= header; K =:= deliver;
              K =:= reuseaddr; K =:= exit_on_close; K =:= show_econnreset ->
    {true, sluice_syntax:format("~w is the library's: it sets the sockets' mode, "
                                "delivery and address reuse itself (handlers get "
                                "binaries)", [K])};
libraries(K) when K =:= certfile; K =:= keyfile; K =:= cacertfile; K =:= cert; K =:= key;
                  K =:= cacerts; K =:= certs_keys; K =:= password; K =:= verify;
                  K =:= versions; K =:= ciphers; K =:= alpn_preferred_protocols;
                  K =:= fail_if_no_peer_cert; K =:= sni_fun; K =:= sni_hosts ->
    %% ranch_ssl's socket_opts hold these
    {true, sluice_syntax:format("~w is an ssl option: tls_opts, with transport => ssl",
                                [K])};
libraries(K) when K =:= inet; K =:= inet6; K =:= inet_backend ->
    {true, "the address family follows the listener's ip option, the backend its "
           "transport option (inet or socket)"};
libraries(_) ->
    false.

expected(ip) -> "an IPv4 or IPv6 address tuple, or {local, Path} for a Unix socket: Path a "
                  "non-empty string or binary without NUL bytes, at most " ++
                  integer_to_list(?MAX_LOCAL_PATH) ++ " bytes once made absolute (Linux's "
                  "sun_path)";
expected(port) -> "an integer 0..65535 (0: any free port)";
expected(handler) -> "{Module, Opts} where Module implements the sluice_handler "
                     "behaviour (init/2 and handle_data/2 exported)";
expected(transport) -> "inet (gen_tcp, the inet driver), socket (OTP's socket NIF), ssl "
                         "(TLS) or a module implementing the sluice_transport behaviour";
expected(reuseport) -> "a boolean";
expected(max_connections) ->
    "an integer 0.." ++ integer_to_list(?MAX_CONNECTIONS) ++ " (2^63 - 2) or infinity";
expected(max_connections_wait) -> "an integer 0..3600000 (ms; 0: close at once)";
expected(active) -> "adaptive, false, once, true or an integer 1..32767";
expected(socket_opts) -> "a list of {Key, Value} with Key one of " ++
                             lists:flatten(io_lib:format("~w", [?SOCKET_OPTS])) ++
                             " and a value both backends take: buffer 1.." ++
                             integer_to_list(?MAX_BUFFER) ++ " (64 MiB), tos 0..255, booleans for nodelay, keepalive, "
                             "send_timeout_close and delay_send, linger {Boolean, Secs}, "
                             "message-queue watermarks 1.." ++ integer_to_list(?INT_MAX) ++
                             ", the other integers 0.." ++ integer_to_list(?INT_MAX) ++
                             " (send_timeout also infinity), a low watermark given with "
                             "its high one no more than it, and "
                             "{raw, Level, Name, Binary} that the kernel accepts";
%% (The bound is said: "a positive integer" refused 70000, which is one.)
expected(K) when K =:= num_acceptors; K =:= num_listen_sockets;
                 K =:= num_conns_sups; K =:= backlog ->
    "an integer 1.." ++ integer_to_list(?MAX_COUNT);
expected(proxy_protocol) -> "true or false";
expected(gc_after_bytes) -> "a positive integer (bytes read between two collections of a "
                            "connection process) or infinity";
expected(proxy_max_size) -> "an integer 16..65551 (bytes)";
expected(framing) -> "none, or a framing spec of sluice_frame: {length, 1 | 2 | 4} "
                     "or {length, N, Opts}, line or {line, Opts}, {split, Fun} or "
                     "{split, Fun, Opts}";
expected(tls_opts) -> "(with transport ssl, or inet for STARTTLS) a list of ssl server options with a certificate and its key "
                     "(certfile and keyfile, cert and key, or certs_keys) whose files exist "
                     "and hold them; socket options go in socket_opts";
expected(post_listen) -> "none, or a fun of one argument (a listen socket) that returns ok "
                         "or {error, Reason}";
expected(shutdown_timeout) ->
    "an integer 1.." ++ integer_to_list(?MAX_SHUTDOWN_TIMEOUT) ++
        " (ms; 2^32 - 1001, about 49.7 days) or infinity";
expected(K) when K =:= idle_timeout; K =:= hibernate_after;
                 K =:= park_after; K =:= handshake_timeout; K =:= proxy_timeout ->
    "an integer 1.." ++ integer_to_list(?MAX_TIMEOUT) ++ " (ms; 2^32 - 1, about 49.7 days) "
        "or infinity";
expected(_) -> "a positive integer".
