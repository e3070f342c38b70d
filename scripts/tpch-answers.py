"""tpch-answers.py: reference answers of the 22 TPC-H queries, computed by DuckDB.

Runs examples/tpch/queries/q1.sql .. q22.sql with DuckDB (an engine independent of
coordhost and of DataFusion) over the data `make data` writes, once over the CSV files
and once over the Parquet files, checks that both give the same answer, and writes
examples/tpch/answers/sf<SCALE>/qN.csv (or, with --check, compares with those files).

    make tpch-answers                      # installs the pinned DuckDB into .venv, runs this
    .venv/bin/python scripts/tpch-answers.py [--data build/data] [--scale 0.1]
        [--queries examples/tpch/queries] [--out examples/tpch/answers/sf0.1] [--check]

Input: DATA/tpch-sfSCALE/<table>/<table>-N.csv (header line; read with the column types
below) and DATA/tpch-sfSCALE-parquet/<table>/<table>-N.parquet (typed by the files).

Output: one CSV file per query: a header line with the result's column names, then the
rows in the query's result order; comma-separated, a field in double quotes only when it
holds a comma, a quote or a line end (Python's csv module, minimal quoting), lines ending
in "\n".

The rule every value is printed by (a comparer applies the same rule to its own result
before comparing text exactly):

  - an integer (counts, keys, sizes, years: DuckDB's integer types) in decimal digits, no
    decimal point;
  - any other number (DECIMAL of any scale, or DOUBLE; money, quantities, sums, averages,
    ratios) rounded to exactly 2 decimals, ties (a remainder of exactly 0.005) away from
    zero, printed with 2 decimals and no exponent; "-0.00" is printed "0.00". A DECIMAL
    is rounded from its exact value, a DOUBLE from its exact binary value. So Q1's
    sum_charge (exactly 6 decimals) prints as its value to the cent, and its averages as
    DuckDB's quotient to the cent, the way TPC-H's own answer files print money and
    averages;
  - a date as YYYY-MM-DD;
  - text exactly as stored (trailing blanks kept);
  - NULL as an empty field (no query of the 22 yields one at SF 0.1).

A value within 1e-6 of a rounding tie (e.g. 12.344999999 or 12.345000001) could round
the other way in an engine that computes it in another order or type; the script lists
any such value on stderr, and reports ORDER BY ties (rows whose sort keys are equal,
in the answer or at a LIMIT's edge, so their order or presence is not fixed by the
query), so that a comparer knows where to compare rows as a set.

Exit 0: answers written (or, with --check, equal to the files). Exit 1: the CSV and
Parquet answers differ, or --check found a difference (each named). Exit 2: bad
arguments, missing data, or DuckDB missing or not the pinned version.
"""

import argparse
import csv
import decimal
import io
import math
import re
import sys
from datetime import date, datetime
from pathlib import Path

# The DuckDB release the answers were computed with (the Makefile's DUCKDB_VERSION,
# also the one scripts/bench-tpch.sh pins).
DUCKDB_VERSION = "2.0.0"

TABLES = ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"]

# Column types of the CSV files, as tools/datagen's Parquet schema types them
# (Int64 -> BIGINT, Decimal128(15, 2) -> DECIMAL(15,2), Date32 -> DATE, Utf8 -> VARCHAR).
B, M, D, T = "BIGINT", "DECIMAL(15,2)", "DATE", "VARCHAR"
CSV_COLUMNS = {
    "region": [("r_regionkey", B), ("r_name", T), ("r_comment", T)],
    "nation": [("n_nationkey", B), ("n_name", T), ("n_regionkey", B), ("n_comment", T)],
    "supplier": [("s_suppkey", B), ("s_name", T), ("s_address", T), ("s_nationkey", B),
                 ("s_phone", T), ("s_acctbal", M), ("s_comment", T)],
    "customer": [("c_custkey", B), ("c_name", T), ("c_address", T), ("c_nationkey", B),
                 ("c_phone", T), ("c_acctbal", M), ("c_mktsegment", T), ("c_comment", T)],
    "part": [("p_partkey", B), ("p_name", T), ("p_mfgr", T), ("p_brand", T), ("p_type", T),
             ("p_size", B), ("p_container", T), ("p_retailprice", M), ("p_comment", T)],
    "partsupp": [("ps_partkey", B), ("ps_suppkey", B), ("ps_availqty", B),
                 ("ps_supplycost", M), ("ps_comment", T)],
    "orders": [("o_orderkey", B), ("o_custkey", B), ("o_orderstatus", T), ("o_totalprice", M),
               ("o_orderdate", D), ("o_orderpriority", T), ("o_clerk", T),
               ("o_shippriority", B), ("o_comment", T)],
    "lineitem": [("l_orderkey", B), ("l_partkey", B), ("l_suppkey", B), ("l_linenumber", B),
                 ("l_quantity", M), ("l_extendedprice", M), ("l_discount", M), ("l_tax", M),
                 ("l_returnflag", T), ("l_linestatus", T), ("l_shipdate", D),
                 ("l_commitdate", D), ("l_receiptdate", D), ("l_shipinstruct", T),
                 ("l_shipmode", T), ("l_comment", T)],
}

