#!/usr/bin/env bash
# The wire path under load loses nothing (issue 13): with the same-host
# path off (SOFTVERBS_SHM=0) and socket buffers of a non-root user's
# default size (SOFTVERBS_SOCKET_BUFFER=212992, Debian's rmem_max), beside
# 2 CPU-bound processes:
#   - 8 ib_write_bw pairs at once between two network namespaces joined by
#     a veth pair,
#   - ib_write_bw -a and ib_read_bw -a (every size to 8 MiB) on loopback,
# all with perftest's default QP timeout (14: 67 ms) and retry count (7).
# Every program must exit 0 without an error completion, and neither
# namespace's kernel may count a UDP datagram dropped for want of buffer
# room (UdpRcvbufErrors, UdpSndbufErrors, UdpInErrors): the send window
# keeps what a QP has in flight within the peer's buffer. Needs root (the
# namespaces); fails under CI=true without it, skips loudly elsewhere.
# Prints "N passed, M failed" last. Usage: wire_load.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
. "$(dirname "$(readlink -f "$0")")/lib.sh"
tag="wl$$"
a="${tag}a"; b="${tag}b"
ip_a=10.232.0.1; ip_b=10.232.0.2
ITERS=${ITERS:-500}
log=$(mktemp -d)
pass=0; fail=0

cleanup() {
  kill -9 $(jobs -p) 2>/dev/null
  pkill -9 -f "wire-load-busy-$$" 2>/dev/null
  ip netns pids "$a" 2>/dev/null | xargs -r kill -9
  ip netns pids "$b" 2>/dev/null | xargs -r kill -9
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

if ! ip netns add "$a" 2>"$log/err"; then
  cannot_run "the wire path under load (tests/programs/wire_load.sh)" \
    "cannot create a network namespace ($(cat "$log/err")); it needs root"
fi
ip netns add "$b"
ip link add "${tag}x" type veth peer name "${tag}y"
ip link set "${tag}x" netns "$a"
ip link set "${tag}y" netns "$b"
ip -n "$a" addr add "$ip_a/24" dev "${tag}x"
ip -n "$b" addr add "$ip_b/24" dev "${tag}y"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "${tag}x" up
ip -n "$b" link set "${tag}y" up

export SOFTVERBS_SHM=0 SOFTVERBS_SOCKET_BUFFER=212992
# on_ns NS DEVICE_IP CMD...: CMD in namespace NS over softverbs0 on DEVICE_IP.
on_ns() {
  local ns=$1 dev=$2; shift 2
  ip netns exec "$ns" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev" "$@"
}
# The namespaces' kernel UDP counters start at 0: they are ours alone.
drops() {
  local ns
  for ns in "$a" "$b"; do
    ip netns exec "$ns" nstat -az UdpRcvbufErrors UdpSndbufErrors UdpInErrors |
      awk -v ns="$ns" 'NR > 1 && $2 != 0 { print ns ": " $1 " " $2 }'
  done
}

# pair NAME SERVER_NS SERVER_IP CLIENT_NS CLIENT_IP PORT CMD...: the
# server in the background, then, once it listens, the client; $cli is
# the client's pid; the server's joins $servers. Output to
# $log/NAME.{srv,cli}.
servers=()
pair() {
  local name=$1 sns=$2 sip=$3 cns=$4 cip=$5 port=$6; shift 6
  on_ns "$sns" "$sip" timeout 240 "$@" -p "$port" > "$log/$name.srv" 2>&1 &
  local srv=$!
  servers+=("$srv")
  if ! wait_listen "$port" "$sns" $srv 2>> "$log/$name.srv"; then
    cli=""; return 1
  fi
  on_ns "$cns" "$cip" timeout 240 "$@" -p "$port" "$sip" > "$log/$name.cli" 2>&1 &
  cli=$!
}

# verdict NAME PIDS...: every client PID exits 0 and no output of the
# programs since the last verdict reports an error.
ERRORS='[Ee]rror|Couldn.t|[Ff]ailed|status'
verdict() {
  local name=$1 all_ok=1 p; shift
  for p in "$@"; do wait "$p" || all_ok=0; done
  for p in "${servers[@]}"; do wait "$p"; done
  servers=()
  if [ $all_ok = 1 ] && [ $# -gt 0 ] && ! cat "$log"/*.cli "$log"/*.srv | grep -Eq "$ERRORS"; then
    ok "$name"
  else
    for f in "$log"/*.cli "$log"/*.srv; do
      grep -Eq "$ERRORS" "$f" && { echo "--- $f"; tail -5 "$f"; }
    done > "$log/report"
    [ $all_ok = 1 ] && [ $# -gt 0 ] || echo "a client did not start or exited non-zero" >> "$log/report"
    bad "$name" "$log/report"
  fi
  rm -f "$log"/*.cli "$log"/*.srv
}

for i in 1 2; do
  bash -c "exec -a wire-load-busy-$$ bash -c 'while :; do :; done'" &
done

clients=()
for i in $(seq 8); do
  pair "w$i" "$a" "$ip_a" "$b" "$ip_b" $((18600 + i)) ib_write_bw -x 1 -n 3000 && clients+=("$cli")
done
[ ${#clients[@]} -eq 8 ] || clients=()
verdict "8 ib_write_bw pairs across a veth beside 2 busy processes" "${clients[@]}"

for test in ib_write_bw ib_read_bw; do
  pair "$test" "$a" "$ip_a" "$a" "$ip_a" 18700 "$test" -x 1 -a -n "$ITERS" && c=$cli || c=""
  verdict "$test -a on loopback beside 2 busy processes" $c
done

pkill -9 -f "wire-load-busy-$$"
lost=$(drops)
if [ -z "$lost" ]; then
  ok "no UDP datagram dropped for want of buffer room"
else
  echo "$lost" > "$log/lost"
  bad "no UDP datagram dropped for want of buffer room" "$log/lost"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
