%% @doc Where the build is: the repository, the C programs in the tooling's
%% priv directory, the `erl' of this VM and the code path a VM running the
%% tooling needs. Every command finds things through here, so that a
%% layout change (a release, another profile) is made in one place.
-module(sluice_build).

-export([root/0, program/1, erl/0, code_path/0, give_cookie/2]).

%% @doc The repository: this module's beam sits in
%% ROOT/_build/PROFILE/lib/sluice_load/ebin.
-spec root() -> file:filename().
root() ->
    Parts = filename:split(code:which(?MODULE)),
    filename:join(lists:sublist(Parts, length(Parts) - 6)).

%% @doc The absolute path of a C program built by c_src/Makefile (`Name' is
%% e.g. "sluice-load"), or an error message for the user.
-spec program(string()) -> {ok, file:filename()} | {error, string()}.
program(Name) ->
    Priv = case code:priv_dir(sluice_load) of
               {error, _} -> [];
               Dir -> [Dir]
           end,
    Candidates = [filename:join(D, Name)
                  || D <- Priv ++ [filename:join([root(), "apps", "sluice_load", "priv"])]],
    case [C || C <- Candidates, filelib:is_regular(C)] of
        [C | _] -> {ok, filename:absname(C)};
        [] -> {error, Name ++ " not found in " ++ lists:last(Candidates) ++ ": run make"}
    end.

%% @doc The `erl' of the running VM (a relaunched VM or a node must run the
%% same release).
-spec erl() -> file:filename().
erl() ->
    filename:join([code:root_dir(), "bin", "erl"]).

%% @doc The directories bin/sluice puts on the code path (the library, its
%% test-support clients and the tooling), for a VM or node started from
%% here.
-spec code_path() -> [file:filename()].
code_path() ->
    Otp = code:root_dir(),
    [D || D <- code:get_path(), D =/= ".", not lists:prefix(Otp, D)].

%% @doc Give a node started from this VM with `peer' (its control channel
%% the standard I/O of the command that started it) this VM's cookie,
%% through that channel, before this VM connects to it. Never on a command
%% line: there `ps' shows it to every user of the host (and, over ssh, of
%% both hosts), and whoever has it can connect to the node and run
%% anything there as its user. Until then the node has the cookie of its
%% own host's ~/.erlang.cookie, as any `erl -name' there.
-spec give_cookie(pid(), node()) -> ok | {error, term()}.
give_cookie(Peer, Node) ->
    try peer:call(Peer, erlang, set_cookie, [Node, erlang:get_cookie()], 15000) of
        true -> ok;
        Other -> {error, Other}
    catch Class:Reason -> {error, {Class, Reason}}
    end.
