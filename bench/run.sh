#!/usr/bin/env bash
# The performance harness: pgbench running the receiver's own SQL, then the
# receiver (release build) driven over HTTP by `loadgen` at the same
# concurrency, on one PostgreSQL, then the same scenarios on embedded SQLite.
# Prints one table. Every run is bounded by DURATION seconds; a temporary
# database and folder are created and removed again.
#
#   bench/run.sh                       # defaults below
#   DURATION=20 CONCURRENCY=32 bench/run.sh
#   GROWTH_ROWS=5000000 bench/run.sh   # also: fresh with 5 M completed rows loaded
#
# Environment: PG (base URL, default postgres://root@127.0.0.1:5432),
# DURATION (s, default 10), CONCURRENCY (default 16), STORM_COPIES (64),
# REPLAY_KEYS (2000), GROWTH_ROWS (0 = skip), SQLITE (1 = run it), and
# CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail
cd "$(dirname "$0")/.."

PG=${PG:-postgres://root@127.0.0.1:5432}
DURATION=${DURATION:-10}
CONCURRENCY=${CONCURRENCY:-16}
STORM_COPIES=${STORM_COPIES:-64}
REPLAY_KEYS=${REPLAY_KEYS:-2000}
GROWTH_ROWS=${GROWTH_ROWS:-0}
SQLITE=${SQLITE:-1}
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
TARGET=${CARGO_TARGET_DIR:-target}

cargo build --release --quiet --bins
BIN=$TARGET/release/idempotent-receiver
LOADGEN=$TARGET/release/loadgen

DB=ir_bench_$$
URL=$PG/$DB
WORK=$(mktemp -d)
SERVER_PID=
RESULTS=$WORK/results

cleanup() {
  stop_server
  psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '\n==> %s\n' "$*" >&2; }

# pgbench's "tps = N (without initial connection time)".
pgbench_tps() { sed -n 's/^tps = \([0-9]*\.[0-9]\).*/\1/p' | head -n 1; }

# A row of the final table.
row() { printf '| %s | %s | %s | %s | %s | %s |\n' "$@" >>"$RESULTS"; }

field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

start_server() { # database_url port
  cat >"$WORK/receiver.toml" <<EOF
pool_size = $CONCURRENCY
purge_interval = "0"
reconcile_interval = "0"
[endpoints.bench]
provider = "standard-webhooks"
secrets = ["$SECRET"]
EOF
  IR_LISTEN=127.0.0.1:$2 DATABASE_URL=$1 IR_DATA_DIR=$WORK/data RUST_LOG=warn \
    "$BIN" --config "$WORK/receiver.toml" serve 2>>"$WORK/server.log" &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$2/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the receiver did not become ready; log:" >&2
  cat "$WORK/server.log" >&2
  exit 1
}

peak_rss_mib() { awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$SERVER_PID/status"; }

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}

loadgen() { # label database_url port scenario extra-args...
  local label=$1 url=$2 port=$3 scenario=$4
  shift 4
  say "loadgen $label"
  "$LOADGEN" --url "http://127.0.0.1:$port" --endpoint bench --secret "$SECRET" \
    --scenario "$scenario" --duration "$DURATION" --requests 100000000 \
    --replay-keys "$REPLAY_KEYS" --storm-copies "$STORM_COPIES" \
    --database-url "$url" --label "$label" "$@" | tee -a "$WORK/loadgen.txt" >&2
  grep "^RESULT label=$label " "$WORK/loadgen.txt" | tail -n 1
}

record() { # backend label result-line [pgbench-tps]
  local r=$3 rps p50 p99 max checks ratio=""
  rps=$(echo "$r" | field rps)
  p50=$(echo "$r" | field p50_ms)
  p99=$(echo "$r" | field p99_ms)
  max=$(echo "$r" | field max_ms)
  checks="effects $(echo "$r" | field one_effect), bodies $(echo "$r" | field bodies_identical)"
  if [ -n "${4:-}" ]; then ratio=$(awk -v a="$rps" -v b="$4" 'BEGIN { printf "%.2f", a / b }'); fi
  checks="$checks; $(echo "$r" | sed -n 's/.*statuses=\(.*\)$/\1/p')"
  row "$1" "$2" "$rps" "${ratio:-—}" "$p50 / $p99 / $max" "$checks"
}

say "machine: $(nproc) cores; $(uptime)"
: >"$RESULTS"
psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "CREATE DATABASE $DB" >/dev/null
DATABASE_URL=$URL "$BIN" migrate >/dev/null

# --- pgbench: the same SQL, the same concurrency, durable commits ---------
say "pgbench: replay keys"
psql -q -v ON_ERROR_STOP=1 "$URL" <<EOF
INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, event_type, response_status,
  response_content_type, response_body, attempts, received_at, completed_at)
SELECT 'bench', 'pgr-' || n, md5(n::text) || md5(n::text), 'completed', 'payment.succeeded', 200,
  'application/json', convert_to(repeat('x', 250), 'UTF8'), 1, now()::timestamp, now()::timestamp
