%% @doc Framing on whole chunks: turns the chunks a socket delivers into
%% frames, keeping the incomplete end between chunks.
%%
%% Framers (the `Spec' of new/1):
%% <ul>
%%  <li>`{length, Bytes}' or `{length, Bytes, Opts}': a `Bytes'-byte length
%%      (1, 2 or 4) then that many bytes. Opts: `endian' (`big', the
%%      default, or `little'), `includes_header' (`false' by default:
%%      whether the length counts its own header bytes), `max' (the largest
%%      frame accepted, default 1 MiB, never more than the header can
%%      say). A frame is the bytes after the header.</li>
%%  <li>`line' or `{line, Opts}': lines ended by `delimiter' (`lf', the
%%      default: `\n'; or `crlf': `\r\n'; with `crlf' a lone `\n' is part
%%      of the line). Opts: `max' (the longest line, without its delimiter,
%%      default 8192). A frame is the line without its delimiter.</li>
%%  <li>`{split, Fun}' or `{split, Fun, Opts}': `Fun(Buffer)' returns
%%      `{ok, Frame, Rest}' (Rest a suffix of Buffer, shorter than it;
%%      Frame any term), `more', `{more, Total}' (the frame needs at least
%%      Total bytes from the start of Buffer; `{more, undefined}' is
%%      `more'), or `{error, Reason}'. That is `erlang:decode_packet/3''s
%%      contract, so `fun(B) -> erlang:decode_packet(Type, B, []) end' is a
%%      valid Fun. Opts: `max' (the largest frame, default 1 MiB).</li>
%% </ul>
%% Opts is a map or a proplist (in Elixir, a keyword list: `{:line, max:
%% 1024}').
%%
%% decode/2 takes one chunk and returns every frame it completes, in order.
%% Frames are sub-binaries of the chunk (no copy per frame; the VM itself
%% puts a part of 64 bytes or less on the process heap, which is smaller
%% than a sub-binary), except a frame that spans chunks: its pieces are
%% kept as they arrive and joined once, when the last one comes, so a frame
%% split across N chunks costs its size once, not N times. Lines likewise:
%% a new chunk is searched, never the kept part of the line again. Where a
%% split fun returns `{more, Total}', it is not called again before Total
%% bytes are there; after a plain `more' it is called again on the whole
%% frame so far with each new chunk (a fun that can tell the frame's size
%% should say it).
%%
%% What is kept of a chunk (the start of an incomplete frame) is copied
%% when it would otherwise keep alive a binary more than twice its size
%% (keep/1): a few bytes at the end of a 256 KiB read are copied, a large
%% piece of a large frame is not. Small chunks of one frame are appended
%% to the piece kept before them (push/2), so a frame trickled a byte per
%% read costs its size, not a list cell and a binary per byte (about 48
%% bytes of heap for each byte held, before).
%%
%% Errors: a frame larger than `max' is `{frame_too_large, Size, Max}' as
%% soon as its size is known (a length header, a split fun's `{more,
%% Total}'), before its body is buffered; a line, or a split frame of
%% unknown size, is too long as soon as more than `max' bytes of it have
%% arrived (`{line_too_long, Size, Max}', `{frame_too_large, Size, Max}',
%% with Size what was seen). A split fun that raises is the error
%% `{split_raised, Class, Reason, Stacktrace}', one that returns what is
%% not one of its results (a Rest that is not a binary shorter than the
%% Buffer, say) `{bad_split_result, Fun, Value}' (a connection crashes
%% with either, as when a callback raises or returns what is not a
%% result). The error comes with the frames before the bad one; after an
%% error the state returns the same error for any chunk.
-module(sluice_frame).

-export([new/1, decode/2, encode/2, pending/1, keep/1, push/2, kept/1, rest/3]).

-export_type([spec/0, state/0, reason/0, split_fun/0]).

-type length_opts() :: #{endian => big | little, includes_header => boolean(),
                         max => non_neg_integer()}.
-type line_opts() :: #{delimiter => lf | crlf, max => non_neg_integer()}.
-type split_opts() :: #{max => non_neg_integer()}.
-type split_fun() :: fun((binary()) -> {ok, term(), binary()} | more
                                       | {more, non_neg_integer() | undefined}
                                       | {error, term()}).
-type spec() :: {length, 1 | 2 | 4} | {length, 1 | 2 | 4, length_opts() | proplists:proplist()}
              | line | {line, line_opts() | proplists:proplist()}
              | {split, split_fun()}
              | {split, split_fun(), split_opts() | proplists:proplist()}.
