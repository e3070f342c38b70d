"""bench-tpch.py: TPC-H Q1 over one lineitem file, coordhost vs DuckDB vs Polars.

Run by scripts/bench-tpch.sh (which makes the venv, the binaries and the data);
see that script for the arguments. Each round runs every engine once, one
after the other (so drift on a shared machine hits all alike); each engine
runs as its own process, timed from spawn to exit, its peak resident set
taken from the kernel (wait4's ru_maxrss). DuckDB and Polars run inside a
Python interpreter of the bench venv: their figures include the interpreter
and the import of the library, as coordhost's include loading its plugins.

The query is examples/tpch-q1.toml's (TPC-H Q1 without the charge columns):

    SELECT l_returnflag, l_linestatus, count(*), sum(l_quantity),
           sum(l_extendedprice), avg(l_quantity), avg(l_extendedprice), avg(l_discount)
    FROM lineitem WHERE l_shipdate <= date '1998-09-02'
    GROUP BY l_returnflag, l_linestatus

The results must agree to the cent: the same groups with the same counts,
and every other value within 0.01 between every two engines; otherwise the
script says which and exits 1.
"""

import argparse
import csv
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from decimal import Decimal

COLUMNS = [
    ("l_orderkey", "BIGINT"),
    ("l_partkey", "BIGINT"),
    ("l_suppkey", "BIGINT"),
    ("l_linenumber", "BIGINT"),
    ("l_quantity", "DECIMAL(15,2)"),
    ("l_extendedprice", "DECIMAL(15,2)"),
    ("l_discount", "DECIMAL(15,2)"),
    ("l_tax", "DECIMAL(15,2)"),
    ("l_returnflag", "VARCHAR"),
    ("l_linestatus", "VARCHAR"),
    ("l_shipdate", "DATE"),
    ("l_commitdate", "DATE"),
    ("l_receiptdate", "DATE"),
    ("l_shipinstruct", "VARCHAR"),
    ("l_shipmode", "VARCHAR"),
    ("l_comment", "VARCHAR"),
]
CENT = Decimal("0.01")
VALUES = ["count_order", "sum_qty", "sum_base_price", "avg_qty", "avg_price", "avg_disc"]

DUCKDB = r"""
import json, sys, duckdb
path, fmt, columns = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if fmt == "csv":
    cols = ", ".join(f"'{n}': '{t}'" for n, t in columns)
    source = f"read_csv('{path}', header = true, delim = ',', columns = {{{cols}}})"
else:
    source = f"read_parquet('{path}')"
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
rows = con.sql(f'''
    SELECT l_returnflag, l_linestatus, count(*), sum(l_quantity), sum(l_extendedprice),
           avg(l_quantity), avg(l_extendedprice), avg(l_discount)
    FROM {source} WHERE l_shipdate <= DATE '1998-09-02'
    GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus''').fetchall()
print(json.dumps([[str(v) for v in r] for r in rows]))
"""

POLARS = r"""
import datetime, json, sys, polars as pl
path, fmt = sys.argv[1], sys.argv[2]
if fmt == "csv":
    frame = pl.scan_csv(path, schema_overrides={"l_shipdate": pl.Date})
else:
    frame = pl.scan_parquet(path)
cutoff = datetime.date(1998, 9, 2)
if frame.collect_schema()["l_shipdate"] == pl.String:
    cutoff = "1998-09-02"
out = (frame.filter(pl.col("l_shipdate") <= cutoff)
       .group_by("l_returnflag", "l_linestatus")
       .agg(pl.len().alias("count_order"), pl.col("l_quantity").sum().alias("sum_qty"),
            pl.col("l_extendedprice").sum().alias("sum_base_price"),
            pl.col("l_quantity").mean().alias("avg_qty"),
            pl.col("l_extendedprice").mean().alias("avg_price"),
            pl.col("l_discount").mean().alias("avg_disc"))
       .sort("l_returnflag", "l_linestatus")
       .collect())
print(json.dumps([[str(v) for v in r] for r in out.rows()]))
"""


def die(msg):
    print(f"bench-tpch: {msg}", file=sys.stderr)
    sys.exit(1)