FROM generate_series(1, $REPLAY_KEYS) AS n;
VACUUM ANALYZE deliveries;
EOF
say "pgbench fresh ($CONCURRENCY clients, ${DURATION}s)"
pg_fresh=$(pgbench -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION" -f bench/fresh.sql "$URL" 2>&1 | tee "$WORK/pgbench-fresh.txt" | pgbench_tps)
say "pgbench replay ($CONCURRENCY clients, ${DURATION}s)"
pg_replay=$(pgbench -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION" -D keys="$REPLAY_KEYS" -f bench/replay.sql "$URL" 2>&1 | tee "$WORK/pgbench-replay.txt" | pgbench_tps)
row postgres "pgbench fresh transaction (tps)" "$pg_fresh" "—" "—" ""
row postgres "pgbench replay lookup (tps)" "$pg_replay" "—" "—" ""

# --- the receiver on PostgreSQL, on emptied tables ------------------------
psql -q -v ON_ERROR_STOP=1 "$URL" -c "TRUNCATE deliveries, events, ledger_entries" -c "VACUUM ANALYZE deliveries, events, ledger_entries" >/dev/null
port=$(( 20000 + $$ % 20000 ))
start_server "$URL" "$port"
r=$(loadgen pg-fresh "$URL" "$port" fresh --concurrency "$CONCURRENCY"); record postgres "receiver fresh" "$r" "$pg_fresh"
fresh_empty=$(echo "$r" | field rps)
r=$(loadgen pg-replay "$URL" "$port" replay --concurrency "$CONCURRENCY"); record postgres "receiver replay" "$r" "$pg_replay"
r=$(loadgen pg-storm "$URL" "$port" storm --concurrency "$STORM_COPIES"); record postgres "receiver storm ×$STORM_COPIES" "$r"
r=$(loadgen pg-mixed "$URL" "$port" mixed --concurrency "$CONCURRENCY"); record postgres "receiver mixed 70/25/5" "$r"
row postgres "receiver peak RSS (VmHWM, MiB)" "$(peak_rss_mib)" "—" "—" ""
stop_server

# --- growth: the same fresh run with GROWTH_ROWS completed rows -----------
if [ "$GROWTH_ROWS" -gt 0 ]; then
  say "loading $GROWTH_ROWS completed rows (INSERT ... SELECT generate_series)"
  psql -q -v ON_ERROR_STOP=1 "$URL" <<EOF
INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, event_type, response_status,
  response_content_type, response_body, attempts, received_at, completed_at, request_body)
SELECT 'bench', 'old-' || n, md5(n::text) || md5(n::text), 'completed', 'payment.succeeded', 200,
  'application/json', convert_to(repeat('x', 250), 'UTF8'), 1,
  now()::timestamp - (n % 3600) * interval '1 minute', now()::timestamp, convert_to(repeat('y', 200), 'UTF8')
FROM generate_series(1, $GROWTH_ROWS) AS n;
VACUUM ANALYZE deliveries;
EOF
  loaded=$(psql -tA "$URL" -c "SELECT count(*) FROM deliveries WHERE status = 'completed'")
  say "deliveries now holds $loaded completed rows"
  start_server "$URL" "$port"
  r=$(loadgen pg-fresh-grown "$URL" "$port" fresh --concurrency "$CONCURRENCY")
  record postgres "receiver fresh, $GROWTH_ROWS rows loaded" "$r"
  grown=$(echo "$r" | field rps)
  row postgres "growth: fresh(loaded) ÷ fresh(empty)" "$(awk -v a="$grown" -v b="$fresh_empty" 'BEGIN { printf "%.2f", a / b }')" "—" "—" ""
  stop_server
fi

# --- the embedded SQLite default ------------------------------------------
if [ "$SQLITE" = 1 ]; then
  sqlite_url="sqlite://$WORK/data/receiver.db"
  start_server "$sqlite_url" "$port"
  r=$(loadgen sqlite-fresh "$sqlite_url" "$port" fresh --concurrency "$CONCURRENCY"); record sqlite "receiver fresh" "$r"
  r=$(loadgen sqlite-replay "$sqlite_url" "$port" replay --concurrency "$CONCURRENCY"); record sqlite "receiver replay" "$r"
  r=$(loadgen sqlite-storm "$sqlite_url" "$port" storm --concurrency "$STORM_COPIES"); record sqlite "receiver storm ×$STORM_COPIES" "$r"
  r=$(loadgen sqlite-mixed "$sqlite_url" "$port" mixed --concurrency "$CONCURRENCY"); record sqlite "receiver mixed 70/25/5" "$r"
  row sqlite "receiver peak RSS (VmHWM, MiB)" "$(peak_rss_mib)" "—" "—" ""
  stop_server
fi

echo
echo "$(nproc) cores; load during the run: $(uptime | sed 's/.*load average/load average/'); concurrency $CONCURRENCY; ${DURATION}s per run"
echo
echo "| backend | what | req/s (tps) | ÷ pgbench | p50 / p99 / max ms | checks; statuses |"
echo "|---|---|---|---|---|---|"
cat "$RESULTS"
