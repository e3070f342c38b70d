//! Plugin host figures (issue "plugin host", item 7; issue "plugins in any
//! Wasm language", item 5), printed as a table: per sample enumerator
//! (Rust, Python, JavaScript) the component size, the first load (compile)
//! and the cached load, instantiation, a host→plugin split-request round
//! trip, and a batch snapshot + restore of about 1 MiB of state.
//!
//! Run with `cargo bench -p coordhost --bench plugin` after `make plugins`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use coordhost::plugin::{DirGrant, HostOptions, Limits, PluginHost, PluginKind, PluginSpec};

fn plugin_path(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = root.join("build/plugins").join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `make plugins`",
        path.display()
    );
    path
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_micros(10) {
        format!("{:.2} µs", d.as_secs_f64() * 1e6)
    } else if d < Duration::from_millis(10) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

fn spec(name: &str, dir: &Path) -> PluginSpec {
    PluginSpec {
        name: name.into(),
        path: plugin_path(name),
        kind: PluginKind::SplitEnumerator,
        config: vec![
            ("dir".into(), dir.to_str().unwrap().into()),
            ("split-bytes".into(), "1".into()),
        ],
        dirs: vec![DirGrant {
            host: dir.to_path_buf(),
            writable: false,
        }],
        stores: Vec::new(),
        limits: Limits {
            call_timeout: Duration::from_secs(300),
            ..Limits::default()
        },
    }
}

fn main() {
    // One file of 12 000 bytes cut into 1-byte splits: ~1 MiB of enumerator state.
    let data = tempfile::Builder::new()
        .prefix("coordhost-bench")
        .tempdir()
        .unwrap();
    std::fs::write(
        data.path().join("input-file-for-the-benchmark.txt"),
        vec![b'x'; 12_000],
    )
    .unwrap();
    let cache = tempfile::tempdir().unwrap();

    println!(
        "{:<16} {:>8} {:>11} {:>11} {:>11} {:>12} {:>10} {:>11} {:>11}",
        "plugin",
        "size",
        "first load",
        "cached",
        "instantiate",
        "split req",
        "state",
        "snapshot",
        "restore"
    );
    for name in ["file-enumerator", "py-enumerator", "js-enumerator"] {
        let spec = spec(name, data.path());
        let size = std::fs::metadata(&spec.path).unwrap().len();

        let began = Instant::now();
        let host = PluginHost::new(HostOptions {
            cache_dir: Some(cache.path().to_path_buf()),
        })
        .unwrap();
        host.load(&spec).unwrap();
        let first = began.elapsed();
        let cached = median(
            (0..10)
                .map(|_| {
                    let fresh = PluginHost::new(HostOptions {
                        cache_dir: Some(cache.path().to_path_buf()),
                    })
                    .unwrap();
                    let t = Instant::now();
                    fresh.load(&spec).unwrap();
                    t.elapsed()
                })
                .collect(),
        );
        let plugin = host.load(&spec).unwrap();
        let instantiate = median(
            (0..20)
                .map(|_| {
                    let t = Instant::now();
                    drop(plugin.split_enumerator(1).unwrap());
                    t.elapsed()
                })
                .collect(),
        );

        let mut e = plugin.split_enumerator(1).unwrap();
        e.start().unwrap();
        e.add_reader(0).unwrap();
        // Round trip: request a split, then give it back, so state stays the same size.
        let rounds = 2_000;
        let t = Instant::now();
        for _ in 0..rounds {
            let actions = e.handle_split_request(0, None).unwrap();
            if let Some(coordhost::plugin::EnumeratorAction::Assign { splits, .. }) =
                actions.into_iter().next()
            {
                e.add_splits_back(splits, 0).unwrap();
            }
        }
        let round_trip = t.elapsed() / (rounds * 2);

        let snapshots: Vec<(Duration, Vec<u8>)> = (0..5)
            .map(|_| {
                let t = Instant::now();
                let bytes = e.snapshot_state(-1).unwrap();
                (t.elapsed(), bytes)
            })
            .collect();
        let state = snapshots[0].1.clone();
        let snapshot = median(snapshots.into_iter().map(|(d, _)| d).collect());
        let restore = median(
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    let mut r = plugin.restore_split_enumerator(1, &state).unwrap();
                    r.start().unwrap();
                    t.elapsed()
                })
                .collect(),
        );
        println!(
            "{:<16} {:>6.1}MB {:>11} {:>11} {:>11} {:>12} {:>8}KiB {:>11} {:>11}",
            name,
            size as f64 / 1e6,
            fmt(first),
            fmt(cached),
            fmt(instantiate),
            fmt(round_trip),
            state.len() / 1024,
            fmt(snapshot),
            fmt(restore),
        );
    }
    println!(
        "split req = one host→plugin call (handle-split-request or add-splits-back), mean of 4 000"
    );
}
