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

  # Handlers ported from a GenServer or from thousand_island.
  defmodule Habits do
    @behaviour :sluice_handler
    def init(_conn, opts), do: {:ok, opts}
    def handle_data("noreply", state), do: {:noreply, state}
    def handle_data("continue", state), do: {:continue, state}
    def handle_data(_, state), do: {:ok, state}
    def handle_call(:ask, _from, state), do: {:reply, :answer, state}
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

  # "bad return value: {..., {:noreply, %{}}}" said that the result was
  # wrong, not which one sluice wanted: the line now says it, in Elixir.
  test "another behaviour's result is logged with sluice's in its place" do
    {:ok, _} = :sluice.start_listener(Habits, port: 0, handler: {Habits, %{}}, framing: :line)
    on_exit(fn -> :sluice.stop_listener(Habits) end)
    %{port: port} = :sluice.info(Habits)

    crash = fn line ->
      {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false])
      :ok = :gen_tcp.send(sock, line)
      assert {:error, _} = :gen_tcp.recv(sock, 0, 2000)
    end

    log =
      capture_log(fn ->
        crash.("noreply\n")
        crash.("continue\n")
        # their processes gone (the client sees the close before the
        # process ends): the one connection below is the third
        assert KV.TestWait.wait_for(fn -> :sluice.info(Habits).close_reasons.crashed == 2 end, 2000)
        {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false])
        assert KV.TestWait.wait_for(fn -> length(:sluice.connections(Habits)) == 1 end, 2000)
        [pid] = :sluice.connections(Habits)
        assert {{:bad_return_value, {Habits, :handle_call, _}}, _} = catch_exit(:sluice.call(pid, :ask, 2000))
        assert {:error, _} = :gen_tcp.recv(sock, 0, 2000)
        assert KV.TestWait.wait_for(fn -> :sluice.info(Habits).close_reasons.crashed == 3 end, 2000)
        Logger.flush()
      end)

    assert log =~ "{:noreply, state} is a GenServer's result: a sluice callback returns {:ok, state}"
    # once: the hint's own line, for the logs that keep OTP's crash
    # reports (an Erlang node's), is not in Logger's
    assert length(String.split(log, "{:noreply, state} is a GenServer's result")) == 2
    assert log =~ "{:continue, state} is a thousand_island handler's result: here {:ok, state}"
    assert log =~ "answer the caller with :sluice.reply(from, reply) and return {:ok, state}"
  end
end
