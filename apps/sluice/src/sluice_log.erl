%% @doc Log lines for faults that every client can cause at once (a
%% listener out of descriptors or full, a flood of failed TLS handshakes):
%% at most one line a second per listener and kind, with the number of
%% others since the last line. Every occurrence is still counted (info/1).
%% And the line of a handler that crashed (handler_crashed/6), for the
%% logs that drop OTP's crash reports, and its hint after a bad result
%% for the logs that keep them.
%% @private
-module(sluice_log).

-export([accept_failed/3, over_limit/2, refused/3, handler_crashed/6]).
%% the report_cbs of handler_crashed/6's reports
-export([format_crash/1, format_hint/1]).

-include_lib("kernel/include/logger.hrl").

-define(INTERVAL_MS, 1000).

%% @doc accept(2) failed on a listen socket.
-spec accept_failed(sluice:name(), sluice_stats:stats(), term()) -> ok.
accept_failed(Name, Stats, Reason) ->
    case due(Stats, accept) of
        {true, Others} ->
            ?LOG_WARNING("sluice listener ~p: accept failed: ~p "
                         "(~b more accept errors since the last report)",
                         [Name, Reason, Others]);
        false ->
            ok
    end.

%% @doc A connection over the listener's `max_connections' was closed
%% (after `max_connections_wait'): the operator's one sign in the log
%% that clients are turned away, as they are when descriptors run out.
-spec over_limit(sluice:name(), sluice_stats:stats()) -> ok.
over_limit(Name, Stats) ->
    case due(Stats, full) of
        {true, Others} ->
            ?LOG_WARNING("sluice listener ~p: connection closed: max_connections (~p) "
                         "reached (~b more since the last report)",
                         [Name, sluice_stats:max_connections(Stats), Others]);
        false ->
            ok
    end.

%% @doc A connection ended before its handler started: a failed or slow
%% TLS handshake, a missing or bad PROXY header.
-spec refused(sluice:name(), sluice_stats:stats(), term()) -> ok.
refused(Name, Stats, Reason) ->
    case due(Stats, refused) of
        {true, Others} ->
            ?LOG_NOTICE("sluice listener ~p: connection closed before its handler "
                        "started: ~0p (~b more since the last report)",
                        [Name, Reason, Others]);
        false ->
            ok
    end.

%% @doc A connection's handler raised (or returned what is not a result)
%% and its process is about to exit with the reason, which makes
%% proc_lib's crash report: domain `[otp, sasl]', which Elixir's Logger
%% drops unless `handle_sasl_reports: true', where a thousand_island
%% handler's crash (a GenServer's "terminating" report, domain `[otp]')
%% shows. So the crash is also logged here, under the domain `[sluice]',
%% which Logger keeps and OTP's default handler does not (its filters log
%% only `[otp, sasl]', its super-domains and events without a domain):
%% one report in either's log. Not rate-limited, as a crash report is
%% not: each may be a different bug. Nothing for the exits proc_lib does
%% not report either (`normal', `shutdown', `{shutdown, _}').
%%
%% The report's hint after another behaviour's result (result_hint/2)
%% would not reach the log that keeps the crash report: that log gets
%% the hint alone, in a line of its own (bad_result_hint/3).
-spec handler_crashed(sluice:name(), module(), {ok, term()} | {error, term()},
                      error | exit | throw, term(), list()) -> ok.
handler_crashed(_Name, _Handler, _Peer, exit, Reason, _Stack)
  when Reason =:= normal; Reason =:= shutdown;
       tuple_size(Reason) =:= 2, element(1, Reason) =:= shutdown ->
    ok;
handler_crashed(Name, Handler, Peer, Class, Reason, Stack) ->
    %% No `label' key: Elixir's translator skips a report with a label
    %% it does not know.
    ?LOG_ERROR(#{sluice => handler_crashed, listener => Name, handler => Handler,
                 peer => Peer, class => Class, reason => Reason, stacktrace => Stack},
               #{domain => [sluice], report_cb => fun ?MODULE:format_crash/1,
                 %% what Elixir's Logger sets for a crash (backends such
                 %% as error trackers read it)
                 crash_reason => crash_reason(Class, Reason, Stack)}),
    bad_result_hint(Name, Handler, Reason).

%% The hint goes where the crash report goes: domain `[otp, sasl]', the
%% crash report's, which OTP's default handler logs (an Erlang node's, a
%% release's log, which drops the `[sluice]' report) and Elixir's Logger
%% drops unless `handle_sasl_reports: true' (it shows the `[sluice]'
%% report, hint and all). So each default log has the hint once, beside
%% the crash it explains, and neither gets a second copy of the crash:
%% the line names the callback and says what to return, no more (the
%% reason, the stacktrace and the state are in the crash report). A log
%% that keeps both domains, as it has both reports of the crash, has the
%% hint twice. (No domain would have put it twice in Logger's default
%% log; which handlers a node has cannot be known, only the defaults'
%% filters.) Level `error', as the crash report's: a log that keeps only
%% errors keeps it. No `crash_reason': it is no second crash for an
%% error tracker to count. Only on a crash with a hint, never per read.
bad_result_hint(Name, Handler, {bad_return_value, {_H, Cb, Value}})
  when is_atom(Cb) ->
    case hint(Cb, Value) of
        none ->
            ok;
        _ ->
            ?LOG_ERROR(#{sluice => bad_result_hint, listener => Name, handler => Handler,
                         callback => Cb, result => Value},
                       #{domain => [otp, sasl], report_cb => fun ?MODULE:format_hint/1})
    end;
