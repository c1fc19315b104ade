#!/usr/bin/env bash
# Runs inside the interop VM (tests/interop/vm.sh), as root, on Debian's
# kernel with rdma_rxe loaded; started by bench/rxe_vm.sh. Usage:
#   rxe_vm_guest.sh SHIM_SO [BW_ITERS [LAT_ITERS [REPEAT [LOSS_ITERS [LOSS]]]]]
# (arguments, not environment: vm.sh passes the guest only its arguments;
# defaults 1,000 messages of 64 KiB per bandwidth run, 500 latency
# iterations, each lossless program 3 times, 500 messages per run of the
# loss comparison, loss 1%).
# The same perftest programs, side by side in this one VM session, on two
# setups over a veth pair each, both at path MTU 1024 (-m 1024; the veths
# have MTU 1500, so both devices' active MTU is 1024 too):
#  - rxe: rxe_xa against rxe_xb, the rxe-against-rxe link of
#    tests/interop/links.sh (xa 10.12.0.1 and xb 10.12.0.2 in the initial
#    namespace, policy routing across the veth);
#  - softverbs: softverbs0 in namespace sva (veth svx, 10.13.0.1) against
#    softverbs0 in namespace svb (svy, 10.13.0.2), preload mode, with
#    SOFTVERBS_SHM=0 (the wire path; each namespace has its own daemon,
#    started on demand: the daemon's socket belongs to the namespace).
# For each program rxe runs first, then softverbs, so that both see the
# same state of the (emulated, shared) machine; the lossless programs run
# REPEAT times over (the report takes each side's best: a busy host shows
# in single runs, and perftest's latency tests now and then fail their
# clock calibration under emulation and print "inf"). Then the bandwidth tests
# again with `tc netem loss 1%` on both ends of each veth (both
# directions: the data, the ACKs and READ responses alike).
#
# Output, for bench/report.py: each program's output in sections
#   @@bench SETUP TEST ROLE rc=STATUS seconds=N run=K
#   ...the program's standard output...
#   @@bench SETUP TEST ROLE-stderr
#   ...its standard error (softverbs' SOFTVERBS_STATS=1 counters)...
# (SETUP rxe, softverbs, passthrough or passthrough_hooked; TEST e.g.
# write_bw, read_lat, write_bw_loss1;
# ROLE client or server), plus
#   @@bench-info KEY VALUE...
# lines (setup, GIDs, the netem drop counters, rxe's counters) and
# "@@bench-done" last. Exits 0 unless the setup failed.
set -u
SO=$(readlink -f "$1")
here=$(dirname "$(readlink -f "$0")")
. "$here/../tests/programs/lib.sh" # wait_listen, wait_pair, two_hosts, remove_two_hosts
. "$here/../tests/interop/links.sh" # setup_rxe_pair, gid_of
log=$(mktemp -d)
export WAIT_LISTEN_SECONDS=60

# Sizes and bounds. A fixed number of messages (-n, as make bench and make
# interop run them), not perftest's duration mode (-D): the same work for
# both sides. (Under emulation perftest's clock calibration now and then
# fails, "Correlation coefficient r^2 < 0.9", and the run prints 0.00 or
# inf; bench/report.py counts such a run as giving no figure.) At the 40 to 50 MiB/s
# both reach in the emulated VM, 1,000 messages of 64 KiB take 1.5 s;
# under 1% loss rxe slows down to a few MiB/s, so each program gets a
# generous limit.
BW_ITERS=${2:-1000}
LAT_ITERS=${3:-500}
REPEAT=${4:-3}
LOSS_ITERS=${5:-500} # under loss both slow down to a few MB/s
LOSS=${6:-1%}
LIMIT=120 # seconds per program

info() { echo "@@bench-info $*"; }

cleanup() {
  kill $(jobs -p) 2>/dev/null
  remove_two_hosts sva svb
  rm -rf "$log"
}
trap cleanup EXIT

