#!/usr/bin/env bash
# softverbs against the kernel's rxe, side by side in one VM session (issue
# 13's comparison; bench/README.md, "Against rxe in a VM"). Boots the
# interop VM (tests/interop/vm.sh: Debian's kernel under QEMU TCG, 2 vCPUs)
# and runs bench/rxe_vm_guest.sh there: the same perftest programs over
# rxe against rxe and over softverbs against softverbs (wire path), each
# across a veth pair, then the bandwidth tests under 1% netem loss.
#
# Usage: bench/rxe_vm.sh [OUT]   (OUT: $BENCH_OUT, else target/bench)
# Environment: RXE_VM_ARGS, the guest script's sizes ("BW_ITERS LAT_ITERS
# REPEAT LOSS_ITERS LOSS", its defaults otherwise); RXE_VM_TIMEOUT, the
# seconds the guest script may take (900); vm.sh's INTEROP_* variables.
# Writes OUT/rxe_vm/: guest.out (the guest's sectioned output, parsed by
# bench/report.py), vm.err (vm.sh's own lines: boot time, failures),
# status ("EXIT SECONDS"), loadavg (the host's 1-minute load average
# before and after) and, when the comparison could not run, missing (one
# line: why). Always exits 0: a VM that cannot start is a gap in the
# report, not a failed benchmark.
set -u
OUT=${1:-${BENCH_OUT:-}}
[ -n "$OUT" ] && OUT=$(readlink -m "$OUT")
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/target/bench}
dir=$OUT/rxe_vm
SO=target/release/libsoftverbs-rdmav34.so
rm -rf "$dir"
mkdir -p "$dir"
cut -d' ' -f1 /proc/loadavg > "$dir/loadavg"

if [ ! -f "$SO" ]; then
  echo "no provider at $SO (make shim builds it)" > "$dir/missing"
  exit 0
fi
started=$SECONDS
# vm.sh bounds the boot (INTEROP_BOOT_TIMEOUT) and the guest command
# (--timeout); the outer limit is only a backstop (vm.sh kills QEMU on TERM).
timeout 1200 tests/interop/vm.sh --timeout "${RXE_VM_TIMEOUT:-900}" \
  bench/rxe_vm_guest.sh "$SO" ${RXE_VM_ARGS:-} > "$dir/guest.out" 2> "$dir/vm.err"
rc=$?
echo "$rc $((SECONDS - started))" > "$dir/status"
cut -d' ' -f1 /proc/loadavg >> "$dir/loadavg"
if [ $rc -ne 0 ] || ! grep -q '^@@bench-done' "$dir/guest.out"; then
  why=$(grep -m1 -E '^interop VM: (FAILED|missing)|^@@bench-fail|SKIPPED' "$dir/vm.err" "$dir/guest.out" | head -n 1 | cut -d: -f2-)
  echo "the VM session ended with status $rc without finishing its programs${why:+: $why}" > "$dir/missing"
fi
cat "$dir/vm.err" >&2
[ -f "$dir/missing" ] && echo "bench: rxe comparison not measured: $(cat "$dir/missing")" >&2
exit 0
