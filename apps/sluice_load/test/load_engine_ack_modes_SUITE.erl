%% The load engine against servers in another ack mode than its --ack
%% (issue 17, item 2): every pair of modes, lockstep and pipeline, against
%% `bin/sluice serve --ack X' and `sluice-ref --ack X'. A mismatch the
%% acks can show stops the run (exit 1) with the server's mode and the
%% --ack to run with; the one they cannot show (each and last in lockstep:
%% one frame per write, answered alike) passes and the summary says so.
%% Also: an echo or a silent server is named as such, not reported as a
%% wrong id or a rate of 0.
-module(load_engine_ack_modes_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([mismatch_names_the_servers_mode/1, matching_modes_pass/1,
         lockstep_each_and_last_answer_alike/1, echo_server_is_named/1,
         silent_server_is_a_protocol_error/1]).

-define(RUN_S, "0.6").
-define(MODES, ["each", "last", "counted"]).

suite() -> [{timetrap, {seconds, 90}}].

all() -> [{group, sluice}, {group, ref}].

groups() ->
    Cases = [mismatch_names_the_servers_mode, matching_modes_pass,
             lockstep_each_and_last_answer_alike, echo_server_is_named,
             silent_server_is_a_protocol_error],
    [{sluice, [], Cases}, {ref, [], Cases}].

init_per_suite(Config) ->
    case {sluice_load_test_lib:priv_dir(), sluice_load_test_lib:built_bin(Config)} of
        {{ok, Priv}, [_ | _] = C} -> [{bin_dir, Priv} | C];
        {error, _} -> {fail, "sluice C binaries not found: run make"};
        {_, Fail} -> Fail
    end.

end_per_suite(_Config) -> ok.

%% One server per ack mode, an echo and a ping server, for the group; a
%% process of their own holds their ports (a case's process ends with it).
init_per_group(Kind, Config) ->
    C = sluice_load_test_lib:start_reaper(Config),
    Self = self(),
    Holder = spawn(fun() ->
                           Servers = [{{ack, M}, start(Kind, C, ["--protocol", "ack", "--ack", M])}
                                      || M <- ?MODES]
                               ++ [{echo, start(Kind, C, ["--protocol", "echo"])},
                                   {ping, start(Kind, C, ["--protocol", "ping"])}],
                           Self ! {servers, self(), Servers},
                           receive stop -> ok end
                   end),
    receive
        {servers, Holder, Servers} -> [{servers, Servers}, {kind, Kind}, {holder, Holder} | C]
    after 60000 -> {fail, servers_not_started}
    end.

end_per_group(_Kind, Config) ->
    ?config(holder, Config) ! stop,
    sluice_load_test_lib:stop_reaper(Config).

init_per_testcase(_Case, Config) -> sluice_load_test_lib:start_reaper(Config).

end_per_testcase(_Case, Config) -> sluice_load_test_lib:stop_reaper(Config).

%%% ------------------------------------------------------------------

%% Each mismatch the acks show stops the run at once with exit 1 and a
%% protocol error that names the --ack the server needs (counted against
%% an 8-byte server in lockstep: each, as either 8-byte mode fits).
mismatch_names_the_servers_mode(Config) ->
    Cases = [{Sc, Load, Server} || Sc <- ["lockstep", "pipeline"], Load <- ?MODES,
                                   Server <- ?MODES, Load =/= Server,
                                   not (Sc =:= "lockstep" andalso Load =/= "counted"
                                        andalso Server =/= "counted")],
    ?assertEqual(10, length(Cases)),
    Bad = [{Sc, Load, Server, Status, Out}
           || {Sc, Load, Server} <- Cases,
              {Status, Out} <- [load(Config, {ack, Server}, Sc, Load)],
              not told(Status, Out, want(Sc, Load, Server))],
    ?assertEqual([], Bad).

want("lockstep", "counted", _) -> "each";
want(_, _, Server) -> Server.

told(Status, Out, Mode) ->
    Status =:= 1 andalso
        match(Out, "protocol error on connection 0 \\(local 127.0.0.1:[0-9]+\\): .*: the server "
                   ".*--ack " ++ Mode ++ ".*; run load with ")
        andalso match(Out, "errors: 1 \\(protocol error: see stderr\\); exit 1").

%% The same modes on both sides: no error, every scenario shape.
matching_modes_pass(Config) ->
    Bad = [{M, Args, Status, Out}
           || M <- ?MODES,
              Args <- [["--scenario", "lockstep"], ["--scenario", "pipeline"],
                       ["--scenario", "pipeline", "--window", "64", "--batch", "8"],
                       ["--scenario", "pipeline", "--rate", "20000", "--conns", "2"]],
              {Status, Out} <- [run(Config, {ack, M}, Args ++ ["--ack", M])],
              Status =/= 0 orelse not match(Out, "errors: 0; exit 0")],
    ?assertEqual([], Bad).

%% One frame per write: a server acking each frame and one acking the
%% last of each read send the same bytes, so either --ack runs against
%% either; the summary says so.
lockstep_each_and_last_answer_alike(Config) ->
    [begin
         {Status, Out} = load(Config, {ack, Server}, "lockstep", Load),
         ?assertEqual(0, Status),
         ?assert(match(Out, "one frame per write: servers in --ack each and last answer alike")),
         ?assert(match(Out, "messages: [1-9]"))
     end || {Load, Server} <- [{"each", "last"}, {"last", "each"}]].

%% Frames sent back as they were: an echo server, whatever the --ack.
echo_server_is_named(Config) ->
    [begin
         {Status, Out} = load(Config, echo, Sc, M),
         ?assertEqual(1, Status),
         ?assert(match(Out, "the first frame came back as sent \\(id 1, length 5\\): the server "
                            "is an echo server"))
     end || Sc <- ["lockstep", "pipeline"], M <- ?MODES].

%% Nothing back at all (a ping server waits for a line, or closes on one
%% too long): a protocol error that asks whether the server serves the
%% protocol, not a rate of 0.
silent_server_is_a_protocol_error(Config) ->
    {Status, Out} = load(Config, ping, "pipeline", "each"),
    ?assertEqual(1, Status),
    ?assert(match(Out, "protocol error: nothing came back (in [0-9.]+ s on 1 connection|on the "
                       "connection before the server closed it): is the server serving the "
                       "ack protocol")),
    {Status2, Out2} = run(Config, ping, ["--scenario", "flood"]),
    ?assertEqual(1, Status2),
    ?assert(match(Out2, "is the server an echo server")).

%%% ------------------------------------------------------------------

load(Config, Server, Sc, Mode) ->
    run(Config, Server, ["--scenario", Sc, "--ack", Mode]).

run(Config, Server, Args) ->
    Port = proplists:get_value(Server, ?config(servers, Config)),
    All = ["--port", integer_to_list(Port), "--duration", ?RUN_S, "--threads", "1" | Args],
    {Status, Out} = load_engine_SUITE:run(Config, "sluice-load", All, 20000),
    ct:log("~p: sluice-load ~s -> ~p~n~s", [?config(kind, Config), lists:join(" ", All),
                                             Status, Out]),
    {Status, Out}.

match(Out, Re) ->
    re:run(Out, Re) =/= nomatch.

start(sluice, Config, Args) ->
    {P, _} = sluice_load_test_lib:sluice(Config, ["serve", "--ip", "127.0.0.1", "--port", "0"
                                                  | Args]),
    {[Port], _} = sluice_load_test_lib:wait_line(P, "^listening on 127.0.0.1:([0-9]+)", 20000),
    list_to_integer(Port);
start(ref, Config, Args) ->
    list_to_integer(load_engine_SUITE:start_ref(Config, ["--threads", "1" | Args])).
