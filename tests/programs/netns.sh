#!/usr/bin/env bash
# softverbs between hosts: two network namespaces joined by a veth pair,
# each with its own address and its own softverbs device configuration,
# run ibv_rc_pingpong and ib_write_bw across the link, over GID index 0
# (link-local) and 1 (the address) (the GRH traffic class on the veth, as
# tshark captures it, too), with IPv4 and with IPv6 device
# addresses, UD multicast, and rdma_cm (rping, udaddy, ucmatose,
# rdma_server/rdma_client, rdma_xserver/rdma_xclient, cmtime,
# ib_write_bw -z, rstream and riostream, iperf through rdma-core's
# librspreload.so, qperf -cm1, fi_pingpong (libfabric's verbs and
# verbs;ofi_rxm), mckey, an active side that gives up its REQ or dies
# with it, and a passive side that dies after its REP: the IB CM between
# the two namespaces' daemons; rping to an address no host on the link
# has, which fails its address resolution; and rping from a host of two
# devices on two links, through the route's source), and a port that
# follows its interface down and up (ibv_asyncwatch). Needs root (to
# create namespaces); where that is impossible it fails under CI=true and
# otherwise skips, saying so loudly (lib.sh's cannot_run).
# Prints "N passed, M failed" last. Usage: netns.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
tag="sv$$"
a="${tag}a"; b="${tag}b"; m="${tag}m"; n_lo="${tag}l"
ip_a=10.231.0.1; ip_b=10.231.0.2
ip6_a=fd00:e7::1; ip6_b=fd00:e7::2
log=$(mktemp -d)
. "$(dirname "$(readlink -f "$0")")/lib.sh"

cleanup() {
  kill $(jobs -p) 2>/dev/null
  remove_two_hosts "$a" "$b" "$m" "$n_lo"
  rm -rf "$log"
}
trap cleanup EXIT

two_hosts "softverbs between network namespaces (tests/programs/netns.sh)" \
  "$a" "$b" "$tag" "$ip_a" "$ip_b"
# nodad: usable at once (a tentative address cannot be bound).
ip -n "$a" addr add "$ip6_a/64" dev "${tag}x" nodad
ip -n "$b" addr add "$ip6_b/64" dev "${tag}y" nodad

pass=0; fail=0; n=0

# pair_case NAME CRC SRC [EXPECT]: a case of a client and a server passes
# when both exited 0 and (given EXPECT) the client printed a line
# matching it; a failure shows the end of both sides' output.
pair_case() {
  local name=$1 crc=$2 src=$3 expect=${4:-}
  if [ "$crc" = 0 ] && [ "$src" = 0 ] && { [ -z "$expect" ] || grep -Eq "$expect" "$log/cli"; }; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name (client $crc, server $src)"
    sed 's/^/    client: /' "$log/cli" | tail -n 8; sed 's/^/    server: /' "$log/srv" | tail -n 8
  fi
}
# across NAME EXPECT CMD...: server in A (its device on $dev_a), then,
# once it listens, client in B (its device on $dev_b) connecting to ip_a
# (the pingpongs' own TCP exchange), on a TCP port of their own (the
# namespaces are ours, so any port is free).
dev_a=$ip_a; dev_b=$ip_b
across() {
  local name=$1 expect=$2; shift 2
  n=$((n + 1)); local port=$((18515 + n))
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev_a" \
    timeout 60 "$@" -p "$port" > "$log/srv" 2>&1 &
  local srv=$!
  local crc
  if wait_listen "$port" "$a" $srv 2> "$log/cli"; then
    ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev_b" \
      timeout 60 "$@" -p "$port" "$ip_a" > "$log/cli" 2>&1
    crc=$?
  else
    crc="not started"; kill $srv 2>/dev/null
  fi
  wait $srv; local src=$?
  pair_case "$name" "$crc" "$src" "$expect"
}

