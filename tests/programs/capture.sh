#!/usr/bin/env bash
# Packet capture (SOFTVERBS_PCAP, softverbs daemon --pcap): rdma-core
# programs run over softverbs with SOFTVERBS_PCAP set on both processes
# (a file per process through %p) and a daemon of this test's own started
# with --pcap; then every file is opened with tshark (Debian's, with an
# empty configuration, so no "Decode As") and with scapy:
#   * every packet decodes as InfiniBand (RoCEv2, UDP 4791) over IP/UDP;
#   * no malformed packet and no expert error, with the UDP and IPv4
#     checksum checks turned on;
#   * every ICRC is the one scapy's RoCE layer computes over the captured
#     headers (so the captured IPv4 identification is the real one), and
#     the UDP and IPv4 checksums are right;
#   * each process's capture holds what it sent and what it received, and
#     every packet the daemon captured is in a process's capture;
#   * a packet's IP header shows the traffic class it was sent with
#     (ib_write_bw --tclass=96).
# The programs use the wire path (SOFTVERBS_SHM=0): on one host the
# same-host path sends no packets to capture. IPv4 runs on a loopback address and daemon socket of its own; IPv6 on
# ::1 with the usual daemon. Prints one line per check and
# "N passed, M failed" last. Usage: capture.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
here=$(dirname "$(readlink -f "$0")")
. "$here/lib.sh"
root=$(readlink -f "$here/../..")
PY=${PY:-$root/.venv/bin/python}
CLI=$(dirname "$SO")/softverbs
command -v tshark > /dev/null || cannot_run "capture" "tshark is not installed (make deps installs it)"
"$PY" -c 'import scapy' 2> /dev/null || cannot_run "capture" "no scapy in $PY (make deps installs it)"

ip=127.78.$((RANDOM % 250 + 1)).$((RANDOM % 250 + 1))
export LD_PRELOAD=$SO
# Both processes are on this host, where the same-host path sends no
# packets; a capture of the wire needs the wire.
export SOFTVERBS_SHM=0
export SOFTVERBS_DEVICES="softverbs0=$ip"
export SOFTVERBS_DAEMON_SOCKET="softverbs-capture-$$"
PORT_BASE=$(random_port_base)
pass=0; fail=0; n=0
log=$(mktemp -d)
pcaps=$log/pcap
mkdir -p "$pcaps" "$log/home"
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2> /dev/null
  kill $(jobs -p) 2> /dev/null
  rm -rf "$log"
}
trap cleanup EXIT

BAD_LINES=15

# wait_line FILE TEXT PID: returns once FILE holds TEXT; fails if PID
# exits first or after 10 s.
wait_line() {
  local file=$1 text=$2 pid=$3 deadline=$((SECONDS + 10))
  until grep -qF -- "$text" "$file" 2> /dev/null; do
    kill -0 "$pid" 2> /dev/null || return 1
    [ $SECONDS -ge $deadline ] && return 1
    # The poll interval, not a synchronization: the loop ends on the line.
    sleep 0.02
  done
}

# The daemon of this test, capturing everything it receives.
"$CLI" daemon --socket "$SOFTVERBS_DAEMON_SOCKET" --idle-exit 600 \
  --pcap "$pcaps/daemon.pcap" > "$log/daemon" 2>&1 < /dev/null &
daemon_pid=$!
if wait_line "$log/daemon" "listening on @$SOFTVERBS_DAEMON_SOCKET" "$daemon_pid"; then
  ok "softverbs daemon --pcap starts"
else
  bad "softverbs daemon --pcap starts" "$log/daemon"
fi

# one_fails NAME EXPECT CMD...: CMD must exit non-zero with EXPECT (an
# extended regex) in its output.
one_fails() {
  local name=$1 expect=$2; shift 2
  timeout 30 "$@" > "$log/out" 2>&1
  local rc=$?
  if [ $rc != 0 ] && [ $rc != 124 ] && grep -Eq "$expect" "$log/out"; then ok "$name"; else echo "exit $rc" >> "$log/out"; bad "$name" "$log/out"; fi
}
one_fails "a capture file that cannot be created fails the context, saying why" \
  'cannot open softverbs0: SOFTVERBS_PCAP=.*/no/such/dir/x.pcap.*No such file' \
  env SOFTVERBS_PCAP=/no/such/dir/x.pcap ibv_devinfo -d softverbs0
