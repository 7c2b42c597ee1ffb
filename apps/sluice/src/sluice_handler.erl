%% @doc The behaviour a protocol implements. The library owns the socket and
%% the receive loop (active modes, flow control, idle timeout, counting,
%% draining); a handler only turns bytes into replies. Buffering of partial
%% messages belongs to the handler.
%%
%% Return values of the data and info callbacks:
%% <ul>
%%  <li>`{ok, State}': nothing to send;</li>
%%  <li>`{reply, IoData, State}': send IoData (asynchronously, in order);</li>
%%  <li>`{close, Reason, State}': close the connection; a Reason of
%%      `{protocol_error, Why}' is counted in the listener's
%%      `protocol_errors'.</li>
%%  <li>`{reply_close, IoData, Reason, State}': send IoData, then close
%%      without a reset (FIN after the data; what the peer still sends is
%%      read and dropped for a moment) and without handing the handler
%%      anything more: e.g. the acks owed for the frames before a bad one.
%%      Counted like `close'.</li>
%% </ul>
%% Close reasons the library counts by name in info/1's `close_reasons':
%% `{protocol_error, _}', `frame_timeout' (a partial message that took too
%% long), `idle_timeout', `drained'; any other counts as `handler'.
-module(sluice_handler).

-type result(State) :: {ok, State}
                     | {reply, iodata(), State}
                     | {close, term(), State}
                     | {reply_close, iodata(), term(), State}.
-export_type([result/1]).

-callback init(sluice:conn(), Opts :: term()) ->
    {ok, State :: term()} | {close, Reason :: term()}.
-callback handle_data(binary(), State) -> result(State).
%% Any message that is not the socket's, e.g. from other processes.
-callback handle_info(term(), State) -> result(State).
%% The listener is draining (sluice:stop_listener/2). `{close, Reason, State}'
%% (what happens when the callback is absent) makes the library finish
%% what it has read, send a FIN and wait for the peer to close up to the
%% drain deadline; `{ok, State}' keeps the connection going until the
%% handler closes it or the deadline passes.
-callback handle_drain(State) -> result(State).
-callback terminate(Reason :: term(), State :: term()) -> any().

-optional_callbacks([handle_info/2, handle_drain/1, terminate/2]).
