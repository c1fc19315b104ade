# Sourced by the ecosystem scripts (after setting CLI): `sv`, the prefix
# that runs a program on softverbs. SOFTVERBS_MODE unset or "preload":
# `softverbs run --` (no root). "plugin": softverbs installed as an
# rdma-core provider and set up (tests/programs/plugin.sh runs the scripts
# so): the program runs as it is and finds the devices through SYSFS_PATH.
case "${SOFTVERBS_MODE:-preload}" in
  plugin) sv=(env -u LD_PRELOAD SYSFS_PATH=/run/softverbs/sysfs) ;;
  *) sv=(env -u LD_PRELOAD "$CLI" run --) ;;
esac
