#!/usr/bin/env bash
# Runs inside the interop VM (tests/interop/vm.sh), as root, on Debian's
# kernel with rdma_rxe loaded. Usage:
#   guest.sh SHIM_SO [IMM_PINGPONG] [REGEX]
# SHIM_SO is libsoftverbs-rdmav34.so, IMM_PINGPONG the immediate-data
# program built by run.sh (its cases are counted as failed when it is
# missing; the multicast program, mcast, is beside it), REGEX selects cases
# by name (default: all).
#
# Two links, both veth pairs:
#  - rxe against rxe: xa (10.12.0.1, fd01::1) and xb (10.12.0.2, fd01::2),
#    both in the initial namespace because Linux 6.1's rxe sends and
#    receives through UDP sockets and routes of the initial namespace only
#    (a device on a veth in another namespace gets "local QP operation
#    error"). Policy routing makes packets between the two addresses leave
#    by the veth instead of lo. Devices rxe_xa and rxe_xb.
#  - rxe against softverbs: va (10.11.0.1, fd00::1) in the initial
#    namespace with rxe0; vb (10.11.0.2, fd00::2) in namespace "sv", where
#    softverbs runs in preload mode with softverbs0 on vb's address.
# Prints one line per case ("ok" or "FAIL", with what was seen on the
# wire for a failed softverbs case) and "N passed, M failed" last.
set -u
SO=$(readlink -f "$1")
IMM=${2:+$(readlink -f "$2")}
MCAST=${IMM:+$(dirname "$IMM")/mcast}
CQ_EX=${IMM:+$(dirname "$IMM")/cq_ex}
FAULT_QP_ERROR=${IMM:+$(dirname "$IMM")/fault_qp_error}
ASYNC_EVENTS=${IMM:+$(dirname "$IMM")/async_events}
CM_MIXED=${IMM:+$(dirname "$IMM")/cm_mixed}
CM_MIGRATE=${IMM:+$(dirname "$IMM")/cm_migrate}
CM_GIVE_UP=${IMM:+$(dirname "$IMM")/cm_give_up}
RDMA_SYS_SERVER=${IMM:+$(dirname "$IMM")/rdma_sys_server}
RDMA_SYS_CLIENT=${IMM:+$(dirname "$IMM")/rdma_sys_client}
FILTER=${3:-.}
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
. "$here/links.sh" # link, via_wire, setup_rxe_pair, gid_of
CASE_TIMEOUT=${CASE_TIMEOUT:-20}
export WAIT_LISTEN_SECONDS=$CASE_TIMEOUT
log=$(mktemp -d)

setup_sv_pair() {
  ip netns add sv || return 1
  link va vb 10.11.0.1 10.11.0.2 fd00::1 fd00::2 || return 1
  # Moving vb drops its addresses: give them again inside the namespace.
  ip link set vb netns sv &&
    ip -n sv addr add 10.11.0.2/24 dev vb && ip -n sv addr add fd00::2/64 dev vb nodad &&
    ip -n sv link set vb up && ip -n sv link set lo up || return 1
  rdma link add rxe0 type rxe netdev va
}

# Sides: how to run a program as one end of a case. side NAME FAMILY sets
# pre (the command prefix), dev, gid (index of the family's GID) and addr
# (where the side's TCP server listens).
SV_PRE=(ip netns exec sv env LD_PRELOAD="$SO")
side() {
  local name=$1 fam=$2
  case "$name" in
    rxe_xa) pre=(); dev=rxe_xa; addr=10.12.0.1 ;;
    rxe_xb) pre=(); dev=rxe_xb; addr=10.12.0.2 ;;
    rxe0) pre=(); dev=rxe0; addr=10.11.0.1 ;;
    softverbs)
      local a=10.11.0.2
      [ "$fam" = ipv6 ] && a=fd00::2
      pre=("${SV_PRE[@]}" SOFTVERBS_DEVICES="softverbs0=$a/1500")
      dev=softverbs0; addr=10.11.0.2 ;;
  esac
  gid_index "$name" "$fam"
}

# gid_index SIDE FAMILY: sets gid to the index of the side's RoCE v2 GID
# for its address of FAMILY, as the device itself lists it (ibv_devinfo,
# run with the side's prefix), or "none"; cached per side and family.
declare -A GIDS
gid_index() {
  local key="$1/$2" want
  if [ -z "${GIDS[$key]:-}" ]; then
    case "$key" in
      rxe_xa/ipv4) want=::ffff:10.12.0.1 ;; rxe_xa/ipv6) want=fd01::1 ;;
      rxe_xb/ipv4) want=::ffff:10.12.0.2 ;; rxe_xb/ipv6) want=fd01::2 ;;
      rxe0/ipv4) want=::ffff:10.11.0.1 ;; rxe0/ipv6) want=fd00::1 ;;
      softverbs/ipv4) want=::ffff:10.11.0.2 ;; softverbs/ipv6) want=fd00::2 ;;
    esac
    GIDS[$key]=$(gid_of "$dev" "$want" "${pre[@]}")
    : "${GIDS[$key]:=none}"
  fi
  gid=${GIDS[$key]}
}

pass=0; fail=0; n=0; port=18600
declare -a RESULTS

# case_run NAME SERVER_SIDE CLIENT_SIDE FAMILY PROGRAM ARGS...: the server
# side runs PROGRAM, the client side runs it against the server's address
# once it listens; both must exit 0 and print the program's result line.
case_run() {
  local name=$1 s_side=$2 c_side=$3 fam=$4; shift 4
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1)); port=$((port + 1))
  local prog=$1 gflag=-g expect="[0-9]+ iters in"
  case "$prog" in
    ib_*) gflag=-x; expect='^ +[0-9]+ +[0-9]+ +[0-9.]+' ;;
    */imm_pingpong) expect='^imm ok' ;;
  esac
  local pre dev gid addr s_pre s_args c_pre c_args srv_addr
  side "$s_side" "$fam"; s_pre=("${pre[@]}"); s_args=(-d "$dev" "$gflag" "$gid" -p "$port"); srv_addr=$addr
  side "$c_side" "$fam"; c_pre=("${pre[@]}"); c_args=(-d "$dev" "$gflag" "$gid" -p "$port")
  local sv_case=
  [ "$s_side" = softverbs ] || [ "$c_side" = softverbs ] && sv_case=1
  [ -n "$sv_case" ] && observe_start

  local t0=$SECONDS srv cli src=timeout crc="not started"
  "${s_pre[@]}" timeout "$CASE_TIMEOUT" "$@" "${s_args[@]}" > "$log/srv" 2>&1 &
  srv=$!
  local ns=
  [ "$s_side" = softverbs ] && ns=sv
  if wait_listen "$port" "$ns" $srv 2> "$log/cli"; then
    "${c_pre[@]}" timeout "$CASE_TIMEOUT" "$@" "${c_args[@]}" "$srv_addr" > "$log/cli" 2>&1 &
    cli=$!
    wait_pair $srv $cli
  else
    kill $srv 2>/dev/null; wait $srv; src=$?
  fi
  local took=$((SECONDS - t0))
  [ -n "$sv_case" ] && observe_stop
  pair_result "$name" "$took" "$crc" "$src" "$expect" "$sv_case"
}

# failure_lines LOG: what a failed program said. Its errors on stderr
# (unbuffered) come before its buffered stdout in a shared log, so they are
# picked out first (perftest's failed warm-up says only "Problems with warm
# up"), then the last lines.
failure_lines() {
  grep -Ei "error|fail|can't|couldn't|unable|status|problem" "$1" | head -n 6
  tail -n 4 "$1"
}

# pair_result NAME SECONDS CLIENT_RC SERVER_RC EXPECT SV_CASE: a client and
# server case passes when both exited 0 and the client printed EXPECT (if
# any); a failure shows both logs' error lines and ends, and for a softverbs case
# what the wire saw.
pair_result() {
  local name=$1 took=$2 crc=$3 src=$4 expect=$5 sv_case=$6
  if [ "$crc" = 0 ] && [ "$src" = 0 ] && { [ -z "$expect" ] || grep -Eq "$expect" "$log/cli"; }; then
    pass=$((pass + 1)); echo "ok   $name (${took} s)"
  else
    fail=$((fail + 1)); echo "FAIL $name (${took} s; client $(status "$crc"), server $(status "$src"))"
    failure_lines "$log/cli" | sed 's/^/    client: /'
    failure_lines "$log/srv" | sed 's/^/    server: /'
    [ -n "$sv_case" ] && observe_report
  fi
}

