%% @doc Files in a reply: a handler's reply list may hold `{sendfile, File,
%% Offset, Length}' pieces, which go out in order with the bytes around
%% them ("headers, then the file body") without the connection ever
%% holding the file: the kernel's sendfile(2) on the transports that have
%% it (the transport's optional sendfile/4: `inet', `socket'), else reads
%% of ?READ bytes sent one at a time (`ssl', a user's transport).
%%
%% A reply is looked at here only when it is not iodata:
%% sluice_conn_handler:send/2 measures every list reply anyway (iolist_size/1, for the count), and a
%% list with a piece in it fails that measure, which was the path of a
%% reply that is not iodata (a crash with `{bad_iodata, Reply}'). Replies
%% without a file pay nothing for files. Here the reply is walked once,
%% cut into runs of bytes and pieces, and anything in it that is neither
%% iodata nor a well-formed piece still crashes the connection with
%% `{bad_iodata, Reply}'.
%%
%% A piece goes out in calls of at most ?PIECE bytes, each of which must
%% be taken by the kernel within the listener's `send_timeout': the
%% transport fails one that is not with `{error, timeout}', and the
%% connection ends as a socket error, as when any send times out. Between
%% the calls nothing else runs (as behind any callback): a drain waits
%% for the file, and a supervisor's shutdown ends a connection that does
%% not trap exits at once.
%%
%% A file that cannot be opened, or read, or that ends before `Offset +
%% Length' (`Length' 0: until its end, as file:sendfile/5, ranch and
%% thousand_island have it) crashes the connection with
%% `{sendfile_failed, Why, Piece}': what went before it may be out
%% already, and the stream the client reads could only go on corrupt. A
%% handler that wants to answer a missing file opens it itself (a raw
%% file is a `File' too) or looks first.
%% @private
-module(sluice_conn_sendfile).

-include("sluice_conn.hrl").
-include_lib("kernel/include/file.hrl").

-export([send/2]).

%% The most one sendfile/4 call of a transport is given: each must go out
%% within send_timeout, so a client must take this much per send_timeout
%% (35 KB/s at the default 30 s) or be closed as one that stopped
%% reading; and between two calls the count in bytes_out moves. (A call
%% costs about 26 us besides the kernel's copying on `inet', measured
%% with 1-byte calls: 27 ms for a GB in 1,024 calls.)
-define(PIECE, 1048576).
%% What a transport without sendfile/4 is sent at a time: read, sent,
%% let go, so that a connection holds one read of the file, not the file.
-define(READ, 65536).

%% @doc Send `Out', a handler's reply that is not iodata: its bytes and its
%% files in order, or a crash if it holds anything else.
-spec send(sluice_handler:reply(), #s{}) -> ok | {error, term()}.
send(Out, S) ->
    case parts(Out) of
        {ok, Parts} -> send_parts_or_refuse(Parts, S);
        error -> sluice_conn_close:crash(exit, {bad_iodata, Out}, [], S)
    end.

%% The handler shut the write side down (sluice_conn_halfclose): the
%% files could not reach the client either (only the bytes go through the
%% connection's send, which refuses them).
send_parts_or_refuse(Parts, S) ->
    case sluice_conn_halfclose:is_shut(S) of
        false -> send_parts(Parts, S);
        true -> {error, ?AFTER_SHUTDOWN(sendfile)}
    end.

send_parts([], _S) ->
    ok;
send_parts([{bytes, IoData} | Rest], S) ->
    case sluice_conn_handler:send(IoData, S) of
        ok -> send_parts(Rest, S);
        Error -> Error
    end;
send_parts([{file, Piece} | Rest], S) ->
    case send_file(Piece, S) of
        ok -> send_parts(Rest, S);
        Error -> Error
    end.

%%% The reply cut into parts -----------------------------------------------

%% `{ok, [{bytes, IoData} | {file, Piece}]}' in order, or `error' for a
%% reply with something in it that is neither. A run of bytes is the
%% binaries and bytes between two pieces, in a flat list: the binaries are
%% not copied.
parts(Out) ->
    case walk(Out, [], []) of
        {ok, Run, Parts} -> {ok, lists:reverse(end_run(Run, Parts))};
        error -> error
    end.

%% Run: the bytes since the last piece, reversed; Parts: the parts before
%% them, reversed.
walk(Bin, Run, Parts) when is_binary(Bin) ->
    {ok, [Bin | Run], Parts};
walk([], Run, Parts) ->
    {ok, Run, Parts};
walk([H | T], Run, Parts) ->
    case item(H, Run, Parts) of
        {ok, Run2, Parts2} -> walk(T, Run2, Parts2);
        error -> error
    end;
walk(_Other, _Run, _Parts) ->
    error.

