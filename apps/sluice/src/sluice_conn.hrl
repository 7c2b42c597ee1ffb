%% The state of a connection process, shared by sluice_conn (the loop),
%% sluice_conn_handler (the calls into the handler), sluice_conn_close
%% (the ways a connection ends), sluice_conn_starttls (an upgrade to
%% TLS), sluice_conn_handoff (a hand-off to another process),
%% sluice_conn_halfclose (a handler's half-close) and sluice_conn_timeout
%% (a persistent result timeout). Private to those modules (a test,
%% sluice_pressure_SUITE, reads `#s.grant' from its trace of them).

-record(s, {t :: module(),
            ts :: sluice_transport:tstate() | undefined,
            handler :: module(),
            %% the calls made on every read, as funs of `t' and `handler':
            %% a call through a fun goes straight to the function, where
            %% Module:F(...) looks the function up in the export table
            classify :: fun((term(), sluice_transport:tstate()) -> sluice_transport:classified()),
            send :: fun((sluice_transport:tstate(), iodata()) -> ok | {error, term()}),
            activate :: fun((sluice_transport:tstate(), sluice_transport:mode()) ->
                                   {ok, sluice_transport:tstate()} | {error, term()}),
            handle_data :: fun((binary(), term()) -> sluice_handler:result(term())),
            %% the transport's sent_ack/1 for this socket, `{Tag, Id}'
            %% for the message `{Tag, Id, ok}' (a reference nobody has as
            %% the Tag where the transport has none): dropped by the
            %% loop's receive itself, one message per reply (unset in a
            %% template)
            sent_ack :: {term(), term()} | undefined,
            %% the transport's data_tag/1 under a grant, `{Tag, Id}' for a
            %% chunk `{Tag, Id, Data}' the loop's receive hands to the
            %% handler without classify/2 (a reference nobody has as the
            %% Tag in the modes `once' and `false', or where the transport
            %% has none; unset in a template)
            data_tag :: {term(), term()} | undefined,
            hstate :: term(),
            active :: sluice_transport:mode() | adaptive,
            %% active=N or adaptive: the grant the credit is topped up to
            %% (N; for adaptive it moves between grant_min and grant_max),
            %% and the chunks granted to the transport and not yet handled
            grant = 0 :: non_neg_integer(),
            grant_min = 0 :: non_neg_integer(),
            grant_max = 0 :: non_neg_integer(),
            credit = 0 :: non_neg_integer(),
            %% the transport ran out of grant since the last top-up
            exhausted = false :: boolean(),
            %% a read this much smaller than a full buffer is a small one
            small_read = 0 :: non_neg_integer(),
            %% a list reply longer than this goes out in slices
            %% (the transport's send_slice/0)
            send_slice = infinity :: pos_integer() | infinity,
            %% bytes read since the last collection, and the listener's
            %% gc_after_bytes: when to collect (sluice_conn:collect/0)
            uncollected = 0 :: non_neg_integer(),
            gc_after_bytes = infinity :: pos_integer() | infinity,
            stats :: sluice_stats:stats(),
            %% unset in a template (sluice_conn:template/2)
            parent :: pid() | undefined,
            %% the parent's table for wake reports (sluice_sweep:report_woke/1)
            woke :: sluice_sweep:woke_table(),
            listener :: sluice:name(),
            %% telemetry's start time of this connection
            started = 0 :: integer(),
            %% the listener's framing: whole frames to handle_data/2
            frame = none :: none | sluice_frame:state(),
            %% the timer of the last result's Timeout, if any; a
            %% persistent Timeout's state (sluice_conn_timeout) from the
            %% result that sets one until one clears it
            timer = undefined :: undefined | reference() | sluice_conn_timeout:persistent(),
            %% the message of that timer, `{timeout, Ref, TimerTag}': a
            %% reference of the listener's, which no message of a
            %% handler's own has (sluice_conn:control/2)
            timer_tag :: reference(),
            %% draining with a handler that carries on (handle_drain/1's
            %% `{ok, _}'): the timer of the drain's deadline, and that
            %% deadline (monotonic ms); kept apart from `timer', which is
            %% the handler's (sluice_conn:draining/2)
            drain = undefined :: undefined | {reference(), integer()},
            %% the optional callbacks the handler exports
            has :: #{atom() => boolean()}}).

%% A reason the handler closed with (a `close' or `reply_close' result,
%% init/2's `{close, Reason}'), as the outcomes below carry it: told apart
%% from the library's own reasons, which may look the same (`closed',
%% `{error, _}', `{shutdown, _}'), so that sluice_conn_close counts it
%% by the name the handler gave and calls none of handle_close/2 and
%% handle_error/2; terminate/2 and the telemetry stop event get Reason.
-define(BY_HANDLER(Reason), {'$sluice_by_handler', Reason}).

%% The error a reply gets on a connection whose handler shut its write
%% side down (sluice_conn_halfclose): `{error, ?AFTER_SHUTDOWN(Bytes)}'
%% from the send, which sluice_conn_close turns into the handler's crash
%% `{reply_after_shutdown, Bytes}'. No transport's error looks like it.
-define(AFTER_SHUTDOWN(Bytes), {'$sluice_after_shutdown', Bytes}).

%% What a call into the handler came to, for the caller to act on.
%% `stop_after': send Out, then close gracefully. `starttls': send Out (the
%% replies owed), then Reply in plaintext, then upgrade the connection to
%% TLS (sluice_conn_starttls); Pipelined: whether plaintext followed the
%% STARTTLS frame in the same read. `handoff': send Out (the replies owed),
%% then Reply, then hand the socket to To with Rest, the bytes read and
%% not handled (`kept': what the framer keeps, sluice_conn_handoff).
-type outcome() :: {continue, #s{}}
                 | {stop, term(), #s{}}
                 | {stop_after, sluice_handler:reply(), term(), #s{}}
                 | {starttls, sluice_handler:reply(), iodata(), boolean(), #s{}}
                 | {handoff, sluice_handler:reply(), sluice_handler:reply(), pid(),
                    binary() | kept, #s{}}.
