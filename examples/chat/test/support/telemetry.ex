defmodule :telemetry do
  @moduledoc false
  # Offline (no hex.pm) a stand-in for the telemetry package's
  # attach/4 and execute/3: a project would depend on {:telemetry, "~> 1.2"}.
  def attach(id, event, fun, config) do
    :persistent_term.put({__MODULE__, event}, [{id, fun, config} | handlers(event)])
  end

  def execute(event, measurements, metadata) do
    for {_id, fun, config} <- handlers(event), do: fun.(event, measurements, metadata, config)
    :ok
  end

  defp handlers(event), do: :persistent_term.get({__MODULE__, event}, [])
end
