%% @doc Start a node with OTP's `peer' and, if it does not come up, end
%% the command that was to start it (ssh, for a node on another host).
%%
%% peer:start/1 waiting for the boot gives no handle on that command until
%% it returns, and when it gives up (its wait_boot timeout) it only closes
%% the command's standard I/O: an ssh still connecting (an unreachable
%% host) does not read it, and ran on after `load --nodes' or `serve
%% --hosts' had ended, until its own connect timeout. Here peer:start/1
%% returns at once (wait_boot notifies this process), the command's OS
%% process is read off the peer's port while the node boots, and a boot
%% that fails or times out ends the command's whole process group (ssh and
%% anything it started, e.g. a ProxyCommand: erl_child_setup makes each
%% port program the leader of a session of its own).
%%
%% An interrupt while nodes start follows one rule (interrupt/3), for
%% `load --nodes' and `serve --hosts' alike. The first one (a SIGTERM,
%% Ctrl-C, to a command whose signal handler is the waiting process:
%% sluice_signal) is kept for the command, which ends its run with a
%% report or drains once the nodes are up, as it always did; the wait goes
%% on, and one line says that another interrupt gives the boots up. That
%% one ends them at once (`{error, interrupted}'), where the command
%% waited out the boot timeout, 30 s of an ssh still connecting. The kept
%% interrupt is handed back (resume/1) once the boots are over: put back
%% after each of several boots one after the other, it was the next one's
%% first again, and each said so. A process that waits for several boots
%% in others passes the second on with cancel/1.
-module(sluice_peer_boot).

-export([start/2, start/3, timeout/0, cancel/1, interrupt/3, resume/1]).

-export_type([kept/0]).

%% Whether an interrupt came while nodes were starting and is kept for the
%% command.
-type kept() :: boolean().

%% @doc How long a node has to come up, in ms: 30 s, or
%% $SLUICE_BOOT_TIMEOUT seconds (a slow link's ssh may need more; the
%% tests of a host that never answers need less).
-spec timeout() -> pos_integer().
timeout() ->
    case string:to_integer(os:getenv("SLUICE_BOOT_TIMEOUT", "")) of
        {S, ""} when is_integer(S), S > 0 -> S * 1000;
        _ -> 30000
    end.

%% @doc peer:start(Opts) that waits at most `Timeout' ms for the node (in
%% place of `wait_boot'; `Opts' must name the node's `host'). The errors
%% are what peer:start/1 exits with: `{boot_failed, Why}' (the command
%% ended first, e.g. `{exit_status, 255}') or `timeout', and
%% `interrupted' (a SIGTERM for this process, or cancel/1).
-spec start(map(), timeout()) -> {ok, pid(), node()} | {error, term()}.
start(Opts, Timeout) ->
    {Result, Kept} = start(Opts, Timeout, #{kept => false, more => 0}),
    resume(Kept),
    Result.

%% @doc One of several boots one after the other: `kept' says whether an
%% interrupt is kept from an earlier one (this boot's first is then the
%% second), `more' how many are still to start after it (the line says
%% so); the kept interrupt is not handed back (resume/1, once all are
%% over).
-spec start(map(), timeout(), #{kept := kept(), more := non_neg_integer()}) ->
          {{ok, pid(), node()} | {error, term()}, kept()}.
start(#{host := Host} = Opts, Timeout, #{kept := Kept} = After) ->
    Tag = make_ref(),
    case peer:start(Opts#{wait_boot => {self(), Tag}}) of
        {ok, Peer, _Node} ->
            Mref = erlang:monitor(process, Peer),
            Boot = #{tag => Tag, mref => Mref, peer => Peer, os_pid => os_pid(Peer),
                     host => Host, more => maps:get(more, After),
                     deadline => erlang:monotonic_time(millisecond) + Timeout},
            wait(Boot, Kept);
        {error, _} = E ->
            {E, Kept}
    end.

wait(#{tag := Tag, mref := Mref, peer := Peer} = Boot, Kept) ->
    Left = max(0, maps:get(deadline, Boot) - erlang:monotonic_time(millisecond)),
    receive
        {Tag, {started, Node, Peer}} ->
            erlang:demonitor(Mref, [flush]),
            {{ok, Peer, Node}, Kept};
        {Tag, {boot_failed, Why, Peer}} ->
            {given_up(Boot, {boot_failed, Why}), Kept};
        {'DOWN', Mref, process, Peer, Why} ->
            {given_up(Boot, Why), Kept};
        {sluice_signal, sigterm} ->
            case interrupt(Kept, Left, waiting(Boot)) of
                kept -> wait(Boot, true);
                give_up -> {given_up(Boot, interrupted), true}
            end;
        {?MODULE, cancel} ->
            {given_up(Boot, interrupted), Kept}
    after Left ->
            {given_up(Boot, timeout), Kept}
    end.

waiting(#{host := Host, more := 0}) ->
    {io_lib:format("the node starting on ~s", [Host]), one};
waiting(#{host := Host, more := More}) ->
    {io_lib:format("the node starting on ~s, then for the ~b still to start", [Host, More]),
     several}.

%% @doc The rule for an interrupt while nodes start, in one place: the
%% first (`Kept' false) is kept for the command, and one line says what
%% is waited for, up to `LeftMs' more, and that another interrupt gives
%% it up (`What': the nodes, and whether they are `one' or `several');
%% the second gives the boots up.
-spec interrupt(kept(), non_neg_integer(), {iodata(), one | several}) -> kept | give_up.
interrupt(false, LeftMs, {What, Count}) ->
    io:format(standard_error, "sluice: interrupted: waiting up to ~b s more for ~s "
              "(interrupt again to give ~s up)~n",
              [(LeftMs + 999) div 1000, What, case Count of one -> "it"; several -> "them" end]),
    kept;
interrupt(true, _LeftMs, _What) ->
    give_up.

%% @doc Once the boots are over: the kept interrupt, back to the command
%% (this process, its signal handler) as it came.
-spec resume(kept()) -> ok.
resume(true) ->
    self() ! {sluice_signal, sigterm},
    ok;
resume(false) ->
    ok.

given_up(#{mref := Mref, peer := Peer, os_pid := OsPid}, Why) ->
    erlang:demonitor(Mref, [flush]),
    give_up(Peer, OsPid),
    {error, Why}.

%% @doc Give up the boot that `Pid' is waiting for (start/2), or the
%% one it is about to wait for: it returns `{error, interrupted}'. (A
%% process past its boot never reads the message.)
-spec cancel(pid()) -> ok.
cancel(Pid) ->
    Pid ! {?MODULE, cancel},
    ok.

%% The port peer's init/1 opened (and so linked) for the command.
os_pid(Peer) ->
    case erlang:process_info(Peer, links) of
        {links, Links} ->
            case [P || P <- Links, is_port(P)] of
                [Port | _] ->
                    case erlang:port_info(Port, os_pid) of
                        {os_pid, OsPid} -> OsPid;
                        undefined -> none
                    end;
                [] -> none
            end;
        undefined -> none
    end.

%% The command first, while its pid is surely still its own (the peer's
%% port closing lets erl_child_setup reap it); then the peer.
give_up(Peer, OsPid) ->
    _ = case OsPid of
            none -> ok;
            %% (the group: the command leads a session of its own; a
            %% group already gone is no error)
            _ -> os:cmd("kill -TERM -" ++ integer_to_list(OsPid) ++ " 2>/dev/null")
        end,
    _ = (catch gen_server:stop(Peer)),
    ok.