started=$SECONDS
setup_rxe_pair || { echo "@@bench-fail setting up rxe_xa/rxe_xb failed"; exit 1; }
two_hosts "the rxe side-by-side benchmark" sva svb sv 10.13.0.1 10.13.0.2
SV_A=(ip netns exec sva env LD_PRELOAD="$SO" SOFTVERBS_DEVICES=softverbs0=10.13.0.1/1500
  SOFTVERBS_SHM=0 SOFTVERBS_STATS=1)
SV_B=(ip netns exec svb env LD_PRELOAD="$SO" SOFTVERBS_DEVICES=softverbs0=10.13.0.2/1500
  SOFTVERBS_SHM=0 SOFTVERBS_STATS=1)
modprobe sch_netem 2>&1 || info netem-module "modprobe sch_netem failed"
# Kernel messages (rxe's "Failed sending ACK" under load) would land in
# the middle of the output on the console: counted at the end instead.
dmesg -n 1

gid_xa=$(gid_of rxe_xa ::ffff:10.12.0.1)
gid_xb=$(gid_of rxe_xb ::ffff:10.12.0.2)
gid_sa=$(gid_of softverbs0 ::ffff:10.13.0.1 "${SV_A[@]}")
gid_sb=$(gid_of softverbs0 ::ffff:10.13.0.2 "${SV_B[@]}")
for g in "$gid_xa" "$gid_xb" "$gid_sa" "$gid_sb"; do
  [ -n "$g" ] || { echo "@@bench-fail no GID index for a device (rxe $gid_xa $gid_xb, softverbs $gid_sa $gid_sb)"; exit 1; }
done
info setup "seconds=$((SECONDS - started)) cpus=$(nproc) kernel=$(uname -r)"
info gids "rxe_xa=$gid_xa rxe_xb=$gid_xb softverbs_a=$gid_sa softverbs_b=$gid_sb"
info mtu "veth=$(cat /sys/class/net/xa/mtu) path=1024"
info rxe-active-mtu "$(ibv_devinfo -d rxe_xa | awk '/active_mtu/ { print $2 }')"

port=18800
# run SETUP TEST PROGRAM ARGS...: PROGRAM ARGS as server on SETUP's first
# side and, once it listens, as client on the second; prints both
# outputs in their @@bench sections.
run() {
  local setup=$1 test=$2; shift 2
  port=$((port + 1))
  local s_pre c_pre s_args c_args srv_addr ns=
  case "$setup" in
    rxe)
      s_pre=(); c_pre=(); srv_addr=10.12.0.1
      s_args=(-d rxe_xa -x "$gid_xa"); c_args=(-d rxe_xb -x "$gid_xb") ;;
    softverbs)
      s_pre=("${SV_A[@]}"); c_pre=("${SV_B[@]}"); srv_addr=10.13.0.1; ns=sva
      s_args=(-d softverbs0 -x "$gid_sa"); c_args=(-d softverbs0 -x "$gid_sb") ;;
    passthrough | passthrough_hooked)
      s_pre=("${PT[@]}"); c_pre=("${PT[@]}"); srv_addr=10.12.0.1
      [ "$setup" = passthrough_hooked ] && s_pre+=("$PT_RULE") c_pre+=("$PT_RULE")
      s_args=(-d sv_xa -x "$gid_xa"); c_args=(-d sv_xb -x "$gid_xb") ;;
  esac
  local t0=$SECONDS src=timeout crc="not started" srv cli
  "${s_pre[@]}" timeout "$LIMIT" "$@" "${s_args[@]}" -p "$port" > "$log/srv" 2> "$log/srv.err" &
  srv=$!
  : > "$log/cli"
  if wait_listen "$port" "$ns" $srv 2> "$log/cli.err"; then
    "${c_pre[@]}" timeout "$LIMIT" "$@" "${c_args[@]}" -p "$port" "$srv_addr" > "$log/cli" 2> "$log/cli.err" &
    cli=$!
    wait_pair $srv $cli
  else
    kill $srv 2>/dev/null; wait $srv; src=$?
  fi
  local took=$((SECONDS - t0))
  section "$setup $test client rc=$crc seconds=$took run=${rep:-1}" "$log/cli"
  section "$setup $test client-stderr" "$log/cli.err"
  section "$setup $test server rc=$src seconds=$took run=${rep:-1}" "$log/srv"
  section "$setup $test server-stderr" "$log/srv.err"
}
# section HEADER FILE: "@@bench HEADER", then FILE, ending in a newline.
section() {
  echo "@@bench $1"
  cat "$2"
  [ -s "$2" ] && [ -n "$(tail -c 1 "$2")" ] && echo
}

