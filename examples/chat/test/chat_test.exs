defmodule ChatTest do
  # One application for every test, stopped by the last: not async.
  use ExUnit.Case

  defp connect(listener \\ Chat.TCP) do
    %{port: port} = :sluice.info(listener)
    {:ok, sock} = :gen_tcp.connect({127, 0, 0, 1}, port, [:binary, active: false, packet: :line])
    assert {:ok, "HELLO\n"} = :gen_tcp.recv(sock, 0, 2000)
    sock
  end

  defp connect_tls do
    %{port: port} = :sluice.info(Chat.TLS)
    ca = String.to_charlist(Path.join(Application.fetch_env!(:chat, :certs), "ca.pem"))
    opts = [:binary, active: false, packet: :line, verify: :verify_peer, cacertfile: ca]
    {:ok, sock} = :ssl.connect(~c"localhost", port, opts, 5000)
    assert {:ok, "HELLO\n"} = :ssl.recv(sock, 0, 2000)
    sock
  end

  defp ask(sock, line) do
    :ok = :gen_tcp.send(sock, [line, ?\n])
    {:ok, reply} = :gen_tcp.recv(sock, 0, 2000)
    reply
  end

  defp login(nick, room) do
    sock = connect()
    assert ask(sock, "NICK " <> nick) == "OK\n"
    assert ask(sock, "JOIN " <> room) == "OK\n"
    sock
  end

  test "what one member says reaches the others, over TCP and TLS" do
    alice = login("alice", "lobby")
    bob = connect_tls()
    :ok = :ssl.send(bob, "NICK bob\nJOIN lobby\n")
    assert {:ok, "OK\n"} = :ssl.recv(bob, 0, 2000)
    assert {:ok, "OK\n"} = :ssl.recv(bob, 0, 2000)
    assert ask(alice, "SAY lobby hi there") == "OK\n"
    assert {:ok, "MSG lobby alice hi there\n"} = :ssl.recv(bob, 0, 2000)
    assert ask(alice, "WHO lobby") == "WHO lobby alice bob\n"
    assert ask(connect(), "NICK alice") == "ERR nick taken\n"
  end

  test "other processes call a connection by its nick" do
    sock = login("carol", "ops")
    assert %{rooms: ["ops"], tls: false} = Chat.whois("carol")
    assert :ok = Chat.kick("carol", "spam")
    assert {:ok, "KICKED spam\n"} = :gen_tcp.recv(sock, 0, 2000)
    assert {:error, :closed} = :gen_tcp.recv(sock, 0, 2000)
    # gone (:noproc), or ending as the call came (:normal)
    assert {reason, _} = catch_exit(Chat.whois("carol"))
    assert reason in [:noproc, :normal]
  end

  test "a quiet client is pinged, then closed; telemetry says why" do
    test = self()
    :ok = :telemetry.attach(make_ref(), [:sluice, :connection, :stop],
                            fn _, _, meta, _ -> send(test, {:stop, meta}) end, nil)
    # a listener of the test's own, pinging after 100 ms
    start_supervised!({:sluice, name: :quiet, port: 0, handler: {Chat, %{ping_ms: 100}},
                       framing: :line})
    sock = connect(:quiet)
    assert {:ok, "PING\n"} = :gen_tcp.recv(sock, 0, 2000)
    assert ask(sock, "PONG") == "PING\n"
    assert {:ok, "ERR ping timeout\n"} = :gen_tcp.recv(sock, 0, 2000)
    assert {:error, :closed} = :gen_tcp.recv(sock, 0, 2000)
    assert_receive {:stop, %{listener: :quiet, reason: :ping_timeout}}, 2000
  end

  test "a line over the framing's max closes the connection" do
    sock = connect()
    :ok = :gen_tcp.send(sock, String.duplicate("x", 5000))
    assert {:error, :closed} = :gen_tcp.recv(sock, 0, 2000)
  end

  test "stopping the application drains both listeners: every client is told" do
    tcp = connect()
    tls = connect_tls()
    :ok = Application.stop(:chat)
    assert {:ok, "SERVER shutting down\n"} = :gen_tcp.recv(tcp, 0, 2000)
    assert {:ok, "SERVER shutting down\n"} = :ssl.recv(tls, 0, 2000)
    {:ok, _} = Application.ensure_all_started(:chat)
  end
end
