%% @doc Turns SIGTERM into a message, replacing OTP's default handler (which
%% calls init:stop/0 and would cut connections or runs short instead of
%% letting them end in order). `bin/sluice' starts the VM under sluice-run,
%% which forwards SIGINT as SIGTERM: the VM keeps SIGINT for its break
%% handler. Used by every command that has something to finish on a signal:
%% serve drains, load reports, bench stops after the current run, and a C
%% program or VM run in the foreground gets the signal passed on.
%%
%% A SIGTERM that comes before the command installs its handler is kept
%% for it: sluice_cli calls hold/0 first thing, which also tells
%% sluice-run that the VM can take signals from now on (sluice-run holds
%% one that comes earlier, when the VM would drop it or stop without a
%% drain: c_src/sluice_run.c).
-module(sluice_signal).
-behaviour(gen_event).

-export([hold/0, install/1]).
-export([init/1, handle_event/2, handle_call/2, handle_info/2, terminate/2]).

%% How long a SIGTERM kept by hold/0 waits for a command to install a
%% handler before it does what OTP's does (init:stop/0): every command
%% that acts on the signal installs within milliseconds of its start, and
%% one that never does must still stop. As long as sluice-run holds one
%% for a VM that never says it can take signals (c_src/sluice_run.c): 2 s
%% was a race on a loaded host, where loading and starting what `serve'
%% needs can take longer, and a SIGTERM in its first moments stopped it
%% without a listener or a drain (exit 0, nothing said).
-define(UNCLAIMED_MS, 10000).

-type state() :: pid() | {hold, boolean()}.

%% @doc Keep a SIGTERM for the handler the command installs next
%% (install/1 passes it on at once), and tell sluice-run, if it started
%% this VM, to pass on the signals it held. Other signals do what OTP's
%% handler does.
-spec hold() -> ok.
hold() ->
    ok = os:set_signal(sigterm, handle),
    ok = swap({?MODULE, {hold, false}}),
    ok = ready(),
    orphaned().

%% sluice-run's pid (SLUICE_RUN_PID): if it is no longer this VM's parent,
%% it was killed (kill -9) and its parent-death SIGTERM may have come
%% before the VM could take signals, when it is lost (`serve' served on
%% with no parent). One after the handler above is in place is kept; this
%% covers one before: the command gets a SIGTERM either way (twice is as
%% once: the hold keeps one).
orphaned() ->
    case taken_env("SLUICE_RUN_PID") of
        {ok, Run} ->
            case sluice_procfs:parent(list_to_integer(os:getpid())) of
                {ok, Parent} when Parent =/= Run ->
                    gen_event:notify(erl_signal_server, sigterm);
                _ ->
                    ok
            end;
        none ->
            ok
    end.

%% sluice-run's pipe (its write end's number in SLUICE_READY_FD): one byte
%% says the VM takes signals now (the variable taken out: a program this
%% VM starts must not write to what is another descriptor there).
ready() ->
    case taken_env("SLUICE_READY_FD") of
        {ok, Fd} when Fd > 2 ->
            try
                Port = open_port({fd, Fd, Fd}, [out, binary]),
                true = port_command(Port, <<"r">>),
                %% (closing the port leaves the descriptor open)
                true = port_close(Port),
                ok
            catch error:_ -> ok % sluice-run's fallback still passes it on
            end;
        _ ->
            ok
    end.

%% The integer in environment variable Name, which is taken out of the
%% environment (sluice-run's word to this VM alone: the programs and VMs
%% it starts must not read it as theirs).
taken_env(Name) ->
    case os:getenv(Name) of
        false ->
            none;
        Text ->
            os:unsetenv(Name),
            case string:to_integer(Text) of
                {N, ""} when is_integer(N) -> {ok, N};
                _ -> none
            end
    end.

%% @doc From now on SIGTERM sends `{sluice_signal, sigterm}' to `Pid'
%% (and no longer to a pid an earlier call named: a second call replaces
%% the handler, it does not add one that sends the signal twice).
-spec install(pid()) -> ok.
install(Pid) when is_pid(Pid) ->
    ok = os:set_signal(sigterm, handle),
    swap({?MODULE, Pid}).

%% In place of OTP's handler or an earlier one of ours, which hands its
%% state over (terminate/2 to init/1): a SIGTERM held by hold/0.
swap(New) ->
    Old = case lists:member(?MODULE, gen_event:which_handlers(erl_signal_server)) of
              true -> ?MODULE;
              false -> erl_signal_handler
          end,
    ok = gen_event:swap_handler(erl_signal_server, {Old, swap}, New).

-spec init(term()) -> {ok, state()}.
init({{hold, _} = Hold, _}) -> {ok, Hold};
init({Pid, {hold, true}}) when is_pid(Pid) -> Pid ! {sluice_signal, sigterm}, {ok, Pid};
init({Pid, _}) when is_pid(Pid) -> {ok, Pid}.

-spec handle_event(term(), state()) -> {ok, state()}.
handle_event(sigterm, {hold, _}) ->
    %% (the timer's message comes to the event manager, this process)
    _ = erlang:send_after(?UNCLAIMED_MS, self(), {?MODULE, unclaimed}),
    {ok, {hold, true}};
handle_event(Signal, {hold, _} = Hold) ->
    _ = erl_signal_handler:handle_event(Signal, []),
    {ok, Hold};
handle_event(Signal, Pid) ->
    Pid ! {sluice_signal, Signal},
    {ok, Pid}.

-spec handle_call(term(), state()) -> {ok, ok, state()}.
handle_call(_Req, State) -> {ok, ok, State}.

-spec handle_info(term(), state()) -> {ok, state()}.
handle_info({?MODULE, unclaimed}, {hold, true} = Hold) ->
    %% No command took it: what OTP's handler does with a SIGTERM.
    ok = init:stop(),
    {ok, Hold};
handle_info(_Msg, State) -> {ok, State}.

%% What the handler installed in this one's place gets (init/1).
-spec terminate(term(), state()) -> state().
terminate(_Reason, State) -> State.