one_fails "softverbs daemon --pcap refuses when a daemon already runs" \
  "already serves @$SOFTVERBS_DAEMON_SOCKET; --pcap needs a daemon started with it" \
  env -u LD_PRELOAD "$CLI" daemon --socket "$SOFTVERBS_DAEMON_SOCKET" --pcap "$log/unused.pcap"
# With --detach too, the reason is passed on (it was dropped: "the daemon
# did not start (exit status: 1)" alone).
one_fails "softverbs daemon --detach --pcap says why when a daemon already runs" \
  "did not start .*already serves @$SOFTVERBS_DAEMON_SOCKET; --pcap needs a daemon started with it" \
  env -u LD_PRELOAD "$CLI" daemon --detach --socket "$SOFTVERBS_DAEMON_SOCKET" --pcap "$log/unused.pcap"

# pair NAME CMD...: CMD -p PORT as the server, with SOFTVERBS_PCAP set to
# pcap/NAME.server-%p.pcap, and, once it listens, CMD -p PORT 127.0.0.1
# (the programs' TCP exchange) as the client (NAME.client-%p.pcap); both
# must exit 0.
pair() {
  local name=$1; shift
  n=$((n + 1)); local port=$((PORT_BASE + n))
  SOFTVERBS_PCAP="$pcaps/$name.server-%p.pcap" timeout 60 "$@" -p $port > "$log/srv" 2>&1 &
  local srv=$! crc
  if wait_listen $port "" $srv 2> "$log/cli"; then
    SOFTVERBS_PCAP="$pcaps/$name.client-%p.pcap" timeout 60 "$@" -p $port 127.0.0.1 > "$log/cli" 2>&1
    crc=$?
  else
    crc="not started"; kill $srv 2> /dev/null
  fi
  wait $srv; local src=$?
  if [ "$crc" = 0 ] && [ $src = 0 ]; then
    ok "$name runs with SOFTVERBS_PCAP set"
  else
    { echo "client exit $crc, server exit $src (124: timed out)"; echo "--- client, last lines"; tail -n 6 "$log/cli"
      echo "--- server, last lines"; tail -n 6 "$log/srv"; } > "$log/both"
    bad "$name runs with SOFTVERBS_PCAP set" "$log/both"
  fi
}

pair ibv_rc_pingpong ibv_rc_pingpong -d softverbs0 -g 0 -s 4096 -n 20
pair ibv_rc_pingpong-16KiB ibv_rc_pingpong -d softverbs0 -g 1 -s 16384 -n 10
pair ibv_ud_pingpong ibv_ud_pingpong -d softverbs0 -g 0 -s 1024 -n 20
pair ib_write_bw ib_write_bw -d softverbs0 -x 0 -s 8192 -n 50
pair ib_read_bw ib_read_bw -d softverbs0 -x 0 -s 8192 -n 50
pair ib_atomic_bw ib_atomic_bw -d softverbs0 -x 0 -n 50
pair ib_write_bw-tclass ib_write_bw -d softverbs0 -x 0 -s 8192 -n 50 --tclass=96
pair ibv_rc_pingpong-IPv6 env -u SOFTVERBS_DAEMON_SOCKET SOFTVERBS_DEVICES=softverbs0=::1 \
  ibv_rc_pingpong -d softverbs0 -g 1 -s 4096 -n 20

# rping over rdma_cm: the CM's MADs reach a process through the daemon,
# past its contexts, and are captured too (until 2026-12-07 a process's
# file held only the MADs it sent), each packet before it leaves, so no
# answer comes first in the file (a server's file held the client's
# data before its own REP, 1 run in 4).
rping_pair() {
  n=$((n + 1)); local port=$((PORT_BASE + n)) crc src
  SOFTVERBS_CM_TRACE=1 SOFTVERBS_PCAP="$pcaps/rping.server-%p.pcap" \
    timeout 60 rping -s -a "$ip" -p $port -C 10 -v > "$log/srv" 2>&1 &
  local srv=$!
  if wait_line "$log/srv" "command 7:" $srv; then # its LISTEN
    SOFTVERBS_PCAP="$pcaps/rping.client-%p.pcap" timeout 60 rping -c -a "$ip" -p $port -C 10 -v > "$log/cli" 2>&1
    crc=$(rping_exit $? "$log/cli")
  else
    crc="not started"; kill $srv 2> /dev/null
  fi
  wait $srv; src=$(rping_exit $? "$log/srv")
  if [ "$crc" = 0 ] && [ "$src" = 0 ]; then
    ok "rping runs with SOFTVERBS_PCAP set"
  else
    { echo "client exit $crc, server exit $src"; tail -n 6 "$log/cli"; grep -v "^softverbs rdma_cm" "$log/srv" | tail -n 6; } > "$log/both"
    bad "rping runs with SOFTVERBS_PCAP set" "$log/both"
  fi
}
rping_pair

