#!/usr/bin/env bash
# softverbs' Rust verbs API (crates/api): its example program, written
# against the API alone, on a soft device (the engine in the program's
# own process, no libibverbs and no LD_PRELOAD), with fault rules of
# SOFTVERBS_FAULTS (a completion and a post rule) applied to it, and the
# errors of a device that does not exist or whose real device is
# missing. (On a real device, through a pass-through device, it runs in
# make interop against rxe, with the same rules.) Prints
# "N passed, M failed" last. Usage: rust_api.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
bin=$(dirname "$SO")
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
log=$(mktemp -d)
export SOFTVERBS_DAEMON_SOCKET="softverbs-api-test-$$"
cleanup() {
  local d
  for d in $(pgrep -f -- "--socket $SOFTVERBS_DAEMON_SOCKET( |$)"); do kill "$d" 2> /dev/null; done
  rm -rf "$log"
}
trap cleanup EXIT
pass=0; fail=0
ONE_TIMEOUT=60
loopback=$bin/examples/loopback
[ -x "$loopback" ] || cannot_run rust_api.sh "$loopback is not built (make shim builds it)"
export SOFTVERBS_DAEMON=$bin/softverbs
unset LD_PRELOAD
ip=127.81.$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))

one "loopback example on a soft device: RC SEND (through an SRQ, awaited by a completion event, the SRQ limit event), WRITE_WITH_IMM, READ, fetch-and-add and a UD datagram, checked" \
  "^loopback ok on softverbs0 \(soft\)$" env SOFTVERBS_DEVICES="softverbs0=$ip" "$loopback" softverbs0 1
one "the same on the device's other GID (index 0, link-local)" \
  "^loopback ok on softverbs0 \(soft\)$" env SOFTVERBS_DEVICES="softverbs0=$ip" "$loopback" softverbs0 0
# The rule language of SOFTVERBS_FAULTS reaches the API's soft device: the
# first SEND completes with RETRY_EXC_ERR and the example says so.
one "a completion fault rule applies to the API's soft device" \
  "wanted WR 1 Send done, got .*status: RetryExcErr" \
  sh -c "SOFTVERBS_DEVICES=softverbs0=$ip SOFTVERBS_FAULTS='completion opcode=SEND nth=1 status=RETRY_EXC_ERR' \
    '$loopback' softverbs0 1 2>&1; test \$? -eq 1"
one "a post fault rule applies to the API's soft device" \
  "loopback failed on softverbs0: a fault rule \(SOFTVERBS_FAULTS\) refused the WR \(errno 12\)" \
  sh -c "SOFTVERBS_DEVICES=softverbs0=$ip SOFTVERBS_FAULTS='post_send nth=2 errno=ENOMEM' \
    '$loopback' softverbs0 1 2>&1; test \$? -eq 1"
# SOFTVERBS_TRACE traces the API's calls; the summary reads them.
one "the loopback example traced (SOFTVERBS_TRACE) on a soft device" \
  "^loopback ok on softverbs0 \(soft\)$" \
  env SOFTVERBS_DEVICES="softverbs0=$ip" SOFTVERBS_TRACE="$log/api-trace.json" "$loopback" softverbs0 1
one "its trace's summary: the QPs, their completions, the events" \
  "events: COMP 1, SRQ_LIMIT_REACHED 1" \
  sh -c "s=\$('$bin/softverbs' trace summarize '$log/api-trace.json') \
    && echo \"\$s\" | grep -Eq '^pid [0-9]+ softverbs0 QP 0x[0-9a-f]+:\$' \
    && echo \"\$s\" | grep -Eq 'completions: 3 \(0 in error\)' && echo \"\$s\""
# A refused post is traced as refused: its WR is `bad_wr`.
one "a post the fault rule refused is traced with its WR as bad_wr" \
  '"verb":"ibv_post_send".*"bad_wr":2' \
  sh -c "SOFTVERBS_DEVICES=softverbs0=$ip SOFTVERBS_FAULTS='post_send nth=2 errno=ENOMEM' \
    SOFTVERBS_TRACE='$log/api-refused.json' '$loopback' softverbs0 1 > /dev/null 2>&1; cat '$log/api-refused.json'"
one "a post_srq_recv fault rule applies to the API's soft device" \
  "loopback failed on softverbs0: a fault rule \(SOFTVERBS_FAULTS\) refused the WR \(errno 12\)" \
  sh -c "SOFTVERBS_DEVICES=softverbs0=$ip SOFTVERBS_FAULTS='post_srq_recv errno=ENOMEM' \
    '$loopback' softverbs0 1 2>&1; test \$? -eq 1"
# A program alone (no `softverbs` beside it, none on PATH, no daemon on
# its socket) says how the daemon is found instead of a bare refusal.
mkdir -p "$log/alone" && cp "$loopback" "$log/alone/"
one "without a daemon or a softverbs command to start one, the open says how one is found" \
  "no host daemon runs, and no .softverbs. command was found to start one \(SOFTVERBS_DAEMON names it" \
  sh -c "env -u SOFTVERBS_DAEMON PATH=/usr/bin:/bin SOFTVERBS_DAEMON_SOCKET=softverbs-nobody-$$ \
    SOFTVERBS_DEVICES=softverbs0=$ip '$log/alone/loopback' softverbs0 1 2>&1; test \$? -eq 1"
one "an unknown device is ENODEV, naming the configuration" \
  "loopback failed on nope: no softverbs device is called nope \(SOFTVERBS_DEVICES\) \(errno 19\)" \
  sh -c "SOFTVERBS_DEVICES=softverbs0=$ip '$loopback' nope 2>&1; test \$? -eq 1"
one "a pass-through device whose real device is missing is ENODEV, saying so" \
  "loopback failed on sv-pt0: sv-pt0: libibverbs has no device no_such_dev.* \(errno 19\)" \
  sh -c "SOFTVERBS_DEVICES=sv-pt0=passthrough:no_such_dev '$loopback' sv-pt0 2>&1; test \$? -eq 1"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
