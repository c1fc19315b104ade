#!/usr/bin/env bash
# `make interop`: the kernel's Soft-RoCE (rxe) against rxe, then against
# softverbs, inside a throwaway VM (vm.sh boots Debian's kernel under QEMU;
# guest.sh runs the cases). Usage: run.sh PATH/TO/libsoftverbs-rdmav34.so
# [REGEX] (REGEX selects cases by name). Builds imm_pingpong (immediate
# data, any provider) into $INTEROP_DIR first. Prints one line per case
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
if ! err=$(cc -O2 -Wall -Wextra -o "$imm" "$here/imm_pingpong.c" -libverbs 2>&1); then
  # The imm cases then fail in the guest, naming the missing program.
  echo "interop: building imm_pingpong failed (needs cc and libibverbs-dev): $err" >&2
  rm -f "$imm"
fi

# The extended-CQ check (tests/programs/cq_ex.c), beside imm_pingpong,
# where the guest looks for it (the pass-through cases).
if ! err=$(cc -O2 -Wall -Wextra -o "$state/cq_ex" "$here/../programs/cq_ex.c" -libverbs 2>&1); then
  echo "interop: building cq_ex failed (needs cc and libibverbs-dev): $err" >&2
  rm -f "$state/cq_ex"
fi

# The multicast program (tests/programs/mcast.c), beside imm_pingpong,
# where the guest looks for it.
if ! err=$(cc -O2 -Wall -Wextra -o "$state/mcast" "$here/../programs/mcast.c" -libverbs 2>&1); then
  echo "interop: building mcast failed (needs cc and libibverbs-dev): $err" >&2
  rm -f "$state/mcast"
fi

# The guest's last line is its count: keep it for the very end, after
# the VM's own closing lines on stderr.
while IFS= read -r line; do
  if [[ "$line" =~ ^@@rc\ ([0-9]+)$ ]]; then rc=${BASH_REMATCH[1]}
  elif [[ "$line" =~ ^[0-9]+\ passed,\ [0-9]+\ failed ]]; then summary=$line
  else printf '%s\n' "$line"; fi
done < <("$here/vm.sh" "$here/guest.sh" "$so" "$imm" "$filter"; echo "@@rc $?")
[ -n "$summary" ] || echo "FAIL interop: the VM ended without a count of cases (above: why)"
finish
