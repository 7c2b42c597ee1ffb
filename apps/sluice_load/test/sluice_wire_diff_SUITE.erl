%% The benchmark compares servers: it is honest only if they do the same
%% work. Here the same byte streams go to every server of a protocol over
%% loopback (sluice on inet and on socket, the hand-written peer on both
%% backends, the C reference server, and for valid ack traffic the seed's
%% server) and their replies and close behaviour are compared: frames whole
%% and split at every byte, pipelined, zero-length, exactly at and above
%% the 1 MiB frame limit (the acks owed before a frame too large included),
%% truncated at the client's FIN; pings split anywhere, other lines, lines
%% too long; echo. `last' and `counted' acks depend on how the bytes fell
%% into reads, which differs between servers: their acks are checked
%% (increasing ids, each count the ids it covers) and compared by the
%% last id acked.
-module(sluice_wire_diff_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2]).
-export([same_replies_and_close/1, half_close_gets_every_reply/1]).

-define(LB, {127, 0, 0, 1}).
-define(MAX, 1048576).
%% Quiet this long after the last reply: the connection is open. A
%% client that kept its side open waits this long for a close that may
%% not come (a loaded machine's server can be still this long and then
%% close: 300 ms was short of that); one that sent its FIN waits longer,
%% since every server closes then, and a server that does not is still
%% told apart.
-define(QUIET_MS, 1000).
-define(SHUT_QUIET_MS, 5000).

suite() -> [{timetrap, {seconds, 120}}].

all() ->
    [{group, ack_each}, {group, ack_last}, {group, ack_counted}, {group, ping},
     {group, echo}].

groups() ->
    [{G, [], [same_replies_and_close]} || G <- [ack_each, ack_last, ack_counted, ping]]
        ++ [{echo, [], [same_replies_and_close, half_close_gets_every_reply]}].

init_per_suite(Config) ->
    case sluice_load_test_lib:priv_dir() of
        {ok, Priv} ->
            {ok, _} = application:ensure_all_started(sluice),
            [{bin_dir, Priv} | Config];
        error -> {fail, "sluice C binaries not found: run "
                        "`make -C apps/sluice_load/c_src` or set SLUICE_PRIV"}
    end.

end_per_suite(_Config) -> ok.

init_per_group(Group, Config0) ->
    Config = sluice_load_test_lib:start_reaper(Config0),
    {Proto, Ack} = proto(Group),
    Handler = case Proto of
                  ack -> {sluice_proto_ack, #{ack => Ack}};
                  ping -> {sluice_proto_ping, []};
                  echo -> {sluice_proto_echo, []}
              end,
    Sluice = [begin
                  Name = {?MODULE, Group, T},
                  {ok, _} = sluice:start_listener(Name, #{ip => ?LB, port => 0,
                                                          transport => T,
                                                          handler => Handler}),
                  #{port := P} = sluice:info(Name),
                  {{sluice, T}, P}
              end || T <- [inet, socket]],
    Peers = [begin
                 {ok, #{port := P} = Peer} =
                     sluice_peer_gen_tcp:start(#{backend => B, protocol => Proto,
                                                 ack => Ack}),
                 {{peer, B, Peer}, P}
             end || B <- [inet, socket]],
    AckArgs = case Proto of
                  ack -> ["--ack", atom_to_list(Ack)];
                  _ -> []
              end,
    Ref = load_engine_SUITE:start_ref(Config, ["--threads", "1", "--protocol",
                                               atom_to_list(Proto) | AckArgs]),
    Seed = case Group of
               ack_each -> {ok, SP} = sluice_bench_seed_server:start(0), [{seed, SP}];
               _ -> []
           end,
    [{proto, {Proto, Ack}},
     {servers, Sluice ++ Peers ++ [{ref, list_to_integer(Ref)}]},
     {seed, Seed} | Config].

end_per_group(Group, Config) ->
    _ = [sluice:stop_listener({?MODULE, Group, T}) || T <- [inet, socket]],
    _ = [sluice_peer_gen_tcp:stop(Peer) || {{peer, _, Peer}, _} <- ?config(servers, Config)],
    sluice_load_test_lib:stop_reaper(Config).

proto(ack_each) -> {ack, each};
proto(ack_last) -> {ack, last};
proto(ack_counted) -> {ack, counted};
proto(ping) -> {ping, none};
proto(echo) -> {echo, none}.

%%% ------------------------------------------------------------------
%%% Cases
%%% ------------------------------------------------------------------

%% Every input of the protocol, to every server at once: the same replies
%% (as the ack mode allows, see the top) and the same end: closed by the
%% server, or still open. The cases with a known answer check it too, so
%% that servers wrong alike do not pass.
same_replies_and_close(Config) ->
    {Proto, Ack} = ?config(proto, Config),
    Servers = ?config(servers, Config),
    Fails = lists:append(
              [check(Proto, Ack, Case, Servers ++ seed(Case, Config))
               || Case <- inputs(Proto)]),
    ?assertEqual([], Fails).

