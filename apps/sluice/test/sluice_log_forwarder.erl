%% A logger handler for tests: every event logged while it is installed is
%% sent to a process as {log, Level, FormattedText, Meta}.
-module(sluice_log_forwarder).
%% start/3 installs one more, with an id and filters of its own, whose
%% events come as {log, Id, Level, FormattedText, Meta}.
-export([start/1, stop/0, start/3, stop/1, log/2]).

start(Pid) ->
    ok = logger:add_handler(?MODULE, ?MODULE, #{level => all, config => #{pid => Pid}}).

stop() ->
    stop(?MODULE).

%% Config: the handler's `filters' and `filter_default'.
start(Id, Pid, Config) ->
    ok = logger:add_handler(Id, ?MODULE, Config#{level => all,
                                                 config => #{pid => Pid, id => Id}}).

stop(Id) ->
    _ = logger:remove_handler(Id),
    ok.

log(#{level := Level, msg := Msg, meta := Meta}, #{config := #{pid := Pid, id := Id}}) ->
    Pid ! {log, Id, Level, text(Msg, Meta), Meta},
    ok;
log(#{level := Level, msg := Msg, meta := Meta}, #{config := #{pid := Pid}}) ->
    Pid ! {log, Level, text(Msg, Meta), Meta},
    ok.

text({report, R}, #{report_cb := Cb}) when is_function(Cb, 1) ->
    {F, A} = Cb(R),
    lists:flatten(io_lib:format(F, A));
text({report, R}, _) -> lists:flatten(io_lib:format("~p", [R]));
text({string, S}, _) -> unicode:characters_to_list(S);
text({F, A}, _) -> lists:flatten(io_lib:format(F, A)).
