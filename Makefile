# sluice: build, test, check and benchmark. `make` builds everything,
# including the C load engine and reference server; run as root on a fresh
# Debian machine it first installs what is missing.
SHELL := /bin/bash
REBAR ?= rebar3
CSRC := apps/sluice_load/c_src

# Debian packages the project needs (hex is unreachable: libraries come from
# Debian). erlang-nox brings inets, runtime_tools, os_mon and the others.
DEB_PACKAGES := erlang-nox erlang-dev erlang-eunit erlang-common-test \
	erlang-proper erlang-dialyzer erlang-tools erlang-edoc rebar3 gcc make \
	libc6-dev libssl-dev openssl elixir

# The Elixir examples (examples/kv, examples/chat) build apps/sluice as a
# mix path dependency: mix runs rebar3 for it, this one (mix cannot fetch
# its own offline), and rebar3's own build state goes under each
# example's _build rather than into apps/sluice.
MIX = MIX_ENV=test MIX_REBAR3=$(shell command -v $(REBAR)) \
	REBAR_BASE_DIR=$(CURDIR)/$(1)/_build/rebar3 mix

.PHONY: all deps build c certs test test-elixir check docs bench bench-quick soak clean \
	distclean

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing Debian packages; run as root:"; \
	    echo "  apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

# rebar3 compile builds the C programs first (a pre_hook of sluice_load
# that runs $(CSRC)/Makefile, the one C build).
build: deps
	$(REBAR) compile

# The C programs alone.
c: deps
	$(MAKE) -j"$$(nproc)" -C $(CSRC)

# Throwaway TLS certificates (a CA, an ECDSA and an RSA server certificate
# for localhost/127.0.0.1) in _build/certs; never committed.
certs: deps
	bench/certs.sh

# EUnit (pure functions), the Elixir example's ExUnit tests, then the
# Common Test suites (which include the PropEr properties).
test: build
	$(REBAR) eunit
	$(MAKE) --no-print-directory test-elixir
	$(REBAR) ct 2>&1 | tee _build/ct.log
	@# One plain closing line for CI: "N passed, N failed", after each
	@# failed case and the start of its reason (CI shows only the tail of
	@# the output, where the cases' own lines are long gone).
	@awk '{gsub(/\033\[[0-9;]*m/, "")} \
	      /==> .*FAILED/ {n = 8} \
	      /^(%%% [^=]*|\.+)$$/ {n = 0} \
	      n > 0 {fails = fails $$0 "\n"; n--} \
	      /^All [0-9]+ tests passed/ {print "ct: " $$2 " passed, 0 failed"; ok=1} \
	      /^Skipped [0-9]+ .*Passed [0-9]+ tests?/ {match($$0, /Passed [0-9]+/); print "ct: " substr($$0, RSTART + 7, RLENGTH - 7) " passed, 0 failed, " $$2 " skipped"; ok=1} \
	      /^Failed [0-9]+ tests?\./ {printf "%s", fails; match($$0, /Passed [0-9]+/); print "ct: " substr($$0, RSTART + 7, RLENGTH - 7) " passed, " $$2 " failed"; exit 1} \
	      END {if (!ok) exit 1}' _build/ct.log

# The examples' ExUnit tests (a few seconds; the first run also builds
# apps/sluice for mix, and examples/chat its TLS certificates).
test-elixir: deps
	cd examples/kv && $(call MIX,examples/kv) test
	cd examples/chat && $(call MIX,examples/chat) test

# The library's API reference (edoc) in apps/sluice/doc, from its doc
# comments and apps/sluice/doc/overview.edoc; any edoc warning fails it.
# Modules marked @private are left out (apps/sluice/README.md says which
# modules are the public API).
DOCS_EVAL := try \
	  {ok, [{application, sluice, App}]} = file:consult("apps/sluice/src/sluice.app.src"), \
	  ok = edoc:application(sluice, "apps/sluice", \
	                        [{dir, "apps/sluice/doc"}, {def, [{vsn, proplists:get_value(vsn, App)}]}]), \
	  halt(0) \
	catch C:R -> io:format("edoc failed: ~p:~p~n", [C, R]), halt(1) end.

docs: build
	@set -o pipefail; erl -noshell -pa _build/default/lib/sluice/ebin -eval '$(DOCS_EVAL)' 2>&1 \
	  | tee _build/docs.log
	@if grep -qi warning _build/docs.log; then echo "make docs: edoc warnings (above)"; exit 1; fi
	@echo "API reference: apps/sluice/doc/index.html"

check: build
	$(REBAR) xref
	$(REBAR) dialyzer

# The benchmark matrix (QUICK=1: a smaller one).
bench: build
	bin/sluice bench $(if $(QUICK),--quick,)

# Mixed load and abuse for MINUTES (default 10), outside `make test'.
soak: build
	bin/sluice soak --minutes $(or $(MINUTES),10)

clean:
	$(REBAR) clean -a
	$(MAKE) -C $(CSRC) clean

distclean: clean
	rm -rf _build examples/kv/_build examples/chat/_build
