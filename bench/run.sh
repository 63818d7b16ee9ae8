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
# REPLAY_KEYS (2000), GROWTH_ROWS (0 = skip), SQLITE (1 = run it), ROUNDS
# (3: pgbench and the receiver alternate this many fresh runs), WORKERS (the
# receiver's `workers`; default: its own default, one per core), and
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
ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-}
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
TARGET=${CARGO_TARGET_DIR:-target}

# The receiver, and the load generator (bench/loadgen, a workspace member
# that is not published).
cargo build --release --quiet --bin idempotent-receiver --bin loadgen
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

# Where the CPU went during a run: the client's own (pgbench or loadgen,
# from /usr/bin/time), the receiver's (/proc/PID/stat), and the rest of the
# machine's busy time, which is PostgreSQL (and its background writers)
# plus whatever else ran. Shares of both cores' time, idle included.
CPU=$WORK/cpu
stat_ticks() { awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $5+$6 }' /proc/stat; }
proc_ticks() { if [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ]; then awk '{ print $14+$15 }' "/proc/$1/stat"; else echo 0; fi; }
cpu_begin() { read -r CPU_BUSY0 CPU_IDLE0 < <(stat_ticks); CPU_SERVER0=$(proc_ticks "$SERVER_PID"); }
cpu_end() { # label client-time-file
  local busy1 idle1 server1 client
  read -r busy1 idle1 < <(stat_ticks)
  server1=$(proc_ticks "$SERVER_PID")
  client=$(awk '{ printf "%d", ($1 + $2) * 100 }' "$2" 2>/dev/null || echo 0)
  awk -v label="$1" -v busy=$((busy1 - CPU_BUSY0)) -v idle=$((idle1 - CPU_IDLE0)) \
    -v server=$((server1 - CPU_SERVER0)) -v client="$client" 'BEGIN {
      all = busy + idle; if (all <= 0) all = 1
      rest = busy - server - client; if (rest < 0) rest = 0
      printf "| %s | %.0f %% | %.0f %% | %.0f %% | %.0f %% |\n", label, 100 * rest / all, 100 * server / all, 100 * client / all, 100 * idle / all
    }' >>"$CPU"
}

# Every measured run starts from the same state: no dirty pages left by the
# previous one for a checkpoint to write in the middle of this one.
settle() { psql -q -v ON_ERROR_STOP=1 "$URL" -c CHECKPOINT >/dev/null; }

# pgbench's "tps = N (without initial connection time)".
pgbench_tps() { sed -n 's/^tps = \([0-9]*\.[0-9]\).*/\1/p' | head -n 1; }

# A row of the final table.
row() { printf '| %s | %s | %s | %s | %s | %s |\n' "$@" >>"$RESULTS"; }

field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }

start_server() { # database_url port
  cat >"$WORK/receiver.toml" <<EOF
pool_size = $CONCURRENCY
${WORKERS:+workers = $WORKERS}
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
  settle
  say "loadgen $label"
  cpu_begin
  /usr/bin/time -o "$WORK/time.$label" -f '%U %S' "$LOADGEN" --url "http://127.0.0.1:$port" --endpoint bench --secret "$SECRET" \
    --scenario "$scenario" --duration "$DURATION" --requests 100000000 \
    --replay-keys "$REPLAY_KEYS" --storm-copies "$STORM_COPIES" \
    --database-url "$url" --label "$label" "$@" | tee -a "$WORK/loadgen.txt" >&2
  cpu_end "receiver $label (loadgen)" "$WORK/time.$label"
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
: >"$CPU"
command -v /usr/bin/time >/dev/null || { echo "bench/run.sh needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
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
port=$(( 20000 + $$ % 20000 ))
start_server "$URL" "$port"

# --- fresh: pgbench and the receiver take turns, ROUNDS times -------------
# This machine's throughput drifts by a quarter between runs a minute apart;
# alternating the two and taking the median ratio keeps that drift out of
# the comparison. pgbench runs while the receiver is up and idle.
ratios=() pg_all=() rx_all=()
for round in $(seq 1 "$ROUNDS"); do
  say "round $round/$ROUNDS: pgbench fresh ($CONCURRENCY clients, ${DURATION}s)"
  settle
  cpu_begin
  tps=$(/usr/bin/time -o "$WORK/time.pgbench-fresh" -f '%U %S' pgbench -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION" -f bench/fresh.sql "$URL" 2>&1 | tee "$WORK/pgbench-fresh.txt" | pgbench_tps)
  cpu_end "pgbench fresh, round $round" "$WORK/time.pgbench-fresh"
  row postgres "pgbench fresh transaction (tps), round $round" "$tps" "—" "—" ""
  r=$(loadgen "pg-fresh-$round" "$URL" "$port" fresh --concurrency "$CONCURRENCY")
  record postgres "receiver fresh, round $round" "$r" "$tps"
  rps=$(echo "$r" | field rps)
  pg_all+=("$tps") rx_all+=("$rps")
  ratios+=("$(awk -v a="$rps" -v b="$tps" 'BEGIN { printf "%.3f", a / b }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
pg_fresh=$(median "${pg_all[@]}")
fresh_empty=$(median "${rx_all[@]}")
row postgres "**fresh, median of $ROUNDS rounds** (pgbench tps / receiver req/s)" "$pg_fresh / $fresh_empty" "$(printf '%.2f' "$(median "${ratios[@]}")")" "—" "ratios: ${ratios[*]}"

# --- replay: the primary-key read, then the receiver ----------------------
say "pgbench replay ($CONCURRENCY clients, ${DURATION}s)"
settle
cpu_begin
pg_replay=$(/usr/bin/time -o "$WORK/time.pgbench-replay" -f '%U %S' pgbench -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION" -D keys="$REPLAY_KEYS" -f bench/replay.sql "$URL" 2>&1 | tee "$WORK/pgbench-replay.txt" | pgbench_tps)
cpu_end "pgbench replay" "$WORK/time.pgbench-replay"
row postgres "pgbench replay lookup (tps)" "$pg_replay" "—" "—" ""
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
  grown_all=()
  for round in $(seq 1 "$ROUNDS"); do
    r=$(loadgen "pg-fresh-grown-$round" "$URL" "$port" fresh --concurrency "$CONCURRENCY")
    record postgres "receiver fresh, $GROWTH_ROWS rows loaded, round $round" "$r"
    grown_all+=("$(echo "$r" | field rps)")
  done
  grown=$(median "${grown_all[@]}")
  row postgres "**growth**: median fresh(loaded) ÷ median fresh(empty)" "$grown / $fresh_empty" "$(awk -v a="$grown" -v b="$fresh_empty" 'BEGIN { printf "%.2f", a / b }')" "—" ""
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
echo
echo "Where the CPU went (share of both cores; \"database + rest\" is PostgreSQL and anything else that ran):"
echo
echo "| run | database + rest | receiver | client | idle |"
echo "|---|---|---|---|---|"
cat "$CPU"
