defmodule KVTest do
  use ExUnit.Case, async: true
  import KV.TestWait

  # The application's listener (config/config.exs: port 0 in tests).
  defp connect(listener \\ KV) do
    %{port: port} = :sluice.info(listener)
    {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false, packet: :line])
    sock
  end

  defp ask(sock, line) do
    :ok = :gen_tcp.send(sock, line)
    {:ok, reply} = :gen_tcp.recv(sock, 0, 2000)
    reply
  end

  test "a value PUT by one client is what another client GETs" do
    a = connect()
    b = connect()
    assert ask(a, "PUT colour blue with spaces\n") == "OK\n"
    assert ask(b, "GET colour\n") == "blue with spaces\n"
    assert ask(b, "GET size\n") == "NOT_FOUND\n"
  end

  test "commands arrive as whole lines however the bytes are split" do
    sock = connect()
    # One command in three packets, then two commands in one.
    for part <- ["PU", "T split ", "ok\n"], do: :ok = :gen_tcp.send(sock, part)
    assert {:ok, "OK\n"} = :gen_tcp.recv(sock, 0, 2000)
    :ok = :gen_tcp.send(sock, "GET split\nGET nothing\n")
    assert {:ok, "ok\n"} = :gen_tcp.recv(sock, 0, 2000)
    assert {:ok, "NOT_FOUND\n"} = :gen_tcp.recv(sock, 0, 2000)
  end

  # A value is a part of the read it came in; kept in the table as it
  # was, it held that whole read (100 PUTs of 100 bytes, each pipelined
  # with 200 KB of GETs: 19 MB). The stored value holds only its own
  # bytes.
  test "a stored value does not hold the read it came in" do
    sock = connect()
    value = String.duplicate("v", 100)
    gets = List.duplicate("GET nothing-here\n", 12_000)
    :ok = :gen_tcp.send(sock, ["PUT pipelined ", value, ?\n | gets])
    assert {:ok, "OK\n"} = :gen_tcp.recv(sock, 0, 2000)
    [{_, stored}] = :ets.lookup(table(), "pipelined")
    assert stored == value
    assert :binary.referenced_byte_size(stored) == byte_size(value)
  end

  # The application's table: the one the listener's handler options name.
  defp table do
    {:ok, table} = :sluice.get_handler_opts(KV)
    table
  end

  test "an unknown command is answered, QUIT closes after the reply" do
    sock = connect()
    assert ask(sock, "FLY away\n") == "ERROR unknown command\n"
    assert ask(sock, "QUIT\n") == "BYE\n"
    assert {:error, :closed} = :gen_tcp.recv(sock, 0, 2000)
  end

  # Keyword options all the way down, as an Elixir user writes them:
  # {:sluice, opts} in a child list goes through :sluice.child_spec/1.
  test "a listener from a keyword list, with keyword framing options" do
    table = :ets.new(:kv_test, [:public])

    start_supervised!(
      {:sluice,
       name: :kv_short_lines,
       port: 0,
       handler: {KV, table},
       framing: {:line, max: 16},
       socket_opts: [nodelay: true]}
    )

    sock = connect(:kv_short_lines)
    assert ask(sock, "PUT k v\n") == "OK\n"
    # A line over max is a protocol error: the connection closes.
    :ok = :gen_tcp.send(sock, "PUT k " <> String.duplicate("v", 32) <> "\n")
    assert {:error, :closed} = :gen_tcp.recv(sock, 0, 2000)
    # The client sees the FIN before the server's process has ended and
    # counted the reason: wait for the count.
    assert wait_for(fn -> match?(%{close_reasons: %{protocol_error: 1}},
                                 :sluice.info(:kv_short_lines)) end, 2000)
  end

  # `[nodelay: false, buffer: 4096] ++ base`, the Elixir idiom for
  # overriding: the first of a repeated key wins in socket_opts as in the
  # options around it (the inet driver used to apply the last one).
  test "socket_opts: the first of a repeated key wins" do
    table = :ets.new(:kv_test, [:public])
    base = [buffer: 65536, nodelay: true]

    start_supervised!(
      {:sluice,
       name: :kv_override, port: 0, handler: {KV, table}, framing: :line,
       socket_opts: [nodelay: false, buffer: 4096] ++ base}
    )

    sock = connect(:kv_override)
    assert ask(sock, "PUT k v\n") == "OK\n"
    [conn] = :sluice.connections(:kv_override)
    # The connection process owns its socket (a port on the inet backend).
    [port] = Enum.filter(Port.list(), &(Port.info(&1, :connected) == {:connected, conn}))
    assert {:ok, [buffer: 4096, nodelay: false]} = :inet.getopts(port, [:buffer, :nodelay])
  end

  # A bad option in {:sluice, opts} raises an ArgumentError whose message
  # is :sluice.format_error/1's sentence (docs/elixir.md); it showed the
  # raw term ("argument error: {:bad_option, :port, 70000}"). The term is
  # the exception's :reason.
  test "a bad option raises an ArgumentError that says what was expected" do
    e = assert_raise ArgumentError, fn -> :sluice.child_spec(port: 70_000, handler: {KV, nil}) end
    assert e.message == to_string(:sluice.format_error({:bad_option, :port, 70_000}))
    assert e.message =~ "bad value for option port: 70000 (expected an integer 0..65535"
    assert e.reason == {:bad_option, :port, 70_000}

    assert_raise ArgumentError, ~r/^unknown option :prot \(did you mean :port\?\)/, fn ->
      Supervisor.child_spec({:sluice, prot: 1, handler: {KV, nil}}, [])
    end

    assert_raise ArgumentError, ~r/^bad value for option framing/, fn ->
      :sluice.child_spec(:kv_bad, handler: {KV, nil}, framing: {:line, max: -1})
    end
  end

  # Nested options are a keyword list or a map (docs/elixir.md): tls_opts
  # as a map used to be refused, where socket_opts and framing took one.
  # They are checked at start (for STARTTLS on the default transport), so
  # they need a certificate and its key: one made in memory, on P-256
  # (the default key of pkix_test_root_cert/2, on secp160k1 here, can sign
  # no TLS 1.3 handshake and is refused at start).
  test "tls_opts can be a map" do
    %{cert: cert, key: key} =
      :public_key.pkix_test_root_cert('kv test', key: {:namedCurve, :secp256r1})
    type = elem(key, 0)
    tls = %{verify: :verify_none, cert: cert, key: {type, :public_key.der_encode(type, key)}}
    spec = :sluice.child_spec(name: :kv_tls, handler: {KV, nil}, tls_opts: tls)
    assert %{start: {_, _, [:kv_tls, %{tls_opts: got}]}} = spec
    assert Enum.sort(got) == Enum.sort(Map.to_list(tls))
  end
end