# Joins the IP multicast group argv[1] on interface argv[2], says "joined"
# on stderr and holds the membership until killed.
JOIN_GROUP='
import socket, struct, sys, time
group, ifname = sys.argv[1], sys.argv[2]
index = socket.if_nametoindex(ifname)
if ":" in group:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
                 socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", index))
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    mreqn = struct.pack("4s4si", socket.inet_aton(group), bytes(4), index)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
print("joined", file=sys.stderr, flush=True)
time.sleep(3600)
'

# mcast_run NAME RECV_SIDE SEND_SIDE FAMILY GROUP: the receiving side
# attaches a UD QP to GROUP (and checks the attach rules there: EBUSY
# destroy, EINVAL cases) and says "ready"; the sending side then sends
# three datagrams to the group. Both must print their "ok" line.
mcast_run() {
  local name=$1 r_side=$2 s_side=$3 fam=$4 group=$5
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1))
  local pre dev gid addr r_pre r_dev r_gid
  side "$r_side" "$fam"; r_pre=("${pre[@]}"); r_dev=$dev; r_gid=$gid
  side "$s_side" "$fam"
  local t0=$SECONDS src crc="not started" joiner=
  # Linux 6.1's rxe adds a group's MAC address to its netdev when a QP
  # attaches, but does not join the IP group, so the IP layer drops the
  # group's datagrams before rxe sees them. A socket that joins the group
  # on rxe's netdev for the case stands in for what rxe leaves out.
  if [ "$r_side" = rxe0 ]; then
    : > "$log/joiner"
    python3 -c "$JOIN_GROUP" "$group" va 2> "$log/joiner" &
    joiner=$!
    wait_line "$log/joiner" joined $joiner
  fi
  : > "$log/srv"
  "${r_pre[@]}" timeout "$CASE_TIMEOUT" "${MCAST:-mcast-not-built}" recv "$group" "$r_dev" "$r_gid" \
    > "$log/srv" 2>&1 &
  local r=$!
  if wait_line "$log/srv" ready $r; then
    "${pre[@]}" timeout "$CASE_TIMEOUT" "$MCAST" send "$group" "$dev" "$gid" > "$log/cli" 2>&1
    crc=$?
  else
    kill $r 2>/dev/null
  fi
  wait $r; src=$?
  [ -n "$joiner" ] && kill $joiner 2>/dev/null
  local took=$((SECONDS - t0))
  if [ "$crc" = 0 ] && [ "$src" = 0 ] && grep -q "mcast recv ok" "$log/srv" &&
     grep -q "mcast send ok" "$log/cli"; then
    pass=$((pass + 1)); echo "ok   $name (${took} s)"
  else
    fail=$((fail + 1)); echo "FAIL $name (${took} s; sender $(status "$crc"), receiver $(status "$src"))"
    tail -n 4 "$log/cli" 2>/dev/null | sed 's/^/    sender: /'
    tail -n 4 "$log/srv" | sed 's/^/    receiver: /'
  fi
}

# mckey_run NAME RECV_SIDE SEND_SIDE GROUP: mckey, a multicast group
# joined through rdma_cm on each side (MULTICAST_JOIN gives its GID and
# Q_Key); once the receiving side has joined, the sending side sends 10
# datagrams to it, which the receiver must all take. rxe receiving needs
# the stand-in IP join of mcast_run.
mckey_run() {
  local name=$1 r_side=$2 s_side=$3 group=$4
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1))
  local pre dev gid addr r_pre r_addr s_addr joiner= crc="not started" src
  side "$r_side" ipv4; r_pre=("${pre[@]}"); r_addr=$(cm_address "$r_side" ipv4)
  side "$s_side" ipv4; s_addr=$(cm_address "$s_side" ipv4)
  local t0=$SECONDS
  if [ "$r_side" = rxe0 ]; then
    : > "$log/joiner"
    python3 -c "$JOIN_GROUP" "$group" va 2> "$log/joiner" &
    joiner=$!
    wait_line "$log/joiner" joined $joiner
  fi
  : > "$log/srv"
  "${r_pre[@]}" timeout "$CASE_TIMEOUT" stdbuf -oL mckey -m "$group" -b "$r_addr" -C 10 > "$log/srv" 2>&1 &
  local r=$!
  if wait_line "$log/srv" "mckey: joined" $r; then
    "${pre[@]}" timeout "$CASE_TIMEOUT" mckey -m "$group" -b "$s_addr" -s -C 10 > "$log/cli" 2>&1
    crc=$?
  fi
  [ "$crc" = 0 ] || kill $r 2>/dev/null
  wait $r; src=$?
  [ -n "$joiner" ] && kill $joiner 2>/dev/null
  # The receiver's success is that it took every datagram.
  [ "$src" = 0 ] && ! grep -q "data transfers complete" "$log/srv" && src="0 without every datagram"
  pair_result "$name" $((SECONDS - t0)) "$crc" "$src" "" ""
}

# cm_address SIDE FAMILY: the side's address of FAMILY.
cm_address() {
  case "$1/$2" in
    rxe_xa/ipv4) echo 10.12.0.1 ;; rxe_xa/ipv6) echo fd01::1 ;;
    rxe_xb/ipv4) echo 10.12.0.2 ;; rxe_xb/ipv6) echo fd01::2 ;;
    rxe0/ipv4) echo 10.11.0.1 ;; rxe0/ipv6) echo fd00::1 ;;
    softverbs/ipv4) echo 10.11.0.2 ;; softverbs/ipv6) echo fd00::2 ;;
  esac
}

