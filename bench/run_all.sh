#!/usr/bin/env bash
# Run every tstream benchmark and write bench/RESULTS.md (raw figures in bench/results/*.json).
#
#   bench/run_all.sh            # from the repo root, with the project's venv in .venv
#   PYTHON=/path/to/python bench/run_all.sh
#   bench/run_all.sh --out bench   # update the committed bench/RESULTS.md and bench/results/
#
# Without --out, everything goes to bench/runs/ (ignored by git): RESULTS.md and results/*.json.
#
# Each script starts (and always stops) its own tstream-server and redis-server on free
# loopback ports with persistence off, except persistence.py, which turns it on in temp
# directories (up to ~3 GB at a time, deleted as it goes; it alone takes about 5 minutes).
# To tune a single benchmark run its script with its options
# (see the "Commands" blocks in RESULTS.md).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
    echo "run_all.sh: redis-server and redis-benchmark are needed (apt-get install redis-server redis-tools)" >&2
    exit 2
}
OUT=bench/runs
if [ "${1:-}" = "--out" ]; then
    [ $# -ge 2 ] || { echo "usage: bench/run_all.sh [--out DIR]" >&2; exit 2; }
    OUT=$2
fi
export TSTREAM_BENCH_OUT=$OUT   # read by bench/common.py: every script writes there
mkdir -p "$OUT/results"
rm -f "$OUT/results/throughput.json" "$OUT/results/memory.json" "$OUT/results/seek_latency.json" \
    "$OUT/results/persistence.json"
echo "writing $OUT/RESULTS.md and $OUT/results/"
start=$(date +%s)
failed=0
for script in throughput memory seek_latency persistence; do
    echo "=== $script ($(date +%T))"
    if ! "$PYTHON" "bench/$script.py"; then
        echo "=== $script FAILED" >&2
        failed=1
    fi
done
total=$(( $(date +%s) - start ))
"$PYTHON" bench/report.py --total-seconds "$total" || failed=1
echo "=== done in ${total}s"
exit $failed
