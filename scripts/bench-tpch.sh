#!/usr/bin/env bash
# bench-tpch.sh: the 22 TPC-H queries, coordhost vs DataFusion alone vs DuckDB vs
# Polars over the same files, side by side (issue 26's benchmark; `make bench-tpch`).
#
#   scripts/bench-tpch.sh [--queries 1,3,5] [--rounds N] [--scale SF]
#                         [--formats csv,parquet] [--checkout DIR]
#                         [--bin COORDHOST] [--datagen DATAGEN]
#
# --queries   the query numbers, comma-separated (default all: 1..22)
# --rounds    rounds (default 3); each runs every query on every engine once
# --scale     TPC-H scale factor (default 1: lineitem 6 001 215 rows)
# --formats   inputs to measure (default csv,parquet)
# --checkout  the checkout whose coordhost is measured: its examples/tpch/qN.toml
#             and queries/qN.sql and its build/plugins/ (`make plugins` there);
#             nothing is written there (default: this script's checkout)
# --bin       its coordhost binary (default
#             ${CARGO_TARGET_DIR:-CHECKOUT/target}/release/coordhost, built with
#             `cargo build --release` in CHECKOUT when missing). A debug binary
#             works, but its figures say nothing about coordhost's speed.
# --datagen   the coordhost-datagen binary that writes the data (default beside
#             --bin, built the same way)
#
# The engines, each run as its own process per query (scripts/bench-tpch.py):
#   coordhost   examples/tpch/qN.toml pointed at the bench data (its SQL file and
#               table declarations, recovery on as in the file, no record delay),
#               `coordhost run` with embedded workers
#   datafusion  the `datafusion` Python wheel (DataFusion 55, as coordhost's) in
#               one process: the same SQL file, the tables with the declared schemas
#   duckdb      the same SQL file over views with the declared column types
#   polars      the same SQL through polars.SQLContext; a query it cannot run is
#               listed, not a failure
#
# What it sets up, under THIS script's checkout (kept between runs, reused):
#   build/bench-venv/   Python venv with DuckDB, DataFusion, Polars, PyArrow, exact pinned versions
#   build/bench-data/tpch-sfSF/<table>/<table>-N.csv, tpch-sfSF-parquet/...  the data (4 files
#                       per big table, as `make data`), written once per scale factor
#   build/bench-data/tpch-run/ the engines' scratch (job files, coordhost's data folder, logs)
#   build/cache/        coordhost's compiled-component cache
# Prints per format a table: per query and engine the median wall seconds and peak
# RSS MiB, coordhost/DataFusion and coordhost/DuckDB; geometric means; issue 26's
# targets and whether they are met. Every engine's answer of every round is checked
# against DuckDB's under scripts/tpch-answers.py's rule. Exit 0: all agree (targets
# are reported, not enforced); 1: an engine failed or disagrees (named); 2: bad
# arguments or a missing tool.
set -euo pipefail

DUCKDB_VERSION=2.0.0
DATAFUSION_VERSION=55.0.0   # the newest 55.x on PyPI; coordhost uses DataFusion 55.2
POLARS_VERSION=2.1.0
PYARROW_VERSION=26.0.1

say() { printf 'bench-tpch: %s\n' "$*" >&2; }
die() { printf 'bench-tpch: %s\n' "$1" >&2; exit "${2:-1}"; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
checkout=$here bin="" datagen="" rounds=3 scale=1 formats=csv,parquet
queries=$(seq -s, 1 22)
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value (see the head of $0)" 2
    case $1 in
        --checkout) checkout=$(cd "$2" && pwd) || die "--checkout: $2 is not a folder" 2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --datagen) datagen=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --scale) scale=$2; shift 2 ;;
        --formats) formats=$2; shift 2 ;;
        --queries) queries=$2; shift 2 ;;
        *) die "unknown argument $1 (see the head of $0)" 2 ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: $rounds is not a positive number" 2
[[ $scale =~ ^([0-9]+|[0-9]*\.[0-9]+)$ ]] && [[ $scale =~ [1-9] ]] \
    || die "--scale: $scale is not a positive number (e.g. 1 or 0.1)" 2
