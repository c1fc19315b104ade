//! The fuzz targets on the stable toolchain, without libFuzzer: every file
//! of the committed corpus replays clean, the committed seeds are the ones
//! `softverbs_fuzz::seeds` makes (`UPDATE_SEEDS=1` rewrites them), and the
//! seeds do reach what they were written to reach. `FUZZ_REPLAY=FILE`
//! replays one more input (a crash file) through the target `FUZZ_TARGET`.

use softverbs_engine::{DatapathStats, QpState, QpType, WcStatus};
use softverbs_fuzz::packets::qp_index;
use softverbs_fuzz::target::Target;
use softverbs_fuzz::verbs::{Step, World, MEM_BASE};
use softverbs_fuzz::{packets, seeds, TARGETS};
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("readable entry").path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn committed_seeds_are_current() {
    let update = std::env::var_os("UPDATE_SEEDS").is_some();
    for (target, _) in TARGETS {
        let dir = corpus_dir(target);
        let made = seeds::of(target);
        if update {
            fs::create_dir_all(&dir).unwrap();
            for old in files(&dir) {
                if old
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("seed-")
                {
                    fs::remove_file(old).unwrap();
                }
            }
        }
        for (name, bytes) in &made {
            let path = dir.join(format!("seed-{name}"));
            if update {
                fs::write(&path, bytes).unwrap();
            }
            let committed = fs::read(&path).unwrap_or_default();
            assert!(
                committed == *bytes,
                "{} is not what seeds::of({target:?}) makes: run UPDATE_SEEDS=1 cargo test --manifest-path fuzz/Cargo.toml --test corpus",
                path.display()
            );
        }
        let seeds_on_disk = files(&dir)
            .iter()
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("seed-")
            })
            .count();
        assert_eq!(
            seeds_on_disk,
            made.len(),
            "stale seed files in {}",
            dir.display()
        );
    }
}

#[test]
fn every_corpus_file_replays_clean() {
    if std::env::var_os("UPDATE_SEEDS").is_some() {
        return; // the files are being rewritten by the test above
    }
    let mut failed = Vec::new();
    for (target, run) in TARGETS {
        for path in files(&corpus_dir(target)) {
            let data = fs::read(&path).unwrap();
            if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
                failed.push(path.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that panic: {failed:#?}");
}

#[test]
fn replay_one_file() {
    let Some(file) = std::env::var_os("FUZZ_REPLAY") else {
        return;
    };
    let target = std::env::var("FUZZ_TARGET").expect("FUZZ_TARGET names the target");
    let (_, run) = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("FUZZ_TARGET is wire, packets or verbs");
    run(&fs::read(file).unwrap());
}

/// Each packet seed gets past the engine's first checks (it parses, names
/// a QP of its transport, comes from the peer), except those for RC and UC
/// QPs in RESET and INIT, which have no peer yet.
#[test]
fn packet_seeds_reach_their_qp() {
    let unconnected = |n: &str| n.ends_with("-in-reset") || n.ends_with("-in-init");
    for (name, data) in seeds::of("packets") {
        if unconnected(&name) {
            continue;
        }
        let mut r = softverbs_fuzz::bytes::Reader::new(&data);
        let mut t = Target::new();
        let before = *t.engine.stats();
        while let Some(frame) = packets::Frame::decode(&mut r) {
            packets::deliver(&mut t, frame);
        }
        // The ends of WRITEs that reach their QP are counted too, and so
        // are what UC and UD QPs drop by their own rules once the packet
        // reached them; only the counts of drops on arrival matter here.
        let after = DatapathStats {
            rx_write_ends: before.rx_write_ends,
            rx_dropped_by_qp: before.rx_dropped_by_qp,
            ..*t.engine.stats()
        };
        assert_eq!(after, before, "seed {name} was dropped on arrival");
    }
    assert!(qp_index(QpType::Ud, QpState::Err) > qp_index(QpType::Rc, QpState::Rts));
}

/// The verb seeds really move data: after the RC SEND seed node 1 has a
/// successful receive completion and the bytes sent.
#[test]
fn verb_seeds_move_data() {
    let (_, data) = seeds::of("verbs")
        .into_iter()
        .find(|(n, _)| n == "rc-send")
        .unwrap();
    let steps = Step::decode_all(&data);
    let (poll, steps) = steps.split_last().unwrap();
    let mut w = World::new();
    for s in steps {
        w.step(*s);
    }
    let mut wcs = Vec::new();
    let cq = w.nodes[1].cqs[0];
    w.nodes[1].e.poll_cq(cq, 16, &mut wcs).unwrap();
    assert!(
        wcs.iter().any(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    let sent = w.nodes[0].mem.slice(MEM_BASE + 0x1000 + 0x200, 64).to_vec();
    assert_eq!(w.nodes[1].mem.slice(MEM_BASE + 0x1000 + 0x100, 64), sent);
    let _ = poll;
}
