#!/usr/bin/env bash
# Runs unmodified rdma-core programs (ibverbs-utils, perftest) over
# softverbs in preload mode, server and client as two processes on
# loopback, and checks each on its own output. Prints "N passed, M failed"
# last and exits non-zero on any failure. Usage: run.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
export LD_PRELOAD=$SO
pass=0; fail=0; n=0
log=$(mktemp -d)
trap 'rm -rf "$log"; kill $(jobs -p) 2>/dev/null' EXIT
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
PORT_BASE=$(random_port_base)

ONE_TIMEOUT=30

# pair NAME EXPECT CMD...: runs CMD as a server and, once it listens,
# CMD 127.0.0.1 as a client on a fresh TCP port; both must exit 0 and the
# client's output match EXPECT.
pair() {
  local name=$1 expect=$2; shift 2
  n=$((n + 1)); local port=$((PORT_BASE + n)) crc src
  serve_then_connect $port timeout 60 "$@" -p $port --then timeout 60 "$@" -p $port 127.0.0.1
  pair_verdict "$name" "$expect"
}

# The softverbs command, from the same build.
CLI=$(dirname "$SO")/softverbs
one "softverbs devices" "softverbs0 +127\.0\.0\.1" env -u LD_PRELOAD "$CLI" devices
# rxe's GID table: a link-local GID at index 0, the IPv4-mapped one at 1.
one "softverbs devices: GID 0 link-local" "GID\[  0\]: fe80::5efe:7f00:1, RoCE v2 \(link-local, sent as 127\.0\.0\.1\)" \
  env -u LD_PRELOAD "$CLI" devices
one "softverbs devices: GID 1 IPv4-mapped" "GID\[  1\]: ::ffff:127\.0\.0\.1, RoCE v2$" \
  env -u LD_PRELOAD "$CLI" devices
one "softverbs run -- ibv_devices" "softverbs0" env -u LD_PRELOAD "$CLI" run -- ibv_devices
one "softverbs run: missing program is a clear error" "cannot run /no/such/program" \
  sh -c "env -u LD_PRELOAD '$CLI' run -- /no/such/program 2>&1; test \$? -ne 0"
one "a bad SOFTVERBS_DEVICES is a clear error" "SOFTVERBS_DEVICES: .nonsense. is not" \
  sh -c "SOFTVERBS_DEVICES=nonsense env -u LD_PRELOAD '$CLI' devices 2>&1; test \$? -ne 0"
# A configuration file the user named that is not there (until
# 2026-12-07 the built-in device was used in silence).
one "a SOFTVERBS_CONFIG file that is not there is a clear error" "SOFTVERBS_CONFIG=/no/such/devices.conf: No such file" \
  sh -c "env -u SOFTVERBS_DEVICES -u LD_PRELOAD SOFTVERBS_CONFIG=/no/such/devices.conf '$CLI' devices 2>&1; test \$? -ne 0"
# A SOFTVERBS_SHM that is neither 0 nor 1 is said (it was taken as unset
# in silence).
one "a SOFTVERBS_SHM that is neither 0 nor 1 is said" "SOFTVERBS_SHM=yes is neither 0 nor 1; taken as unset" \
  env SOFTVERBS_SHM=yes ibv_devinfo -d softverbs0
# 192.0.2.1 is TEST-NET-1 (RFC 5737): on no interface of a test host.
one "a device address not on this host is a clear error" "address 192.0.2.1 is on no interface" \
  sh -c "SOFTVERBS_DEVICES=softverbs0=192.0.2.1 env -u LD_PRELOAD '$CLI' run -- ibv_devinfo 2>&1; test \$? -ne 0"
one "softverbs devices says a device's address is on no interface" "not usable here: no interface of this network namespace has 192\.0\.2\.1" \
  sh -c "SOFTVERBS_DEVICES=softverbs0=192.0.2.1 env -u LD_PRELOAD '$CLI' devices"
