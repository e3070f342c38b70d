#!/usr/bin/env bash
# demo-ha.sh: a standby coordinator takes over a job whose leader died
# (issue 15, docs/ha.md).
#
#   scripts/demo-ha.sh COORDHOST JOB.toml DATA_DIR
#
# Starts its own etcd (data and log in DATA_DIR/etcd, free loopback ports),
# then two coordinators of the job, A and B, both with
# `--ha etcd://... --ha-lease-ttl-s 1` and the same data directory
# (DATA_DIR/shared; their stderr in DATA_DIR/A.err and B.err). A is elected
# and runs the job, B waits as a standby. Once the event log shows every
# source subtask finished (polled with `COORDHOST log inspect`, as
# demo-recovery.sh does), A is killed with SIGKILL: its lease expires after
# 1 s, B is elected, recovers the job from the shared log (skipping what A
# finished) and finishes it. Prints the time from the kill to B's election,
# B's summary and the job's output. Every process it started is stopped on
# exit.
#
# DATA_DIR must be absent or empty. The job must run long enough to be
# caught between its sources finishing and its end (examples/tpch-q1.toml
# slows its final stage for this; else use `record-delay-us`).
#
# Exit codes: 0 B took over and finished the job; 1 the demo could not show
# a takeover (the job ended before the kill, B failed, etcd did not start);
# 2 bad arguments or a missing tool.
set -euo pipefail

say() { printf 'demo-ha: %s\n' "$*"; }
die() { printf 'demo-ha: %s\n' "$1" >&2; exit "${2:-1}"; }

[ $# -eq 3 ] || die "usage: $0 COORDHOST JOB.toml DATA_DIR" 2
bin=$1 job=$2 data=$3
[ -x "$bin" ] || die "$bin: not an executable (the coordhost binary)" 2
[ -f "$job" ] || die "$job: no such job file" 2
command -v python3 >/dev/null 2>&1 || die "python3 is needed to read JSON" 2
etcd_bin=$(command -v etcd || true)
[ -n "$etcd_bin" ] || die "etcd not found: \`make ha-deps\` installs it (scripts/install-ha-deps.sh)" 2
if [ -e "$data" ] && [ -n "$(ls -A "$data")" ]; then
    die "$data is not empty; remove it first (the job must start fresh)" 2
fi
mkdir -p "$data"
data=$(cd "$data" && pwd)
shared=$data/shared

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
log_dir=$shared/$job_name

# Milliseconds since the epoch.
now_ms() { date +%s%3N; }

# Every process this demo started, stopped on exit.
etcd_pid="" a_pid="" b_pid=""
cleanup() {
    for p in "$a_pid" "$b_pid" "$etcd_pid"; do
        [ -z "$p" ] || kill -KILL "$p" 2>/dev/null || true
    done
    { wait; } 2>/dev/null || true
}
trap cleanup EXIT

# --- etcd on two free loopback ports -------------------------------------
read -r client_port peer_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))
')
mkdir -p "$data/etcd"
"$etcd_bin" --name demo --data-dir "$data/etcd/data" \
    --listen-client-urls "http://127.0.0.1:$client_port" \
    --advertise-client-urls "http://127.0.0.1:$client_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "demo=http://127.0.0.1:$peer_port" \
    --heartbeat-interval 10 --election-timeout 100 \
    >"$data/etcd/etcd.log" 2>&1 &
etcd_pid=$!
healthy() {
    python3 -c '
import sys, urllib.request
try:
    body = urllib.request.urlopen(sys.argv[1], timeout=2).read()
except Exception:
    sys.exit(1)
sys.exit(0 if b"\"health\":\"true\"" in body else 1)
' "http://127.0.0.1:$client_port/health"
}
for _ in $(seq 300); do
    healthy && break
    kill -0 "$etcd_pid" 2>/dev/null || die "etcd exited; see $data/etcd/etcd.log"
    sleep 0.1
