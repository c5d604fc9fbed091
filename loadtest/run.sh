#!/usr/bin/env bash
# Headless locust run against a fresh tstream-server:
#   loadtest/run.sh [extra locust options]
# Starts tstream-server on 127.0.0.1:$PORT (default 6380) in a temporary dir (no
# snapshots, no AOF unless TSTREAM_ARGS says so), runs locust for $DURATION
# (default 2m) with $USERS users (default 100) spawned at $SPAWN_RATE/s (default 20),
# writes the CSVs to loadtest/results/run_*.csv, then stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-6380}
USERS=${USERS:-100}
SPAWN_RATE=${SPAWN_RATE:-20}
DURATION=${DURATION:-2m}
CSV=${CSV:-loadtest/results/run}
VENV=${VENV:-.venv}
DATA=$(mktemp -d /tmp/tstream-load-XXXXXX)
mkdir -p "$(dirname "$CSV")"

# shellcheck disable=SC2086
"$VENV/bin/tstream-server" --port "$PORT" --dir "$DATA" --save '' ${TSTREAM_ARGS:-} > "$DATA/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do
    "$VENV/bin/python" -c "import redis,sys; redis.Redis(port=$PORT).ping()" 2>/dev/null && break
    sleep 0.1
done

"$VENV/bin/locust" -f loadtest/locustfile.py --headless -u "$USERS" -r "$SPAWN_RATE" -t "$DURATION" \
    --csv "$CSV" --host "redis://127.0.0.1:$PORT" --only-summary "$@"
"$VENV/bin/python" -c "import redis; r = redis.Redis(port=$PORT); print('server:', {k: r.info()[k] for k in ('used_memory_human', 'total_commands_processed', 'connected_clients')})"
