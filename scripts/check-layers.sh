#!/usr/bin/env bash
# The layer check of docs/architecture.md: the host's modules (host/src/NAME.rs
# or host/src/NAME/) stand on floors, and a module may import only modules on
# lower floors. Reads every `crate::NAME` path of host/src (in `use` lines,
# `use crate::{...}` groups over several lines, and inline paths; `super::`
# paths that climb to the crate root count too), comments left out. Names that
# lib.rs re-exports from the workspace's crates (`pub use coordhost_model::
# {graph, value};`, `pub use coordhost_ha as ha;`) lie below every floor: Cargo keeps those arrows. Prints one
# line per violation and exits 1 when there is any:
#   - an import of a module on the same or a higher floor (scheduler/ and
#     recovery/ share a floor: they never import each other);
#   - an import circle between modules;
#   - a module that is not on any floor (put it on one, here and in
#     docs/architecture.md);
#   - a floor list that differs from the one in docs/architecture.md.
#
# usage: scripts/check-layers.sh [SRC_DIR]   check SRC_DIR (default host/src)
#        scripts/check-layers.sh --self-test  check a copy of host/src with
#            injected violations and expect each to be reported
set -euo pipefail

# The floors, lowest first; keep in step with docs/architecture.md ("Floors").
FLOORS='
0 failpoints
1 events
2 ui
3 config coordinator
4 scheduler recovery
5 job
6 kit
7 cli
'

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

