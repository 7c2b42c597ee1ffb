%% @doc This VM made a distributed node, for `serve --nodes' and `load
%% --nodes' alike: epmd started when none answers, and waited for; then
%% net_kernel, whose failure is one sentence.
%%
%% bin/sluice runs `erl' without a name, so nothing has started epmd.
%% `epmd -daemon' returns before the daemon listens: net_kernel:start/2
%% right after it lost that race now and then (register/listen error:
%% econnrefused), and a minute later the same command worked. When
%% net_kernel cannot start, OTP says why only in the reports its
%% processes log (an INFO REPORT, a SUPERVISOR REPORT, a CRASH REPORT:
%% ~30 lines on the terminal) and returns a nested tuple that names
%% nothing. Those reports are taken off the terminal for that one call,
%% by a primary logger filter that keeps only the events of the
%% distribution's own processes (net_sup and its children: nothing else
%% the VM logs meanwhile is hidden), and read for the cause.
%%
%% The epmd port is the one net_kernel will use: `-epmd_port', which erl
%% sets from $ERL_EPMD_PORT, else 4369; the epmd started is given it.
-module(sluice_dist).

-export([start/2, filter/2]).

%% How long epmd has to answer once started, and each probe's timeouts.
-define(EPMD_WAIT_MS, 5000).
-define(PROBE_MS, 1000).
-define(POLL_MS, 100).
-define(EPMD_HOST, "127.0.0.1").

%% @doc Make this VM the node `Name' (a long name has its host part),
%% unless it already is a node.
-spec start(atom(), longnames | shortnames) -> ok | {error, string()}.
start(Name, Domain) ->
    case node() of
        nonode@nohost -> start_new(Name, Domain);
        _ -> ok
    end.

start_new(Name, Domain) ->
    case epmd_port() of
        {ok, Port} ->
            case ensure_epmd(Port) of
                ok -> start_kernel(Name, Domain, Port);
                {error, Why} -> {error, describe(no_epmd, Port, Why)}
            end;
        {error, Bad} ->
            {error, fmt("cannot start Erlang distribution: ERL_EPMD_PORT (or -epmd_port) is "
                        "~ts, not a port number (1-65535)", [Bad])}
    end.

%% (net_kernel crashed on a value that is not a port)
epmd_port() ->
    case init:get_argument(epmd_port) of
        {ok, [[P | _] | _]} ->
            case string:to_integer(P) of
                {N, ""} when N >= 1, N =< 65535 -> {ok, N};
                _ -> {error, P}
            end;
        _ ->
            {ok, 4369}
    end.

%% epmd answers already (another node started it), or is started and
%% polled until it answers, for up to ?EPMD_WAIT_MS.
ensure_epmd(Port) ->
    case probe(Port) of
        ok ->
            ok;
        {error, _} ->
            Said = string:trim(os:cmd(epmd() ++ " -port " ++ integer_to_list(Port) ++ " -daemon")),
            Deadline = erlang:monotonic_time(millisecond) + ?EPMD_WAIT_MS,
            case wait_epmd(Port, Deadline) of
                ok -> ok;
                {error, Why} when Said =:= "" -> {error, Why};
                {error, Why} -> {error, {Why, Said}}
            end
    end.

wait_epmd(Port, Deadline) ->
    case probe(Port) of
        ok -> ok;
        {error, _} = E ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true -> E;
                false -> timer:sleep(?POLL_MS), wait_epmd(Port, Deadline)
            end
    end.

%% epmd's NAMES_REQ ('n'): a daemon that answers it replies with its own
%% port first. Anything else listening on the port (a closed or silent
%% connection) is not epmd.
probe(Port) ->
    case gen_tcp:connect({127, 0, 0, 1}, Port, [binary, {active, false}], ?PROBE_MS) of
        {ok, S} ->
            R = case gen_tcp:send(S, <<1:16, $n>>) of
                    ok ->
                        case gen_tcp:recv(S, 4, ?PROBE_MS) of
                            {ok, <<_:32>>} -> ok;
                            {error, _} = E -> E
                        end;
                    {error, _} = E -> E
                end,
            _ = gen_tcp:close(S),
            R;
        {error, _} = E ->
            E
    end.

%% The epmd of this OTP installation, else the one in PATH.
epmd() ->
    Erts = filename:join([code:root_dir(), "erts-" ++ erlang:system_info(version), "bin", "epmd"]),
    case filelib:is_regular(Erts) of
        true -> Erts;
        false -> "epmd"
    end.

