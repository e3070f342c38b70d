#!/usr/bin/env bash
# bench-tpch.sh: TPC-H Q1 over scale factor 1 lineitem, coordhost vs DuckDB vs
# Polars on the same file, side by side (issue 16's figure; `make bench-tpch`).
#
#   scripts/bench-tpch.sh [--checkout DIR] [--bin COORDHOST] [--datagen DATAGEN]
#                         [--rounds N] [--scale SF] [--formats csv,parquet]
#
# --checkout  the checkout whose coordhost is measured: its examples/tpch-q1.toml
#             (and examples/tpch-q1-parquet.toml) and build/plugins/ (`make
#             plugins` there); nothing is written there (default: this script's
#             checkout)
# --bin       its release coordhost binary (default
#             ${CARGO_TARGET_DIR:-CHECKOUT/target}/release/coordhost, built with
#             `cargo build --release` in CHECKOUT when missing)
# --datagen   the coordhost-datagen binary that writes the data (default beside
#             --bin, built the same way)
# --rounds    rounds (default 3); each runs every engine once
# --scale     TPC-H scale factor (default 1: 6 001 215 rows)
# --formats   inputs to measure (default csv,parquet); parquet is measured when
#             the datagen has `--format parquet` and the checkout has
#             examples/tpch-q1-parquet.toml, and otherwise skipped saying so
#
# What it sets up, under THIS script's checkout (kept between runs, reused):
#   build/bench-venv/          Python venv with DuckDB and Polars, exact pinned versions
#   build/bench-data/tpch-sfSF-csv/lineitem-1.csv, ...-parquet/  the data, one file each
#   build/bench-data/tpch-run/ the engines' scratch (coordhost's data folder, outputs)
#   build/cache/               coordhost's compiled-component cache
# The query is examples/tpch-q1.toml's, with recovery on and no record delay.
# Prints, per input and engine, wall seconds min/median/max, the ratio to
# DuckDB's median and the peak RSS; fails (exit 1) if the engines' results do
# not agree to the cent. Exit 2: bad arguments or a missing tool.
set -euo pipefail

DUCKDB_VERSION=2.0.0
POLARS_VERSION=2.1.0

say() { printf 'bench-tpch: %s\n' "$*" >&2; }
die() { printf 'bench-tpch: %s\n' "$1" >&2; exit "${2:-1}"; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
checkout=$here bin="" datagen="" rounds=3 scale=1 formats=csv,parquet
while [ $# -gt 0 ]; do
    case $1 in
        --checkout) checkout=$(cd "$2" && pwd); shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --datagen) datagen=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --scale) scale=$2; shift 2 ;;
        --formats) formats=$2; shift 2 ;;
        *) die "unknown argument $1 (see the head of $0)" 2 ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: $rounds is not a positive number" 2
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
if ! "$venv/bin/python" -c "import duckdb, polars, sys; sys.exit(not (duckdb.__version__ == '$DUCKDB_VERSION' and polars.__version__ == '$POLARS_VERSION'))" 2>/dev/null; then
    say "installing duckdb==$DUCKDB_VERSION polars==$POLARS_VERSION into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "duckdb==$DUCKDB_VERSION" "polars==$POLARS_VERSION"
fi

data=$here/build/bench-data
cases=()
for fmt in ${formats//,/ }; do
    dir=$data/tpch-sf$scale-$fmt
    case $fmt in
        csv) example=examples/tpch-q1.toml flag=() ;;
        parquet)
            example=examples/tpch-q1-parquet.toml flag=(--format parquet)
            if ! "$datagen" tpch --help | grep -q -- '--format'; then
                say "parquet skipped: $datagen has no --format option"; continue
            fi
            if [ ! -f "$checkout/$example" ]; then
                say "parquet skipped: $checkout/$example does not exist"; continue
            fi ;;
        *) die "--formats: $fmt is neither csv nor parquet" 2 ;;
    esac
    if [ ! -f "$dir.done" ]; then
        say "generating lineitem SF $scale as $fmt into $dir"
        rm -rf "$dir"
        "$datagen" tpch --scale "$scale" --parts 1 "${flag[@]}" --out "$dir" >&2
        touch "$dir.done"
    fi
    file=$(find "$dir" -maxdepth 1 -type f -name "lineitem-*" | head -n 1)
    [ -n "$file" ] || die "$dir holds no lineitem file"
    say "$fmt data: $file, $(du -sh "$dir" | cut -f1)"
    cases+=(--case "$fmt:$file:$example")
done
[ ${#cases[@]} -gt 0 ] || die "no input format to measure" 2

say "coordhost: $bin ($(cd "$checkout" && git rev-parse --short HEAD 2>/dev/null || echo "not a git checkout"))"
"$bin" plugin check "$checkout/build/plugins/file-enumerator.wasm" --cache-dir "$here/build/cache" >/dev/null
"$bin" plugin check "$checkout/build/plugins/local-shuffle.wasm" --cache-dir "$here/build/cache" >/dev/null
exec "$venv/bin/python" "$here/scripts/bench-tpch.py" --checkout "$checkout" --bin "$bin" \
    --python "$venv/bin/python" --rounds "$rounds" --work "$data/tpch-run" --cache "$here/build/cache" "${cases[@]}"