# cm_run NAME SERVER_SIDE CLIENT_SIDE FAMILY [PROGRAM]: a program over
# rdma_cm, the InfiniBand CM on the wire: the server side listens on its
# address, the client connects. rping (the default): 10 pings sent and
# verified (-V), then both disconnect; ib_write_bw -R: perftest's
# bandwidth row; udaddy: UD over rdma_cm (SIDR), datagrams both ways;
# ucmatose: 2 connections, 10 messages each way on each; rdma_server:
# rdma_getaddrinfo, rdma_create_ep and a message each way (rdma_client);
# rstream and riostream: rsockets, 100 transfers of 4 KiB, verified;
# iperf: an ordinary TCP program on rsockets through librspreload.so, 2
# streams of 8 MiB (the client's sum; with 32 MiB, softverbs' client
# into rxe's server took 19 to 21 s of its 20 in the emulated VM, at
# about 2.7 MB/s, and with 16 MiB 13 to 15 s); qperf -cm1: rc_bw and rc_lat, its
# RC QP connected through rdma_cm (its server serves until stopped);
# fi_msg (and fi_rdm): libfabric's fi_pingpong over verbs (MSG) (and
# verbs;ofi_rxm, RDM), data checked, 10 iterations of every size;
# rdma-sys: the crate's server and client examples (built by run.sh);
# rdma_xserver: a listener on every address, the client's message sent
# inline; cmtime: 10 connections set up and torn down (its server serves
# until stopped: it must still run when the client is done).
# The client starts once the server listens (wait_listening): a client
# started before is rejected (invalid service ID) or, for UD,
# unreachable, and some must not be started again (rdma-sys' client,
# rejected, hangs in its clean-up on the kernel's rdma_cm; of ucmatose's
# two connections one could be rejected and the other accepted just
# after, and the server, counting that one, refused the next run's
# second). qperf's and fi_pingpong's servers make their rdma_cm
# listeners after an exchange over TCP with the client: such a client is
# started again, on a rejection or a refused TCP connection only, until
# CASE_TIMEOUT.
cm_run() {
  local name=$1 s_side=$2 c_side=$3 fam=$4 prog=${5:-rping}
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1)); port=$((port + 1))
  local pre dev gid addr s_pre c_pre srv_addr
  side "$s_side" "$fam"; s_pre=("${pre[@]}"); local s_dev=$dev
  side "$c_side" "$fam"; c_pre=("${pre[@]}")
  srv_addr=$(cm_address "$s_side" "$fam")
  # rping -V and udaddy print nothing of note on success: their exit
  # statuses say it; perftest's result row is checked.
  local s_args c_args expect=
  case "$prog" in
    rping) s_args=(rping -s -a "$srv_addr" -p "$port" -C 10 -V)
           c_args=(rping -c -a "$srv_addr" -p "$port" -C 10 -V) ;;
    ib_write_bw) # -F as the other perftest cases: under emulation its
                 # clock calibration fails now and then ("Correlation
                 # coefficient r^2 < 0.9", "Can't produce a report", exit 1).
                 s_args=(ib_write_bw -R -F -p "$port" -s 65536 -n 100)
                 c_args=(ib_write_bw -R -F -p "$port" -s 65536 -n 100 "$srv_addr")
                 expect='^ +[0-9]+ +[0-9]+ +[0-9.]+' ;;
    udaddy) s_args=(udaddy -b "$srv_addr"); c_args=(udaddy -s "$srv_addr") ;;
    ucmatose) s_args=(ucmatose -b "$srv_addr" -p "$port" -c 2 -C 10 -S 1000)
              c_args=(ucmatose -s "$srv_addr" -p "$port" -c 2 -C 10 -S 1000)
              expect="data transfers complete" ;;
    rdma_server) s_args=(rdma_server -s "$srv_addr" -p "$port")
                 c_args=(rdma_client -s "$srv_addr" -p "$port")
                 expect="rdma_client: end 0" ;;
    rstream|riostream) s_args=("$prog" -b "$srv_addr" -p "$port" -S 4096 -C 100 -T v)
                       c_args=("$prog" -s "$srv_addr" -p "$port" -S 4096 -C 100 -T v)
                       expect="^custom +4k +100 +1 " ;;
    rdma_xserver) s_args=(rdma_xserver -p "$port" -c r)
                  c_args=(rdma_xclient -s "$srv_addr" -p "$port" -c r)
                  expect="rdma_xclient: end 0" ;;
    cmtime) s_args=(cmtime -b "$srv_addr" -p "$port")
            c_args=(cmtime -s "$srv_addr" -p "$port" -c 10)
            expect="^disconnect +:" ;;
    iperf) # rdma-core's librspreload.so first: iperf's sockets become
           # rsockets (softverbs' side keeps its provider after it).
           # librspreload falls back to the kernel's TCP where rsockets
           # fail: softverbs' side must trace its rdma_cm ACCEPT
           # (server) or CONNECT (client), checked below.
           local rs s_lp c_lp; rs=$(rspreload_path) || rs=librspreload-not-found
           s_lp=$rs; [ "$s_side" = softverbs ] && s_lp="$rs $SO" && s_pre+=(SOFTVERBS_CM_TRACE=1)
           c_lp=$rs; [ "$c_side" = softverbs ] && c_lp="$rs $SO" && c_pre+=(SOFTVERBS_CM_TRACE=1)
           s_args=(env LD_PRELOAD="$s_lp" iperf -s -B "$srv_addr" -p "$port" -f m)
           c_args=(env LD_PRELOAD="$c_lp" iperf -c "$srv_addr" -p "$port" -n 8M -P 2 -f m)
           expect='^\[SUM\] +0\.0+-[0-9.]+ sec +16\.0 MBytes' ;;
    fi_msg|fi_rdm) # libfabric's verbs provider, MSG or verbs;ofi_rxm RDM
           # endpoints connected through rdma_cm, data checked; each side
           # names its device (the rxe side has three).
           local prov=verbs ep=msg
           [ "$prog" = fi_rdm ] && prov="verbs;ofi_rxm" ep=rdm
           # 10 iterations of each size: emulated, a 1 MiB one takes 0.1 s.
           s_args=(fi_pingpong -p "$prov" -e $ep -c -I 10 -d "$s_dev" -B "$port")
           c_args=(fi_pingpong -p "$prov" -e $ep -c -I 10 -d "$dev" -P "$port" "$srv_addr")
           expect='^1m +10 +=10 ' ;;
    rdma-sys) # The rdma-sys crate's examples: the server listens on
           # 0.0.0.0:7471 (fixed), each side prints the message it got.
           s_args=("${RDMA_SYS_SERVER:-rdma_sys_server-not-built}")
           c_args=("${RDMA_SYS_CLIENT:-rdma_sys_client-not-built}" "$srv_addr" 7471)
           expect='recv msg : \[1, 1,' ;;
    qperf) # Its own TCP port for the exchange, its RC QP through rdma_cm.
           # Its server forks a child per test, which crashes at the end
           # (qperf 0.4.11 destroys its listening id's QP, which is none;
           # fixed upstream after 0.4.11): softverbs' daemon then sends the
           # DREP the client waits for, as the kernel's rdma_cm does.
           s_args=(qperf -lp "$port")
           c_args=(qperf -lp "$port" -cm1 -t 1 "$srv_addr" rc_bw rc_lat)
           expect='latency += +[0-9.]+ [mun]?s' ;;
  esac
  local sv_case=
  [ "$s_side" = softverbs ] || [ "$c_side" = softverbs ] && sv_case=1
  [ -n "$sv_case" ] && observe_start
  local t0=$SECONDS src crc=124 deadline=$((SECONDS + CASE_TIMEOUT))
  local listen_first=1
  [[ "$prog" =~ ^(qperf|fi_msg|fi_rdm)$ ]] && listen_first=
  [ -n "$listen_first" ] && [ "$s_side" = softverbs ] && s_pre+=(SOFTVERBS_CM_TRACE=1)
  # A server that serves until stopped outlives every run of its client,
  # which may be started again until CASE_TIMEOUT and then run for as long.
  local s_timeout=$CASE_TIMEOUT
  [[ "$prog" =~ ^(cmtime|iperf|qperf)$ ]] && s_timeout=$((2 * CASE_TIMEOUT))
  : > "$log/srv"
  "${s_pre[@]}" timeout "$s_timeout" "${s_args[@]}" > "$log/srv" 2>&1 &
  local srv=$!
  # The port the server listens on: rdma-sys' is fixed, udaddy's the
  # default (its -p names the port space).
  local listen_port=$port
  case "$prog" in rdma-sys) listen_port=7471 ;; udaddy) listen_port=7174 ;; esac
  [ -n "$listen_first" ] && wait_listening "$s_side" "$listen_port" $srv
  while [ $SECONDS -lt $deadline ]; do
    "${c_pre[@]}" timeout "$CASE_TIMEOUT" "${c_args[@]}" > "$log/cli" 2>&1
    crc=$?
    [ -n "$listen_first" ] && break
    # Before its server is ready: qperf "failed to connect", and "Event
    # rejected" when a test's REQ comes before the server's listener for
    # it (rdma_cm.sh, "qperf"); fi_pingpong's exchange over TCP
    # "Connection refused".
    grep -Eq "Event rejected|failed to connect|Connection refused" "$log/cli" && kill -0 $srv 2>/dev/null || break
  done
  [ $crc -ne 0 ] && kill $srv 2>/dev/null
  if [[ "$prog" =~ ^(cmtime|iperf|qperf)$ ]] && [ $crc -eq 0 ]; then
    # Still serving is its success; a client that met an error says so.
    if kill $srv 2>/dev/null; then wait $srv; src=0; else wait $srv; src=$?; fi
    grep -Eiq "event:|error|fail" "$log/cli" && crc=1
  else
    wait $srv; src=$?
  fi
  if [ "$prog" = rping ]; then
    crc=$(rping_exit $crc "$log/cli"); src=$(rping_exit $src "$log/srv")
  fi
  # What the exit statuses do not say: the server's own message
  # (rdma-sys), rsockets on softverbs' side (iperf).
  [ "$prog" = rdma-sys ] && [ "$src" = 0 ] && ! grep -q "recv msg : \[1, 1," "$log/srv" &&
    src="0 without the client's message"
  if [ "$prog" = iperf ] && [ "$s_side" = softverbs ] && [ "$src" = 0 ] &&
     ! grep -q "rdma_cm: channel [0-9]* command 8: Ok" "$log/srv"; then
    src="0 without an rdma_cm ACCEPT (not on rsockets)"
  fi
  if [ "$prog" = iperf ] && [ "$c_side" = softverbs ] && [ "$crc" = 0 ] &&
     ! grep -q "rdma_cm: channel [0-9]* command 6: Ok" "$log/cli"; then
    crc="0 without an rdma_cm CONNECT (not on rsockets)"
  fi
  local took=$((SECONDS - t0))
  [ -n "$sv_case" ] && observe_stop
  pair_result "$name" "$took" "$crc" "$src" "$expect" "$sv_case"
}

# status RC: an exit status in words (timeout(1) says 124, a kill 143).
status() {
  case "$1" in
    0) echo "exit 0" ;; 124) echo "timed out after $CASE_TIMEOUT s" ;;
    143) echo "stopped after the other side failed" ;; *) echo "exit $1" ;;
  esac
}