-type reason() :: {frame_too_large, non_neg_integer(), non_neg_integer()}
                | {line_too_long, non_neg_integer(), non_neg_integer()}
                | {bad_length, non_neg_integer()}
                | {bad_split_result, split_fun(), term()}
                | {split_raised, error | exit | throw, term(), list()}
                | term().

-record(frame, {mod :: sluice_frame_length | sluice_frame_line | sluice_frame_split,
                params :: term(),
                %% the framer's kept bytes, or {error, Reason} once failed
                partial = none :: term()}).
-opaque state() :: #frame{}.

-define(DEFAULT_MAX, 1048576).
%% push/2: a chunk under ?SMALL_PIECE bytes is appended to the newest
%% piece while that is under ?PIECE bytes.
-define(SMALL_PIECE, 1024).
-define(PIECE, 65536).
-define(DEFAULT_LINE_MAX, 8192).

%% @doc A framer's initial state, or why the spec is not valid:
%% `{bad_spec, Spec}', `{bad_option, Name, Value}' or `{unknown_option,
%% Name}'.
-spec new(spec()) -> {ok, state()} | {error, term()}.
new(Spec) ->
    case build(opts_map(Spec)) of
        {error, {bad_spec, _}} -> {error, {bad_spec, Spec}};
        Result -> Result
    end.