across "ibv_rc_pingpong between namespaces" "[0-9]+ iters in" ibv_rc_pingpong -d softverbs0 -g 0
across "ibv_rc_pingpong 1 MiB between namespaces" "[0-9]+ iters in" ibv_rc_pingpong -d softverbs0 -g 0 -s 1048576 -n 20
across "ib_write_bw between namespaces" "^ +[0-9]+ +[0-9]+ +[0-9.]+" ib_write_bw -d softverbs0 -x 0
across "ibv_rc_pingpong -g 1 between namespaces" "[0-9]+ iters in" ibv_rc_pingpong -d softverbs0 -g 1
across "ibv_ud_pingpong -g 1 between namespaces" "[0-9]+ iters in" ibv_ud_pingpong -d softverbs0 -g 1
across "ib_write_bw -x 1 between namespaces" "^ +[0-9]+ +[0-9]+ +[0-9.]+" ib_write_bw -d softverbs0 -x 1

# The GRH traffic class leaves as the IP header's TOS (IPv4) or traffic
# class (IPv6), as rxe and the NICs send it: ib_write_bw --tclass=96 (both
# ends) across the link, the veth captured in B; every RoCE packet
# either way carries 96 (0x60). tclass_across NAME GID_INDEX FIELD, FIELD
# the tshark field of the class.
tclass_across() {
  local name=$1 gid=$2 field=$3 pcap="$log/tclass.pcap" classes
  if ! command -v tshark > /dev/null; then
    fail=$((fail + 1)); echo "FAIL $name: tshark is not installed (make deps installs it)"
    return
  fi
  rm -f "$pcap"
  ip netns exec "$b" tshark -i "${tag}y" -f "udp port 4791" -w "$pcap" > "$log/tshark" 2>&1 &
  local capture=$!
  if ! wait_output "$log/tshark" "Capturing on" $capture 2>> "$log/tshark"; then
    bad "$name" "$log/tshark"; kill $capture 2>/dev/null; return
  fi
  across "$name: the transfer" "^ +[0-9]+ +[0-9]+ +[0-9.]+" \
    ib_write_bw -d softverbs0 -x "$gid" --tclass=96 -n 200
  kill -INT $capture; wait $capture
  classes=$(tshark -n -r "$pcap" -T fields -e "$field" 2> "$log/tshark.read" | sort | uniq -c)
  echo "$classes" > "$log/classes"
  if [ "$(echo "$classes" | wc -l)" = 1 ] && echo "$classes" | grep -Eq "^ *[0-9]+ 0x0*60$"; then
    ok "$name: every packet carries it ($(echo $classes))"
  else
    bad "$name: every packet carries it" "$log/classes"
  fi
}
tclass_across "traffic class 96 between namespaces, IPv4" 1 ip.dsfield

dev_a=$ip6_a; dev_b=$ip6_b
tclass_across "traffic class 96 between namespaces, IPv6" 1 ipv6.tclass
for g in 0 1; do
  across "ibv_rc_pingpong -g $g between namespaces, IPv6 devices" "[0-9]+ iters in" \
    ibv_rc_pingpong -d softverbs0 -g $g
done
across "ib_write_bw -x 0 between namespaces, IPv6 devices" "^ +[0-9]+ +[0-9]+ +[0-9.]+" \
  ib_write_bw -d softverbs0 -x 0