[[ $queries =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--queries: $queries is not a comma-separated list of numbers" 2
for q in ${queries//,/ }; do
    [ "$q" -ge 1 ] && [ "$q" -le 22 ] || die "--queries: $q is not a TPC-H query (1..22)" 2
done
fmts=()
for fmt in ${formats//,/ }; do
    case $fmt in csv|parquet) fmts+=("$fmt") ;; *) die "--formats: $fmt is neither csv nor parquet" 2 ;; esac
done
[ ${#fmts[@]} -gt 0 ] || die "--formats: no format given" 2
command -v python3 >/dev/null 2>&1 || die "python3 (with venv) is needed" 2

target=${CARGO_TARGET_DIR:-$checkout/target}
if [ -z "$bin" ] || [ -z "$datagen" ]; then
    if [ ! -x "$target/release/coordhost" ] || [ ! -x "$target/release/coordhost-datagen" ]; then
        say "building the release binaries in $checkout"
        (cd "$checkout" && cargo build --release --locked -p coordhost -p coordhost-datagen)
    fi
    bin=${bin:-$target/release/coordhost}
    datagen=${datagen:-$target/release/coordhost-datagen}
fi
[ -x "$bin" ] || die "$bin: not an executable (the coordhost binary)" 2
[ -x "$datagen" ] || die "$datagen: not an executable (coordhost-datagen)" 2
for p in file-enumerator local-shuffle; do
    [ -f "$checkout/build/plugins/$p.wasm" ] || die "$checkout/build/plugins/$p.wasm is missing: run make plugins there" 2
done

venv=$here/build/bench-venv
if ! "$venv/bin/python" -c "
import sys, duckdb, datafusion, polars, pyarrow
sys.exit(not (duckdb.__version__, datafusion.__version__, polars.__version__, pyarrow.__version__)
         == ('$DUCKDB_VERSION', '$DATAFUSION_VERSION', '$POLARS_VERSION', '$PYARROW_VERSION'))" 2>/dev/null; then
    say "installing duckdb==$DUCKDB_VERSION datafusion==$DATAFUSION_VERSION polars==$POLARS_VERSION pyarrow==$PYARROW_VERSION into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "duckdb==$DUCKDB_VERSION" "datafusion==$DATAFUSION_VERSION" \
        "polars==$POLARS_VERSION" "pyarrow==$PYARROW_VERSION"
fi
"$venv/bin/python" -c 'import tomllib' 2>/dev/null || die "$venv/bin/python has no tomllib: Python 3.11 or newer is needed" 2

data=$here/build/bench-data
cases=()
for fmt in "${fmts[@]}"; do
    case $fmt in
        csv) dir=$data/tpch-sf$scale flag=() ;;
        parquet) dir=$data/tpch-sf$scale-parquet flag=(--format parquet) ;;
    esac
    if [ ! -f "$dir.done" ]; then
        say "generating the eight TPC-H tables at SF $scale as $fmt into $dir"
        rm -rf "$dir"
        "$datagen" tpch --scale "$scale" --parts 4 "${flag[@]}" --out "$dir" >&2
        touch "$dir.done"
    fi
    say "$fmt data: $dir, $(du -sh "$dir" | cut -f1)"
    cases+=(--data "$fmt:$dir")
done

say "coordhost: $bin ($(cd "$checkout" && git rev-parse --short HEAD 2>/dev/null || echo "not a git checkout"))"
case $bin in */debug/*) say "$bin is a debug build: its figures say nothing about coordhost's speed" ;; esac
"$bin" plugin check "$checkout/build/plugins/file-enumerator.wasm" --cache-dir "$here/build/cache" >/dev/null
"$bin" plugin check "$checkout/build/plugins/local-shuffle.wasm" --cache-dir "$here/build/cache" >/dev/null
exec "$venv/bin/python" "$here/scripts/bench-tpch.py" --checkout "$checkout" --bin "$bin" \
    --python "$venv/bin/python" --rounds "$rounds" --scale "$scale" --queries "$queries" \
    --work "$data/tpch-run" --cache "$here/build/cache" "${cases[@]}"
