%% A small SMTP-like line protocol for sluice_starttls_SUITE (framing
%% `{line, #{delimiter => crlf}}'): a greeting, then one line per command.
%%
%% <ul>
%%  <li>`STARTTLS': "220 go ahead", then TLS (`{starttls, ...}'); with
%%      `hold => true' in the options it first tells the test
%%      `{holding, Pid}' and waits for `proceed', so that the test can
%%      put bytes in the connection's mailbox meanwhile;</li>
%%  <li>`SEND STARTTLS': as `STARTTLS', after a sluice:send/2 of "250
%%      sent" of its own;</li>
%%  <li>`TLS?': "TLS Protocol" once handle_starttls/2 has run, else
%%      "PLAIN";</li>
%%  <li>`PEER?': "CERT" when the client's certificate came, else "NOCERT";</li>
%%  <li>`QUIT': "221 bye" and close;</li>
%%  <li>anything else: "250 " and the line.</li>
%% </ul>
%% Every line is reported to the test as `{line, Pid, Line, Tls}' (Tls:
%% whether the connection was on TLS), the TLS facts as `{starttls, Pid,
%% Tls}', a drain as `{drain, Pid}', the end as `{terminate, Pid,
%% Reason}'. A drain closes the connection (`drained', as without
%% handle_drain/1) unless the options say `carry_on => true'. No handle_info/2 and no
%% handle_call/3: a listener with park_after parks it.
-module(sluice_starttls_handler).
-behaviour(sluice_handler).

-export([init/2, handle_data/2, handle_starttls/2, handle_drain/1, terminate/2]).

init(Conn, Opts = #{test := Test}) ->
    Test ! {init, self(), Conn},
    State = #{test => Test, tls => undefined, hold => maps:get(hold, Opts, false),
              carry_on => maps:get(carry_on, Opts, false), conn => Conn},
    case maps:get(init_starttls, Opts, false) of
        true -> {starttls, <<"220 tls now\r\n">>, State};
        false -> {reply, <<"220 ready\r\n">>, State}
    end.

handle_data(Line, S = #{test := Test, tls := Tls}) ->
    Test ! {line, self(), Line, Tls =/= undefined},
    command(Line, S).

command(<<"STARTTLS">>, S = #{hold := true, test := Test}) ->
    Test ! {holding, self()},
    receive proceed -> ok end,
    {starttls, <<"220 go ahead\r\n">>, S};
command(<<"STARTTLS">>, S) ->
    {starttls, <<"220 go ahead\r\n">>, S};
command(<<"SEND STARTTLS">>, S = #{conn := Conn}) ->
    ok = sluice:send(Conn, <<"250 sent\r\n">>),
    {starttls, <<"220 go ahead\r\n">>, S};
command(<<"TLS?">>, S = #{tls := undefined}) ->
    {reply, <<"PLAIN\r\n">>, S};
command(<<"TLS?">>, S = #{tls := #{protocol := P}}) ->
    {reply, [<<"TLS ">>, atom_to_binary(P), <<"\r\n">>], S};
command(<<"PEER?">>, S = #{tls := #{peer_cert := Der}}) when is_binary(Der) ->
    {reply, <<"CERT\r\n">>, S};
command(<<"PEER?">>, S) ->
    {reply, <<"NOCERT\r\n">>, S};
command(<<"QUIT">>, S) ->
    {reply_close, <<"221 bye\r\n">>, quit, S};
command(Line, S) ->
    {reply, [<<"250 ">>, Line, <<"\r\n">>], S}.

handle_starttls(Tls, S = #{test := Test}) ->
    Test ! {starttls, self(), Tls},
    {ok, S#{tls := Tls}}.

handle_drain(S = #{test := Test, carry_on := CarryOn}) ->
    Test ! {drain, self()},
    case CarryOn of
        true -> {ok, S};
        false -> {close, drained, S}
    end.

terminate(Reason, #{test := Test}) ->
    Test ! {terminate, self(), Reason}.
