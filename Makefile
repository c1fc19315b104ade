# softverbs: top-level tasks. `make test` is what CI runs (via .ci/run).
SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: all build test fmt fmt-check clippy unit crosscheck deps sim shim programs ecosystem pyverbs demo install uninstall clean

all: build

build:
	$(CARGO) build --workspace --all-targets

# Everything CI checks, in the order that fails fastest.
test: deps fmt-check clippy crosscheck sim unit fuzz-smoke pyverbs programs ecosystem wire-peer capture interop

# Toolchain components and the Python venv used by the cross-checks.
deps:
	@bash scripts/setup-deps.sh

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --release

# Fuzzing (fuzz/README.md): libFuzzer through cargo-fuzz on the stable
# toolchain, FUZZ_SECONDS per target. fuzz/ is a workspace of its own, so
# make test checks its formatting, lints and corpus replay here, then runs
# each target briefly; a crash fails and prints how to replay it.
FUZZ_SECONDS ?= 300
FUZZ_SMOKE_SECONDS ?= 30
FUZZ := --manifest-path fuzz/Cargo.toml
.PHONY: fuzz fuzz-smoke
fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)
fuzz-smoke:
	$(CARGO) fmt $(FUZZ) -- --check
	$(CARGO) clippy $(FUZZ) --all-targets -- -D warnings
	$(CARGO) test $(FUZZ) --release
	fuzz/run.sh $(FUZZ_SMOKE_SECONDS)

# The ICRC and header encodings checked against scapy's RoCE layer (an
# implementation nobody here wrote): regenerate the vectors and compare them
# with the committed ones that the Rust tests read.
crosscheck:
	$(PY) crates/wire/tests/scapy/gen_vectors.py --check crates/wire/tests/vectors/scapy_roce.txt

# Seeded simulation of the RC/UC/UD transports between two engines over a
# network that loses, duplicates, reorders, corrupts and marks packets; every
# completion and byte is checked. Its last line is "N passed, M failed";
# a failing seed replays exactly with the command it prints.
SIM := $(CARGO) run --release -q -p softverbs-sim --
sim:
	$(SIM) --seeds 2000 --loss 0.1 --dup 0.05 --reorder 0.1
	$(SIM) --seeds 1000 --loss 0.1 --dup 0.05 --reorder 0.1 --corrupt 0.02 --seed-base 1000000
	$(SIM) --seeds 1000 --loss 0.05 --dup 0.05 --reorder 0.1 --mark 0.3 --seed-base 2000000
	$(SIM) --seeds 1000 --loss 0.1 --dup 0.05 --reorder 0.1 --same-host --seed-base 3000000

# The rdma-core provider: the Rust staticlib linked into a shared object
# whose exported symbols carry libibverbs' symbol versions (rustc's cdylib
# brings its own version script, hence the separate link step).
TARGET ?= target
SHIM_SO := $(TARGET)/release/libsoftverbs-rdmav34.so
shim: $(SHIM_SO)
$(SHIM_SO): FORCE
	$(CARGO) build --release -p softverbs-shim
	$(CARGO) build --release -p softverbs
	$(CARGO) build --release -p softverbs-api --example loopback
	cc -shared -o $@ -Wl,-soname,libsoftverbs-rdmav34.so \
	  -Wl,--version-script=provider-shim/softverbs.map \
	  -Wl,--whole-archive $(TARGET)/release/libsoftverbs_shim.a -Wl,--no-whole-archive \
	  -libverbs -lpthread -ldl -lm -lgcc_s -lc
	cc -O2 -Wall -Wextra -o $(TARGET)/release/softverbs-verbs-exec \
	  tests/conformance/verbs_exec.c -libverbs
.PHONY: FORCE
FORCE:

# The main job: rdma-core's ibv_rc_pingpong, server and client as two
# processes, over softverbs0 on 127.0.0.1 (no root, no kernel module).
SOFTVERBS := $(TARGET)/release/softverbs
demo: deps shim
	@$(SOFTVERBS) devices
	@echo "== ibv_rc_pingpong server and client over softverbs0"
	@(timeout 60 $(SOFTVERBS) run -- ibv_rc_pingpong -d softverbs0 -g 0 -p 18515 | sed 's/^/server: /') & \
	  srv=$$!; tests/programs/lib.sh wait_listen 18515 "" $$srv || { kill $$srv; exit 1; }; \
	  $(SOFTVERBS) run -- ibv_rc_pingpong -d softverbs0 -g 0 -p 18515 127.0.0.1 | sed 's/^/client: /'; wait $$srv

# The generic modules of rdma-core's pyverbs test suite against softverbs0.
pyverbs: shim
	tests/pyverbs/run.sh $(SHIM_SO)
	SOFTVERBS_SHM=0 tests/pyverbs/run.sh $(SHIM_SO)