check() {
    local src=$1
    if [ ! -d "$src" ]; then
        echo "check-layers: $src: no such folder" >&2
        return 2
    fi
    local files
    files=$(cd "$src" && find . -name '*.rs' -not -path './lib.rs' -not -path './main.rs' | sed 's#^\./##' | sort)
    # shellcheck disable=SC2086
    local modules
    modules=$(sed 's#/.*##; s#\.rs$##' <<<"$files" | sort -u | tr '\n' ' ')
    # Names lib.rs re-exports from the workspace's crates (`pub use
    # coordhost_core::{plan, snapshot};`): below every floor, their own
    # arrows kept by Cargo (docs/architecture.md, "Crates").
    local crates
    crates=$( (sed -n 's/^pub use coordhost_[a-z_]*::{\{0,1\}\([a-z_, ]*\)}\{0,1\};$/\1/p' "$src/lib.rs"
        sed -n 's/^pub use coordhost_[a-z_]* as \([a-z_]*\);$/\1/p' "$src/lib.rs") 2>/dev/null | tr ',\n' '  ')
    (cd "$src" && awk -v floors="$FLOORS" -v modules="$modules" -v crates="$crates" -v prefix="${src%/}/" '
        BEGIN {
            n = split(floors, lines, "\n")
            for (i = 1; i <= n; i++) {
                c = split(lines[i], w, " ")
                for (j = 2; j <= c; j++) floor[w[j]] = w[1] + 0
            }
            n = split(modules, w, " ")
            for (i = 1; i <= n; i++) ismodule[w[i]] = 1
            n = split(crates, w, " ")
            for (i = 1; i <= n; i++) iscrate[w[i]] = 1
        }
        FNR == 1 {
            if (NR > 1) scan(file, text)
            file = FILENAME; text = ""
            path = FILENAME; sub(/\.rs$/, "", path); sub(/\/mod$/, "", path)
            depth[file] = split(path, parts, "/")
            module[file] = parts[1]
        }
        {
            line = $0
            # Comments are not imports (doc links name other modules freely).
            if (line ~ /^[ \t]*\/\//) line = ""
            sub(/[ \t]\/\/[^"]*$/, "", line)
            text = text line "\n"
        }
        END {
            if (NR > 0) scan(file, text)
            report()
        }
        function note(f, offset, target,    ln, from) {
            from = module[f]
            if (target == from || target == "" || target == "self" || target == "super" || (target in iscrate)) return
            tmp = substr(texts[f], 1, offset)
            ln = 1 + gsub(/\n/, "\n", tmp)
            sites[from SUBSEP target] = sites[from SUBSEP target] ? sites[from SUBSEP target] : (prefix f ":" ln)
            if (!((from, target) in seen)) { seen[from, target] = 1; edges[from] = edges[from] " " target }
            if (!(target in floor)) {
                if (!(target in unknown)) { unknown[target] = prefix f ":" ln }
            } else if (!(from in floor)) {
                if (!(from in unknown)) { unknown[from] = prefix f ":" ln }
            } else if (floor[target] >= floor[from]) {
                kind = floor[target] > floor[from] ? "upward import" : "sideways import"
                bad[++nbad] = prefix f ":" ln ": " kind ": `" from "` (floor " floor[from] ") uses `crate::" target "` (floor " floor[target] ")" \
                    ((from == "scheduler" && target == "recovery") || (from == "recovery" && target == "scheduler") ? "; scheduler/ and recovery/ must not import each other (the job driver connects them)" : "")
            }
        }
        function scan(f, t,    rest, pos, m, group, g, depthb, i, ch, name, ups, re) {
            texts[f] = t
            # Inline paths and single `use crate::x` lines.
            rest = t; pos = 0
            while (match(rest, /crate::[a-z_][a-z0-9_]*/)) {
                note(f, pos + RSTART, substr(rest, RSTART + 7, RLENGTH - 7))
                pos += RSTART + RLENGTH - 1; rest = substr(rest, RSTART + RLENGTH)
            }
            # `use crate::{a, b::c, ...}` groups, on one line or several: the
            # first name of each item at brace depth 1 (a bare `a` before `,`
            # or `}` as well as `b::c`); a name that starts upper-case is an
            # item of the crate root, not a module.
            rest = t; pos = 0
            while (match(rest, /crate::\{/)) {
                i = RSTART + RLENGTH; depthb = 1; name = ""; expect = 1
                while (i <= length(rest) && depthb > 0) {
                    ch = substr(rest, i, 1)
                    if (depthb == 1 && expect && ch ~ /[A-Za-z_0-9]/) { name = name ch }
                    else {
                        if (name != "") {
                            if (name ~ /^[a-z_][a-z0-9_]*$/) note(f, pos + i, name)
                            name = ""; expect = 0
                        }
                        if (ch == "{") { depthb++; expect = 0 }
                        else if (ch == "}") { depthb-- }
                        else if (depthb == 1 && ch == ",") { expect = 1 }
                    }
                    i++
                }
                pos += i - 1; rest = substr(rest, i)
            }
            # `super::` climbing to the crate root: `super::` repeated as many
            # times as the file is deep names a top-level module.
            ups = ""
            for (i = 0; i < depth[f]; i++) ups = ups "super::"
            if (ups != "") {
                re = ups "[a-z_][a-z0-9_]*"
                rest = t; pos = 0
                while (match(rest, re)) {
                    name = substr(rest, RSTART + length(ups), RLENGTH - length(ups))
                    # Only a module of the tree: `super::item` inside a
                    # test module names an item of its own file.
                    if ((RSTART == 1 || substr(rest, RSTART - 1, 1) !~ /[a-z_:]/) && (name in ismodule))
                        note(f, pos + RSTART, substr(rest, RSTART + length(ups), RLENGTH - length(ups)))
                    pos += RSTART + RLENGTH - 1; rest = substr(rest, RSTART + RLENGTH)
                }
            }
        }
        function visit(m, path,    k, c, targets, t) {
            state[m] = 1; stack[++sp] = m
            c = split(edges[m], targets, " ")
            for (k = 1; k <= c; k++) {
                t = targets[k]
                if (state[t] == 1) cycle(t)
                else if (state[t] == 0) visit(t)
            }
            sp--; state[m] = 2
        }
        function cycle(t,    i, s, key, least) {
            for (i = sp; i >= 1 && stack[i] != t; i--) ;
            s = ""
            for (; i <= sp; i++) s = s stack[i] " -> "
            s = s t
            if (!(s in cycles)) { cycles[s] = 1; bad[++nbad] = "import circle: " s " (first import: " sites[stack[sp] SUBSEP t] ")" }
        }
        function report(    m, i) {
            for (m in unknown) bad[++nbad] = unknown[m] ": module `" m "` is on no floor: add it to the floor list of scripts/check-layers.sh and docs/architecture.md"
            for (m in edges) state[m] = 0
            for (m in edges) if (state[m] == 0) { sp = 0; visit(m) }
            for (i = 1; i <= nbad; i++) print bad[i]
            if (nbad > 0) exit 1
        }
    ' $files)
}

self_test() {
    local tmp status out
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    cp -r "$repo/host/src" "$tmp/clean"
    if ! out=$(check "$tmp/clean"); then
        echo "check-layers --self-test: the unchanged tree already fails:"
        echo "$out"
        return 1
    fi
    status=0
    # name|file|line to append|text expected in the report
    while IFS='|' read -r name file inject expect; do
        [ -n "$name" ] || continue
        rm -rf "$tmp/case" && cp -r "$tmp/clean" "$tmp/case"
        printf '%b\n' "$inject" >>"$tmp/case/$file"
        if out=$(check "$tmp/case"); then
            echo "check-layers --self-test: $name: not reported"
            status=1
        elif ! grep -qF -- "$expect" <<<"$out"; then
            echo "check-layers --self-test: $name: reported without \`$expect\`:"
            echo "$out"
            status=1
        fi
    done <<'CASES'
upward use line|failpoints.rs|use crate::job::run_job;|failpoints.rs:
upward inline path|events/lock.rs|fn f() { let _ = crate::scheduler::CRASH_POINTS; }|upward import: `events` (floor 1) uses `crate::scheduler`
upward in a use group|failpoints.rs|use crate::{files::read_regular_file,\n    recovery::recover};|uses `crate::recovery`
bare name alone in a group|failpoints.rs|use crate::{recovery};|uses `crate::recovery`
bare names in a group|failpoints.rs|use crate::{files, recovery};|uses `crate::recovery`
bare names without spaces|failpoints.rs|use crate::{files,recovery};|uses `crate::recovery`
bare names in a group over lines|failpoints.rs|use crate::{\n    files,\n    recovery,\n};|uses `crate::recovery`
bare name after a nested group|failpoints.rs|use crate::{files::{read_regular_file, read_rest}, recovery};|uses `crate::recovery`
scheduler imports recovery|scheduler/master/mod.rs|use crate::recovery::recover;|must not import each other
recovery imports scheduler|recovery/oracle.rs|use crate::scheduler::JobError;|must not import each other
super to the crate root|failpoints.rs|use super::scheduler::JobMaster;|uses `crate::scheduler`
circle|events/mod.rs|use crate::ui::JobView;|import circle: 
module on no floor|stray.rs|use crate::events::EventLog;|module `stray` is on no floor
CASES
    # The floor list of the document and this script must agree.
    sed 's/^| 3 | `config\/` |/| 2 | `config\/` |/' "$repo/docs/architecture.md" >"$tmp/architecture.md"
    if out=$(check_doc "$tmp/architecture.md"); then
        echo "check-layers --self-test: a floor moved in docs/architecture.md: not reported"
        status=1
    elif ! grep -qF "floor/module 2 config" <<<"$out"; then
        echo "check-layers --self-test: a floor moved in docs/architecture.md: reported as:"
        echo "$out"
        status=1
    fi
    if [ "$status" -eq 0 ]; then
        echo "check-layers --self-test: every injected violation was reported"
    fi
    return "$status"
}

# The floor list of docs/architecture.md ("| N | `name` |" rows), sorted
# "N name" lines, to compare with FLOORS.
doc_floors() {
    sed -n 's/^| \([0-9]\+\) | `\([a-z_]\+\)\/\{0,1\}` |.*/\1 \2/p' "$1" | sort
}

script_floors() {
    awk 'NF { for (i = 2; i <= NF; i++) print $1, $i }' <<<"$FLOORS" | sort
}

# Prints one line per module whose floor differs between this script and
# the document; fails if there is any.
check_doc() {
    local doc=${1:-$repo/docs/architecture.md} diff
    if [ ! -f "$doc" ]; then
        echo "$doc: missing (it holds the floor list this script checks)"
        return 1
    fi
    diff=$(comm -3 <(script_floors) <(doc_floors "$doc"))
    if [ -n "$diff" ]; then
        comm -23 <(script_floors) <(doc_floors "$doc") | sed "s#^#scripts/check-layers.sh has floor/module #; s#\$# that $doc does not#"
        comm -13 <(script_floors) <(doc_floors "$doc") | sed "s#^#$doc has floor/module #; s#\$# that scripts/check-layers.sh does not#"
        return 1
    fi
}

case "${1:-}" in
    --self-test) self_test ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' ;;
    *)
        src=${1:-$repo/host/src}
        check_doc
        if out=$(check "$src"); then
            echo "check-layers: no import circles, no imports across floors the wrong way ($src)"
        else
            echo "$out"
            exit 1
        fi
        ;;
esac
