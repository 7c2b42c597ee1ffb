%% @doc `bin/sluice serve --nodes K': the listener on K BEAM nodes, one OS
%% process each, all on one port (SO_REUSEPORT, the kernel spreads the
%% connections), so that the server holds more connections than one OS
%% process's descriptor limit allows.
%%
%% The CLI node starts Erlang distribution itself (bin/sluice runs `erl'
%% without a name), then starts the nodes with `peer', over ssh for the
%% hosts of `--hosts'; every node gets this node's cookie, code path,
%% SLUICE_ERL_FLAGS and the emulator flags of --io-poll-threads,
%% --io-poll-sets and --scheduler-bind. The first node binds the port (the
%% real one when 0 was asked), the others that same port. `listening on IP:PORT' is printed once
%% every node accepts. A node that dies is reported on stderr and the
%% others keep serving; when none is left the command exits 1. SIGTERM
%% (SIGINT through bin/sluice) drains every node at once, stops them and
%% exits 0.
-module(sluice_serve_cluster).

-export([run/2, start_node_listener/1, start_first_listener/1]).

-define(LISTENER, sluice_cli).
-define(CALL_TIMEOUT, 15000).

%% @doc Run the cluster until a signal; the exit code or an error. `O' is
%% the parsed `serve' options, `ListenerOpts' the library options they
%% stand for.
-spec run(map(), map()) -> sluice_cli:result().
run(O, ListenerOpts) ->
    {ok, _} = application:ensure_all_started(sluice),
    ok = sluice_signal:install(self()),
    Hosts = hosts(O),
    case start_distribution(Hosts) of
        ok -> with_peers(O, ListenerOpts, start_peers(maps:get(nodes, O), Hosts, O));
        {error, Reason} -> {error, 1, Reason}
    end.

with_peers(_O, _ListenerOpts, {error, Reason}) ->
    {error, 1, Reason};
with_peers(O, ListenerOpts, {ok, Peers}) ->
    Nodes = [N || {_, N} <- Peers],
    IP = maps:get(ip, ListenerOpts),
    Started = case start_listeners(Nodes, ListenerOpts#{reuseport => true}) of
                  {ok, Port} ->
                      ok = sluice_cluster:set_serving_nodes(Nodes),
                      case sluice_serve:start_metrics(O, IP, ?LISTENER) of
                          ok -> {ok, Port};
                          {error, _, Reason} -> {error, Reason}
                      end;
                  {error, _} = E -> E
              end,
    case Started of
        {ok, P} ->
            [monitor_node(N, true) || N <- Nodes],
            io:format("listening on ~s~n", [sluice_opts:format_address(IP, P)]),
            ok = sluice_serve:warn_if_open(IP),
            Code = wait(Nodes),
            {Drained, Left, Failed} = drain(alive(Nodes), maps:get(drain_timeout, O)),
            stop_peers(Peers, [N || {N, _} <- Failed]),
            io:format(standard_error, "sluice: drained ~b nodes (~s "
                      "closed at the deadline)~n",
                      [length(Drained), sluice_serve:connections(Left)]),
            _ = [io:format(standard_error, "sluice: node ~s did not drain (~0p): its "
                           "connections were cut~n", [N, Why]) || {N, Why} <- Failed],
            Code;
        {error, Why} ->
            stop_peers(Peers, []),
            {error, 1, Why}
    end.

%% The hosts of --hosts, [] for this host only.
hosts(O) ->
    case string:lexemes(maps:get(hosts, O), ", ") of
        ["local"] -> [];
        Hosts -> Hosts
    end.

%% Distribution with long names: 127.0.0.1 when every node is local (no
%% DNS needed); when nodes run elsewhere, the name they reach this host by:
%% $SLUICE_DIST_HOST, or this host's name. sluice_dist starts epmd (a VM
%% started without -name does not) and says in one line why it failed.
start_distribution(Hosts) ->
    Host = case Hosts of
               [] -> "127.0.0.1";
               _ -> os:getenv("SLUICE_DIST_HOST", net_adm:localhost())
           end,
    sluice_dist:start(list_to_atom("sluice_serve_" ++ os:getpid() ++ "@" ++ Host), longnames).

