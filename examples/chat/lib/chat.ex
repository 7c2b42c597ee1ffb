defmodule Chat do
  @moduledoc """
  A chat with rooms, one command a line (`framing: :line`):

      NICK name | JOIN room | SAY room text | WHO room | PING | QUIT

  The other members of a room get `MSG room nick text`. Other processes
  find a connection by its nick (`whois/1`, `kick/2`). A client quiet for
  `ping_ms` is sent `PING`; quiet for as long again, it is closed.
  """
  @behaviour :sluice_handler

  @impl true
  def init(conn, %{ping_ms: ping_ms}) do
    # `tls` is in `conn` only on a TLS connection: conn[:tls], not conn.tls
    state = %{nick: nil, rooms: [], tls: conn[:tls] != nil, pinged: false}
    # persistent: every later result without a timeout keeps this one
    {:reply, "HELLO\n", state, {:persistent, ping_ms}}
  end

  @impl true
  def handle_data(line, state) do
    state = %{state | pinged: false}

    case String.split(line, " ", parts: 3) do
      ["NICK", nick] -> nick(nick, state)
      ["JOIN", room] -> join(room, state)
      ["SAY", room, text] -> say(room, text, state)
      ["WHO", room] -> {:reply, ["WHO ", room, who(room), ?\n], state}
      ["PING"] -> {:reply, "PONG\n", state}
      ["PONG"] -> {:ok, state}
      ["QUIT"] -> {:reply_close, "BYE\n", :normal, state}
      _ -> {:reply, "ERR unknown command\n", state}
    end
  end

  # What the other members said (say/3): sent from this connection.
  @impl true
  def handle_info({:msg, room, nick, text}, state),
    do: {:reply, ["MSG ", room, ?\s, nick, ?\s, text, ?\n], state}

  # The caller's answer is :sluice.reply/2's; a {:reply, ...} result
  # would go to the client.
  @impl true
  def handle_call(:whois, from, state) do
    :ok = :sluice.reply(from, Map.take(state, [:rooms, :tls]))
    {:ok, state}
  end

  def handle_call({:kick, why}, from, state) do
    :ok = :sluice.reply(from, :ok)
    {:reply_close, ["KICKED ", why, ?\n], :kicked, state}
  end

  @impl true
  def handle_timeout(%{pinged: false} = state), do: {:reply, "PING\n", %{state | pinged: true}}
  def handle_timeout(state), do: {:reply_close, "ERR ping timeout\n", :ping_timeout, state}

  @impl true
  def handle_drain(state), do: {:reply_close, "SERVER shutting down\n", :drained, state}

  def whois(nick), do: :sluice.call(via(nick), :whois, 1000)
  def kick(nick, why), do: :sluice.call(via(nick), {:kick, why}, 1000)

  defp via(nick), do: {:via, Registry, {Chat.Nicks, nick}}

  # Names kept beyond the callback are copied: as they came, each is a
  # part of its read and would keep the whole read alive.
  defp nick(nick, %{nick: nil} = state) do
    case Registry.register(Chat.Nicks, :binary.copy(nick), nil) do
      {:ok, _} -> {:reply, "OK\n", %{state | nick: :binary.copy(nick)}}
      {:error, {:already_registered, _}} -> {:reply, "ERR nick taken\n", state}
    end
  end

  defp nick(_nick, state), do: {:reply, "ERR nick already set\n", state}

  defp join(_room, %{nick: nil} = state), do: {:reply, "ERR no nick\n", state}

  defp join(room, state) do
    room = :binary.copy(room)
    if room not in state.rooms, do: {:ok, _} = Registry.register(Chat.Rooms, room, state.nick)
    {:reply, "OK\n", %{state | rooms: Enum.uniq([room | state.rooms])}}
  end

  defp say(room, text, state) do
    if room in state.rooms do
      msg = {:msg, room, state.nick, text}
      me = self()

      Registry.dispatch(Chat.Rooms, room, fn members ->
        for {pid, _} <- members, pid != me, do: send(pid, msg)
      end)

      {:reply, "OK\n", state}
    else
      {:reply, "ERR not in room\n", state}
    end
  end

  defp who(room), do: Enum.sort(for {_, nick} <- Registry.lookup(Chat.Rooms, room), do: [?\s, nick])
end
