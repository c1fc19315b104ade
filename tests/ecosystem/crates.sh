# Sourced by the scripts that build published Rust crates as a downstream
# user gets them (tests/ecosystem/rust.sh, tests/interop/run.sh).
# fetch_crates DIR NAME=VERSION...: each crate's sources, fetched by cargo
# from crates.io for a scratch package that depends on the pinned
# versions, copied to DIR/NAME-VERSION. On failure prints why on standard
# output and returns 1.
fetch_crates() {
  local dir=$1 spec name version src registry
  shift
  mkdir -p "$dir/fetch/src"
  {
    printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n'
    for spec in "$@"; do printf '%s = "=%s"\n' "${spec%%=*}" "${spec#*=}"; done
  } > "$dir/fetch/Cargo.toml"
  echo 'fn main() {}' > "$dir/fetch/src/main.rs"
  if ! cargo fetch --manifest-path "$dir/fetch/Cargo.toml" > "$dir/fetch.out" 2>&1; then
    echo "cargo cannot fetch $* from crates.io: $(tail -n 3 "$dir/fetch.out")"
    return 1
  fi
  registry=${CARGO_HOME:-$HOME/.cargo}/registry/src
  for spec in "$@"; do
    name=${spec%%=*} version=${spec#*=}
    src=$(find "$registry" -mindepth 2 -maxdepth 2 -name "$name-$version" -type d | head -n 1)
    if [ -z "$src" ] || ! cp -r "$src" "$dir/$name-$version"; then
      echo "cargo fetched no $name-$version into $registry"
      return 1
    fi
  done
}
