%% A subset of Redis's protocol (RESP2) on sluice, as an example of a real
%% request/response protocol framed with `{split, Fun}':
%%
%% <ul>
%%  <li>requests are arrays of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n')
%%      or inline lines (`PING\r\n', words split on spaces);</li>
%%  <li>replies are simple strings, errors, integers, bulk strings and the
%%      null bulk string;</li>
%%  <li>commands: PING [Msg], ECHO Msg, GET K, SET K V, DEL K..., INCR K,
%%      QUIT; the keys live in the connection's state.</li>
%% </ul>
%%
%% A malformed request is answered as Redis answers it (`-ERR Protocol
%% error: ...', then the connection is closed): split/1 returns it as a
%% frame, `{bad, Why}', so that the handler can reply before it closes (a
%% split fun's `{error, Reason}' closes without a word to the client).
%% Its own limits (Redis's: 512 MB for a bulk string) are checked before
%% the framing's `max'; a request over `max' is closed by the framer, also
%% without a word.
%%
%% What the handler keeps of a frame (SET's key and value) is copied
%% (binary:copy/1): a frame is a part of the read it came in, and a short
%% value kept as it is would keep the whole read alive. Handler option
%% `copy => false' keeps them as they are (for the suite that measures it);
%% `test_pid => Pid' is told of handle_error/2 and terminate/2.
-module(sluice_resp_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_error/2, terminate/2]).
-export([split/1, framing/1, encode/1]).

%% Redis's own limits: an inline request or a header line without its
%% CRLF (PROTO_INLINE_MAX_SIZE), a bulk string (proto-max-bulk-len), the
%% arguments of one request.
-define(MAX_INLINE, 65536).
-define(MAX_BULK, 536870912).
-define(MAX_ARGS, 1048576).
%% A `*N' or `$N' header: the sign and 20 digits are plenty.
-define(MAX_HEADER, 32).

%% @doc The listener's `framing' for requests of up to Max bytes.
-spec framing(non_neg_integer()) -> sluice_frame:spec().
framing(Max) ->
    {split, fun ?MODULE:split/1, #{max => Max}}.

%% @doc One request from the front of Buf: `{ok, {command, Args}, Rest}'
%% (Args the bulk strings, or an inline request's words), `{ok, {bad,
%% Why}, Rest}' for what cannot be a request, or how much more is needed.
-spec split(binary()) -> {ok, {command, [binary()]} | {bad, binary()}, binary()}
                         | more | {more, pos_integer()}.
split(<<$*, _/binary>> = B) -> array(B);
split(B) -> inline(B).

array(B) ->
    case header(B, 1) of
        {ok, N, Pos} when N =< 0 -> {ok, {command, []}, rest(B, Pos)};
        {ok, N, _Pos} when N > ?MAX_ARGS -> bad(B, <<"invalid multibulk length">>);
        {ok, N, Pos} -> args(B, Pos, N, []);
        {error, _} -> bad(B, <<"invalid multibulk length">>);
        More -> More
    end.

%% N bulk strings from Pos on. Once a bulk string's length is known, the
%% framer is told how far the request goes at least (`{more, Total}'), so
%% that an 8 MB value is not parsed again at every read.
args(B, Pos, 0, Acc) ->
    {ok, {command, lists:reverse(Acc)}, rest(B, Pos)};
args(B, Pos, N, Acc) ->
    case B of
        <<_:Pos/binary>> ->
            more;
        <<_:Pos/binary, $$, _/binary>> ->
            case header(B, Pos + 1) of
                {ok, Len, _} when Len < 0; Len > ?MAX_BULK -> bad(B, <<"invalid bulk length">>);
                {ok, Len, Start} -> bulk(B, Start, Len, N, Acc);
                {error, _} -> bad(B, <<"invalid bulk length">>);
                More -> More
            end;
        <<_:Pos/binary, C, _/binary>> ->
            bad(B, iolist_to_binary(io_lib:format("expected '$', got '~c'", [C])))
    end.

bulk(B, Start, Len, N, Acc) ->
    End = Start + Len,
    case B of
        <<_:Start/binary, Arg:Len/binary, "\r\n", _/binary>> -> args(B, End + 2, N - 1, [Arg | Acc]);
        _ when byte_size(B) >= End + 2 -> bad(B, <<"bulk string not followed by CRLF">>);
        _ -> {more, End + 2}
    end.

%% The integer of a `*N\r\n' or `$N\r\n' line whose digits start at From,
%% and where the line after it starts.
header(B, From) ->
    Size = byte_size(B) - From,
    case binary:match(B, <<"\r\n">>, [{scope, {From, min(Size, ?MAX_HEADER)}}]) of
        {At, 2} ->
            try binary_to_integer(binary:part(B, From, At - From)) of
                N -> {ok, N, At + 2}
            catch error:badarg -> {error, not_an_integer}
            end;
        nomatch when Size >= ?MAX_HEADER -> {error, too_long};
        nomatch -> more
    end.

inline(B) ->
    case binary:match(B, <<"\n">>) of
        {At, 1} ->
            Line = binary:part(B, 0, At),
            Words = binary:split(Line, [<<" ">>, <<"\t">>, <<"\r">>], [global, trim_all]),
            {ok, {command, Words}, rest(B, At + 1)};
        nomatch when byte_size(B) > ?MAX_INLINE -> bad(B, <<"too big inline request">>);
        nomatch -> more
    end.

rest(B, Pos) ->
    binary:part(B, Pos, byte_size(B) - Pos).

%% A frame that says what is wrong. Its Rest is the buffer but its first
%% byte, so that it counts as one byte against the framing's `max' (with
%% `<<>>' the whole rest of a read would count, and a pipeline's last
%% bytes could be refused as too large before the handler can answer);
%% nothing after it is handled, since the handler closes.
bad(B, Why) ->
    {ok, {bad, Why}, binary:part(B, 1, byte_size(B) - 1)}.

%%% The handler -----------------------------------------------------------

init(_Conn, Opts) ->
    {ok, #{db => #{}, copy => maps:get(copy, Opts, true),
           test_pid => maps:get(test_pid, Opts, undefined)}}.

handle_error(Reason, S) -> notify(S, {handle_error, Reason}).

terminate(Reason, S) -> notify(S, {terminate, Reason}).

notify(#{test_pid := Pid}, Msg) when is_pid(Pid) -> Pid ! {?MODULE, self(), Msg}, ok;
notify(_S, _Msg) -> ok.

handle_data({command, []}, S) ->
    {ok, S};
handle_data({command, [Name | Args]}, S) ->
    command(string:uppercase(Name), Args, S);
handle_data({bad, Why}, S) ->
    {reply_close, encode({error, <<"ERR Protocol error: ", Why/binary>>}),
     {protocol_error, Why}, S}.

command(<<"PING">>, [], S) -> {reply, encode({simple, <<"PONG">>}), S};
command(<<"PING">>, [Msg], S) -> {reply, encode(Msg), S};
command(<<"ECHO">>, [Msg], S) -> {reply, encode(Msg), S};
command(<<"GET">>, [K], S = #{db := Db}) -> {reply, encode(maps:get(K, Db, null)), S};
command(<<"SET">>, [K, V], S = #{db := Db}) ->
    {reply, encode({simple, <<"OK">>}), S#{db := Db#{keep(K, S) => keep(V, S)}}};
command(<<"DEL">>, Ks = [_ | _], S = #{db := Db}) ->
    {reply, encode(length([K || K <- Ks, is_map_key(K, Db)])), S#{db := maps:without(Ks, Db)}};
command(<<"INCR">>, [K], S = #{db := Db}) ->
    try binary_to_integer(maps:get(K, Db, <<"0">>)) of
        N -> {reply, encode(N + 1), S#{db := Db#{keep(K, S) => integer_to_binary(N + 1)}}}
    catch error:badarg ->
            {reply, encode({error, <<"ERR value is not an integer or out of range">>}), S}
    end;
command(<<"QUIT">>, [], S) -> {reply_close, encode({simple, <<"OK">>}), normal, S};
command(Name, _Args, S) when Name =:= <<"PING">>; Name =:= <<"ECHO">>; Name =:= <<"GET">>;
                             Name =:= <<"SET">>; Name =:= <<"DEL">>; Name =:= <<"INCR">>;
                             Name =:= <<"QUIT">> ->
    {reply, encode({error, [<<"ERR wrong number of arguments for '">>,
                            string:lowercase(Name), <<"' command">>]}), S};
command(Name, _Args, S) ->
    {reply, encode({error, [<<"ERR unknown command '">>, Name, <<"'">>]}), S}.

%% A frame is a part of the read it came in (or of the joined pieces of
%% a request that spanned reads): what outlives the request is copied.
keep(Bin, #{copy := true}) -> binary:copy(Bin);
keep(Bin, #{copy := false}) -> Bin.

%% @doc A RESP2 reply.
-spec encode({simple, iodata()} | {error, iodata()} | integer() | binary() | null) -> iodata().
encode({simple, S}) -> [$+, S, <<"\r\n">>];
encode({error, E}) -> [$-, E, <<"\r\n">>];
encode(N) when is_integer(N) -> [$:, integer_to_binary(N), <<"\r\n">>];
encode(null) -> <<"$-1\r\n">>;
encode(B) when is_binary(B) -> [$$, integer_to_binary(byte_size(B)), <<"\r\n">>, B, <<"\r\n">>].
