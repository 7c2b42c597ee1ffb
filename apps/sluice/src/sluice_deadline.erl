%% @doc Deadlines in monotonic milliseconds, for waits bounded as a whole
%% rather than per step (a PROXY header read in pieces, a TLS handshake
%% after its first bytes, a send that waits for the socket more than
%% once): `infinity' stays `infinity'.
%% @private
-module(sluice_deadline).

-export([at/1, left/1]).

-type deadline() :: integer() | infinity.
-export_type([deadline/0]).

%% @doc The deadline `Timeout' ms from now.
-spec at(timeout()) -> deadline().
at(infinity) -> infinity;
at(Timeout) -> erlang:monotonic_time(millisecond) + Timeout.

%% @doc The ms left until `Deadline', 0 once it has passed: a receive's or
%% a call's timeout.
-spec left(deadline()) -> timeout().
left(infinity) -> infinity;
left(Deadline) -> max(0, Deadline - erlang:monotonic_time(millisecond)).
