%% Files in a reply (`{sendfile, File, Offset, Length}' pieces), on the
%% three transports: `inet' and `socket' send them with the kernel's
%% sendfile, `ssl' reads and sends them 64 KiB at a time. What the client
%% gets (the bytes around a file in order, a large file whole, a slice,
%% the rest of a file, the replies to pipelined requests in order, a file
%% from handle_info/2, from an open raw file, before a FIN), what
%% bytes_out counts, parked and hibernated connections, and how a
%% connection ends: a missing or short file
%% crashes it with a clear reason, a bad piece as bad_iodata, and a
%% client that never reads is closed at send_timeout.
%%
%% The files are written once, under the suite's own directory in
%% priv_dir (a 20 MB one among them).
-module(sluice_sendfile_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([head_file_and_trailer_in_order/1,
         large_file_arrives_whole/1,
         offset_and_length_send_that_slice/1,
         zero_length_sends_the_rest/1,
         bytes_out_counts_the_file/1,
         pipelined_requests_are_answered_in_order/1,
         open_raw_file_is_sent_and_left_open/1,
         file_from_handle_timeout/1,
         reply_close_sends_the_file_then_fin/1,
         missing_file_crashes_the_connection/1,
         short_file_crashes_the_connection/1,
         closed_raw_file_crashes_the_connection/1,
         bad_piece_crashes_as_bad_iodata/1,
         client_that_never_reads_is_closed_at_send_timeout/1,
         drain_waits_for_the_file/1,
         file_before_starttls_in_the_same_read/1,
         parked_and_hibernated_connections_send_files/1]).

-define(HANDLER(Test), {sluice_sendfile_handler, #{test => Test}}).
-define(LARGE, (20 * 1024 * 1024)).
-define(SMALL, 100000).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [{group, inet}, {group, socket}, {group, ssl}, file_before_starttls_in_the_same_read,
     parked_and_hibernated_connections_send_files].

groups() ->
    Cases = [head_file_and_trailer_in_order,
             large_file_arrives_whole,
             offset_and_length_send_that_slice,
             zero_length_sends_the_rest,
             bytes_out_counts_the_file,
             pipelined_requests_are_answered_in_order,
             open_raw_file_is_sent_and_left_open,
             file_from_handle_timeout,
             reply_close_sends_the_file_then_fin,
             missing_file_crashes_the_connection,
             short_file_crashes_the_connection,
             closed_raw_file_crashes_the_connection,
             bad_piece_crashes_as_bad_iodata,
             client_that_never_reads_is_closed_at_send_timeout,
             drain_waits_for_the_file],
    [{G, [], Cases} || G <- [inet, socket, ssl]].

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Dir = filename:join(?config(priv_dir, Config), atom_to_list(?MODULE)),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Small = crypto:strong_rand_bytes(?SMALL),
    ok = file:write_file(filename:join(Dir, "small"), Small),
    ok = file:write_file(filename:join(Dir, "large"), crypto:strong_rand_bytes(?LARGE)),
    ok = file:write_file(filename:join(Dir, "empty"), <<>>),
    [{dir, Dir}, {small, Small}, {certs, sluice_tls_test_lib:certs()} | Config].

end_per_suite(Config) ->
    _ = file:del_dir_r(?config(dir, Config)),
    ok.

init_per_group(ssl, Config) ->
    [{transport, ssl} | Config];
init_per_group(Backend, Config) ->
    sluice_test_lib:init_backend(Backend, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)),
    sluice_test_lib:stop_listener({?MODULE, hibernating}).

%%% Helpers

start(Config) ->
    start(Config, #{}).

%% A line-framed listener of the test handler on the group's transport.
start(Config, Extra) ->
    Name = ?config(name, Config),
    Tls = case ?config(transport, Config) of
              ssl -> #{transport => ssl, tls_opts => sluice_tls_test_lib:server_opts(Config)};
              _ -> #{}
          end,
    sluice_test_lib:start_listener(Name, maps:merge(maps:merge(#{framing => line,
                                                                 handler => ?HANDLER(self())},
                                                               Tls),
                                                    Extra)),
    sluice_test_lib:port(Name).

connect(Config, Port) ->
    connect(Config, Port, []).

%% A passive client, `{tcp, S}' or `{ssl, S}'.
connect(Config, Port, Extra) ->
    case ?config(transport, Config) of
        ssl ->
            {ok, S} = sluice_tls_test_lib:connect(Port, Config, Extra),
            {ssl, S};
        _ ->
            {ok, S} = sluice_test_lib:connect(Port, Extra),
            {tcp, S}
    end.

send({tcp, S}, Data) -> gen_tcp:send(S, Data);
send({ssl, S}, Data) -> ssl:send(S, Data).

recv({tcp, S}, N, Timeout) -> gen_tcp:recv(S, N, Timeout);
recv({ssl, S}, N, Timeout) -> ssl:recv(S, N, Timeout).

close({tcp, S}) -> gen_tcp:close(S);
close({ssl, S}) -> ssl:close(S).

%% Exactly N bytes, then nothing more for a moment.
recv_exactly({tcp, S}, N) -> sluice_test_lib:recv_exactly(S, N, 30000);
recv_exactly({ssl, S}, N) -> sluice_tls_test_lib:recv_exactly(S, N, 30000).

%% Everything until the server closes: {Bytes, Why}.
recv_until_closed(C) ->
    recv_until_closed(C, []).

recv_until_closed(C, Acc) ->
    case recv(C, 0, 10000) of
        {ok, Data} -> recv_until_closed(C, [Data | Acc]);
        {error, Why} -> {iolist_to_binary(lists:reverse(Acc)), Why}
    end.

%% A request, and what the handler answers it with.
ask(C, Path, Offset, Length) ->
    ok = send(C, request(<<"get">>, Path, Offset, Length)).

request(Verb, Path, Offset, Length) ->
    [Verb, $\s, Path, $\s, integer_to_binary(Offset), $\s, integer_to_binary(Length), $\n].

answer(Path, Offset, Length, Body) ->
    [<<"<<">>, Path, $\s, integer_to_binary(Offset), $\s, integer_to_binary(Length), $\n,
     Body, <<">>\n">>].

path(Config, File) ->
    list_to_binary(filename:join(?config(dir, Config), File)).

expect(C, IoData) ->
    Expected = iolist_to_binary(IoData),
    ?assertEqual(Expected, recv_exactly(C, byte_size(Expected))).

%% The connection's last callback.
terminated() ->
    receive {terminate, _Pid, Reason} -> Reason
    after 30000 -> error(not_terminated)
    end.

handle_error() ->
    receive {handle_error, _Pid, Reason} -> Reason
    after 30000 -> error(no_handle_error)
    end.

wait_bytes_out(Name, N) ->
    ok = sluice_test_lib:wait_info(Name, bytes_out, N, 10000).

%%% Cases

%% The head before the file and the trailer after it arrive in that
%% order, the file whole between them.
head_file_and_trailer_in_order(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    ask(C, Path, 0, ?SMALL),
    expect(C, answer(Path, 0, ?SMALL, ?config(small, Config))),
    %% and the connection carries on
    ask(C, Path, 0, 10),
    expect(C, answer(Path, 0, 10, binary:part(?config(small, Config), 0, 10))),
    close(C).

%% 20 MB arrive whole: the same hash as the file's.
large_file_arrives_whole(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "large"),
    ask(C, Path, 0, 0),
    Head = iolist_to_binary(answer(Path, 0, 0, <<>>)),
    HeadSize = byte_size(Head) - 3,
    {ok, <<_:HeadSize/binary>>} = recv(C, HeadSize, 10000),
    Hash = hash_of(C, ?LARGE, crypto:hash_init(sha256)),
    {ok, Local} = file:read_file(Path),
    ?assertEqual(crypto:hash(sha256, Local), Hash),
    ?assertEqual(<<">>\n">>, recv_exactly(C, 3)),
    close(C).

hash_of(_C, 0, Ctx) ->
    crypto:hash_final(Ctx);
hash_of(C, Left, Ctx) ->
    {ok, Data} = recv(C, min(Left, 1048576), 30000),
    hash_of(C, Left - byte_size(Data), crypto:hash_update(Ctx, Data)).

%% Offset and Length cut the slice they say, from the middle and up to
%% the last byte.
offset_and_length_send_that_slice(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    [begin
         ask(C, Path, Offset, Length),
         expect(C, answer(Path, Offset, Length, binary:part(Small, Offset, Length)))
     end || {Offset, Length} <- [{1000, 5000}, {?SMALL - 1, 1}, {0, 1}, {99000, 1000}]],
    close(C).

%% Length 0 is the rest of the file from Offset (file:sendfile/5's, and
%% ranch's and thousand_island's, meaning): from the middle, from the
%% end (nothing), and of an empty file (nothing).
zero_length_sends_the_rest(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    ask(C, Path, 1234, 0),
    expect(C, answer(Path, 1234, 0, binary:part(Small, 1234, ?SMALL - 1234))),
    ask(C, Path, ?SMALL, 0),
    expect(C, answer(Path, ?SMALL, 0, <<>>)),
    Empty = path(Config, "empty"),
    ask(C, Empty, 0, 0),
    expect(C, answer(Empty, 0, 0, <<>>)),
    close(C).

%% bytes_out counts the file with the bytes around it.
bytes_out_counts_the_file(Config) ->
    Name = ?config(name, Config),
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    ask(C, Path, 0, 0),
    Answer = answer(Path, 0, 0, ?config(small, Config)),
    expect(C, Answer),
    wait_bytes_out(Name, iolist_size(Answer)),
    close(C).

%% Requests in one write: each answered with its file, in order.
pipelined_requests_are_answered_in_order(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    Slices = [{N * 7000, 5000 + N} || N <- lists:seq(0, 11)],
    ok = send(C, [request(<<"get">>, Path, O, L) || {O, L} <- Slices]),
    expect(C, [answer(Path, O, L, binary:part(Small, O, L)) || {O, L} <- Slices]),
    close(C).

%% A raw file the handler opened (and keeps) is sent too, from the
%% offset given, twice from the same handle: its position is not the
%% library's to move.
open_raw_file_is_sent_and_left_open(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    [begin
         ok = send(C, request(<<"fd">>, Path, Offset, Length)),
         expect(C, answer(Path, Offset, Length, binary:part(Small, Offset, Length)))
     end || {Offset, Length} <- [{10, 20000}, {5, 10}]],
    close(C),
    ?assertEqual(closed, terminated()).

%% Any callback's reply may hold a file: here handle_timeout/1's.
file_from_handle_timeout(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    ok = send(C, [<<"later ">>, Path, $\n]),
    expect(C, answer(Path, 0, 0, ?config(small, Config))),
    close(C).

%% reply_close: the file, then FIN.
reply_close_sends_the_file_then_fin(Config) ->
    C = connect(Config, start(Config)),
    Path = path(Config, "small"),
    ok = send(C, [<<"bye ">>, Path, $\n]),
    Small = ?config(small, Config),
    {Small, closed} = recv_until_closed(C),
    ?assertEqual(asked, terminated()).

%% A file that cannot be opened crashes the connection with a reason that
%% names it; handle_error/2 and terminate/2 are told; counted as crashed.
missing_file_crashes_the_connection(Config) ->
    Name = ?config(name, Config),
    C = connect(Config, start(Config)),
    Path = path(Config, "no-such-file"),
    ask(C, Path, 0, 0),
    {_, _} = recv_until_closed(C),
    Why = {sendfile_failed, enoent, {sendfile, Path, 0, 0}},
    ?assertMatch({crash, exit, Why, _}, handle_error()),
    ?assertEqual(Why, terminated()),
    ok = sluice_test_lib:wait_until(fun() -> crashed(Name) =:= 1 end, 10000).

%% A file that ends before Offset + Length: what it had goes out, then
%% the connection crashes with `eof'. An offset past the end with a
%% Length too.
short_file_crashes_the_connection(Config) ->
    Port = start(Config),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    C = connect(Config, Port),
    ask(C, Path, ?SMALL - 10, 20),
    Head = iolist_to_binary(answer(Path, ?SMALL - 10, 20, <<>>)),
    Sent = binary:part(Head, 0, byte_size(Head) - 3),
    Tail = binary:part(Small, ?SMALL - 10, 10),
    ?assertEqual({<<Sent/binary, Tail/binary>>, closed}, recv_until_closed(C)),
    ?assertEqual({sendfile_failed, eof, {sendfile, Path, ?SMALL - 10, 20}}, terminated()),
    C2 = connect(Config, Port),
    ask(C2, Path, ?SMALL + 1, 1),
    {_, closed} = recv_until_closed(C2),
    ?assertEqual({sendfile_failed, eof, {sendfile, Path, ?SMALL + 1, 1}}, terminated()).

%% A raw file the handler closed before its reply went out: a crash that
%% says so, not a socket error (the kernel's sendfile would call it
%% `badarg' or `einval').
closed_raw_file_crashes_the_connection(Config) ->
    Name = ?config(name, Config),
    C = connect(Config, start(Config)),
    ok = send(C, request(<<"closed">>, path(Config, "small"), 0, 0)),
    {_, _} = recv_until_closed(C),
    ?assertMatch({sendfile_failed, einval, {sendfile, _Fd, 0, 0}}, terminated()),
    ok = sluice_test_lib:wait_until(fun() -> crashed(Name) =:= 1 end, 10000),
    #{close_reasons := #{socket_error := 0}} = sluice:info(Name).

crashed(Name) ->
    maps:get(crashed, maps:get(close_reasons, sluice:info(Name))).

%% A piece that is not well formed is not iodata either: bad_iodata, as
%% for any other term in a reply list.
bad_piece_crashes_as_bad_iodata(Config) ->
    C = connect(Config, start(Config)),
    ok = send(C, <<"bad\n">>),
    {_, _} = recv_until_closed(C),
    ?assertEqual({bad_iodata, [<<"x">>, {sendfile, <<"f">>, -1, 0}]}, terminated()).

%% A client that reads nothing of a 20 MB file: the connection is closed
%% once a piece of it could not go out within send_timeout, as a socket
%% error (handle_error/2 told), with what did go out counted.
client_that_never_reads_is_closed_at_send_timeout(Config) ->
    Name = ?config(name, Config),
    Port = start(Config, #{socket_opts => [{send_timeout, 500}, {sndbuf, 65536}],
                           idle_timeout => infinity}),
    C = connect(Config, Port, [{recbuf, 4096}]),
    ask(C, path(Config, "large"), 0, 0),
    ?assertMatch({socket_error, _}, handle_error()),
    ?assertMatch({error, _}, terminated()),
    ok = sluice_test_lib:wait_reason(Name, socket_error, 1),
    #{bytes_out := Out} = sluice:info(Name),
    ct:log("bytes_out ~p", [Out]),
    ?assert(Out > 0),
    ?assert(Out < ?LARGE),
    close(C).

%% A drain that comes while a 20 MB file goes out (the client has not
%% read it yet) is seen once the file is out: the client gets the file
%% whole, the trailer, then FIN.
drain_waits_for_the_file(Config) ->
    Name = ?config(name, Config),
    C = connect(Config, start(Config)),
    Path = path(Config, "large"),
    ask(C, Path, 0, 0),
    Head = iolist_to_binary(answer(Path, 0, 0, <<>>)),
    HeadSize = byte_size(Head) - 3,
    {ok, <<_:HeadSize/binary>>} = recv(C, HeadSize, 10000),
    Test = self(),
    spawn_link(fun() -> Test ! {drained, sluice:drain(Name, 60000)} end),
    Hash = hash_of(C, ?LARGE, crypto:hash_init(sha256)),
    {ok, Local} = file:read_file(Path),
    ?assertEqual(crypto:hash(sha256, Local), Hash),
    ?assertEqual({<<">>\n">>, closed}, recv_until_closed(C)),
    ?assertEqual(drained, terminated()),
    receive {drained, Drained} -> ?assertMatch({ok, _}, Drained) end.

%% A request answered with a file, then STARTTLS, in one read (on an
%% `inet' listener with tls_opts): the file's reply goes out before the
%% plaintext go-ahead, and nothing of its sending reaches the handler
%% once on TLS (the driver's acknowledgements: handle_info/2 of the test
%% handler crashes on a message it does not know).
file_before_starttls_in_the_same_read(Config) ->
    %% ssl logs a message its connection process did not expect (at
    %% notice): a driver's acknowledgement left behind is moved to it
    ok = sluice_tls_test_lib:capture_all_logs(),
    TlsOpts = [{log_level, notice} | sluice_tls_test_lib:server_opts(Config)],
    Port = start(Config, #{tls_opts => TlsOpts}),
    {ok, T} = sluice_test_lib:connect(Port),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    ok = gen_tcp:send(T, [request(<<"get">>, Path, 0, 0), <<"starttls\n">>]),
    expect({tcp, T}, [answer(Path, 0, 0, Small), <<"go\n">>]),
    {ok, S} = ssl:connect(T, sluice_tls_test_lib:client_opts(Config), 5000),
    C = {ssl, S},
    ask(C, Path, 5, 10),
    expect(C, answer(Path, 5, 10, binary:part(Small, 5, 10))),
    close(C),
    ?assertEqual(closed, terminated()),
    Logged = sluice_tls_test_lib:captured(),
    ok = sluice_tls_test_lib:stop_capture(),
    ?assertEqual([], [L || L = {_, _, _, Text} <- Logged, string:find(Text, "inet_reply") =/= nomatch]).

%% A connection that hibernated, and one that parked (a new process when
%% it wakes), send files as before.
parked_and_hibernated_connections_send_files(Config) ->
    Name = ?config(name, Config),
    Path = path(Config, "small"),
    Small = ?config(small, Config),
    Answer = answer(Path, 0, 0, Small),
    C = connect(Config, start(Config, #{hibernate_after => 20, park_after => 50})),
    ask(C, Path, 0, 0),
    expect(C, Answer),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 5000),
    ask(C, Path, 0, 0),
    expect(C, Answer),
    ok = sluice_test_lib:wait_info(Name, parked, 1, 5000),
    C2 = connect(Config, start_hibernating(Config)),
    %% (seldom: reading another process's current function counts as its
    %% activity, sluice_idle_SUITE)
    ok = sluice_test_lib:wait_until(fun() -> hibernated(Config) end, 10000, 250),
    ask(C2, Path, 0, 0),
    expect(C2, Answer),
    close(C),
    close(C2).

start_hibernating(Config) ->
    start([{name, {?MODULE, hibernating}} | Config], #{hibernate_after => 20}).

%% (The connection's process may not be there yet when the client's
%% connect returns.)
hibernated(_Config) ->
    case sluice_test_lib:conn_pids({?MODULE, hibernating}) of
        [Pid] -> {current_function, {erlang, hibernate, 3}}
                     =:= erlang:process_info(Pid, current_function);
        [] -> false
    end.
