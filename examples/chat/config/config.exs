import Config

test? = config_env() == :test

config :chat,
  port: if(test?, do: 0, else: 6667),
  tls_port: if(test?, do: 0, else: 6697),
  # a quiet client is sent PING after this long, and closed after twice it
  ping_ms: 30_000,
  certs: Path.expand("../_build/certs", __DIR__)
