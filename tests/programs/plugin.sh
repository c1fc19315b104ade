#!/usr/bin/env bash
# Plugin mode: softverbs as a genuine rdma-core provider, no LD_PRELOAD.
# Installs it (`make install`), creates the device entries (`softverbs
# setup`), runs ibv_devices, ibv_rc_pingpong (also -e: completion
# channels), ib_write_bw, rping over rdma_cm, an async event check, a
# program that dlopens libibverbs, and the ecosystem's UCX, libfabric,
# Open MPI and Rust checks (tests/ecosystem), then tears
# down and uninstalls, putting back whatever softverbs installation or
# setup was there before.
# Needs root; without it the script fails under CI=true and otherwise
# skips, saying so loudly (lib.sh's cannot_run). Prints
# "N passed, M failed" last. Usage: plugin.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
root=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
target=$(dirname "$(dirname "$SO")")
installed=(/usr/lib/x86_64-linux-gnu/libibverbs/libsoftverbs-rdmav34.so
           /etc/libibverbs.d/softverbs.driver /usr/local/bin/softverbs)
tree=/run/softverbs/sysfs

. "$root/tests/programs/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
  cannot_run "plugin mode (tests/programs/plugin.sh)" \
    "not root: plugin mode installs into /usr and /etc and writes /dev/infiniband"
fi

log=$(mktemp -d)
mkdir "$log/saved"
for f in "${installed[@]}"; do
  [ -e "$f" ] && cp -a "$f" "$log/saved/$(basename "$f")"
done
was_set_up=no; [ -d "$tree" ] && was_set_up=yes

# Back to how the machine was: our entries and files gone, anything that
# was installed before restored (and set up again if it was).
cleanup() {
  kill $(jobs -p) 2>/dev/null
  [ -x /usr/local/bin/softverbs ] && /usr/local/bin/softverbs teardown > /dev/null 2>&1
  make -s -C "$root" TARGET="$target" uninstall > /dev/null 2>&1
  for f in "${installed[@]}"; do
    saved="$log/saved/$(basename "$f")"
    [ -e "$saved" ] && cp -a "$saved" "$f"
  done
  if [ $was_set_up = yes ] && [ -x /usr/local/bin/softverbs ]; then
    /usr/local/bin/softverbs setup > /dev/null 2>&1
  fi
  rm -rf "$log"
}
trap cleanup EXIT

pass=0; fail=0; n=0
PORT_BASE=$(random_port_base)
# pair NAME EXPECT CMD...: CMD as server and, once it listens, CMD
# 127.0.0.1 as client.
pair() {
  local name=$1 expect=$2; shift 2
  n=$((n + 1)); local port=$((PORT_BASE + n)) crc src
  serve_then_connect $port timeout 60 "$@" -p $port --then timeout 60 "$@" -p $port 127.0.0.1
  pair_verdict "$name" "$expect"
}

# The devices setup creates come from this configuration, and so do the
# ones the programs open.
export SOFTVERBS_CONFIG=$log/devices.conf
echo "device softverbs0 127.0.0.1" > "$SOFTVERBS_CONFIG"
unset LD_PRELOAD SOFTVERBS_DEVICES

one "make install" "^installed$" sh -c "make -s -C '$root' TARGET='$target' install && echo installed"
one "installed where rdma-core looks" "driver softverbs" \
  sh -c "test -f ${installed[0]} && test -x ${installed[2]} && cat ${installed[1]}"
one "softverbs setup as non-root is a clear error" "must run as root" \
  sh -c "setpriv --reuid=65534 --regid=65534 --clear-groups /usr/local/bin/softverbs setup 2>&1; test \$? -ne 0"
one "softverbs setup" "^export SYSFS_PATH=$tree\$" /usr/local/bin/softverbs setup
one "softverbs setup again (idempotent)" "^export SYSFS_PATH=$tree\$" /usr/local/bin/softverbs setup
one "/dev/infiniband/uverbs0" "/dev/full" readlink /dev/infiniband/uverbs0

export SYSFS_PATH=$tree
one "ibv_devices" "softverbs0" ibv_devices
# rxe's GID table, in the sysfs look-alike and through the ioctl path.
port1=$tree/class/infiniband/softverbs0/ports/1
one "sysfs look-alike: GID 0 link-local, GID 1 IPv4-mapped, RoCE v2" \
  "^fe80:0000:0000:0000:0000:5efe:7f00:0001 0000:0000:0000:0000:0000:ffff:7f00:0001 RoCE v2 RoCE v2\$" \
  sh -c "echo \$(cat $port1/gids/0 $port1/gids/1 $port1/gid_attrs/types/0 $port1/gid_attrs/types/1)"