# UD multicast between the hosts: the receiver in A attaches to GROUP and
# says "ready"; the sender in B sends to the group across the veth.
mcast_across() {
  local name=$1 group=$2
  # Emptied here, not only by the receiver's redirection, which happens in
  # the background: the wait below found the IPv6 case's "ready" in the
  # IPv4 case and sent before the receiver joined (1 run in 30 under load).
  : > "$log/mrecv"
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev_a" \
    timeout 60 "$log/mcast" recv "$group" > "$log/mrecv" 2>&1 &
  local r=$!
  local deadline=$((SECONDS + 20))
  until grep -q ready "$log/mrecv" || ! kill -0 $r 2>/dev/null || [ $SECONDS -ge $deadline ]; do
    sleep 0.02 # poll interval; the loop ends on the condition
  done
  ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev_b" \
    timeout 60 "$log/mcast" send "$group" > "$log/msend" 2>&1
  wait $r
  if grep -q "mcast recv ok" "$log/mrecv" && grep -q "mcast send ok" "$log/msend"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name"
    sed 's/^/    receiver: /' "$log/mrecv" | tail -n 8; sed 's/^/    sender: /' "$log/msend" | tail -n 8
  fi
}
# A group's datagrams reach only the devices on the interface they came in
# by, as a NIC's port: in A, a device on a second interface (a veth pair
# within A), attached to the group beside one on the link to B, receives
# none of what B sends (an IPv6 membership does not say on which
# interface; it received them all before its socket was bound to its own).
mcast_by_interface() {
  local name=$1 group=$2 other=fd00:5f::1
  ip -n "$a" link add "${tag}p" type veth peer name "${tag}q"
  ip -n "$a" addr add "$other/64" dev "${tag}p" nodad
  ip -n "$a" link set "${tag}p" up; ip -n "$a" link set "${tag}q" up
  : > "$log/mrecv"; : > "$log/mquiet"
  rm -f "$log/go"; mkfifo "$log/go"
  exec 9<> "$log/go" # a writer from the start: the reader's open does not block
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$other" \
    timeout 60 "$log/mcast" quiet "$group" < "$log/go" > "$log/mquiet" 2>&1 &
  local q=$!
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip6_a" \
    timeout 60 "$log/mcast" recv "$group" > "$log/mrecv" 2>&1 &
  local r=$!
  local deadline=$((SECONDS + 20))
  until { grep -q ready "$log/mrecv" && grep -q ready "$log/mquiet"; } \
      || ! kill -0 $r 2>/dev/null || ! kill -0 $q 2>/dev/null || [ $SECONDS -ge $deadline ]; do
    sleep 0.02 # poll interval; the loop ends on the condition
  done
  ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip6_b" \
    timeout 60 "$log/mcast" send "$group" > "$log/msend" 2>&1
  wait $r
  echo go >&9 # the datagrams reached the device on their interface: now look
  wait $q
  exec 9>&-
  if grep -q "mcast recv ok" "$log/mrecv" && grep -q "mcast quiet ok" "$log/mquiet" \
      && grep -q "mcast send ok" "$log/msend"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name"
    sed 's/^/    receiver: /' "$log/mrecv" | tail -n 8; sed 's/^/    other interface: /' "$log/mquiet" | tail -n 8
    sed 's/^/    sender: /' "$log/msend" | tail -n 8
  fi
}
if cc -O1 -o "$log/mcast" "$(dirname "$(readlink -f "$0")")/mcast.c" -libverbs 2> "$log/cc"; then
  mcast_across "UD multicast between namespaces, IPv6 group" ff0e::5:1
  # Of link-local scope: its socket is bound on the device's interface.
  mcast_across "UD multicast between namespaces, link-local IPv6 group" ff02::5:2
  dev_a=$ip_a; dev_b=$ip_b
  mcast_across "UD multicast between namespaces, IPv4 group" 239.31.0.1
  mcast_by_interface "UD multicast reaches only the devices on the interface it came in by" ff0e::5:3
else
  fail=$((fail + 1)); echo "FAIL UD multicast (compile)"; cat "$log/cc"
fi

