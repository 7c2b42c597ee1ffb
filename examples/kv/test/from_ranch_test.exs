defmodule FromRanchTest do
  # docs/from-ranch.md's Elixir blocks, run as the page shows them: the
  # handler module is compiled from the page's text, the snippets are
  # evaluated in the page's order with the bindings of the ones before,
  # and clients do between them what the page says ("With clients
  # connected"). (The page's Erlang blocks: sluice_from_ranch_SUITE.)
  use ExUnit.Case, async: false
  import KV.TestWait

  @page Path.expand("../../../docs/from-ranch.md", __DIR__)

  defp elixir_blocks do
    Regex.scan(~r/^```elixir\n(.*?)^```$/ms, File.read!(@page), capture: :all_but_first)
    |> Enum.map(fn [block] -> block end)
  end

  defp connect(port) do
    {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false, packet: :line])
    sock
  end

  defp recv(sock), do: :gen_tcp.recv(sock, 0, 2000)

  setup_all do
    [handler] = Enum.filter(elixir_blocks(), &String.starts_with?(&1, "defmodule"))
    Code.compile_string(handler, @page)
    :ok
  end

  test "the thousand_island handler, ported, runs as the page shows" do
    {modules, snippets} = Enum.split_with(elixir_blocks(), &String.starts_with?(&1, "defmodule"))
    assert [_handler] = modules
    assert [start, connected] = snippets
    on_exit(fn -> :sluice.stop_listener(:chat) end)

    {_, binding} = Code.eval_string(start)
    port = Keyword.fetch!(binding, :port)

    a = connect(port)
    assert {:ok, "hello 127.0.0.1\n"} = recv(a)
    b = connect(port)
    assert {:ok, "hello 127.0.0.1\n"} = recv(b)
    # b is registered once its greeting is out: a's line reaches it.
    :ok = :gen_tcp.send(a, "anyone th")
    :ok = :gen_tcp.send(a, "ere?\n")
    assert {:ok, "anyone there?\n"} = recv(b)
    :ok = :gen_tcp.send(b, "QUIT\n")
    assert {:ok, "bye\n"} = recv(b)
    assert {:error, :closed} = recv(b)
    # b's connection has ended (connections/1 lists it until it has).
    assert wait_for(fn -> :sluice.info(:chat).connections == 1 end, 2000)

    # The drain's goodbye, then the client closes, as a client does.
    test = self()

    spawn_link(fn ->
      send(test, {:drained, recv(a), recv(a)})
      :gen_tcp.close(a)
    end)

    {_, _} = Code.eval_string(connected, binding)
    assert_receive {:drained, {:ok, "server going down\n"}, {:error, :closed}}, 5000
    assert {:error, :not_found} = :sluice.info(:chat)
  end

  # The lines a connection has had, through :sluice.call/3; and what its
  # handle_timeout/1 says (the page's timeout is a minute: called here).
  test "the handler's stats answer :sluice.call/3, and handle_timeout/1 says goodbye" do
    {:ok, _} = Registry.start_link(keys: :duplicate, name: :from_ranch_registry)

    {:ok, _} =
      :sluice.start_listener(:chat_stats, port: 0, framing: :line,
        handler: {Chat.Handler, :from_ranch_registry})

    on_exit(fn -> :sluice.stop_listener(:chat_stats) end)
    %{port: port} = :sluice.info(:chat_stats)
    a = connect(port)
    assert {:ok, "hello 127.0.0.1\n"} = recv(a)
    :ok = :gen_tcp.send(a, "one\ntwo\n")
    [pid] = :sluice.connections(:chat_stats)
    assert wait_for(fn -> :sluice.call(pid, :stats, 5000) == %{lines: 2} end, 2000)
    # (compiled from the page at run time: no alias for the compiler to check)
    handler = Module.concat([Chat, Handler])
    assert {:reply_close, "idle too long\n", :idle, _} = handler.handle_timeout(%{lines: 2})
  end
end
