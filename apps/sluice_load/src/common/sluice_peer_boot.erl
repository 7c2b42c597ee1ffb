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
%% A second interrupt ends the boot. The first one (a SIGTERM, Ctrl-C,
%% to a command whose signal handler is the booting process: sluice_signal)
%% is kept for the command, which ends its run with a report or drains
%% once the node is up, as it always did; the wait for the node goes on,
%% and a line says that another interrupt gives it up. That one ends the
%% boot at once (`{error, interrupted}'), where the command waited out the
%% boot timeout, 30 s of an ssh still connecting. A process that waits for
%% several boots in others passes the second on with cancel/1.
-module(sluice_peer_boot).

-export([start/2, timeout/0, cancel/1]).

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
start(#{host := Host} = Opts, Timeout) ->
    Tag = make_ref(),
    case peer:start(Opts#{wait_boot => {self(), Tag}}) of
        {ok, Peer, _Node} ->
            Mref = erlang:monitor(process, Peer),
            Boot = #{tag => Tag, mref => Mref, peer => Peer, os_pid => os_pid(Peer),
                     host => Host, deadline => erlang:monotonic_time(millisecond) + Timeout},
            wait(Boot, false);
        {error, _} = E ->
            E
    end.

wait(#{tag := Tag, mref := Mref, peer := Peer} = Boot, Interrupted) ->
    Left = max(0, maps:get(deadline, Boot) - erlang:monotonic_time(millisecond)),
    receive
        {Tag, {started, Node, Peer}} ->
            erlang:demonitor(Mref, [flush]),
            kept(Interrupted, {ok, Peer, Node});
        {Tag, {boot_failed, Why, Peer}} ->
            kept(Interrupted, given_up(Boot, {boot_failed, Why}));
        {'DOWN', Mref, process, Peer, Why} ->
            kept(Interrupted, given_up(Boot, Why));
        {sluice_signal, sigterm} when not Interrupted ->
            interrupted_once(maps:get(host, Boot), Left),
            wait(Boot, true);
        {sluice_signal, sigterm} ->
            given_up(Boot, interrupted);
        {?MODULE, cancel} ->
            given_up(Boot, interrupted)
    after Left ->
            kept(Interrupted, given_up(Boot, timeout))
    end.

%% The first interrupt is the command's: put back for it.
kept(true, Result) ->
    self() ! {sluice_signal, sigterm},
    Result;
kept(false, Result) ->
    Result.

interrupted_once(Host, Left) ->
    io:format(standard_error, "sluice: interrupted: waiting up to ~b s more for the node "
              "starting on ~s (interrupt again to give it up)~n",
              [(Left + 999) div 1000, Host]).

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
