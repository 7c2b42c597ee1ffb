%% Slots of a listener's shared counters (`counters`, write_concurrency) and
%% atomics. Kept in one header so acceptors, connection processes and
%% sluice:info/1 agree on them without a function call on the hot path.

%% counters: monotonic event counts.
-define(C_ACCEPTED, 1).
-define(C_REJECTED, 2).
-define(C_CLOSED, 3).
-define(C_PROTOCOL_ERRORS, 4).
-define(C_BYTES_IN, 5).
-define(C_BYTES_OUT, 6).
-define(C_ACCEPT_ERRORS, 7).
%% Why connections ended (protocol errors are C_PROTOCOL_ERRORS above). Each
%% is bumped once per connection, never per message.
-define(C_CLOSE_PEER, 8).          %% the client closed
-define(C_CLOSE_IDLE, 9).          %% idle_timeout
-define(C_CLOSE_FRAME_TIMEOUT, 10). %% a partial message did not complete in time
-define(C_CLOSE_ERROR, 11).        %% socket error (econnreset, ...)
-define(C_CLOSE_DRAINED, 12).      %% drain / stop
-define(C_CLOSE_HANDLER, 13).      %% any other reason a handler closed with
-define(C_CLOSE_CRASHED, 14).      %% the connection process died abnormally
-define(C_MESSAGES, 15).         %% chunks handed to handle_data/2
-define(C_SIZE, 15).

%% atomics: live state.
-define(A_CONNS, 1).        %% live connections of the whole listener
-define(A_MAX_CONNS, 2).    %% current max_connections (set_max_connections/2)
-define(A_LAST_LOG, 3).     %% monotonic ms of the last accept-error log line
-define(A_SUPPRESSED, 4).   %% accept errors not logged since that line
-define(A_SHEDDING, 5).     %% 1 while an acceptor sheds the backlog (emfile)
-define(A_SUP_BASE, 5).     %% A_SUP_BASE + I: live connections of conns_sup I
%% A_SUP_BASE + NS + I (NS: the listener's num_conns_sups): how many of
%% those are parked (sluice_conns_sup), i.e. have no process.