# Unmodified rdma-core programs (ibverbs-utils, perftest, and over
# rdma_cm rdmacm-utils, perftest -R and qperf) over softverbs
# in preload mode: two processes on loopback, the wire path under load
# (nothing lost), then two hosts (network namespaces joined by a veth
# pair), then plugin mode, then fault injection (SOFTVERBS_FAULTS), the
# verbs trace (SOFTVERBS_TRACE) and the differential runner (softverbs
# conformance; against rxe it runs in make interop). The
# namespaced ones and plugin mode need root: without it they fail under
# CI=true and are skipped, loudly, elsewhere.
programs: shim
	tests/programs/run.sh $(SHIM_SO)
	SOFTVERBS_SHM=0 tests/programs/run.sh $(SHIM_SO)
	tests/programs/same_host.sh $(SHIM_SO)
	tests/programs/wire_load.sh $(SHIM_SO)
	tests/programs/faults.sh $(SHIM_SO)
	tests/programs/trace.sh $(SHIM_SO)
	tests/programs/conformance.sh $(SHIM_SO)
	tests/programs/rust_api.sh $(SHIM_SO)
	tests/programs/rdma_cm.sh $(SHIM_SO)
	tests/programs/daemon.sh $(SHIM_SO)
	tests/programs/netns.sh $(SHIM_SO)
	tests/programs/plugin.sh $(SHIM_SO)

# Verbs stacks that inspect the system, under `softverbs run` (no root):
# the device view (sysfs, /dev/infiniband, dlopen users), UCX, libfabric,
# Open MPI over UCX across two network namespaces, and Rust bindings.
# Installs what it needs (scripts/setup-deps.sh).
.PHONY: ecosystem
ecosystem: shim
	tests/ecosystem/run.sh $(SHIM_SO)

# Interoperability with the kernel's Soft-RoCE (rxe), in a VM booting
# Debian's own kernel under QEMU (software emulation, no network device):
# rxe against rxe, then rxe against softverbs in both roles, IPv4 and IPv6,
# and multicast both ways. Part of `make test`. Installs what it needs
# (root). See tests/interop/README.md.
.PHONY: interop
interop: shim
	tests/interop/run.sh $(SHIM_SO)

# softverbs against a RoCEv2 peer that is not softverbs: a scapy script on
# a UDP socket and a verbs program over the provider exchange immediate
# data both ways (UD SEND_WITH_IMM, RC RDMA WRITE_WITH_IMM); the bytes on
# the wire, ntohl(wc.imm_data), the ICRCs and the real IP header are checked.
.PHONY: wire-peer
wire-peer: deps shim
	$(PY) tests/programs/wire_peer.py $(SHIM_SO)

# Packet capture (SOFTVERBS_PCAP, softverbs daemon --pcap): rdma-core
# programs over softverbs write pcap files that Debian's tshark must decode
# as RoCEv2 (no "Decode As", nothing malformed, checksums right) and whose
# every ICRC scapy must find valid.
.PHONY: capture
capture: deps shim
	tests/programs/capture.sh $(SHIM_SO)

# Plugin mode (root): the provider where rdma-core looks for providers,
# the driver file that names it, and the softverbs command. Then
# `softverbs setup` creates the device entries (docs/architecture.md).
PROVIDER_DIR ?= /usr/lib/x86_64-linux-gnu/libibverbs
DRIVER_DIR ?= /etc/libibverbs.d
BIN_DIR ?= /usr/local/bin
install: shim
	install -D -m 0644 $(SHIM_SO) $(DESTDIR)$(PROVIDER_DIR)/libsoftverbs-rdmav34.so
	install -d $(DESTDIR)$(DRIVER_DIR)
	echo "driver softverbs" > $(DESTDIR)$(DRIVER_DIR)/softverbs.driver
	install -D -m 0755 $(SOFTVERBS) $(DESTDIR)$(BIN_DIR)/softverbs
	install -D -m 0755 $(TARGET)/release/softverbs-verbs-exec \
	  $(DESTDIR)$(BIN_DIR)/../lib/softverbs/softverbs-verbs-exec

uninstall:
	rm -f $(DESTDIR)$(PROVIDER_DIR)/libsoftverbs-rdmav34.so \
	  $(DESTDIR)$(DRIVER_DIR)/softverbs.driver $(DESTDIR)$(BIN_DIR)/softverbs \
	  $(DESTDIR)$(BIN_DIR)/../lib/softverbs/softverbs-verbs-exec

clean:
	$(CARGO) clean

# Benchmarks (issue 5): not part of `make test`, whose checks must not
# depend on timing. `make bench` builds in release mode, runs perftest over
# softverbs beside raw loopback baselines (iperf3 TCP, a UDP ping-pong,
# memcpy), the scale and engine-alone benchmarks, prints the table and
# writes docs/perf.md and docs/perf-bandwidth.png. See bench/README.md.
.PHONY: bench bench-deps bench-build
bench-deps:
	@bash bench/setup-deps.sh

bench-build: shim
	$(CARGO) build --release -p softverbs-baselines
	$(CARGO) bench -p softverbs-engine --bench engine --no-run
	$(CARGO) build --release -p softverbs-shim --example checked_memory

bench: bench-deps bench-build
	bench/run.sh
