import Config

# Port 0 in tests: the OS picks a free one, :sluice.info/1 tells which.
config :kv, port: if(config_env() == :test, do: 0, else: 4040)
