#!/usr/bin/env bash
# The measurements of `make bench` (see bench/README.md). Runs, in one go on
# loopback: perftest over softverbs (bandwidth sweep and latency), the raw
# baselines (iperf3 TCP, UDP ping-pong, memcpy), the scale benchmarks (C
# programs through the real provider) and the engine-alone benchmark; then
# softverbs against kernel rxe in an emulated VM (bench/rxe_vm.sh). Each
# program's raw output goes to $OUT (target/bench by default); then
# bench/report.py turns it into the table, docs/perf.md and the plot.
#
# Expects `make shim`, the softverbs-baselines binaries and the engine
# bench to be built already (the Makefile's bench target does that first).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# perftest's server listens on every address (Debian's perftest ignores
# --source_ip there), and other sessions on this machine may use the same
# UDP slot ports. So the benchmark runs in a network namespace of its own,
# which has only a loopback interface: every socket is then on 127.0.0.1
# and nothing is reachable from outside. Needs root or unprivileged user
# namespaces; without either it runs in the host namespace and says so.
if [ -z "${SOFTVERBS_BENCH_NETNS:-}" ]; then
  for how in "unshare --net" "unshare --net --map-root-user"; do
    if $how true 2>/dev/null; then
      exec env SOFTVERBS_BENCH_NETNS="$how" $how -- bash "$0" "$@"
    fi
  done
  echo "bench: no network namespace available; running in the host's (perftest servers listen on all addresses meanwhile)" >&2
  SOFTVERBS_BENCH_NETNS=none
fi
if [ "$SOFTVERBS_BENCH_NETNS" != none ]; then
  ip link set lo up
fi

OUT=${BENCH_OUT:-$ROOT/target/bench}
SV=$ROOT/target/release/softverbs
BIN=$ROOT/target/release
rm -rf "$OUT"
mkdir -p "$OUT"/{perftest,perftest_wire,baselines,scale,engine,bin}
START=$(date +%s)
# The 1-minute load average at the start and the end, for the report: a
# busy machine shows in the numbers.
cut -d' ' -f1 /proc/loadavg > "$OUT/loadavg"

# Every background process started here is killed on exit, by PID, if it
# is still running (a failed client leaves its server waiting).
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done' EXIT

# Wall, user and system seconds of a process, written by GNU time.
TIMEFMT='%e %U %S'
# Upper bound for any one program, so a hang cannot stall the run.
LIMIT=120

# wait_listen PORT: waits until a TCP server listens on PORT (perftest's
# and iperf3's clients do not retry a refused connection).
wait_listen() {
  for _ in $(seq 100); do
    ss -Htln "sport = :$1" | grep -q . && return 0
    sleep 0.05
  done
  echo "bench: nothing listens on port $1" >&2
  return 1
}

# pair DIR NAME PROGRAM ARGS...: runs PROGRAM ARGS over softverbs as the
# server and PROGRAM ARGS 127.0.0.1 as the client, each under GNU time.
# Leaves DIR/NAME.{srv,cli} (output) and DIR/NAME.{srv,cli}.time (CPU). A
# failure is noted in the output file and the run goes on: the report
# marks what is missing.
PORT=18700
pair() {
  local dir=$1 name=$2; shift 2
  PORT=$((PORT + 1))
  /usr/bin/time -f "$TIMEFMT" -o "$dir/$name.srv.time" \
    timeout $LIMIT "$SV" run -- "$@" -p $PORT > "$dir/$name.srv" 2>&1 &
  local srv=$!
  wait_listen $PORT || true
  /usr/bin/time -f "$TIMEFMT" -o "$dir/$name.cli.time" \
    timeout $LIMIT "$SV" run -- "$@" -p $PORT 127.0.0.1 > "$dir/$name.cli" 2>&1 \
    || echo "bench: client exited with $?" >> "$dir/$name.cli"
  wait $srv || echo "bench: server exited with $?" >> "$dir/$name.srv"
}

step() { echo "== $* ($(($(date +%s) - START)) s)"; }

# Runs of the sizes the targets judge (64 KiB) and of iperf3. Wire
# bandwidth on this kind of 2-CPU machine sits on one of two levels per
# run, about a factor of two apart, for softverbs and TCP alike
# (docs/perf-profile.md, "Wire bandwidth: where the two levels come
# from"), so one run per side made the ratios a coin toss: each side's
# best of TRIES counts, its CPU seconds with it.
TRIES=3
# The sweep's other sizes, best of SWEEP_TRIES: one run per size put
# single sizes on the slow level between neighbours on the fast one, and
# the trend check (no size more than 2x off its neighbours') judged the
# machine's two levels instead of softverbs.
SWEEP_TRIES=2