# rdma_cm between the hosts: the IB CM's MADs cross the veth to the other
# namespace's daemon. An rdma_cm listener has no socket to wait for: the
# server in A traces its rdma_cm commands (SOFTVERBS_CM_TRACE) and the
# client in B starts once its LISTEN succeeded. cm_across NAME PROGRAM
# SERVER_ARGS -- CLIENT_ARGS... (rdma_server's and rdma_xserver's clients
# are rdma_client and rdma_xclient; cmtime's server serves until stopped,
# and its client exits 0 even after an error, which it prints).
cm_across() {
  local name=$1 prog=$2 c_prog=$2; shift 2
  case "$prog" in rdma_server|rdma_xserver) c_prog=${prog/server/client} ;; esac
  local s_args=() c_args=()
  while [ "$1" != -- ]; do s_args+=("$1"); shift; done
  shift; c_args=("$@")
  local crc="not started" preload=$SO
  # iperf is an ordinary TCP program: rdma-core's librspreload.so, first,
  # makes its sockets rsockets (rdma_cm.sh, "rspreload").
  [ "$prog" = iperf ] && preload="$(rspreload_path) $SO"
  # Emptied here, not only by the server's redirection, which happens in
  # the background: the wait below must not find the last case's line.
  : > "$log/srv.err"
  ip netns exec "$a" env LD_PRELOAD="$preload" SOFTVERBS_DEVICES="softverbs0=$dev_a" SOFTVERBS_CM_TRACE=1 \
    timeout 60 "$prog" "${s_args[@]}" > "$log/srv" 2> "$log/srv.err" &
  local srv=$!
  if wait_output "$log/srv.err" "rdma_cm: channel [0-9]+ command 7: Ok" $srv 2> "$log/cli"; then
    ip netns exec "$b" env LD_PRELOAD="$preload" SOFTVERBS_DEVICES="softverbs0=$dev_b" \
      timeout 30 "$c_prog" "${c_args[@]}" > "$log/cli" 2>&1
    crc=$?
  fi
  [ "$crc" != 0 ] && kill $srv 2>/dev/null
  local src
  if { [ "$prog" = cmtime ] || [ "$prog" = iperf ]; } && [ "$crc" = 0 ]; then
    if kill $srv 2>/dev/null; then wait $srv; src=0; else wait $srv; src=$?; fi
    grep -Eiq "event:|error|fail" "$log/cli" && crc=1
    # Each of iperf's 2 streams of 32 MiB, reported by the client.
    [ "$prog" = iperf ] && [ "$(iperf_streams "$log/cli" "32.0 MBytes")" != 2 ] && crc=1
  else
    wait $srv; src=$?
  fi
  if [ "$prog" = rping ]; then
    crc=$(rping_exit $crc "$log/cli"); src=$(rping_exit $src "$log/srv")
  fi
  grep -v "^softverbs rdma_cm: " "$log/srv.err" >> "$log/srv"
  pair_case "$name" "$crc" "$src"
}
dev_a=$ip_a; dev_b=$ip_b
# With B's neighbour table empty, the client's address resolution waits
# for the ARP answer (rdma_cm's own first packet to A starts it).
ip -n "$b" neigh flush all
cm_across "rping over rdma_cm between namespaces" rping -s -a "$ip_a" -p 7471 -C 50 -V \
  -- -c -a "$ip_a" -p 7471 -C 50 -V
# udaddy's port is fixed (7174).
cm_across "udaddy (UD over rdma_cm) between namespaces" udaddy -b "$ip_a" -- -s "$ip_a"
cm_across "ucmatose between namespaces" ucmatose -b "$ip_a" -p 7475 -c 2 -C 10 -S 1000 \
  -- -s "$ip_a" -p 7475 -c 2 -C 10 -S 1000
cm_across "rdma_server / rdma_client between namespaces" rdma_server -s "$ip_a" -p 7476 \
  -- -s "$ip_a" -p 7476
cm_across "rdma_xserver / rdma_xclient between namespaces" rdma_xserver -p 7479 -c r \
  -- -s "$ip_a" -p 7479 -c r
cm_across "cmtime -c 10 between namespaces" cmtime -b "$ip_a" -p 7480 -- -s "$ip_a" -p 7480 -c 10
# -z (the control channel over rdma_cm): -R has a race of perftest's own
# (rdma_cm.sh, "perftest").
cm_across "ib_write_bw -z between namespaces" ib_write_bw -z -d softverbs0 -x 1 -p 7481 -s 65536 -n 100 \
  -- -z -d softverbs0 -x 1 -p 7481 -s 65536 -n 100 "$ip_a"
cm_across "rstream (rsockets) between namespaces" rstream -b "$ip_a" -p 7477 -S 4096 -C 100 -T v \
  -- -s "$ip_a" -p 7477 -S 4096 -C 100 -T v
