%% @doc Where the build is: the repository, the C programs in the tooling's
%% priv directory, the `erl' of this VM and the code path a VM running the
%% tooling needs. Every command finds things through here, so that a
%% layout change (a release, another profile) is made in one place.
-module(sluice_build).

-export([root/0, program/1, erl/0, code_path/0, cookie_args/1]).

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

%% @doc The arguments that give a node started from this VM (distributed)
%% its cookie. None for a node on this host when it reads the same cookie
%% from ~/.erlang.cookie itself (unless SLUICE_ERL_FLAGS set another, that
%% is where this VM's came from): on a command line the cookie is shown by
%% ps to every user of the host, and whoever has it can connect to the
%% node and run anything there as its user. A node on another host gets
%% `-setcookie': its ~/.erlang.cookie may hold another.
-spec cookie_args(local | remote) -> [string()].
cookie_args(local) ->
    Cookie = atom_to_list(erlang:get_cookie()),
    case init:get_argument(home) of
        {ok, [[Home]]} ->
            case file:read_file(filename:join(Home, ".erlang.cookie")) of
                {ok, B} ->
                    case string:trim(binary_to_list(B)) of
                        Cookie -> [];
                        _ -> ["-setcookie", Cookie]
                    end;
                {error, _} ->
                    ["-setcookie", Cookie]
            end;
        _ ->
            ["-setcookie", Cookie]
    end;
cookie_args(remote) ->
    ["-setcookie", atom_to_list(erlang:get_cookie())].
