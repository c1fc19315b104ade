#!/usr/bin/env bash
# Installs what `make bench` needs beyond `make deps` (scripts/setup-deps.sh,
# which it runs first for rdma-core, perftest and the Rust components):
# iperf3 for the loopback TCP baseline, GNU time for the CPU seconds of each
# process, python3-matplotlib (Debian's, used through /usr/bin/python3) for
# the plot, a C compiler for the scale benchmarks, and the interop VM's
# packages for the comparison against rxe (bench/rxe_vm.sh; not fatal:
# without them the report says that comparison was not measured). Kept apart from
# `make test`'s dependencies on purpose: CI does not run benchmarks.
# Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-deps.sh

packages="iperf3 time python3-matplotlib gcc libc6-dev"
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bench/setup-deps: please install: $missing (e.g. sudo apt-get install $missing)" >&2
    exit 1
  fi
  apt-get update -qq
  # iperf3's package asks whether to start a daemon; noninteractive answers
  # no, which is what we want (the benchmark starts its own server).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

# The VM of the comparison against kernel rxe (tests/interop/deps.sh).
# bench/run.sh runs in a network namespace of its own, where apt cannot
# reach anything, so they are installed here.
. tests/interop/deps.sh
ensure_host_deps || echo "bench/setup-deps: the comparison against rxe (bench/rxe_vm.sh) will not run" >&2
