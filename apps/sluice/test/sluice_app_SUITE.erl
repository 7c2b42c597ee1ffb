%% The application as a package: its .app file carries what hex needs, the
%% package's files are there, and `ssl' is optional: started with sluice
%% where it is installed, skipped where it is not, with sluice serving
%% either way. Each start runs in a fresh peer VM (what is started in this
%% one depends on the suites before).
-module(sluice_app_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0]).
-export([app_file_has_what_a_package_needs/1,
         package_files_are_there/1,
         ssl_starts_with_sluice_where_installed/1,
         sluice_starts_and_serves_without_ssl/1,
         tls_listener_without_ssl_says_so/1]).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [app_file_has_what_a_package_needs, package_files_are_there,
     ssl_starts_with_sluice_where_installed, sluice_starts_and_serves_without_ssl,
     tls_listener_without_ssl_says_so].

app_file_has_what_a_package_needs(_Config) ->
    ok = load(sluice),
    {ok, Vsn} = application:get_key(sluice, vsn),
    ?assertMatch({match, _}, re:run(Vsn, "^[0-9]+\\.[0-9]+\\.[0-9]+$")),
    {ok, Desc} = application:get_key(sluice, description),
    ?assert(length(Desc) > 20),
    {ok, Props} = application:get_all_key(sluice),
    ?assertEqual(["Apache-2.0"], proplists:get_value(licenses, app_file())),
    ?assertMatch([{"GitHub", "https://" ++ _} | _], proplists:get_value(links, app_file())),
    {ok, Apps} = application:get_key(sluice, applications),
    ?assertEqual([kernel, stdlib, ssl], Apps),
    %% An optional application must also be in `applications' to be
    %% started; anything else optional would be a mistake.
    ?assertEqual([ssl], proplists:get_value(optional_applications, Props)).

package_files_are_there(_Config) ->
    ok = load(sluice),
    Dir = app_dir(),
    [?assert(filelib:is_regular(filename:join(Dir, F))) || F <- ["README.md", "CHANGELOG.md", "LICENSE"]],
    {ok, License} = file:read_file(filename:join(Dir, "LICENSE")),
    ?assertMatch({match, _}, re:run(License, "Apache License\\s+Version 2\\.0")),
    %% The version being released has its entry.
    {ok, Vsn} = application:get_key(sluice, vsn),
    {ok, Changelog} = file:read_file(filename:join(Dir, "CHANGELOG.md")),
    ?assertMatch({match, _}, re:run(Changelog, "^## " ++ re_escape(Vsn) ++ "$", [multiline])).

ssl_starts_with_sluice_where_installed(_Config) ->
    with_peer(fun(Peer) ->
                      {ok, Started} = peer:call(Peer, application, ensure_all_started, [sluice]),
                      ?assert(lists:member(ssl, Started)),
                      ?assertEqual([ssl, sluice], running(Peer, [ssl, sluice]))
              end).

sluice_starts_and_serves_without_ssl(_Config) ->
    with_peer(fun(Peer) ->
                      %% As on a system without OTP's ssl installed.
                      true = peer:call(Peer, code, del_path, [ssl]),
                      ?assertMatch({error, _}, peer:call(Peer, application, load, [ssl])),
                      ?assertEqual({ok, [sluice]},
                                   peer:call(Peer, application, ensure_all_started, [sluice])),
                      ?assertEqual([sluice], running(Peer, [ssl, sluice])),
                      {ok, _} = peer:call(Peer, sluice, start_listener,
                                          [echo, #{ip => {127, 0, 0, 1}, port => 0,
                                                   handler => {sluice_proto_echo, []}}]),
                      #{port := Port} = peer:call(Peer, sluice, info, [echo]),
                      {ok, Sock} = sluice_test_lib:connect(Port),
                      ok = gen_tcp:send(Sock, <<"no ssl">>),
                      ?assertEqual({ok, <<"no ssl">>}, gen_tcp:recv(Sock, 6, 5000)),
                      ok = gen_tcp:close(Sock)
              end).

%% docs/listener-options.md: a TLS listener on a node without ssl fails
%% to start with `{ssl_not_started, _}'. It was `{bad_option, tls_opts,
%% {ssl_not_started, _}}', which format_error/1 explained as a bad tls_opts
%% value ("expected a list of ssl server options with a certificate...").
tls_listener_without_ssl_says_so(_Config) ->
    with_peer(fun(Peer) ->
                      true = peer:call(Peer, code, del_path, [ssl]),
                      {ok, [sluice]} = peer:call(Peer, application, ensure_all_started, [sluice]),
                      %% Files that exist: what is checked before ssl is.
                      File = code:which(sluice),
                      Opts = #{port => 0, transport => ssl, handler => {sluice_proto_echo, []},
                               tls_opts => [{certfile, File}, {keyfile, File}]},
                      {error, Reason} = peer:call(Peer, sluice, start_listener, [tls, Opts]),
                      ?assertMatch({ssl_not_started, _}, Reason),
                      Text = peer:call(Peer, sluice, format_error, [Reason]),
                      ?assertNotEqual(nomatch, string:find(Text, "ssl application")),
                      ?assertEqual([], peer:call(Peer, sluice, listeners, []))
              end).

%%% ------------------------------------------------------------------

with_peer(Fun) ->
    Ebin = filename:dirname(code:which(sluice)),
    {ok, Peer, _Node} = peer:start_link(#{connection => standard_io, args => ["-pa", Ebin]}),
    try Fun(Peer)
    after peer:stop(Peer)
    end.

running(Peer, Apps) ->
    Running = [A || {A, _, _} <- peer:call(Peer, application, which_applications, [])],
    [A || A <- Apps, lists:member(A, Running)].

load(App) ->
    case application:load(App) of
        ok -> ok;
        {error, {already_loaded, App}} -> ok
    end.

%% The .app file as built, keys an application master does not keep
%% (licenses, links) included.
app_file() ->
    {ok, [{application, sluice, Props}]} =
        file:consult(filename:join(filename:dirname(code:which(sluice)), "sluice.app")),
    Props.

%% apps/sluice: this suite's source is in its test/ directory.
app_dir() ->
    filename:dirname(filename:dirname(filename:absname(?FILE))).

re_escape(S) ->
    re:replace(S, "[.]", "\\\\.", [global, {return, list}]).