cm_across "riostream (rsockets) between namespaces" riostream -b "$ip_a" -p 7478 -S 4096 -C 100 -T v \
  -- -s "$ip_a" -p 7478 -S 4096 -C 100 -T v
cm_across "iperf -P 2 through librspreload (rsockets) between namespaces" \
  iperf -s -B "$ip_a" -p 7482 -f m -- -c "$ip_a" -p 7482 -n 32M -P 2 -f m

# Programs with a TCP control port of their own that connect their
# endpoints through rdma_cm: the server in A, once it listens on PORT, the
# client in B. tcp_across NAME EXPECT PORT SERVER_ARGS... -- CLIENT_ARGS...
# (qperf's server serves until stopped: it must still run after its
# client, and is then stopped.)
tcp_across() {
  local name=$1 expect=$2 port=$3; shift 3
  local s_args=() c_args=() crc src
  while [ "$1" != -- ]; do s_args+=("$1"); shift; done
  shift; c_args=("$@")
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev_a" \
    timeout 60 "${s_args[@]}" > "$log/srv" 2>&1 &
  local srv=$!
  if wait_listen "$port" "$a" $srv 2> "$log/cli"; then
    local attempt
    for attempt in 1 2 3; do
      ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev_b" \
        timeout 60 "${c_args[@]}" > "$log/cli" 2>&1
      crc=$?
      # qperf's server listens for each test's connection only after
      # telling its client to go on, so a REQ may come first and be
      # rejected (rdma_cm.sh, "qperf"): that alone runs the client again.
      [ $crc -ne 0 ] && grep -q "Event rejected" "$log/cli" || break
    done
  else
    crc="not started"
  fi
  if [ "${s_args[0]}" = qperf ] && kill $srv 2>/dev/null; then
    wait $srv; src=0
  else
    [ "$crc" = 0 ] || kill $srv 2>/dev/null
    wait $srv; src=$?
  fi
  pair_case "$name" "$crc" "$src" "$expect"
}
if command -v qperf > /dev/null; then
  tcp_across "qperf -cm1 rc_bw rc_lat between namespaces" "latency += +[0-9.]+ [mun]?s" 7483 \
    qperf -lp 7483 -- qperf -lp 7483 -cm1 -t 1 "$ip_a" rc_bw rc_lat
else
  fail=$((fail + 1)); echo "FAIL qperf between namespaces: qperf is not installed"
fi
if command -v fi_pingpong > /dev/null; then
  # Data checked; the last size (1 MiB) completed all its iterations.
  for prov in verbs "verbs;ofi_rxm"; do
    ep=msg; [ "$prov" = verbs ] || ep=rdm
    tcp_across "fi_pingpong -p \"$prov\" -e $ep -c between namespaces" "^1m +50 +=50 " 7484 \
      fi_pingpong -p "$prov" -e $ep -c -I 50 -B 7484 -- fi_pingpong -p "$prov" -e $ep -c -I 50 -P 7484 "$ip_a"
  done
else
  fail=$((fail + 1)); echo "FAIL fi_pingpong between namespaces: fi_pingpong is not installed"
fi

# mckey: a multicast group joined through rdma_cm in each namespace; the
# sender in B sends 10 datagrams to it, the receiver in A takes them all.
# mckey_across NAME GROUP ADDR_A ADDR_B
mckey_across() {
  local name=$1 group=$2 addr_a=$3 addr_b=$4 srv crc src
  : > "$log/srv"
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$addr_a" \
    timeout 60 stdbuf -oL mckey -m "$group" -b "$addr_a" -C 10 > "$log/srv" 2>&1 &
  srv=$!
  crc="not started"
  if wait_output "$log/srv" "mckey: joined" $srv 2> "$log/cli"; then
    ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$addr_b" \
      timeout 60 mckey -m "$group" -b "$addr_b" -s -C 10 > "$log/cli" 2>&1
    crc=$?
  fi
  [ "$crc" = 0 ] || kill $srv 2>/dev/null
  wait $srv; src=$?
  # The receiver's success is that it took every datagram.
  [ "$src" = 0 ] && ! grep -q "data transfers complete" "$log/srv" && src="0 without every datagram"
  pair_case "$name" "$crc" "$src"
}
if command -v mckey > /dev/null; then
  mckey_across "mckey -C 10 (multicast through rdma_cm) between namespaces" 239.31.0.7 "$ip_a" "$ip_b"
  # A link-local group: joined through rdma_cm, its address resolution
  # once looked for a route, which an unscoped link-local group has not.
  mckey_across "mckey -C 10 with a link-local IPv6 group (ff02::31), IPv6 devices" \
    ff02::31 "$ip6_a" "$ip6_b"
