defmodule KV.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    # The table belongs to the process that runs start/2, which lives as
    # long as the application: connections come and go, the data stays.
    table = :ets.new(KV, [:public, read_concurrency: true, write_concurrency: true])

    children = [
      # :sluice.child_spec/1: the listener is a supervisor in our tree.
      {:sluice,
       name: KV, port: Application.fetch_env!(:kv, :port), handler: {KV, table}, framing: :line},
      # Last, so stopped first: when the application stops (a release's
      # stop, SIGTERM), KV's clients get up to 5 s to finish, then a FIN.
      :sluice.drain_child_spec([KV], 5_000)
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: KV.Supervisor)
  end
end
