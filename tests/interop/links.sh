# Sourced by the scripts that run inside the interop VM (tests/interop/
# guest.sh, bench/rxe_vm_guest.sh): the veth links and the rxe-against-rxe
# pair they share, and the lookup of a device's GID index.

# link NAME_A NAME_B V4_A V4_B V6_A V6_B: a veth pair, both ends up, with
# their addresses (no duplicate address detection, so IPv6 is usable at once).
link() {
  ip link add "$1" type veth peer name "$2" || return 1
  ip addr add "$3/24" dev "$1" && ip addr add "$5/64" dev "$1" nodad &&
    ip addr add "$4/24" dev "$2" && ip addr add "$6/64" dev "$2" nodad &&
    ip link set "$1" up && ip link set "$2" up
}

# via_wire DEV ADDR_FROM ADDR_TO MAC_TO TABLE: packets this host sends
# from ADDR_FROM to ADDR_TO (its own address) leave by DEV. Both rxe
# devices live in one namespace, where a local destination would be
# routed through lo; rxe would never see them come in on its veth.
via_wire() {
  local dev=$1 from=$2 to=$3 mac=$4 table=$5 v=-4
  case "$to" in *:*) v=-6 ;; esac
  ip $v rule add pref 10 iif lo to "$to" lookup "$table" &&
    ip $v route add "$to" dev "$dev" src "$from" table "$table" &&
    ip $v neigh add "$to" lladdr "$mac" dev "$dev" nud permanent
}

# setup_rxe_pair: the rxe-against-rxe link, xa (10.12.0.1, fd01::1) and xb
# (10.12.0.2, fd01::2) in the initial namespace, with policy routing so
# that packets between them cross the veth, and rxe devices rxe_xa, rxe_xb.
setup_rxe_pair() {
  link xa xb 10.12.0.1 10.12.0.2 fd01::1 fd01::2 || return 1
  local ma mb c
  ma=$(cat /sys/class/net/xa/address) mb=$(cat /sys/class/net/xb/address)
  # The local table after the rules above, so that they can win.
  ip -4 rule add pref 100 lookup local && ip -4 rule del pref 0 &&
    ip -6 rule add pref 100 lookup local && ip -6 rule del pref 0 || return 1
  via_wire xa 10.12.0.1 10.12.0.2 "$mb" 101 && via_wire xb 10.12.0.2 10.12.0.1 "$ma" 102 &&
    via_wire xa fd01::1 fd01::2 "$mb" 101 && via_wire xb fd01::2 fd01::1 "$ma" 102 || return 1
  # A packet whose source is one of our own addresses is not a martian here.
  for c in all default xa xb; do
    sysctl -qw "net.ipv4.conf.$c.accept_local=1" "net.ipv4.conf.$c.rp_filter=0" || return 1
  done
  rdma link add rxe_xa type rxe netdev xa && rdma link add rxe_xb type rxe netdev xb
}

# gid_of DEV GID [PREFIX...]: the index of GID in DEV's table as the
# device itself lists it (ibv_devinfo -v, run after PREFIX: a namespace,
# a preload), or nothing.
gid_of() {
  local dev=$1 want=$2; shift 2
  "$@" ibv_devinfo -v -d "$dev" 2>&1 |
    sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*\([^,[:space:]]*\).*/\1 \2/p' |
    awk -v w="$want" '$2 == w { print $1; exit }'
}
