#!/usr/bin/env bash
# Fault injection (SOFTVERBS_FAULTS, docs/fault-injection.md) with
# unmodified rdma-core programs over softverbs, one rule kind per check:
#   * a rule that does not parse fails ibv_open_device, naming the rule;
#   * post_send: ibv_rc_pingpong's ibv_post_send fails;
#   * completion status= (rules from a file): ibv_rc_pingpong and
#     ib_write_bw report the status (and vendor_err) of the rule;
#   * completion delay=: ibv_rc_pingpong with completion events completes,
#     no sooner than the delays allow;
#   * qp_error after= and at=: our C check sees IBV_EVENT_QP_FATAL, ERR and
#     flushed WRs (fault_qp_error.c);
#   * packet drop, duplicate, reorder, delay and corrupt on both sides:
#     ibv_rc_pingpong --chk completes with its data intact, on the wire
#     path the rules choose, and the stats line counts what they did;
#   * packet peer= and count=: exactly the packets named are dropped;
#   * windows of time (from= until= period=): a flapping link is survived,
#     a peer that dies ends the connection in RETRY_EXC_ERR.
# Prints one line per check and "N passed, M failed" last.
# Usage: faults.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
export LD_PRELOAD=$SO
export SOFTVERBS_DEVICES=softverbs0=127.0.0.1
pass=0; fail=0; n=0
log=$(mktemp -d)
trap 'rm -rf "$log"; kill $(jobs -p) 2>/dev/null' EXIT
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
PORT_BASE=$(random_port_base)
ONE_TIMEOUT=30

# faulty NAME EXPECT SERVER_RULES CLIENT_RULES CMD...: CMD as a server
# and client on a fresh port, each with its rules (empty: none); both
# must exit 0 and the client's output match EXPECT.
faulty() {
  local name=$1 expect=$2 srv_rules=$3 cli_rules=$4; shift 4
  n=$((n + 1)); local port=$((PORT_BASE + n))
  serve_then_connect $port env SOFTVERBS_FAULTS="$srv_rules" timeout 60 "$@" -p $port \
    --then env SOFTVERBS_FAULTS="$cli_rules" timeout 60 "$@" -p $port 127.0.0.1
  pair_verdict "$name" "$expect"
}

# client_fails NAME EXPECT CLIENT_RULES CMD...: as faulty, but the client
# must fail with a line matching EXPECT; the server, left waiting for it,
# is stopped.
client_fails() {
  local name=$1 expect=$2 cli_rules=$3; shift 3
  n=$((n + 1)); local port=$((PORT_BASE + n))
  timeout 60 "$@" -p $port > "$log/srv" 2>&1 &
  local srv=$!
  if wait_listen $port "" $srv 2> "$log/cli"; then
    SOFTVERBS_FAULTS="$cli_rules" timeout 60 "$@" -p $port 127.0.0.1 > "$log/cli" 2>&1
    crc=$?
  else
    crc="not started"
  fi
  kill $srv 2> /dev/null; wait $srv 2> /dev/null
  if [ "$crc" != 0 ] && [ "$crc" != 124 ] && grep -Eq "$expect" "$log/cli"; then
    ok "$name"
  else
    { echo "client exit $crc (want a failure)"; tail -n 12 "$log/cli"; } > "$log/why"
    bad "$name" "$log/why"
  fi
}

SOFTVERBS_FAULTS="post_send nth=4 errno" timeout 20 ibv_devinfo -d softverbs0 > "$log/out" 2>&1
if [ $? != 0 ] && grep -q "SOFTVERBS_FAULTS: rule 1 (\`post_send nth=4 errno\`): unknown word \`errno\`" "$log/out"; then
  ok "a rule that does not parse fails ibv_open_device, saying which and why"
else
  bad "a rule that does not parse fails ibv_open_device, saying which and why" "$log/out"
fi

client_fails "post_send errno=ENOMEM: ibv_rc_pingpong's 4th ibv_post_send fails" "Couldn't post send" \
  "post_send nth=4 errno=ENOMEM" ibv_rc_pingpong -d softverbs0 -g 0 -n 20

cat > "$log/rules" << 'RULES'
# A file of rules: a comment, a blank line, then one rule.

completion opcode=SEND nth=5 status=RETRY_EXC_ERR
RULES
client_fails "completion status= from a file: ibv_rc_pingpong reports RETRY_EXC_ERR" \
  "Failed status transport retry counter exceeded \(12\)" \
  "$log/rules" ibv_rc_pingpong -d softverbs0 -g 0 -n 20
