%% @doc Turns SIGTERM into a message, replacing OTP's default handler (which
%% calls init:stop/0 and would cut connections or runs short instead of
%% letting them end in order). `bin/sluice' starts the VM under sluice-run,
%% which forwards SIGINT as SIGTERM: the VM keeps SIGINT for its break
%% handler. Used by every command that has something to finish on a signal:
%% serve drains, load reports, bench stops after the current run, and a C
%% program or VM run in the foreground gets the signal passed on.
-module(sluice_signal).
-behaviour(gen_event).

-export([install/1]).
-export([init/1, handle_event/2, handle_call/2, handle_info/2]).

%% @doc From now on SIGTERM sends `{sluice_signal, sigterm}' to `Pid'
%% (and no longer to a pid an earlier call named: a second call replaces
%% the handler, it does not add one that sends the signal twice).
-spec install(pid()) -> ok.
install(Pid) ->
    ok = os:set_signal(sigterm, handle),
    Old = case lists:member(?MODULE, gen_event:which_handlers(erl_signal_server)) of
              true -> ?MODULE;
              false -> erl_signal_handler
          end,
    ok = gen_event:swap_handler(erl_signal_server, {Old, []}, {?MODULE, Pid}),
    ok.

-spec init(term()) -> {ok, pid()}.
init({Pid, _}) when is_pid(Pid) -> {ok, Pid};
init(Pid) when is_pid(Pid) -> {ok, Pid}.

-spec handle_event(term(), pid()) -> {ok, pid()}.
handle_event(Signal, Pid) ->
    Pid ! {sluice_signal, Signal},
    {ok, Pid}.

-spec handle_call(term(), pid()) -> {ok, ok, pid()}.
handle_call(_Req, Pid) -> {ok, ok, Pid}.

-spec handle_info(term(), pid()) -> {ok, pid()}.
handle_info(_Msg, Pid) -> {ok, Pid}.
