%% @doc The file of a listener on a Unix socket (`ip => {local, Path}'):
%% what is at the path before the listener binds it, and its removal when
%% the listener's sockets close.
%%
%% A socket file outlives its socket: a server that crashed, was killed or
%% whose node went down leaves it, and binding the path again fails with
%% `eaddrinuse'. Before binding, a socket file that nothing listens on (a
%% connect is refused) is removed, as nginx, haproxy and systemd do; one a
%% server still listens on is that server's (`eaddrinuse', as a TCP port
%% in use), and anything else (a regular file, a directory, a symlink) is
%% not the library's to remove (`eexist').
%%
%% When the listener's sockets close (stop_listener/1,2, suspend/1, the
%% application stopping) the file is removed, but only if it is still the
%% one the listener bound: another server may have taken the path since
%% (after removing it as stale itself), and its file is its own.
%% @private
-module(sluice_local_socket).

-export([prepare/1, identity/1, remove/2]).

-export_type([identity/0]).

-include_lib("kernel/include/file.hrl").

%% The file type bits of st_mode, and a socket's (S_IFMT, S_IFSOCK).
-define(S_IFMT, 8#170000).
-define(S_IFSOCK, 8#140000).

%% How long the connect that tells a live socket from a stale one may
%% take: a refused connect is answered at once; one a live server's full
%% backlog holds is a live server.
-define(PROBE_MS, 1000).

%% Which file a listener bound: its device and inode.
-type identity() :: {integer(), integer()} | none.

%% @doc Make the path free for a bind: nothing there, or a stale socket
%% file, removed. `{error, eaddrinuse}' when a server listens there,
%% `{error, eexist}' when it holds something other than a socket, or the
%% reason the path cannot be looked at (`eacces', `enotdir'). A directory
%% that does not exist is left for the bind to say (`enoent').
-spec prepare(binary()) -> ok | {error, atom()}.
prepare(Path) ->
    case file:read_link_info(Path) of
        {ok, #file_info{type = other, mode = Mode}} when Mode band ?S_IFMT =:= ?S_IFSOCK ->
            remove_if_stale(Path);
        {ok, _NotASocket} ->
            {error, eexist};
        {error, enoent} ->
            ok;
        {error, _} = Error ->
            Error
    end.

remove_if_stale(Path) ->
    case gen_tcp:connect({local, Path}, 0, [{active, false}], ?PROBE_MS) of
        {ok, S} ->
            ok = gen_tcp:close(S),
            {error, eaddrinuse};
        {error, econnrefused} ->
            case file:delete(Path) of
                ok -> ok;
                {error, enoent} -> ok;
                {error, _} = Error -> Error
            end;
        {error, timeout} ->
            {error, eaddrinuse};
        {error, _} = Error ->
            Error
    end.

%% @doc Which file is at the path now (`none' if nothing is).
-spec identity(binary()) -> identity().
identity(Path) ->
    case file:read_link_info(Path) of
        {ok, #file_info{major_device = Dev, inode = Inode}} -> {Dev, Inode};
        {error, _} -> none
    end.

%% @doc Remove the listener's socket file, if the path still holds the
%% file it bound.
-spec remove(binary(), identity()) -> ok.
remove(_Path, none) ->
    ok;
remove(Path, Identity) ->
    _ = identity(Path) =:= Identity andalso file:delete(Path),
    ok.
