#!/usr/bin/env bash
# The differential conformance runner (`softverbs conformance`,
# docs/conformance.md) on this host, where the only device is softverbs:
#   * softverbs0 against itself, control-path and data-path cases: every
#     case passes (the runner's own comparisons, device limits, waits and
#     shrinking add no false divergence);
#   * against softverbs0 with a fault rule in the compared process only
#     (a post_recv failing with ENOMEM): the runner reports the cases that
#     post twice, each shrunk to a short sequence ending in that verb, and
#     its C reproducer builds and, run on both sides, prints the same
#     lines up to the last answer, which differs as reported;
#   * a completion rule on RDMA WRITEs in the compared process: the data
#     path's wait reports the success on one side and REM_ACCESS_ERR on
#     the other;
#   * a run that cannot start (no executor, a device that does not open)
#     fails saying why.
# The comparison against kernel rxe runs in the interop VM (make interop).
# Prints one line per check and "N passed, M failed" last.
# Usage: conformance.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
CLI=$(dirname "$SO")/softverbs
export SOFTVERBS_DEVICES=softverbs0=127.0.0.1
pass=0; fail=0
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
ONE_TIMEOUT=300

one "softverbs0 against itself: 300 control-path, 100 RC and 50 UC data-path sequences agree" "^450 passed, 0 failed$" \
  "$CLI" conformance --against softverbs0 --cases 300 --data-cases 100 --uc-cases 50 --repro-dir "$log/same"

rule="post_recv nth=2 errno=ENOMEM"
timeout 300 "$CLI" conformance --against softverbs0 --cases 40 --data-cases 0 --uc-cases 0 --repro-dir "$log/repro" \
  --against-env "SOFTVERBS_FAULTS=$rule" > "$log/out" 2>&1
rc=$?
# The second post_recv of a case fails on one side only: the report names
# a post_recv, the two outcomes, and a reproducer.
line=$(grep -m1 '^FAIL case ' "$log/out")
if [ $rc -ne 0 ] && grep -Eq '^[0-9]+ passed, [1-9][0-9]* failed$' "$log/out" &&
   [[ "$line" =~ \`post_(srq_)?recv\ .*answered\ \[\"ok\"\].*answered\ \[\"err\ 12\"\] ]]; then
  ok "a fault rule on one side: divergent cases reported with both answers"
else
  echo "exit $rc" >> "$log/out"; bad "a fault rule on one side: divergent cases reported" "$log/out"
fi

# The case is shrunk: setup (10 verbs) and two receive posts at most a
# few verbs apart.
verbs=$(sed -n 's/.*` after \([0-9]*\) verbs.*/\1/p' <<< "$line")
if [ -n "$verbs" ] && [ "$verbs" -le 14 ]; then
  ok "the divergent case is shrunk ($verbs verbs before the divergent one)"
else
  bad "the divergent case is shrunk (got '${verbs}' verbs before it): $line"
fi

repro=$(sed -n 's/.*(reproducer: \(.*\))$/\1/p' <<< "$line")
if cc -Wall -Wextra -Werror -o "$log/repro-bin" "$repro" -libverbs 2> "$log/cc" &&
   LD_PRELOAD=$SO timeout 60 "$log/repro-bin" softverbs0 > "$log/plain" 2>&1 &&
   LD_PRELOAD=$SO SOFTVERBS_FAULTS="$rule" timeout 60 "$log/repro-bin" softverbs0 > "$log/faulty" 2>&1 &&
   [ "$(head -n -1 "$log/plain")" = "$(head -n -1 "$log/faulty")" ] &&
   [ "$(tail -n 1 "$log/plain")" = ok ] && [ "$(tail -n 1 "$log/faulty")" = "err 12" ]; then
  ok "the C reproducer builds with -Wall -Wextra -Werror and shows the divergence at its last verb"
else
  { cat "$log/cc"; echo "-- without the rule:"; tail -n 4 "$log/plain"; echo "-- with it:"; tail -n 4 "$log/faulty"; } > "$log/why" 2>&1
  bad "the C reproducer shows the divergence" "$log/why"
fi

# On the data path: an RDMA WRITE completing in error on one side only is
# reported at the wait for its completion.
timeout 300 "$CLI" conformance --against softverbs0 --cases 0 --data-cases 20 --uc-cases 0 --repro-dir "$log/data" \
  --against-env "SOFTVERBS_FAULTS=completion opcode=RDMA_WRITE nth=1 status=REM_ACCESS_ERR" > "$log/out" 2>&1
line=$(grep -m1 '^FAIL data case ' "$log/out")
if [[ "$line" =~ \`wait_cq\ .*\"wc\ [0-9]+\ 0\ 1\ .*\"wc\ [0-9]+\ 10\  ]]; then
  ok "a data-path fault on one side: the WRITE's success and REM_ACCESS_ERR reported"
else
  bad "a data-path fault on one side: the WRITE's two completions reported" "$log/out"
fi

# UC data cases run too: a send refused on one side is reported at its
# post (shrunk, often the barrier's own WRITE). (A UC QP that enters ERR
# on the compared side only, in a case with a SEND longer than a receive
# WR of its peer, is taken for the known difference of rxe's,
# docs/conformance.md.)
timeout 300 "$CLI" conformance --against softverbs0 --cases 0 --data-cases 0 --uc-cases 20 --shrink 10 \
  --repro-dir "$log/uc" --against-env "SOFTVERBS_FAULTS=post_send nth=1 errno=ENOMEM" > "$log/out" 2>&1
line=$(grep -m1 '^FAIL UC data case ' "$log/out")
if [[ "$line" =~ \`(post_send|barrier)\ .*answered\ \[\"ok\"\].*answered\ \[\"err\ 12\"\] ]]; then
  ok "a UC data-path fault on one side: the send's post reported with both answers"
else
  bad "a UC data-path fault on one side: the send's post reported" "$log/out"
fi

# A run that cannot start says why and fails, rather than passing nothing.
if SOFTVERBS_VERBS_EXEC=/nonexistent "$CLI" conformance --against softverbs0 > "$log/out" 2>&1; then
  bad "a missing executor fails the run" "$log/out"
elif grep -q "SOFTVERBS_VERBS_EXEC=/nonexistent does not exist" "$log/out"; then
  ok "a missing executor fails the run, naming it"
else
  bad "a missing executor fails the run, naming it" "$log/out"
fi
if "$CLI" conformance --against nosuchdevice0 --cases 1 > "$log/out" 2>&1; then
  bad "a device that does not open fails the run" "$log/out"
elif grep -q "conformance run stopped: backend nosuchdevice0 .*cannot open sv_nosuchdevice0" "$log/out"; then
  ok "a device that does not open fails the run, with the executor's reason"
else
  bad "a device that does not open fails the run, with the executor's reason" "$log/out"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