one "softverbs devices into a pipe closed early ends quietly" "^rc 0, said nothing$" \
  bash -c "env -u LD_PRELOAD '$CLI' devices 2> '$log/devices.err' | true; echo \"rc \${PIPESTATUS[0]}, said \$(test -s '$log/devices.err' && echo something || echo nothing)\""
one "ibv_devinfo -v reports the multicast limits" "max_mcast_grp:[[:space:]]+8192" ibv_devinfo -v -d softverbs0
one "SOFTVERBS_DEVICES names the devices" "sv-test0" \
  env SOFTVERBS_DEVICES="sv-test0=127.0.0.1" ibv_devices
# Pass-through devices front real ones (docs/passthrough.md, tested on rxe
# in make interop); here, with no real device, one lists and fails to open.
one "a pass-through device is listed" "sv-pt0" \
  env SOFTVERBS_DEVICES="softverbs0=127.0.0.1 sv-pt0=passthrough:no_such_dev" ibv_devices
one "softverbs devices says a pass-through device's real device is missing" \
  "not usable here: this host has no RDMA device no_such_dev" \
  env -u LD_PRELOAD SOFTVERBS_DEVICES="softverbs0=127.0.0.1 sv-pt0=passthrough:no_such_dev" "$CLI" devices
one "softverbs devices says a fault rule names a device not configured" \
  "SOFTVERBS_FAULTS rule 1 names device softverbs9, which is not configured: it never fires" \
  env -u LD_PRELOAD SOFTVERBS_FAULTS="packet drop device=softverbs9" "$CLI" devices
one "softverbs devices refuses a SOFTVERBS_FAULTS every open would refuse" "bad SOFTVERBS_FAULTS, which fails every device's open" \
  sh -c "SOFTVERBS_FAULTS=bogus env -u LD_PRELOAD '$CLI' devices 2>&1; test \$? -ne 0"
one "a pass-through device whose real device is missing fails to open, saying why" \
  "cannot open sv-pt0: the real device no_such_dev did not open \(No such device" \
  sh -c "SOFTVERBS_DEVICES=sv-pt0=passthrough:no_such_dev ibv_devinfo -d sv-pt0 2>&1; test \$? -ne 0"

# Our own C check of ibv_create_cq_ex and its polling API (no rdma-core
# utility uses it without completion timestamps, which softverbs does not
# offer).
if cc -O1 -o "$log/cq_ex" "$here/cq_ex.c" -libverbs 2> "$log/cc"; then
  one "ibv_create_cq_ex polling API" "cq_ex ok" "$log/cq_ex"
  # A completion rule reaches the status and vendor error the polling API
  # reads (the pass-through equivalent runs on rxe in make interop).
  one "a completion status= rule on the extended CQ" "status 10 vendor_err 66" \
    sh -c "SOFTVERBS_FAULTS='completion opcode=SEND status=REM_ACCESS_ERR vendor_err=66' '$log/cq_ex' 2>&1; test \$? -ne 0"
else
  bad "ibv_create_cq_ex polling API (compile)" "$log/cc"
fi

# Our own C check of ibv_get_async_event: SRQ limit and last-WQE events
# arrive through the context's async fd with verbs.h's event numbers.
if cc -O1 -o "$log/async_events" "$here/async_events.c" -libverbs 2> "$log/cc"; then
  one "ibv_get_async_event (SRQ limit, last WQE)" "async events ok" "$log/async_events"
else
  bad "ibv_get_async_event (compile)" "$log/cc"
fi

# Our own C check of error paths through the provider: a partly accepted
# post list (EINVAL, bad_wr), a completion channel in use (EBUSY), a GID
# index past the table, ibv_reg_mr out of descriptors (EMFILE), the
# completions a destroyed QP left in its CQ.
if cc -O1 -o "$log/verb_errors" "$here/verb_errors.c" -libverbs 2> "$log/cc"; then
  one "verb error paths (bad_wr, EBUSY channel, GID index, EMFILE reg_mr, completions outlive their QP)" "verb errors ok" "$log/verb_errors"
else
  bad "verb error paths (compile)" "$log/cc"
