%% A length-prefixed protocol read with sluice:recv/3, for
%% sluice_recv_SUITE: a message is `<<Len:32, Body:Len/binary>>', answered
%% with `<<Len:32, (erlang:crc32(Body)):32>>'.
%%
%% handle_data/2 parses the messages its chunk holds whole, and completes
%% the last one, begun in the chunk, with sluice:recv/3: the rest of its
%% header (recv of the bytes missing), then its body (recv of the bytes
%% missing); what the client sent after it must come to handle_data/2
%% next. A recv that fails is told to the test, `{recv_error, Pid,
%% Reason}'; what was had of the message is kept in the state (`pending')
%% and the next chunk goes behind it, so a timeout loses nothing.
%%
%% Options: `test' (the pid told `{init, Pid, Conn}', `{data, Pid, Chunk}'
%% for every chunk, `{msg, Pid, Body}' for every message, in order);
%% `greeting' N: init/2 reads N bytes with recv/3 first and tells
%% `{greeting, Pid, Result}', then, with `then' `close' or `reply_close',
%% closes (reason `recv_then_close'; `bye' said); `timeout': recv/3's
%% (5000 ms).
%% A message `{recv, Length, Timeout}' makes handle_info/2 call recv/3,
%% tell `{info_recv, Pid, Result}' and parse what it got as if it were a
%% chunk.
-module(sluice_recv_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_info/2, terminate/2]).

init(Conn, Opts = #{test := Test}) ->
    Test ! {init, self(), Conn},
    S = #{test => Test, conn => Conn, pending => <<>>,
          timeout => maps:get(timeout, Opts, 5000)},
    case Opts of
        #{greeting := N} ->
            Test ! {greeting, self(), sluice:recv(Conn, N, maps:get(timeout, S))},
            case Opts of
                #{then := close} -> {close, recv_then_close, S};
                #{then := reply_close} -> {reply_close, <<"bye">>, recv_then_close, S};
                _ -> {ok, S}
            end;
        _ ->
            {ok, S}
    end.

handle_data(Data, S = #{test := Test, pending := Pending}) ->
    Test ! {data, self(), Data},
    messages(<<Pending/binary, Data/binary>>, [], S#{pending := <<>>}).

handle_info({recv, Length, Timeout}, S = #{test := Test, conn := Conn, pending := Pending}) ->
    Result = sluice:recv(Conn, Length, Timeout),
    Test ! {info_recv, self(), Result},
    case Result of
        {ok, Data} -> messages(<<Pending/binary, Data/binary>>, [], S#{pending := <<>>});
        {error, _} -> {ok, S}
    end.

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason},
    ok.

messages(<<Len:32, Body:Len/binary, Rest/binary>>, Out, S) ->
    messages(Rest, [Out, answer(Body, S)], S);
messages(<<>>, Out, S) ->
    reply(Out, S);
messages(Begun, Out, S) when byte_size(Begun) < 4 ->
    case read(4 - byte_size(Begun), S) of
        {ok, More} -> messages(<<Begun/binary, More/binary>>, Out, S);
        error -> reply(Out, S#{pending := Begun})
    end;
messages(Begun = <<Len:32, Part/binary>>, Out, S) ->
    case read(Len - byte_size(Part), S) of
        {ok, More} -> {reply, [Out, answer(<<Part/binary, More/binary>>, S)], S};
        error -> reply(Out, S#{pending := Begun})
    end.

reply(Out, S) ->
    case iolist_size(Out) of
        0 -> {ok, S};
        _ -> {reply, Out, S}
    end.

read(N, #{conn := Conn, timeout := Timeout, test := Test}) ->
    case sluice:recv(Conn, N, Timeout) of
        {ok, Bytes} when byte_size(Bytes) =:= N -> {ok, Bytes};
        {ok, Bytes} -> error({recv_returned, byte_size(Bytes), wanted, N});
        {error, Reason} -> Test ! {recv_error, self(), Reason}, error
    end.

answer(Body, #{test := Test}) ->
    Test ! {msg, self(), Body},
    <<(byte_size(Body)):32, (erlang:crc32(Body)):32>>.
