#!/usr/bin/env bash
# demo-recovery.sh: the crash-and-recover demo (FLIP-383 "job recovery for
# batch jobs").
#
#   scripts/demo-recovery.sh COORDHOST JOB.toml DATA_DIR [run options...]
#
# Starts `COORDHOST run JOB.toml --data-dir DATA_DIR`, polls
# `COORDHOST log inspect DATA_DIR/<job name> --json` until the event log shows
# every source subtask finished, kills the coordinator with SIGKILL, starts
# the same command again, and prints what the second run skipped (from its
# --summary-json, DATA_DIR/recovery-summary.json, and the RecoveryFinished
# event of its log).
#
# DATA_DIR must be absent or empty: the first run has to start fresh.
# Extra arguments go to both runs (e.g. --workers 2); not --data-dir or
# --summary-json. The job must run long enough to be caught between its
# sources finishing and its end (slow it with `record-delay-us` if needed).
#
# Exit codes: 0 recovered and finished; 1 the demo could not show a
# recovery (the job ended before the kill, or the second run failed);
# 2 bad arguments.
set -euo pipefail

say() { printf 'demo-recovery: %s\n' "$*"; }
die() { printf 'demo-recovery: %s\n' "$1" >&2; exit "${2:-1}"; }

[ $# -ge 3 ] || die "usage: $0 COORDHOST JOB.toml DATA_DIR [run options...]" 2
bin=$1 job=$2 data=$3
shift 3
[ -x "$bin" ] || die "$bin: not an executable (the coordhost binary)" 2
[ -f "$job" ] || die "$job: no such job file" 2
command -v python3 >/dev/null 2>&1 || die "python3 is needed to read JSON" 2
if [ -e "$data" ] && [ -n "$(ls -A "$data")" ]; then
    die "$data is not empty; remove it first (the first run must start fresh)" 2
fi

# The job's name: its folder under the data directory holds the event log.
job_name=$(python3 - "$job" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
try:
    import tomllib
    print(tomllib.loads(text)["job"]["name"])
except ImportError:  # Python < 3.11: the [job] table's name line
    m = re.search(r'^\[job\][^\[]*?^\s*name\s*=\s*"([^"]+)"', text, re.M | re.S)
    print(m.group(1) if m else "")
EOF
)
[ -n "$job_name" ] || die "$job: no [job] name"
log_dir=$data/$job_name

# Prints "done ..." once every subtask of every source vertex (a vertex
# initialized without inputs) has a finished execution in the log, replayed
# as recovery does (a reset undoes a finish); else a progress line.
progress_py=$(cat <<'EOF'
import json, sys
try:
    events = json.load(sys.stdin)["events"]
except ValueError:
    print("no event log yet")
    sys.exit()
sources, done = {}, set()
for e in events:
    kind, ev = e["event"]["kind"], e["event"]["event"]
    if kind == "JobVertexInitialized" and all(not r for r in ev["subtask_inputs"]):
        sources[ev["job_vertex"]] = ev["parallelism"]
    elif kind == "ExecutionFinished":
        done.add((ev["attempt"]["job_vertex"], ev["attempt"]["subtask"]))
    elif kind == "ExecutionsReset":
        done -= {(v["job_vertex"], v["subtask"]) for v in ev["executions"]}
    elif kind == "RecoveryFinished":
        done -= {(r["execution"]["job_vertex"], r["execution"]["subtask"]) for r in ev["reset"]}
counts = {v: sum(1 for (w, _) in done if w == v) for v in sources}
line = ", ".join("%s %d/%d finished" % (v, counts[v], p) for v, p in sources.items())
if sources and all(counts[v] == p for v, p in sources.items()):
    print("done " + line)
else:
    print(line or "no source vertex initialized yet")
EOF
)
sources_progress() {
    "$bin" log inspect "$log_dir" --json 2>/dev/null | python3 -c "$progress_py" || true
}

# Prints the second run's summary and the recovery decision of its log.
report_py=$(cat <<'EOF'
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    s = json.load(f)
try:
    events = json.load(sys.stdin)["events"]
except ValueError:
    events = []
say = lambda line: print("demo-recovery: " + line)
say("second run: %s, recovered %s: skipped %d of %d tasks, ran %d, reset %d, in %d ms" % (
    s["status"], str(s["recovered"]).lower(), s["tasks_skipped"], s["tasks_total"],
    s["tasks_run"], s["tasks_reset"], s["wall_ms"]))
decisions = [e["event"]["event"] for e in events if e["event"]["kind"] == "RecoveryFinished"]
if decisions:
    last = decisions[-1]
    kept = ["%s#%d (attempt %d)" % (a["job_vertex"], a["subtask"], a["attempt"]) for a in last["skipped"]]
    say("kept from before the crash: " + (", ".join(kept) or "nothing"))
    for r in last["reset"]:
        kind = r["reason"] if isinstance(r["reason"], str) else next(iter(r["reason"]))
        # The summary's names for the reasons (README, `reset_reasons`).
        why = {
            "RecoveryUnfinished": "unfinished",
            "RecoveryNotInSnapshot": "no-snapshot",
            "RecoveryEnumeratorWithoutSnapshot": "enumerator-cannot-snapshot",
            "RecoveryPartitionMissing": "partition-missing",
            "RecoveryUpstreamReset": "upstream-reset",
        }.get(kind, kind)
        say("runs again: %s#%d (%s)" % (r["execution"]["job_vertex"], r["execution"]["subtask"], why))
EOF
)

mkdir -p "$data"
say "first run: $bin run $job --data-dir $data $*"
pid=""
# If the demo itself is interrupted, do not leave the first run behind.
trap '[ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true' EXIT
"$bin" run "$job" --data-dir "$data" "$@" &
pid=$!

progress=""
while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
        status=0
        wait "$pid" || status=$?
        pid=""
        die "the job ended (exit $status) before its log showed every source subtask finished (last seen: ${progress:-nothing}); nothing to recover. Slow its sources with record-delay-us or give it more data."
    fi
    progress=$(sources_progress)
    case $progress in done*) break ;; esac
    sleep 0.1
done

if ! kill -KILL "$pid" 2>/dev/null; then
    wait "$pid" || true
    pid=""
    die "the job ended on its own just before the kill; nothing to recover"
fi
status=0
wait "$pid" 2>/dev/null || status=$?
killed=$pid pid=""
[ "$status" -eq 137 ] || die "the first run ended with exit $status, not by the kill; nothing to recover"
say "killed the coordinator (pid $killed) with SIGKILL after every source subtask finished (${progress#done })"

summary=$data/recovery-summary.json
say "second run: $bin run $job --data-dir $data --summary-json $summary $*"
status=0
"$bin" run "$job" --data-dir "$data" --summary-json "$summary" "$@" || status=$?
[ "$status" -eq 0 ] || die "the second run failed (exit $status)"

"$bin" log inspect "$log_dir" --json 2>/dev/null | python3 -c "$report_py" "$summary"
