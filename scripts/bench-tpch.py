"""bench-tpch.py: the 22 TPC-H queries, coordhost vs DataFusion alone vs DuckDB vs Polars.

Run by scripts/bench-tpch.sh (which makes the venv, the binaries and the data);
see that script for the options. Per input format (CSV, Parquet) and query N:

  coordhost   examples/tpch/qN.toml (its SQL file, its table declarations, recovery
              as the file says: on), pointed at the bench data, run by `coordhost run`
              with embedded workers (threads of the one process);
  datafusion  the Python `datafusion` wheel (the same major version as coordhost's
              DataFusion) in one process: the same SQL file over the same folders,
              each table registered with the schema the job file declares;
  duckdb      the same SQL file over views of the same files (read_csv with the
              declared column types; read_parquet);
  polars      the same SQL through polars.SQLContext over scan_csv (declared types) or
              scan_parquet; a query it cannot run is reported, not a failure.

Each round runs every query on every engine once, one engine after the other (so
drift on a shared machine hits all alike). Each run is its own process, timed from
spawn to exit, its peak resident set taken from the kernel (wait4's ru_maxrss): the
Python engines' figures include the interpreter and the import of the library, as
coordhost's include loading its plugins; the table says how large that floor is.

Every engine's answer of every round is compared with DuckDB's under the rule of
scripts/tpch-answers.py (integers as digits, every other number rounded to 2
decimals with ties away from zero, dates YYYY-MM-DD, text as stored); rows whose
ORDER BY keys tie are compared as a set, and at a LIMIT's edge only their keys.

Prints one table per format: median wall seconds and peak RSS (MiB, max over the
rounds) per query and engine, the ratios coordhost/DataFusion and coordhost/DuckDB;
then geometric means and the targets of issue 26. Exit 0: every answer agrees (the
targets are reported, not enforced). Exit 1: an engine other than Polars failed a
query or an answer disagrees (each named after the table). Exit 2: bad input.
"""

import argparse
import csv
import errno
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from decimal import Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = ["coordhost", "datafusion", "duckdb", "polars"]
# Issue 26's targets: geometric mean of the wall times at most this many times
# DataFusion's alone and DuckDB's; peak RSS at most DuckDB's.
TARGET_DF, TARGET_DUCK = 1.25, 1.5
# A Python engine's child exits with this when the engine cannot run the query
# (only accepted from Polars).
CANNOT = 3
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def die(msg, code=1):
    print(f"bench-tpch: {msg}", file=sys.stderr)
    sys.exit(code)


