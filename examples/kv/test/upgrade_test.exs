defmodule UpgradeTest do
  # docs/elixir.md: a handler upgraded in place (its code_change/3 turns
  # the state into the new version's shape), in the page's order:
  # suspend, load, :sys.change_code/4, resume; for a listener's live
  # connections and for the parked ones its connection supervisors hold.
  # And why the order matters, and what a crash leaves in Elixir's log.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog
  import KV.TestWait

  # Version 1 counts lines in an integer; version 2 keeps a map, and
  # converts version 1's state.
  @v1 """
  defmodule KV.Counter do
    @behaviour :sluice_handler
    def init(_conn, _opts), do: {:ok, 0}
    def handle_data(_line, n), do: {:reply, "\#{n + 1}\\n", n + 1}
  end
  """
  @v2 """
  defmodule KV.Counter do
    @behaviour :sluice_handler
    def init(_conn, _opts), do: {:ok, %{n: 0}}
    def handle_data(_line, s), do: {:reply, "v2 \#{s.n + 1}\\n", %{s | n: s.n + 1}}
    def code_change(_old_vsn, n, _extra) when is_integer(n), do: {:ok, %{n: n}}
  end
  """

  # As recompile/0 does in iex: the module's new code replaces the old.
  defp load(source) do
    Code.put_compiler_option(:ignore_module_conflict, true)
    Code.compile_string(source)
  after
    Code.put_compiler_option(:ignore_module_conflict, false)
  end

  defp connect(name) do
    %{port: port} = :sluice.info(name)
    {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false, packet: :line])
    sock
  end

  defp ask(sock) do
    :ok = :gen_tcp.send(sock, "x\n")
    :gen_tcp.recv(sock, 0, 2000)
  end

  setup do
    on_exit(fn -> :code.purge(KV.Counter); :code.delete(KV.Counter); :code.purge(KV.Counter) end)
  end

  test "suspend, load, change_code, resume: live and parked connections go on with the new state" do
    load(@v1)
    live = start_supervised!({:sluice, name: :kv_upgrade_live, port: 0, framing: :line,
                              handler: {KV.Counter, []}}, id: :live)
    parking = start_supervised!({:sluice, name: :kv_upgrade_parked, port: 0, framing: :line,
                                 handler: {KV.Counter, []}, park_after: 100}, id: :parking)
    a = connect(:kv_upgrade_live)
    b = connect(:kv_upgrade_parked)
    assert {{:ok, "1\n"}, {:ok, "2\n"}} = {ask(a), ask(a)}
    assert {{:ok, "1\n"}, {:ok, "2\n"}} = {ask(b), ask(b)}
    assert wait_for(fn -> :sluice.info(:kv_upgrade_parked).parked == 1 end, 5000)

    # The page's snippet, for each listener.
    upgraded =
      for {listener_sup, name} <- [{live, :kv_upgrade_live}, {parking, :kv_upgrade_parked}] do
        {_, conns_sups, _, _} =
          List.keyfind(Supervisor.which_children(listener_sup), :sluice_conns_sup_sup, 0)
        sups = for {_, sup, _, _} <- Supervisor.which_children(conns_sups), do: sup
        conns = :sluice.connections(name)
        Enum.each(sups ++ conns, &:sys.suspend/1)
        {conns, sups}
      end

    # Lines that come while the connections are suspended wait for them.
    :ok = :gen_tcp.send(a, "x\n")
    :ok = :gen_tcp.send(b, "x\n")
    load(@v2)

    for {conns, sups} <- upgraded do
      for pid <- conns ++ sups, do: assert(:ok = :sys.change_code(pid, KV.Counter, :undefined, []))
      Enum.each(conns ++ sups, &:sys.resume/1)
    end

    assert {:ok, "v2 3\n"} = :gen_tcp.recv(a, 0, 2000)
    assert {:ok, "v2 3\n"} = :gen_tcp.recv(b, 0, 2000)
    assert {:ok, "v2 4\n"} = ask(b)
    assert %{n: 4} = :sys.get_state(hd(:sluice.connections(:kv_upgrade_parked)))
    assert :sluice.info(:kv_upgrade_live).close_reasons.crashed == 0
    assert :sluice.info(:kv_upgrade_parked).close_reasons.crashed == 0
  end

  # Why suspend comes first: a line between the load and the code change
  # reaches the new code with the old state.
  test "recompiled before it is suspended, a connection that runs meanwhile crashes" do
    load(@v1)
    start_supervised!({:sluice, name: :kv_upgrade_late, port: 0, framing: :line,
                       handler: {KV.Counter, []}})
    a = connect(:kv_upgrade_late)
    assert {:ok, "1\n"} = ask(a)
    load(@v2)
    log =
      capture_log(fn ->
        assert {:error, :closed} = ask(a)
        assert wait_for(fn -> :sluice.info(:kv_upgrade_late).close_reasons.crashed == 1 end, 2000)
      end)

    # sluice's line of the crash (below)
    assert log =~ "handler KV.Counter crashed on a connection"
  end

  # docs/elixir.md "When a handler crashes": a crash is in Elixir's log
  # without handle_error/2 (sluice's line; it left nothing there, its only
  # report being a SASL one), and the page's handle_error/2 adds its own.
  test "a crash is in Elixir's log, and handle_error/2 can add to it" do
    load("""
    defmodule KV.Crashing do
      @behaviour :sluice_handler
      require Logger
      def init(_conn, log?), do: {:ok, log?}
      def handle_data(_line, _log?), do: raise("boom")

      def handle_error({:crash, kind, reason, stack}, true),
        do: Logger.error("connection crashed: " <> Exception.format(kind, reason, stack))

      def handle_error(_reason, _log?), do: :ok
    end
    """)

    for log? <- [false, true] do
      name = {:kv_crash, log?}
      start_supervised!({:sluice, name: name, port: 0, framing: :line,
                         handler: {KV.Crashing, log?}}, id: name)
      log =
        capture_log(fn ->
          assert {:error, :closed} = ask(connect(name))
          assert wait_for(fn -> :sluice.info(name).close_reasons.crashed == 1 end, 2000)
        end)

      assert log =~ "handler KV.Crashing crashed on a connection from 127.0.0.1:"
      assert log =~ "** (RuntimeError) boom"
      assert log =~ "connection crashed: ** (RuntimeError) boom" == log?
    end
  end
end
