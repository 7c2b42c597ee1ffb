defmodule KV do
  @moduledoc """
  A line-based key-value server on sluice: `PUT key value`, `GET key`,
  `QUIT`, one command a line. With `framing: :line` sluice hands
  `handle_data/2` one whole line at a time, without its `\\n`, however the
  client's bytes were split into packets.
  """
  @behaviour :sluice_handler

  @impl true
  def init(_conn, table), do: {:ok, table}

  @impl true
  def handle_data(line, table) do
    case String.split(line, " ", parts: 3) do
      ["PUT", key, value] -> {:reply, put(table, key, value), table}
      ["GET", key] -> {:reply, get(table, key), table}
      ["QUIT"] -> {:reply_close, "BYE\n", :normal, table}
      _ -> {:reply, "ERROR unknown command\n", table}
    end
  end

  # key and value are parts of the read they came in (up to 256 KiB of
  # pipelined commands): stored as they are, each would keep its whole
  # read alive in the table. Copied, they hold only their own bytes.
  defp put(table, key, value) do
    true = :ets.insert(table, {:binary.copy(key), :binary.copy(value)})
    "OK\n"
  end

  defp get(table, key) do
    case :ets.lookup(table, key) do
      [{^key, value}] -> [value, ?\n]
      [] -> "NOT_FOUND\n"
    end
  end
end