seed({_, _, _, valid}, Config) -> ?config(seed, Config);
seed(_, _Config) -> [].

check(Proto, Ack, {Name, Chunks, Shut, _} = Case, Servers) ->
    Results = pmap(fun({Server, Port}) ->
                           {label(Server), exchange(Port, Chunks, Shut)}
                   end, Servers),
    Seen = [{Label, normal(Proto, Ack, Chunks, R)} || {Label, R} <- Results],
    Want = expected(Proto, Ack, Case),
    Distinct = lists:usort([S || {_, S} <- Seen]),
    case {Distinct, Want} of
        {[_], undefined} -> [];
        {[Want], _} -> [];
        _ -> [{Name, Shut, {expected, Want}, Seen}]
    end.

label({sluice, T}) -> {sluice, T};
label({peer, B, _}) -> {peer, B};
label(Other) -> Other.

%% The inputs: {Name, Chunks, shut (half-close after them) | open, valid
%% (the seed's server may run it too) | invalid}.
inputs(ack) ->
    F3 = <<(f(1, <<"a">>))/binary, (f(2, <<>>))/binary, (f(3, <<"xyz">>))/binary>>,
    Big = <<9:64, (?MAX + 1):32>>,
    Max = f(4, binary:copy(<<"m">>, ?MAX)),
    Many = iolist_to_binary([f(Id, binary:copy(<<"p">>, Id rem 7)) || Id <- lists:seq(1, 3000)]),
    [{"three frames, one segment", [F3], shut, valid},
     {"three frames, a byte a segment", bytes(F3), shut, valid},
     {"3000 frames pipelined", [Many], shut, valid},
     {"a zero-length frame", [f(7, <<>>)], shut, valid},
     {"a frame of exactly max_frame", [Max], shut, valid},
     {"frames, then a header too large", [<<F3/binary, Big/binary>>], open, invalid},
     {"a header too large alone", [Big], open, invalid},
     {"frames, then a header too large in the next segment", [F3, Big], open, invalid},
     {"frames, then a header too large split in two", [<<F3/binary, 4:64>>, <<(?MAX + 1):32>>],
      open, invalid},
     {"frames, then Len 0xFFFFFFFF", [<<F3/binary, 4:64, 16#FFFFFFFF:32>>], open, invalid},
     {"a header of exactly max_frame, no payload", [<<5:64, ?MAX:32>>], open, invalid},
     {"frames, then a frame truncated by the FIN", [<<F3/binary, 4:64, 10:32, "abc">>],
      shut, invalid},
     {"frames, then a header truncated by the FIN", [<<F3/binary, 4:64, 0:16>>], shut, invalid},
     {"frames, then half a frame, kept open", [<<F3/binary, 4:64, 10:32, "abc">>], open, invalid}];
inputs(ping) ->
    [{"two pings", [<<"Ping\nPing\n">>], shut, valid},
     {"two pings, a byte a segment", bytes(<<"Ping\nPing\n">>), shut, valid},
     {"a thousand pings", [binary:copy(<<"Ping\n">>, 1000)], shut, valid},
     {"another line between pings", [<<"Ping\nHello\nPing\n">>], open, invalid},
     {"an empty line", [<<"\nPing\n">>], open, invalid},
     {"CRLF", [<<"Ping\r\nPing\n">>], open, invalid},
     {"lower case", [<<"ping\nPing\n">>], open, invalid},
     {"Ping with no newline yet", [<<"Ping">>], open, invalid},
     {"64 bytes with no newline yet", [<<"Ping\n", (binary:copy(<<"x">>, 64))/binary>>],
      open, invalid},
     {"65 bytes with no newline", [<<"Ping\n", (binary:copy(<<"x">>, 65))/binary>>],
      open, invalid},
     {"65 bytes in two segments", [binary:copy(<<"x">>, 40), binary:copy(<<"x">>, 25)],
      open, invalid},
     {"a bad line's start, no newline yet", [<<"Ping\nPx">>], open, invalid},
     {"a line cut by the FIN", [<<"Ping\nPin">>], shut, invalid}];
inputs(echo) ->
    [{"hello", [<<"hello">>], shut, valid},
     {"a byte a segment", bytes(<<"abcdef">>), shut, valid},
     {"200 KB", [binary:copy(<<"0123456789">>, 20000)], shut, valid},
     {"kept open", [<<"hello">>], open, valid}].

f(Id, Payload) -> <<Id:64, (byte_size(Payload)):32, Payload/binary>>.

bytes(Bin) -> [<<B>> || <<B>> <= Bin].

%% Known answers, as {Replies (normal/4), closed | open}.
expected(ack, each, {"frames, then a header too large", _, _, _}) ->
    {<<1:64, 2:64, 3:64>>, closed};
expected(ack, Mode, {"frames, then a header too large", _, _, _}) when Mode =/= each ->
    {{last_acked, 3}, closed};
expected(ack, _, {"a header too large alone", _, _, _}) ->
    {none_acked(), closed};
expected(ack, _, {"a header of exactly max_frame, no payload", _, _, _}) ->
    {none_acked(), open};
expected(ack, each, {"3000 frames pipelined", _, _, _}) ->
    {iolist_to_binary([<<Id:64>> || Id <- lists:seq(1, 3000)]), closed};
expected(ack, Mode, {"3000 frames pipelined", _, _, _}) when Mode =/= each ->
    {{last_acked, 3000}, closed};
expected(ping, _, {"another line between pings", _, _, _}) ->
    {<<"Pong\n">>, closed};
expected(ping, _, {"64 bytes with no newline yet", _, _, _}) ->
    {<<"Pong\n">>, open};
expected(ping, _, {"65 bytes with no newline", _, _, _}) ->
    {<<"Pong\n">>, closed};
expected(ping, _, {"a bad line's start, no newline yet", _, _, _}) ->
    {<<"Pong\n">>, open};
expected(_, _, _) ->
    undefined.

none_acked() -> <<>>.

%% `last' and `counted': checked, then reduced to the last id acked.
normal(ack, Mode, _Chunks, {Bytes, End}) when Mode =:= last; Mode =:= counted ->
    {cumulative(Mode, Bytes, 0), End};
normal(_, _, _, R) ->
    R.

cumulative(_, <<>>, 0) -> <<>>;
cumulative(_, <<>>, Last) -> {last_acked, Last};
cumulative(last, <<Id:64, R/binary>>, Prev) when Id > Prev -> cumulative(last, R, Id);
cumulative(counted, <<Id:64, N:32, R/binary>>, Prev) when Id > Prev, N =:= Id - Prev ->
    cumulative(counted, R, Id);
cumulative(_, Bad, Prev) -> {bad_acks_after, Prev, Bad}.

%% Send the chunks (a pause between them, so that most are reads of their
%% own), half-close if asked, then read until the server closes or is
%% quiet: {Replies, closed | open}.
exchange(Port, Chunks, Shut) ->
    {ok, S} = gen_tcp:connect(?LB, Port, [binary, {active, false}, {nodelay, true}]),
    lists:foreach(fun(C) -> _ = gen_tcp:send(S, C), timer:sleep(2) end, Chunks),
    case Shut of
        shut -> _ = gen_tcp:shutdown(S, write);
        open -> ok
    end,
    R = collect(S, [], case Shut of shut -> ?SHUT_QUIET_MS; open -> ?QUIET_MS end),
    gen_tcp:close(S),
    R.

collect(S, Acc, Quiet) ->
    case gen_tcp:recv(S, 0, Quiet) of
        {ok, B} -> collect(S, [Acc, B], Quiet);
        {error, timeout} -> {iolist_to_binary(Acc), open};
        {error, _} -> {iolist_to_binary(Acc), closed}
    end.

pmap(F, L) ->
    Self = self(),
    Refs = [begin
                Ref = make_ref(),
                spawn_link(fun() -> Self ! {Ref, F(X)} end),
                Ref
            end || X <- L],
    [receive {Ref, R} -> R end || Ref <- Refs].

%% A client that half-closes after its last request is owed every reply,
%% also when the replies back up: it sends MBs of echo without reading,
%% shuts down its side, then reads. sluice-ref closed at the FIN and freed
%% what its socket had not taken (7 of these 29 sizes lost 8-200 KB). The
%% servers on the inet driver lose replies too, a limitation of the driver
%% (it empties a busy port's queue when it reads the FIN): only the socket
%% backend's and the C server are held to it.
half_close_gets_every_reply(Config) ->
    Servers = [S || {Server, _} = S <- ?config(servers, Config),
                    lists:member(label(Server), [ref, {sluice, socket}, {peer, socket}])],
    Losses = [{label(Server), K, Lost}
              || K <- lists:seq(20, 48), {Server, Port} <- Servers,
                 (Lost = lost(Port, binary:copy(<<"0123456789abcdef">>, K * 8192))) =/= 0],
    ?assertEqual([], Losses).

lost(Port, Data) ->
    {ok, S} = gen_tcp:connect(?LB, Port, [binary, {active, false}, {recbuf, 4096}]),
    Self = self(),
    Sender = spawn(fun() ->
                           _ = gen_tcp:send(S, Data),
                           _ = gen_tcp:shutdown(S, write),
                           Self ! {sent, S}
                   end),
    receive {sent, S} -> ok after 2000 -> ok end,
    timer:sleep(100),
    {Got, _} = collect_until_closed(S, []),
    exit(Sender, kill),
    gen_tcp:close(S),
    byte_size(Data) - byte_size(Got).

%% Every server here closes once it has sent all it owes: the bound is
%% only for one that does not, and generous (a loaded host can stall a
%% server's writes for seconds: that is not a loss).
collect_until_closed(S, Acc) ->
    case gen_tcp:recv(S, 0, 10000) of
        {ok, B} -> collect_until_closed(S, [Acc, B]);
        {error, E} -> {iolist_to_binary(Acc), E}
    end.
