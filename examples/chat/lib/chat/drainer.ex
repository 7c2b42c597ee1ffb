defmodule Chat.Drainer do
  @moduledoc "Drains listeners when its supervisor stops it (docs/elixir.md, Draining)."
  use GenServer

  def start_link({listeners, ms}), do: GenServer.start_link(__MODULE__, {listeners, ms})

  @impl true
  def init(state) do
    Process.flag(:trap_exit, true)
    {:ok, state}
  end

  # At once: one after the other would take the sum of the deadlines.
  @impl true
  def terminate(_reason, {listeners, ms}) do
    listeners
    |> Enum.map(fn l -> Task.async(fn -> :sluice.drain(l, ms) end) end)
    |> Task.await_many(ms + 1_000)
  end
end
