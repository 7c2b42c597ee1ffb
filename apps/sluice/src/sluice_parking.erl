%% @doc A connection supervisor's parked connections.
%%
%% A connection quiet for `park_after' whose listener allows it hands its
%% socket, handler state and transport state to its connection supervisor
%% and exits (sluice_conn); the socket is armed to tell the supervisor of
%% its next event (data, the peer's close, an error), on which a new
%% connection process takes the state over. An idle connection then costs
%% its socket and a row in this table instead of a process.
%%
%% The sockets are not linked to the supervisor (a link per socket costs
%% memory on every parked connection): if the supervisor dies, the table
%% passes to sluice_registry (its heir), which closes them.
%% @private
-module(sluice_parking).

-export([parkable/1, new/1, put/5, take/2, sockets/1, expired/2, size/1, change_states/2,
         close_orphans/2]).

-export_type([table/0]).

-opaque table() :: ets:tid().

%% @doc Whether a listener's quiet connections park. All of: `park_after'
%% is set, the transport can hold a socket armed for its owner (inet), the
%% active mode is not `false' (its pending read belongs to the connection
%% process), and the handler has neither handle_info/2 nor handle_call/3:
%% a handler that expects messages, or calls (sluice:call/3), is reached at
%% its pid, which parking changes; and a call it answers later holds a
%% monitor on the process, whose end the caller would take for the
%% connection's (it exits, though the handler may still answer).
-spec parkable(sluice_listener_sup:listener()) -> boolean().
parkable(#{transport := T, opts := #{park_after := ParkAfter, active := Active,
                                     handler := {H, _}}}) ->
    %% function_exported/3 is false for a module not loaded yet.
    _ = code:ensure_loaded(T),
    _ = code:ensure_loaded(H),
    ParkAfter =/= infinity
        andalso Active =/= false
        andalso erlang:function_exported(T, park, 1)
        andalso not erlang:function_exported(H, handle_info, 2)
        andalso not erlang:function_exported(H, handle_call, 3).

%% @doc A table for a connection supervisor of a listener on transport `T'.
-spec new(module()) -> table().
new(T) ->
    ets:new(sluice_parked, [set, private,
                            {heir, whereis(sluice_registry), {sluice_parked, T}}]).

%% @doc Hold a parked connection: its socket, when it last received a byte,
%% its handler state and its transport state.
-spec put(table(), sluice_transport:socket(), integer(), term(), sluice_transport:tstate()) -> ok.
put(Tab, Sock, IdleSince, HState, TS) ->
    true = ets:insert(Tab, {Sock, IdleSince, HState, TS}),
    ok.

%% @doc Take a parked connection out of the table, if it is there.
-spec take(table(), sluice_transport:socket()) ->
          {ok, integer(), term(), sluice_transport:tstate()} | error.
take(Tab, Sock) ->
    case ets:take(Tab, Sock) of
        [{Sock, IdleSince, HState, TS}] -> {ok, IdleSince, HState, TS};
        [] -> error
    end.

-spec sockets(table()) -> [sluice_transport:socket()].
sockets(Tab) ->
    ets:select(Tab, [{{'$1', '_', '_', '_'}, [], ['$1']}]).

%% @doc The sockets of connections that have received nothing since
%% `Cutoff' (monotonic ms).
-spec expired(table(), integer()) -> [sluice_transport:socket()].
expired(Tab, Cutoff) ->
    ets:select(Tab, [{{'$1', '$2', '_', '_'}, [{'=<', '$2', Cutoff}], ['$1']}]).

%% @doc Every parked connection's state through `Fun' (a code change of
%% its handler): all replaced if `Fun' gives `{ok, New}' for each, none if
%% it gives anything else for one, which is returned.
-spec change_states(table(), fun((term()) -> {ok, term()} | term())) -> ok | term().
change_states(Tab, Fun) ->
    change_states(ets:tab2list(Tab), Fun, [], Tab).

change_states([], _Fun, Changed, Tab) ->
    true = ets:insert(Tab, Changed),
    ok;
change_states([{Sock, IdleSince, HState, TS} | Rest], Fun, Changed, Tab) ->
    case Fun(HState) of
        {ok, HState2} -> change_states(Rest, Fun, [{Sock, IdleSince, HState2, TS} | Changed], Tab);
        Error -> Error
    end.

-spec size(table()) -> non_neg_integer().
size(Tab) ->
    ets:info(Tab, size).

%% @doc Close the sockets of a table whose supervisor died (its heir calls
%% this), and drop the table.
-spec close_orphans(ets:tid(), module()) -> ok.
close_orphans(Tab, T) ->
    _ = [T:close_socket(Sock) || Sock <- sockets(Tab)],
    true = ets:delete(Tab),
    ok.
