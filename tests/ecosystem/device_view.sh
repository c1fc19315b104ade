#!/usr/bin/env bash
# The device view of `softverbs run` (docs/architecture.md, "The device
# view"): the program and its children see softverbs0 in
# /sys/class/infiniband*, /dev/infiniband and libibverbs' own device list
# (a program that dlopens libibverbs finds it), real entries stay beside
# it, and all of it works for a user who is not root. Prints
# "N passed, M failed" last. Usage: device_view.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
CLI=$(dirname "$SO")/softverbs
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
log=$(mktemp -d)
bin=
trap 'rm -rf "$log" ${bin:+"$bin"}' EXIT
pass=0; fail=0
sv=(env -u LD_PRELOAD "$CLI" run --)

one "port state in /sys/class/infiniband" "^4: ACTIVE$" "${sv[@]}" cat /sys/class/infiniband/softverbs0/ports/1/state
one "GID type and network device in sysfs" "^RoCE v2 lo$" \
  "${sv[@]}" sh -c 'echo $(cat /sys/class/infiniband/softverbs0/ports/1/gid_attrs/types/1 /sys/class/infiniband/softverbs0/ports/1/gid_attrs/ndevs/1)'
one "uverbs entry names the device" "^softverbs0$" "${sv[@]}" sh -c 'cat /sys/class/infiniband_verbs/uverbs*/ibdev'
one "/dev/infiniband holds a command file (a child's ls)" "uverbs[0-9]+ -> /dev/full" "${sv[@]}" ls -l /dev/infiniband
one "a shell's child finds the device" "softverbs0" "${sv[@]}" sh -c 'ibv_devices'
one "ibv_devinfo reads the port from the view" "PORT_ACTIVE" "${sv[@]}" ibv_devinfo -d softverbs0

if cc -O1 -o "$log/dlopen_verbs" "$here/dlopen_verbs.c" -ldl 2> "$log/cc"; then
  one "dlopen(libibverbs) users find, open and use softverbs0" "dlopen verbs ok" "${sv[@]}" "$log/dlopen_verbs" softverbs0
  # Without softverbs the same program finds nothing: the check is real.
  if env -u LD_PRELOAD -u SYSFS_PATH "$log/dlopen_verbs" softverbs0 > "$log/out" 2>&1; then
    bad "without softverbs run, dlopen users do not see softverbs0" "$log/out"
  else
    ok "without softverbs run, dlopen users do not see softverbs0"
  fi
else
  bad "dlopen users (compile)" "$log/cc"
fi

# The entry points of fortified builds and of programs built against
# glibc before 2.33 reach the view too.
if cc -O2 -D_FORTIFY_SOURCE=2 -o "$log/fortified_paths" "$here/fortified_paths.c" -ldl 2> "$log/cc"; then
  one "fortified realpath and readlink, and __xstat, see the view" "fortified paths ok" \
    "${sv[@]}" "$log/fortified_paths"
else
  bad "fortified path calls (compile)" "$log/cc"
fi

# A real device (a sysfs tree of one, read through SYSFS_PATH as
# libibverbs would) stays listed beside the soft one.
fake=$log/sys
mkdir -p "$fake/class/infiniband/mlx5_0/ports/1" "$fake/class/infiniband_verbs/uverbs0"
echo mlx5_0 > "$fake/class/infiniband_verbs/uverbs0/ibdev"
one "real devices stay beside the soft one" "^mlx5_0 softverbs0$" \
  env SYSFS_PATH="$fake" "$CLI" run -- sh -c 'echo $(ls /sys/class/infiniband)'
one "the soft device's uverbs number follows the real ones" "^uverbs0 uverbs1$" \
  env SYSFS_PATH="$fake" "$CLI" run -- sh -c 'echo $(ls /sys/class/infiniband_verbs | grep uverbs)'

# Not root: the view is the user's own, closed to others. (Run as another
# user, this whole script already is that check.)
if [ "$(id -u)" = 0 ] && ! command -v setpriv > /dev/null; then
  cannot_run "device view for a user who is not root" "setpriv (util-linux) is not installed"
fi
if [ "$(id -u)" = 0 ]; then
  bin=$(mktemp -d); chmod 755 "$bin"
  cp "$SO" "$CLI" "$bin/"
  user=(setpriv --reuid=65534 --regid=65534 --clear-groups env -u LD_PRELOAD -u XDG_RUNTIME_DIR HOME=/nonexistent)
  one "a user who is not root sees the device (ibv_devinfo)" "PORT_ACTIVE" \
    "${user[@]}" "$bin/softverbs" run -- ibv_devinfo -d softverbs0
  one "a user who is not root sees sysfs entries" "^4: ACTIVE$" \
    "${user[@]}" "$bin/softverbs" run -- cat /sys/class/infiniband/softverbs0/ports/1/state
  one "the view directory is the user's, mode 0700" "^65534 700$" stat -c "%u %a" /tmp/softverbs-65534
  rm -rf /tmp/softverbs-65534
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