fi

# Several devices are listed in the order configured (as rxe's, in the
# kernel's index order): libibverbs lists them in the order readdir gives
# the view's uverbs directory, which the file system chose (tmpfs newest
# first, ext4 by a hash), so the first device, which ibv_devinfo and
# perftest take without -d, was another (found by a helper).
five=softverbs0=127.0.0.1,softverbs1=127.0.0.2,softverbs2=127.0.0.3,softverbs3=127.0.0.4,softverbs4=127.0.0.5
listed=$(SOFTVERBS_DEVICES=$five timeout 20 ibv_devices 2>&1 | awk '$1 ~ /^softverbs/ {print $1}' | tr '\n' ' ')
first=$(SOFTVERBS_DEVICES=$five timeout 20 ibv_devinfo 2>&1 | awk '$1 == "hca_id:" {print $2; exit}')
if [ "$listed" = "softverbs0 softverbs1 softverbs2 softverbs3 softverbs4 " ] && [ "$first" = softverbs0 ]; then
  ok "five devices are listed in the order configured; ibv_devinfo without -d shows the first"
else
  echo "listed: $listed; ibv_devinfo's first: $first" > "$log/order"
  bad "five devices are listed in the order configured; ibv_devinfo without -d shows the first" "$log/order"
fi

# UD multicast between two processes: the receiver attaches to a group and
# says "ready" (it has joined the group by then); the sender sends
# three datagrams to it. Once with an IPv4 group, once with an
# InfiniBand-style IPv6 MGID (perftest -g's default kind: it travels as an
# IPv4 group derived from it; the daemon once refused to join it).
if cc -O1 -o "$log/mcast" "$here/mcast.c" -libverbs 2> "$log/cc"; then
  for group in 239.$((RANDOM % 200 + 20)).$((RANDOM % 250)).$((RANDOM % 250 + 1)) \
      ff12:401b:ffff::$(printf %x $RANDOM); do
    timeout 60 "$log/mcast" recv "$group" > "$log/mrecv" 2>&1 &
    mrecv=$!
    deadline=$((SECONDS + 20))
    until grep -q ready "$log/mrecv" || ! kill -0 $mrecv 2>/dev/null || [ $SECONDS -ge $deadline ]; do
      sleep 0.02 # poll interval; the loop ends on the condition
    done
    timeout 60 "$log/mcast" send "$group" > "$log/msend" 2>&1
    wait $mrecv
    cat "$log/msend" >> "$log/mrecv"
    if grep -q "mcast recv ok" "$log/mrecv" && grep -q "mcast send ok" "$log/mrecv"; then
      ok "UD multicast between two processes, group $group (attach, deliver, EBUSY destroy, detach)"
    else
      bad "UD multicast between two processes, group $group" "$log/mrecv"
    fi
  done
else
  bad "UD multicast (compile)" "$log/cc"
fi

# Application mistakes that once crashed the process: bad registrations,
# buffers unmapped under an MR, huge SGE counts and inline lengths; and
# errno, flow label and cmd_fd as a kernel provider leaves them.
if cc -O1 -o "$log/app_mistakes" "$here/app_mistakes.c" -libverbs 2> "$log/cc"; then
  one "application mistakes are errors, not crashes" "app mistakes ok" "$log/app_mistakes"
  one "an MR made PROT_NONE under a crash reporter installed after open: errors, the reporter never runs" \
    "late fault handler ok" "$log/app_mistakes" late-fault-handler
else
  bad "application mistakes (compile)" "$log/cc"
fi

# Verbs under an address-space limit: ENOMEM from creating verbs and
# posts, never an abort (a Rust allocation that fails aborts).
if cc -O1 -o "$log/memory_limit" "$here/memory_limit.c" -libverbs 2> "$log/cc"; then
  one "under RLIMIT_AS: contexts, QPs, CQs and receives of many SGEs get ENOMEM, no abort" \
    "memory limit ok" "$log/memory_limit"
else
  bad "memory limit (compile)" "$log/cc"
fi

