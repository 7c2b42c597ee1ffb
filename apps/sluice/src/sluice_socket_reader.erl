%% @doc The reader behind sluice_socket's active modes: one process per
%% socket that reads with `socket:recv(S, 0, nowait)' and sends the chunks
%% to the owner as gen_tcp's messages. It exists because the NIF sends its
%% `select' message to the process that called recv, and a user's owner
%% process cannot be asked to handle it. The cost is a process per socket
%% and a hop per chunk; sluice listeners avoid both (sluice_transport_socket).
%%
%% Flow control is gen_tcp's: `once' stops after one chunk, `N' after N
%% chunks with `{tcp_passive, S}', `false' reads nothing, `true' reads
%% whatever comes (the owner's mailbox is then the only limit).
%% @private
-module(sluice_socket_reader).

-export([start/4, set/3, active/1, hold/1, owner/2, stop/1]).
-export([init/5]).

-record(r, {sock :: {sluice_socket, socket:socket()},
            s :: socket:socket(),
            owner :: pid(),
            mref :: reference(),
            mode :: binary | list,
            active :: false | once | true | integer(),
            held = none :: none | {held, false | once | true | integer()},
            select = undefined :: undefined | socket:select_info(),
            closed = false :: boolean()}).

-type active() :: false | once | true | integer().

%% @doc A reader for `Sock', delivering to `Owner'.
-spec start({sluice_socket, socket:socket()}, pid(), binary | list, active()) -> pid().
start(Sock, Owner, Mode, Active) ->
    proc_lib:spawn(?MODULE, init, [Sock, Owner, Mode, Active, self()]).

%% @doc New mode and active setting (synchronous); `{active, N}' adds to
%% the count in progress; `keep' leaves it as it is.
-spec set(pid(), binary | list, active() | keep) -> ok.
set(Reader, Mode, Active) -> call(Reader, {set, Mode, Active}).

-spec active(pid()) -> active().
active(Reader) -> call(Reader, active).

%% @doc Stop delivering until owner/2 (for controlling_process).
-spec hold(pid()) -> ok.
hold(Reader) -> call(Reader, hold).

-spec owner(pid(), pid()) -> ok.
owner(Reader, Pid) -> call(Reader, {owner, Pid}).

-spec stop(pid()) -> ok.
stop(Reader) -> _ = call(Reader, stop), ok.

call(Reader, Req) ->
    MRef = erlang:monitor(process, Reader),
    Reader ! {?MODULE, {self(), MRef}, Req},
    receive
        {MRef, Reply} -> erlang:demonitor(MRef, [flush]), Reply;
        {'DOWN', MRef, process, _, _} when Req =:= stop -> ok;
        {'DOWN', MRef, process, _, _} when Req =:= active -> false;
        {'DOWN', MRef, process, _, Reason} -> exit({sluice_socket_reader, Reason})
    end.

-spec init({sluice_socket, socket:socket()}, pid(), binary | list, active(), pid()) -> no_return().
init({sluice_socket, S} = Sock, Owner, Mode, Active, _Starter) ->
    loop(#r{sock = Sock, s = S, owner = Owner, mref = erlang:monitor(process, Owner),
            mode = Mode, active = Active}).

%% Control messages first, then a read if one is due.
loop(R) ->
    receive
        Msg -> loop(handle(Msg, R))
    after 0 ->
            case wants_data(R) of
                true -> loop(read(R));
                false -> wait(R)
            end
    end.

wait(R) ->
    receive Msg -> loop(handle(Msg, R)) end.

wants_data(#r{closed = true}) -> false;
wants_data(#r{select = undefined, active = A}) -> A =/= false;
wants_data(_) -> false.

read(R = #r{s = S, sock = Sock, owner = Owner}) ->
    case socket:recv(S, 0, nowait) of
        {ok, Data} ->
            Owner ! {tcp, Sock, as(R#r.mode, Data)},
            delivered(R);
        {select, SelectInfo} ->
            R#r{select = SelectInfo};
        {error, closed} ->
            Owner ! {tcp_closed, Sock},
            R#r{closed = true};
        {error, Reason} ->
            Owner ! {tcp_error, Sock, Reason},
            Owner ! {tcp_closed, Sock},
            R#r{closed = true}
    end.

delivered(R = #r{active = once}) -> R#r{active = false};
delivered(R = #r{active = 1, sock = Sock, owner = Owner}) ->
    Owner ! {tcp_passive, Sock},
    R#r{active = false};
delivered(R = #r{active = N}) when is_integer(N) -> R#r{active = N - 1};
delivered(R) -> R.

as(binary, Data) -> Data;
as(list, Data) -> binary_to_list(Data).

handle({'$socket', S, select, Ref}, R = #r{s = S, select = {select_info, _, Ref}}) ->
    R#r{select = undefined};
handle({'$socket', S, abort, {Ref, Reason}}, R = #r{s = S, select = {select_info, _, Ref}}) ->
    R#r{select = undefined, closed = Reason =:= closed};
handle({'$socket', _, _, _}, R) ->
    %% left over from a cancelled read
    R;
handle({?MODULE, From, {set, Mode, Active}}, R) ->
    R2 = R#r{mode = Mode},
    R3 = case {Active, R2#r.held} of
             {keep, _} -> R2;
             {_, none} -> activate(Active, R2);
             {_, {held, Old}} -> R2#r{held = {held, add(Old, Active)}}
         end,
    ok = reply(From, ok),
    R3;
handle({?MODULE, From, active}, R = #r{held = Held, active = A}) ->
    ok = reply(From, case Held of {held, H} -> H; none -> A end),
    R;
handle({?MODULE, From, hold}, R = #r{held = none, active = A}) ->
    ok = reply(From, ok),
    (cancel(R))#r{held = {held, A}, active = false};
handle({?MODULE, From, hold}, R) ->
    ok = reply(From, ok),
    R;
handle({?MODULE, From, {owner, Pid}}, R = #r{mref = MRef, held = Held}) ->
    erlang:demonitor(MRef, [flush]),
    R2 = R#r{owner = Pid, mref = erlang:monitor(process, Pid), held = none},
    ok = reply(From, ok),
    case Held of
        {held, A} -> R2#r{active = A};
        none -> R2
    end;
handle({?MODULE, From, stop}, R) ->
    _ = cancel(R),
    ok = reply(From, ok),
    exit(normal);
handle({'DOWN', MRef, process, _, _}, #r{mref = MRef}) ->
    %% The owner is gone and the socket closed with it.
    exit(normal);
handle(_, R) ->
    R.

%% gen_tcp: {active, N} adds to a count in progress; at 0 or below the
%% socket goes passive with {tcp_passive, S}.
activate(Active, R = #r{active = Old, sock = Sock, owner = Owner}) ->
    case add(Old, Active) of
        N when is_integer(N), N =< 0 ->
            Owner ! {tcp_passive, Sock},
            (cancel(R))#r{active = false};
        false ->
            (cancel(R))#r{active = false};
        New ->
            R#r{active = New}
    end.

add(Old, N) when is_integer(Old), is_integer(N) -> min(Old + N, 32767);
add(_, A) -> A.

cancel(R = #r{select = undefined}) -> R;
cancel(R = #r{s = S, select = SI}) ->
    _ = socket:cancel(S, SI),
    R#r{select = undefined}.

reply({Pid, Tag}, Reply) ->
    Pid ! {Tag, Reply},
    ok.
