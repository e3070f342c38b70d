#!/usr/bin/env bash
# The authors' kit end to end (issue 17): for each template, `coordhost plugin new`, the build
# its README gives, `coordhost plugin check`, then `coordhost plugin test`. Part of `make test`.
#
#   scripts/kit-check.sh COORDHOST_BINARY
#
# Reuses the tools `make plugins` installs (the Python venv .venv with the pinned
# componentize-py, the pinned componentize-js in plugins/js-enumerator/node_modules, clang-19,
# wit-bindgen and wasm-tools for C), and one
# Cargo target folder for every Rust project, so wit-bindgen compiles once. Fails loudly when a
# tool is missing. Works in build/kit-check/ (KIT_CHECK_DIR), which it empties first.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: scripts/kit-check.sh COORDHOST_BINARY}
work=${KIT_CHECK_DIR:-$root/build/kit-check}
cpy=$root/.venv/bin/componentize-py
node_modules=$root/plugins/js-enumerator/node_modules

fail() { echo "kit-check: $*" >&2; exit 1; }
[ -x "$bin" ] || fail "$bin is not an executable coordhost binary"
command -v cargo >/dev/null || fail "cargo not found; install Rust with rustup"
command -v node >/dev/null || fail "node not found; install Node.js >= 20"
[ -x "$cpy" ] || fail "$cpy not found; run 'make plugins' (it creates .venv with componentize-py)"
[ -d "$node_modules/@bytecodealliance/componentize-js" ] \
  || fail "componentize-js not in $node_modules; run 'make plugins' (it runs npm ci)"

projects=$work/projects
rm -rf "$projects"
mkdir -p "$projects"
# One target folder for every Rust project: wit-bindgen compiles once. Under CARGO_TARGET_DIR
# when that is set (CI keeps it outside the clone, so later runs reuse the build).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/kit-check}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/rust-target}
cache=$work/cache

new() { # NAME KIND LANG
  "$bin" plugin new "$1" --kind "$2" --lang "$3" --dir "$projects"
}
verify() { # WASM [plugin test options...]
  local wasm=$1
  shift
  "$bin" --cache-dir "$cache" plugin check "$wasm"
  "$bin" --cache-dir "$cache" plugin test "$wasm" "$@" || fail "plugin test failed for $wasm"
  echo "kit-check: $wasm passed"
}

for kind in split-enumerator shuffle-master; do
  name=kit-rust-$kind
  new "$name" "$kind" rust
  (cd "$projects/$name" && cargo build --quiet --locked --release --target wasm32-wasip2) \
    || fail "the Rust $kind project does not build"
  verify "$CARGO_TARGET_DIR/wasm32-wasip2/release/${name//-/_}.wasm"
done

for kind in split-enumerator shuffle-master; do
  name=kit-python-$kind
  new "$name" "$kind" python
  (cd "$projects/$name" && "$cpy" -d wit -w "$kind-plugin" componentize -p . app -o "$name.wasm") \
    || fail "the Python $kind project does not build"
  verify "$projects/$name/$name.wasm"
done

name=kit-js-split-enumerator
new "$name" split-enumerator js
ln -s "$node_modules" "$projects/$name/node_modules"
(cd "$projects/$name" && node build.mjs "$name.wasm") || fail "the JavaScript project does not build"
verify "$projects/$name/$name.wasm" --config lines=20 --config lines-per-split=4

# The scalar functions (issue 27), one project per language: built, checked, their signature
# printed by `plugin call`, then `plugin test` (signature, determinism, error values).
node_modules_fn=$root/plugins/js-function/node_modules
[ -d "$node_modules_fn/apache-arrow" ] \
  || fail "apache-arrow not in $node_modules_fn; run 'make plugins' (it runs npm ci there)"
called() { # WASM
  "$bin" --cache-dir "$cache" plugin call "$1" | grep -q 'signature: (Float64, Float64) -> Float64, deterministic: true' \
    || fail "plugin call does not print the signature of $1"
}

name=kit-rust-scalar-function
new "$name" scalar-function rust
(cd "$projects/$name" && cargo build --quiet --locked --release --target wasm32-wasip2) \
  || fail "the Rust scalar-function project does not build"
