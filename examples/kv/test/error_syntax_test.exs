defmodule KV.ErrorSyntaxTest do
  # A bad option's sentence (:sluice.format_error/1, the ArgumentError of
  # {:sluice, opts}) quotes the values in Elixir's syntax where Elixir
  # runs: it said `<<"4000">>`, `{'Elixir.Chat',[]}` and
  # `{line,[{max_length,100}]}` to a user who wrote `"4000"`,
  # `{Chat, []}` and `{:line, max_length: 100}`. The options' names in the
  # prose stay bare (`bad value for option port`). docs/elixir.md.
  use ExUnit.Case, async: true

  defp refused(opts) do
    assert {:error, reason} = :sluice.start_listener(__MODULE__, opts)
    to_string(:sluice.format_error(reason))
  end

  test "a string where the port goes" do
    assert refused(port: "4000", handler: {KV, nil}) ==
             ~s(bad value for option port: "4000" \(expected an integer 0..65535 ) <>
               ~s{(0: any free port)); a string: give the integer, 4000 } <>
               ~s{(binary_to_integer/1; Elixir: String.to_integer/1)}
  end

  test "an unknown option, with what was meant" do
    assert refused(%{"port" => 4000, handler: {KV, nil}}) ==
             ~s(unknown option "port" \(option names are atoms: :port\))

    assert refused(port: 0, framming: :line, handler: {KV, nil}) ==
             "unknown option :framming (did you mean :framing?)"
  end

  test "a ranch option, with sluice's name for it" do
    assert refused(port: 0, shutdown: 5000, handler: {KV, nil}) =~
             ~r/^unknown option :shutdown \(ranch's: here shutdown_timeout, /

    assert refused(port: 0, transport: :ranch_tcp, handler: {KV, nil}) =~
             ~r/^bad value for option transport: :ranch_tcp \(expected .*\); :ranch_tcp is ranch's: here inet$/
  end

  test "a framing spec with an option it does not take" do
    assert refused(port: 0, handler: {KV, nil}, framing: {:line, max_length: 100}) =~
             ~r/^bad value for option framing: \{:line, \[max_length: 100\]\} \(unknown framing option :max_length; expected /
  end

  test "a handler module that is not there" do
    assert refused(port: 0, handler: {Chat, []}) ==
             "bad value for option handler: {Chat, []} (module Chat not found: " <>
               "not compiled, or not on the code path)"
  end

  # The same sentence as the message of the ArgumentError that a bad
  # option in a supervisor's child list raises.
  test "a bad option in a child list raises the sentence in Elixir's syntax" do
    e =
      assert_raise ArgumentError, fn ->
        Supervisor.start_link([{:sluice, port: "4000", handler: {KV, nil}}],
          strategy: :one_for_one)
      end

    assert e.message =~ ~r/^bad value for option port: "4000" \(expected an integer/
    assert e.reason == {:bad_option, :port, "4000"}
  end
end
