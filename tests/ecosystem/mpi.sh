#!/usr/bin/env bash
# Open MPI 4.1 with pml ucx over softverbs between two hosts: two network
# namespaces joined by a veth pair, each with its own softverbs device,
# 4 ranks, 2 per host. mpirun runs in the first under `softverbs run`;
# its launch agent starts the second host's daemon (orted) in the other
# namespace under `softverbs run`. A ping-pong and an MPI_Allreduce check
# every byte and sum (mpi_check.c); osu_latency and osu_bw are not
# packaged by Debian and not built here. UCX may use only softverbs
# (UCX_TLS=rc_verbs,ud_verbs,self). Needs root for the namespaces.
# Prints "N passed, M failed" last. Usage: mpi.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
CLI=$(dirname "$SO")/softverbs
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
tag="svm$$"
a="${tag}a"; b="${tag}b"
ip_a=10.232.0.1; ip_b=10.232.0.2
log=$(mktemp -d)
chmod 755 "$log"
cleanup() {
  kill $(jobs -p) 2>/dev/null
  remove_two_hosts "$a" "$b"
  rm -rf "$log"
}
trap cleanup EXIT
. "$here/mode.sh"
pass=0; fail=0

command -v mpicc >/dev/null || cannot_run "Open MPI (tests/ecosystem/mpi.sh)" "mpicc is not installed (Debian packages openmpi-bin, libopenmpi-dev)"
two_hosts "Open MPI between network namespaces (tests/ecosystem/mpi.sh)" \
  "$a" "$b" "$tag" "$ip_a" "$ip_b"

if ! mpicc -O1 -o "$log/mpi_check" "$here/mpi_check.c" 2> "$log/cc"; then
  bad "MPI check program (compile)" "$log/cc"
  echo "$pass passed, $fail failed"; exit 1
fi

# mpirun's launch agent (plm_rsh_agent): "agent HOST COMMAND..." runs
# COMMAND in HOST's namespace, with HOST's softverbs device.
cat > "$log/agent" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  $ip_b) ns=$b ;;
  *) ns=$a ;;
esac
exec ip netns exec "\$ns" env SOFTVERBS_DEVICES=softverbs0=\$host $(printf '%q ' "${sv[@]}") sh -c "\$*"
AGENT
chmod 755 "$log/agent"

mpi=(mpirun --allow-run-as-root -np 4 --host "$ip_a:2,$ip_b:2"
  --mca plm_rsh_agent "$log/agent" --mca oob_tcp_if_include "$ip_a/24"
  --mca pml ucx --mca btl self --mca osc ucx
  -x UCX_NET_DEVICES=softverbs0:1 -x UCX_TLS=rc_verbs,ud_verbs,self
  "$log/mpi_check")
ip netns exec "$a" env -u LD_PRELOAD SOFTVERBS_DEVICES="softverbs0=$ip_a" HOME="$log" \
  timeout 120 "${sv[@]}" "${mpi[@]}" > "$log/out" 2>&1
rc=$?
per_host() { grep -c "^rank [0-9] on softverbs0=$1\$" "$log/out"; }
if [ $rc -eq 0 ] && grep -q "mpi check ok: 4 ranks" "$log/out" &&
  [ "$(per_host $ip_a)" = 2 ] && [ "$(per_host $ip_b)" = 2 ]; then
  ok "Open MPI pml ucx, 4 ranks on two hosts: ping-pong and MPI_Allreduce, data checked"
else
  echo "exit $rc" >> "$log/out"
  bad "Open MPI pml ucx, 4 ranks on two hosts" "$log/out"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