%% Options may come as a proplist too: an Elixir user writes `{:line, max:
%% 1024}', a keyword list. A list that is not one of pairs stays a list
%% (and a bad spec), an improper one too (lists:all/2 crashed on it, and
%% start_listener/2 with it).
opts_map({length, Bytes, Opts}) when is_list(Opts) -> {length, Bytes, to_map(Opts)};
opts_map({line, Opts}) when is_list(Opts) -> {line, to_map(Opts)};
opts_map({split, Fun, Opts}) when is_list(Opts) -> {split, Fun, to_map(Opts)};
opts_map(Spec) -> Spec.

to_map(Opts) ->
    case is_proper_list(Opts)
        andalso lists:all(fun(O) -> is_tuple(O) andalso tuple_size(O) =:= 2 end, Opts) of
        %% The first of a repeated key wins, as in proplists and keyword lists.
        true -> maps:from_list(lists:reverse(Opts));
        false -> Opts
    end.

is_proper_list(L) ->
    try length(L) of
        _ -> true
    catch error:badarg -> false
    end.

build({length, Bytes}) ->
    build({length, Bytes, #{}});
build({length, Bytes, Opts}) when (Bytes =:= 1 orelse Bytes =:= 2 orelse Bytes =:= 4),
                                is_map(Opts) ->
    maybe_new(sluice_frame_length, Opts,
              [{endian, big, fun(E) -> E =:= big orelse E =:= little end},
               {includes_header, false, fun is_boolean/1},
               {max, ?DEFAULT_MAX, fun is_size/1}],
              fun([Endian, Incl, Max]) ->
                      sluice_frame_length:params(Bytes, Endian, Incl, Max)
              end);
build(line) ->
    build({line, #{}});
build({line, Opts}) when is_map(Opts) ->
    maybe_new(sluice_frame_line, Opts,
              [{delimiter, lf, fun(D) -> D =:= lf orelse D =:= crlf end},
               {max, ?DEFAULT_LINE_MAX, fun is_size/1}],
              fun([Delim, Max]) -> sluice_frame_line:params(Delim, Max) end);
build({split, Fun}) ->
    build({split, Fun, #{}});
build({split, Fun, Opts}) when is_function(Fun, 1), is_map(Opts) ->
    maybe_new(sluice_frame_split, Opts, [{max, ?DEFAULT_MAX, fun is_size/1}],
              fun([Max]) -> sluice_frame_split:params(Fun, Max) end);
build(Spec) ->
    {error, {bad_spec, Spec}}.

is_size(N) -> is_integer(N) andalso N >= 0.

%% Checks Opts against [{Name, Default, IsValid}] and builds the params
%% from the values in that order.
maybe_new(Mod, Opts, Known, Params) ->
    case [K || K <- maps:keys(Opts), not lists:keymember(K, 1, Known)] of
        [K | _] ->
            {error, {unknown_option, K}};
        [] ->
            Values = [{K, maps:get(K, Opts, Default), Valid} || {K, Default, Valid} <- Known],
            case [{bad_option, K, V} || {K, V, Valid} <- Values, not Valid(V)] of
                [Bad | _] -> {error, Bad};
                [] -> {ok, #frame{mod = Mod, params = Params([V || {_, V, _} <- Values])}}
            end
    end.

%% @doc Decodes one chunk: the frames it completes (with what was kept
%% from earlier chunks), in order, and the state keeping its incomplete
%% end. On a bad frame: the error, the frames before it, and a state that
%% keeps failing.
-spec decode(binary(), state()) ->
          {ok, [term()], state()} | {error, reason(), [term()], state()}.
decode(_Chunk, St = #frame{partial = {error, Reason}}) ->
    {error, Reason, [], St};
decode(<<>>, St) ->
    {ok, [], St};
decode(Chunk, St = #frame{mod = Mod, params = P, partial = Partial}) ->
    case Mod:decode(Chunk, P, Partial) of
        {ok, Frames, Partial2} -> {ok, Frames, St#frame{partial = Partial2}};
        {error, Reason, Frames} -> {error, Reason, Frames, St#frame{partial = {error, Reason}}}
    end.

%% @doc A frame with its header (length framers) or its delimiter (line
%% framers). Raises `error({frame_too_large, Size, Max})' for a frame the
%% framer would refuse, `error({line_too_long, Size, Max})' and
%% `error(delimiter_in_line)' likewise for lines, `error(badarg)' for a
%% split framer (it has no encoding) or a bad spec.
-spec encode(iodata(), state() | spec()) -> iodata().
encode(Frame, #frame{mod = Mod, params = P}) when Mod =/= sluice_frame_split ->
    Mod:encode(Frame, P);
encode(Frame, Spec) when not is_record(Spec, frame) ->
    case new(Spec) of
        {ok, St} -> encode(Frame, St);
        {error, _} -> error(badarg, [Frame, Spec])
    end;
encode(Frame, St) ->
    error(badarg, [Frame, St]).

%% @doc The bytes kept from earlier chunks, waiting for the rest of their
%% frame (0 after an error).
-spec pending(state()) -> non_neg_integer().
pending(#frame{partial = {error, _}}) -> 0;
pending(#frame{mod = Mod, partial = Partial}) -> Mod:pending(Partial).

%% @doc The bytes kept from earlier chunks, as the client sent them (a
%% frame begun: its header too), for a connection handed to another
%% process (sluice_conn_handoff); `<<>>' after an error.
-spec kept(state()) -> binary().
kept(#frame{partial = {error, _}}) -> <<>>;
kept(#frame{mod = Mod, params = P, partial = Partial}) -> iolist_to_binary(Mod:kept(Partial, P)).

%% @doc The bytes of `Chunk' that follow `Frames', the first frames that
%% decode/2 made of it from state `St' (the state before `Chunk'), as the
%% client sent them: what a connection handed to another process in the
%% middle of a read had not handled (frames after those, a frame begun,
%% bytes the framer refused). Made again from the frames' sizes, or for
%% a split function by calling it again: no framer counts its bytes on
%% every read for the sake of a hand-off.
-spec rest([term()], state(), binary()) -> binary().
rest(Frames, St = #frame{mod = Mod, params = P}, Chunk) ->
    Mod:skip(Frames, <<(kept(St))/binary, Chunk/binary>>, P).

%% @doc What a framer keeps of a chunk between decodes: `Bin' itself when
%% it is at least half of the binary it belongs to, else a copy of it, so
%% that a few bytes kept from a large read do not keep the read alive.
-spec keep(binary()) -> binary().
keep(Bin) ->
    case byte_size(Bin) * 2 < binary:referenced_byte_size(Bin) of
        true -> binary:copy(Bin);
        false -> Bin
    end.

%% @private For the framers: their kept pieces of an incomplete frame
%% (newest first) with `Chunk' after them. A small chunk is appended to
%% the newest piece while that is small: a client that trickles a frame
%% a few bytes per read would otherwise make the connection hold a list
%% cell and a binary (40 to 50 bytes of heap) for each read, tens of times
%% the frame's `max' when every read is a byte (the VM appends in place,
%% so each byte is copied about once). Larger chunks are kept as they are
%% (keep/1), so a large frame's pieces are not copied before they are
%% joined.
-spec push(binary(), [binary()]) -> [binary(), ...].
push(Chunk, [Newest | Older]) when byte_size(Chunk) < ?SMALL_PIECE,
                                   byte_size(Newest) < ?PIECE ->
    [<<Newest/binary, Chunk/binary>> | Older];
push(Chunk, Pieces) ->
    [keep(Chunk) | Pieces].
