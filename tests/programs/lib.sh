#!/usr/bin/env bash
# Helpers shared by the test scripts. Sourced (`. lib.sh`) it defines the
# functions below; run as a command (`lib.sh FUNCTION ARGS...`) it calls
# one of them, so a Makefile recipe can use them too.

# random_port_base: a random first port for a script's servers (it adds
# its case number), outside the kernel's ephemeral range
# (ip_local_port_range): a port there can be taken at any moment by some
# client socket's local end, and a server that cannot bind fails its case
# ("Couldn't listen to port"). Below the range if it starts at 12000 or
# above, else above it; 1,000 ports are left above the base.
random_port_base() {
  local low=32768 high=60999
  read -r low high < /proc/sys/net/ipv4/ip_local_port_range 2> /dev/null || true
  if [ "$low" -ge 12000 ]; then
    echo $((10000 + RANDOM % (low - 11000)))
  elif [ "$high" -le 63000 ]; then
    echo $((high + 1 + RANDOM % (64535 - high)))
  else
    echo "random_port_base: the ephemeral range $low-$high leaves no room; its ports may clash" >&2
    echo $((10000 + RANDOM % 20000))
  fi
}

# wait_listen PORT [NETNS [PID]]: returns once a TCP socket listens on PORT
# (in the named network namespace NETNS if not empty). The clients of
# ibv_*_pingpong and perftest do not retry a refused connection, so they
# must start only after their server listens. Fails with a message naming
# the port if PID (the server) exits first or nothing listens within
# WAIT_LISTEN_SECONDS (10 by default).
wait_listen() {
  local port=$1 ns=${2:-} pid=${3:-}
  local limit=${WAIT_LISTEN_SECONDS:-10}
  local deadline=$((SECONDS + limit))
  case "$port" in
    '' | *[!0-9]*) echo "wait_listen: '$port' is not a port number" >&2; return 2 ;;
  esac
  local ss=(ss -Hltn)
  [ -n "$ns" ] && ss=(ss -N "$ns" -Hltn)
  local out
  while :; do
    if ! out=$("${ss[@]}" "sport = :$port" 2>&1); then
      echo "wait_listen: ss failed: $out" >&2
      return 1
    fi
    [ -n "$out" ] && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "wait_listen: the server exited before listening on TCP port $port${ns:+ in $ns}" >&2
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "wait_listen: nothing listens on TCP port $port${ns:+ in $ns} after ${limit} s" >&2
      return 1
    fi
    # The poll interval, not a synchronization: the loop ends on the condition.
    sleep 0.02
  done
}

# wait_output FILE REGEX [PID]: returns once FILE holds a line matching
# the extended REGEX. Fails with a message if PID exits first or nothing
# matches within WAIT_OUTPUT_SECONDS (20 by default).
wait_output() {
  local file=$1 regex=$2 pid=${3:-}
  local deadline=$((SECONDS + ${WAIT_OUTPUT_SECONDS:-20}))
  while ! grep -Eq "$regex" "$file" 2>/dev/null; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      echo "wait_output: the program exited before printing /$regex/" >&2
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "wait_output: no line matches /$regex/ in $file" >&2
      return 1
    fi
    # The poll interval, not a synchronization: the loop ends on the condition.
    sleep 0.02
  done
}

# two_hosts WHAT NS_A NS_B LINK IP_A IP_B: two network namespaces joined
# by a veth pair (LINKx in NS_A with IP_A/24, LINKy in NS_B with IP_B/24),
# links and loopback up, each flow kept in order (rps_in_order): two
# hosts on one machine. Needs root; without it, WHAT cannot run
# (cannot_run, which exits the calling script).
two_hosts() {
  local what=$1 a=$2 b=$3 link=$4 ip_a=$5 ip_b=$6 err
  if ! err=$(ip netns add "$a" 2>&1); then
    cannot_run "$what" "cannot create a network namespace ($err); it needs root"
  fi
  ip netns add "$b"
  ip link add "${link}x" type veth peer name "${link}y"
  ip link set "${link}x" netns "$a"
  ip link set "${link}y" netns "$b"
  ip -n "$a" addr add "$ip_a/24" dev "${link}x"
  ip -n "$b" addr add "$ip_b/24" dev "${link}y"
  local ns
  for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
  ip -n "$a" link set "${link}x" up
  ip -n "$b" link set "${link}y" up
  if ! err=$(rps_in_order "$a" "${link}x" 2>&1 && rps_in_order "$b" "${link}y" 2>&1); then
    cannot_run "$what" "cannot keep the veth's flows in order with receive packet steering: $err"
  fi
}

