#!/usr/bin/env bash
# What the manifests of the I/O-free crates promise (docs/architecture.md,
# "Crates"): coordhost-core, coordhost-log and coordhost-model depend on no
# plugin host, network, async runtime, object store, query engine or
# file-system crate, and their code names no file, socket or process API.
# Cargo already keeps them from naming the binary's modules; this keeps
# them from growing an I/O dependency of their own. Prints one line per
# finding and exits 1 when there is any.
#
# usage: scripts/check-crates.sh            check the workspace
#        scripts/check-crates.sh --self-test check a copy with an injected
#            dependency and an injected file call, expecting both reported
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

CRATES='coordhost-core coordhost-log coordhost-model'
# Dependencies (normal edges, any depth) an I/O-free crate must not have.
FORBIDDEN='wasmtime|wasmtime-wasi|tonic|etcd-client|tokio|object_store|datafusion|cap-std|rustix|tempfile|axum|hyper|reqwest'
# API names their code must not use.
IO_CALLS='std::fs|fs::|File::|OpenOptions|std::net|TcpStream|UdpSocket|std::process|Command::new'

check() {
    local root=$1 status=0 crate deps dir hits
    for crate in $CRATES; do
        local tree
        if ! tree=$(cd "$root" && cargo tree --quiet --offline -p "$crate" -e normal --prefix none 2>&1); then
            echo "check-crates: cargo tree -p $crate failed:"
            echo "$tree"
            status=1
            continue
        fi
        deps=$(sed 's/ .*//' <<<"$tree" | sort -u | grep -Ex "$FORBIDDEN" || true)
        for d in $deps; do
            echo "check-crates: $crate depends on \`$d\` (an I/O crate; see docs/architecture.md, \"Crates\")"
            status=1
        done
        dir="$root/host/${crate#coordhost-}/src"
        hits=$(grep -rnE "$IO_CALLS" "$dir" | grep -vE '^[^:]+:[0-9]+:\s*//' || true)
        if [ -n "$hits" ]; then
            while IFS= read -r h; do
                echo "check-crates: ${h#"$root/"}: $crate calls an I/O API (it stays free of I/O)"
            done <<<"$hits"
            status=1
        fi
    done
    return "$status"
}

self_test() {
    local tmp out status=0
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    # The manifests, the lock file and the crates' sources (what `cargo
    # tree` and the grep read) of every workspace member, as they are in the
    # working tree.
    # The members are read from the workspace manifest, so a new member is
    # copied without editing this list. The integration tests (the library's,
    # host/tests, and the end-to-end ones, tests/e2e/tests) are left out:
    # neither `cargo tree` nor the grep reads them.
    local members
    members=$(sed -n 's/^members *= *\[\(.*\)\]/\1/p' "$repo/Cargo.toml" | tr ',' '\n' | tr -d '" ')
    [ -n "$members" ] || { echo "check-crates --self-test: no members = [..] line in $repo/Cargo.toml"; return 1; }
    # shellcheck disable=SC2086 # one word per member
    (cd "$repo" && find Cargo.toml Cargo.lock $members \( -path host/tests -o -path tests/e2e/tests \) -prune -o \( -name Cargo.toml -o -name '*.rs' -o -name '*.proto' \) -print0 \
        | tar --null -T - -cf -) | (cd "$tmp" && tar xf -)
    if ! out=$(check "$tmp"); then
        echo "check-crates --self-test: the unchanged tree already fails:"
        echo "$out"
        return 1
    fi
    printf 'fn f() { let _ = std::fs::read("x"); }\n' >>"$tmp/host/core/src/plan.rs"
    sed -i 's/^\[dependencies\]$/[dependencies]\ntempfile = "3"/' "$tmp/host/log/Cargo.toml"
    out=$(check "$tmp" 2>&1 || true)
    grep -qF 'host/core/src/plan.rs' <<<"$out" || { echo "check-crates --self-test: a file call in coordhost-core: not reported"; echo "$out"; status=1; }
    grep -qF 'coordhost-log depends on `tempfile`' <<<"$out" || { echo "check-crates --self-test: an I/O dependency of coordhost-log: not reported"; echo "$out"; status=1; }
    [ "$status" -eq 0 ] && echo "check-crates --self-test: every injected violation was reported"
    return "$status"
}

if [ "${1:-}" = --self-test ]; then
    self_test
elif check "$repo"; then
    echo "check-crates: $CRATES depend on no I/O crate and call no I/O API"
else
    exit 1
fi
