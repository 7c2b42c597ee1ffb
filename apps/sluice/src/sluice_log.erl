%% @doc Log lines for faults that every client can cause at once (a
%% listener out of descriptors or full, a flood of failed TLS handshakes):
%% at most one line a second per listener and kind, with the number of
%% others since the last line. Every occurrence is still counted (info/1).
%% And the line of a handler that crashed (handler_crashed/6), for the
%% logs that drop OTP's crash reports.
%% @private
-module(sluice_log).

-export([accept_failed/3, over_limit/2, refused/3, handler_crashed/6]).
%% the report_cb of handler_crashed/6's report
-export([format_crash/1]).

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
                 crash_reason => crash_reason(Class, Reason, Stack)}).

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
result_hint({bad_return_value, {_H, Cb, Value}}, Elixir) when is_atom(Cb) ->
    case hint(Cb, Value) of
        none -> "";
        {_Erlang, Ex} when Elixir -> ["\n(", Ex, ")"];
        {Erlang, _Ex} -> ["\n(", Erlang, ")"]
    end;
result_hint(_Reason, _Elixir) ->
    "".

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