one "ibv_devinfo GID 0 (link-local)" "GID\[  0\]:[[:space:]]+fe80::5efe:7f00:1, RoCE v2" ibv_devinfo -v -d softverbs0
one "ibv_devinfo GID 1 (IPv4-mapped)" "GID\[  1\]:[[:space:]]+::ffff:127\.0\.0\.1, RoCE v2" ibv_devinfo -v -d softverbs0
iters="[0-9]+ iters in"
pair "ibv_rc_pingpong" "$iters" ibv_rc_pingpong -d softverbs0 -g 0
pair "ibv_rc_pingpong -e (completion channels)" "$iters" ibv_rc_pingpong -d softverbs0 -g 0 -e
pair "ib_write_bw" "^ +[0-9]+ +[0-9]+ +[0-9.]+" ib_write_bw -d softverbs0 -x 0
pair "ibv_rc_pingpong -g 1" "$iters" ibv_rc_pingpong -d softverbs0 -g 1
pair "ib_write_bw -x 1" "^ +[0-9]+ +[0-9]+ +[0-9.]+" ib_write_bw -d softverbs0 -x 1
# rdma_cm: librdmacm's calls on its device file reach softverbs through
# its GOT. An rdma_cm listener has no socket to wait for: until the
# server listens, a connection is rejected, and only then is the client
# started again (bounded).
cm_pair() {
  local name="rping over rdma_cm (plugin mode)"
  n=$((n + 1)); local port=$((PORT_BASE + n)) crc=124 deadline=$((SECONDS + 30))
  timeout 60 rping -s -a 127.0.0.1 -p $port -C 10 -V > "$log/srv" 2>&1 &
  local srv=$!
  while [ $SECONDS -lt $deadline ]; do
    timeout 30 rping -c -a 127.0.0.1 -p $port -C 10 -V > "$log/cli" 2>&1
    crc=$?
    grep -q REJECTED "$log/cli" && kill -0 $srv 2>/dev/null || break
  done
  [ $crc -ne 0 ] && kill $srv 2>/dev/null
  wait $srv; local src=$?
  crc=$(rping_exit $crc "$log/cli"); src=$(rping_exit $src "$log/srv")
  pair_verdict "$name" ""
}
cm_pair
# A thread cancelled in rdma_get_cm_event ends there (librdmacm's write
# reaches softverbs through its GOT in this mode), and one in verbs.
if cc -O1 -o "$log/cm_cancel" "$root/tests/programs/cm_cancel.c" -lrdmacm -libverbs 2> "$log/cc"; then
  one "rdma_get_cm_event and pthread_cancel (plugin mode)" "cm cancel ok" "$log/cm_cancel" 127.0.0.1
else
  bad "rdma_get_cm_event and pthread_cancel (compile)" "$log/cc"
fi
if cc -O1 -pthread -o "$log/thread_cancel" "$root/tests/programs/thread_cancel.c" -libverbs 2> "$log/cc"; then
  one "pthread_cancel of threads in verbs (plugin mode)" "thread cancel ok" "$log/thread_cancel"
else
  bad "thread cancel (compile)" "$log/cc"
fi
# Async events reach ibv_get_async_event in this mode too.
if cc -O1 -o "$log/async_events" "$root/tests/programs/async_events.c" -libverbs 2> "$log/cc"; then
  one "ibv_get_async_event (SRQ limit, last WQE)" "async events ok" "$log/async_events"
else
  bad "ibv_get_async_event (compile)" "$log/cc"
fi
# The error paths too: here libibverbs' own ibv_query_gid and
# ibv_destroy_comp_channel run, not the preload replacements.
if cc -O1 -o "$log/verb_errors" "$root/tests/programs/verb_errors.c" -libverbs 2> "$log/cc"; then
  one "verb error paths (bad_wr, EBUSY channel, GID index)" "verb errors ok" "$log/verb_errors"
else
  bad "verb error paths (compile)" "$log/cc"
fi
if cc -O1 -o "$log/app_mistakes" "$root/tests/programs/app_mistakes.c" -libverbs 2> "$log/cc"; then
  one "application mistakes are errors, not crashes" "app mistakes ok" "$log/app_mistakes"
else
  bad "application mistakes (compile)" "$log/cc"
fi
# Programs that dlopen libibverbs, and UCX, find the device here too.
if cc -O1 -o "$log/dlopen_verbs" "$root/tests/ecosystem/dlopen_verbs.c" -ldl 2> "$log/cc"; then
  one "dlopen(libibverbs) users find, open and use softverbs0" "dlopen verbs ok" "$log/dlopen_verbs" softverbs0
  # Preload mode beside this setup: its device view (made afresh in a
  # runtime directory of its own) takes the place of the setup's
  # /dev/infiniband/uverbs0 stand-in instead of failing on it.
  mkdir -p "$log/xdg"
  one "preload mode beside the setup: a view of its own, found by a dlopen user" "dlopen verbs ok" \
    env -u SYSFS_PATH XDG_RUNTIME_DIR="$log/xdg" LD_PRELOAD="$SO" "$log/dlopen_verbs" softverbs0
else
  bad "dlopen users (compile)" "$log/cc"
fi
# The ecosystem's stacks (tests/ecosystem) in this mode: UCX, libfabric,
# Open MPI across two namespaces, the Rust bindings.
for script in ucx libfabric mpi rust; do
  SOFTVERBS_MODE=plugin "$root/tests/ecosystem/$script.sh" "$SO" > "$log/$script.out" 2>&1
  sed '$d; s/^\(ok  \|FAIL\) /\1 plugin mode: /' "$log/$script.out"
  read -r p f <<< "$(counts_of "$(tail -n 1 "$log/$script.out")")"
  if [ -z "$p" ]; then
    bad "plugin mode: tests/ecosystem/$script.sh ended without its summary" "$log/$script.out"
  else
    pass=$((pass + p)); fail=$((fail + f))
  fi
done
unset SYSFS_PATH

one "softverbs teardown" "removed" /usr/local/bin/softverbs teardown
one "softverbs teardown again (idempotent)" "removed" /usr/local/bin/softverbs teardown
one "teardown leaves no entries" "^gone$" \
  sh -c "test ! -e $tree && test ! -e /dev/infiniband/uverbs0 && echo gone"
one "make uninstall" "^gone$" \
  sh -c "make -s -C '$root' TARGET='$target' uninstall && test ! -e ${installed[0]} && test ! -e ${installed[1]} && echo gone"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