%% All peers at once (each takes a second or two to boot); any failure
%% stops those that did start. This process is the command's signal
%% handler: a first SIGTERM meanwhile is kept (serve drains at once once
%% the nodes are up), a second gives up the boots still going on
%% (sluice_peer_boot's rule, as `load --nodes' has it).
start_peers(K, Hosts, O) ->
    Self = self(),
    Specs = [{I, host(I, Hosts)} || I <- lists:seq(1, K)],
    Deadline = erlang:monotonic_time(millisecond) + sluice_peer_boot:timeout(),
    Pids = [spawn(fun() -> Self ! {peer_started, self(), start_peer(I, Host, O)} end)
            || {I, Host} <- Specs],
    Waiting = waiting(Specs),
    {Results, Kept} = lists:mapfoldl(fun(P, Kept) -> started(P, Pids, Kept, Deadline, Waiting) end,
                                     false, Pids),
    ok = sluice_peer_boot:resume(Kept),
    case [Why || {error, Why} <- Results] of
        [] ->
            {ok, [{Peer, Node} || {ok, Peer, Node} <- Results]};
        [Why | _] ->
            stop_peers([{Peer, Node} || {ok, Peer, Node} <- Results], []),
            {error, Why}
    end.

started(P, Pids, Kept, Deadline, Waiting) ->
    receive
        {peer_started, P, R} -> {R, Kept};
        {sluice_signal, sigterm} ->
            Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
            _ = case sluice_peer_boot:interrupt(Kept, Left, Waiting) of
                    kept -> ok;
                    give_up -> [sluice_peer_boot:cancel(B) || B <- Pids]
                end,
            started(P, Pids, true, Deadline, Waiting)
    end.

%% What an interrupt waits for, for sluice_peer_boot:interrupt/3: the
%% nodes started at once (those already up are not told apart).
waiting(Specs) ->
    Count = case Specs of [_] -> one; _ -> several end,
    Nodes = case Count of one -> "the node"; several -> "the nodes" end,
    case lists:usort([H || {_, H} <- Specs, H =/= local]) of
        [] -> {[Nodes, " starting"], Count};
        Hosts -> {[Nodes, " starting on ", lists:join(", ", Hosts)], Count}
    end.

host(_I, []) -> local;
host(I, Hosts) -> lists:nth((I - 1) rem length(Hosts) + 1, Hosts).

