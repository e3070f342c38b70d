#!/usr/bin/env bash
# demo-workers.sh: the TPC-H example on 1 coordinator + 3 worker processes,
# the coordinator killed midway (issue 14, docs/workers.md).
#
#   scripts/demo-workers.sh COORDHOST JOB.toml DATA_DIR [PORT]
#
# Starts 3 `COORDHOST worker` processes (data in DATA_DIR/workers/w<i>),
# then runs scripts/demo-recovery.sh with `--listen 127.0.0.1:PORT
# --external-workers 3`: the coordinator is SIGKILLed once its sources
# finished and started again; the workers outlive it, register again with
# the partitions they hold, and the new coordinator skips their producers.
# At the end it checks that no partition or staged output is left on any
# worker, and stops the workers.
#
# Exit codes: as demo-recovery.sh; 1 also when a worker keeps files after
# the job.
set -euo pipefail

die() { printf 'demo-workers: %s\n' "$1" >&2; exit "${2:-1}"; }
[ $# -ge 3 ] || die "usage: $0 COORDHOST JOB.toml DATA_DIR [PORT]" 2
bin=$1 job=$2 data=$3 port=${4:-7733}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -x "$bin" ] || die "$bin: not an executable (the coordhost binary)" 2
if [ -e "$data" ] && [ -n "$(ls -A "$data")" ]; then
    die "$data is not empty; remove it first" 2
fi
mkdir -p "$data/workers"
coordinator="127.0.0.1:$port"
pids=()
stop_workers() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_workers EXIT
for i in 0 1 2; do
    "$bin" worker --coordinator "$coordinator" --data-dir "$data/workers/w$i" \
        --id "w$i" --slots 2 2>"$data/workers/w$i.log" &
    pids+=($!)
done
printf 'demo-workers: 3 workers started for %s (logs in %s/workers)\n' "$coordinator" "$data"
"$here/demo-recovery.sh" "$bin" "$job" "$data/coordinator" \
    --listen "$coordinator" --external-workers 3
left=$(find "$data"/workers/w*/partitions "$data"/workers/w*/sink -type f 2>/dev/null | wc -l)
[ "$left" -eq 0 ] || die "$left files left on the workers after the job"
printf 'demo-workers: no partition or staged output left on any worker\n'
