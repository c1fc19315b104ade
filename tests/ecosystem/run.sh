#!/usr/bin/env bash
# `make ecosystem`: installs what the stacks need (scripts/setup-deps.sh),
# then runs each script
# of this directory and sums their "N passed, M failed" lines. Exits
# non-zero if any failed. Usage: run.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
"$here/../../scripts/setup-deps.sh" || exit 1
pass=0; fail=0
for script in device_view ucx libfabric mpi rust; do
  echo "== $script"
  # Shown as it runs through this script's own standard error: `tee
  # /dev/stderr` would open the file behind it again, truncating a log
  # that make test's output is redirected to (CI lost everything before
  # this point that way).
  out=$("$here/$script.sh" "$SO" 2>&1 | tee >(cat >&2) | tail -n 1)
  read -r p f <<< "$(counts_of "$out")"
  if [ -z "$p" ]; then
    echo "FAIL $script.sh ended without its summary line"; f=1; p=0
  fi
  pass=$((pass + p)); fail=$((fail + f))
done
echo "ecosystem: $pass passed, $fail failed"
[ $fail -eq 0 ]