item(B, Run, Parts) when is_integer(B), B >= 0, B =< 255 ->
    {ok, [B | Run], Parts};
item(Bin, Run, Parts) when is_binary(Bin) ->
    {ok, [Bin | Run], Parts};
item(List, Run, Parts) when is_list(List) ->
    walk(List, Run, Parts);
item(Piece = {sendfile, _, _, _}, Run, Parts) ->
    case is_piece(Piece) of
        true -> {ok, [], [{file, Piece} | end_run(Run, Parts)]};
        false -> error
    end;
item(_Other, _Run, _Parts) ->
    error.

end_run([], Parts) -> Parts;
end_run(Run, Parts) -> [{bytes, lists:reverse(Run)} | Parts].

is_piece({sendfile, File, Offset, Length}) ->
    is_integer(Offset) andalso Offset >= 0 andalso is_integer(Length) andalso Length >= 0
        andalso (is_record(File, file_descriptor) orelse is_binary(File) orelse is_list(File)
                 orelse is_atom(File)).

%%% One file ----------------------------------------------------------------

%% A file named is opened for this send and closed after it, however it
%% ends; an open raw file is the handler's, and is left open (its position
%% is never moved: every read names its offset).
send_file(Piece = {sendfile, File, Offset, Length}, S) when is_record(File, file_descriptor) ->
    case usable(File) of
        ok -> from(File, Offset, wanted(Length), Piece, S);
        {error, Why} -> failed(Why, Piece, S)
    end;
send_file(Piece = {sendfile, Name, Offset, Length}, S) ->
    case file:open(Name, [read, raw, binary]) of
        {ok, Fd} ->
            try from(Fd, Offset, wanted(Length), Piece, S)
            after file:close(Fd)
            end;
        {error, Why} ->
            failed(Why, Piece, S)
    end.

%% A raw file of the handler's that this process can read: one closed
%% already, or opened by another process (a connection that parked and
%% woke is a new one), is the handler's mistake, which the kernel's
%% sendfile would report as the socket's (`badarg', `einval'), or raise.
usable(Fd) ->
    try file:position(Fd, cur) of
        {ok, _} -> ok;
        {error, Why} -> {error, Why}
    catch error:Why -> {error, Why}
    end.

%% Length 0 is the rest of the file.
wanted(0) -> rest;
wanted(Length) -> Length.

from(Fd, Offset, Want, Piece, S = #s{t = T}) ->
    %% The transport is loaded: the connection calls it on every read.
    case erlang:function_exported(T, sendfile, 4) of
        true -> kernel(Fd, Offset, Want, Piece, S);
        false -> reads(Fd, Offset, Want, Piece, S)
    end.

%% The kernel sends from the file (the transport's sendfile/4), a piece
%% at a time, each counted once it is out.
kernel(Fd, Offset, Want, Piece, S = #s{t = T, ts = TS, stats = Stats}) ->
    Ask = ask(Want, ?PIECE),
    case T:sendfile(TS, Fd, Offset, Ask) of
        {ok, Sent} ->
            ok = sluice_stats:sent(Stats, Sent),
            case next(Want, Ask, Sent) of
                done -> ok;
                short -> failed(eof, Piece, S);
                Want2 -> kernel(Fd, Offset + Sent, Want2, Piece, S)
            end;
        {error, Reason} ->
            {error, Reason}
    end.

%% A transport without sendfile/4: a read at a time, sent as any reply.
reads(Fd, Offset, Want, Piece, S) ->
    Ask = ask(Want, ?READ),
    case file:pread(Fd, Offset, Ask) of
        {ok, Data} ->
            case sluice_conn_handler:send(Data, S) of
                ok ->
                    case next(Want, Ask, byte_size(Data)) of
                        done -> ok;
                        short -> failed(eof, Piece, S);
                        Want2 -> reads(Fd, Offset + byte_size(Data), Want2, Piece, S)
                    end;
                Error ->
                    Error
            end;
        eof when Want =:= rest ->
            ok;
        eof ->
            failed(eof, Piece, S);
        {error, Why} ->
            failed(Why, Piece, S)
    end.

ask(rest, Most) -> Most;
ask(Want, Most) -> min(Want, Most).

%% After Sent bytes of the Ask of a call: `done', `short' (the file ended
%% before what was asked for), or what is still wanted. Fewer than asked
%% means the file's end.
next(rest, Ask, Sent) when Sent < Ask -> done;
next(rest, _Ask, _Sent) -> rest;
next(Want, _Ask, Want) -> done;
next(_Want, Ask, Sent) when Sent < Ask -> short;
next(Want, _Ask, Sent) -> Want - Sent.

-spec failed(term(), tuple(), #s{}) -> no_return().
failed(Why, Piece, S) ->
    sluice_conn_close:crash(exit, {sendfile_failed, Why, Piece}, [], S).