# The ORDER BY keys of each query, by result column name (for the tie report only).
ORDER_KEYS = {
    1: ["l_returnflag", "l_linestatus"],
    2: ["s_acctbal", "n_name", "s_name", "p_partkey"],
    3: ["revenue", "o_orderdate"],
    4: ["o_orderpriority"],
    5: ["revenue"],
    6: [],
    7: ["supp_nation", "cust_nation", "l_year"],
    8: ["o_year"],
    9: ["nation", "o_year"],
    10: ["revenue"],
    11: ["value"],
    12: ["l_shipmode"],
    13: ["custdist", "c_count"],
    14: [],
    15: ["s_suppkey"],
    16: ["supplier_cnt", "p_brand", "p_type", "p_size"],
    17: [],
    18: ["o_totalprice", "o_orderdate"],
    19: [],
    20: ["s_name"],
    21: ["numwait", "s_name"],
    22: ["cntrycode"],
}

CENT = decimal.Decimal("0.01")
LIMIT = re.compile(r"\blimit\s+(\d+)\s*;?\s*$", re.IGNORECASE)


def die(message, code=2):
    print(f"tpch-answers: {message}", file=sys.stderr)
    sys.exit(code)


def fmt(value):
    """One value as the rule in this file's docstring prints it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            die(f"a result holds {value}, which the rule does not print")
        value = decimal.Decimal(value)  # its exact binary value
    if isinstance(value, decimal.Decimal):
        text = f"{value.quantize(CENT, rounding=decimal.ROUND_HALF_UP):f}"
        return "0.00" if text == "-0.00" else text
    if isinstance(value, datetime):
        die(f"a result holds a timestamp ({value}), which the rule does not print")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str):
        return value
    die(f"a result holds a {type(value).__name__} ({value!r}), which the rule does not print")


def near_tie(value):
    """Whether a non-integer number lies within 1e-6 of a rounding tie (x.xx5)."""
    if isinstance(value, (float, decimal.Decimal)) and not isinstance(value, bool):
        cents = decimal.Decimal(value) * 100
        frac = abs(cents - cents.to_integral_value(rounding=decimal.ROUND_FLOOR))
        return abs(frac - decimal.Decimal("0.5")) < decimal.Decimal("0.0001")
    return False


def register(con, data, scale, fmt_name):
    """Views named after the tables over DATA's CSV or Parquet files."""
    if fmt_name == "csv":
        root = data / f"tpch-sf{scale}"
    else:
        root = data / f"tpch-sf{scale}-parquet"
    for table in TABLES:
        files = sorted((root / table).glob(f"{table}-*.{fmt_name}"))
        if not files:
            die(f"{root / table} holds no {table}-N.{fmt_name} file: run `make data` "
                f"(or coordhost-datagen tpch --scale {scale})")
        names = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"
        if fmt_name == "csv":
            columns = "{" + ", ".join(f"'{n}': '{t}'" for n, t in CSV_COLUMNS[table]) + "}"
            source = (f"read_csv({names}, header = true, delim = ',', quote = '\"', "
                      f"escape = '\"', columns = {columns}, auto_detect = false)")
        else:
            source = f"read_parquet({names})"
        con.execute(f"create or replace view {table} as select * from {source}")


