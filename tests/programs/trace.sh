#!/usr/bin/env bash
# The verbs trace (SOFTVERBS_TRACE, `softverbs trace summarize`) with
# unmodified rdma-core programs and our C checks over softverbs:
#   * ibv_rc_pingpong, both processes traced (%p: a file each): every
#     line is a record, the device opens first and closes last, and the
#     summary counts the WRs, completions and latencies the run made;
#   * threads.c (ibv_post_send and ibv_wr_* from several threads,
#     ibv_poll_cq and ibv_start_poll): every SEND posted is traced and
#     completes exactly once in the trace;
#   * with fault rules: an error completion, a failed post and a
#     QP_FATAL event appear in the summary, each after the record of the
#     rule that fired, as does a packet rule's firing on the wire path;
#   * a trace file that cannot be created fails the open, saying why; a
#     file that is not a trace is refused with its line number.
# Prints one line per check and "N passed, M failed" last.
# Usage: trace.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
export LD_PRELOAD=$SO
export SOFTVERBS_DEVICES=softverbs0=127.0.0.1
CLI=$(dirname "$SO")/softverbs
PY=/usr/bin/python3
pass=0; fail=0; n=0
log=$(mktemp -d)
trap 'rm -rf "$log"; kill $(jobs -p) 2>/dev/null' EXIT
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
PORT_BASE=$(random_port_base)
ONE_TIMEOUT=60

# summary NAME FILE PATTERN...: `softverbs trace summarize FILE` succeeds
# and prints a line matching each extended regex.
summary() {
  local name=$1 file=$2; shift 2
  if ! env -u LD_PRELOAD "$CLI" trace summarize "$file" > "$log/summary" 2>&1; then
    bad "$name" "$log/summary"; return
  fi
  local p
  for p in "$@"; do
    if ! grep -Eq -- "$p" "$log/summary"; then
      echo "no line matches /$p/" >> "$log/summary"; bad "$name" "$log/summary"; return
    fi
  done
  ok "$name"
}

# traced_pair NAME CLIENT_RULES CMD...: CMD as server and client, each
# traced to $log/NAME-%p.json. With client rules the client is expected
# to fail, and the server, left waiting for it, is stopped then.
traced_pair() {
  local name=$1 rules=$2; shift 2
  n=$((n + 1)); local port=$((PORT_BASE + n))
  if [ -z "$rules" ]; then
    serve_then_connect $port env SOFTVERBS_TRACE="$log/$name-srv-%p.json" timeout 30 "$@" -p $port \
      --then env SOFTVERBS_TRACE="$log/$name-cli-%p.json" timeout 30 "$@" -p $port 127.0.0.1
    return
  fi
  env SOFTVERBS_TRACE="$log/$name-srv-%p.json" timeout 30 "$@" -p $port > "$log/srv" 2>&1 &
  local srv=$!
  if wait_listen $port "" $srv 2> "$log/cli"; then
    env SOFTVERBS_TRACE="$log/$name-cli-%p.json" SOFTVERBS_FAULTS="$rules" timeout 30 "$@" -p $port 127.0.0.1 \
      > "$log/cli" 2>&1
  fi
  kill $srv 2> /dev/null; wait $srv 2> /dev/null
}