else
  fail=$((fail + 1)); echo "FAIL mckey between namespaces: mckey is not installed"
fi

# An active side in B that gives up its REQ before any answer, or dies
# with it unanswered: its REJ "timeout" (sent for a dead one by B's
# daemon, which alone outlives it) crosses to A and ends the server's
# request, whose ACCEPT then fails or is REJECTED. Or (MODE "outlives") a
# passive side in A that dies after its REP, before the RTU (the client
# in B takes the REP only once the server is gone): A's daemon, told of
# the REP, sends the REJ of REP_SENT in its name across to B, ending the
# client's connection. cm_give_up.c; whoever goes away writes GONE's
# byte once it has, for the other, whose output says the verdict.
give_up_across() {
  local name=$1 mode=$2 port=$3 fifos=$log/give_up
  rm -rf "$fifos"; mkdir "$fifos" && mkfifo "$fifos/ready" "$fifos/req" "$fifos/gone"
  local s_args=("$ip_a" "$port" "$fifos/ready" "$fifos/req" "$fifos/gone")
  local c_args=("$ip_a" "$port" "$fifos/ready" "$fifos/req" "$mode")
  local first=cli last=srv crc src srv cli
  if [ "$mode" = outlives ]; then
    s_args+=(dies); c_args+=("$fifos/gone"); first=srv; last=cli
  fi
  ip netns exec "$a" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip_a" \
    timeout 30 "$log/cm_give_up" server "${s_args[@]}" > "$log/srv" 2>&1 &
  srv=$!
  ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip_b" \
    timeout 30 "$log/cm_give_up" client "${c_args[@]}" > "$log/cli" 2>&1 &
  cli=$!
  if [ $first = cli ]; then wait $cli; crc=$?; else wait $srv; src=$?; fi
  timeout 30 sh -c 'printf x > "$1"' _ "$fifos/gone"
  if [ $last = srv ]; then wait $srv; src=$?; else wait $cli; crc=$?; fi
  if [ "$src" = 0 ] && [ "$crc" = 0 ] && ! grep -q "^give up ok" "$log/$last"; then
    if [ $last = srv ]; then src="0 without its result"; else crc="0 without its result"; fi
  fi
  pair_case "$name" "$crc" "$src"
}
if cc -O1 -o "$log/cm_give_up" "$(dirname "$(readlink -f "$0")")/cm_give_up.c" -lrdmacm -libverbs 2> "$log/cc"; then
  give_up_across "an active side that gives up its REQ, between namespaces" gives-up 7486
  give_up_across "an active side dead with its REQ unanswered, between namespaces" dies 7487
  give_up_across "a passive side dead after its REP, before the RTU, between namespaces" outlives 7488
else
  fail=$((fail + 1)); echo "FAIL an active side that gives up its REQ (compile)"; cat "$log/cc"
fi

dev_a=$ip6_a; dev_b=$ip6_b
ip -n "$b" neigh flush all
cm_across "rping over rdma_cm between namespaces, IPv6 devices" \
  rping -s -a "$ip6_a" -p 7473 -C 50 -V -- -c -a "$ip6_a" -p 7473 -C 50 -V

