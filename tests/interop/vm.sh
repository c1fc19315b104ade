#!/usr/bin/env bash
# Runs a script inside a throwaway VM: Debian's own kernel (the installed
# linux-image-amd64) under QEMU's software emulation (TCG: /dev/kvm here
# cannot boot a stock kernel), a busybox initramfs with the modules the
# interop tests need (rdma_rxe, ib_uverbs, veth, 9p, overlay), the host's
# / shared read-only over virtio-9p with a tmpfs overlay (so the guest runs
# the host's binaries: rdma-core, perftest, target/release/...), no network
# device at all (-nic none), a serial console for output.
#
# Usage: vm.sh [--timeout SECONDS] SCRIPT [ARGS...]
#   runs `bash SCRIPT ARGS...` as root in the guest, in the current
#   directory, prints its output, and exits with its status. A VM that does
#   not boot, a guest that stops early and a timeout are failures that say
#   exactly what happened (the last boot stage reached and the console's
#   tail). QEMU is killed on every exit path.
# Environment: INTEROP_DIR (state: initramfs, console logs; default
#   target/interop), INTEROP_MEM (MiB, default 1536), INTEROP_CPUS (2),
#   INTEROP_BOOT_TIMEOUT (seconds until the guest runs SCRIPT, 240),
#   INTEROP_TIMEOUT (seconds for SCRIPT, 1800; --timeout overrides).
set -u
here=$(dirname "$(readlink -f "$0")")
timeout=${INTEROP_TIMEOUT:-1800}
if [ "${1:-}" = --timeout ]; then timeout=$2; shift 2; fi
[ $# -ge 1 ] || { echo "usage: $0 [--timeout SECONDS] SCRIPT [ARGS...]" >&2; exit 2; }
script=$(readlink -f "$1"); shift
state=$(readlink -m "${INTEROP_DIR:-target/interop}")
boot_timeout=${INTEROP_BOOT_TIMEOUT:-240}
. "$here/deps.sh"

fail() { echo "interop VM: $*" >&2; exit 1; }

# The modules the guest needs; modprobe's dependency information brings
# the rest (ib_core, udp tunnels, virtio core, netfs...). crc32_generic is
# requested by name at run time (rxe's ICRC), which modules.dep cannot say.
GUEST_MODULES="virtio_pci 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs rdma_ucm"

# kernel_version: the version of the kernel linux-image-amd64 depends on.
kernel_version() {
  dpkg-query -W -f='${Depends}\n' linux-image-amd64 2>/dev/null |
    sed -n 's/^linux-image-\([^ ,]*\).*/\1/p'
}

# module_paths VERSION: every .ko to insmod, dependencies first, once each.
module_paths() {
  local v=$1 m out
  for m in $GUEST_MODULES; do
    out=$(modprobe -S "$v" --show-depends "$m" 2>&1) ||
      { echo "modprobe --show-depends $m for $v: $out" >&2; return 1; }
    printf '%s\n' "$out"
  done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'
}

# build_initramfs VERSION OUT: busybox, the modules in load order, /init.
build_initramfs() {
  local v=$1 out=$2 root paths p
  paths=$(module_paths "$v") || return 1
  root=$(mktemp -d "$state/initramfs.XXXXXX")
  mkdir -p "$root/bin" "$root/modules"
  cp /bin/busybox "$root/bin/busybox"
  install -m 0755 "$here/init.sh" "$root/init"
  for p in $paths; do
    cp "$p" "$root/modules/"
    basename "$p" >> "$root/modules/order"
  done
  (cd "$root" && find . | cpio -o -H newc --quiet) > "$out.tmp" &&
    mv "$out.tmp" "$out"
  local rc=$?
  rm -rf "$root"
  return $rc
}

# initramfs VERSION: the path of an initramfs for VERSION, rebuilt when
# init.sh, the module list or this script changes.
initramfs() {
  local v=$1 key
  key=$( { echo "$v $GUEST_MODULES"; cat "$here/init.sh" "$here/vm.sh" /bin/busybox; } |
    sha256sum | cut -c1-16)
  local out="$state/initramfs-$v-$key.cpio"
  if [ ! -s "$out" ]; then
    rm -f "$state"/initramfs-*.cpio
    build_initramfs "$v" "$out" || return 1
  fi
  echo "$out"
}

ensure_host_deps || exit 1
mkdir -p "$state" || fail "cannot create $state"
version=$(kernel_version)
[ -n "$version" ] || fail "cannot tell which kernel linux-image-amd64 installs"
kernel=/boot/vmlinuz-$version
[ -r "$kernel" ] || fail "cannot read $kernel (it is root's only on Debian)"
[ -d "/lib/modules/$version" ] || fail "no /lib/modules/$version"
initrd=$(initramfs "$version") || fail "building the initramfs failed"

run=$(mktemp "$state/run.XXXXXX")
console=$(mktemp "$state/console.XXXXXX")
qemu_err=$(mktemp "$state/qemu-stderr.XXXXXX")
qpid=
cleanup() {
  if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
    kill "$qpid" 2>/dev/null
    wait "$qpid" 2>/dev/null
  fi
  rm -f "$run" "$qemu_err"
  [ "${INTEROP_KEEP_CONSOLE:-}" = 1 ] || rm -f "$console"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The guest's command, on the shared root: same directory, same arguments.
{
  echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  echo "export HOME=/root LANG=C.UTF-8 CI=${CI:-} TERM=dumb"
  printf 'cd %q || exit 125\n' "$PWD"
  printf 'exec bash %q' "$script"
  printf ' %q' "$@"
  echo
} > "$run"

started=$SECONDS
qemu-system-x86_64 -accel tcg -cpu max -machine pc \
  -m "${INTEROP_MEM:-1536}" -smp "${INTEROP_CPUS:-2}" \
  -nodefaults -no-user-config -display none -nic none -no-reboot \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 loglevel=4 sv_run=$run" \
  -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -chardev file,id=con,path="$console" -serial chardev:con \
  > /dev/null 2> "$qemu_err" &
qpid=$!

# Follow the console until the guest's exit line, a failure line, QEMU's
# exit or the deadline; guest output (after @@SV-BEGIN) goes to stdout.
stage="none (no @@SV-STAGE line: the kernel or the initramfs did not start)"
rc= why= begun=
deadline=$((SECONDS + boot_timeout))
while :; do
  left=$((deadline - SECONDS))
  if [ $left -le 0 ]; then
    if [ -n "$begun" ]; then why="the guest script ran out of its $timeout s"
    else why="no guest command after $boot_timeout s of boot (last stage: $stage)"; fi
    break
  fi
  IFS= read -r -t "$left" line; st=$?
  if [ $st -ne 0 ]; then
    [ $st -gt 128 ] && continue # read's timeout: the deadline check says why
    wait "$qpid"; qrc=$?; qpid=
    why="QEMU exited ($qrc) before the guest finished (last stage: $stage)"
    break
  fi
  line=${line%$'\r'}
  case "$line" in
    "@@SV-STAGE "*) stage=${line#@@SV-STAGE } ;;
    "@@SV-FAIL "*) why="the guest's init failed: ${line#@@SV-FAIL }"; break ;;
    "@@SV-BEGIN")
      begun=1
      echo "interop VM: booted in $((SECONDS - started)) s (kernel $version, TCG)" >&2
      deadline=$((SECONDS + timeout)) ;;
    "@@SV-EXIT "*) rc=${line#@@SV-EXIT }; break ;;
    *"Kernel panic"*) why="kernel panic: $line"; break ;;
    *) [ -n "$begun" ] && printf '%s\n' "$line" ;;
  esac
done < <(tail -n +1 -F --pid="$qpid" "$console" 2>/dev/null)

if [ -n "$rc" ]; then
  # The guest powers itself off; wait for that (bounded) so QEMU is gone.
  for _ in $(seq 100); do kill -0 "$qpid" 2>/dev/null || break; sleep 0.1; done
  echo "interop VM: guest command exited $rc after $((SECONDS - started)) s in all" >&2
  exit "$rc"
fi
{
  echo "interop VM: FAILED: $why"
  echo "--- last 40 console lines ($console):"
  tail -n 40 "$console" | sed 's/^/    /'
  if [ -s "$qemu_err" ]; then echo "--- QEMU's stderr:"; sed 's/^/    /' "$qemu_err"; fi
} >&2
exit 1
