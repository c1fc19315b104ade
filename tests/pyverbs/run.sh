#!/usr/bin/env bash
# Runs every module of rdma-core's pyverbs test suite (Debian's
# python3-pyverbs ships it gzipped in /usr/share/doc/rdma-core/tests)
# against softverbs0 in preload mode (with its device view, so test_rdmacm
# finds the device's network interface). A module passes when unittest says
# OK and at least one of its tests ran; each skip is for a capability the
# device does not offer, and the reasons are printed (docs/conformance.md
# lists them). The modules in $all_skipped test only capabilities
# softverbs does not offer: they are reported as skipped, and fail if that
# changes either way, so that the documentation stays true. Prints a line
# per module, then "N passed, M failed, K skipped".
# Usage: run.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
src=/usr/share/doc/rdma-core/tests
# pyverbs is built for Debian's python3, not another python3 on PATH.
PY=/usr/bin/python3
# Every test of these is skipped: flow steering, on-demand paging, parent
# domains, RSS, tag matching and importing a context from its cmd_fd
# (ibv_import_device) are not offered, CUDA needs a GPU, and the mlx5 and
# EFA modules test those vendors' direct-verbs extensions, which only
# their devices have (docs/conformance.md).
all_skipped="test_flow test_odp test_parent_domain test_rss_traffic test_tag_matching test_shared_pd
  test_cuda_dmabuf test_efa_srd test_efadv"
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
modules=$(cd "$work/tests" && ls test_*.py | sed 's/\.py$//')
echo "$(echo $modules | wc -w) modules"
all_skipped=$(echo $all_skipped $(cd "$work/tests" && ls test_mlx5_*.py | sed 's/\.py$//'))
pass=0; fail=0; skip=0
# The skip reasons of a verbose unittest run, counted: "3x 'reason', ...".
reasons() {
  grep -oE "\.\.\. skipped .*" | sed "s/^\.\.\. skipped //" | sort | uniq -c | sort -rn |
    awk '{n=$1; $1=""; printf "%s%sx%s", sep, n, $0; sep=", "}'
}
for m in $modules; do
  # "tests.MODULE." selects that module only ("-k test_qp" alone would also
  # take test_qpex).
  out=$(cd "$work" && LD_PRELOAD="$SO" timeout 300 "$PY" tests/run_tests.py --dev softverbs0 -v -k "tests.$m." 2>&1)
  ran=$(echo "$out" | grep -E '^Ran [0-9]+' | tail -n 1 | awk '{print $2}')
  verdict=$(echo "$out" | grep -E '^(OK|FAILED)' | tail -n 1)
  skipped=$(echo "$verdict" | grep -oE 'skipped=[0-9]+' | cut -d= -f2)
  ran=${ran:-0}; skipped=${skipped:-0}
  why=$(echo "$out" | reasons)
  expected_all=no; [[ " $all_skipped " == *" $m "* ]] && expected_all=yes
  case "$verdict" in
    OK*)
      if [ "$ran" -eq 0 ]; then
        fail=$((fail + 1)); echo "FAIL $m: no test ran (does the module still exist?)"
      elif [ "$ran" -eq "$skipped" ] && [ $expected_all = yes ]; then
        skip=$((skip + 1)); echo "SKIP $m: all $ran tests skipped: $why"
      elif [ "$ran" -eq "$skipped" ]; then
        fail=$((fail + 1)); echo "FAIL $m: all $ran tests skipped, which is new: $why"
      elif [ $expected_all = yes ]; then
        fail=$((fail + 1)); echo "FAIL $m: $((ran - skipped)) of $ran tests ran where all were skipped before; update \$all_skipped and docs/conformance.md"
      else
        pass=$((pass + 1)); echo "ok   $m: $ran ran, $((ran - skipped)) passed, $skipped skipped${why:+: $why}"
      fi ;;
    *) fail=$((fail + 1)); echo "FAIL $m: $ran ran, ${verdict:-no verdict}"; echo "$out" | grep -E '^(FAIL|ERROR):' | head -n 10 | sed 's/^/    /' ;;
  esac
done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