# Several threads posting and polling one QP and CQ (ibv_post_send and
# ibv_wr_*, ibv_poll_cq and ibv_start_poll) and their own QPs of the same
# context; every completion and every byte checked.
if cc -O1 -pthread -o "$log/threads" "$here/threads.c" -libverbs 2> "$log/cc"; then
  one "threads sharing a QP, a CQ and a context" "threads ok" "$log/threads"
else
  bad "threads (compile)" "$log/cc"
fi

# pthread_cancel of a thread posting and polling, and of one blocked in
# ibv_get_cq_event: each ends, the process lives on (a cancellation once
# acted in softverbs' own system calls and aborted it).
if cc -O1 -pthread -o "$log/thread_cancel" "$here/thread_cancel.c" -libverbs 2> "$log/cc"; then
  one "pthread_cancel of threads in verbs: they end, the context serves on" "thread cancel ok" \
    "$log/thread_cancel"
else
  bad "thread cancel (compile)" "$log/cc"
fi

# A process whose main thread ended with pthread_exit while another thread
# goes on: ibv_reg_mr, rdma_cm and a peer's WRITE and READ into it work,
# on both paths (softverbs named its own memory by the process's id, which
# then answers nothing: ibv_reg_mr failed EFAULT).
if cc -O1 -pthread -DWITH_RDMA_CM -o "$log/main_thread_ended" "$here/main_thread_ended.c" \
    -libverbs -lrdmacm 2> "$log/cc"; then
  one "verbs and rdma_cm after the main thread ended, same host" "main thread ended ok" \
    "$log/main_thread_ended"
  one "verbs and rdma_cm after the main thread ended, wire" "main thread ended ok" \
    env SOFTVERBS_SHM=0 "$log/main_thread_ended"
else
  bad "main thread ended (compile)" "$log/cc"
fi

# A program whose main thread ends with pthread_exit ends with its last
# thread (softverbs' own threads kept it alive for ever), and not before:
# a worker idle for longer than softverbs waits between its looks, with an
# rdma_cm channel open too, threads that start one another, an exit
# handler whose verbs on 4 contexts complete, and a signal handler that
# must run on the application's thread, to its end; each on both paths.
if cc -O1 -pthread -DWITH_RDMA_CM -o "$log/main_thread_exit" "$here/main_thread_exit.c" \
    -libverbs -lrdmacm 2> "$log/cc"; then
  for mode in plain cm relay handlers signal; do
    one "pthread_exit in main: the process ends with its last thread ($mode), same host" \
      "main thread exit ok" "$log/main_thread_exit" $mode
    one "pthread_exit in main: the process ends with its last thread ($mode), wire" \
      "main thread exit ok" env SOFTVERBS_SHM=0 "$log/main_thread_exit" $mode
  done
else
  bad "main thread exit (compile)" "$log/cc"
fi

# A client that exits right after its last poll, without clean-up, against
# ibv_rc_pingpong's server: the ACK of the server's last SEND, which the
# last poll may keep for a next verb on the wire path, leaves at exit, and
# the server's last SEND completes. Whether the last poll kept it depends on
# the progress thread's timing (without the exit handler, 2 rounds in 5
# failed): 3 rounds.
if cc -O1 -o "$log/exit_after_poll" "$here/exit_after_poll.c" -libverbs 2> "$log/cc"; then
  for round in 1 2 3; do
    n=$((n + 1)); port=$((PORT_BASE + n))
    serve_then_connect $port timeout 60 ibv_rc_pingpong -d softverbs0 -g 1 -n 400 -p $port \
      --then timeout 60 "$log/exit_after_poll" softverbs0 1 $port 127.0.0.1 400
    [ "$crc" = 0 ] && [ "$src" = 0 ] || break
  done
  pair_verdict "a client that exits right after its last poll still acknowledges" "400 iters, exiting"
else
  bad "exit right after the last poll (compile)" "$log/cc"
fi

