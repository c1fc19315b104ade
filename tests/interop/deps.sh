# Sourced by vm.sh: the Debian packages the interop VM and its guest use.
# As root they are installed; otherwise they are named and vm.sh fails.
# INITRD=No: the host needs the kernel image and modules, not an initrd
# of its own (Debian's kernel hook honours it and saves a minute).

# Host: the emulator, the kernel and its modules, the initramfs pieces.
# Guest (the host's / over 9p): the rdma tool, rdma-core's rxe provider,
# the programs under test, tcpdump for the record of failed cases.
INTEROP_PACKAGES="qemu-system-x86 linux-image-amd64 busybox-static kmod cpio
  iproute2 rdma-core ibverbs-providers ibverbs-utils perftest rdmacm-utils iperf tcpdump"

# missing_packages: the packages above that are not installed.
missing_packages() {
  local p
  for p in $INTEROP_PACKAGES; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      echo "$p"
  done
}

ensure_host_deps() {
  local missing
  missing=$(missing_packages | tr '\n' ' ')
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "interop VM: missing Debian packages: $missing(install them as root: apt-get install $missing)" >&2
    return 1
  fi
  echo "interop VM: installing $missing" >&2
  apt-get update -qq >&2 &&
    DEBIAN_FRONTEND=noninteractive INITRD=No apt-get install -y -qq --no-install-recommends $missing >&2 || {
    echo "interop VM: apt-get install $missing failed" >&2
    return 1
  }
}
