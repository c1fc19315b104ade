# softverbs: top-level tasks. `make test` is what CI runs (via .ci/run).
SHELL := /bin/bash
CARGO ?= cargo
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: all build test fmt fmt-check clippy unit crosscheck deps sim bench clean

all: build

build:
	$(CARGO) build --workspace --all-targets

# Everything CI checks, in the order that fails fastest.
test: deps fmt-check clippy crosscheck unit

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

# The ICRC and header encodings checked against scapy's RoCE layer (an
# implementation nobody here wrote): regenerate the vectors and compare them
# with the committed ones that the Rust tests read.
crosscheck:
	$(PY) crates/wire/tests/scapy/gen_vectors.py --check crates/wire/tests/vectors/scapy_roce.txt

clean:
	$(CARGO) clean
