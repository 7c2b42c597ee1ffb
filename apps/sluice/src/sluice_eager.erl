%% @doc Whether granting a connection's short reads one at a time is paying
%% off (the adaptive mode's single-read regime, sluice_conn:next/2).
%%
%% Re-arming a passive inet socket reads at once if the client's next
%% request is already there (a hit): the round trip then costs no poll.
%% When it is not (a miss), the socket waits for its data through a poll
%% thread, put back in the poll set each time, which costs more than a
%% running grant of chunks: a grant is never deselected, so the socket
%% stays in the schedulers' own poll set. Measured (bench/README.md,
%% "Lock-step: single reads that miss"): a lock-step client on another
%% core misses nearly every time, and one read at a time cost the server
%% 38-39 us of CPU per round trip against 31-35 us with a grant; on one
%% core, with client and server in sessions of their own (as `make bench'
%% runs them), single reads put sluice at 0.93 of a hand-written
%% `{active, N}' server, a grant at 0.97-0.98.
%%
%% So: count the misses of each window of ?WINDOW single reads. At
%% ?MISS_LIMIT misses in a window the connection goes back to a grant for
%% the next `backoff' reads (counted at the grant's top-ups, so about that
%% many), then tries again; each failed try doubles the backoff (up to
%% ?BACKOFF_MAX), a window that passes resets it. A client that always
%% misses is tried for ?MISS_LIMIT reads in every backoff's worth: 16 in
%% 4,096 at first, 16 in 65,536 after four tries. The limit (one miss in
%% 16) is a choice, not a measured optimum: far below what a client on
%% another core misses, far above what a client whose requests wait for
%% the handler does (none; sluice_active_SUITE).
%% @private
-module(sluice_eager).

-export([new/0, hit/1, miss/1]).

-export_type([eager/0]).

-define(WINDOW, 256).
-define(MISS_LIMIT, 16).
-define(BACKOFF_MIN, 4096).
-define(BACKOFF_MAX, 65536).

%% {single reads in this window, misses in it, backoff of the next failed
%% try}
-opaque eager() :: {non_neg_integer(), non_neg_integer(), pos_integer()}.

%% @doc A connection starts trying.
-spec new() -> eager().
new() ->
    {0, 0, ?BACKOFF_MIN}.

%% @doc A single read found its data there.
-spec hit(eager()) -> eager().
hit({Tries, _, _}) when Tries + 1 >= ?WINDOW ->
    new();
hit({Tries, Misses, Backoff}) ->
    {Tries + 1, Misses, Backoff}.

%% @doc A single read found nothing there and waits for a poll: carry on,
%% or stop single reads for the next `Reads' reads.
-spec miss(eager()) -> {on, eager()} | {off, Reads :: pos_integer(), eager()}.
miss({_, Misses, Backoff}) when Misses + 1 >= ?MISS_LIMIT ->
    {off, Backoff, {0, 0, min(2 * Backoff, ?BACKOFF_MAX)}};
miss({Tries, _, _}) when Tries + 1 >= ?WINDOW ->
    {on, new()};
miss({Tries, Misses, Backoff}) ->
    {on, {Tries + 1, Misses + 1, Backoff}}.
