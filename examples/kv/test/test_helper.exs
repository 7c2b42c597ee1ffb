ExUnit.start()

defmodule KV.TestWait do
  @moduledoc false
  # True once `check` is, polled every 10 ms for at most `ms`.
  def wait_for(check, ms) do
    cond do
      check.() -> true
      ms <= 0 -> false
      true -> Process.sleep(10); wait_for(check, ms - 10)
    end
  end
end
