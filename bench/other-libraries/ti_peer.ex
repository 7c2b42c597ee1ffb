defmodule TiPeer do
  # Scratch: the ack/ping/echo protocol on thousand_island 1.5, as its
  # handler behaviour has it (handle_data/3 per chunk, Socket.send).
  use ThousandIsland.Handler

  @impl ThousandIsland.Handler
  def handle_connection(_socket, {proto, ack}), do: {:continue, :sluice_peer_gen_tcp.init_state(proto, ack)}

  @impl ThousandIsland.Handler
  def handle_data(data, socket, st) do
    case :sluice_peer_gen_tcp.handle(data, st) do
      {:close, r} -> ThousandIsland.Socket.send(socket, r); {:close, st}
      {"", st2} -> {:continue, st2}
      {r, st2} -> ThousandIsland.Socket.send(socket, r); {:continue, st2}
    end
  end

  def main([proto, ack]) do
    {:ok, _} = Application.ensure_all_started(:telemetry)
    {:ok, pid} = ThousandIsland.start_link(port: 0, handler_module: TiPeer,
      handler_options: {List.to_atom(proto), List.to_atom(ack)}, num_acceptors: 10,
      transport_options: [ip: {127,0,0,1}, backlog: 4096, nodelay: true, buffer: 16384])
    {:ok, {_, port}} = ThousandIsland.listener_info(pid)
    IO.puts("listening on 127.0.0.1:#{port}")
    Process.sleep(:infinity)
  end
end