client_fails "completion opcode=RDMA_WRITE status=REM_ACCESS_ERR vendor_err=: ib_write_bw reports both" \
  "Failed status 10: wr_id [0-9]+ syndrom 0x88" \
  "completion opcode=RDMA_WRITE nth=1 status=REM_ACCESS_ERR vendor_err=0x88" \
  ib_write_bw -d softverbs0 -x 0 -s 4096 -n 100

# Each of the client's 5 receive completions is held 50 ms, and each
# comes only after the client's previous one was taken: 0.25 s at least.
faulty "completion delay=: ibv_rc_pingpong -e completes, held back by the delays" "bytes in" \
  "completion delay=50ms" "completion delay=50ms" ibv_rc_pingpong -d softverbs0 -g 0 -n 5 -e
secs=$(sed -n 's/.* bytes in \([0-9.]*\) seconds.*/\1/p' "$log/cli")
if [ -n "$secs" ] && awk -v s="$secs" 'BEGIN { exit !(s >= 0.25) }'; then
  ok "completion delay=: 5 round trips took $secs s, at least the 0.25 s the delays make"
else
  bad "completion delay=: 5 round trips took '$secs' s, want at least 0.25" "$log/cli"
fi

if cc -O1 -o "$log/fault_qp_error" "$here/fault_qp_error.c" -libverbs 2> "$log/cc"; then
  one "qp_error after=3: QP_FATAL, ERR and flushed WRs after the 3rd WR" "qp_error ok" \
    env SOFTVERBS_FAULTS="qp_error after=3" "$log/fault_qp_error" after
  one "qp_error at=: QP_FATAL reaches a program blocked in ibv_get_async_event" "qp_error ok" \
    env SOFTVERBS_FAULTS="qp_error at=1s" "$log/fault_qp_error" at
else
  bad "qp_error (compile)" "$log/cc"
fi

# Every packet rule kind on both sides, with the same-host path left to
# the rules (which choose the wire). --chk compares every buffer. Each
# kind fires at most 20 times (about the first third of the run's
# packets): a lost ACK of the last message cannot be sent again once the
# peer has exited, which would end any RC connection in RETRY_EXC_ERR.
export SOFTVERBS_STATS=1
rules="seed=3; packet drop prob=1% count=20; packet duplicate prob=1% count=20; packet reorder prob=1% count=20"
rules="$rules; packet delay=2ms prob=1% count=20; packet corrupt prob=1% count=20"
faulty "packet drop, duplicate, reorder, delay, corrupt: ibv_rc_pingpong --chk completes intact" "bytes in" \
  "$rules" "$rules" ibv_rc_pingpong -d softverbs0 -g 0 -s 16384 -n 300 --chk
both_logs "$crc" "$src" "$log/cli" "$log/srv" > "$log/both"
if grep -Eq "[1-9][0-9]* dropped by a fault rule" "$log/cli" && grep -Eq "\(([1-9][0-9]*) with a bad ICRC" "$log/cli" \
   && grep -Eq "[1-9][0-9]* resent" "$log/srv"; then
  ok "packet rules: the stats line counts the drops and bad ICRCs, and lost packets were resent"
else
  bad "packet rules: the stats line counts the drops and bad ICRCs, and lost packets were resent" "$log/both"
fi

faulty "packet drop peer= count=: ib_write_bw completes" "65536 +200" "" \
  "packet drop peer=127.0.0.1 count=5; packet drop peer=192.0.2.7" ib_write_bw -d softverbs0 -x 0 -s 65536 -n 200
if grep -q ", 5 dropped by a fault rule" "$log/cli"; then
  ok "packet drop peer= count=5: exactly 5 dropped, none for a peer that sends nothing"
else
  bad "packet drop peer= count=5: exactly 5 dropped, none for a peer that sends nothing" "$log/cli"
fi

# Windows of the device's time: a link down 150 ms of every 500 ms (the
# 8 tries of a 67 ms timeout outlast each outage), then a peer that dies
# 200 ms in (the connection ends in RETRY_EXC_ERR).
faulty "packet drop from= until= period= (a flapping link): ib_write_bw -D 2 completes" "65536 +[0-9]+" "" \
  "packet drop from=100ms until=250ms period=500ms" ib_write_bw -d softverbs0 -x 0 -s 65536 -D 2
if grep -Eq "[1-9][0-9]* dropped by a fault rule" "$log/cli"; then
  ok "a flapping link: the stats line counts the packets its outages dropped"
else
  bad "a flapping link: the stats line counts the packets its outages dropped" "$log/cli"
fi
client_fails "packet drop from=200ms (a peer that dies): ib_write_bw ends in RETRY_EXC_ERR" \
  "Failed status 12: wr_id [0-9]+ syndrom 0x0" "packet drop from=200ms" ib_write_bw -d softverbs0 -x 0 -s 65536 -D 2

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
