#!/usr/bin/env bash
# What `make ecosystem` needs beyond scripts/setup-deps.sh: UCX's tools,
# libfabric's, Open MPI (with mpicc), and cmake and libclang for the
# Rust bindings' build scripts. Idempotent; installs as root,
# otherwise names what is missing and fails.
set -euo pipefail
packages="ucx-utils libfabric-bin openmpi-bin libopenmpi-dev util-linux cmake libclang-dev"
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "ecosystem deps: please install: $missing (e.g. sudo apt-get install $missing)" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