# cm_order FILE: the frames of FILE, one per line: "cm ATTRIBUTE" for a
# CM MAD (0x0010 REQ, 0x0013 REP, 0x0014 RTU), "rc" for an RC packet.
cm_order() {
  tshark -n -r "$1" -T fields -e infiniband.mad.attributeid -e infiniband.bth.opcode 2> /dev/null \
    | awk -F'\t' '$1 != "" { print "cm " $1; next } $2 < 32 { print "rc" }'
}
rping_cm_checks() {
  local server client
  server=$(ls "$pcaps"/rping.server-*.pcap 2> /dev/null | head -n 1)
  client=$(ls "$pcaps"/rping.client-*.pcap 2> /dev/null | head -n 1)
  if [ -z "$server" ] || [ -z "$client" ]; then
    bad "rping: a capture per side"; return
  fi
  cm_order "$server" > "$log/server.order"; cm_order "$client" > "$log/client.order"
  local want_server="cm 0x0010 cm 0x0013 cm 0x0014" want_client="cm 0x0010 cm 0x0013 cm 0x0014"
  local got_server got_client
  got_server=$(grep "^cm 0x001[034]" "$log/server.order" | xargs)
  got_client=$(grep "^cm 0x001[034]" "$log/client.order" | xargs)
  if [ "$got_server" = "$want_server" ] && [ "$got_client" = "$want_client" ]; then
    ok "rping: each side's capture holds the REQ, REP and RTU it sent and received, in order"
  else
    bad "rping: each side's capture holds the REQ, REP and RTU (server: $got_server; client: $got_client)"
  fi
  # The server's REP comes before any RC packet in its file: the client
  # sends none before it has the REP.
  if [ "$(grep -m1 -E '^(rc|cm 0x0013)$' "$log/server.order")" = "cm 0x0013" ]; then
    ok "rping: the server's REP is captured before any RC packet"
  else
    { echo "server's frames:"; head -n 8 "$log/server.order"; } > "$log/why"
    bad "rping: the server's REP is captured before any RC packet" "$log/why"
  fi
}
rping_cm_checks

# Another UDP port (SOFTVERBS_UDP_PORT, for a namespace where the kernel's
# rxe holds 4791), with a daemon of its own started on demand: every
# packet goes to that port. Captured apart (they are not RoCEv2 to tshark).
udp_port=$((4800 + RANDOM % 100))
mkdir -p "$log/port"
main_pcaps=$pcaps pcaps=$log/port
pair ibv_rc_pingpong-udp-port env SOFTVERBS_UDP_PORT=$udp_port SOFTVERBS_DAEMON_SOCKET="softverbs-port-$$" \
  ibv_rc_pingpong -d softverbs0 -g 0 -s 4096 -n 20
