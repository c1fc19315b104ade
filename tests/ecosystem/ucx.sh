#!/usr/bin/env bash
# UCX 1.13 over softverbs, with no UCX_* workaround: `ucx_info -d` lists
# rc_verbs and ud_verbs on softverbs0:1, and ucx_perftest runs its UCP
# tests (tag, put, get, active messages) with UCX_TLS set to
# rc_verbs,ud_verbs, to ud_verbs and to rc (and in sleep mode, waiting
# for completion events, on rc_v), and the UCT tests of each
# transport on the device directly, server and client as two processes
# started by `softverbs run` on loopback. Prints "N passed, M failed" last.
# Usage: ucx.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
CLI=$(dirname "$SO")/softverbs
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
PORT_BASE=$(random_port_base)
pass=0; fail=0; n=0

command -v ucx_perftest >/dev/null || cannot_run "UCX (tests/ecosystem/ucx.sh)" "ucx_perftest is not installed (Debian package ucx-utils)"

export UCX_NET_DEVICES=softverbs0:1
. "$here/mode.sh"

"${sv[@]}" ucx_info -d > "$log/info" 2>&1
for tl in rc_verbs ud_verbs; do
  if grep -A1 "Transport: $tl" "$log/info" | grep -q "Device: softverbs0:1"; then
    ok "ucx_info -d lists $tl on softverbs0:1"
  else
    bad "ucx_info -d lists $tl on softverbs0:1" "$log/info"
  fi
done

# perf NAME ARGS...: ucx_perftest server, then once it listens a client
# with ARGS; both must exit 0 and the client print its final line.
perf() {
  local name=$1; shift
  n=$((n + 1)); local port=$((PORT_BASE + n)) crc src
  serve_then_connect $port "${sv[@]}" timeout 60 ucx_perftest -p "$port" \
    --then "${sv[@]}" timeout 60 ucx_perftest -p "$port" "$@" 127.0.0.1
  pair_verdict "$name" "^Final:"
}

for tls in rc_verbs,ud_verbs ud_verbs rc; do
  for t in tag_lat tag_bw ucp_put_bw ucp_get ucp_am_lat; do
    UCX_TLS=$tls perf "UCX_TLS=$tls ucx_perftest -t $t" -t "$t" -n 2000
  done
done
# Sleep mode: UCX polls its CQs empty, arms them and sleeps in poll()
# without polling again, so a completion that came in between its last
# poll and the arm must raise the event; every run hung on the wire (the
# arm took the waiting datagram in first, then armed the CQ it was in).
for t in tag_lat tag_bw; do
  UCX_TLS=rc_v perf "UCX_TLS=rc_v ucx_perftest -t $t -E sleep" -t "$t" -E sleep -n 500
done
for t in put_bw am_lat fadd; do
  perf "UCT rc_verbs -t $t" -d softverbs0:1 -x rc_verbs -t "$t" -n 2000
done
# rc_verbs has no short get (only rc_mlx5 does): RDMA READ into a bounce
# buffer and into the user's registered buffer.
for d in bcopy zcopy; do
  perf "UCT rc_verbs -t get -D $d" -d softverbs0:1 -x rc_verbs -t get -D $d -s 8192 -n 1000
done
# UCT's ud_verbs offers active messages only (UCX answers put, get and
# atomics on it with "does not support operation", whatever the device).
for t in am_lat am_bw; do
  perf "UCT ud_verbs -t $t" -d softverbs0:1 -x ud_verbs -t "$t" -n 2000
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
