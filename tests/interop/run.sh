#!/usr/bin/env bash
# `make interop`: the kernel's Soft-RoCE (rxe) against rxe, then against
# softverbs, inside a throwaway VM (vm.sh boots Debian's kernel under QEMU;
# guest.sh runs the cases). Usage: run.sh PATH/TO/libsoftverbs-rdmav34.so
# [REGEX] (REGEX selects cases by name). Builds imm_pingpong (immediate
# data, any provider), the other C programs of the cases and rdma-sys'
# examples into $INTEROP_DIR first. Prints one line per case
# and, last, "N passed, M failed"; a VM that cannot start counts as a
# failure with its reason, never as a skip.
set -u
here=$(dirname "$(readlink -f "$0")")
so=$(readlink -f "$1")
filter=${2:-.}
state=${INTEROP_DIR:-target/interop}
started=$SECONDS

summary= rc=1
finish() {
  echo "interop: $((SECONDS - started)) s in all" >&2
  echo "${summary:-0 passed, 1 failed}"
  exit $rc
}

if [ ! -f "$so" ]; then
  echo "FAIL interop: no provider at $1 (make shim builds it)"
  finish
fi
mkdir -p "$state"
imm="$state/imm_pingpong"
# build NAME SOURCE LIBS...: a C program of the cases, beside imm_pingpong,
# where the guest looks for it; when it cannot be built, the cases that
# need it fail in the guest, naming the missing program.
build() {
  local name=$1 src=$2 err; shift 2
  if ! err=$(cc -O2 -Wall -Wextra -o "$state/$name" "$src" "$@" 2>&1); then
    echo "interop: building $name failed (needs cc, libibverbs-dev and librdmacm-dev): $err" >&2
    rm -f "$state/$name"
  fi
}
build imm_pingpong "$here/imm_pingpong.c" -libverbs
build cq_ex "$here/../programs/cq_ex.c" -libverbs        # the pass-through cases
build fault_qp_error "$here/../programs/fault_qp_error.c" -libverbs
build async_events "$here/../programs/async_events.c" -libverbs
build mcast "$here/../programs/mcast.c" -libverbs        # the multicast cases
build cm_mixed "$here/cm_mixed.c" -lrdmacm -libverbs     # softverbs' and the kernel's rdma_cm
build cm_migrate "$here/cm_migrate.c" -lrdmacm -libverbs
build cm_give_up "$here/../programs/cm_give_up.c" -lrdmacm -libverbs

# rdma-sys' server and client examples (as tests/ecosystem/rust.sh builds
# them, into the same cargo target directory), beside the programs above
# as rdma_sys_server and rdma_sys_client; when they cannot be built, the
# cases fail in the guest, naming them.
RDMA_SYS=0.3.0
build_rdma_sys() {
  local scratch why target
  scratch=$(mktemp -d)
  target=$(dirname "$so")/../ecosystem-crates
  rm -f "$state/rdma_sys_server" "$state/rdma_sys_client"
  . "$here/../ecosystem/crates.sh"
  if ! why=$(fetch_crates "$scratch" rdma-sys=$RDMA_SYS); then
    echo "interop: rdma-sys $RDMA_SYS: $why" >&2
  elif ! (cd "$scratch/rdma-sys-$RDMA_SYS" &&
          CARGO_TARGET_DIR=$target cargo build --locked --release --examples) > "$scratch/build" 2>&1; then
    echo "interop: building rdma-sys $RDMA_SYS's examples failed: $(tail -n 5 "$scratch/build")" >&2
  else
    cp "$target/release/examples/server" "$state/rdma_sys_server" &&
      cp "$target/release/examples/client" "$state/rdma_sys_client"
  fi
  rm -rf "$scratch"
}
build_rdma_sys

# The guest's last line is its count: keep it for the very end, after
# the VM's own closing lines on stderr.
while IFS= read -r line; do
  if [[ "$line" =~ ^@@rc\ ([0-9]+)$ ]]; then rc=${BASH_REMATCH[1]}
  elif [[ "$line" =~ ^[0-9]+\ passed,\ [0-9]+\ failed ]]; then summary=$line
  else printf '%s\n' "$line"; fi
done < <("$here/vm.sh" "$here/guest.sh" "$so" "$imm" "$filter"; echo "@@rc $?")
[ -n "$summary" ] || echo "FAIL interop: the VM ended without a count of cases (above: why)"
finish