# An address on the link that no host has: as with the kernel's address
# resolution, the ARP request (neighbour solicitation) goes unanswered and
# rdma_resolve_addr ends in ADDR_ERROR, ETIMEDOUT, after rping's 2 s (it
# resolved at once, and its REQ was sent again for some 100 s before
# UNREACHABLE). no_host NAME DEVICE DESTINATION
no_host() {
  local name=$1 dev=$2 dst=$3
  ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$dev" \
    timeout 30 rping -c -a "$dst" -p 7477 -C 1 > "$log/cli" 2>&1
  local crc=$?
  if [ $crc != 0 ] && [ $crc != 124 ] && grep -q "RDMA_CM_EVENT_ADDR_ERROR, error -110" "$log/cli"; then
    ok "$name"
  else
    echo "exit $crc" >> "$log/cli"; bad "$name" "$log/cli"
  fi
}
no_host "rdma_cm to an address no host on the link has: ADDR_ERROR (ETIMEDOUT)" "$ip_b" 10.231.0.77
no_host "rdma_cm to an IPv6 address no host on the link has: ADDR_ERROR (ETIMEDOUT)" "$ip6_b" fd00:e7::77

# The port follows its interface, as rxe's follows its netdev: B's link
# set down (PORT_ERR; ibv_devinfo reads PORT_DOWN, even from a context
# opened while it is down), then up (PORT_ACTIVE), then A's set down, so
# that B's loses its carrier (PORT_ERR), and up again (PORT_ACTIVE). It
# stayed ACTIVE, with no event. The physical state is Disabled while the
# link is down and Polling while it is up without a carrier, as rxe's
# (it was Disabled for both; found by a helper).
# wait_count N REGEX: waits until ibv_asyncwatch printed N lines matching.
wait_count() {
  local n=$1 regex=$2 deadline=$((SECONDS + 20))
  until [ "$(grep -Ec "$regex" "$log/watch")" -ge "$n" ]; do
    kill -0 "$watch" 2>/dev/null && [ $SECONDS -lt $deadline ] || return 1
    # The poll interval, not a synchronization: the loop ends on the condition.
    sleep 0.02
  done
}
port_state() {
  ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip_b" ibv_devinfo |
    grep -Eo "PORT_[A-Z]+"
}
phys_state() {
  ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip_b" ibv_devinfo -v |
    grep -Eo "phys_state:[[:space:]]+[A-Z_]+" | awk '{print $2}'
}
ip netns exec "$b" env LD_PRELOAD="$SO" SOFTVERBS_DEVICES="softverbs0=$ip_b" \
  timeout 60 stdbuf -oL ibv_asyncwatch > "$log/watch" 2>&1 &
watch=$!
err="IBV_EVENT_PORT_ERR \(10\), port 1"; active="IBV_EVENT_PORT_ACTIVE \(9\), port 1"
if wait_output "$log/watch" "async event FD" $watch 2>> "$log/watch" &&
   [ "$(port_state)" = PORT_ACTIVE ] &&
   ip -n "$b" link set "${tag}y" down && wait_count 1 "$err" &&
   [ "$(port_state)" = PORT_DOWN ] && [ "$(phys_state)" = DISABLED ] &&
   ip -n "$b" link set "${tag}y" up && wait_count 1 "$active" &&
   [ "$(port_state)" = PORT_ACTIVE ] && [ "$(phys_state)" = LINK_UP ] &&
   ip -n "$a" link set "${tag}x" down && wait_count 2 "$err" &&
   [ "$(port_state)" = PORT_DOWN ] && [ "$(phys_state)" = POLLING ] &&
   ip -n "$a" link set "${tag}x" up && wait_count 2 "$active"; then
  ok "the port follows its interface: PORT_ERR and PORT_DOWN while down (Disabled; Polling without a carrier), PORT_ACTIVE back up"
else
  ip -n "$a" link set "${tag}x" up; ip -n "$b" link set "${tag}y" up
  echo "port state now: $(port_state) $(phys_state)" >> "$log/watch"
  bad "the port follows its interface: PORT_ERR and PORT_DOWN while down (Disabled; Polling without a carrier), PORT_ACTIVE back up" "$log/watch"
fi
kill $watch 2>/dev/null; wait $watch 2>/dev/null