# keep_best DIR NAME FILES MEASURE RUN ARGS...: runs `RUN DIR NAME.tryI
# ARGS...` TRIES times and keeps as DIR/NAME.F, for each F in FILES, the
# files of the try for which `MEASURE DIR NAME.tryI` printed the largest
# number (a try that failed, with nothing to measure, counts as 0).
keep_best() {
  local dir=$1 name=$2 files=$3 measure=$4 run=$5 best=1 best_v=-1 i v f; shift 5
  for i in $(seq $TRIES); do
    "$run" "$dir" "$name.try$i" "$@"
    v=$("$measure" "$dir" "$name.try$i") || v=0
    if awk -v a="${v:-0}" -v b="$best_v" 'BEGIN { exit !(a > b) }'; then
      best=$i best_v=${v:-0}
    fi
  done
  for f in $files; do
    mv "$dir/$name.try$best.$f" "$dir/$name.$f" 2>/dev/null || true
  done
  rm -f "$dir/$name".try*
}

# perftest_bw DIR NAME: the average bandwidth the client of `pair DIR
# NAME ...` reported (perftest's fourth column).
perftest_bw() {
  grep -E '^ *[0-9]+ +[0-9]+ ' "$1/$2.cli" | tail -1 | awk '{ print $4 + 0 }'
}

# --- perftest over softverbs --------------------------------------------
PT="-d softverbs0 -x 0"
SIZES=$(for i in $(seq 1 20); do echo $((1 << i)); done)   # 2 B .. 1 MiB

# perftests DIR LABEL: the bandwidth sweep and the latency tests below,
# their outputs in DIR.
perftests() {
local dir=$1 label=$2

# Bandwidth: one run per size rather than -a, which goes to 8 MiB and
# uses one iteration count for all sizes; here each size moves 256 MiB
# (at most 50,000 messages, so 1 MiB gets 256 and 2 B gets 50,000), so
# each run lasts about a second and every size is measured over many
# round trips of perftest's 128-deep send queue. One run per test at -n 5
# measures the setup cost (device, memory registration, connection), which
# the report subtracts from the CPU seconds of the others. 64 KiB, the size
# of issue 13's targets, moves 2 GiB: at 256 MiB its transfer took a tenth
# of a second against a second of setup, and the CPU per GB swung by a
# tenth of TCP's from run to run. -N: perftest's peak bandwidth, which it
# computes by default up to 20,000 messages, compares every pair of
# completions, and that quadratic arithmetic of the report took more CPU
# than moving the data at 16 KiB.
BW_FLAGS="-N"
for t in write read send; do
  step "$label: ib_${t}_bw: sizes 2 B to 1 MiB"
  pair "$dir" "bw_${t}_setup" ib_${t}_bw $PT $BW_FLAGS -s 2 -n 5
  for s in $SIZES; do
    n=$(( (256 << 20) / s ))
    n=$(( n > 50000 ? 50000 : n ))
    if [ "$s" = 65536 ]; then
      keep_best "$dir" "bw_${t}_$s" "srv cli srv.time cli.time" perftest_bw \
        pair ib_${t}_bw $PT $BW_FLAGS -s $s -n 32768
    else
      TRIES=$SWEEP_TRIES keep_best "$dir" "bw_${t}_$s" "srv cli srv.time cli.time" perftest_bw \
        pair ib_${t}_bw $PT $BW_FLAGS -s $s -n $n
    fi
  done
done

# Latency at 2 B and 4 KiB. perftest reports t_typical (the median) and
# t_avg: half the round trip for send and write, the whole READ round trip
# for read.
for t in send write read; do
  for s in 2 4096; do
    step "$label: ib_${t}_lat -s $s"
    pair "$dir" "lat_${t}_$s" ib_${t}_lat $PT -s $s -n 2000
  done
done
}

# The default path between two processes of one host (same host), then
# the wire path forced (SOFTVERBS_SHM=0), as between hosts (issue 13).
perftests "$OUT/perftest" "same host"
SOFTVERBS_SHM=0 perftests "$OUT/perftest_wire" "wire"

