//! Finding the provider library and rdma-core.

use std::path::{Path, PathBuf};

/// The provider's file name.
pub const PROVIDER: &str = "libsoftverbs-rdmav34.so";

/// Where libibverbs lives on Debian-like systems.
const LIBIBVERBS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
    "/usr/lib64/libibverbs.so.1",
    "/usr/lib/libibverbs.so.1",
];

/// The executor of `softverbs conformance` (tests/conformance/verbs_exec.c,
/// built by `make shim`).
pub const EXECUTOR: &str = "softverbs-verbs-exec";

/// The provider library: `$SOFTVERBS_LIB`, else next to this executable
/// (a build tree), else the rdma-core provider directory (`make install`).
pub fn provider() -> Result<PathBuf, String> {
    let installed = PathBuf::from("/usr/lib/x86_64-linux-gnu/libibverbs").join(PROVIDER);
    find(PROVIDER, "SOFTVERBS_LIB", installed)
}

/// The conformance executor: `$SOFTVERBS_VERBS_EXEC`, else next to this
/// executable, else where `make install` puts it.
pub fn executor() -> Result<PathBuf, String> {
    find(
        EXECUTOR,
        "SOFTVERBS_VERBS_EXEC",
        PathBuf::from("/usr/local/lib/softverbs").join(EXECUTOR),
    )
}

/// `name`: the path in `$env_var`, else next to this executable or in
/// ../lib/softverbs from it, else `installed`.
fn find(name: &str, env_var: &str, installed: PathBuf) -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var(env_var) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{env_var}={} does not exist", p.display()))
        };
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    let candidates = exe_dir
        .iter()
        .flat_map(|d| [d.join(name), d.join("../lib/softverbs").join(name)])
        .chain([installed]);
    let mut tried = Vec::new();
    for c in candidates {
        if c.is_file() {
            return c
                .canonicalize()
                .map_err(|e| format!("{}: {e}", c.display()));
        }
        tried.push(c.display().to_string());
    }
    Err(format!(
        "{name} not found (tried {}); build it with `make shim` or set {env_var}",
        tried.join(", ")
    ))
}

/// rdma-core's libibverbs must be installed for any verbs program.
pub fn check_rdma_core() -> Result<(), String> {
    if LIBIBVERBS.iter().any(|p| Path::new(p).exists()) {
        Ok(())
    } else {
        Err("rdma-core's libibverbs.so.1 is not installed (Debian: apt-get install libibverbs1 ibverbs-providers)".into())
    }
}
