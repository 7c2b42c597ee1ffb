#!/bin/sh
# sluice's defaults against ranch 2.2 and thousand_island 1.5 (neither is a
# Debian package, so neither is in `make bench`): rotating rounds of
# bench/ab.escript on the planners' three cells (lock-step, pipelined, 200 connections), each library with a careful
# handler of the ack protocol (ranch_peer.erl, ti_peer.ex; the parsing is
# sluice_peer_gen_tcp's, so only the libraries' loops differ).
#
#   bench/other-libraries/run.sh EBIN ROUNDS SECS lockstep|pipeline|conns200
#
# EBIN holds ranch's and telemetry's modules (erlc), thousand_island's and
# TiPeer's (elixirc), ranch_peer's: see README.md. Run from the repository
# root after `make build`.
set -e
EBIN=$1; R=$2; S=$3; C=$4
SL=_build/default/lib/sluice_load/ebin
EX=$(dirname "$(dirname "$(readlink -f "$(command -v elixir)")")")/lib
case $C in
  lockstep) ACK=each; export ECORE=0; ENG="--scenario lockstep --conns 1 --threads 1";;
  pipeline) ACK=last; export ECORE=1; ENG="--scenario pipeline --conns 1 --threads 1";;
  conns200) ACK=last; export ECORE=1; ENG="--scenario pipeline --conns 200 --window 1000 --threads 1";;
  *) echo "usage: $0 EBIN ROUNDS SECS lockstep|pipeline|conns200" >&2; exit 2;;
esac
exec bench/ab.escript "$R" "$S" \
  "sluice=bin/sluice serve --ip 127.0.0.1 --port 0 --protocol ack --ack $ACK" \
  "ranch=erl +Bi -noshell -noinput -pa $EBIN -pa $SL -run ranch_peer main ack $ACK" \
  "thousand_island=erl +Bi -noshell -noinput -pa $EBIN -pa $SL -pa $EX/elixir/ebin -pa $EX/logger/ebin -eval 'application:ensure_all_started(elixir), application:ensure_all_started(logger)' -run Elixir.TiPeer main ack $ACK" \
  -- $ENG --ack $ACK