traced_pair pingpong "" ibv_rc_pingpong -d softverbs0 -g 0 -n 5
pair_verdict "ibv_rc_pingpong runs traced" "bytes in"
files=("$log"/pingpong-*.json)
if [ ${#files[@]} = 2 ]; then ok "SOFTVERBS_TRACE with %p: a file per process"; else bad "a file per process (${#files[@]} files)"; fi
for f in "${files[@]}"; do
  side=$(basename "$f" | cut -d- -f2)
  if head -n 1 "$f" | grep -q '"verb":"ibv_open_device"' && tail -n 1 "$f" | grep -q '"verb":"ibv_close_device"'; then
    ok "$side: the trace starts with ibv_open_device and ends with ibv_close_device"
  else
    { head -n 2 "$f"; tail -n 2 "$f"; } > "$log/why"; bad "$side: opens first and closes last" "$log/why"
  fi
  summary "$side: summarize counts 500 receives and 5 sends posted, 10 completions, and their latency" "$f" \
    "^pid [0-9]+ softverbs0 QP 0x[0-9a-f]+:$" \
    "posted: 505 WRs \(RECV 500, SEND 5\), 2068480 bytes" \
    "completions: 10 \(0 in error\), 20480 bytes" \
    "send completion latency \(post to completion\): 5 WRs, mean [0-9.]+ us" \
    "receive completion latency \(post to completion\): 5 WRs"
done

if cc -O1 -pthread -o "$log/threads" "$here/threads.c" -libverbs 2> "$log/cc"; then
  one "threads.c runs traced (ibv_wr_*, ibv_start_poll, several threads)" "threads ok" \
    env SOFTVERBS_TRACE="$log/threads.json" "$log/threads"
  "$PY" - "$log/threads.json" > "$log/count" 2>&1 << 'PY'
import collections, json, sys
posted, done = collections.Counter(), collections.Counter()
verbs = collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["kind"] == "verb":
        verbs[r["verb"]] += 1
        for w in r.get("wrs", []):
            if w["opcode"] == "SEND":
                posted[(r["qp"], w["wr_id"])] += 1
    elif r["kind"] == "completion" and r["opcode"] == "SEND" and r["status"] == "SUCCESS":
        done[(r["qp"], r["wr_id"])] += 1
missing = [k for k in posted if done[k] != posted[k]]
print(f"{sum(posted.values())} SENDs posted, {sum(done.values())} completed, "
      f"{verbs['ibv_wr_complete']} ibv_wr_complete, {verbs['ibv_post_send']} ibv_post_send, mismatched {missing[:5]}")
sys.exit(0 if posted and not missing and verbs["ibv_wr_complete"] and verbs["ibv_post_send"] else 1)
PY
  if [ $? = 0 ]; then ok "threads.c: $(cat "$log/count")"; else bad "threads.c: every SEND traced completes once" "$log/count"; fi
else
  bad "threads (compile)" "$log/cc"
fi

# Immediate data is traced as the number on the wire, ntohl(imm_data), in
# the WR and in its receive's completion (cq_ex.c sends 0x1234 and polls
# through ibv_start_poll; until 2026-12-07 a completion's was the
# big-endian word read as a host integer, and WRs had none).
if cc -O1 -o "$log/cq_ex" "$here/cq_ex.c" -libverbs 2> "$log/cc"; then
  one "cq_ex.c runs traced" "cq_ex ok" env SOFTVERBS_TRACE="$log/imm.json" "$log/cq_ex"
  "$PY" - "$log/imm.json" > "$log/imm" 2>&1 << 'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
wrs = [w for r in records if r["kind"] == "verb" for w in r.get("wrs", []) if w["opcode"] == "SEND_WITH_IMM"]
recvs = [r for r in records if r["kind"] == "completion" and r["opcode"] == "RECV"]
print(f"WRs {[w.get('imm') for w in wrs]}, receive completions {[r.get('imm') for r in recvs]}")
sys.exit(0 if [w.get("imm") for w in wrs] == [0x1234] and [r.get("imm") for r in recvs] == [0x1234] else 1)
PY
  if [ $? = 0 ]; then ok "immediate data is traced as ntohl(imm_data), in the WR and its completion"; else bad "immediate data is traced as ntohl(imm_data)" "$log/imm"; fi
else
  bad "cq_ex (compile)" "$log/cc"
fi

traced_pair retry "completion opcode=SEND nth=3 status=RETRY_EXC_ERR" ibv_rc_pingpong -d softverbs0 -g 0 -n 20
summary "an error completion from a fault rule is in the summary, and the rule's firing" "$(ls "$log"/retry-cli-*.json)" \
  "error completions: RETRY_EXC_ERR 1" "fault rule 1 fired x1: completion opcode=SEND nth=3 status=RETRY_EXC_ERR"
traced_pair nomem "post_send nth=2 errno=ENOMEM" ibv_rc_pingpong -d softverbs0 -g 0 -n 20
summary "a failed post is in the summary with its errno" "$(ls "$log"/nomem-cli-*.json)" \
  "verbs: [0-9]+, 1 failed; ibv_post_send ENOMEM x1" "fault rule 1 fired x1: post_send nth=2 errno=ENOMEM"
# A packet rule fires in the transport (the wire path): its firing is
# recorded under the QP the packet was for, though the run succeeds.
SOFTVERBS_SHM=0 traced_pair drop "packet drop nth=2" ibv_rc_pingpong -d softverbs0 -g 0 -n 20
summary "a packet rule's firing is in the summary under its QP" "$(ls "$log"/drop-cli-*.json)" \
  "^pid [0-9]+ softverbs0 QP 0x[0-9a-f]+:$" "fault rule 1 fired x1: packet drop nth=2"
if cc -O1 -o "$log/fault_qp_error" "$here/fault_qp_error.c" -libverbs 2> "$log/cc"; then
  one "fault_qp_error runs traced" "qp_error ok" \
    env SOFTVERBS_TRACE="$log/fatal.json" SOFTVERBS_FAULTS="qp_error after=3" "$log/fault_qp_error" after
  summary "an async event is in the summary under its QP, with the rule that fired" "$log/fatal.json" "events: QP_FATAL 1" \
    "completions: 3 \(3 in error\)" "error completions: WR_FLUSH_ERR 3" "fault rule 1 fired x1: qp_error after=3"
else
  bad "fault_qp_error (compile)" "$log/cc"
fi

SOFTVERBS_TRACE=/no/such/dir/t.json timeout 20 ibv_devinfo -d softverbs0 > "$log/out" 2>&1
if [ $? != 0 ] && grep -q "cannot open softverbs0: SOFTVERBS_TRACE=\"/no/such/dir/t.json\": No such file" "$log/out"; then
  ok "a trace file that cannot be created fails the open, saying why"
else
  bad "a trace file that cannot be created fails the open, saying why" "$log/out"
fi
first=$(ls "$log"/pingpong-cli-*.json | head -n 1)
if env -u LD_PRELOAD "$CLI" trace summarize - < "$first" > "$log/stdin" 2>&1 &&
   env -u LD_PRELOAD "$CLI" trace summarize "$first" | cmp -s - "$log/stdin"; then
  ok "summarize - reads the trace from standard input"
else
  bad "summarize - reads the trace from standard input" "$log/stdin"
fi
printf '%s\n' '{"t":1,"pid":1,"tid":1,"dev":"d","kind":"verb","verb":"v","ret":0}' 'not json' > "$log/bad.json"
if ! env -u LD_PRELOAD "$CLI" trace summarize "$log/bad.json" > "$log/out" 2>&1 && grep -q "line 2:" "$log/out"; then
  ok "summarize refuses a line that is not a record, naming it"
else
  bad "summarize refuses a line that is not a record, naming it" "$log/out"
fi

# Both sides given one file (no %p): the second to open writes the file
# beside it, saying so, and both traces are whole (they overwrote each
# other's records, and summarize refused the spliced lines).
n=$((n + 1)); port=$((PORT_BASE + n))
serve_then_connect $port env SOFTVERBS_TRACE="$log/shared.json" timeout 30 ibv_rc_pingpong -d softverbs0 -g 0 -n 50 -p $port \
  --then env SOFTVERBS_TRACE="$log/shared.json" timeout 30 ibv_rc_pingpong -d softverbs0 -g 0 -n 50 -p $port 127.0.0.1
shared=("$log"/shared*.json)
if [ "$src" = 0 ] && [ "$crc" = 0 ] && [ ${#shared[@]} = 2 ] &&
   cat "$log/srv" "$log/cli" | grep -q "shared.json is written by another process; this one writes .*shared-[0-9]*.json" &&
   env -u LD_PRELOAD "$CLI" trace summarize "${shared[0]}" > "$log/out" 2>&1 &&
   env -u LD_PRELOAD "$CLI" trace summarize "${shared[1]}" >> "$log/out" 2>&1; then
  ok "two processes given one trace file each write a whole trace (the second beside it)"
else
  { echo "exits $src/$crc; files: ${shared[*]}"; cat "$log/srv" "$log/cli" "$log/out" 2> /dev/null; } > "$log/why"
  bad "two processes given one trace file each write a whole trace (the second beside it)" "$log/why"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
