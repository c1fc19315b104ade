#!/bin/busybox sh
# /init of the interop VM's initramfs (built by vm.sh, run by busybox).
# Stage 1 (PID 1 in the initramfs): load the modules vm.sh listed, mount the
# host's / read-only over 9p with a tmpfs overlay on top, and switch_root
# into it, so the guest runs the host's own programs and libraries and the
# kernel's later module requests find the host's /lib/modules. Stage 2
# (PID 1 in the new root): run the command named on the kernel command line
# (sv_run=HOST-PATH) and power off. Each stage prints an "@@SV-STAGE" line
# so the host can say how far a failed boot got; "@@SV-FAIL REASON" says
# why it stopped; "@@SV-EXIT RC" carries the command's exit status.
BB=/bin/busybox
stage() { echo "@@SV-STAGE $*"; }
die() {
  echo "@@SV-FAIL $*"
  $BB sync
  $BB poweroff -f
}

if [ "${1:-}" = stage2 ]; then
  BB=/run/sv/busybox
  for fs in proc:proc sysfs:sys devtmpfs:dev devpts:dev/pts tmpfs:dev/shm; do
    $BB mkdir -p "/${fs#*:}"
    $BB mount -t "${fs%%:*}" "${fs%%:*}" "/${fs#*:}" || die "mounting ${fs%%:*} on /${fs#*:}"
  done
  run=$($BB sed -n 's/.*sv_run=\([^ ]*\).*/\1/p' /proc/cmdline)
  [ -n "$run" ] || die "no sv_run= on the kernel command line"
  [ -f "$run" ] || die "the guest command $run is not visible through 9p"
  $BB ip link set lo up
  stage run "$run"
  echo "@@SV-BEGIN"
  /bin/sh "$run" < /dev/console
  rc=$?
  echo "@@SV-EXIT $rc"
  $BB sync
  $BB poweroff -f
fi

$BB mkdir -p /proc /sys /dev
$BB mount -t proc proc /proc
$BB mount -t sysfs sys /sys
$BB mount -t devtmpfs dev /dev
stage init
while read -r mod; do
  [ -n "$mod" ] || continue
  $BB insmod "/modules/$mod" || die "insmod $mod failed"
done < /modules/order
stage modules

$BB mkdir -p /host /rw /newroot
$BB mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /host \
  || die "mounting the host's / over 9p (mount_tag hostroot) failed"
$BB mount -t tmpfs -o size=60% rw /rw || die "tmpfs for the overlay failed"
$BB mkdir -p /rw/upper /rw/work
$BB mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /newroot \
  || die "overlay of tmpfs on the 9p root failed"
$BB mount -t tmpfs run /newroot/run || die "tmpfs on /run failed"
# Stage 2 needs a shell and poweroff that do not depend on the host's.
$BB mkdir -p /newroot/run/sv
$BB cp /bin/busybox /init /newroot/run/sv/
$BB umount /proc /sys /dev
stage rootfs
exec $BB switch_root /newroot /run/sv/busybox sh /run/sv/init stage2
die "switch_root failed"