def timed(argv, stdout):
    """Runs argv; returns (wall seconds, peak RSS MiB, exit status)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def coordhost_job(checkout, example, data, work):
    """The checkout's example job, paths made absolute and pointed at `data`,
    no record delay, recovery on."""
    text = open(os.path.join(checkout, example), encoding="utf-8").read()
    text = text.replace("${job_dir}/../", checkout + "/").replace('"../', f'"{checkout}/')
    text, n = re.subn(re.escape(checkout) + r'/build/data/[^"/]+', data, text)
    if n < 2:
        die(f"{example}: expected the data folder in the enumerator's `dir` and its grant")
    text = re.sub(r"record-delay-us\s*=\s*\d+", "record-delay-us = 0", text)
    if not re.search(r"^\[recovery\]\s*\nenabled\s*=\s*true", text, re.M):
        die(f"{example}: expected `[recovery]` with `enabled = true` first")
    job = os.path.join(work, os.path.basename(example))
    with open(job, "w", encoding="utf-8") as f:
        f.write(text)
    return job


def run_coordhost(args, job, work, log):
    data_dir = os.path.join(work, "coordhost-data")
    shutil.rmtree(data_dir, ignore_errors=True)
    summary = os.path.join(work, "summary.json")
    argv = [args.bin, "run", job, "--data-dir", data_dir, "--summary-json", summary,
            "--cache-dir", args.cache]
    wall, rss, code = timed(argv, log)
    if code != 0:
        die(f"coordhost run {job} exited {code}; its output: {log.name}")
    s = json.load(open(summary, encoding="utf-8"))
    if s["status"] != "finished":
        die(f"coordhost: {s}")
    parts = sorted(glob.glob(os.path.join(data_dir, "output", "**", "part-*.csv"), recursive=True))
    rows = []
    for p in parts:
        with open(p, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for r in reader:
                rows.append([r["l_returnflag"], r["l_linestatus"]] + [r[v] for v in VALUES])
    rows.sort()
    return wall, rss, rows


def run_python(args, script, path, fmt, log):
    out = os.path.join(os.path.dirname(log.name), "result.json")
    with open(out, "w", encoding="utf-8") as f:
        argv = [args.python, "-c", script, path, fmt, json.dumps(COLUMNS)]
        wall, rss, code = timed(argv, f)
    if code != 0:
        die(f"{argv[:2]} {path} exited {code}: {open(out, encoding='utf-8').read()[-2000:]}")
    # The result is the last line (a library may print more before it).
    return wall, rss, json.loads(open(out, encoding="utf-8").read().strip().splitlines()[-1])


def check_agree(label, results):
    """Every two engines: the same groups and counts, other values within a cent."""
    names = list(results)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ra, rb = results[a], results[b]
            keys_a = [tuple(r[:2]) for r in ra]
            keys_b = [tuple(r[:2]) for r in rb]
            if keys_a != keys_b:
                die(f"{label}: {a} and {b} disagree on the groups: {keys_a} vs {keys_b}")
            for x, y in zip(ra, rb):
                if int(x[2]) != int(y[2]):
                    die(f"{label}: count_order of {x[:2]}: {a} {x[2]}, {b} {y[2]}")
                for col, u, v in zip(VALUES[1:], x[3:], y[3:]):
                    if abs(Decimal(u) - Decimal(v)) >= CENT:
                        die(f"{label}: {col} of {x[:2]}: {a} {u}, {b} {v} (differ by a cent or more)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkout", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--python", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", required=True)
    p.add_argument("--cache", required=True, help="coordhost's compiled-component cache")
    p.add_argument("--case", action="append", required=True,
                   help="FORMAT:DATA_FILE:EXAMPLE (e.g. csv:/x/lineitem-1.csv:examples/tpch-q1.toml)")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    table = []
    for case in args.case:
        fmt, path, example = case.split(":", 2)
        job = coordhost_job(args.checkout, example, os.path.dirname(path), args.work)
        # The file into the page cache once, so no engine pays the first read.
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
        walls = {"coordhost": [], "duckdb": [], "polars": []}
        rss = {k: [] for k in walls}
        with open(os.path.join(args.work, "engine.log"), "w", encoding="utf-8") as log:
            for _ in range(args.rounds):
                results = {}
                for engine in walls:
                    if engine == "coordhost":
                        w, m, r = run_coordhost(args, job, args.work, log)
                    else:
                        script = DUCKDB if engine == "duckdb" else POLARS
                        w, m, r = run_python(args, script, path, fmt, log)
                    walls[engine].append(w)
                    rss[engine].append(m)
                    results[engine] = r
                check_agree(f"TPC-H Q1 {fmt}", results)
        table.append((fmt, walls, rss, results["coordhost"]))
    print(f"TPC-H Q1, {args.rounds} rounds; wall seconds min/median/max, peak RSS MiB (max over rounds)")
    print(f"{'input':<8} {'engine':<10} {'wall s min/med/max':>22} {'x duckdb':>9} {'RSS MiB':>9}")
    for fmt, walls, rss, _ in table:
        duck = statistics.median(walls["duckdb"])
        for engine, w in walls.items():
            med = statistics.median(w)
            print(f"{fmt:<8} {engine:<10} {f'{min(w):.2f}/{med:.2f}/{max(w):.2f}':>22} "
                  f"{med / duck:>9.2f} {max(rss[engine]):>9.1f}")
    print("results agree to the cent (same groups and counts; sums and averages within 0.01) in every round")
    print("coordhost's result:")
    print("  " + ",".join(["l_returnflag", "l_linestatus"] + VALUES))
    for r in table[0][3]:
        print("  " + ",".join(r))


if __name__ == "__main__":
    main()
