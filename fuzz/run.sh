#!/usr/bin/env bash
# Runs each fuzz target under libFuzzer (cargo-fuzz) for SECONDS seconds.
#
#   fuzz/run.sh SECONDS [TARGET...]      (default: every target)
#
# Installs cargo-fuzz from crates.io if it is missing. cargo-fuzz passes
# rustc flags that only nightly accepts (-Zsanitizer, --cfg fuzzing is
# fine); RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them, so no
# nightly is needed. The sanitizer is off by default (FUZZ_SANITIZER=none:
# the code under test has no unsafe, and a panic is the finding); debug
# assertions, and with them overflow checks, are on.
#
# New inputs go to fuzz/work/TARGET (not committed); the committed seeds in
# fuzz/corpus/TARGET are read only. A crash, timeout or out-of-memory input
# is saved under fuzz/artifacts/TARGET, printed with the commands that
# replay it, and makes the script fail. The last line is
# "fuzz: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")"

seconds=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(wire packets verbs)
sanitizer=${FUZZ_SANITIZER:-none}
cargo_fuzz_version=0.13.2
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
  echo "fuzz: installing cargo-fuzz $cargo_fuzz_version"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked || exit 1
fi

cargo fuzz build -s "$sanitizer" -a || { echo "fuzz: the targets do not build"; exit 1; }

# Prints what a failed run found and how to replay it.
report() {
  local target=$1 log=$2 artifact
  artifact=$(grep -oE "artifacts/$target/[a-z-]+-[0-9a-f]+" "$log" | tail -1)
  echo "fuzz: $target FAILED; the end of its log ($log):"
  { grep -A2 -m1 "panicked at" "$log"; grep -E "SUMMARY|Base64" "$log"; } | head -20 | sed 's/^/    /'
  if [ -n "$artifact" ]; then
    echo "fuzz: input saved as fuzz/$artifact; replay it with"
    echo "    cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s $sanitizer -a $target $artifact"
    echo "  or on plain stable, without libFuzzer:"
    echo "    FUZZ_TARGET=$target FUZZ_REPLAY=$PWD/$artifact cargo test --manifest-path fuzz/Cargo.toml --test corpus replay_one_file -- --nocapture"
    echo "  Once fixed, copy it into fuzz/corpus/$target/ so that make test replays it."
  fi
}

passed=0
failed=0
for target in "${targets[@]}"; do
  mkdir -p "work/$target" "artifacts/$target"
  log="work/$target.log"
  echo "fuzz: $target for ${seconds}s"
  if cargo fuzz run -s "$sanitizer" -a "$target" "work/$target" "corpus/$target" -- \
      -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      >"$log" 2>&1; then
    grep -E "^Done|DONE" "$log" | tail -1 | sed "s/^/fuzz: $target: /"
    passed=$((passed + 1))
  else
    report "$target" "$log"
    failed=$((failed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
