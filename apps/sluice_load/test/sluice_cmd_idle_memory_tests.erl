%% What `bin/sluice idle-memory' reads of the VM for a connection's ports.
-module(sluice_cmd_idle_memory_tests).

-include_lib("eunit/include/eunit.hrl").

%% The driver_alloc column sees what the inet driver allocates for each
%% port (its descriptor and buffers, about 1,490 bytes on OTP 25); the
%% column it replaced summed erlang:port_info(P, memory), the port's own
%% 40-byte structure, and could not show it.
driver_alloc_sees_the_inet_drivers_memory_of_each_port_test() ->
    N = 50,
    Before = sluice_cmd_idle_memory:allocator_in_use(driver_alloc),
    Socks = [begin {ok, L} = gen_tcp:listen(0, [binary]), L end || _ <- lists:seq(1, N)],
    After = sluice_cmd_idle_memory:allocator_in_use(driver_alloc),
    PortInfo = lists:sum([B || L <- Socks, {memory, B} <- [erlang:port_info(L, memory)]]),
    _ = [gen_tcp:close(L) || L <- Socks],
    PerPort = (After - Before) div N,
    ?assert(PerPort >= 500),
    ?assert(After - Before > 5 * PortInfo),
    ?assert(sluice_cmd_idle_memory:allocator_in_use(driver_alloc) < After).