# What a softverbs case did on the wire, recorded for a failure: UDP flows
# and ICMP errors captured on rxe0's veth, rxe0's counters, the kernel's
# UDP error counters on both sides, and rxe's "bad ICRC" debug messages.
RXE_COUNTERS=/sys/class/infiniband/rxe0/ports/1/hw_counters
CAPTURE_PACKETS=2000
observe_start() {
  rm -f "$log/pcap" "$log/tcpdump"
  # The first packets tell the story; a whole bandwidth test's tens of
  # thousands would cost more time under emulation than the case itself.
  tcpdump -i va -nn -U -Z root -s 128 -c "$CAPTURE_PACKETS" -w "$log/pcap" 'udp or icmp or icmp6' 2> "$log/tcpdump" &
  TCPDUMP=$!
  wait_line "$log/tcpdump" "listening on" "$TCPDUMP" || echo "    (tcpdump did not start: $(cat "$log/tcpdump"))"
  counters > "$log/before"
  dmesg -C 2>/dev/null
}
observe_stop() {
  counters > "$log/after"
  kill "$TCPDUMP" 2>/dev/null; wait "$TCPDUMP" 2>/dev/null
}
observe_report() {
  echo "    wire (va, first $CAPTURE_PACKETS packets): $(wire_summary)"
  echo "    counters: $(diff_counters)"
  echo "    rxe ICRC errors logged: $(dmesg 2>/dev/null | grep -ci icrc)"
}
# wire_summary: the capture as flows, "SRC > DST.PORT (details) xCOUNT",
# details being the IPv4 identification (zero or not: the ICRC covers it)
# and a zero UDP checksum; ICMP messages by type.
wire_summary() {
  tcpdump -r "$log/pcap" -nn -v 2>/dev/null | awk '
    function flush() {
      if (pkt == "") return
      if (match(pkt, /ICMP6?,? .*unreachable[^,]*(, [^ ]+ udp port [0-9]+)?|ICMP [^ ]+ udp port [0-9]+ unreachable/)) {
        split(pkt, w, " "); key = "ICMP unreachable: " substr(pkt, RSTART, RLENGTH)
      } else if (match(pkt, / [0-9a-f.:]+\.[0-9]+ > [0-9a-f.:]+\.[0-9]+: /)) {
        f = substr(pkt, RSTART + 1, RLENGTH - 3); sub(/\.[0-9]+ >/, " >", f)
        d = (pkt ~ /^[^ ]+ IP6 /) ? "ipv6" : (pkt ~ /id 0,/ ? "ipv4 id 0" : "ipv4 id not 0")
        # Checksum offload leaves partial sums on a veth: only a zero
        # checksum (IPv6 forbids it unless the receiver opts in) is news.
        c = pkt ~ /no cksum|cksum 0x0000 ->/ ? ", udp cksum 0" : ""
        key = f " (" d c ")"
      } else if (match(pkt, /ICMP6?,? [a-z ]+/)) key = substr(pkt, RSTART, RLENGTH)
      else key = "other"
      n[key]++; pkt = ""
    }
    /^[0-9]/ { flush(); pkt = $0; next }
    { pkt = pkt " " $0 }
    END { flush(); for (k in n) printf "%s x%d; ", k, n[k]; if (!length(n)) printf "no packets" }'
}
counters() {
  (cd "$RXE_COUNTERS" && grep -H '' -- *) | sed 's/^/rxe0:/; s/:\([0-9]*\)$/ \1/'
  snmp "init" cat
  snmp "sv" ip netns exec sv cat
}
# snmp LABEL CMD...: the kernel's UDP and ICMP error counters (CMD reads
# the files in the right namespace).
snmp() {
  local label=$1; shift
  "$@" /proc/net/snmp | awk -v l="$label" '
    /^(Udp|Icmp):/ { if (!h[$1]) { h[$1] = 1; for (i = 2; i <= NF; i++) n[$1, i] = $i; next }
      for (i = 2; i <= NF; i++) if (n[$1, i] ~ /Errors|NoPorts|DestUnreachs/) print l ":" $1 n[$1, i], $i }'
  "$@" /proc/net/snmp6 | awk -v l="$label" '$1 ~ /^(Udp6|Icmp6)(InErrors|NoPorts|InCsumErrors|InDestUnreachs|OutDestUnreachs)$/ { print l ":" $1, $2 }'
}
diff_counters() {
  awk 'NR == FNR { b[$1] = $2; next } $2 != b[$1] { printf "%s +%d  ", $1, $2 - b[$1] }' "$log/before" "$log/after"
}

# wait_line FILE TEXT PID: returns once FILE holds TEXT, fails if PID
# exits first or after CASE_TIMEOUT seconds. A caller empties FILE before
# it starts PID: the program's own redirection happens in the background,
# maybe after the first look, which would find an earlier case's TEXT.
wait_line() {
  local deadline=$((SECONDS + CASE_TIMEOUT))
  until grep -q "$2" "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || return 1
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.05 # the poll interval; the loop ends on the condition
  done
}

# wait_listening SIDE PORT PID: returns once the server PID of SIDE
# listens through rdma_cm on PORT, fails as wait_line. softverbs' server
# traces its rdma_cm commands (LISTEN is command 7); the kernel's rdma_cm
# lists its ids (`rdma resource show cm_id`).
wait_listening() {
  if [ "$1" = softverbs ]; then
    wait_line "$log/srv" "rdma_cm: channel [0-9]* command 7: Ok" "$3"
    return
  fi
  local deadline=$((SECONDS + CASE_TIMEOUT))
  until rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*:$2( |$)"; do
    kill -0 "$3" 2>/dev/null || return 1
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.05 # the poll interval; the loop ends on the condition
  done
}

started=$SECONDS
setup_rxe_pair || { echo "FAIL setting up rxe_xa/rxe_xb"; echo "0 passed, 1 failed"; exit 1; }
setup_sv_pair || { echo "FAIL setting up rxe0 and namespace sv"; echo "0 passed, 1 failed"; exit 1; }
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo 'file rxe_icrc.c +p' > /sys/kernel/debug/dynamic_debug/control 2>/dev/null
echo "setup: $((SECONDS - started)) s"

# The programs of every case: pingpongs at 1 B, 4 KiB and 1 MiB (1,024
# packets at path MTU 1024), UC, UD (one packet: a UD message fits the MTU),
# perftest's bandwidth tests, immediate data (imm_pingpong).
PROGRAMS=(
  "rc 1 B|ibv_rc_pingpong -m 1024 -s 1 -n 100"
  "rc 4 KiB|ibv_rc_pingpong -m 1024 -s 4096 -n 100"
  "rc 1 MiB|ibv_rc_pingpong -m 1024 -s 1048576 -n 10"
  "uc 4 KiB|ibv_uc_pingpong -m 1024 -s 4096 -n 100"
  "ud 1000 B|ibv_ud_pingpong -s 1000 -n 100"
  "write_bw|ib_write_bw -m 1024 -s 65536 -n 100 -F"
  "read_bw|ib_read_bw -m 1024 -s 65536 -n 100 -F"
  "send_bw|ib_send_bw -m 1024 -s 65536 -n 100 -F"
  "atomic_bw|ib_atomic_bw -m 1024 -n 1000 -F"
  "imm|${IMM:-imm_pingpong-not-built}"
)

# softverbs beside a kernel RDMA device in one process: a preloaded
# process lists both (libibverbs lists the rxe devices over netlink, the
# preload adds softverbs0), its device view shows both, and rxe0 opens and
# answers there as without softverbs.
beside() {
  local name=$1 expect=$2; shift 2
  [[ "$name" =~ $FILTER ]] || return 0
  if "${SV_PRE[@]}" SOFTVERBS_DEVICES=softverbs0=10.11.0.2/1500 "$@" > "$log/beside" 2>&1 &&
    grep -Eq "$expect" "$log/beside"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name"; tail -n 8 "$log/beside" | sed 's/^/    /'
  fi
}
beside "beside rxe: ibv_devices lists rxe0 and softverbs0" "rxe0 .*softverbs0" \
  sh -c 'echo $(ibv_devices | awk "NR > 2 { print \$1 }" | sort)'
beside "beside rxe: the device view holds rxe0 and softverbs0" "rxe0 .*softverbs0" \
  sh -c 'echo $(ls /sys/class/infiniband)'
beside "beside rxe: rxe0 opens and is active in a preloaded process" "PORT_ACTIVE" \
  ibv_devinfo -d rxe0