wasm="$CARGO_TARGET_DIR/wasm32-wasip2/release/${name//-/_}.wasm"
called "$wasm"
verify "$wasm"

name=kit-python-scalar-function
new "$name" scalar-function python
(cd "$projects/$name" && "$cpy" -d wit -w scalar-function-plugin componentize -p . app -o "$name.wasm") \
  || fail "the Python scalar-function project does not build"
called "$projects/$name/$name.wasm"
verify "$projects/$name/$name.wasm"

name=kit-js-scalar-function
new "$name" scalar-function js
ln -s "$node_modules_fn" "$projects/$name/node_modules"
(cd "$projects/$name" && node build.mjs "$name.wasm") || fail "the JavaScript scalar-function project does not build"
called "$projects/$name/$name.wasm"
verify "$projects/$name/$name.wasm"

# C: the project's own Makefile (clang-19, wit-bindgen c, wasm-tools component new; the tools
# `make plugins` installs through scripts/install-c-deps.sh).
name=kit-c-scalar-function
new "$name" scalar-function c
make -C "$projects/$name" || fail "the C scalar-function project does not build (tools: scripts/install-c-deps.sh)"
called "$projects/$name/$name.wasm"
verify "$projects/$name/$name.wasm"

# The source readers (issue 27), one project per language: built, checked, the sample read by
# `plugin call`, then `plugin test` on the sample and the bad sample the project ships.
reader_columns=(--column level=varchar --column status=bigint --column ms=double
  --column path=varchar --column cached=boolean)
read_sample() { # WASM PROJECT_DIR
  # The project carries the coordhost:reader WIT as the host has it.
  cmp -s "$root/wit/reader/reader.wit" "$2/wit/reader.wit" \
    || fail "$2/wit/reader.wit differs from the host's wit/reader/reader.wit"
  local called
  called=$("$bin" --cache-dir "$cache" plugin call "$1" "${reader_columns[@]}" --input "$2/sample.log") \
    || fail "plugin call fails on $2/sample.log"
  grep -q 'none: 1 batches, 8 rows' <<<"$called" || fail "plugin call does not read the 8 records of $2/sample.log: $called"
  grep -qF '     level=warn, status=404, ms=3.25, path=/missing, cached=false' <<<"$called" \
    || fail "plugin call of $1 does not print the sample's 404 record with its typed values: $called"
  "$bin" --cache-dir "$cache" plugin check "$1"
  local tested
  tested=$("$bin" --cache-dir "$cache" plugin test "$1" "${reader_columns[@]}" --input "$2/sample.log" \
    --bad-input "$2/bad-sample.log") || fail "plugin test failed for $1: $tested"
  grep -qF 'source-reader plugin, declared schema: (level Utf8, status Int64, ms Float64, path Utf8, cached Boolean)' \
    <<<"$tested" || fail "plugin test of $1 is not headed by the declared schema: $tested"
  grep -qF 'passed: 7 checks' <<<"$tested" || fail "plugin test of $1 did not pass its 7 checks: $tested"
  echo "kit-check: $1 passed"
}

name=kit-rust-source-reader
new "$name" source-reader rust
(cd "$projects/$name" && cargo build --quiet --locked --release --target wasm32-wasip2) \
  || fail "the Rust source-reader project does not build"
read_sample "$CARGO_TARGET_DIR/wasm32-wasip2/release/${name//-/_}.wasm" "$projects/$name"

name=kit-python-source-reader
new "$name" source-reader python
(cd "$projects/$name" && "$cpy" -d wit -w source-reader-plugin componentize -p . app -o "$name.wasm") \
  || fail "the Python source-reader project does not build"
read_sample "$projects/$name/$name.wasm" "$projects/$name"

name=kit-js-source-reader
new "$name" source-reader js
ln -s "$node_modules_fn" "$projects/$name/node_modules"
(cd "$projects/$name" && node build.mjs "$name.wasm") || fail "the JavaScript source-reader project does not build"
read_sample "$projects/$name/$name.wasm" "$projects/$name"

echo "kit-check: every generated project built and passed plugin test"
