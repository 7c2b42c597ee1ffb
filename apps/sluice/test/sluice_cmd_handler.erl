%% A line-command handler for sluice_halfclose_SUITE and
%% sluice_persistent_timeout_SUITE (listener `framing => line'). Opts: the
%% test process, which is told of every callback as
%% `{Callback, ConnPid, ...}'. No handle_info/2 or handle_call/3: it may
%% park.
%%
%% Commands: `shut Text' (`{reply_shutdown, Text, S}'), `shutfor Text Ms'
%% (with a Timeout), `echo Text' (`{reply, Text, S}'), `empty' (`{reply,
%% <<>>, S}'), `file Path' (a reply of the whole file), `starttls'
%% (`{starttls, <<"go ahead\n">>, S}'), `quiet ...' (`{ok, S}'), `close', `closereply Text',
%% `persist Ms' (`{ok, S, {persistent, Ms}}'), `persistreply Text Ms',
%% `clear' (`{ok, S, {persistent, infinity}}'), `plain Ms' (`{ok, S, Ms}'),
%% `infinity' (`{ok, S, infinity}'), `shutpersist Text Ms'.
%% Opts `{TestPid, drain_shutdown}': handle_drain/1 says goodbye with
%% `reply_shutdown' (otherwise it closes, as without the callback).
-module(sluice_cmd_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_timeout/1, handle_drain/1, handle_close/1,
         handle_error/2, terminate/2]).

init(_Conn, {Test, drain_shutdown}) ->
    Test ! {init, self()},
    {ok, {drain_shutdown, Test}};
init(_Conn, Test) ->
    Test ! {init, self()},
    {ok, Test}.

handle_data(Line, S) ->
    pid(S) ! {data, self(), Line},
    command(binary:split(Line, <<" ">>, [global]), S).

handle_drain({drain_shutdown, Test} = S) ->
    Test ! {handle_drain, self()},
    {reply_shutdown, <<"going down\n">>, S};
handle_drain(S) ->
    {close, drained, S}.

pid({drain_shutdown, Test}) -> Test;
pid(Test) -> Test.

command([<<"shut">> | Text], Test) -> {reply_shutdown, line(Text), Test};
command([<<"shutfor">>, Text, Ms], Test) -> {reply_shutdown, line([Text]), Test, int(Ms)};
command([<<"shutpersist">>, Text, Ms], Test) ->
    {reply_shutdown, line([Text]), Test, {persistent, int(Ms)}};
command([<<"echo">> | Text], Test) -> {reply, line(Text), Test};
command([<<"empty">>], Test) -> {reply, <<>>, Test};
command([<<"file">>, Path], Test) -> {reply, [{sendfile, Path, 0, 0}], Test};
command([<<"starttls">>], Test) -> {starttls, <<"go ahead\n">>, Test};
command([<<"close">>], Test) -> {close, done, Test};
command([<<"closereply">> | Text], Test) -> {reply_close, line(Text), done, Test};
command([<<"persist">>, Ms], Test) -> {ok, Test, {persistent, int(Ms)}};
command([<<"persistreply">>, Text, Ms], Test) -> {reply, line([Text]), Test, {persistent, int(Ms)}};
command([<<"clear">>], Test) -> {ok, Test, {persistent, infinity}};
command([<<"plain">>, Ms], Test) -> {ok, Test, int(Ms)};
command([<<"infinity">>], Test) -> {ok, Test, infinity};
command(_, Test) -> {ok, Test}.

line([]) -> [];
line(Words) -> [lists:join(<<" ">>, Words), <<"\n">>].

int(Bin) -> binary_to_integer(Bin).

handle_timeout(S) ->
    pid(S) ! {timeout, self(), erlang:monotonic_time(millisecond)},
    {ok, S}.

handle_close(S) ->
    pid(S) ! {handle_close, self()}.

handle_error(Reason, S) ->
    pid(S) ! {handle_error, self(), Reason}.

terminate(Reason, S) ->
    pid(S) ! {terminate, self(), Reason},
    ok.