# rps_in_order NS DEV: the packets DEV receives in namespace NS are taken
# in on one CPU per flow (receive packet steering over every CPU), as a
# NIC's receive-side scaling keeps a flow on one queue. A veth hands each
# packet to the backlog of the CPU that transmitted it, and a sender whose
# packets leave from two CPUs (its own and a qdisc's timer) then has them
# taken in from two backlogs in no fixed order: captured on the receiving
# veth, a 6-packet GSO batch arrived 580 us after the 4-packet one sent
# after it, the receiver saw a gap and RoCE sent 9 to 127 packets again
# (wire_load.sh's tbf case: 2 runs of 60 here, and once in CI). Real
# reordering is the fault injector's to test (docs/fault-injection.md),
# not the link's to add.
rps_in_order() {
  local ns=$1 dev=$2 n mask="" word
  # The CPUs online (nproc follows OMP_NUM_THREADS; a mask past the
  # kernel's CPUs is refused with EOVERFLOW).
  n=$(getconf _NPROCESSORS_ONLN)
  # The CPU bitmap in 32-bit words, most significant first, comma-separated.
  while [ "$n" -gt 0 ]; do
    word=$(( n >= 32 ? 0xffffffff : (1 << n) - 1 ))
    mask=$(printf '%x' "$word")${mask:+,$mask}
    n=$((n - 32))
  done
  ip netns exec "$ns" sh -c "echo $mask > /sys/class/net/$dev/queues/rx-0/rps_cpus"
}

# remove_two_hosts NS_A NS_B: undoes two_hosts, for a cleanup trap: every
# process still in either namespace (a daemon started on demand there,
# say) is killed, then the namespaces (and the veth pair) go.
remove_two_hosts() {
  local ns
  for ns in "$@"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}

# The verdicts of a test script: each script sets pass=0 fail=0 and a
# scratch directory $log. ok NAME counts a pass; bad NAME FILE counts a
# failure and shows the end of FILE (BAD_LINES lines, 40 by default); one NAME EXPECT CMD... runs CMD
# (bounded by ONE_TIMEOUT seconds, 60 by default) and passes if it exits
# 0 and prints a line matching the extended regex EXPECT.
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/    /' "$2" | tail -n "${BAD_LINES:-40}"; }
one() {
  local name=$1 expect=$2; shift 2
  timeout "${ONE_TIMEOUT:-60}" "$@" > "$log/out" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && grep -Eq "$expect" "$log/out"; then ok "$name"; else echo "exit $rc" >> "$log/out"; bad "$name" "$log/out"; fi
}

