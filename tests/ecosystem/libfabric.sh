#!/usr/bin/env bash
# libfabric 1.17's verbs provider over softverbs, under `softverbs run`:
# `fi_info -p verbs` offers MSG and RDM endpoints on softverbs0, and
# fi_pingpong runs with its data checks (-c) over `verbs;ofi_rxm` (RDM)
# and plain verbs (MSG, connected through rdma_cm), server and client as
# two processes on loopback. Prints "N passed, M failed" last.
# Usage: libfabric.sh PATH/TO/libsoftverbs-rdmav34.so
set -u
SO=$(readlink -f "$1")
CLI=$(dirname "$SO")/softverbs
here=$(dirname "$(readlink -f "$0")")
. "$here/../programs/lib.sh"
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$log"' EXIT
pass=0; fail=0

command -v fi_pingpong >/dev/null || cannot_run "libfabric (tests/ecosystem/libfabric.sh)" "fi_pingpong is not installed (Debian package libfabric-bin)"
. "$here/mode.sh"

"${sv[@]}" fi_info -p verbs > "$log/info" 2>&1
for ep in FI_EP_MSG FI_EP_RDM; do
  if grep -B3 "type: $ep" "$log/info" | grep -q "domain: softverbs0$"; then
    ok "fi_info -p verbs offers $ep on softverbs0"
  else
    bad "fi_info -p verbs offers $ep on softverbs0" "$log/info"
  fi
done

# pingpong NAME PROVIDER EP: fi_pingpong server, then once its control
# port listens, the client; both exit 0 with data checks on.
port=$(random_port_base)
pingpong() {
  local name=$1 prov=$2 ep=$3 crc src
  port=$((port + 1))
  serve_then_connect $port "${sv[@]}" timeout 60 fi_pingpong -p "$prov" -e "$ep" -c -I 200 -B "$port" \
    --then "${sv[@]}" timeout 60 fi_pingpong -p "$prov" -e "$ep" -c -I 200 -P "$port" 127.0.0.1
  # The last size (1 MiB) completed all its iterations on both sides.
  pair_verdict "$name" "^1m +200 +=200 "
}
pingpong 'fi_pingpong -p "verbs;ofi_rxm" -e rdm -c' "verbs;ofi_rxm" rdm
pingpong 'fi_pingpong -p verbs -e msg -c' verbs msg

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
