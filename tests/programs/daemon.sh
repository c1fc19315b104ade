#!/usr/bin/env bash
# The host daemon (softverbs daemon, UDP 4791) as programs meet it: the
# first program starts it without its descriptors or blocked signals, it outlives that
# program, several programs share it, a `kill -9` of one program disturbs
# no other's traffic (even mid-transfer), it leaves once idle, a
# daemon killed under a listening rdma_cm program is replaced (its
# contexts' port goes down, IBV_EVENT_PORT_ERR), and one
# killed under a connected rdma_cm pair ends both (DEVICE_REMOVAL), and a
# stopped one fails a program's open after 10 s, saying so. Runs on
# a loopback address and daemon socket of its own, so a daemon other tests
# left running is not involved; a second daemon asked for that address
# refuses it.
# Prints "N passed, M failed" last. Usage: daemon.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
. "$(dirname "$(readlink -f "$0")")/lib.sh"
ip=127.77.$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))
export LD_PRELOAD=$SO
export SOFTVERBS_DEVICES="softverbs0=$ip"
export SOFTVERBS_DAEMON_SOCKET="softverbs-test-$$"
export SOFTVERBS_DAEMON_IDLE_EXIT=4
PORT_BASE=$(random_port_base)
pass=0; fail=0; n=0
log=$(mktemp -d)
cleanup() {
  kill -9 $(jobs -p) 2>/dev/null
  pkill -f -- "--socket $SOFTVERBS_DAEMON_SOCKET" 2>/dev/null
  pkill -f -- "--socket softverbs-test-other-$$" 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

BAD_LINES=15
daemons() { pgrep -f -- "daemon.*--socket $SOFTVERBS_DAEMON_SOCKET" | wc -l; }
# next_port VAR: a fresh TCP port into VAR (no subshell: n must advance).
next_port() { n=$((n + 1)); printf -v "$1" %d $((PORT_BASE + n)); }

# server NAME PORT CMD...: starts CMD -p PORT in the background (under
# timeout), waits until it listens; its pid is in $srv.
server() {
  local name=$1 port=$2; shift 2
  timeout 60 "$@" -p "$port" > "$log/$name" 2>&1 &
  srv=$!
  wait_listen "$port" "" $srv 2>> "$log/$name"
}

# victim NAME PORT CMD...: as server, but the program itself is $srv (no
# timeout in between), so that kill -9 $srv kills the program.
victim() {
  local name=$1 port=$2; shift 2
  "$@" -p "$port" > "$log/$name" 2>&1 &
  srv=$!
  wait_listen "$port" "" $srv 2>> "$log/$name"
}

# 1. Nothing runs; the first program starts the daemon. That program
#    holds a descriptor open without close-on-exec (9, on a file of the
#    test's), which the daemon, which outlives it, must not keep; and its
#    soft descriptor limit is low, and it blocks SIGTERM, which the
#    daemon, serving every program and ended by `kill` as any service,
#    must not keep either.
[ "$(daemons)" = 0 ] || bad "no daemon of this test's socket before the test"
next_port p1
exec 9> "$log/inherited"
soft_files=$(ulimit -Sn)
ulimit -Sn 64
if server s1 "$p1" env --block-signal=TERM ibv_rc_pingpong -d softverbs0 -g 0 && [ "$(daemons)" = 1 ]; then
  ok "the first program starts the daemon"
else
  bad "the first program starts the daemon" "$log/s1"
fi
ulimit -Sn "$soft_files"
exec 9>&-
s1=$srv
daemon_pid=$(pgrep -f -- "daemon.*--socket $SOFTVERBS_DAEMON_SOCKET" | head -1)
if [ -n "$daemon_pid" ] && ! ls -l /proc/$daemon_pid/fd 2>&1 | grep -q "$log/inherited"; then
  ok "the daemon keeps no descriptor of the program that started it"
else
  ls -l /proc/${daemon_pid:-self}/fd > "$log/daemon_fds" 2>&1
  bad "the daemon keeps no descriptor of the program that started it" "$log/daemon_fds"
fi
limits=$(grep "open files" /proc/${daemon_pid:-self}/limits 2>&1)
if [ -n "$daemon_pid" ] && [ "$(echo $limits | awk '{print $4}')" = "$(echo $limits | awk '{print $5}')" ]; then
  ok "the daemon's descriptor limit is the hard one, not its starter's 64"
else
  echo "$limits" > "$log/limits"
  bad "the daemon's descriptor limit is the hard one, not its starter's 64" "$log/limits"
fi

blocked=$(grep SigBlk /proc/${daemon_pid:-self}/status 2>&1)
if [ -n "$daemon_pid" ] && [ "$(echo $blocked | awk '{print $2}')" = 0000000000000000 ]; then
  ok "the daemon blocks no signal, though its starter blocked SIGTERM"
else
  echo "$blocked" > "$log/blocked"
  bad "the daemon blocks no signal, though its starter blocked SIGTERM" "$log/blocked"
fi

# An ibv_rc_pingpong client to the server listening on port $2 (pid $3),
# its output in $4: case $1 passes if both ends finish the exchange.
client_runs() {
  local name=$1 port=$2 server_pid=$3 out=$4
  timeout 60 ibv_rc_pingpong -d softverbs0 -g 0 -p "$port" "$ip" > "$out" 2>&1
  local c=$?
  wait "$server_pid"
  local r=$?
  if [ $c = 0 ] && [ $r = 0 ] && grep -q "iters in" "$out"; then
    ok "$name"
  else
    bad "$name" "$out"
  fi
}

# 2. A second program shares it; a kill -9 of that program leaves the
#    first one's connection working.
next_port p2
victim s2 "$p2" ibv_rc_pingpong -d softverbs0 -g 0
s2=$srv
[ "$(daemons)" = 1 ] && ok "a second program shares the daemon" || bad "a second program shares the daemon"
kill -9 $s2; wait $s2 2>/dev/null
client_runs "after a kill -9 of another program, a connection still runs" "$p1" $s1 "$log/c1"

# 3. The program that started the daemon is gone; new programs use it.
next_port p3
server s3 "$p3" ibv_rc_pingpong -d softverbs0 -g 0 -s 65536 -n 50
s3=$srv
timeout 60 ibv_rc_pingpong -d softverbs0 -g 0 -s 65536 -n 50 -p "$p3" "$ip" > "$log/c3" 2>&1; c3=$?
wait $s3; r3=$?
if [ $c3 = 0 ] && [ $r3 = 0 ] && [ "$(daemons)" = 1 ]; then
  ok "the daemon outlives the program that started it"
else
  bad "the daemon outlives the program that started it" "$log/c3"
fi

# 4. A kill -9 in the middle of another pair's transfer: the transfer
#    completes without an error completion.
next_port pv
victim v "$pv" ibv_rc_pingpong -d softverbs0 -g 0
victim=$srv
next_port pw
server w "$pw" ib_write_bw -d softverbs0 -x 0 -s 65536 -D 3
w=$srv
timeout 60 ib_write_bw -d softverbs0 -x 0 -s 65536 -D 3 -p "$pw" "$ip" > "$log/wc" 2>&1 &
wc=$!
# perftest prints its table header once the connection is up: then the
# transfer is running.
deadline=$((SECONDS + 20))
until grep -q "#bytes" "$log/wc" 2>/dev/null || [ $SECONDS -ge $deadline ] || ! kill -0 $wc 2>/dev/null; do
  sleep 0.05 # poll interval; the loop ends on the condition
done
kill -9 $victim; wait $victim 2>/dev/null
wait $wc; rwc=$?
wait $w; rw=$?
if [ $rwc = 0 ] && [ $rw = 0 ] && grep -q "^ 65536" "$log/wc"; then
  ok "a kill -9 mid-transfer of another program leaves the transfer intact"
else
  bad "a kill -9 mid-transfer of another program leaves the transfer intact" "$log/wc"
fi

# 5. With no program left, the daemon leaves after its idle time.
deadline=$((SECONDS + 4 + 15))
while [ "$(daemons)" != 0 ] && [ $SECONDS -lt $deadline ]; do
  sleep 0.1 # poll interval; the loop ends on the condition
done
[ "$(daemons)" = 0 ] && ok "the daemon exits once idle" || bad "the daemon exits once idle"

# 6. A SOFTVERBS_UDP_PORT that is no port is said, and 4791 used (by a
# daemon of its own, started on demand, which inherits it).
one "SOFTVERBS_UDP_PORT=abc: said, and 4791 used" "SOFTVERBS_UDP_PORT=abc is not a UDP port; using 4791" \
  env SOFTVERBS_UDP_PORT=abc SOFTVERBS_DAEMON_SOCKET="softverbs-badport-$$" SOFTVERBS_DAEMON_IDLE_EXIT=1 \
  ibv_devinfo -d softverbs0
# That daemon receives on the device address's UDP 4791 until its idle
# second has passed: the next test's daemon could not (a fresh-clone run
# once started it in that second).
deadline=$((SECONDS + 15))
while pgrep -f -- "daemon.*--socket softverbs-badport-$$" > /dev/null && [ $SECONDS -lt $deadline ]; do
  sleep 0.1 # poll interval; the loop ends on the condition
done

# 7. The daemon dies (kill -9) while an rdma_cm server listens: that
#    process lets go of the dead daemon's steering group (it says so),
#    and the daemon the next program starts serves new connections
#    (while such a process lived, every new connection into the host
#    failed: the kernel steered packets to its stale socket).
next_port p7
SOFTVERBS_CM_TRACE=1 timeout 60 rping -s -a "$ip" -p "$p7" > "$log/rping" 2>&1 &
cm=$!
next_port p7b
# ibv_asyncwatch (line-buffered: its output goes to a file) watches a
# context of its own for the port's events.
timeout 60 stdbuf -oL ibv_asyncwatch -d softverbs0 > "$log/watch" 2>&1 &
watch=$!
if wait_output "$log/rping" "command 7: Ok" $cm 2>> "$log/rping.wait" &&
   server s7 "$p7b" ibv_rc_pingpong -d softverbs0 -g 0 &&
   wait_output "$log/watch" "async event FD" $watch 2>> "$log/watch"; then
  waiting=$srv
  kill -9 $(pgrep -f -- "daemon.*--socket $SOFTVERBS_DAEMON_SOCKET")
  # A context whose daemon died says so (its WRs' retry errors alone
  # did not tell why).
  if wait_output "$log/s7" "softverbs: the host daemon's session for $ip broke" $waiting 2>> "$log/s7"; then
    ok "a context whose daemon dies says so"
  else
    bad "a context whose daemon dies says so" "$log/s7"
  fi
  # Its port is down, as a RoCE port whose network device went down: a
  # program that only receives hears IBV_EVENT_PORT_ERR.
  if wait_output "$log/watch" "IBV_EVENT_PORT_ERR \(10\), port 1" $watch 2>> "$log/watch"; then
    ok "a context whose daemon dies hears IBV_EVENT_PORT_ERR"
  else
    bad "a context whose daemon dies hears IBV_EVENT_PORT_ERR" "$log/watch"
  fi
  kill $waiting 2>/dev/null; wait $waiting 2>/dev/null
  next_port p8
  if wait_output "$log/rping" "rdma_cm: the host daemon.s session for $ip broke" $cm 2>> "$log/rping.wait" &&
     server s8 "$p8" ibv_rc_pingpong -d softverbs0 -g 0 -n 100 &&
     timeout 30 ibv_rc_pingpong -d softverbs0 -g 0 -n 100 -p "$p8" "$ip" > "$log/c8" 2>&1 &&
     wait $srv; then
    ok "after the daemon died under an rdma_cm listener, new connections run"
  else
    cat "$log/rping.wait" "$log/rping" "$log/c8" > "$log/seven" 2>/dev/null
    bad "after the daemon died under an rdma_cm listener, new connections run" "$log/seven"
  fi
else
  bad "an rdma_cm listener starts (rping -s)" "$log/rping"
fi
kill $cm $watch 2>/dev/null; wait $cm $watch 2>/dev/null

# 8. The daemon dies under a connected rdma_cm pair (rping, pinging for
#    long): the CM of both processes is gone, so both ids hear
#    RDMA_CM_EVENT_DEVICE_REMOVAL and both rpings end (each waited for
#    ever for the other's DREQ, which no longer comes).
next_port p9
SOFTVERBS_CM_TRACE=1 timeout 120 rping -s -a "$ip" -p "$p9" -C 10000000 > "$log/r9s" 2>&1 &
r9s=$!
if wait_output "$log/r9s" "command 7: Ok" $r9s 2>> "$log/r9s"; then
  timeout 120 rping -c -v -a "$ip" -p "$p9" -C 10000000 > "$log/r9c" 2>&1 &
  r9c=$!
  if wait_output "$log/r9c" "ping data" $r9c 2>> "$log/r9c"; then
    kill -9 $(pgrep -f -- "daemon.*--socket $SOFTVERBS_DAEMON_SOCKET")
    deadline=$((SECONDS + 30))
    while { kill -0 $r9s || kill -0 $r9c; } 2>/dev/null && [ $SECONDS -lt $deadline ]; do
      sleep 0.05 # poll interval; the loop ends on the condition
    done
    if ! kill -0 $r9s 2>/dev/null && ! kill -0 $r9c 2>/dev/null &&
       grep -q "device removal" "$log/r9s" && grep -q "device removal" "$log/r9c"; then
      ok "the daemon killed under a connected rdma_cm pair: both hear DEVICE_REMOVAL and end"
    else
      tail -n 5 "$log/r9s" "$log/r9c" > "$log/nine" 2>&1
      bad "the daemon killed under a connected rdma_cm pair: both hear DEVICE_REMOVAL and end" "$log/nine"
    fi
  else
    bad "an rping pair connects" "$log/r9c"
  fi
  kill $r9c 2>/dev/null; wait $r9c 2>/dev/null
else
  bad "an rdma_cm listener starts (rping -s)" "$log/r9s"
fi
kill $r9s 2>/dev/null; wait $r9s 2>/dev/null

# 9. A stopped daemon (SIGSTOP, a debugger): a program that opens the
#    device fails after the 10 s reply timeout and says why, rather than
#    waiting for ever or naming a missing file.
next_port p10
timeout 60 ibv_rc_pingpong -g 0 -p "$p10" > "$log/p10" 2>&1 &
p10s=$!
if wait_listen "$p10" "" $p10s 2>> "$log/p10"; then
  kill $p10s; wait $p10s 2>/dev/null
  d=$(pgrep -f -- "daemon.*--socket $SOFTVERBS_DAEMON_SOCKET( |$)")
  kill -STOP $d
  timeout 60 ibv_rc_pingpong -g 0 -p "$p10" > "$log/stopped" 2>&1
  rc=$?
  kill -CONT $d
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "daemon of this network namespace did not answer within 10 s" "$log/stopped"; then
    ok "a stopped daemon: opening the device fails after 10 s, saying so"
  else
    echo "exit $rc" >> "$log/stopped"
    bad "a stopped daemon: opening the device fails after 10 s, saying so" "$log/stopped"
  fi
else
  bad "ibv_rc_pingpong starts a daemon and listens" "$log/p10"
fi

# 10. A second daemon (another SOFTVERBS_DAEMON_SOCKET) asked for an
#     address this one receives on: it would share UDP 4791 there and
#     each would lose packets of the other's contexts (retry errors, once
#     seen when two test runs shared 127.0.0.1), so it refuses the
#     address and its program fails to open the device, saying why; the
#     first daemon's connection runs on.
next_port p11
other_socket="softverbs-test-other-$$"
if server s11 "$p11" ibv_rc_pingpong -d softverbs0 -g 0; then
  s11=$srv
  SOFTVERBS_DAEMON_SOCKET=$other_socket timeout 30 ibv_devinfo -d softverbs0 > "$log/second" 2>&1
  rc=$?
  pkill -f -- "--socket $other_socket( |$)"
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "another softverbs daemon .* receives on UDP $ip:" "$log/second"; then
    ok "a second daemon on an address refuses it, saying why"
  else
    echo "exit $rc" >> "$log/second"; bad "a second daemon on an address refuses it, saying why" "$log/second"
  fi
  client_runs "the first daemon's connection runs on beside the refused one" "$p11" $s11 "$log/c11"
else
  bad "ibv_rc_pingpong starts and listens" "$log/s11"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