# rxe against rxe first: every program, so that a softverbs case that
# fails is known to pass between two standard peers in this very VM.
for fam in ipv4 ipv6; do
  for p in "${PROGRAMS[@]}"; do
    label=${p%%|*}
    # shellcheck disable=SC2086 # the program's words
    case_run "rxe-rxe $fam $label" rxe_xa rxe_xb "$fam" ${p#*|}
  done
done
for fam in ipv4 ipv6; do
  for p in "${PROGRAMS[@]}"; do
    label=${p%%|*}
    # shellcheck disable=SC2086
    case_run "rxe-softverbs $fam $label (rxe server)" rxe0 softverbs "$fam" ${p#*|}
    # shellcheck disable=SC2086
    case_run "rxe-softverbs $fam $label (softverbs server)" softverbs rxe0 "$fam" ${p#*|}
  done
done

# Under loss: netem drops 1% of what each end of the rxe0-softverbs link
# sends, one packet at a time (softverbs' transmit checksum offload off, so
# it sends no GSO bursts for netem to drop whole). Lost requests, ACKs and
# READ responses both ways: softverbs' requester asks again for the READ
# that lost responses alone and takes the later READs' responses, which
# rxe's responder must serve; rxe's requester goes back, and softverbs'
# responder sends the repeated READ ahead of the responses it has queued.
LOSSY=(
  "read_bw|ib_read_bw -m 1024 -s 65536 -n 200 -F"
  "write_bw|ib_write_bw -m 1024 -s 65536 -n 200 -F"
  "send_bw|ib_send_bw -m 1024 -s 65536 -n 200 -F"
)
lossy_wanted=
for p in "${LOSSY[@]}"; do
  [[ "lossy rxe-softverbs ${p%%|*} (rxe server)" =~ $FILTER ]] && lossy_wanted=1
  [[ "lossy rxe-softverbs ${p%%|*} (softverbs server)" =~ $FILTER ]] && lossy_wanted=1
done
if [ -n "$lossy_wanted" ]; then
  if modprobe sch_netem && ip netns exec sv ethtool -K vb tx off > /dev/null &&
    tc qdisc add dev va root netem loss 1% limit 100000 &&
    tc -n sv qdisc add dev vb root netem loss 1% limit 100000; then
    for p in "${LOSSY[@]}"; do
      label=${p%%|*}
      # shellcheck disable=SC2086
      case_run "lossy rxe-softverbs $label (rxe server)" rxe0 softverbs ipv4 ${p#*|}
      # shellcheck disable=SC2086
      case_run "lossy rxe-softverbs $label (softverbs server)" softverbs rxe0 ipv4 ${p#*|}
    done
  else
    fail=$((fail + 1)); echo "FAIL lossy cases: netem on the rxe0-softverbs link could not be set up"
  fi
  tc qdisc del dev va root 2> /dev/null
  tc -n sv qdisc del dev vb root 2> /dev/null
  ip netns exec sv ethtool -K vb tx on > /dev/null
fi

# rdma_cm: rping with the kernel's CM on rxe, both roles, and between two
# rxe devices first over IPv4. (Between rxe_xa and rxe_xb over IPv6 the
# kernel's rdma_cm refuses the connection itself, REJ 28: both devices are
# in one namespace, reached through the policy routing above.)
cm_run "rxe-rxe ipv4 rping (rdma_cm)" rxe_xa rxe_xb ipv4
for fam in ipv4 ipv6; do
  cm_run "rxe-softverbs $fam rping (rdma_cm, rxe server)" rxe0 softverbs "$fam"
  cm_run "rxe-softverbs $fam rping (rdma_cm, softverbs server)" softverbs rxe0 "$fam"
done
cm_run "rxe-softverbs ipv4 write_bw -R (rdma_cm, rxe server)" rxe0 softverbs ipv4 ib_write_bw
cm_run "rxe-softverbs ipv4 write_bw -R (rdma_cm, softverbs server)" softverbs rxe0 ipv4 ib_write_bw
cm_run "rxe-softverbs ipv4 udaddy (rdma_cm UD, rxe server)" rxe0 softverbs ipv4 udaddy
cm_run "rxe-softverbs ipv4 udaddy (rdma_cm UD, softverbs server)" softverbs rxe0 ipv4 udaddy
# Not fi_rdm: libfabric 1.17's verbs;ofi_rxm fails fi_enable (EINVAL) on
# rxe in Linux 6.1, between two rxe devices as well.
for prog in ucmatose rdma_server rdma_xserver cmtime rstream riostream iperf qperf fi_msg rdma-sys; do
  cm_run "rxe-softverbs ipv4 $prog (rdma_cm, rxe server)" rxe0 softverbs ipv4 $prog
  cm_run "rxe-softverbs ipv4 $prog (rdma_cm, softverbs server)" softverbs rxe0 ipv4 $prog
done

# Both rdma_cms in one process: cm_mixed (tests/interop/cm_mixed.c), with
# softverbs0 on 127.0.0.1, listens and connects on it and, through the
# kernel's rdma_cm, from rxe_xa to rxe_xb (10.12.0.2), on one event
# channel; each connection carries a message on the device it must use.
# rxe holds UDP 4791 on every address of this namespace (the only one rxe
# serves in this kernel), so softverbs uses 4792 here, with a daemon of
# its own.
if [[ "rdma_cm: softverbs' and the kernel's in one process" =~ $FILTER ]]; then
  n=$((n + 1)); port=$((port + 1))
  env LD_PRELOAD="$SO" SOFTVERBS_DEVICES=softverbs0=127.0.0.1 \
    SOFTVERBS_UDP_PORT=4792 SOFTVERBS_DAEMON_SOCKET=softverbs-4792 \
    timeout "$CASE_TIMEOUT" "${CM_MIXED:-cm_mixed-not-built}" 127.0.0.1 10.12.0.2 "$port" > "$log/mixed" 2>&1
  mrc=$?
  if [ $mrc -eq 0 ] && grep -q "^soft: client on softverbs0, server on softverbs0" "$log/mixed" &&
     grep -q "^kernel: client on rxe_xa, server on rxe_xb" "$log/mixed" && grep -q "cm_mixed ok" "$log/mixed"; then
    pass=$((pass + 1)); echo "ok   rdma_cm: softverbs' and the kernel's in one process"
  else
    fail=$((fail + 1)); echo "FAIL rdma_cm: softverbs' and the kernel's in one process (exit $mrc)"
    tail -n 8 "$log/mixed" | sed 's/^/    /'
  fi
fi

# A wildcard listener serves both rdma_cms: ucmatose's server (softverbs
# preloaded, softverbs0 on 127.0.0.1 as above) takes one connection from
# a client on softverbs0 and one from a client of the kernel's rdma_cm
# on rxe_xa to rxe_xb's address, at once. The server's LISTEN in the
# kernel's rdma_cm is awaited in its trace.
if [[ "rdma_cm: a wildcard listener serves softverbs' and the kernel's" =~ $FILTER ]]; then
  n=$((n + 1)); port=$((port + 1))
  SV4792=(env LD_PRELOAD="$SO" SOFTVERBS_DEVICES=softverbs0=127.0.0.1 SOFTVERBS_UDP_PORT=4792
          SOFTVERBS_DAEMON_SOCKET=softverbs-4792)
  "${SV4792[@]}" SOFTVERBS_CM_TRACE=1 timeout "$CASE_TIMEOUT" ucmatose -c 2 -C 4 -p "$port" > "$log/wsrv" 2>&1 &
  wsrv=$!
  wrc="server not listening in both"
  if WAIT_OUTPUT_SECONDS=$CASE_TIMEOUT wait_output "$log/wsrv" "listens in the kernel's rdma_cm too" $wsrv 2> "$log/wcli1"; then
    timeout "$CASE_TIMEOUT" ucmatose -s 10.12.0.2 -b 10.12.0.1 -c 1 -C 4 -p "$port" > "$log/wcli1" 2>&1 &
    wk=$!
    "${SV4792[@]}" timeout "$CASE_TIMEOUT" ucmatose -s 127.0.0.1 -c 1 -C 4 -p "$port" > "$log/wcli2" 2>&1
    w2=$?; wait $wk; w1=$?; wait $wsrv; ws=$?
    wrc="server $ws, kernel client $w1, softverbs client $w2"
  fi
  if [ "$wrc" = "server 0, kernel client 0, softverbs client 0" ] && grep -q "test complete" "$log/wsrv"; then
    pass=$((pass + 1)); echo "ok   rdma_cm: a wildcard listener serves softverbs' and the kernel's"
  else
    kill $wsrv 2>/dev/null; wait $wsrv 2>/dev/null
    fail=$((fail + 1)); echo "FAIL rdma_cm: a wildcard listener serves softverbs' and the kernel's ($wrc)"
    for f in wsrv wcli1 wcli2; do tail -n 5 "$log/$f" 2>/dev/null | sed "s/^/    $f: /"; done
  fi
fi

# rdma_migrate_id of a listener the kernel's rdma_cm serves, in a process
# with softverbs' rdma_cm: one bound to rxe_xb's address (the id moved to
# the kernel's) and a wildcard one (softverbs' with a shadow in the
# kernel's); a connection from rxe_xa must come on the new channel.
for listen_addr in 10.12.0.2 0.0.0.0; do
  name="rdma_cm: migrate_id of a listener on $listen_addr (kernel connection)"
  [[ "$name" =~ $FILTER ]] || continue
  n=$((n + 1)); port=$((port + 1))
  env LD_PRELOAD="$SO" SOFTVERBS_DEVICES=softverbs0=127.0.0.1 SOFTVERBS_UDP_PORT=4792 \
    SOFTVERBS_DAEMON_SOCKET=softverbs-4792 timeout "$CASE_TIMEOUT" \
    "${CM_MIGRATE:-cm_migrate-not-built}" "$listen_addr" 10.12.0.1 10.12.0.2 "$port" > "$log/migrate" 2>&1
  mrc=$?
  if [ $mrc -eq 0 ] && grep -q "(rxe_xb)" "$log/migrate" && grep -q "cm_migrate ok" "$log/migrate"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (exit $mrc)"; tail -n 6 "$log/migrate" | sed 's/^/    /'
  fi
done

# give_up_run NAME SERVER_SIDE CLIENT_SIDE MODE: one side of a connection
# being set up goes away (cm_give_up.c; FIFOs order the steps). MODE
# "gives-up" or "dies": the client side connects and, once the server
# side has the CONNECT_REQUEST, gives its REQ up before any answer: it
# destroys its id or exits. Its REJ "timeout", as the kernel's CM formats
# it (its comm ID, its CA GUID in the ARI, no remote comm ID), must end
# the server's request: its ACCEPT, made once the client has exited,
# fails with EINVAL or gets REJECTED. MODE "outlives": the server side
# accepts and dies before the RTU (the client side takes the REP only
# once the server is gone); the REJ of REP_SENT in its name (both comm
# IDs; the kernel's rdma_cm destroys a dead process's ids, softverbs'
# daemon sends it for a dead client) must end the client's connection.
give_up_run() {
  local name=$1 s_side=$2 c_side=$3 mode=$4
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1)); port=$((port + 1))
  local pre dev gid addr s_pre c_pre srv_addr fifos=$log/give_up
  side "$s_side" ipv4; s_pre=("${pre[@]}")
  side "$c_side" ipv4; c_pre=("${pre[@]}")
  srv_addr=$(cm_address "$s_side" ipv4)
  rm -rf "$fifos"; mkdir "$fifos" && mkfifo "$fifos/ready" "$fifos/req" "$fifos/gone"
  local prog=${CM_GIVE_UP:-cm_give_up-not-built} crc src cli srv
  local s_args=("$srv_addr" "$port" "$fifos/ready" "$fifos/req" "$fifos/gone")
  local c_args=("$srv_addr" "$port" "$fifos/ready" "$fifos/req" "$mode")
  # Who goes away writes GONE's byte once it has, for the other, whose
  # output says the verdict.
  local first=cli last=srv
  if [ "$mode" = outlives ]; then
    s_args+=(dies); c_args+=("$fifos/gone"); first=srv; last=cli
  fi
  "${s_pre[@]}" timeout "$CASE_TIMEOUT" "$prog" server "${s_args[@]}" > "$log/srv" 2>&1 &
  srv=$!
  "${c_pre[@]}" timeout "$CASE_TIMEOUT" "$prog" client "${c_args[@]}" > "$log/cli" 2>&1 &
  cli=$!
  if [ $first = cli ]; then wait $cli; crc=$?; else wait $srv; src=$?; fi
  timeout "$CASE_TIMEOUT" sh -c 'printf x > "$1"' _ "$fifos/gone"
  if [ $last = srv ]; then wait $srv; src=$?; else wait $cli; crc=$?; fi
  if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q "^give up ok" "$log/$last"; then
    pass=$((pass + 1)); echo "ok   $name: $(grep -o 'give up ok.*' "$log/$last")"
  else
    fail=$((fail + 1)); echo "FAIL $name (server: $(status $src), client: $(status $crc))"
    for f in srv cli; do tail -n 4 "$log/$f" | sed "s/^/    $f: /"; done
  fi
}
give_up_run "rdma_cm: rxe's client gives up its REQ (softverbs server)" softverbs rxe0 gives-up
give_up_run "rdma_cm: rxe's client dies with its REQ unanswered (softverbs server)" softverbs rxe0 dies
give_up_run "rdma_cm: softverbs' client gives up its REQ (rxe server)" rxe0 softverbs gives-up
give_up_run "rdma_cm: softverbs' client dies with its REQ unanswered (rxe server)" rxe0 softverbs dies
give_up_run "rdma_cm: softverbs' server dies after its REP (rxe client)" softverbs rxe0 outlives
give_up_run "rdma_cm: rxe's server dies after its REP (softverbs client)" rxe0 softverbs outlives

# killed_run NAME SERVER_SIDE CLIENT_SIDE: rping's server is killed (-9)
# while its client pings; the client must hear DISCONNECTED at once. The
# kernel's rdma_cm destroys a dead process's ids, sending their DREQs;
# softverbs' daemon sends the DREQ in a dead client's name, naming the
# peer's QP, which the kernel's CM checks (until 2026-12-07 it named QP 0,
# and rxe dropped it).
killed_run() {
  local name=$1 s_side=$2 c_side=$3
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1)); port=$((port + 1))
  local pre dev gid addr s_pre c_pre srv_addr
  side "$s_side" ipv4; s_pre=("${pre[@]}")
  side "$c_side" ipv4; c_pre=("${pre[@]}")
  srv_addr=$(cm_address "$s_side" ipv4)
  [ "$s_side" = softverbs ] && s_pre+=(SOFTVERBS_CM_TRACE=1)
  : > "$log/srv"; : > "$log/cli"
  # In a subshell (not exec'd away: two commands) whose standard error,
  # where it says the server was killed, is dropped: the server's output
  # is in $log/srv.
  ( "${s_pre[@]}" timeout "$CASE_TIMEOUT" rping -s -a "$srv_addr" -p "$port" -C 1000000 > "$log/srv" 2>&1
    exit $? ) 2> /dev/null &
  local srv=$! cli crc took=-
  if wait_listening "$s_side" "$port" "$srv"; then
    "${c_pre[@]}" timeout "$CASE_TIMEOUT" stdbuf -oL rping -c -a "$srv_addr" -p "$port" -C 1000000 -v \
      > "$log/cli" 2>&1 &
    cli=$!
    if wait_line "$log/cli" "^ping data" "$cli"; then
      pkill -9 -f "^rping -s -a $srv_addr -p $port " # not its timeout
      local t0=$SECONDS
      wait "$cli"; crc=$?
      took=$((SECONDS - t0))
    else
      kill "$cli" 2>/dev/null; wait "$cli" 2>/dev/null; crc="no pings"
    fi
  else
    crc="not started"
  fi
  kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
  if [ "$crc" != 124 ] && [ "$took" != - ] && [ "$took" -le 10 ] && grep -q "DISCONNECT EVENT" "$log/cli"; then
    pass=$((pass + 1)); echo "ok   $name ($took s)"
  else
    fail=$((fail + 1)); echo "FAIL $name (client: $crc, $took s after the kill)"
    grep -v "^ping data" "$log/cli" | tail -n 4 | sed 's/^/    client: /'
    grep -v "^softverbs rdma_cm" "$log/srv" | tail -n 4 | sed 's/^/    server: /'
  fi
}
killed_run "rdma_cm: softverbs' rping server killed mid-connection, rxe's client disconnected at once" softverbs rxe0
killed_run "rdma_cm: rxe's rping server killed mid-connection, softverbs' client disconnected at once" rxe0 softverbs

mckey_run "rxe-softverbs ipv4 mckey (rdma_cm multicast, rxe sends)" softverbs rxe0 239.40.0.2
mckey_run "rxe-softverbs ipv4 mckey (rdma_cm multicast, softverbs sends)" rxe0 softverbs 239.40.0.3

# UD multicast, both directions, IPv4 and IPv6 groups.
for fam in ipv4 ipv6; do
  group=239.40.0.1
  [ "$fam" = ipv6 ] && group=ff0e::40:1
  mcast_run "rxe-softverbs $fam multicast (rxe sends)" softverbs rxe0 "$fam" "$group"
  mcast_run "rxe-softverbs $fam multicast (softverbs sends)" rxe0 softverbs "$fam" "$group"
done

# Pass-through devices (SOFTVERBS_DEVICES name=passthrough:REAL) over
# the rxe pair: sv_xa fronts rxe_xa, sv_xb rxe_xb, in preloaded processes.
# pt_run NAME MODE EXPECT CLIENT_ENV PROGRAM ARGS...: the program as a
# server on sv_xb and a client on sv_xa (CLIENT_ENV: one more VAR=VALUE
# for the client, such as a trace or fault rules, or empty); MODE ok: both exit 0 and the
# client prints EXPECT; MODE fails: the client fails printing EXPECT.
PT_PRE=(env LD_PRELOAD="$SO" "SOFTVERBS_DEVICES=sv_xa=passthrough:rxe_xa sv_xb=passthrough:rxe_xb")
CLI=$(dirname "$SO")/softverbs
pt_run() {
  local name=$1 mode=$2 expect=$3 cenv=$4; shift 4
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1)); port=$((port + 1))
  local pre dev gid addr gflag=-g
  case "$1" in ib_*) gflag=-x ;; esac
  side rxe_xa ipv4
  local t0=$SECONDS srv src crc="not started"
  "${PT_PRE[@]}" timeout "$CASE_TIMEOUT" "$@" -d sv_xb "$gflag" "$gid" -p "$port" > "$log/srv" 2>&1 &
  srv=$!
  if wait_listen "$port" "" $srv 2> "$log/cli"; then
    local envs=()
    [ -n "$cenv" ] && envs=("$cenv")
    "${PT_PRE[@]}" "${envs[@]}" timeout "$CASE_TIMEOUT" "$@" -d sv_xa "$gflag" "$gid" -p "$port" 10.12.0.2 > "$log/cli" 2>&1
    crc=$?
  fi
  if [ "$mode" = fails ]; then
    kill $srv 2>/dev/null; wait $srv 2>/dev/null
    local took=$((SECONDS - t0))
    if [ "$crc" != 0 ] && [ "$crc" != "not started" ] && grep -Eq "$expect" "$log/cli"; then
      pass=$((pass + 1)); echo "ok   $name (${took} s)"
    else
      fail=$((fail + 1)); echo "FAIL $name (${took} s; client $(status "$crc"), want a failure)"
      tail -n 6 "$log/cli" | sed 's/^/    client: /'
    fi
    return
  fi
  wait $srv; src=$?
  pair_result "$name" "$((SECONDS - t0))" "$crc" "$src" "$expect" ""
}
# pt_summary NAME FILE PATTERN...: the summary of a pass-through trace.
pt_summary() {
  local name=$1 file=$2; shift 2
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1))
  local p ok=1
  "$CLI" trace summarize "$file" > "$log/summary" 2>&1 || ok=
  for p in "$@"; do grep -Eq -- "$p" "$log/summary" || ok=; done
  if [ -n "$ok" ]; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name"; sed 's/^/    /' "$log/summary" | tail -n 12
    echo "    wanted: $*"
  fi
}
if [[ "pass-through" =~ $FILTER ]]; then
  n=$((n + 1))
  if "${PT_PRE[@]}" ibv_devices > "$log/devices" 2>&1 && grep -q "sv_xa" "$log/devices" &&
     grep -q "sv_xb" "$log/devices" && grep -q "rxe_xa" "$log/devices"; then
    pass=$((pass + 1)); echo "ok   pass-through: ibv_devices lists sv_xa and sv_xb beside rxe_xa and rxe_xb"
  else
    fail=$((fail + 1)); echo "FAIL pass-through: ibv_devices lists sv_xa, sv_xb"; sed 's/^/    /' "$log/devices"
  fi
