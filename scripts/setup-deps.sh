#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine:
# rdma-core's libraries and programs (the provider links libibverbs; the
# tests run ibverbs-utils, perftest, and rdmacm-utils and qperf over
# rdma_cm, and iperf over rsockets through librspreload; iproute2 and ethtool set up the
# network namespaces of root tests; tshark decodes the capture test's
# pcap files; UCX, libfabric and Open MPI, and cmake and libclang for the
# Rust bindings' build scripts, for `make ecosystem`; gdb, which holds a
# process in the middle of a system call for same_host.sh), the Rust toolchain
# components and
# a Python venv with scapy (the independent RoCE implementation the wire
# crate is checked against). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

packages="libibverbs-dev ibverbs-utils perftest rdma-core python3-pyverbs iproute2 ethtool tshark
  rdmacm-utils librdmacm-dev qperf iperf ucx-utils libfabric-bin openmpi-bin libopenmpi-dev
  util-linux cmake libclang-dev gdb"
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup-deps: please install: $missing (e.g. sudo apt-get install $missing)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup-deps: cargo not found; install Rust (rustup) first" >&2
  exit 1
fi
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv .venv
  }
fi
.venv/bin/python -c 'import scapy' 2>/dev/null || .venv/bin/pip install -q 'scapy==2.6.1'
