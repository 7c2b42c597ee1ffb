%% The kernel's listen-queue counters: parsed from fixed text of
%% /proc/net/netstat, and read on this machine.
-module(sluice_kernel_tests).

-include_lib("eunit/include/eunit.hrl").

%% The TcpExt section is a line of names then a line of values; the
%% counters are taken by name, wherever they stand, and other sections
%% (IpExt, here with a ListenDrops of its own) are not read.
parse_test() ->
    Text = <<"TcpExt: SyncookiesSent ListenDrops ListenOverflows EmbryonicRsts\n"
             "TcpExt: 0 15 12 4\n"
             "IpExt: ListenDrops\nIpExt: 99\n">>,
    ?assertEqual(#{listen_overflows => 12, listen_drops => 15},
                 sluice_kernel:parse_netstat(Text)).

%% A kernel without the counters, or without a TcpExt section: nothing.
missing_test() ->
    ?assertEqual(#{}, sluice_kernel:parse_netstat(<<"TcpExt: SyncookiesSent\nTcpExt: 0\n">>)),
    ?assertEqual(#{}, sluice_kernel:parse_netstat(<<"IpExt: InNoRoutes\nIpExt: 3\n">>)),
    ?assertEqual(#{}, sluice_kernel:parse_netstat(<<>>)).

%% On Linux both counters are there, and every overflow is also a drop.
this_machine_test() ->
    ?assertMatch(#{listen_overflows := O, listen_drops := D} when O >= 0 andalso D >= O,
                 sluice_kernel:listen_drops()).