# On the wire too, a receive completion is in the receiver's CQ once its
# SEND completed (the responder queues it before its ACK leaves):
# completion_order.c, which same_host.sh runs on the same-host path.
if cc -O1 -o "$log/completion_order" "$here/completion_order.c" -libverbs 2> "$log/cc"; then
  ONE_TIMEOUT=120 one "on the wire, a receive completion is in the CQ once its SEND completed" \
    "completion_order ok" env SOFTVERBS_SHM=0 "$log/completion_order" 100000
else
  bad "completion order on the wire (compile)" "$log/cc"
fi

# SOFTVERBS_STATS for a context open at exit (stats_at_exit.c): one
# counters line, the opening process's; not a second when an exit handler
# of the program closes the context after softverbs' handler printed it,
# and none from a forked child's exit.
if cc -O1 -o "$log/stats_at_exit" "$here/stats_at_exit.c" -libverbs 2> "$log/cc"; then
  name="SOFTVERBS_STATS: a context open at exit is counted once, by its own process"
  SOFTVERBS_STATS=1 timeout 30 "$log/stats_at_exit" > "$log/stats.out" 2> "$log/stats.err"
  rc=$?
  parent=$(sed -n 's/^parent //p' "$log/stats.out")
  lines=$(grep -c '^softverbs: softverbs0 (pid ' "$log/stats.err")
  theirs=$(grep -c "^softverbs: softverbs0 (pid $parent)" "$log/stats.err")
  if [ $rc = 0 ] && [ "$lines" = 1 ] && [ "$theirs" = 1 ]; then
    ok "$name"
  else
    echo "exit $rc; $lines counters lines, $theirs of the parent (pid $parent)" >> "$log/stats.err"
    bad "$name" "$log/stats.err"
  fi
else
  bad "SOFTVERBS_STATS at exit (compile)" "$log/cc"
fi

one "ibv_devices" "softverbs0" ibv_devices
one "ibv_devinfo -v" "PORT_ACTIVE.*|link_layer:[[:space:]]+Ethernet" ibv_devinfo -v -d softverbs0
one "ibv_devinfo GID 0 (link-local)" "GID\[  0\]:[[:space:]]+fe80::5efe:7f00:1, RoCE v2" ibv_devinfo -v -d softverbs0
one "ibv_devinfo GID 1 (IPv4-mapped)" "GID\[  1\]:[[:space:]]+::ffff:127\.0\.0\.1, RoCE v2" ibv_devinfo -v -d softverbs0

iters="[0-9]+ iters in"
pair "ibv_rc_pingpong" "$iters" ibv_rc_pingpong -d softverbs0 -g 0
pair "ibv_rc_pingpong -e" "$iters" ibv_rc_pingpong -d softverbs0 -g 0 -e
pair "ibv_rc_pingpong -N (ibv_create_qp_ex, ibv_wr_*)" "$iters" ibv_rc_pingpong -d softverbs0 -g 0 -N
pair "ibv_rc_pingpong 1 byte" "$iters" ibv_rc_pingpong -d softverbs0 -g 0 -s 1 -n 2000
pair "ibv_rc_pingpong 5000 bytes (above MTU)" "$iters" ibv_rc_pingpong -d softverbs0 -g 0 -s 5000 -n 500
pair "ibv_rc_pingpong 1 MiB" "$iters" ibv_rc_pingpong -d softverbs0 -g 0 -s 1048576 -n 20
pair "ibv_uc_pingpong" "$iters" ibv_uc_pingpong -d softverbs0 -g 0
pair "ibv_ud_pingpong" "$iters" ibv_ud_pingpong -d softverbs0 -g 0
pair "ibv_srq_pingpong" "$iters" ibv_srq_pingpong -d softverbs0 -g 0
# GID index 1 (the IPv4-mapped GID, which programs written for rxe use),
# and an IPv6 device (GID 0 fe80::1, GID 1 ::1).
pair "ibv_rc_pingpong -g 1" "$iters" ibv_rc_pingpong -d softverbs0 -g 1
pair "ibv_ud_pingpong -g 1" "$iters" ibv_ud_pingpong -d softverbs0 -g 1
for g in 0 1; do
  pair "ibv_rc_pingpong -g $g, device on ::1" "$iters" \
    env SOFTVERBS_DEVICES=softverbs0=::1 ibv_rc_pingpong -d softverbs0 -g $g
