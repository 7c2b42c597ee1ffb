%% @doc The transport behaviour: what a listener and a connection process need
%% from a socket layer: `sluice_transport_inet' (gen_tcp, the inet driver)
%% and `sluice_transport_socket' (OTP's `socket' NIF); every call the
%% library makes on a socket goes through one. Both deliver data to the
%% connection process as the inet driver's messages (`{tcp, S, Data}',
%% `tcp_passive', `tcp_closed', `tcp_error'); the socket backend also sends
%% `{'$socket', S, select, _}', on which the connection calls activate/2.
-module(sluice_transport).

-export([module/1]).

-type socket() :: term().
-type listen_opts() :: #{ip := inet:ip_address(), backlog := pos_integer(),
                         reuseport := boolean(), socket_opts := list()}.
-export_type([socket/0, listen_opts/0]).

-callback listen(inet:port_number(), listen_opts()) -> {ok, socket()} | {error, term()}.
-callback accept(socket(), timeout()) -> {ok, socket()} | {error, term()}.
-callback port(socket()) -> {ok, inet:port_number()} | {error, term()}.
-callback controlling_process(socket(), pid()) -> ok | {error, term()}.
%% Arm delivery for the connection process: `false' starts one asynchronous
%% read, the others set the socket's active mode (an integer adds to the
%% count in progress, as inet:setopts/2 does). `ready' comes only from the
%% socket backend's own wake-up message ({'$socket', S, select, _}).
-callback activate(socket(), false | once | true | pos_integer() | ready) -> ok | {error, term()}.
%% Queue data for sending without waiting for the driver's answer; the answer
%% arrives later as a message the connection process recognises.
-callback send_async(socket(), iodata()) -> ok | {error, term()}.
-callback send(socket(), iodata()) -> ok | {error, term()}.
-callback setopts(socket(), list()) -> ok | {error, term()}.
-callback peername(socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
-callback sockname(socket()) -> {ok, {inet:ip_address(), inet:port_number()}} | {error, term()}.
-callback shutdown(socket(), read | write | read_write) -> ok | {error, term()}.
-callback close(socket()) -> ok.
%% Optional: arm a socket that its owner (a conns_sup) holds for a parked
%% connection: the owner is told of the next event (data, close, error)
%% and nothing more, and the socket holds as little memory as it can
%% meanwhile. A transport without it has its quiet connections hibernate.
-callback park(socket()) -> ok | {error, term()}.
%% Optional, with park/1: make Pid the owner of a socket that is passive
%% and has nothing on its way to the current owner (cheaper than
%% controlling_process/2, which cannot assume either).
-callback handover(socket(), pid()) -> ok | {error, term()}.
-optional_callbacks([park/1, handover/2]).

%% @doc The callback module for a transport name.
-spec module(inet | socket) -> module().
module(inet) -> sluice_transport_inet;
module(socket) -> sluice_transport_socket.

