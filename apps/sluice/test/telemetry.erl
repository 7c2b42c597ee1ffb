%% Stands in for the `telemetry' library, which is not in Debian, so that
%% sluice_telemetry_SUITE can see the events sluice emits when telemetry is
%% present. It is on the code path of every suite (rebar3 compiles test/
%% for all of them), so every listener started in a test run finds it: it
%% forwards an event only to a process that asked for them with
%% forward_to_me/0 and otherwise does nothing.
%%
%% execute/3 is as strict about its arguments as the real one: an event is
%% a list, measurements and metadata are maps; anything else crashes the
%% caller (a connection process), which a suite notices.
-module(telemetry).

-export([execute/3, forward_to_me/0, stop_forwarding/0, run_in_caller/1]).

-define(HOOK, {?MODULE, run_in_caller}).

-define(SINK, sluice_telemetry_stand_in).

-spec execute([atom()], map(), map()) -> ok.
execute(Event, Measurements, Metadata)
  when is_list(Event), is_map(Measurements), is_map(Metadata) ->
    case persistent_term:get(?HOOK, none) of
        none -> ok;
        Hook -> Hook(Event, Measurements, Metadata)
    end,
    case whereis(?SINK) of
        undefined -> ok;
        Pid -> Pid ! {telemetry, Event, Measurements, Metadata}, ok
    end.

%% Events go to the caller (as `{telemetry, Event, Measurements,
%% Metadata}') until it calls stop_forwarding/0 or exits.
-spec forward_to_me() -> true.
forward_to_me() ->
    register(?SINK, self()).

-spec stop_forwarding() -> ok.
stop_forwarding() ->
    _ = catch unregister(?SINK),
    _ = persistent_term:erase(?HOOK),
    ok.

%% Fun(Event, Measurements, Metadata) runs in the process that emits each
%% event, as a real telemetry handler does, until stop_forwarding/0.
-spec run_in_caller(fun(([atom()], map(), map()) -> term())) -> ok.
run_in_caller(Fun) ->
    persistent_term:put(?HOOK, Fun).
