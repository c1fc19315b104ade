#!/usr/bin/env bash
# Runs the generic modules of rdma-core's pyverbs test suite (Debian's
# python3-pyverbs ships it gzipped in /usr/share/doc/rdma-core/tests)
# against softverbs0 in preload mode. A module passes when unittest says
# OK (skips allowed: each is for a capability the device does not offer,
# see docs/conformance.md). Prints a line per module, then
# "N passed, M failed". Usage: run.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
src=/usr/share/doc/rdma-core/tests
# pyverbs is built for Debian's python3, not another python3 on PATH.
PY=/usr/bin/python3
modules="test_addr test_atomic test_cq test_cq_events test_cqex test_device test_mr test_pd
         test_qp test_qpex test_parent_domain test_odp test_relaxed_ordering test_rss_traffic
         test_tag_matching test_fork test_flow"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ ! -d "$src" ] || ! "$PY" -c 'import pyverbs' 2>/dev/null; then
  echo "pyverbs or its test suite is not installed (apt-get install python3-pyverbs)"
  echo "0 passed, 1 failed"
  exit 1
fi
mkdir "$work/tests"
cp -r "$src"/. "$work/tests/"
gunzip -f "$work"/tests/*.gz
pass=0; fail=0
for m in $modules; do
  out=$(cd "$work" && LD_PRELOAD="$SO" timeout 300 "$PY" tests/run_tests.py --dev softverbs0 -k "$m" 2>&1)
  ran=$(echo "$out" | grep -E '^Ran [0-9]+' | tail -n 1)
  verdict=$(echo "$out" | grep -E '^(OK|FAILED)' | tail -n 1)
  case "$verdict" in
    OK*) pass=$((pass + 1)); echo "ok   $m: $ran, $verdict" ;;
    *) fail=$((fail + 1)); echo "FAIL $m: $ran, ${verdict:-no verdict}"; echo "$out" | grep -E '^(FAIL|ERROR):' | head -n 10 | sed 's/^/    /' ;;
  esac
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