start_kernel(Name, Domain, Port) ->
    Ref = make_ref(),
    ok = logger:add_primary_filter(?MODULE, {fun ?MODULE:filter/2, {self(), Ref}}),
    Result = try net_kernel:start(Name, #{name_domain => Domain})
             catch Class:Reason -> {error, {Class, Reason}}
             end,
    First = logged(Ref, []),
    _ = case Result of
            {ok, _} -> ok;
            {error, _} -> wait_gone(lists:usort([P || {P, _} <- First]))
        end,
    _ = logger:remove_primary_filter(?MODULE),
    Said = [Text || {_, Text} <- First ++ logged(Ref, [])],
    case Result of
        {ok, _} -> ok;
        {error, {already_started, _}} -> ok;
        {error, Reason2} -> {error, describe(Said, Port, {Name, Domain, Reason2})}
    end.

%% What the distribution's processes logged so far, oldest first.
logged(Ref, Acc) ->
    receive {?MODULE, Ref, Pid, Text} -> logged(Ref, [{Pid, Text} | Acc])
    after 0 -> lists:reverse(Acc)
    end.

%% The processes that logged are on their way out (net_kernel logs its
%% crash report as it exits, after net_kernel:start/2 has returned): the
%% filter stays until they are gone, for up to a second.
wait_gone(Pids) ->
    Deadline = erlang:monotonic_time(millisecond) + 1000,
    Mons = [erlang:monitor(process, P) || P <- Pids],
    _ = [receive {'DOWN', M, process, _, _} -> ok
         after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                 erlang:demonitor(M, [flush])
         end || M <- Mons],
    ok.

%% @private A primary logger filter: an event logged by the distribution's
%% processes (net_sup, and its children: net_kernel, erl_epmd, auth) goes
%% to the process starting it; any other is left to the other filters.
-spec filter(logger:log_event(), {pid(), reference()}) -> logger:filter_return().
filter(#{msg := Msg}, {To, Ref}) ->
    case distribution_process() of
        true -> To ! {?MODULE, Ref, self(), text(Msg)}, stop;
        false -> ignore
    end;
filter(_Event, _Extra) ->
    ignore.

distribution_process() ->
    erlang:process_info(self(), registered_name) =:= {registered_name, net_sup}
        orelse case get('$ancestors') of
                   Ancestors when is_list(Ancestors) -> lists:member(net_sup, Ancestors);
                   _ -> false
               end.

text({string, S}) -> unicode:characters_to_list(S);
text({report, R}) -> lists:flatten(io_lib:format("~0tp", [R]));
text({Format, Args}) ->
    try lists:flatten(io_lib:format(Format, Args))
    catch _:_ -> lists:flatten(io_lib:format("~0tp", [{Format, Args}]))
    end.

%% The one line said when distribution does not start (without the
%% "sluice: " the CLI puts before it): `no_epmd' with the last probe's
%% error, or what the distribution logged with the name and the error
%% net_kernel:start/2 returned.
describe(no_epmd, Port, Why) ->
    fmt("cannot start Erlang distribution: epmd on ~s:~b does not answer (~s, ~b s after "
        "`epmd -daemon`): ~s", [?EPMD_HOST, Port, probe_error(Why), ?EPMD_WAIT_MS div 1000,
                                no_epmd_hint(Port, Why)]);
describe(Logged, Port, {Name, Domain, Reason}) ->
    Find = fun(S) -> [L || L <- Logged, string:find(L, S) =/= nomatch] end,
    Cause = case {Find("seems to be in use"), Find("node name!"), Find("register/listen error: ")} of
                {[_ | _], _, _} ->
                    fmt("the node name ~s is taken: another node registered it with epmd on ~s:~b "
                        "(`epmd -names` lists them)", [Name, ?EPMD_HOST, Port]);
                {[], [_ | _], _} ->
                    fmt("~s is not a valid ~s node name: its host part (~s) must be ~s",
                        [Name, short_long(Domain), host_source(Domain), host_rule(Domain)]);
                {[], [], [L | _]} ->
                    [_, Error] = string:split(L, "register/listen error: "),
                    fmt("the node could not register with epmd on ~s:~b or listen for "
                        "other nodes (~s)", [?EPMD_HOST, Port, string:trim(Error)]);
                {[], [], []} ->
                    case Logged of
                        [] -> fmt("~0tp", [Reason]);
                        [First | _] -> First
                    end
            end,
    fmt("cannot start Erlang distribution: ~ts", [one_line(Cause)]).

%% Nothing listens: the epmd started did not come up (what it said, if
%% anything, is in the line). Something listens but is not epmd: another
%% program holds the port.
no_epmd_hint(Port, {Why, _Said}) ->
    no_epmd_hint(Port, Why);
no_epmd_hint(Port, econnrefused) ->
    fmt("run `epmd -port ~b` to see why it does not start", [Port]);
no_epmd_hint(Port, _) ->
    fmt("another program may hold port ~b (`ss -ltnp`); ERL_EPMD_PORT gives epmd another",
        [Port]).

probe_error({Why, Said}) -> fmt("~s; `epmd -daemon` said: ~ts", [probe_error(Why), one_line(Said)]);
probe_error(econnrefused) -> "nothing listens there";
probe_error(closed) -> "the connection was closed without a reply";
probe_error(timeout) -> fmt("no reply within ~b s", [?PROBE_MS div 1000]);
probe_error(Why) -> fmt("~s", [inet:format_error(Why)]).

short_long(longnames) -> "long";
short_long(shortnames) -> "short".

host_source(longnames) -> "$SLUICE_DIST_HOST, else this host's name";
host_source(shortnames) -> "this host's name, `hostname`".

host_rule(longnames) -> "an address or a host name with a dot, nothing else";
host_rule(shortnames) -> "a host name without a dot".

one_line(S) -> lists:flatten(lists:join(" ", string:lexemes(S, "\r\n"))).

fmt(F, A) -> lists:flatten(io_lib:format(F, A)).