# rxe's counters of both devices, one "name value" line each.
rxe_counters() {
  local d
  for d in rxe_xa rxe_xb; do
    (cd "/sys/class/infiniband/$d/ports/1/hw_counters" && grep -H '' -- *) |
      sed "s/^/$d:/; s/:\([0-9]*\)\$/ \1/"
  done
}
# counter_changes BEFORE AFTER: "name +delta" for each counter that moved.
counter_changes() {
  awk 'NR == FNR { b[$1] = $2; next } $2 != b[$1] { printf "%s +%d ", $1, $2 - b[$1] }' "$1" "$2"
}
# netem_stats NS:DEV...: packets that left each device's root qdisc
# (GSO segments counted one by one) and the sends it dropped ("NS:" empty
# for the initial namespace).
netem_stats() {
  local x ns dev
  for x in "$@"; do
    ns=${x%%:*} dev=${x#*:}
    tc ${ns:+-n "$ns"} -s qdisc show dev "$dev" |
      awk -v d="$dev" '/Sent/ { x = $0; sub(/.*\(dropped /, "", x); sub(/,.*/, "", x)
        printf "%s sent=%s dropped=%s ", d, $4, x }'
  done
}
# udp_drops LABEL: the kernel's UDP drop counters in both softverbs
# namespaces so far (a datagram refused for want of buffer room is lost
# like one netem drops).
udp_drops() {
  local ns
  info udp-drops "$1 $(for ns in sva svb; do
    ip netns exec "$ns" nstat -asz UdpRcvbufErrors UdpInErrors UdpSndbufErrors |
      awk -v ns="$ns" 'NR > 1 { printf "%s:%s=%s ", ns, $1, $2 }'
  done)"
}
# netem NS:DEV... add|del: the loss on (or off) each device's root qdisc.
netem() {
  local op=${!#} x ns dev
  for x in "${@:1:$#-1}"; do
    ns=${x%%:*} dev=${x#*:}
    if [ "$op" = add ]; then
      # shellcheck disable=SC2086 # NETEM's words
      tc ${ns:+-n "$ns"} qdisc add dev "$dev" root $NETEM || return 1
    else
      tc ${ns:+-n "$ns"} qdisc del dev "$dev" root || return 1
    fi
  done
}
# tx_csum on|off: transmit checksum offload of softverbs' veth ends. Off,
# the kernel refuses UDP segmentation offload (EIO: a GSO send needs the
# checksum left to the device), so softverbs sends each packet alone.
tx_csum() {
  ip netns exec sva ethtool -K svx tx "$1" > /dev/null &&
    ip netns exec svb ethtool -K svy tx "$1" > /dev/null
}

# Pass-through (docs/passthrough.md): the rxe pair again, through
# softverbs' pass-through devices sv_xa and sv_xb; once as configured (no
# rule and no trace: the real provider's context untouched), once with its
# ops hooked by a fault rule that never fires (QP 0 posts nothing), so
# every verb goes through softverbs on its way.
PT=(env LD_PRELOAD="$SO" "SOFTVERBS_DEVICES=sv_xa=passthrough:rxe_xa sv_xb=passthrough:rxe_xb")
PT_RULE="SOFTVERBS_FAULTS=post_send qp=0 errno=EIO"

BW="-m 1024 -s 65536 -n $BW_ITERS -F"
LAT="-m 1024 -s 2 -n $LAT_ITERS -F"
LBW="-m 1024 -s 65536 -n $LOSS_ITERS -F"
info sizes "bw_iters=$BW_ITERS lat_iters=$LAT_ITERS repeat=$REPEAT loss_iters=$LOSS_ITERS loss=$LOSS"
# shellcheck disable=SC2086 # the options' words
for rep in $(seq "$REPEAT"); do
  for t in write read send; do
    run rxe "${t}_bw" ib_${t}_bw $BW
    run softverbs "${t}_bw" ib_${t}_bw $BW
  done
  run passthrough write_bw ib_write_bw $BW
  run passthrough_hooked write_bw ib_write_bw $BW
done
udp_drops lossless
# shellcheck disable=SC2086
for rep in $(seq "$REPEAT"); do
  for t in send read write; do
    run rxe "${t}_lat" ib_${t}_lat $LAT
    run softverbs "${t}_lat" ib_${t}_lat $LAT
  done
  run passthrough send_lat ib_send_lat $LAT
  run passthrough_hooked send_lat ib_send_lat $LAT
done
rep=1

# Loss: netem on both ends of each veth (both directions; its default
# queue limit of 1,000 packets raised, so that only the random loss drops
# anything). netem drops whole skbs, and softverbs sends up to 64 packets
# in one with UDP segmentation offload (GSO), which stays one skb through
# the qdisc: 1% of its sends lost would be bursts of whole messages, not
# 1% of its packets, one at a time as rxe's. So the comparison runs with
# softverbs sending each packet alone (transmit checksum offload off on
# its veths, see tx_csum), against its own lossless throughput sent the
# same way (TEST_nogso); then, for the record, with GSO under the same
# netem (TEST_loss1_gso: bursty loss, against TEST_ref).
NETEM="netem loss $LOSS limit 100000"
RXE_LINKS=(:xa :xb)
SV_LINKS=(sva:svx svb:svy)
# Each side's lossless reference for the fraction kept is measured the
# same way just before (TEST_ref, TEST_nogso): one run of LOSS_ITERS.
for t in write read send; do
  run rxe "${t}_bw_ref" ib_${t}_bw $LBW
  run softverbs "${t}_bw_ref" ib_${t}_bw $LBW
done
if netem "${RXE_LINKS[@]}" add; then
  info loss "$LOSS on xa and xb (both directions)"
  for t in write read send; do
    rxe_counters > "$log/before"
    run rxe "${t}_bw_loss1" ib_${t}_bw $LBW
    rxe_counters > "$log/after"
    info rxe-counters "${t}_bw_loss1 $(counter_changes "$log/before" "$log/after")"
  done
  info netem "rxe $(netem_stats "${RXE_LINKS[@]}")"
  netem "${RXE_LINKS[@]}" del
else
  info loss "not measured: tc qdisc add ... netem failed (sch_netem?)"
fi
# sv_lossy SUFFIX NETEM_LABEL HOW: softverbs' bandwidth tests under the
# loss on both softverbs links, as runs "<test>_bw_loss1SUFFIX".
sv_lossy() {
  netem "${SV_LINKS[@]}" add || return 0
  info loss "$LOSS on svx and svy (both directions), softverbs $3"
  for t in write read send; do
    run softverbs "${t}_bw_loss1$1" ib_${t}_bw $LBW
  done
  info netem "$2 $(netem_stats "${SV_LINKS[@]}")"
  udp_drops "loss1$1"
  netem "${SV_LINKS[@]}" del
}
if tx_csum off; then
  for t in write read send; do
    run softverbs "${t}_bw_nogso" ib_${t}_bw $LBW
  done
  udp_drops nogso
  sv_lossy "" softverbs "without GSO"
  tx_csum on
else
  info loss "softverbs without GSO not measured: ethtool -K tx off failed"
fi
sv_lossy _gso softverbs-gso "with GSO"
info rxe-kernel-messages "$(dmesg | grep -o 'rdma_rxe: .*' | sort | uniq -c | awk '{ c = $1; $1 = ""; printf "%s x%d; ", substr($0, 2), c }')"
info total "seconds=$((SECONDS - started))"
echo "@@bench-done"