def answers_module():
    """scripts/tpch-answers.py: its value rule (`fmt`) and ORDER BY keys."""
    spec = importlib.util.spec_from_file_location("tpch_answers", os.path.join(HERE, "tpch-answers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------------------
# Child: one query on one Python engine, the answer as JSON into a file.
# ---------------------------------------------------------------------------

def duckdb_type(t):
    return t.upper()


def arrow_type(pa, t):
    t = t.strip().lower()
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    simple = {"bigint": pa.int64(), "int": pa.int32(), "integer": pa.int32(), "double": pa.float64(),
              "varchar": pa.string(), "text": pa.string(), "date": pa.date32(), "boolean": pa.bool_()}
    if t not in simple:
        die(f"declared type {t!r} has no Arrow type here", 2)
    return simple[t]


def polars_type(pl, t):
    t = t.strip().lower()
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
    if m:
        return pl.Decimal(int(m.group(1)), int(m.group(2)))
    simple = {"bigint": pl.Int64, "int": pl.Int32, "integer": pl.Int32, "double": pl.Float64,
              "varchar": pl.String, "text": pl.String, "date": pl.Date, "boolean": pl.Boolean}
    if t not in simple:
        die(f"declared type {t!r} has no Polars type here", 2)
    return simple[t]


def files_of(table):
    names = sorted(f for f in os.listdir(table["dir"]) if f.endswith(table["pattern"]))
    if not names:
        die(f"{table['dir']} holds no {table['pattern']} file", 2)
    return [os.path.join(table["dir"], f) for f in names]


def run_duckdb(sql, fmt, tables):
    import duckdb
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    for name, t in tables.items():
        files = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files_of(t)) + "]"
        if fmt == "csv":
            cols = "{" + ", ".join(f"'{c}': '{duckdb_type(ty)}'" for c, ty in t["schema"]) + "}"
            source = (f"read_csv({files}, header = true, delim = ',', quote = '\"', escape = '\"', "
                      f"columns = {cols}, auto_detect = false)")
        else:
            source = f"read_parquet({files})"
        con.execute(f"create view {name} as select * from {source}")
    cur = con.execute(sql)
    return [d[0] for d in cur.description], cur.fetchall()


def run_datafusion(sql, fmt, tables):
    import pyarrow as pa
    from datafusion import SessionContext
    ctx = SessionContext()
    for name, t in tables.items():
        schema = pa.schema([(c, arrow_type(pa, ty), False) for c, ty in t["schema"]])
        if fmt == "csv":
            ctx.register_csv(name, t["dir"], schema=schema, has_header=True,
                             file_extension=t["pattern"])
        else:
            ctx.register_parquet(name, t["dir"], schema=schema, file_extension=t["pattern"])
    df = ctx.sql(sql)
    table = pa.Table.from_batches(df.collect(), schema=df.schema())
    return table.column_names, [tuple(r.values()) for r in table.to_pylist()]


def run_polars(sql, fmt, tables):
    import polars as pl
    ctx = pl.SQLContext()
    for name, t in tables.items():
        files = files_of(t)
        if fmt == "csv":
            schema = {c: polars_type(pl, ty) for c, ty in t["schema"]}
            frame = pl.scan_csv(files, has_header=True, schema=schema)
        else:
            frame = pl.scan_parquet(files)
        ctx.register(name, frame)
    try:
        # Its SQL parser takes one statement without the closing semicolon.
        out = ctx.execute(sql.strip().rstrip(";"), eager=True)
    except Exception as e:  # any refusal of the query: Polars cannot run it
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Cannot(f"{type(e).__name__}: {first}"[:160]) from e
    return out.columns, out.rows()


class Cannot(Exception):
    pass


def child(args):
    engine, fmt, sql_path, tables_path, out_path = args
    if engine.startswith("floor-"):
        # Interpreter start, the engine's import, exit: the floor under its figures.
        importlib.import_module(engine[len("floor-"):])
        return
    sql = open(sql_path, encoding="utf-8").read()
    tables = json.load(open(tables_path, encoding="utf-8"))
    runner = {"duckdb": run_duckdb, "datafusion": run_datafusion, "polars": run_polars}[engine]
    try:
        names, rows = runner(sql, fmt, tables)
    except Cannot as e:
        json.dump({"cannot": str(e)}, open(out_path, "w", encoding="utf-8"))
        sys.exit(CANNOT)
    rule = answers_module().fmt
    json.dump({"names": list(names), "rows": [[rule(v) for v in r] for r in rows]},
              open(out_path, "w", encoding="utf-8"))


# ---------------------------------------------------------------------------
# Parent: jobs, rounds, comparison, the table.
# ---------------------------------------------------------------------------

def as_answer(cell):
    """A text value under tpch-answers.py's rule: a number with a fraction (or an
    exponent) rounded to 2 decimals, ties away from zero, on its exact digits;
    anything else as it is. Idempotent on the rule's own output."""
    if NUMBER.fullmatch(cell) and not re.fullmatch(r"-?\d+", cell):
        text = f"{Decimal(cell).quantize(Decimal('0.01'), rounding='ROUND_HALF_UP'):f}"
        return "0.00" if text == "-0.00" else text
    return cell


def timed(argv, log):
    """Runs argv; returns (wall seconds, peak RSS MiB, exit status)."""
    for attempt in range(30):
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            break
        except OSError as e:
            # A binary being relinked (by a build beside the bench) is briefly
            # absent or busy: wait for it, a minute at most.
            if e.errno not in (errno.ENOENT, errno.ETXTBSY) or attempt == 29:
                die(f"cannot start {argv[0]}: {e}", 2)
            print(f"bench-tpch: {argv[0]}: {e.strerror}; trying again in 2 s", file=sys.stderr)
            time.sleep(2)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def adapt_job(checkout, n, fmt, data, work):
    """examples/tpch/qN.toml pointed at `data`, paths absolute, Parquet if asked;
    returns (job path, SQL path, tables {name: {dir, pattern, schema}})."""
    example = os.path.join(checkout, "examples", "tpch", f"q{n}.toml")
    if not os.path.isfile(example):
        die(f"{example} is missing", 2)
    text = open(example, encoding="utf-8").read()
    sql_rel = f"queries/q{n}.sql"
    replacements = [
        ("${job_dir}/../../build/data/tpch-sf0.1", data),
        ("../../build/data/tpch-sf0.1", data),
        ("../../build/plugins", os.path.join(checkout, "build", "plugins")),
        (f'sql-file = "{sql_rel}"', f'sql-file = "{os.path.join(checkout, "examples", "tpch", sql_rel)}"'),
    ]
    if fmt == "parquet":
        replacements += [('pattern = ".csv"', 'pattern = ".parquet"'),
                         ('format = "csv"\nheader = true\nschema', 'format = "parquet"\nschema')]
    for old, new in replacements:
        if old not in text:
            die(f"{example}: expected `{old}` in it (the form scripts/tpch-jobs.py writes)", 2)
        text = text.replace(old, new)
    if "../build" in text:
        die(f"{example}: a build path is left that this script does not point elsewhere", 2)
    text = re.sub(r"record-delay-us\s*=\s*\d+", "record-delay-us = 0", text)
    job = tomllib.loads(text)
    if not job.get("recovery", {}).get("enabled"):
        die(f"{example}: expected `[recovery]` with `enabled = true`", 2)
    tables = {}
    for name, t in job.get("tables", {}).items():
        config = job["plugins"][t["plugin"]]["config"]
        if t.get("format") != fmt:
            die(f"{example}: table {name} has format {t.get('format')!r}, expected {fmt}", 2)
        tables[name] = {"dir": config["dir"], "pattern": config["pattern"],
                        "schema": list(t["schema"].items())}
    os.makedirs(os.path.join(work, fmt), exist_ok=True)
    path = os.path.join(work, fmt, f"q{n}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(work, fmt, f"q{n}.tables.json"), "w", encoding="utf-8") as f:
        json.dump(tables, f)
    return path, job["job"]["sql-file"], tables, job["job"]["name"]


def coordhost_answer(out):
    if not os.path.isfile(os.path.join(out, "_SUCCESS")):
        raise RuntimeError(f"{out} has no _SUCCESS")
    parts = sorted(f for f in os.listdir(out) if f.startswith("part-"))
    names, rows = None, []
    for p in parts:
        with open(os.path.join(out, p), newline="", encoding="utf-8") as f:
            lines = list(csv.reader(f))
        if not lines:
            continue
        if names is None:
            names = lines[0]
        elif lines[0] != names:
            raise RuntimeError(f"{out}/{p}: header {lines[0]} differs from {names}")
        # A one-column row holding NULL is an empty line, which csv reads as no field.
        rows.extend([""] if not r and len(names) == 1 else r for r in lines[1:])
    if names is None:
        raise RuntimeError(f"{out} holds no part file with a header")
    return names, rows


def run_coordhost(args, n, fmt, job, jobname, log):
    data_dir = os.path.join(args.work, "coordhost-data")
    shutil.rmtree(data_dir, ignore_errors=True)
    summary = os.path.join(args.work, "summary.json")
    if os.path.exists(summary):
        os.remove(summary)
    argv = [args.bin, "run", job, "--data-dir", data_dir, "--summary-json", summary,
            "--cache-dir", args.cache]
    wall, rss, code = timed(argv, log)
    if code != 0:
        return wall, rss, {"error": f"`coordhost run {job}` exited {code} (its output: {log.name})"}
    s = json.load(open(summary, encoding="utf-8"))
    if s.get("status") != "finished":
        return wall, rss, {"error": f"coordhost's summary says {s.get('status')}: {s.get('error')}"}
    try:
        names, rows = coordhost_answer(os.path.join(data_dir, "output", jobname))
    except (RuntimeError, OSError) as e:
        return wall, rss, {"error": str(e)}
    return wall, rss, {"names": names, "rows": rows}


def run_python(args, engine, fmt, sql, tables_json, log):
    out = os.path.join(args.work, "answer.json")
    if os.path.exists(out):
        os.remove(out)
    argv = [args.python, os.path.abspath(__file__), "--child", engine, fmt, sql, tables_json, out]
    wall, rss, code = timed(argv, log)
    if code == CANNOT and engine == "polars":
        return wall, rss, json.load(open(out, encoding="utf-8"))
    if code != 0:
        return wall, rss, {"error": f"{engine} exited {code} (its output: {log.name})"}
    return wall, rss, json.load(open(out, encoding="utf-8"))


def disagreement(n, sql, order_keys, want, got):
    """None if `got` is DuckDB's answer `want` under the rule; else what differs."""
    if [c.lower() for c in got["names"]] != [c.lower() for c in want["names"]]:
        return f"the columns: {got['names']} vs DuckDB's {want['names']}"
    a = [[as_answer(c) for c in r] for r in want["rows"]]
    b = [[as_answer("" if c is None else str(c)) for c in r] for r in got["rows"]]
    if len(a) != len(b):
        return f"{len(b)} rows, DuckDB {len(a)}"
    names = [c.lower() for c in want["names"]]
    idx = [names.index(k) for k in order_keys if k in names]
    limit = re.search(r"\blimit\s+(\d+)\s*;?\s*$", sql, re.IGNORECASE)
    at_limit = limit is not None and len(a) == int(limit.group(1))
    key = (lambda r: tuple(r[i] for i in idx)) if order_keys else (lambda r: ())
    i = 0
    while i < len(a):
        j = i
        while j < len(a) and key(a[j]) == key(a[i]):
            j += 1
        ga, gb = a[i:j], b[i:j]
        for row_no, row in enumerate(gb, i + 1):
            if key(row) != key(a[i]):
                return f"row {row_no}: {row} vs DuckDB's {a[row_no - 1]}"
        # Rows tied on the ORDER BY keys may come in any order; at a LIMIT's
        # edge a tie may even pick other rows (then only the keys count).
        if not (at_limit and j == len(a)) and sorted(ga) != sorted(gb):
            for x, y in zip(ga if order_keys else sorted(ga), gb if order_keys else sorted(gb)):
                if x != y:
                    return f"row {a.index(x) + 1}: {y} vs DuckDB's {x}"
            return f"rows {i + 1}..{j}: {gb} vs DuckDB's {ga}"
        i = j
    return None


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--checkout", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--python", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", required=True)
    p.add_argument("--cache", required=True, help="coordhost's compiled-component cache")
    p.add_argument("--scale", required=True)
    p.add_argument("--queries", required=True, help="comma-separated query numbers")
    p.add_argument("--data", action="append", required=True,
                   help="FORMAT:FOLDER, the folder holding one folder per table")
    args = p.parse_args()
    started = time.monotonic()
    answers = answers_module()
    queries = sorted({int(q) for q in args.queries.split(",")})
    os.makedirs(args.work, exist_ok=True)
    cases = []  # (fmt, n, job, sql, tables_json, jobname)
    for spec in args.data:
        fmt, data = spec.split(":", 1)
        for n in queries:
            job, sql, tables, jobname = adapt_job(args.checkout, n, fmt, data, args.work)
            cases.append((fmt, n, job, sql, os.path.join(args.work, fmt, f"q{n}.tables.json"), jobname))
        # Every file into the page cache once, so no engine pays the first read.
        for root, _, files in os.walk(data):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    while fh.read(1 << 24):
                        pass
    walls = {(c[0], c[1], e): [] for c in cases for e in ENGINES}
    rss = {k: [] for k in walls}
    cannot = {}    # (fmt, n) -> Polars' reason
    failed = {}    # (fmt, n, engine) -> error
    disagree = {}  # (fmt, n, engine) -> what differs (first round it did)
    floors = {}  # Python engine -> [(wall, rss)] of an import without a query
    log = open(os.path.join(args.work, "engine.log"), "w", encoding="utf-8")
    for r in range(args.rounds):
        for engine in ENGINES[1:]:
            w, m, code = timed([args.python, os.path.abspath(__file__), "--child", f"floor-{engine}",
                                "-", "-", "-", "-"], log)
            if code != 0:
                die(f"the bench venv's Python cannot import {engine} (see {log.name})", 2)
            floors.setdefault(engine, []).append((w, m))
        for fmt, n, job, sql, tables_json, jobname in cases:
            sql_text = open(sql, encoding="utf-8").read()
            results = {}
            for engine in ENGINES:
                if engine == "polars" and (fmt, n) in cannot:
                    continue
                if (fmt, n, engine) in failed:
                    continue
                print(f"bench-tpch: round {r + 1}/{args.rounds} {fmt} q{n} {engine}", file=sys.stderr, flush=True)
                if engine == "coordhost":
                    w, m, res = run_coordhost(args, n, fmt, job, jobname, log)
                else:
                    w, m, res = run_python(args, engine, fmt, sql, tables_json, log)
                if "cannot" in res:
                    cannot[(fmt, n)] = res["cannot"]
                    continue
                if "error" in res:
                    failed[(fmt, n, engine)] = res["error"]
                    continue
                walls[(fmt, n, engine)].append(w)
                rss[(fmt, n, engine)].append(m)
                results[engine] = res
            if "duckdb" not in results:
                continue
            for engine, res in results.items():
                if engine == "duckdb" or (fmt, n, engine) in disagree:
                    continue
                d = disagreement(n, sql_text, answers.ORDER_KEYS.get(n, []), results["duckdb"], res)
                if d:
                    disagree[(fmt, n, engine)] = f"round {r + 1}: {d}"
    log.close()

    def cell(fmt, n, engine):
        w = walls[(fmt, n, engine)]
        if engine == "polars" and (fmt, n) in cannot:
            return f"{'n/a':>16}"
        if (fmt, n, engine) in failed or not w:
            return f"{'FAILED':>16}"
        mark = "!" if (fmt, n, engine) in disagree else " "
        return f"{statistics.median(w):>8.2f} {max(rss[(fmt, n, engine)]):>6.0f}{mark}"

    def med(fmt, n, engine):
        w = walls[(fmt, n, engine)]
        ok = w and (fmt, n, engine) not in failed and (fmt, n, engine) not in disagree
        return statistics.median(w) if ok else None

    def peak(fmt, n, engine):
        return max(rss[(fmt, n, engine)]) if med(fmt, n, engine) is not None else None

    print()
    print(f"TPC-H SF {args.scale}, {args.rounds} round(s); per query and engine: median wall s "
          f"(spawn to exit) and peak RSS MiB (max over rounds)")
    debug = "/debug/" in args.bin
    print(f"coordhost: {args.bin}" + (" -- a DEBUG build: its figures say nothing about coordhost's speed"
                                       if debug else ""))
    print("floor of the Python engines (interpreter start + import, no query): " + ", ".join(
        f"{e} {statistics.median(w for w, _ in fl):.2f} s {max(m for _, m in fl):.0f} MiB"
        for e, fl in floors.items()))
    verdicts = []
    for fmt in [s.split(":", 1)[0] for s in args.data]:
        print()
        head = "".join(f"{e:>17}" for e in ENGINES)
        print(f"{fmt:<7}{head}  {'ch/df':>6} {'ch/duck':>7}")
        print(f"{'':<7}" + "".join(f"{'s':>9} {'MiB':>6} " for _ in ENGINES))
        for n in queries:
            ch, df, du = med(fmt, n, "coordhost"), med(fmt, n, "datafusion"), med(fmt, n, "duckdb")
            r1 = f"{ch / df:>6.2f}" if ch and df else f"{'-':>6}"
            r2 = f"{ch / du:>7.2f}" if ch and du else f"{'-':>7}"
            print(f"q{n:<6}" + "".join(cell(fmt, n, e) for e in ENGINES) + f"  {r1} {r2}")
        gm = {}
        line = f"{'geomean':<7}"
        for e in ENGINES:
            ws = [med(fmt, n, e) for n in queries if med(fmt, n, e) is not None]
            ms = [peak(fmt, n, e) for n in queries if peak(fmt, n, e) is not None]
            gm[e] = (geomean(ws), geomean(ms), len(ws))
            line += f"{gm[e][0]:>8.2f} {gm[e][1]:>6.0f} " if ws else f"{'-':>16} "
        # The ratios over the queries both engines answered right.
        both_df = [n for n in queries if med(fmt, n, "coordhost") and med(fmt, n, "datafusion")]
        both_du = [n for n in queries if med(fmt, n, "coordhost") and med(fmt, n, "duckdb")]
        g_df = geomean([med(fmt, n, "coordhost") / med(fmt, n, "datafusion") for n in both_df])
        g_du = geomean([med(fmt, n, "coordhost") / med(fmt, n, "duckdb") for n in both_du])
        show = lambda g, w: f"{'-':>{w}}" if math.isnan(g) else f"{g:>{w}.2f}"
        print(line + f" {show(g_df, 6)} {show(g_du, 7)}")
        np_ = gm["polars"][2]
        if np_ < len(queries):
            print(f"{'':<7}(polars' geomean is over the {np_} of {len(queries)} queries it ran)")
        over = [n for n in both_du if peak(fmt, n, "coordhost") > peak(fmt, n, "duckdb")]
        print()
        print(f"{f'{fmt} targets (issue 26)':<36} {'target':>8} {'reached':>8}")
        for what, target, value in [("geomean wall vs DataFusion alone", TARGET_DF, g_df),
                                    ("geomean wall vs DuckDB", TARGET_DUCK, g_du)]:
            reached = f"{value:.2f}x" if not math.isnan(value) else "-"
            verdict = "met" if value <= target else "MISSED" if not math.isnan(value) else "not measured"
            print(f"  {what:<34} {f'<= {target:.2f}x':>8} {reached:>8}  {verdict}")
        rss_ok = not over and len(both_du) == len(queries)
        worst = max(both_du, key=lambda n: peak(fmt, n, "coordhost") / peak(fmt, n, "duckdb"), default=None)
        detail = (f"q{worst}: {peak(fmt, worst, 'coordhost'):.0f} vs {peak(fmt, worst, 'duckdb'):.0f} MiB"
                  if worst else "-")
        label = "peak RSS <= DuckDB's, per query"
        print(f"  {label:<34} {len(both_du) - len(over):>4}/{len(queries):<3} "
              f"{'':>4}  {'met' if rss_ok else 'MISSED'} (highest ratio {detail})")
        verdicts.append((fmt, g_df, g_du, over))
    if disagree:
        print()
        print("! = the answer disagrees with DuckDB's (left out of the means; named below)")
    if cannot:
        print()
        print("polars cannot run (its SQL context refuses the query):")
        for (fmt, n), why in sorted(cannot.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            print(f"  q{n} {fmt}: {why}")
    print()
    print(f"answers checked against DuckDB's in every round (rule of scripts/tpch-answers.py); "
          f"the bench took {time.monotonic() - started:.0f} s")
    bad = False
    for (fmt, n, engine), why in sorted(failed.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        print(f"bench-tpch: q{n} {fmt}: {engine} FAILED: {why}", file=sys.stderr)
        bad = True
    for (fmt, n, engine), why in sorted(disagree.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        print(f"bench-tpch: q{n} {fmt}: {engine} DISAGREES with DuckDB: {why}", file=sys.stderr)
        bad = True
    if bad:
        sys.exit(1)
    print("every engine's answer agrees with DuckDB's")


if __name__ == "__main__":
    main()