bad_result_hint(_Name, _Handler, _Reason) ->
    ok.

%% @doc handler_crashed/6's report as text: the exception in Elixir's
%% words where Elixir runs (its `Exception' loaded, as it is once
%% anything formatted one, the handler an Elixir module, or the reason
%% one of its exceptions), else in Erlang's. (The handler's name counts:
%% a fresh Elixir VM's first crash, a `:badarg' say, was in Erlang's.)
-spec format_crash(map()) -> {io:format(), [term()]}.
format_crash(#{listener := Name, handler := Handler, peer := Peer, class := Class,
               reason := Reason, stacktrace := Stack}) ->
    Elixir = elixir(Handler, Reason),
    {"sluice listener ~0tp: handler ~0tp crashed on a connection from ~ts~n~ts~ts",
     [Name, Handler, peer(Peer), exception(Elixir, Class, Reason, Stack),
      %% The hint quotes the handler's source: in its language, not the
      %% VM's (an Erlang handler in an Elixir VM, once anything loaded
      %% Exception, was told `{:noreply, state}')
      result_hint(Reason, Elixir andalso elixir_module(Handler))]}.

%% @doc bad_result_hint/3's report as text: one line, the hint in the
%% handler's language, as format_crash/1's.
-spec format_hint(map()) -> {io:format(), [term()]}.
format_hint(#{listener := Name, handler := Handler, callback := Cb, result := Value}) ->
    Reason = {bad_return_value, {Handler, Cb, Value}},
    Elixir = elixir(Handler, Reason) andalso elixir_module(Handler),
    %% (none: logged by a version with a hint this one does not have)
    Hint = case hint_text(Reason, Elixir) of
               {ok, Text} -> [" (", Text, ")"];
               none -> ""
           end,
    {"sluice listener ~0tp: handler ~0tp returned a bad value from ~ts~ts",
     [Name, Handler, callback(Cb), Hint]}.

callback(Cb) ->
    case lists:keyfind(Cb, 1, sluice_handler:behaviour_info(callbacks)) of
        {Cb, Arity} -> io_lib:format("~ts/~b", [Cb, Arity]);
        false -> atom_to_list(Cb)
    end.

elixir(Handler, Reason) ->
    erlang:module_loaded('Elixir.Exception')
        orelse ((elixir_module(Handler)
                 orelse (is_map(Reason) andalso maps:get('__exception__', Reason, false) =:= true))
                andalso code:ensure_loaded('Elixir.Exception') =:= {module, 'Elixir.Exception'}).

exception(Elixir, Class, Reason, Stack) ->
    try
        case Elixir of
            %% (a module sluice does not depend on: called by name)
            true -> erlang:apply(elixir_exception(), format, [Class, Reason, Stack]);
            false -> erl_error:format_exception(Class, Reason, Stack)
        end
    catch _:_ ->
        io_lib:format("~0tp:~0tp ~0tp", [Class, Reason, Stack])
    end.

elixir_exception() -> 'Elixir.Exception'.

%% A result of another behaviour's (a gen_server's, a thousand_island
%% handler's) is the usual slip of a handler ported from one, and "bad
%% return value" alone did not say what sluice wanted instead: the line
%% says it, in the language the handler is written in. The crash's reason
%% is left as it is (handle_error/2, terminate/2 and the crash report
%% get it unchanged). Only a crash is formatted here, never a result.
result_hint(Reason, Elixir) ->
    case hint_text(Reason, Elixir) of
        none -> "";
        {ok, Hint} -> ["\n(", Hint, ")"]
    end.

hint_text({bad_return_value, {_H, Cb, Value}}, Elixir) when is_atom(Cb) ->
    case hint(Cb, Value) of
        none -> none;
        {_Erlang, Ex} when Elixir -> {ok, Ex};
        {Erlang, _Ex} -> {ok, Erlang}
    end;
hint_text(_Reason, _Elixir) ->
    none.

hint(_Cb, {noreply, _}) ->
    {"{noreply, State} is a gen_server's result: a sluice callback returns {ok, State}",
     "{:noreply, state} is a GenServer's result: a sluice callback returns {:ok, state}"};
hint(_Cb, {noreply, _, _}) ->
    {"{noreply, State, Timeout} is a gen_server's result: a sluice callback returns "
     "{ok, State, Timeout}",
     "{:noreply, state, timeout} is a GenServer's result: a sluice callback returns "
     "{:ok, state, timeout}"};
hint(_Cb, {stop, _, _}) ->
    {"{stop, Reason, State} is a gen_server's result: a sluice callback closes with "
     "{close, Reason, State}",
     "{:stop, reason, state} is a GenServer's result: a sluice callback closes with "
     "{:close, reason, state}"};
hint(_Cb, {continue, _}) ->
    {"{continue, State} is a thousand_island handler's result: here {ok, State}",
     "{:continue, state} is a thousand_island handler's result: here {:ok, state}"};
hint(_Cb, {continue, _, _}) ->
    {"{continue, State, Timeout} is a thousand_island handler's result: here "
     "{ok, State, Timeout}",
     "{:continue, state, timeout} is a thousand_island handler's result: here "
     "{:ok, state, timeout}"};
hint(Cb, {close, _}) when Cb =/= init ->
    {"{close, State} is a thousand_island handler's result: here {close, Reason, State}, "
     "e.g. {close, normal, State}",
     "{:close, state} is a thousand_island handler's result: here {:close, reason, state}, "
     "e.g. {:close, :normal, state}"};
hint(_Cb, {error, _, _}) ->
    {"{error, Reason, State} is a thousand_island handler's result: here "
     "{close, Reason, State}",
     "{:error, reason, state} is a thousand_island handler's result: here "
     "{:close, reason, state}"};
hint(_Cb, {switch_transport, _, _}) ->
    {"{switch_transport, ...} is a thousand_island handler's result: here "
     "{starttls, IoData, State}, on a listener with tls_opts",
     "{:switch_transport, ...} is a thousand_island handler's result: here "
     "{:starttls, iodata, state}, on a listener with tls_opts"};
hint(handle_call, Reply) when tuple_size(Reply) >= 3, element(1, Reply) =:= reply ->
    %% A gen_server's reply to its caller; here the reply is what goes to
    %% the client, so a term that is not iodata fails as a result.
    {"handle_call/3's {reply, IoData, State} sends IoData to the client: answer the caller "
     "with sluice:reply(From, Reply) and return {ok, State}",
     "handle_call/3's {:reply, iodata, state} sends iodata to the client: answer the caller "
     "with :sluice.reply(from, reply) and return {:ok, state}"};
hint(_Cb, ok) ->
    {"a result carries the state: {ok, State}", "a result carries the state: {:ok, state}"};
hint(_Cb, _Value) ->
    none.

elixir_module(M) when is_atom(M) -> lists:prefix("Elixir.", atom_to_list(M));
elixir_module(_) -> false.

peer({ok, {IP, Port}}) when is_tuple(IP), is_integer(Port) ->
    io_lib:format("~ts:~b", [inet:ntoa(IP), Port]);
peer({ok, Address}) -> io_lib:format("~0tp", [Address]);
peer(Error) -> io_lib:format("an unknown address (~0tp)", [Error]).

crash_reason(throw, Reason, Stack) -> {{nocatch, Reason}, Stack};
crash_reason(_, Reason, Stack) -> {Reason, Stack}.

due(Stats, Kind) ->
    sluice_stats:log_due(Stats, Kind, erlang:monotonic_time(millisecond), ?INTERVAL_MS).
