defmodule Chat.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    env = Application.get_all_env(:chat)
    handler = {Chat, %{ping_ms: env[:ping_ms]}}
    tls_opts = [certfile: Path.join(env[:certs], "server.pem"),
                keyfile: Path.join(env[:certs], "server.key")]

    children = [
      {Registry, keys: :unique, name: Chat.Nicks},
      {Registry, keys: :duplicate, name: Chat.Rooms},
      {:sluice, name: Chat.TCP, port: env[:port], handler: handler, framing: {:line, max: 4096}},
      {:sluice, name: Chat.TLS, port: env[:tls_port], handler: handler, framing: {:line, max: 4096},
       transport: :ssl, tls_opts: tls_opts},
      # Last, so stopped first: drains both listeners, at once, before
      # they stop (its shutdown outlasts the drain).
      :sluice.drain_child_spec([Chat.TCP, Chat.TLS], 2_000)
    ]

    Supervisor.start_link(children, strategy: :one_for_one, name: Chat.Supervisor)
  end
end