fi
pt_run "pass-through rc 4 KiB" ok "[0-9]+ iters in" "" ibv_rc_pingpong -m 1024 -s 4096 -n 100
pt_run "pass-through ud 1000 B" ok "[0-9]+ iters in" "" ibv_ud_pingpong -s 1000 -n 100
pt_run "pass-through write_bw" ok '^ +[0-9]+ +[0-9]+ +[0-9.]+' "" ib_write_bw -m 1024 -s 65536 -n 100 -F
pt_run "pass-through read_bw" ok '^ +[0-9]+ +[0-9]+ +[0-9.]+' "" ib_read_bw -m 1024 -s 65536 -n 100 -F
pt_run "pass-through rc traced" ok "[0-9]+ iters in" "SOFTVERBS_TRACE=$log/pt-trace.json" \
  ibv_rc_pingpong -m 1024 -s 4096 -n 20
pt_summary "pass-through trace summary: sv_xa's QP, its WRs and completions" "$log/pt-trace.json" \
  "^pid [0-9]+ sv_xa QP 0x[0-9a-f]+:$" "posted: [0-9]+ WRs \(RECV [0-9]+, SEND 20\)" \
  "completions: 40 \(0 in error\)" "send completion latency"
pt_run "pass-through write_bw traced (CQs made with ibv_create_cq_ex)" ok '^ +[0-9]+ +[0-9]+ +[0-9.]+' \
  "SOFTVERBS_TRACE=$log/pt-bw.json" ib_write_bw -m 1024 -s 65536 -n 100 -F