pcaps=$main_pcaps
ports=$(for f in "$log"/port/*.pcap; do tshark -n -r "$f" -T fields -e udp.dstport 2> /dev/null; done | sort -u | xargs)
if [ "$ports" = "$udp_port" ]; then
  ok "SOFTVERBS_UDP_PORT=$udp_port: every packet went to UDP $udp_port"
else
  bad "SOFTVERBS_UDP_PORT=$udp_port: every packet went to UDP $udp_port (captured destination ports: ${ports:-none})"
fi

# quiet FILE: tshark's messages without its warning about running as root.
quiet() { grep -v '^Running as user' "$1"; }

# check_file FILE: the tshark and scapy checks of one capture. tshark
# runs once per file (it takes a second to start), with an empty
# configuration directory (no "Decode As", no preference changed but the
# UDP and IPv4 checksum checks asked for here), writing per packet: its
# protocols, UDP source port, expert severities and messages.
check_file() {
  local f=$1 name
  name=$(basename "$f" .pcap)
  name=${name%-[0-9]*}
  env HOME="$log/home" XDG_CONFIG_HOME="$log/home" tshark -n -r "$f" \
    -o udp.check_checksum:TRUE -o ip.check_checksum:TRUE -T fields -E separator=/t \
    -e frame.number -e frame.protocols -e udp.srcport -e _ws.expert.severity -e _ws.expert.message \
    > "$log/fields" 2> "$log/tshark"
  local rc=$? total roce
  total=$(wc -l < "$log/fields")
  roce=$(awk -F'\t' '$2 ~ /^raw:ipv?6?:udp:infiniband(:|$)/' "$log/fields" | wc -l)
  if [ $rc = 0 ] && [ "$total" -gt 0 ] && [ "$total" = "$roce" ]; then
    ok "$name: all $total packets decode as InfiniBand over UDP 4791 (tshark)"
  else
    { echo "tshark exit $rc; $roce of $total packets decode as InfiniBand"; grep -v infiniband "$log/fields" | head; quiet "$log/tshark"; } > "$log/why"
    bad "$name: every packet decodes as InfiniBand over UDP 4791 (tshark)" "$log/why"
  fi
  # Severities: 0x400000 note, 0x600000 warning, 0x800000 error (a
  # malformed packet is an error).
  awk -F'\t' '{ n = split($4, s, ","); for (i = 1; i <= n; i++) if (s[i] + 0 >= 6291456) { print; next } }' \
    "$log/fields" > "$log/experts"
  if [ $rc = 0 ] && [ ! -s "$log/experts" ]; then
    ok "$name: no malformed packet, no expert warning or error, UDP and IPv4 checksums right (tshark)"
  else
    quiet "$log/tshark" >> "$log/experts"
    bad "$name: no malformed packet, no expert warning or error, UDP and IPv4 checksums right (tshark)" "$log/experts"
  fi
  if "$PY" "$here/capture_check.py" icrc "$f" > "$log/scapy" 2>&1; then
    ok "$name: $(cat "$log/scapy")"
  else
    bad "$name: ICRCs and checksums (scapy)" "$log/scapy"
  fi
  if [[ "$name" != daemon ]]; then
    local ports
    ports=$(cut -f3 "$log/fields" | sort -u | wc -l)
    if [ "$ports" -ge 2 ]; then
      ok "$name: holds packets sent and received (from $ports UDP source ports)"
    else
      bad "$name: holds packets sent and received (from $ports UDP source ports, want 2)"
    fi
  fi
}

# The traffic class a packet left or came with is in the IP header
# written (until 2026-12-07 every capture showed 0): both sides of
# --tclass=96 send their WRITEs and ACKs with it, and the daemon took
# them in with it (and every daemon packet must match its process's
# copy, class included: the "covered" check below).
tclasses=$(for f in "$pcaps"/ib_write_bw-tclass.*.pcap; do tshark -n -r "$f" -T fields -e ip.dsfield 2> /dev/null; done | sort | uniq -c | xargs)
daemon_classes=$(tshark -n -r "$pcaps/daemon.pcap" -Y 'ip.dsfield == 0x60' 2> /dev/null | wc -l)
if [[ "$tclasses" =~ ^[0-9]+\ 0x60$ ]] && [ "$daemon_classes" -gt 0 ]; then
  ok "ib_write_bw --tclass=96: every captured packet shows TOS 0x60 ($daemon_classes in the daemon's capture)"
else
  bad "ib_write_bw --tclass=96: every captured packet shows TOS 0x60 (count and TOS: ${tclasses:-none}; daemon: $daemon_classes)"
fi

shopt -s nullglob
files=("$pcaps"/*.pcap)
[ ${#files[@]} -ge 19 ] || bad "a capture per process ($((${#files[@]} - 1)) process files, want 18)"
for f in "${files[@]}"; do
  check_file "$f"
done
process_files=()
for f in "${files[@]}"; do [[ "$f" == */daemon.pcap ]] || process_files+=("$f"); done
if "$PY" "$here/capture_check.py" covered "$pcaps/daemon.pcap" "${process_files[@]}" > "$log/scapy" 2>&1; then
  ok "daemon: $(cat "$log/scapy")"
else
  bad "daemon: every packet it captured is in a process's capture" "$log/scapy"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