start_peer(I, Host, O) ->
    Name = list_to_atom("sluice_serve_" ++ os:getpid() ++ "_" ++ integer_to_list(I)),
    Erl = os:find_executable("erl"),
    Flags = string:lexemes(os:getenv("SLUICE_ERL_FLAGS", ""), " ")
        ++ sluice_vm_flags:emulator_args(O),
    %% +Bi: Ctrl-C in a terminal reaches the whole process group; the nodes
    %% ignore it and are drained by the CLI node like the rest.
    %% -connect_all false: the nodes only need the CLI node, not each other;
    %% a full mesh also makes `global' warn about overlapping partitions
    %% as they stop one after the other.
    Args = ["+Bi", "-connect_all", "false"]
        ++ lists:append([["-pa", D] || D <- sluice_build:code_path()]) ++ Flags,
    %% The control channel is the command's standard I/O, not the
    %% distribution: the node needs this node's cookie to connect back,
    %% and is given it over that channel (sluice_build:give_cookie/2),
    %% never on its command line. It halts when this VM goes, as before.
    Opts = #{name => Name, args => Args, connection => standard_io},
    case Host of
        local -> boot_peer(Host, Opts#{host => "127.0.0.1", exec => Erl});
        _ -> case ssh() of
                 {ok, Ssh} -> boot_peer(Host, Opts#{host => Host, exec => {Ssh, ["-T", Host, Erl]}});
                 {error, _} = E -> E
             end
    end.

%% (sluice_peer_boot: an ssh still connecting when the node is given up
%% on is ended, not left to its own connect timeout)
boot_peer(Host, Opts) ->
    try sluice_peer_boot:start(Opts, sluice_peer_boot:timeout()) of
        {ok, Peer, Node} -> join(Host, Peer, Node);
        {error, {boot_failed, _} = Reason} -> {error, peer_error(Host, {exit, Reason})};
        {error, timeout} -> {error, peer_error(Host, {exit, timeout})};
        {error, Reason} -> {error, peer_error(Host, Reason)}
    catch
        Class:Reason -> {error, peer_error(Host, {Class, Reason})}
    end.

join(Host, Peer, Node) ->
    case sluice_build:give_cookie(Peer, Node) of
        ok ->
            case net_kernel:connect_node(Node) of
                true -> {ok, {Peer, os_pid(Host, Node)}, Node};
                _ ->
                    catch peer:stop(Peer),
                    {error, peer_error(Host, {not_connected, Node})}
            end;
        {error, Why} ->
            catch peer:stop(Peer),
            {error, peer_error(Host, {cookie_not_given, Why})}
    end.

%% $SLUICE_SSH (a wrapper, or a stand-in in tests), else ssh from $PATH.
ssh() ->
    case os:getenv("SLUICE_SSH") of
        Ssh when is_list(Ssh), Ssh =/= "" -> {ok, Ssh};
        _ -> case os:find_executable("ssh") of
                 false -> {error, "--hosts needs ssh, and there is none in PATH"};
                 Ssh -> {ok, Ssh}
             end
    end.

%% ssh (or the erl it runs) that ends before the node is up: a host that
%% cannot be reached, refused the login, has no erl. What ssh said is on
%% stderr already, above this line.
peer_error(Host, {exit, {boot_failed, {exit_status, Status}}}) when Host =/= local ->
    lists:flatten(io_lib:format("cannot start a node on ~s: `ssh -T ~s erl` exited with "
                                "status ~b before the node came up", [Host, Host, Status]));
%% A node that never answers: ssh still connecting, or a remote erl that
%% hangs.
peer_error(Host, {exit, timeout}) when Host =/= local ->
    lists:flatten(io_lib:format("cannot start a node on ~s: none came up within ~b s "
                                "(check that `ssh -T ~s erl` starts Erlang there, and that it "
                                "reaches this host's epmd and distribution ports)",
                                [Host, sluice_peer_boot:timeout() div 1000, Host]));
peer_error(Host, interrupted) ->
    lists:flatten(io_lib:format("interrupted while a node was starting on ~s",
                                [case Host of local -> "this host"; _ -> Host end]));
peer_error(Host, Reason) ->
    lists:flatten(io_lib:format("cannot start a node on ~s: ~p",
                                [case Host of local -> "this host"; _ -> Host end, Reason])).

start_listeners([First | Rest], Opts) ->
    case call(First, start_first_listener, Opts) of
        {ok, Port} ->
            Others = [{N, call(N, start_node_listener, Opts#{port => Port})} || N <- Rest],
            case [{N, R} || {N, R} <- Others, R =/= {ok, Port}] of
                [] -> {ok, Port};
                [{N, R} | _] -> {error, listen_error(N, Opts#{port => Port}, R)}
            end;
        Error ->
            {error, listen_error(First, Opts, Error)}
    end.

call(Node, F, Opts) ->
    try erpc:call(Node, ?MODULE, F, [Opts], ?CALL_TIMEOUT)
    catch Class:Reason -> {error, {Class, Reason}}
    end.

listen_error(Node, #{ip := IP, port := Port}, {error, Reason}) ->
    lists:flatten(io_lib:format("cannot listen on ~s on node ~s: ~s",
                                [sluice_opts:format_address(IP, Port), Node,
                                 sluice_serve:describe_error(Reason)])).

%% @doc Runs on each node: start sluice and the listener; its real port.
-spec start_node_listener(map()) -> {ok, inet:port_number()} | {error, term()}.
start_node_listener(Opts) ->
    {ok, _} = application:ensure_all_started(sluice),
    case sluice:start_listener(?LISTENER, Opts) of
        {ok, _} ->
            #{port := Port} = sluice:info(?LISTENER),
            {ok, Port};
        Error ->
            Error
    end.

%% @doc Runs on the first node: start_node_listener/1 once the port is
%% known to be free. The nodes' sockets have SO_REUSEPORT, with which a
%% bind also succeeds beside another process's sockets that have it (a
%% `serve --nodes' already running, sluice-ref --share-port): the command
%% said `listening on' and the clients were split between two servers
%% without a word. A bind without it fails there, as `serve' alone does.
-spec start_first_listener(map()) -> {ok, inet:port_number()} | {error, term()}.
start_first_listener(#{port := 0} = Opts) ->
    start_node_listener(Opts);
start_first_listener(#{ip := IP, port := Port} = Opts) ->
    Family = case tuple_size(IP) of 4 -> inet; 8 -> inet6 end,
    case gen_tcp:listen(Port, [Family, {ip, IP}, {reuseaddr, true}]) of
        {ok, L} ->
            ok = gen_tcp:close(L),
            start_node_listener(Opts);
        {error, _} = Error ->
            Error
    end.

%% Serve until SIGTERM; a node going down is reported, and when none is
%% left there is nothing to serve.
wait(Nodes) ->
    receive
        {sluice_signal, sigterm} ->
            0;
        {nodedown, Node} ->
            ok = sluice_cluster:node_down(Node),
            Left = sluice_cluster:serving_nodes(),
            io:format(standard_error, "sluice: node ~s is down, its connections are lost; "
                      "~b of ~b nodes still serving~n", [Node, length(Left), length(Nodes)]),
            case Left of
                [] -> io:format(standard_error, "sluice: no node left~n", []), 1;
                _ -> wait(Nodes)
            end;
        _ ->
            wait(Nodes)
    end.

alive(Nodes) ->
    Connected = nodes(),
    [N || N <- Nodes, lists:member(N, Connected)].

%% Drain every node at once: the nodes drained, the connections they still
%% had open at the deadline, and the nodes that did not drain (hung, or
%% gone meanwhile), which stop_peers/1 then takes down with their
%% connections. Those were counted as drained, with none left open.
drain([], _DrainMs) ->
    {[], 0, []};
drain(Nodes, DrainMs) ->
    Results = lists:zip(Nodes, erpc:multicall(Nodes, sluice, drain, [?LISTENER, DrainMs],
                                              DrainMs + ?CALL_TIMEOUT)),
    Drained = [N || {N, {ok, {ok, _}}} <- Results],
    _ = erpc:multicall(Drained, sluice, stop_listener, [?LISTENER], ?CALL_TIMEOUT),
    {Drained, lists:sum([Left || {_, {ok, {ok, Left}}} <- Results]),
     [{N, R} || {N, R} <- Results, not lists:member(N, Drained)]}.

%% A node that did not drain is hung: peer:stop/1 gives up on it after
%% its timeout, and it would hold its connections open, and this
%% command's standard error (which a node started over its standard I/O
%% inherits: `serve ... 2>&1 | tee' would not end), for as long as it
%% hangs. One on this host is killed, before peer:stop/1, which would
%% otherwise wait 5 s for it to disconnect and then log a warning report
%% among the command's output. One on another host is left to its ssh,
%% which ends when the node does.
stop_peers(Peers, Hung) ->
    _ = [begin
             [kill(OsPid) || lists:member(Node, Hung), is_list(OsPid)],
             catch peer:stop(Peer)
         end || {{Peer, OsPid}, Node} <- Peers],
    ok.

kill(OsPid) ->
    _ = os:cmd("kill -KILL " ++ OsPid ++ " 2>/dev/null"),
    ok.

%% The node's OS process, when it is on this host.
os_pid(local, Node) ->
    try erpc:call(Node, os, getpid, [], ?CALL_TIMEOUT)
    catch _:_ -> none
    end;
os_pid(_Host, _Node) ->
    none.
