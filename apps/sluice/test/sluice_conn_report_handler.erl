%% A handler for the TLS and PROXY suites: tells the test process
%% (option `test_pid') what its init/2 was given (sluice:conn()), and the
%% logger metadata of its process, then echoes every byte.
-module(sluice_conn_report_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2]).

init(Conn, Opts = #{test_pid := Pid}) ->
    Meta = case logger:get_process_metadata() of
               undefined -> #{};
               M -> M
           end,
    Pid ! {sluice_conn, self(), Conn, Meta},
    {ok, Opts}.

handle_data(Data, State) ->
    {reply, Data, State}.
