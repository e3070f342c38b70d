#!/usr/bin/env python3
"""Writes examples/tpch/qN.toml (N = 1..22): one SQL job file per TPC-H query
(examples/tpch/queries/qN.sql) over the eight tables `make data` writes
(build/data/tpch-sf0.1/<table>/<table>-N.csv), one file-enumerator plugin per
table. Run it again after changing the template; the files are committed.

    python3 scripts/tpch-jobs.py
"""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "tpch"

BIGINT, TEXT, MONEY, DATE = "bigint", "varchar", "decimal(15,2)", "date"
TABLES = {
    "region": [("r_regionkey", BIGINT), ("r_name", TEXT), ("r_comment", TEXT)],
    "nation": [("n_nationkey", BIGINT), ("n_name", TEXT), ("n_regionkey", BIGINT),
               ("n_comment", TEXT)],
    "supplier": [("s_suppkey", BIGINT), ("s_name", TEXT), ("s_address", TEXT),
                 ("s_nationkey", BIGINT), ("s_phone", TEXT), ("s_acctbal", MONEY),
                 ("s_comment", TEXT)],
    "customer": [("c_custkey", BIGINT), ("c_name", TEXT), ("c_address", TEXT),
                 ("c_nationkey", BIGINT), ("c_phone", TEXT), ("c_acctbal", MONEY),
                 ("c_mktsegment", TEXT), ("c_comment", TEXT)],
    "part": [("p_partkey", BIGINT), ("p_name", TEXT), ("p_mfgr", TEXT), ("p_brand", TEXT),
             ("p_type", TEXT), ("p_size", BIGINT), ("p_container", TEXT),
             ("p_retailprice", MONEY), ("p_comment", TEXT)],
    "partsupp": [("ps_partkey", BIGINT), ("ps_suppkey", BIGINT), ("ps_availqty", BIGINT),
                 ("ps_supplycost", MONEY), ("ps_comment", TEXT)],
    "orders": [("o_orderkey", BIGINT), ("o_custkey", BIGINT), ("o_orderstatus", TEXT),
               ("o_totalprice", MONEY), ("o_orderdate", DATE), ("o_orderpriority", TEXT),
               ("o_clerk", TEXT), ("o_shippriority", BIGINT), ("o_comment", TEXT)],
    "lineitem": [("l_orderkey", BIGINT), ("l_partkey", BIGINT), ("l_suppkey", BIGINT),
                 ("l_linenumber", BIGINT), ("l_quantity", MONEY), ("l_extendedprice", MONEY),
                 ("l_discount", MONEY), ("l_tax", MONEY), ("l_returnflag", TEXT),
                 ("l_linestatus", TEXT), ("l_shipdate", DATE), ("l_commitdate", DATE),
                 ("l_receiptdate", DATE), ("l_shipinstruct", TEXT), ("l_shipmode", TEXT),
                 ("l_comment", TEXT)],
}


def job(n: int) -> str:
    out = [f"""# TPC-H Q{n} as a SQL job over `make data`'s eight tables at scale factor 0.1
# (CSV under build/data/tpch-sf0.1). Written by scripts/tpch-jobs.py; the query
# is queries/q{n}.sql, its answer (computed by DuckDB) answers/sf0.1/q{n}.csv.
#
#   coordhost run examples/tpch/q{n}.toml --data-dir build/tpch
#
# Output: <data-dir>/output/tpch-q{n}/part-*.csv, then _SUCCESS.

[job]
name = "tpch-q{n}"
max-attempts = 3
parallelism = 4
sql-file = "queries/q{n}.sql"

[recovery]
enabled = true
previous-worker-timeout-ms = 10000

[shuffle]
plugin = "shuffle"

[plugins.shuffle]
component = "../../build/plugins/local-shuffle.wasm"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]
"""]
    for t, cols in TABLES.items():
        schema = ", ".join(f'{c} = "{ty}"' for c, ty in cols)
        out.append(f"""
[plugins.{t}-files]
component = "../../build/plugins/file-enumerator.wasm"
kind = "split-enumerator"
config = {{ dir = "${{job_dir}}/../../build/data/tpch-sf0.1/{t}", split-bytes = 4194304, pattern = ".csv" }}
dirs = [{{ path = "../../build/data/tpch-sf0.1/{t}", writable = false }}]

[tables.{t}]
plugin = "{t}-files"
format = "csv"
header = true
schema = {{ {schema} }}
""")
    out.append(f"""
[sink]
path = "${{data_dir}}/output/tpch-q{n}"
format = "csv"
header = true
""")
    return "".join(out)


for n in range(1, 23):
    (OUT / f"q{n}.toml").write_text(job(n))
print(f"wrote {OUT}/q1.toml .. q22.toml")