def run(con, sql):
    """The query's column names and rows (Python values)."""
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return names, cur.fetchall()


def render(names, rows):
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    w.writerow(names)
    for row in rows:
        w.writerow([fmt(v) for v in row])
    return out.getvalue()


def ties(n, names, rows, sql, con):
    """Notes on ORDER BY ties in the answer and at a LIMIT's edge."""
    keys = ORDER_KEYS[n]
    if not keys:
        return []
    missing = [k for k in keys if k not in names]
    if missing:
        die(f"q{n}: ORDER_KEYS names {missing}, not result columns {names}")
    idx = [names.index(k) for k in keys]
    key = lambda row: tuple(fmt(row[i]) for i in idx)
    notes = []
    for a, b in zip(rows, rows[1:]):
        if key(a) == key(b) and a != b:
            notes.append(f"q{n}: rows tie on {keys} = {key(a)}")
    m = LIMIT.search(sql)
    if m and len(rows) == int(m.group(1)):
        more = run(con, LIMIT.sub(f"limit {int(m.group(1)) + 1};", sql))[1]
        if len(more) > len(rows) and key(more[-1]) == key(rows[-1]):
            notes.append(f"q{n}: row {len(rows)} ties the first row past the limit on {keys}")
    return notes


def main():
    here = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=here / "build" / "data")
    p.add_argument("--scale", default="0.1")
    p.add_argument("--queries", type=Path, default=here / "examples" / "tpch" / "queries")
    p.add_argument("--out", type=Path)
    p.add_argument("--check", action="store_true",
                   help="compare with the answer files instead of writing them")
    args = p.parse_args()
    out = args.out or here / "examples" / "tpch" / "answers" / f"sf{args.scale}"

    try:
        import duckdb
    except ImportError:
        die(f"the duckdb module is missing: run `make tpch-answers`, or "
            f"pip install duckdb=={DUCKDB_VERSION}")
    if duckdb.__version__ != DUCKDB_VERSION:
        die(f"duckdb {duckdb.__version__} is installed; the answers are made with "
            f"{DUCKDB_VERSION} (pip install duckdb=={DUCKDB_VERSION})")

    queries = {}
    for n in range(1, 23):
        f = args.queries / f"q{n}.sql"
        if not f.is_file():
            die(f"{f} is missing")
        queries[n] = f.read_text()

    engines = {}
    for fmt_name in ("csv", "parquet"):
        con = duckdb.connect(":memory:")
        register(con, args.data, args.scale, fmt_name)
        engines[fmt_name] = con

    failed = False
    if not args.check:
        out.mkdir(parents=True, exist_ok=True)
    for n, sql in queries.items():
        answers = {}
        for fmt_name, con in engines.items():
            try:
                names, rows = run(con, sql)
            except duckdb.Error as e:
                die(f"q{n} over {fmt_name}: {e}", 1)
            answers[fmt_name] = (names, rows, render(names, rows))
        names, rows, text = answers["parquet"]
        if answers["csv"][2] != text:
            print(f"tpch-answers: q{n}: the answer over CSV differs from the one over Parquet",
                  file=sys.stderr)
            failed = True
            continue
        for row_no, row in enumerate(rows, 1):
            for name, v in zip(names, row):
                if near_tie(v):
                    print(f"tpch-answers: q{n}: row {row_no} {name} = {v} is within 1e-6 "
                          f"of a rounding tie", file=sys.stderr)
        for note in ties(n, names, rows, sql, engines["parquet"]):
            print(f"tpch-answers: {note}", file=sys.stderr)
        target = out / f"q{n}.csv"
        if args.check:
            if not target.is_file():
                print(f"tpch-answers: {target} is missing", file=sys.stderr)
                failed = True
            elif target.read_text() != text:
                print(f"tpch-answers: q{n}: DuckDB's answer differs from {target}",
                      file=sys.stderr)
                failed = True
            else:
                print(f"q{n}: {len(rows)} rows, equal to {target}")
        else:
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(text)
            tmp.replace(target)
            print(f"q{n}: {len(rows)} rows -> {target}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
