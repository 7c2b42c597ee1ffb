%% @doc The `serve' options that are emulator flags: poll threads (`+IOt'),
%% poll sets (`+IOp') and scheduler binding (`+sbt'). The VM reads those
%% when it starts, so bin/sluice turns these options into flags before it
%% execs the VM; here they are checked (the same rules, with clear
%% messages) and compared with what the running VM really has, so that a
%% VM started some other way says so instead of silently measuring its
%% defaults.
-module(sluice_cli_vm).

-export([specs/0, check/1, describe/1]).

-define(BIND_TYPES, [u, ns, ts, ps, s, nnts, nnps, tnnps, db]).

-spec specs() -> [sluice_cli_args:spec()].
specs() ->
    [{io_poll_threads, "io-poll-threads", {integer, 1, 1024}, undefined,
      "VM poll threads, +IOt (none: the VM's default, 1)"},
     {io_poll_sets, "io-poll-sets", {integer, 1, 1024}, undefined,
      "VM poll sets, +IOp, at most --io-poll-threads (none: the VM's default, 1)"},
     {scheduler_bind, "scheduler-bind", {enum, ?BIND_TYPES}, undefined,
      "bind schedulers to cores, +sbt (none: the VM's default)"}].

%% @doc The rule the VM enforces: no more poll sets than poll threads.
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

%% @doc One line about the VM's I/O polling and binding, with a warning for
%% any option that did not reach the VM (it was not started by bin/sluice).
-spec describe(map()) -> string().
describe(O) ->
    {Threads, Sets} = polling(),
    Bind = bind_type(erlang:system_info(scheduler_bind_type)),
    Asked = [{"--io-poll-threads", maps:get(io_poll_threads, O, undefined), Threads},
             {"--io-poll-sets", maps:get(io_poll_sets, O, undefined), Sets},
             {"--scheduler-bind", maps:get(scheduler_bind, O, undefined), Bind}],
    %% db (the default bind) is tnnps on every platform OTP 25 binds on
    Missed = [io_lib:format(" (~s ~p did not reach the VM: start it with bin/sluice)", [F, A])
              || {F, A, Got} <- Asked, A =/= undefined, A =/= Got,
                 not (A =:= db andalso Got =:= tnnps)],
    lists:flatten(io_lib:format("~b poll thread(s), ~b poll set(s), scheduler bind ~p~s",
                                [Threads, Sets, Bind, Missed])).

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
