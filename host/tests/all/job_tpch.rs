//! The TPC-H Q1-style example end to end over a `lineitem` table made by
//! coordhost-datagen; the expected result is computed in the test straight
//! from tpchgen's rows (integers in cents), not from any CSV or our output.

use std::collections::BTreeMap;

use crate::support::job::{example_job, options, run_ok};
use crate::support::published_lines;
use tpchgen::generators::LineItemGenerator;

#[derive(Default)]
struct Group {
    count: i128,
    qty: i128,
    price_cents: i128,
    disc_cents: i128,
}

/// `num / den` rounded half away from zero to 2 decimals, where `num` is in
/// units of `10^-scale`.
fn fixed2(num: i128, den: i128, scale: u32) -> String {
    // value*100 = num * 100 / (den * 10^scale)
    let n = num * 100;
    let d = den * 10i128.pow(scale);
    let q = (2 * n + d) / (2 * d); // values are non-negative here
    format!("{}.{:02}", q / 100, q % 100)
}

fn expected(scale: f64, parts: i32) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), Group> = BTreeMap::new();
    for part in 1..=parts {
        for li in LineItemGenerator::new(scale, part, parts).iter() {
            // TPC-H dates print as ISO `YYYY-MM-DD`, so text order is date order.
            if li.l_shipdate.to_string().as_str() > "1998-09-02" {
                continue;
            }
            let g = groups
                .entry((li.l_returnflag.to_string(), li.l_linestatus.to_string()))
                .or_default();
            g.count += 1;
            g.qty += i128::from(li.l_quantity);
            g.price_cents += i128::from(li.l_extendedprice.0);
            g.disc_cents += i128::from(li.l_discount.0);
        }
    }
    groups
        .into_iter()
        .map(|((flag, status), g)| {
            [
                flag,
                status,
                g.count.to_string(),
                fixed2(g.qty, 1, 0),
                fixed2(g.price_cents, 1, 2),
                fixed2(g.qty, g.count, 0),
                fixed2(g.price_cents, g.count, 2),
                fixed2(g.disc_cents, g.count, 2),
            ]
            .join(",")
        })
        .collect()
}

#[test]
fn tpch_q1_example_matches_an_independent_computation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("lineitem");
    let (_, rows) = coordhost_datagen::write_lineitem(&data, 0.01, 3).expect("data");
    assert_eq!(rows, 60_175, "tpchgen's row count for scale 0.01");
    let job = example_job("tpch-q1.toml", "build/data/tpch-sf0.1", &data, tmp.path());
    // Smaller splits than the example's so that several readers share files.
    let text = std::fs::read_to_string(&job)
        .expect("job")
        .replace("split-bytes = 4194304", "split-bytes = 500000");
    std::fs::write(&job, text).expect("job");
    let data_dir = tmp.path().join("state");
    let summary = run_ok(&options(&job, &data_dir, 2));

    let mut lines = published_lines(&data_dir.join("output/tpch-q1"));
    let header =
        "l_returnflag,l_linestatus,count_order,sum_qty,sum_base_price,avg_qty,avg_price,avg_disc";
    let headers = lines.iter().filter(|l| *l == header).count();
    assert_eq!(
        headers,
        usize::from(summary.vertices[1].parallelism as u8),
        "one header per part file"
    );
    lines.retain(|l| l != header);
    lines.sort();
    assert_eq!(lines, expected(0.01, 3));
    assert_eq!(summary.vertices[0].records_in, rows);
}
