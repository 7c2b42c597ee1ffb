defmodule KV.MixProject do
  use Mix.Project

  def project do
    [
      app: :kv,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      deps: deps()
    ]
  end

  def application do
    [mod: {KV.Application, []}, extra_applications: [:logger]]
  end

  # sluice is a rebar3 application: mix builds it with rebar3 (MIX_REBAR3
  # names the one to use when mix cannot fetch its own, as offline).
  defp deps do
    [{:sluice, path: "../../apps/sluice", manager: :rebar3}]
  end
end
