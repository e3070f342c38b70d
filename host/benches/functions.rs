//! Scalar-function figures (issue 27): the cost of one `invoke` through the
//! real plugin host (`ScalarFunction::call`: encode the arguments as an
//! Arrow IPC stream, copy them into the instance, run the guest, copy the
//! answer out, decode and check it), per sample function and batch size,
//! printed as a table: the Rust samples `faulty-function` (`x + 1` on
//! `bigint`) and `tax-function` (`tax(decimal(15,2), varchar)`), the
//! Python `py-function` (`net_price(decimal(15,2), decimal(15,2))`) and
//! the JavaScript `js-function` (`priority(varchar)`). The per-row cost is
//! the slope between the 1-row and the 8192-row batch.
//!
//! Run with `cargo bench -p coordhost --bench functions` after `make plugins`
//! (docs/write-a-plugin.md gives the figures of one run).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Decimal128Array, Int64Array, StringArray};
use coordhost::plugin::{HostOptions, Limits, PluginHost, PluginKind, PluginSpec};

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
    if d < Duration::from_millis(10) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];
const PRIORITIES: [&str; 5] = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"];

/// The argument columns of sample `name` for `rows` rows.
fn arguments(name: &str, rows: usize) -> Vec<ArrayRef> {
    let money = |f: fn(usize) -> i128| -> ArrayRef {
        Arc::new(
            (0..rows)
                .map(|i| Some(f(i)))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(15, 2)
                .unwrap(),
        )
    };
    match name {
        "faulty-function" => vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))],
        "tax-function" => vec![
            money(|i| 100_000 + i as i128 * 37),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| REGIONS[i % 5]),
            )),
        ],
        "py-function" => vec![
            money(|i| 100_000 + i as i128 * 37),
            money(|i| (i % 11) as i128),
        ],
        "js-function" => vec![Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| PRIORITIES[i % 5]),
        ))],
        other => panic!("no arguments for {other}"),
    }
}

fn main() {
    let cache = tempfile::tempdir().unwrap();
    let host = PluginHost::new(HostOptions {
        cache_dir: Some(cache.path().to_path_buf()),
    })
    .unwrap();
    let sizes = [1usize, 1024, 8192];
    print!("{:<16} {:<8}", "function", "language");
    for rows in sizes {
        print!(" {:>14}", format!("{rows} rows"));
    }
    println!(" {:>12}", "per row");
    for (name, language) in [
        ("faulty-function", "Rust"),
        ("tax-function", "Rust"),
        ("py-function", "Python"),
        ("js-function", "JS"),
    ] {
        let spec = PluginSpec {
            name: name.into(),
            path: plugin_path(name),
            kind: PluginKind::ScalarFunction,
            config: Vec::new(),
            dirs: Vec::new(),
            limits: Limits {
                call_timeout: Duration::from_secs(300),
                ..Limits::default()
            },
        };
        let f = host.load(&spec).unwrap().scalar_function().unwrap();
        let mut cells = Vec::new();
        for rows in sizes {
            let args = arguments(name, rows);
            // The first call makes the instance; it is not counted.
            f.call(&args, rows).unwrap();
            let runs = if rows > 1000 { 20 } else { 200 };
            cells.push(median(
                (0..runs)
                    .map(|_| {
                        let t = Instant::now();
                        let out = f.call(&args, rows).unwrap();
                        assert_eq!(out.len(), rows);
                        t.elapsed()
                    })
                    .collect(),
            ));
        }
        print!("{name:<16} {language:<8}");
        for c in &cells {
            print!(" {:>14}", fmt(*c));
        }
        let slope = (cells[2].saturating_sub(cells[0])).as_secs_f64() / 8191.0;
        println!(" {:>9.3} µs", slope * 1e6);
    }
    println!("median of 200 calls (1 and 1024 rows) or 20 calls (8192 rows) on one warm instance");
}
