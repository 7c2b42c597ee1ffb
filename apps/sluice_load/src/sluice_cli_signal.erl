%% @doc Turns SIGTERM into a message for `bin/sluice serve', replacing OTP's
%% default handler (which calls init:stop/0 and would cut connections
%% instead of draining them). bin/sluice forwards SIGINT as SIGTERM, since
%% the VM keeps SIGINT for its break handler.
-module(sluice_cli_signal).
-behaviour(gen_event).

-export([install/1]).
-export([init/1, handle_event/2, handle_call/2, handle_info/2]).

%% @doc From now on SIGTERM sends `{sluice_signal, sigterm}' to `Pid'.
-spec install(pid()) -> ok.
install(Pid) ->
    ok = os:set_signal(sigterm, handle),
    ok = gen_event:swap_handler(erl_signal_server,
                                    {erl_signal_handler, []}, {?MODULE, Pid}),
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
