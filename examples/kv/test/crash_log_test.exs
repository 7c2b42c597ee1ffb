defmodule KV.CrashLogTest do
  # capture_log/1 takes every process's lines: not beside other tests.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog

  # A handler whose handle_data/2 raises.
  defmodule Boom do
    @behaviour :sluice_handler
    def init(_conn, opts), do: {:ok, opts}
    def handle_data(_data, _state), do: raise("boom from the handler")
  end

  # With Logger's defaults (handle_sasl_reports: false), a connection
  # whose handler raised logged nothing: its only report was proc_lib's
  # crash report, which Logger drops. A thousand_island handler's crash is
  # logged; so is sluice's, in Elixir's words, once.
  test "a handler that raises is logged by Logger's defaults" do
    {:ok, _} = :sluice.start_listener(__MODULE__, port: 0, handler: {Boom, nil})
    on_exit(fn -> :sluice.stop_listener(__MODULE__) end)
    %{port: port} = :sluice.info(__MODULE__)

    log =
      capture_log(fn ->
        {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false])
        :ok = :gen_tcp.send(sock, "hi\n")
        assert {:error, _} = :gen_tcp.recv(sock, 0, 2000)
        # counted once the process has exited, after its line
        assert KV.TestWait.wait_for(fn -> :sluice.info(__MODULE__).close_reasons.crashed == 1 end, 2000)
        Logger.flush()
      end)

    assert log =~ "handler KV.CrashLogTest.Boom crashed on a connection from 127.0.0.1:"
    assert log =~ "** (RuntimeError) boom from the handler"
    assert length(String.split(log, "boom from the handler")) == 2
  end
end