pt_summary "pass-through write_bw trace: its writes and their completions" "$log/pt-bw.json" \
  "posted: [0-9]+ WRs \(RDMA_WRITE [0-9]+\)" "completions: [0-9]+ \(0 in error\)"
if [[ "pass-through cq_ex traced" =~ $FILTER ]]; then
  n=$((n + 1))
  side rxe_xa ipv4
  if "${PT_PRE[@]}" SOFTVERBS_TRACE="$log/pt-cqex.json" timeout "$CASE_TIMEOUT" "${CQ_EX:-cq_ex-not-built}" sv_xa "$gid" \
       > "$log/cqex" 2>&1 && grep -q "cq_ex ok" "$log/cqex"; then
    pass=$((pass + 1)); echo "ok   pass-through cq_ex traced (ibv_start_poll, ibv_next_poll on rxe's CQ)"
  else
    fail=$((fail + 1)); echo "FAIL pass-through cq_ex traced"; tail -n 6 "$log/cqex" | sed 's/^/    /'
  fi
fi
pt_summary "pass-through cq_ex trace: both completions, read through the traced polling" "$log/pt-cqex.json" \
  "posted: 2 WRs \(RECV 1, SEND_WITH_IMM 1\)" "completions: 2 \(0 in error\)"
# The same rule on rxe's extended CQ, read through ibv_start_poll and
# ibv_wc_read_vendor_err.
if [[ "pass-through completion status= rule on the extended CQ" =~ $FILTER ]]; then
  n=$((n + 1))
  side rxe_xa ipv4
  "${PT_PRE[@]}" SOFTVERBS_FAULTS="completion opcode=SEND status=REM_ACCESS_ERR vendor_err=66" \
    timeout "$CASE_TIMEOUT" "${CQ_EX:-cq_ex-not-built}" sv_xa "$gid" > "$log/cqex-rule" 2>&1
  if [ $? -ne 0 ] && grep -q "status 10 vendor_err 66" "$log/cqex-rule"; then
    pass=$((pass + 1)); echo "ok   pass-through completion status= rule on the extended CQ"
  else
    fail=$((fail + 1)); echo "FAIL pass-through completion status= rule on the extended CQ"
    tail -n 6 "$log/cqex-rule" | sed 's/^/    /'
  fi
fi
pt_run "pass-through post_send errno= rule" fails "Couldn't post send" \
  "SOFTVERBS_FAULTS=post_send nth=4 errno=ENOMEM" ibv_rc_pingpong -m 1024 -s 4096 -n 20
pt_run "pass-through completion status= rule" fails "Failed status transport retry counter exceeded \(12\)" \
  "SOFTVERBS_FAULTS=completion opcode=SEND nth=3 status=RETRY_EXC_ERR" ibv_rc_pingpong -m 1024 -s 4096 -n 20
pt_run "pass-through qp_error after= rule (the QP in ERR flushes)" fails "Failed status [Ww]ork [Rr]equest [Ff]lushed [Ee]rror \(5\)" \
  "SOFTVERBS_FAULTS=qp_error after=510" ibv_rc_pingpong -m 1024 -s 4096 -n 20
# pt_one NAME EXPECT ENV... -- PROGRAM ARGS: a program of ours on sv_xa
# (pass-through to rxe_xa) exits 0 and prints EXPECT.
pt_one() {
  local name=$1 expect=$2; shift 2
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1))
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  if "${PT_PRE[@]}" "${envs[@]}" timeout "$CASE_TIMEOUT" "$@" > "$log/one" 2>&1 && grep -q "$expect" "$log/one"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name"; tail -n 6 "$log/one" | sed 's/^/    /'
  fi
}
# qp_error's IBV_EVENT_QP_FATAL on the real device's context: found by
# poll() on the non-blocking async descriptor, and by a blocked
# ibv_get_async_event; destroying the QP after acking it does not hang.
side rxe_xa ipv4
pt_one "pass-through qp_error after= raises QP_FATAL (poll on async_fd)" "qp_error ok" \
  SOFTVERBS_FAULTS="qp_error after=3" SOFTVERBS_TRACE="$log/pt-fatal.json" -- \
  "${FAULT_QP_ERROR:-fault_qp_error-not-built}" after sv_xa "$gid"
pt_summary "pass-through qp_error trace: the raised event under its QP" "$log/pt-fatal.json" \
  "events: QP_FATAL 1" "error completions: WR_FLUSH_ERR 3"
