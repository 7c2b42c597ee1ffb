defmodule Chat.MixProject do
  use Mix.Project

  def project do
    [
      app: :chat,
      version: "0.1.0",
      elixir: "~> 1.14",
      elixirc_paths: if(Mix.env() == :test, do: ["lib", "test/support"], else: ["lib"]),
      # the TLS listener's certificate, made before the application starts
      aliases: [certs: &certs/1, test: ["certs", "test"], run: ["certs", "run"]],
      deps: [{:sluice, path: "../../apps/sluice", manager: :rebar3}]
    ]
  end

  def application, do: [mod: {Chat.Application, []}, extra_applications: [:logger, :ssl]]

  # Throwaway certificates (a CA, and a server certificate for localhost).
  defp certs(_args) do
    script = Path.expand("../../bench/certs.sh", __DIR__)
    {_, 0} = System.cmd("sh", [script, Path.expand("_build/certs", __DIR__)])
  end
end