done

row="^ +[0-9]+ +[0-9]+ +[0-9.]+"
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
  pair "$t" "$row" $t -d softverbs0 -x 0
done
pair "ib_write_bw -x 1" "$row" ib_write_bw -d softverbs0 -x 1
pair "ib_send_bw -x 1" "$row" ib_send_bw -d softverbs0 -x 1
# Completion events: the latency tests take an event, arm the CQ, then
# poll once (an event raised at that arm once made the next post fail).
for t in ib_read_lat ib_send_lat ib_atomic_lat; do
  pair "$t -e" "$row" $t -d softverbs0 -x 0 -e -n 300
done
# The bandwidth test with events and CQ moderation takes an event, arms,
# polls one batch of 16 completions and arms again: the completions left
# must raise the next event at that arm (on the same-host path, where they
# all came at once, the client slept for ever).
pair "ib_send_bw -e -Q 16 -t 1024 -r 2048" "$row" \
  ib_send_bw -d softverbs0 -x 1 -e -Q 16 -t 1024 -r 2048 -n 5000

# The steady state allocates nothing per work request (issue 13), in
# either process and any of their threads: a program run with 1,000 and
# then 3,000 iterations makes as many heap allocations (counted by
# count_allocations.c) within 20 on each side. One allocation per WR
# would add 2,000; the slack is for the progress thread's timing.
# (The engine's and the transport's own tests count one thread's; this
# counts the same-host path too, and the provider around them.)
# (The count may end a program's last line, which lacks its newline.)
allocations() { sed -n 's/.*allocations: \([0-9]*\)$/\1/p' "$1" | tail -n 1; }
steady() {
  local name=$1; shift
  local counts=() runs=(1000 3000) k port crc src
  for k in "${runs[@]}"; do
    n=$((n + 1)); port=$((PORT_BASE + n))
    serve_then_connect $port env LD_PRELOAD="$SO $log/count_allocations.so" timeout 60 "$@" -n $k -p $port \
      --then env LD_PRELOAD="$SO $log/count_allocations.so" timeout 60 "$@" -n $k -p $port 127.0.0.1
    if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
      both_logs "$crc" "$src" "$log/cli" "$log/srv" > "$log/both"
      bad "$name allocates nothing per WR" "$log/both"; return
    fi
    counts+=("$(allocations "$log/srv")" "$(allocations "$log/cli")")
  done
  local said="server ${counts[0]} then ${counts[2]}, client ${counts[1]} then ${counts[3]} allocations"
  if [ -n "${counts[0]}" ] && [ -n "${counts[1]}" ] &&
    [ $((counts[2] - counts[0])) -le 20 ] && [ $((counts[3] - counts[1])) -le 20 ]; then
    ok "$name allocates nothing per WR ($said)"
  else
    echo "$said at ${runs[0]} then ${runs[1]} iterations" > "$log/both"
    bad "$name allocates nothing per WR" "$log/both"
  fi
}
if cc -O2 -Wall -Wextra -shared -fPIC -o "$log/count_allocations.so" "$here/count_allocations.c" 2> "$log/cc"; then
  for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat; do
    steady "$t" $t -d softverbs0 -x 0
  done
  steady "ib_send_bw 64 KiB" ib_send_bw -d softverbs0 -x 0 -s 65536
  # UD and UC as ping-pongs: a UC or UD sender that outruns a receiver
  # the machine's load holds back loses messages on the wire (no
  # retransmission), and the bandwidth test's server then waits for ever.
  steady "ib_send_lat UD" ib_send_lat -d softverbs0 -x 0 -c UD
  steady "ib_send_lat UC" ib_send_lat -d softverbs0 -x 0 -c UC
else
  bad "count_allocations.c builds" "$log/cc"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