# --- baselines, in the same run -----------------------------------------
step "iperf3: loopback TCP, one stream, 5 s, best of $TRIES"
B="$OUT/baselines"
# iperf3_try DIR NAME: one iperf3 run, its client's report in
# DIR/NAME.json and both sides' CPU in DIR/NAME.{srv,cli}.time.
iperf3_try() {
  local dir=$1 name=$2 srv
  PORT=$((PORT + 1))
  /usr/bin/time -f "$TIMEFMT" -o "$dir/$name.srv.time" \
    timeout $LIMIT iperf3 -s -1 -B 127.0.0.1 -p $PORT > "$dir/$name.srv" 2>&1 &
  srv=$!
  wait_listen $PORT || true
  /usr/bin/time -f "$TIMEFMT" -o "$dir/$name.cli.time" \
    timeout $LIMIT iperf3 -c 127.0.0.1 -B 127.0.0.1 -p $PORT -t 5 -J > "$dir/$name.json" \
    || echo "bench: iperf3 client failed" >&2
  wait $srv || true
}
# iperf3_bps DIR NAME: the bits per second iperf3_try's client received.
iperf3_bps() {
  /usr/bin/python3 -c 'import json, sys
try: print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"])
except Exception: print(0)' "$1/$2.json"
}
keep_best "$B" iperf3 "json srv srv.time cli.time" iperf3_bps iperf3_try

step "udp-pingpong: 2 B and 4 KiB, spinning and blocking"
for s in 2 4096; do
  for mode in busy block; do
    flag=$([ $mode = busy ] && echo --busy || true)
    timeout $LIMIT "$BIN/udp-pingpong" --size $s --iters 100000 $flag \
      > "$OUT/baselines/udp_${mode}_$s" 2>&1 || echo "bench: udp-pingpong failed" >&2
  done
done

step "memcpy-bw: 256 MiB buffers"
timeout $LIMIT "$BIN/memcpy-bw" --mib 256 --reps 10 > "$OUT/baselines/memcpy" 2>&1 \
  || echo "bench: memcpy-bw failed" >&2

# --- scale: through the real provider ------------------------------------
step "scale: 10,000 RC QPs in one process"
cc -O2 -Wall -o "$OUT/bin/qp_scale" bench/c/qp_scale.c -libverbs
cc -O2 -Wall -o "$OUT/bin/qp_pairs" bench/c/qp_pairs.c -libverbs
timeout $LIMIT "$SV" run -- "$OUT/bin/qp_scale" -n 10000 > "$OUT/scale/qp_scale" 2>&1 \
  || echo "bench: qp_scale failed" >&2

step "scale: 1,000 RC QP pairs between two processes"
PORT=$((PORT + 1))
/usr/bin/time -f "$TIMEFMT" -o "$OUT/scale/qp_pairs.srv.time" \
  timeout $LIMIT "$SV" run -- "$OUT/bin/qp_pairs" -n 1000 -r 10 -p $PORT > "$OUT/scale/qp_pairs.srv" 2>&1 &
srv=$!
wait_listen $PORT || true
/usr/bin/time -f "$TIMEFMT" -o "$OUT/scale/qp_pairs.cli.time" \
  timeout $LIMIT "$SV" run -- "$OUT/bin/qp_pairs" -n 1000 -r 10 -p $PORT 127.0.0.1 > "$OUT/scale/qp_pairs.cli" 2>&1 \
  || echo "bench: qp_pairs client failed" >&2
wait $srv || echo "bench: qp_pairs server failed" >&2

# --- the engine alone ----------------------------------------------------
step "engine alone (cargo bench -p softverbs-engine)"
cargo bench -q -p softverbs-engine --bench engine > "$OUT/engine/engine" 2> "$OUT/engine/engine.err" \
  || echo "bench: engine bench failed" >&2

step "checked access to registered memory (process_vm_readv/writev)"
timeout $LIMIT target/release/examples/checked_memory > "$OUT/engine/checked_memory" 2>&1 \
  || echo "bench: checked_memory failed" >&2

# --- against kernel rxe, in a VM ----------------------------------------
# Last: the same perftest programs over rxe and over softverbs side by
# side in one emulated VM session, then under 1% netem loss
# (bench/rxe_vm.sh, 3 to 6 minutes). A VM that cannot start leaves
# $OUT/rxe_vm/missing with the reason, which the report shows.
step "against rxe in a VM (bench/rxe_vm.sh)"
bench/rxe_vm.sh "$OUT" || echo "bench: bench/rxe_vm.sh failed" >&2

# --- the report ----------------------------------------------------------
ELAPSED=$(($(date +%s) - START))
cut -d' ' -f1 /proc/loadavg >> "$OUT/loadavg"
step "report"
/usr/bin/python3 bench/report.py --results "$OUT" --elapsed "$ELAPSED" \
  --netns "$SOFTVERBS_BENCH_NETNS" --doc docs/perf.md --plot docs/perf-bandwidth.png
