#!/usr/bin/env bash
# The wire path under load loses nothing (issue 13): with the same-host
# path off (SOFTVERBS_SHM=0) and socket buffers of a non-root user's
# default size (SOFTVERBS_SOCKET_BUFFER=212992, Debian's rmem_max), beside
# 2 CPU-bound processes:
#   - 8 ib_write_bw pairs at once between two network namespaces joined by
#     a veth pair,
#   - ib_write_bw -a and ib_read_bw -a (every size to 8 MiB),
#     ib_write_bw -q 4 (four QPs into one peer), ib_write_bw -q 16
#     (sixteen, which must wait for no timeouts), on loopback,
# all with perftest's default QP timeout (14: 67 ms) and retry count (7);
# then ib_send_bw -s 4096 on loopback (a receiver that falls behind: RNR
# NAKs) and ib_write_bw with 4 QPs over the veth slowed to 400 Mbit/s
# (tbf), so the sending socket runs out of room, with 64 KiB messages
# and with 1 KiB ones (whose posts keep their batches). Every program must exit
# 0 without an error completion; neither namespace's kernel may count a
# UDP datagram dropped for want of buffer room (UdpRcvbufErrors,
# UdpInErrors) nor a queue drop one (tc -s qdisc): the send window keeps
# what a QP has in flight within the peer's buffer; and no context may
# have left a packet unsent or dropped one on receipt (SOFTVERBS_STATS):
# a socket without room is waited for. Packets sent again (after a
# timeout or an RNR NAK) are counted and printed. Last, eight sender
# processes into one receiver context, whose buffer they would overflow
# together: it marks what arrives in its filling queue, they are told and
# send less, and every WRITE must complete; and a UC stream into a
# receiver stopped until its queue overflows: continued, it answers with
# CNPs, which the sender heeds. Needs root (the
# namespaces); fails under CI=true without it, skips loudly elsewhere.
# Prints "N passed, M failed" last.
# Usage: wire_load.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
tag="wl$$"
a="${tag}a"; b="${tag}b"
ip_a=10.232.0.1; ip_b=10.232.0.2
ITERS=${ITERS:-500}
log=$(mktemp -d)
pass=0; fail=0

cleanup() {
  # (A receiver stopped by the last case dies stopped too.)
  [ -n "${uc_server:-}" ] && kill -9 $uc_server 2>/dev/null
  kill -9 $(jobs -p) 2>/dev/null
  pkill -9 -f "wire-load-busy-$$" 2>/dev/null
  remove_two_hosts "$a" "$b"
  rm -rf "$log"
}
trap cleanup EXIT

two_hosts "the wire path under load (tests/programs/wire_load.sh)" \
  "$a" "$b" "$tag" "$ip_a" "$ip_b"