# A second link between the hosts, 10.232.0.0/24, and B with a device on
# each, the other link's first: a client bound to no address takes the
# source the route picks (10.232.0.2), as the kernel's address resolution
# does. It took the first device's address, sent out of one link and was
# answered through the other, which A's strict reverse-path filter drops.
ip link add "${tag}v" type veth peer name "${tag}w"
ip link set "${tag}v" netns "$a"; ip link set "${tag}w" netns "$b"
ip -n "$a" addr add 10.232.0.1/24 dev "${tag}v"; ip -n "$b" addr add 10.232.0.2/24 dev "${tag}w"
ip -n "$a" link set "${tag}v" up; ip -n "$b" link set "${tag}w" up
for conf in all "${tag}x" "${tag}v"; do
  ip netns exec "$a" sysctl -qw "net.ipv4.conf.$conf.rp_filter=1"
done
# (cm_across names B's device softverbs0=$dev_b: the second one follows.)
dev_a=10.232.0.1; dev_b="$ip_b softverbs1=10.232.0.2"
cm_across "rping from a host of two devices takes the route's source (strict reverse-path filter)" \
  rping -s -a 10.232.0.1 -p 7476 -C 20 -V -- -c -a 10.232.0.1 -p 7476 -C 20 -V

# A host whose only IPv4 address is loopback's and which has a global IPv6
# address: glibc's getaddrinfo then gives "127.0.0.1" as the IPv4-mapped
# IPv6 address (AI_V4MAPPED with AI_ADDRCONFIG), so rping's ids bind and
# resolve mapped addresses, which softverbs reads as the IPv4 ones (its
# client failed in rdma_connect with EINVAL).
ip netns add "$m"
ip -n "$m" link set lo up
ip -n "$m" addr add fd07::1/64 dev lo nodad
hosts=("$a" "$b"); a=$m; b=$m; dev_a=127.0.0.1; dev_b=127.0.0.1
cm_across "rping on 127.0.0.1 where getaddrinfo gives IPv4-mapped addresses" \
  rping -s -a 127.0.0.1 -p 7475 -C 20 -V -- -c -a 127.0.0.1 -p 7475 -C 20 -V
# Two devices of one host with different path MTUs: 127.0.0.1 has lo's,
# 127.0.0.2, on no interface of its own, the default 1024. The passive
# side's QP takes the REQ's MTU; with its own, qperf's client failed with
# IBV_WC_REM_INV_REQ_ERR.
dev_b=127.0.0.2
SOFTVERBS_SHM=0 tcp_across "qperf -cm1 rc_bw on the wire between devices of two path MTUs" \
  "bw += +[0-9.]+ [KMG]B/sec" 7485 qperf -lp 7485 -- qperf -lp 7485 -cm1 -t 1 127.0.0.1 rc_bw
a=${hosts[0]}; b=${hosts[1]}

# A new namespace's loopback is down: 127.0.0.1 cannot be opened there,
# and `softverbs devices` says so (it listed the device as usable while
# the open failed with EADDRNOTAVAIL); once lo is up it says nothing.
ip netns add "$n_lo"
CLI=$(dirname "$SO")/softverbs
said=$(ip netns exec "$n_lo" env -u SOFTVERBS_DEVICES -u LD_PRELOAD "$CLI" devices 2>&1)
ip -n "$n_lo" link set lo up
said_up=$(ip netns exec "$n_lo" env -u SOFTVERBS_DEVICES -u LD_PRELOAD "$CLI" devices 2>&1)
if grep -q "not usable here: the loopback interface of this network namespace is down" <<< "$said" &&
   ! grep -q "not usable" <<< "$said_up"; then
  pass=$((pass + 1)); echo "ok   softverbs devices says 127.0.0.1 is not usable while lo is down"
else
  fail=$((fail + 1)); echo "FAIL softverbs devices says 127.0.0.1 is not usable while lo is down"
  printf '%s\n--- lo up:\n%s\n' "$said" "$said_up" | sed 's/^/    /'
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