done
healthy || die "etcd was not healthy within 30 s; see $data/etcd/etcd.log"
ha=etcd://127.0.0.1:$client_port
say "etcd serving $ha (data and log in $data/etcd)"

# --- two coordinators of the job ------------------------------------------
# Waits until file $1 has a line containing $2 (while process $3 runs);
# prints that line.
wait_line() {
    local file=$1 needle=$2 pid=$3
    for _ in $(seq 1200); do
        if grep -F -m1 -- "$needle" "$file" 2>/dev/null; then return 0; fi
        kill -0 "$pid" 2>/dev/null || die "$(basename "$file" .err) ended before printing \`$needle\`: $(tail -3 "$file")"
        sleep 0.05
    done
    die "no \`$needle\` in $file within 60 s"
}
run_args=(run "$job" --data-dir "$shared" --ha "$ha" --ha-lease-ttl-s 1)

say "coordinator A: $bin ${run_args[*]}"
"$bin" "${run_args[@]}" --summary-json "$data/A-summary.json" >"$data/A.out" 2>"$data/A.err" &
a_pid=$!
say "A: $(wait_line "$data/A.err" "leading job" "$a_pid")"

say "coordinator B: $bin ${run_args[*]}"
"$bin" "${run_args[@]}" --summary-json "$data/B-summary.json" >"$data/B.out" 2>"$data/B.err" &
b_pid=$!
say "B: $(wait_line "$data/B.err" "standby for job" "$b_pid")"

# --- kill the leader once its sources finished ----------------------------
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
progress=""
while :; do
    if ! kill -0 "$a_pid" 2>/dev/null; then
        status=0
        wait "$a_pid" || status=$?
        a_pid=""
        die "A ended (exit $status) before its log showed every source subtask finished (last seen: ${progress:-nothing}); nothing to take over. Slow the job with record-delay-us."
    fi
    progress=$(sources_progress)
    case $progress in done*) break ;; esac
    sleep 0.1
done
status=0
killed=0
# One group with stderr closed: the shell's "Killed" notice for A, which it
# prints at the first command after A ends, goes nowhere.
{
    kill -KILL "$a_pid" && killed=1
    killed_at=$(now_ms)
    wait "$a_pid" || status=$?
} 2>/dev/null
[ "$killed" = 1 ] || die "A ended on its own just before the kill; nothing to take over"
a_pid=""
[ "$status" -eq 137 ] || die "A ended with exit $status, not by the kill; nothing to take over"
say "killed the leader A with SIGKILL after every source subtask finished (${progress#done })"

# --- the standby takes over -----------------------------------------------
leading=""
while [ -z "$leading" ]; do
    leading=$(grep -F -m1 "leading job" "$data/B.err" || true)
    if [ -z "$leading" ]; then
        kill -0 "$b_pid" 2>/dev/null || die "B ended without being elected: $(tail -3 "$data/B.err")"
        sleep 0.01
    fi
done
elected_at=$(now_ms)
say "B: $leading"
say "takeover: $((elected_at - killed_at)) ms from the kill of A to B's election (lease TTL 1 s)"
status=0
wait "$b_pid" || status=$?
b_pid=""
[ "$status" -eq 0 ] || die "B failed (exit $status): $(tail -5 "$data/B.err")"

python3 - "$data/B-summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1], encoding="utf-8"))
print("demo-ha: B: %s, recovered %s: skipped %d of %d tasks, ran %d, reset %d, in %d ms" % (
    s["status"], str(s["recovered"]).lower(), s["tasks_skipped"], s["tasks_total"],
    s["tasks_run"], s["tasks_reset"], s["wall_ms"]))
for o in s["outputs"]:
    print("demo-ha: output: %s" % o)
EOF
out=$shared/output/$job_name
if [ -d "$out" ]; then
    for f in "$out"/part-*; do
        [ -f "$f" ] || continue
        say "--- $f"
        cat "$f"
    done
fi
say "done: B took over from A and finished the job; etcd, A and B stopped"
