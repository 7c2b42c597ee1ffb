%% @doc The `serve' options that are emulator flags: poll threads (`+IOt'),
%% poll sets (`+IOp') and scheduler binding (`+sbt'). The VM reads them
%% only when it starts, so when the running VM does not have them the CLI
%% runs the server in a VM started with them (relaunch/2), and the server
%% says on stderr what its VM really runs with.
-module(sluice_vm_flags).

-export([specs/0, check/1, emulator_args/1, missing/1, describe/1, relaunch/2,
         relaunched/0]).

-define(BIND_TYPES, [u, ns, ts, ps, s, nnts, nnps, tnnps, db]).
%% Set in the environment of a relaunched VM: it serves whatever it got,
%% rather than relaunching again.
-define(RELAUNCHED_ENV, "SLUICE_VM_RELAUNCHED").

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    [sluice_cli_args:opt(io_poll_threads, {integer, 1, 1024}, undefined,
                         "VM poll threads, +IOt (none: the VM's default, 1)"),
     sluice_cli_args:opt(io_poll_sets, {integer, 1, 1024}, undefined,
                         "VM poll sets, +IOp, at most --io-poll-threads (none: the VM's default, 1)"),
     sluice_cli_args:opt(scheduler_bind, {enum, ?BIND_TYPES}, undefined,
                         "bind schedulers to cores, +sbt (none: the VM's default)")].

%% @doc The rule the VM enforces (with a page of usage text): no more poll
%% sets than poll threads.
-spec check(map()) -> ok | {error, string()}.
check(O) ->
    Threads = case maps:get(io_poll_threads, O, undefined) of
                  undefined -> 1;
                  T -> T
              end,
    case maps:get(io_poll_sets, O, undefined) of
        Sets when is_integer(Sets), Sets > Threads ->
            {error, lists:flatten(io_lib:format("--io-poll-sets ~b is more than the ~b poll "
                                                "thread(s): give --io-poll-threads ~b or more",
                                                [Sets, Threads, Sets]))};
        _ ->
            ok
    end.

%% @doc The emulator flags the options ask for.
-spec emulator_args(map()) -> [string()].
emulator_args(O) ->
    lists:append([[Flag, value(V)] || {Key, Flag} <- [{io_poll_threads, "+IOt"},
                                                       {io_poll_sets, "+IOp"},
                                                       {scheduler_bind, "+sbt"}],
                                       V <- [maps:get(Key, O, undefined)], V =/= undefined]).

value(V) when is_integer(V) -> integer_to_list(V);
value(V) when is_atom(V) -> atom_to_list(V).

%% @doc The options asked for that the running VM does not have.
-spec missing(map()) -> [string()].
missing(O) ->
    [io_lib:format("~s ~p", [F, A]) || {F, A, Got} <- asked(O), A =/= undefined, A =/= Got,
                                       %% db, the default bind, is tnnps where OTP binds
                                       not (A =:= db andalso Got =:= tnnps)].

%% @doc One line about the VM's I/O polling and binding, with a warning for
%% any option that did not reach the VM.
-spec describe(map()) -> string().
describe(O) ->
    {Threads, Sets} = polling(),
    Missed = [[" (", M, " did not reach the VM)"] || M <- missing(O)],
    lists:flatten(io_lib:format("~b poll thread(s), ~b poll set(s), scheduler bind ~p~s",
                                [Threads, Sets, bind_type(erlang:system_info(scheduler_bind_type)),
                                 Missed])).

asked(O) ->
    {Threads, Sets} = polling(),
    [{"--io-poll-threads", maps:get(io_poll_threads, O, undefined), Threads},
     {"--io-poll-sets", maps:get(io_poll_sets, O, undefined), Sets},
     {"--scheduler-bind", maps:get(scheduler_bind, O, undefined),
      bind_type(erlang:system_info(scheduler_bind_type))}].

%% @doc Run `bin/sluice serve Args' in a VM started with the options'
%% emulator flags (and SLUICE_ERL_FLAGS, as bin/sluice gives this one), in
%% the foreground: its output is the command's, SIGTERM is passed on, its
%% exit status is returned. It runs under sluice-run, as bin/sluice runs
%% this one: a SIGTERM passed on in the new VM's first moments (this VM
%% passes on at once one it kept from its own start) is held until the
%% new VM can drain on it; the VM alone dropped it and served on.
-spec relaunch(map(), [string()]) -> sluice_cli:result().
relaunch(O, Args) ->
    Flags = string:lexemes(os:getenv("SLUICE_ERL_FLAGS", ""), " \t"),
    ErlArgs = ["+Bi", "-noshell", "-noinput" | Flags] ++ emulator_args(O)
        ++ lists:append([["-pa", D] || D <- sluice_build:code_path()])
        ++ ["-run", "sluice_cli", "main", "-extra", "serve" | Args],
    case sluice_build:program("sluice-run") of
        {ok, Run} ->
            sluice_cprog:run(Run, [sluice_build:erl() | ErlArgs], [{?RELAUNCHED_ENV, "1"}]);
        {error, Msg} ->
            {error, 1, Msg}
    end.

%% @doc In a VM started by relaunch/2: true, and from now on this VM halts
%% when the VM that started it goes (its end of the port, descriptors 3
%% and 4, closes), so that a killed CLI leaves no server behind.
-spec relaunched() -> boolean().
relaunched() ->
    case os:getenv(?RELAUNCHED_ENV) of
        "1" ->
            _ = spawn(fun watch_parent/0),
            true;
        _ ->
            false
    end.

-spec watch_parent() -> no_return().
watch_parent() ->
    Port = open_port({fd, 3, 4}, [binary, eof]),
    receive {Port, eof} -> erlang:halt(1) end.

%% erlang:system_info(check_io): one entry per poll set, each with its
%% poll threads, beside the fallback set and the schedulers' own (those
%% have no poll thread).
polling() ->
    Sets = [proplists:get_value(poll_threads, P, 0)
            || P <- erlang:system_info(check_io), is_list(P)],
    Polled = [N || N <- Sets, N > 0],
    {lists:sum(Polled), length(Polled)}.

%% scheduler_bind_type's names for the +sbt letters (db, the default bind,
%% is reported as what it stands for, tnnps)
bind_type(unbound) -> u;
bind_type(no_node_processor_spread) -> nnps;
bind_type(no_node_thread_spread) -> nnts;
bind_type(no_spread) -> ns;
bind_type(thread_spread) -> ts;
bind_type(processor_spread) -> ps;
bind_type(spread) -> s;
bind_type(thread_no_node_processor_spread) -> tnnps.
