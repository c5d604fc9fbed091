#!/usr/bin/env bash
# Headless locust run against a fresh tstream-server:
#   loadtest/run.sh [--out DIR] [extra locust options]
# Starts tstream-server on 127.0.0.1:$PORT (default 6380) in a temporary dir (no
# snapshots, no AOF unless TSTREAM_ARGS says so), runs locust for $DURATION
# (default 2m) with $USERS users (default 100) spawned at $SPAWN_RATE/s (default 20),
# writes the CSVs to DIR/run_*.csv, then stops the server.
# DIR defaults to a new loadtest/runs/<time>/ (ignored by git): the committed
# loadtest/results/ changes only when asked, with --out loadtest/results.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-6380}
USERS=${USERS:-100}
SPAWN_RATE=${SPAWN_RATE:-20}
DURATION=${DURATION:-2m}
VENV=${VENV:-.venv}
OUT=loadtest/runs/$(date +%Y%m%d-%H%M%S)
if [ "${1:-}" = "--out" ]; then
    [ $# -ge 2 ] || { echo "usage: loadtest/run.sh [--out DIR] [locust options]" >&2; exit 2; }
    OUT=$2
    shift 2
fi
CSV=$OUT/run
mkdir -p "$OUT"
echo "writing ${CSV}_*.csv"
DATA=$(mktemp -d /tmp/tstream-load-XXXXXX)

# shellcheck disable=SC2086
"$VENV/bin/tstream-server" --port "$PORT" --dir "$DATA" --save '' ${TSTREAM_ARGS:-} > "$DATA/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do
    "$VENV/bin/python" -c "import redis,sys; redis.Redis(port=$PORT).ping()" 2>/dev/null && break
    sleep 0.1
done

echo "load average before: $(cat /proc/loadavg)"
"$VENV/bin/locust" -f loadtest/locustfile.py --headless -u "$USERS" -r "$SPAWN_RATE" -t "$DURATION" \
    --csv "$CSV" --host "redis://127.0.0.1:$PORT" --only-summary "$@"
echo "load average after: $(cat /proc/loadavg)"
# The server's own view: time spent executing each command (INFO commandstats),
# to tell server time from time spent in the network and the load generator.
"$VENV/bin/python" - "$PORT" <<'PY'
import sys, redis
r = redis.Redis(port=int(sys.argv[1]))
info = r.info("everything")
print("server: used_memory %s, rss %.1f MB, commands %d, cpu user+sys %.1f s" % (
    info["used_memory_human"], info["used_memory_rss"] / 2**20, info["total_commands_processed"],
    info["used_cpu_user"] + info["used_cpu_sys"]))
for key, value in sorted(info.items()):
    if key.startswith("cmdstat_"):
        print(f"  {key[8:]:<10} calls={value['calls']:<8} usec_per_call={value['usec_per_call']}")
PY
