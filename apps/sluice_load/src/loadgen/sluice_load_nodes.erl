%% @doc The Erlang nodes that host load engines, started with OTP's `peer':
%% `--nodes N' starts N nodes on this host, `--nodes host1,host2' one node
%% per host over ssh (`--ssh', default `ssh'; the remote `erl' is `--erl').
%% Both go through the same code: a peer whose control channel is the
%% standard input and output of the command that started it (so it halts
%% when this VM goes away, ssh or not), joined to this node by Erlang
%% distribution, which carries the engines' progress and results back.
%%
%% This VM becomes a distributed node on demand (sluice_dist: epmd
%% started if need be, net_kernel); the peers get its cookie over their control
%% channel, not on a command line (sluice_build:give_cookie/2). Engines on a node need
%% only the module `sluice_load_engine', which is loaded onto each peer
%% from here, and the C binary at the path the coordinator names.
-module(sluice_load_nodes).

-export([parse/1, start/2, stop/1]).

-export_type([spec/0, node_ref/0]).

-type spec() :: {local, pos_integer()} | {hosts, [string()]}.
-type node_ref() :: #{node := node(), peer := pid() | none}.

%% @doc `"3"' is three local nodes; anything else a comma list of hosts.
-spec parse(string()) -> {ok, spec()} | error.
parse(S) ->
    case string:to_integer(S) of
        {N, []} when N >= 1, N =< 256 -> {ok, {local, N}};
        {_, []} -> error;
        _ ->
            case string:lexemes(S, ", ") of
                [] -> error;
                Hosts -> {ok, {hosts, Hosts}}
            end
    end.

%% @doc Start the nodes; `Opts' holds `ssh' and `erl' (remote commands).
-spec start(spec(), #{ssh := string(), erl := string()}) ->
          {ok, [node_ref()]} | {error, string()}.
start(Spec, Opts) ->
    Hosts = case Spec of
                {local, N} -> lists:duplicate(N, local);
                {hosts, Hs} -> Hs
            end,
    Long = lists:any(fun(H) -> H =/= local andalso lists:member($., H) end, Hosts),
    case ensure_distributed(Long) of
        ok ->
            %% One after the other: an interrupt kept during one boot is
            %% handed back to the run once, after the last (one line for
            %% one interrupt, not one per node still to start).
            {Result, Kept} = start_all(Hosts, Opts, 1, [], false),
            ok = sluice_peer_boot:resume(Kept),
            Result;
        {error, _} = E -> E
    end.

start_all([], _Opts, _I, Acc, Kept) ->
    {{ok, lists:reverse(Acc)}, Kept};
start_all([Host | Rest], Opts, I, Acc, Kept0) ->
    case start_one(Host, Opts, I, #{kept => Kept0, more => length(Rest)}) of
        {{ok, Ref}, Kept} -> start_all(Rest, Opts, I + 1, [Ref | Acc], Kept);
        {{error, _} = E, Kept} -> stop(Acc), {E, Kept}
    end.

start_one(local, _Opts, I, After) ->
    boot(local, (base_opts(I))#{host => this_host()}, After);
start_one(Host, #{ssh := Ssh, erl := Erl}, I, #{kept := Kept} = After) ->
    case find(Ssh) of
        {ok, Path} -> boot(Host, (base_opts(I))#{host => Host, exec => {Path, [Host, Erl]}}, After);
        error -> {{error, fmt("--ssh ~s: no such program", [Ssh])}, Kept}
    end.

base_opts(I) ->
    Name = lists:flatten(io_lib:format("~s_e~b", [base_name(), I])),
    #{name => Name, connection => standard_io, args => ["-hidden", "-kernel", "net_setuptime", "20"]}.

%% (sluice_peer_boot: an ssh still connecting when the node is given up
%% on is ended, not left to its own connect timeout)
boot(Host, Opts, #{kept := Kept0} = After) ->
    Where = case Host of local -> "this host"; _ -> Host end,
    try sluice_peer_boot:start(Opts, sluice_peer_boot:timeout(), After) of
        {{ok, Peer, Node}, Kept} -> {connect(Peer, Node, Where), Kept};
        {{error, Reason}, Kept} -> {{error, boot_error(Where, Opts, Reason)}, Kept}
    catch exit:Reason ->
            {{error, boot_error(Where, Opts, Reason)}, Kept0}
    end.

%% ssh (or the erl it runs) that ends before the node is up: a host that
%% cannot be reached, refused the login, has no erl (what ssh said is on
%% stderr already, above this line).
boot_error(Where, #{exec := {Ssh, [Host, Erl]}}, {boot_failed, {exit_status, Status}}) ->
    fmt("cannot start a node on ~s: `~s ~s ~s` exited with status ~b before the node came up",
        [Where, Ssh, Host, Erl, Status]);
boot_error(Where, _Opts, interrupted) ->
    fmt("interrupted while a node was starting on ~s", [Where]);
boot_error(Where, _Opts, Reason) ->
    fmt("cannot start a node on ~s: ~0p", [Where, Reason]).

connect(Peer, Node, Where) ->
    case sluice_build:give_cookie(Peer, Node) of
        ok -> connected(Peer, Node, Where);
        {error, Why} ->
            catch peer:stop(Peer),
            {error, fmt("cannot give node ~s on ~s this node's cookie: ~p", [Node, Where, Why])}
    end.

connected(Peer, Node, Where) ->
    case net_kernel:connect_node(Node) of
        true ->
            {Mod, Bin, File} = code:get_object_code(sluice_load_engine),
            case erpc:call(Node, code, load_binary, [Mod, File, Bin], 15000) of
                {module, Mod} -> {ok, #{node => Node, peer => Peer}};
                Err ->
                    catch peer:stop(Peer),
                    {error, fmt("cannot load the engine runner on ~s: ~p", [Where, Err])}
            end;
        _ ->
            catch peer:stop(Peer),
            {error, fmt("node ~s on ~s started but distribution cannot reach it "
                        "(epmd and the distribution ports must be open)", [Node, Where])}
    end.

%% @doc Stop the nodes this module started.
-spec stop([node_ref()]) -> ok.
stop(Refs) ->
    _ = [catch peer:stop(P) || #{peer := P} <- Refs, is_pid(P)],
    ok.

%% (sluice_dist: epmd started and waited for, and one line when
%% distribution cannot start, as for `serve --nodes')
ensure_distributed(Long) ->
    sluice_dist:start(coord_name(Long), case Long of
                                            true -> longnames;
                                            false -> shortnames
                                        end).

%% Long names (a host with a dot: an address, a domain name) need a host
%% part: the one net_kernel takes by itself is the host name, and one
%% without a domain (`vm', most machines) is refused ("Can't set long node
%% name!"), so every dotted host failed before a node started. As `serve
%% --nodes --hosts': $SLUICE_DIST_HOST, else this host's name.
coord_name(false) ->
    list_to_atom(base_name() ++ "_coord");
coord_name(true) ->
    list_to_atom(base_name() ++ "_coord@" ++ os:getenv("SLUICE_DIST_HOST", net_adm:localhost())).

%% Names unique on this host for this run: several runs may share epmd.
base_name() ->
    case get(sluice_load_base) of
        undefined ->
            B = "sluice_load_" ++ os:getpid(),
            put(sluice_load_base, B),
            B;
        B -> B
    end.

this_host() ->
    [_, Host] = string:split(atom_to_list(node()), "@"),
    Host.

%% A command name is looked up in PATH; a path must be an executable file.
find(Cmd) ->
    case os:find_executable(Cmd) of
        false -> error;
        Path -> {ok, Path}
    end.

fmt(F, A) -> lists:flatten(io_lib:format(F, A)).