export SOFTVERBS_SHM=0 SOFTVERBS_SOCKET_BUFFER=212992 SOFTVERBS_STATS=1
# on_ns NS DEVICE_IP CMD...: CMD in namespace NS over softverbs0 on DEVICE_IP.
on_ns() {
  local ns=$1 dev=$2; shift 2
  ip netns exec "$ns" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev" "$@"
}
# Datagrams the namespaces' kernels dropped: their counters start at 0,
# they are ours alone. (UdpSndbufErrors is not one: it also counts every
# send that met EAGAIN, which loses nothing.)
drops() {
  local ns
  for ns in "$a" "$b"; do
    ip netns exec "$ns" nstat -az UdpRcvbufErrors UdpInErrors |
      awk -v ns="$ns" 'NR > 1 && $2 != 0 { print ns ": " $1 " " $2 }'
    tc -n "$ns" -s qdisc show |
      awk -v ns="$ns" '/^qdisc/ { q = $2 " on " $5 }
        /\(dropped/ { d = $0; sub(/.*\(dropped /, "", d); sub(/,.*/, "", d)
                      if (d + 0 > 0) print ns ": qdisc " q " dropped " d }'
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
  cat "$log"/*.cli "$log"/*.srv | grep -o 'softverbs: softverbs0 (pid.*' >> "$log/stats"
  rm -f "$log"/*.cli "$log"/*.srv
}

# perftest's -F everywhere beside busy processes: its clock calibration
# (a regression of cycles against gettimeofday) can fail when a sample is
# preempted ("Correlation coefficient r^2 < 0.9", "Can't produce a
# report", exit 1); with -F it prints its row anyway (a rate of 0 then),
# and these cases judge completions, not rates.
for i in 1 2; do
  bash -c "exec -a wire-load-busy-$$ bash -c 'while :; do :; done'" &
done

clients=()
for i in $(seq 8); do
  pair "w$i" "$a" "$ip_a" "$b" "$ip_b" $((18600 + i)) ib_write_bw -x 1 -F -n 3000 && clients+=("$cli")
done
[ ${#clients[@]} -eq 8 ] || clients=()
verdict "8 ib_write_bw pairs across a veth beside 2 busy processes" "${clients[@]}"

for test in ib_write_bw ib_read_bw; do
  pair "$test" "$a" "$ip_a" "$a" "$ip_a" 18700 "$test" -x 1 -F -a -n "$ITERS" && c=$cli || c=""
  verdict "$test -a on loopback beside 2 busy processes" $c
done
# Four QPs of one context into one peer share its send budget.
pair q4 "$a" "$ip_a" "$a" "$ip_a" 18701 ib_write_bw -x 1 -F -q 4 -n 3000 && c=$cli || c=""
verdict "ib_write_bw -q 4 on loopback beside 2 busy processes" $c
# Sixteen QPs of one context into one peer: the budget (31 packets of 4
# KiB with this socket buffer) holds fewer packets than the QPs send
# between their ACK requests, so the packet that fills it asks for one,
# and it counts what each packet costs the receiving socket. Before, the
# budget filled with packets asking for none and every QP waited for a
# timeout (some 17,000 of 256,000 packets sent again), then a full budget
# of packets arriving one by one overflowed the buffer (12 to 38). At
# most 1% of the packets the two ends send may be sent again (that
# regression sent 6.6% of the data packets): each time the scheduler
# holds the receiver, every QP goes back early once, and a loaded 2-CPU
# host held it often enough for 176 to 1,031 packets sent again where
# the limit was one budget's worth, 31. (A SEND may also be sent again
# after an RNR NAK, a receiver late to post.)
pair q16 "$a" "$ip_a" "$a" "$ip_a" 18702 ib_write_bw -x 1 -F -q 16 -n 1000 && c=$cli || c=""
# (Not a bare `wait`, which would wait for the busy processes.)
[ -n "$c" ] && wait $c 2>/dev/null
resent=$(cat "$log"/q16.* | grep -o '[0-9]* resent' | awk '{ r += $1 } END { print r + 0 }')
sent=$(cat "$log"/q16.* | grep -o '[0-9]* packets sent' | awk '{ s += $1 } END { print s + 0 }')
verdict "ib_write_bw -q 16 on loopback beside 2 busy processes" $c
if [ -n "$c" ] && [ "$sent" -gt 0 ] && [ $((resent * 100)) -le "$sent" ]; then
  ok "ib_write_bw -q 16: no timeouts ($resent of $sent packets sent again)"
else
  echo "${resent:-?} of ${sent:-?} packets sent again" > "$log/q16resent"
  bad "ib_write_bw -q 16: no timeouts (at most 1% of the packets sent again)" "$log/q16resent"
fi

pkill -9 -f "wire-load-busy-$$"

# SENDs of one packet each into a receiver that posts its receive WRs
# again as they complete, and RNR NAKs when it falls behind (alone on the
# machine: it falls behind more readily than beside busy processes, which
# slow the sender too). The packets after the NAKed one may still wait
# unread when the RNR wait ends, and Linux keeps up to a quarter of the
# buffer charged for datagrams already read: so the first packet sent
# again goes alone until answered, and the window leaves that quarter
# free. Before, 4 runs of 10 of it on 127.0.0.1 lost 5 to 11 datagrams,
# though this case passed 3 runs of 3; the tests that show each cause
# are the engine's a_go_back_never_fills_a_slow_receivers_buffer_past_the_window
# and the transport's a_window_fits_beside_datagrams_read_and_not_yet_given_back.
pair send "$a" "$ip_a" "$a" "$ip_a" 18703 ib_send_bw -x 1 -F -s 4096 -n 20000 && c=$cli || c=""
verdict "ib_send_bw -s 4096 on loopback" $c


# A sending socket without room: the veth from B to A at 400 Mbit/s with
# a queue deeper than the socket's send buffer, so the queue holds the
# socket's packets and sending meets EAGAIN instead of a qdisc drop.
# The client's send buffer (32 KiB, 64 KiB as the kernel counts) is
# smaller than what its send window lets it have in flight (31 packets of
# 4 KiB), so the queue always fills it.
ip netns exec "$b" tc qdisc add dev "${tag}y" root tbf rate 400mbit burst 64kb limit 8mb
SOFTVERBS_SOCKET_BUFFER=212992,32768 \
  pair slow "$a" "$ip_a" "$b" "$ip_b" 18800 ib_write_bw -x 1 -q 4 -n 400 && c=$cli || c=""
wait $c 2>/dev/null; waits=$(grep -o '[0-9]* waits for socket room' "$log/slow.cli" | cut -d' ' -f1)
verdict "ib_write_bw -q 4 over a veth at 400 Mbit/s" $c
if [ "${waits:-0}" -gt 0 ]; then
  ok "the sender waited for socket room ($waits times) instead of dropping"
else
  echo "client: ${waits:-no} waits for socket room" > "$log/waits"
  bad "the sender waited for socket room" "$log/waits"
fi

# The same link with messages of one packet: a post of sends keeps its
# part-filled batch for the next while earlier packets await their ACKs
# (crates/transport/src/corked_batch.rs), so the batches that meet the
# full socket are nearly all kept ones, flushed by a later post or by the
# progress thread; they must wait for room as any other, not be lost
# (each loss would cost a local ACK timeout).
SOFTVERBS_SOCKET_BUFFER=212992,32768 \
  pair slow_small "$a" "$ip_a" "$b" "$ip_b" 18810 ib_write_bw -x 1 -s 1024 -n 20000 && c=$cli || c=""
wait $c 2>/dev/null; said=$(grep -o 'softverbs: softverbs0 (pid.*' "$log/slow_small.cli")
kept=$(echo "$said" | grep -o '[0-9]* batches kept' | cut -d' ' -f1)
waits=$(echo "$said" | grep -o '[0-9]* waits for socket room' | cut -d' ' -f1)
resent=$(echo "$said" | grep -o '[0-9]* resent' | cut -d' ' -f1)
verdict "ib_write_bw -s 1024 over a veth at 400 Mbit/s" $c
if [ "${kept:-0}" -gt 0 ] && [ "${waits:-0}" -gt 0 ] && [ "${resent:-1}" -eq 0 ]; then
  ok "kept batches waited for socket room ($kept kept, $waits waits), nothing sent again"
else
  echo "client: ${said:-no counters}" > "$log/kept"
  bad "kept batches waited for socket room, nothing sent again" "$log/kept"
fi

# Every context's counters: nothing unsent, nothing dropped on receipt.
if [ -s "$log/stats" ] && ! grep -Ev ' 0 not sent, 0 dropped on receipt' "$log/stats" > "$log/lossy"; then
  ok "no packet unsent or dropped on receipt ($(wc -l < "$log/stats") contexts)"
else
  bad "no packet unsent or dropped on receipt" "$log/lossy"
fi
awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "resent,") r += $i } END { print "packets resent under load (local ACK timeouts, early go-backs, RNR waits):", r + 0 }' "$log/stats"
lost=$(drops)
if [ -z "$lost" ]; then
  ok "no UDP datagram dropped for want of buffer room"
else
  echo "$lost" > "$log/lost"
  bad "no UDP datagram dropped for want of buffer room" "$log/lost"
fi

# Eight sender processes, each with its own context, WRITE into one
# receiver context at once (fan_in.c). Each sender's budget is five
# eighths of a buffer the size of its own, standing for the receiver's,
# so eight together would overflow it: the receiver marks what arrives
# while its queue fills with several senders' data, and the senders,
# told in the ACKs (BECN), keep fewer packets in flight. Every WRITE must
# complete, the marks and notices must have happened (SOFTVERBS_STATS);
# datagrams the kernel still drops, before the first notices arrive, are
# recovered like any lost on a network and counted. After the drop check
# above, which this case may fail.
fan_drops() { ip netns exec "$a" nstat -az UdpRcvbufErrors | awk 'NR > 1 { print $2 + 0 }'; }
# fan_count WORDS: the sum of the numbers before WORDS in the stats lines.
fan_count() {
  grep -o "[0-9]* $1" "$log/fan_in.out" | awk '{ n += $1 } END { print n + 0 }'
}
before=$(fan_drops)
if cc -O1 -o "$log/fan_in" "$here/fan_in.c" -libverbs 2> "$log/fan_in.out" &&
   on_ns "$a" "$ip_a" timeout 120 "$log/fan_in" 8 500 >> "$log/fan_in.out" 2>&1 &&
   grep -q "fan-in ok" "$log/fan_in.out" &&
   [ "$(fan_count "marked in a filling queue")" -gt 0 ] &&
   [ "$(fan_count "congestion notices received")" -gt 0 ]; then
  ok "8 sender contexts into one: every WRITE completed, $(fan_count "marked in a filling queue") packets marked, $(fan_count "congestion notices received") notices ($(( $(fan_drops) - before )) datagrams dropped and recovered)"
else
  bad "8 sender contexts into one: every WRITE completed, the receiver marked, the senders were told" "$log/fan_in.out"
fi

# UC keeps no window: a sender faster than its receiver fills the
# receiver's socket until the kernel drops datagrams (a UC ib_send_bw -a
# with this buffer lost 1,228 and 2,524 in two runs of three, and hung).
# The receiver marks the UC data it reads while its queue fills and
# answers with CNPs, and the sender paces itself
# (crates/engine/src/cnp.rs, pacing.rs). To fill the queue for certain,
# the receiver is stopped until its kernel drops a datagram, then
# continued: it must send CNPs and the sender receive them, and the
# stream end well. (What the stopped receiver's kernel dropped is lost,
# as UC loses it: after the drop check above.)
dropped_before=$(fan_drops)
# Line-buffered, so that the client's heading and row reach the file as
# printed.
pair uc_cnp "$a" "$ip_a" "$a" "$ip_a" 18705 stdbuf -oL ib_write_bw -x 1 -F -c UC -s 65536 -D 4 && c=$cli || c=""
# Once the stream runs (the client prints its results' heading as it
# starts, its row when it ends) and not before: stopped in the
# connection's exchange, the server would hold the client there.
deadline=$((SECONDS + 60))
until grep -q '#bytes' "$log/uc_cnp.cli" || ! kill -0 "$c" 2>/dev/null || [ $SECONDS -ge $deadline ]; do sleep 0.01; done
uc_server=$(pgrep -f -- "^ib_write_bw .*-p 18705$")
stopped=no
if [ -n "$c" ] && [ -n "$uc_server" ] && kill -STOP $uc_server; then
  until [ "$(fan_drops)" -gt "$dropped_before" ] || ! kill -0 "$c" 2>/dev/null || [ $SECONDS -ge $deadline ]; do sleep 0.01; done
  if [ "$(fan_drops)" -gt "$dropped_before" ] && ! grep -qE '^ *65536 ' "$log/uc_cnp.cli"; then
    stopped=yes
  fi
  kill -CONT $uc_server
fi
if [ $stopped = no ]; then
  echo "the receiver was not stopped while the stream ran until its kernel dropped a datagram" > "$log/uc_stop"
  bad "a UC receiver stopped during the stream until its kernel dropped" "$log/uc_stop"
fi
verdict "a UC stream into a receiver stopped, then continued" $c
said=$(grep -h 'softverbs: softverbs0 (pid' "$log/stats" | tail -n 2)
cnp_sent=$(echo "$said" | grep -o 'CNPs: [0-9]* sent' | awk '{ n += $2 } END { print n + 0 }')
cnp_received=$(echo "$said" | grep -o 'sent, [0-9]* received' | awk '{ n += $2 } END { print n + 0 }')
if [ "$cnp_sent" -gt 0 ] && [ "$cnp_received" -gt 0 ]; then
  ok "the continued UC receiver sent CNPs ($cnp_sent) and the sender heeded them ($cnp_received)"
else
  echo "$said" > "$log/cnp"
  bad "the continued UC receiver sent CNPs and the sender received them" "$log/cnp"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