pt_one "pass-through qp_error at= raises QP_FATAL (blocked ibv_get_async_event)" "qp_error ok" \
  SOFTVERBS_FAULTS="qp_error at=300ms" -- "${FAULT_QP_ERROR:-fault_qp_error-not-built}" at sv_xa "$gid"
# completion delay= on rxe's CQs: each of the client's 5 receive
# completions is held 50 ms, and its completion event with it (the
# pingpong waits for events, -e), so 5 round trips take 0.25 s at least.
pt_run "pass-through completion delay= (events wait with the completions)" ok "bytes in" \
  "SOFTVERBS_FAULTS=completion opcode=RECV delay=50ms" ibv_rc_pingpong -m 1024 -s 64 -n 5 -e
if [[ "pass-through completion delay= took the delays" =~ $FILTER ]]; then
  n=$((n + 1))
  secs=$(sed -n 's/.* bytes in \([0-9.]*\) seconds.*/\1/p' "$log/cli")
  if [ -n "$secs" ] && awk -v s="$secs" 'BEGIN { exit !(s >= 0.25) }'; then
    pass=$((pass + 1)); echo "ok   pass-through completion delay= took the delays ($secs s for 5 round trips)"
  else
    fail=$((fail + 1)); echo "FAIL pass-through completion delay= took the delays ('$secs' s, want at least 0.25)"
  fi
fi

# The same on rxe's extended CQ, read with ibv_start_poll/ibv_next_poll:
# the receive completion is held 300 ms and then read whole.
if [[ "pass-through completion delay= on the extended CQ" =~ $FILTER ]]; then
  n=$((n + 1))
  side rxe_xa ipv4
  "${PT_PRE[@]}" SOFTVERBS_FAULTS="completion opcode=RECV delay=300ms" \
    timeout "$CASE_TIMEOUT" "${CQ_EX:-cq_ex-not-built}" sv_xa "$gid" > "$log/cqex-delay" 2>&1
  took=$(sed -n 's/^receive completion after \([0-9]*\) ms$/\1/p' "$log/cqex-delay")
  if grep -q "cq_ex ok" "$log/cqex-delay" && [ -n "$took" ] && [ "$took" -ge 300 ]; then
    pass=$((pass + 1)); echo "ok   pass-through completion delay= on the extended CQ (received after $took ms)"
  else
    fail=$((fail + 1)); echo "FAIL pass-through completion delay= on the extended CQ (want 300 ms or more)"
    tail -n 6 "$log/cqex-delay" | sed 's/^/    /'
  fi
fi

# rxe's own event (SRQ limit; rxe in 6.1 raises no last WQE event)
# through the merged descriptor a qp_error rule (one that never fires)
# gives the context, and without one.
pt_one "pass-through rxe's async event" "async events ok" -- \
  "${ASYNC_EVENTS:-async_events-not-built}" sv_xa "$gid" srq
pt_one "pass-through rxe's async event beside a qp_error rule" "async events ok" \
  SOFTVERBS_FAULTS="qp_error qp=16777215 after=1" -- "${ASYNC_EVENTS:-async_events-not-built}" sv_xa "$gid" srq

# softverbs' Rust API (crates/api): its loopback example, unchanged, on a
# real device through a pass-through device (rxe_xa, whose GID 1 is its
# IPv4 address), then on softverbs0 in namespace sv (the engine in the
# example's own process).
api_run() {
  local name=$1; shift
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1))
  local t0=$SECONDS
  if timeout "$CASE_TIMEOUT" "$@" > "$log/api" 2>&1 && grep -q "^loopback ok" "$log/api"; then
    pass=$((pass + 1)); echo "ok   $name: $(tail -n 1 "$log/api") ($((SECONDS - t0)) s)"
  else
    fail=$((fail + 1)); echo "FAIL $name ($((SECONDS - t0)) s)"
    tail -n 8 "$log/api" | sed 's/^/    /'
  fi
}
LOOPBACK=$(dirname "$SO")/examples/loopback
api_run "rust api: loopback example on rxe_xa through pass-through" \
  env SOFTVERBS_DEVICES="sv_xa=passthrough:rxe_xa" "$LOOPBACK" sv_xa 1
# The same traced (SOFTVERBS_TRACE), and the trace's summary.
api_run "rust api: the loopback example traced on rxe_xa through pass-through" \
  env SOFTVERBS_DEVICES="sv_xa=passthrough:rxe_xa" SOFTVERBS_TRACE="$log/api-pt.json" "$LOOPBACK" sv_xa 1
pt_summary "rust api: its trace's summary: sv_xa's QPs, their completions, the events" "$log/api-pt.json" \
  "^pid [0-9]+ sv_xa QP 0x[0-9a-f]+:$" "completions: 3 \(0 in error\)" "events: COMP 1, SRQ_LIMIT_REACHED 1"
# The same with fault rules, which the API applies on pass-through
# devices too: the first SEND's success becomes RETRY_EXC_ERR; the RC
# WRITE_WITH_IMM's post (the 2nd send WR) fails with ENOMEM.
api_fails() {
  local name=$1 expect=$2; shift 2
  [[ "$name" =~ $FILTER ]] || return 0
  n=$((n + 1))
  local t0=$SECONDS
  if ! timeout "$CASE_TIMEOUT" "$@" > "$log/api" 2>&1 && grep -Eq "$expect" "$log/api"; then
    pass=$((pass + 1)); echo "ok   $name ($((SECONDS - t0)) s)"
  else
    fail=$((fail + 1)); echo "FAIL $name ($((SECONDS - t0)) s; want a failure matching /$expect/)"
    tail -n 8 "$log/api" | sed 's/^/    /'
  fi
}
api_fails "rust api: a completion fault rule on rxe_xa through pass-through" \
  "wanted WR 1 Send done, got .*status: RetryExcErr" \
  env SOFTVERBS_DEVICES="sv_xa=passthrough:rxe_xa" \
  SOFTVERBS_FAULTS="completion opcode=SEND nth=1 status=RETRY_EXC_ERR" "$LOOPBACK" sv_xa 1
api_fails "rust api: a post fault rule on rxe_xa through pass-through" \
  "a fault rule \(SOFTVERBS_FAULTS\) refused the WR \(errno 12\)" \
  env SOFTVERBS_DEVICES="sv_xa=passthrough:rxe_xa" \
  SOFTVERBS_FAULTS="post_send nth=2 errno=ENOMEM" "$LOOPBACK" sv_xa 1
api_fails "rust api: a post_srq_recv fault rule on rxe_xa through pass-through" \
  "a fault rule \(SOFTVERBS_FAULTS\) refused the WR \(errno 12\)" \
  env SOFTVERBS_DEVICES="sv_xa=passthrough:rxe_xa" \
  SOFTVERBS_FAULTS="post_srq_recv errno=ENOMEM" "$LOOPBACK" sv_xa 1
api_run "rust api: loopback example on softverbs0" ip netns exec sv \
  env SOFTVERBS_DEVICES="softverbs0=10.11.0.2/1500" SOFTVERBS_DAEMON="$CLI" "$LOOPBACK" softverbs0 1

# Differential conformance (docs/conformance.md): random verbs sequences
# on softverbs0 and on rxe_xa through a pass-through device, every answer
# compared; a divergent case prints its line (the reproducer's path is in
# the log, shown on failure with the first reproducer's verbs). In
# namespace sv, since rxe holds UDP 4791 in the initial one.
if [[ "conformance" =~ $FILTER ]]; then
  n=$((n + 1))
  t0=$SECONDS
  if ip netns exec sv env SOFTVERBS_DEVICES="softverbs0=10.11.0.2/1500" \
       timeout 900 "$CLI" conformance --against rxe_xa \
       --cases 100 --data-cases 20 --uc-cases 20 --shrink 40 --verbose --repro-dir "$log/repro" \
       > "$log/conformance" 2>&1; then
    pass=$((pass + 1))
    echo "ok   conformance: softverbs0 against rxe_xa, $(tail -n 1 "$log/conformance") ($((SECONDS - t0)) s)"
    grep '^known difference' "$log/conformance" | sed 's/^/    /'
  else
    fail=$((fail + 1)); echo "FAIL conformance: softverbs0 against rxe_xa ($((SECONDS - t0)) s)"
    grep -Ev '^ *ok   (data |UC data )?case' "$log/conformance" | sed 's/^/    /' | head -n 60
    # Each divergent case's verbs after the common setup (the VM's files
    # are gone once it stops).
    for f in "$log"/repro/*.c; do
      [ -f "$f" ] || continue
      echo "    $(basename "$f"):"
      grep '^	printf("> ' "$f" | tail -n +11 | sed 's/^\tprintf("> \(.*\)\\n");$/      \1/' | tail -n 25
    done
  fi
fi

echo "cases took $((SECONDS - started)) s"
rm -rf "$log"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
