%% What a connection process holds of the reads it has handled: with the
%% default `gc_after_bytes' a connection collects once it has read that
%% many bytes, so it never holds more than that of dead reads; with
%% `infinity' the VM collects when it would, and dead reads pile up. Both
%% backends; the option is validated.
-module(sluice_gc_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([handled_reads_are_freed_at_once/1,
         without_it_dead_reads_pile_up/1,
         bad_gc_after_bytes_is_refused/1]).

%% A read larger than the default gc_after_bytes (16384).
-define(CHUNK, 20000).
-define(ROUNDS, 20).

suite() -> [{timetrap, {seconds, 60}}].

all() ->
    [{group, inet}, {group, socket}, bad_gc_after_bytes_is_refused].

groups() ->
    sluice_test_lib:backend_groups([handled_reads_are_freed_at_once,
                                    without_it_dead_reads_pile_up]).

init_per_suite(Config) ->
    {ok, _} = application:ensure_all_started(sluice),
    Config.

end_per_suite(_Config) ->
    ok.

init_per_group(Group, Config) ->
    sluice_test_lib:init_backend(Group, Config).

end_per_group(Group, Config) ->
    sluice_test_lib:end_backend(Group, Config).

init_per_testcase(Case, Config) ->
    [{name, {?MODULE, Case}} | Config].

end_per_testcase(_Case, Config) ->
    sluice_test_lib:stop_listener(?config(name, Config)).

%% Each round a chunk larger than gc_after_bytes is echoed: once the
%% connection has handled it, the binaries it still refers to (dead reads
%% waiting for a collection, or live ones) come to less than
%% gc_after_bytes, every round.
handled_reads_are_freed_at_once(Config) ->
    Held = echo_rounds(Config, #{}),
    ct:log("binary bytes held after each round: ~w", [Held]),
    ?assert(lists:all(fun(B) -> B < 16384 end, Held), Held).

%% The control: with gc_after_bytes infinity the same rounds leave the
%% connection holding two reads or more at some point (its heap fills
%% only every few reads, and only then are the dead reads freed).
without_it_dead_reads_pile_up(Config) ->
    Held = echo_rounds(Config, #{gc_after_bytes => infinity}),
    ct:log("binary bytes held after each round: ~w", [Held]),
    ?assert(lists:max(Held) >= 2 * ?CHUNK, Held).

bad_gc_after_bytes_is_refused(Config) ->
    Name = ?config(name, Config),
    [?assertEqual({error, {bad_option, gc_after_bytes, V}},
                  sluice:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                                gc_after_bytes => V}))
     || V <- [0, -1, 1.5, never]],
    ?assertMatch("bad value for option gc_after_bytes: 0 (expected a positive integer" ++ _,
                 sluice:format_error({bad_option, gc_after_bytes, 0})),
    {ok, _} = sluice:start_listener(Name, #{handler => {sluice_proto_echo, []},
                                            ip => {127, 0, 0, 1}, gc_after_bytes => infinity}).

%% The bytes of binaries the connection refers to once it has handled
%% each round's chunk: the echo is back, and the connection has gone back
%% to its receive (it collects, if it does, before that).
echo_rounds(Config, Opts) ->
    Name = ?config(name, Config),
    _ = sluice_test_lib:start_listener(Name, maps:merge(#{handler => {sluice_proto_echo, []}},
                                                        Opts)),
    {ok, S} = sluice_test_lib:connect(sluice_test_lib:port(Name)),
    ok = gen_tcp:send(S, <<"hello">>),
    <<"hello">> = sluice_test_lib:recv_exactly(S, 5, 5000),
    [Pid] = sluice_test_lib:conn_pids(Name),
    Held = [begin
                Chunk = rand:bytes(?CHUNK),
                ok = gen_tcp:send(S, Chunk),
                Chunk = sluice_test_lib:recv_exactly(S, ?CHUNK, 5000),
                ok = wait_waiting(Pid),
                held(Pid)
            end || _ <- lists:seq(1, ?ROUNDS)],
    ok = gen_tcp:close(S),
    Held.

wait_waiting(Pid) ->
    sluice_test_lib:wait_until(
      fun() -> process_info(Pid, [status, message_queue_len]) =:=
                   [{status, waiting}, {message_queue_len, 0}] end, 2000, 5).

held(Pid) ->
    {binary, Bins} = process_info(Pid, binary),
    lists:sum([Size || {_, Size, _} <- Bins]).