# serve_then_connect PORT SERVER... --then CLIENT...: runs SERVER in the
# background and, once it listens on TCP PORT, CLIENT; their output goes
# to $log/srv and $log/cli, their exit statuses to $src and $crc ("not
# started" when the server never listened, and it is stopped).
serve_then_connect() {
  local port=$1 server=()
  shift
  while [ $# -gt 0 ] && [ "$1" != --then ]; do server+=("$1"); shift; done
  shift
  "${server[@]}" > "$log/srv" 2>&1 &
  local pid=$!
  if wait_listen "$port" "" $pid 2> "$log/cli"; then
    "$@" > "$log/cli" 2>&1
    crc=$?
  else
    crc="not started"; kill $pid 2>/dev/null
  fi
  wait $pid
  src=$?
}

# wait_pair SERVER_PID CLIENT_PID: waits for both; whichever ends first
# with a failure stops the other at once (it would only wait for its
# timeout), a success waits for the other. Sets $src and $crc to their
# exit statuses.
wait_pair() {
  local srv=$1 cli=$2 first st
  wait -n -p first "$srv" "$cli"; st=$?
  if [ "$first" = "$cli" ]; then
    crc=$st; [ "$crc" -ne 0 ] && kill "$srv" 2>/dev/null
    wait "$srv"; src=$?
  else
    src=$st; [ "$src" -ne 0 ] && kill "$cli" 2>/dev/null
    wait "$cli"; crc=$?
  fi
}

# pair_verdict NAME EXPECT: the verdict of serve_then_connect: both exited
# 0 and the client printed a line matching EXPECT (if not empty: rping
# prints nothing when it succeeds).
pair_verdict() {
  if [ "$crc" = 0 ] && [ "$src" = 0 ] && { [ -z "$2" ] || grep -Eq "$2" "$log/cli"; }; then
    ok "$1"
  else
    both_logs "$crc" "$src" "$log/cli" "$log/srv" > "$log/both"
    bad "$1" "$log/both"
  fi
}

# both_logs CLIENT_EXIT SERVER_EXIT CLIENT_LOG SERVER_LOG: a failed
# client/server pair's report, short enough for a failure listing: each
# side's exit status and the two ends of its output.
both_logs() {
  echo "--- client, exit $1"; ends_of "$3"
  echo "--- server, exit $2"; ends_of "$4"
}

# ends_of LOG: a program's output, its first and last lines when long. A
# program writing to a file buffers its stdout until it exits, so what it
# said on stderr (an error, say) comes first in the file, before a
# banner the end alone would show.
ends_of() {
  local lines
  lines=$(wc -l < "$1")
  if [ "$lines" -le 17 ]; then cat "$1"; return; fi
  head -n 5 "$1"
  echo "    [... $((lines - 15)) lines ...]"
  tail -n 10 "$1"
}

# counts_of LINE: "P F" from a script's last line "P passed, F failed...",
# nothing when the line is not that.
counts_of() {
  sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' <<< "$1"
}

# cannot_run NAME REASON: for a test script that cannot run here (no root,
# a missing tool). Under CI=true that is a failure with its reason, so
# a CI run never passes on tests it did not run; elsewhere the script is
# skipped, said loudly on stderr. Exits the calling script either way,
# after its "N passed, M failed" line.
cannot_run() {
  local name=$1 reason=$2
  if [ "${CI:-}" = true ]; then
    echo "FAIL $name: cannot run under CI=true: $reason"
    echo "0 passed, 1 failed"
    exit 1
  fi
  {
    echo "########################################################################"
    echo "SKIPPED $name: $reason"
    echo "(under CI=true this is a failure)"
    echo "########################################################################"
  } >&2
  echo "0 passed, 0 failed (SKIPPED: $reason)"
  exit 0
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    wait_listen | cannot_run) "$@" ;;
    *) echo "usage: $0 wait_listen PORT [NETNS [PID]] | cannot_run NAME REASON" >&2; exit 2 ;;
  esac
fi

# rping_exit STATUS FILE: rping's exit STATUS as a test should judge it,
# FILE holding rping's standard error. rping (rdma-core 44) never joins
# its CM thread: once that thread has printed "DISCONNECT EVENT" and
# posted its semaphore, the main thread tears down and destroys the event
# channel, and if the CM thread, preempted meanwhile, asks for its next
# event only then, the descriptor is gone: "rdma_get_cm_event: Bad file
# descriptor" and exit 255, on a kernel device as on softverbs (seen
# under CPU load). That exit, after the disconnect and with nothing
# after it, counts as 0; any other status is STATUS.
rping_exit() {
  local status=$1 file=$2 last
  last=$(grep -v '^softverbs ' "$file" 2> /dev/null | tail -n 1)
  if [ "$status" = 255 ] && [ "$last" = "rdma_get_cm_event: Bad file descriptor" ] \
     && grep -Eq '^(server|client) DISCONNECT EVENT\.\.\.$' "$file"; then
    echo 0
  else
    echo "$status"
  fi
}

# iperf_streams FILE SIZE: how many streams iperf (2) reports in FILE
# as having moved SIZE (its own notation, "32.0 MBytes").
iperf_streams() {
  grep -Ec "^\[ *[0-9]+\] +0\.0+-[0-9.]+ sec +$2" "$1"
}

# rdma-core's librspreload.so (librdmacm1): preloaded first, it turns an
# ordinary program's TCP sockets into rsockets. Prints its path, or
# nothing where it is not installed.
rspreload_path() {
  local f
  for f in /usr/lib/*/rsocket/librspreload.so /usr/lib/rsocket/librspreload.so; do
    [ -e "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

