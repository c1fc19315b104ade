#!/usr/bin/env bash
# Rust bindings over softverbs, unchanged, at pinned versions from
# crates.io: sideway 0.4.3 (rdma-mummy-sys loads libibverbs with dlopen)
# runs its whole test suite and its ibv_devinfo, show_gids and rc_pingpong
# examples; the ibverbs crate 0.9.2 (jonhoo) runs its loopback example,
# which uses GID index 1; rdma-sys 0.3.0's server and client examples
# connect through librdmacm and exchange a message, on loopback and (as
# root, in preload mode) between two network namespaces. Everything runs
# under `softverbs run`. The
# crates build into target/ecosystem-crates (kept between runs).
# Prints "N passed, M failed" last. Usage: rust.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
CLI=$(dirname "$SO")/softverbs
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
SIDEWAY=0.4.3
IBVERBS=0.9.2
RDMA_SYS=0.3.0
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
export CARGO_TARGET_DIR=$(dirname "$SO")/../ecosystem-crates
pass=0; fail=0
ONE_TIMEOUT=300
. "$here/mode.sh"

# The crates' sources, as a downstream user gets them.
. "$here/crates.sh"
if ! why=$(fetch_crates "$log" sideway=$SIDEWAY ibverbs=$IBVERBS rdma-sys=$RDMA_SYS); then
  cannot_run "Rust bindings (tests/ecosystem/rust.sh)" "$why"
fi

# sideway: its own lock file; tests build once, then run under softverbs.
cd "$log/sideway-$SIDEWAY" || exit 1
# In plugin mode nothing stands in for /sys/class/infiniband (there is no
# view without the preload), and one test reads it directly to compare
# with the verbs: it is left out there, and said (docs/supported.md).
skip=()
if [ "${SOFTVERBS_MODE:-}" = plugin ]; then
  skip=(-- --skip ibverbs::device_context::tests::test_query_gid_table_fallback)
  echo "note: plugin mode leaves out sideway's test_query_gid_table_fallback (it reads /sys/class/infiniband itself)"
fi
if cargo test --locked --no-run > "$log/build" 2>&1 && cargo build --locked --examples >> "$log/build" 2>&1; then
  one "sideway $SIDEWAY: cargo test (unit, integration, doc tests)" "^test result: ok" \
    "${sv[@]}" cargo test --locked "${skip[@]}"
  grep -q "test result: FAILED" "$log/out" && bad "sideway: a test binary failed" "$log/out"
  ex=$CARGO_TARGET_DIR/debug/examples
  one "sideway ibv_devinfo example" "softverbs0" "${sv[@]}" "$ex/ibv_devinfo"
  one "sideway show_gids example" "softverbs0 .*127\.0\.0\.1 .*RoCEv2" "${sv[@]}" "$ex/show_gids"
  port=$(random_port_base)
  serve_then_connect $port "${sv[@]}" timeout 60 "$ex/rc_pingpong" -g 1 -p $port \
    --then "${sv[@]}" timeout 60 "$ex/rc_pingpong" -g 1 -p $port 127.0.0.1
  pair_verdict "sideway rc_pingpong example, server and client" "iters in"
else
  bad "sideway $SIDEWAY builds" "$log/build"
fi

cd "$log/ibverbs-$IBVERBS" || exit 1
if cargo build --locked --examples > "$log/build" 2>&1; then
  one "ibverbs $IBVERBS loopback example (GID index 1), unchanged" "^received$" \
    "${sv[@]}" "$CARGO_TARGET_DIR/debug/examples/loopback"
else
  bad "ibverbs $IBVERBS builds" "$log/build"
fi

# rdma_sys_pair NAME ADDR SERVER_PREFIX... --then CLIENT_PREFIX...: the
# examples' server (on 0.0.0.0:7471, ready once its LISTEN was answered:
# it traces its rdma_cm commands) and client (connecting to ADDR), each
# run after its prefix; both exit 0 whatever happens, so each must print
# the message it received.
rdma_sys_pair() {
  local name=$1 addr=$2 s_pre=() srv
  shift 2
  while [ "$1" != --then ]; do s_pre+=("$1"); shift; done
  shift
  : > "$log/cli"; : > "$log/srv.trace" # the wait below must not find the last pair's line
  SOFTVERBS_CM_TRACE=1 "${s_pre[@]}" timeout 60 "$ex/server" > "$log/srv" 2> "$log/srv.trace" &
  srv=$!
  if wait_output "$log/srv.trace" "command 7: Ok" $srv 2> "$log/cli"; then
    "$@" timeout 60 "$ex/client" "$addr" 7471 > "$log/cli" 2>&1
  else
    kill $srv 2>/dev/null
  fi
  wait $srv
  if grep -q "recv msg : \[1, 1," "$log/srv" && grep -q "recv msg : \[1, 1," "$log/cli"; then
    ok "$name"
  else
    cat "$log/srv" >> "$log/cli"
    bad "$name" "$log/cli"
  fi
}

# rdma_sys_across: the same examples between two network namespaces
# (preload mode, each with its device on its own address; root), the
# client connecting to the server's address across a veth pair: the IB
# CM between two hosts' daemons.
rdma_sys_across() {
  local name="rdma-sys $RDMA_SYS server and client examples between namespaces"
  [ "${SOFTVERBS_MODE:-preload}" = plugin ] && return 0 # one setup for the host
  if [ "$(id -u)" != 0 ]; then
    if [ "${CI:-}" = true ]; then bad "$name: needs root (network namespaces)"; else
      echo "(SKIPPED $name: needs root; under CI=true this is a failure)" >&2; fi
    return 0
  fi
  local a="svrs$$a" b="svrs$$b" ip_a=10.233.0.1 ip_b=10.233.0.2
  trap 'kill $(jobs -p) 2>/dev/null; remove_two_hosts "'"$a"'" "'"$b"'"; rm -rf "$log"' EXIT
  two_hosts "$name" "$a" "$b" "svrs$$" "$ip_a" "$ip_b"
  rdma_sys_pair "$name" "$ip_a" ip netns exec "$a" env SOFTVERBS_DEVICES="softverbs0=$ip_a" "${sv[@]}" \
    --then ip netns exec "$b" env SOFTVERBS_DEVICES="softverbs0=$ip_b" "${sv[@]}"
  remove_two_hosts "$a" "$b"
}

cd "$log/rdma-sys-$RDMA_SYS" || exit 1
if cargo build --locked --release --examples > "$log/build" 2>&1; then
  ex=$CARGO_TARGET_DIR/release/examples
  rdma_sys_pair "rdma-sys $RDMA_SYS server and client examples, unchanged" 127.0.0.1 "${sv[@]}" --then "${sv[@]}"
  rdma_sys_across
else
  bad "rdma-sys $RDMA_SYS builds" "$log/build"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
