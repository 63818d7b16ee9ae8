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
#   QUEUE=only bench/run.sh            # only the queued-mode section
#   OUTBOX=only bench/run.sh           # only the outbox section (brokers)
#
# Environment: PG (base URL, default postgres://root@127.0.0.1:5432),
# DURATION (s, default 10), CONCURRENCY (default 16), STORM_COPIES (64),
# REPLAY_KEYS (2000), GROWTH_ROWS (0 = skip), SQLITE (1 = run it), ROUNDS
# (3: pgbench and the receiver alternate this many fresh runs), WORKERS (the
# receiver's `workers`; default: its own default, one per core), QUEUE (1 =
# also the queued-mode section, 0 = not, only = nothing else), QUEUE_WORKERS
# (the draining processes' `queue_workers`; default: the receiver's own),
# DRAIN_PROCESSES (the larger drain's process count, default 3), OUTBOX (1 =
# also the outbox section, 0 = not, only = nothing else), OUTBOX_BROKERS
# (default "nats rabbitmq redis"), OUTBOX_RATE (the end-to-end run's steady
# req/s, default 200), OUTBOX_IN_FLIGHT (the baseline's publications in
# flight, default 256 = the relay's 4 batches of 64), and CARGO_TARGET_DIR
# as cargo reads it.
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
QUEUE=${QUEUE:-1}
QUEUE_WORKERS=${QUEUE_WORKERS:-}
DRAIN_PROCESSES=${DRAIN_PROCESSES:-3}
OUTBOX=${OUTBOX:-1}
OUTBOX_BROKERS=${OUTBOX_BROKERS:-nats rabbitmq redis}
OUTBOX_RATE=${OUTBOX_RATE:-200}
OUTBOX_IN_FLIGHT=${OUTBOX_IN_FLIGHT:-256}
# One section alone: QUEUE=only or OUTBOX=only.
ONLY=
if [ "$QUEUE" = only ]; then ONLY=queue OUTBOX=0; fi
if [ "$OUTBOX" = only ]; then ONLY=outbox QUEUE=0; fi
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
TARGET=${CARGO_TARGET_DIR:-target}

# The receiver, and the load generator (bench/loadgen, a workspace member
# that is not published).
cargo build --release --quiet --bin idempotent-receiver --bin loadgen --bin outboxbench
BIN=$TARGET/release/idempotent-receiver
LOADGEN=$TARGET/release/loadgen
OUTBOXBENCH=$TARGET/release/outboxbench

DB=ir_bench_$$
URL=$PG/$DB
WORK=$(mktemp -d)
SERVER_PID=
DRAIN_PIDS=()
RESULTS=$WORK/results
QUEUE_RESULTS=$WORK/queue-results
OUTBOX_RESULTS=$WORK/outbox-results
# "broker name" of every stream, exchange and queue, or key prefix made.
OUTBOX_MADE=()

cleanup() {
  stop_server
  stop_drainers
  local made
  for made in "${OUTBOX_MADE[@]}"; do
    # shellcheck disable=SC2086 # "broker name", split on purpose
    set -- $made
    "$OUTBOXBENCH" cleanup --broker "$1" --name "$2" >/dev/null 2>&1 || true
  done
  psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '\n==> %s %s\n' "$(date +%T)" "$*" >&2; }

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

# The receiver's configuration. SERVER_TOP (top-level keys) and
# SERVER_ENDPOINTS (more endpoint tables) are empty except in the queued
# section.
SERVER_TOP= SERVER_ENDPOINTS=
write_config() { # file
  cat >"$1" <<EOF
pool_size = $CONCURRENCY
${WORKERS:+workers = $WORKERS}
$SERVER_TOP
purge_interval = "0"
reconcile_interval = "0"
[endpoints.bench]
provider = "standard-webhooks"
secrets = ["$SECRET"]
$SERVER_ENDPOINTS
EOF
}

start_server() { # database_url port
  write_config "$WORK/receiver.toml"
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

# LG_ENDPOINT: the endpoint to post to (default bench).
loadgen() { # label database_url (empty: no effect check) port scenario extra-args...
  local label=$1 url=$2 port=$3 scenario=$4
  shift 4
  settle
  say "loadgen $label"
  cpu_begin
  /usr/bin/time -o "$WORK/time.$label" -f '%U %S' "$LOADGEN" --url "http://127.0.0.1:$port" --endpoint "${LG_ENDPOINT:-bench}" --secret "$SECRET" \
    --scenario "$scenario" --duration "$DURATION" --requests 100000000 \
    --replay-keys "$REPLAY_KEYS" --storm-copies "$STORM_COPIES" \
    ${url:+--database-url "$url"} --label "$label" "$@" | tee -a "$WORK/loadgen.txt" >&2
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
: >"$QUEUE_RESULTS"
: >"$OUTBOX_RESULTS"
command -v /usr/bin/time >/dev/null || { echo "bench/run.sh needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "CREATE DATABASE $DB" >/dev/null
DATABASE_URL=$URL "$BIN" migrate >/dev/null

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
port=$(( 20000 + $$ % 20000 ))

if [ -z "$ONLY" ]; then
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
fi

# --- growth: the same fresh run with GROWTH_ROWS completed rows -----------
if [ "$GROWTH_ROWS" -gt 0 ] && [ -z "$ONLY" ]; then
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
if [ "$SQLITE" = 1 ] && [ -z "$ONLY" ]; then
  sqlite_url="sqlite://$WORK/data/receiver.db"
  start_server "$sqlite_url" "$port"
  r=$(loadgen sqlite-fresh "$sqlite_url" "$port" fresh --concurrency "$CONCURRENCY"); record sqlite "receiver fresh" "$r"
  r=$(loadgen sqlite-replay "$sqlite_url" "$port" replay --concurrency "$CONCURRENCY"); record sqlite "receiver replay" "$r"
  r=$(loadgen sqlite-storm "$sqlite_url" "$port" storm --concurrency "$STORM_COPIES"); record sqlite "receiver storm ×$STORM_COPIES" "$r"
  r=$(loadgen sqlite-mixed "$sqlite_url" "$port" mixed --concurrency "$CONCURRENCY"); record sqlite "receiver mixed 70/25/5" "$r"
  row sqlite "receiver peak RSS (VmHWM, MiB)" "$(peak_rss_mib)" "—" "—" ""
  stop_server
fi

# --- queued mode: the acknowledgement, then the drain ----------------------
# A second endpoint, bench-queued, is bench with mode = "queued". Its
# acknowledgement is measured in the same server as the inline endpoint,
# the two alternating ROUNDS times, with no queue workers (queue_workers =
# 0): the ratio is the acknowledgement's own cost, the queue filling up as
# it does while the workers lag. The backlog those acks left is then drained
# by 1 process, and an equal backlog by DRAIN_PROCESSES processes sharing
# the queue. A drain starts with its processes (every worker looks for due
# jobs when it starts); its rate is the jobs over the span from the first
# job finished to the last (finished_at, so process start-up is left out),
# and it is checked: every job done, none retrying or dead, exactly one
# ledger row per acknowledged delivery.
QUEUED_ENDPOINT="[endpoints.bench-queued]
provider = \"standard-webhooks\"
secrets = [\"$SECRET\"]
mode = \"queued\""
qrow() { printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$@" >>"$QUEUE_RESULTS"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
lat() { printf '%s / %s / %s' "$(echo "$1" | field p50_ms)" "$(echo "$1" | field p99_ms)" "$(echo "$1" | field max_ms)"; }
pg() { psql -tA -v ON_ERROR_STOP=1 "$URL" -c "$1"; }

queue_ack() { # backend database_url
  local backend=$1 url=$2 round r_i r_q rps_i rps_q rps_ratio p99_ratio
  local inline=() queued=() rps_ratios=() p99_ratios=()
  SERVER_TOP="queue_workers = 0" SERVER_ENDPOINTS=$QUEUED_ENDPOINT
  start_server "$url" "$port"
  for round in $(seq 1 "$ROUNDS"); do
    r_i=$(loadgen "$backend-inline-$round" "$url" "$port" fresh --concurrency "$CONCURRENCY")
    r_q=$(LG_ENDPOINT=bench-queued loadgen "$backend-queued-$round" "" "$port" fresh --concurrency "$CONCURRENCY")
    rps_i=$(echo "$r_i" | field rps) rps_q=$(echo "$r_q" | field rps)
    rps_ratio=$(ratio "$rps_q" "$rps_i")
    p99_ratio=$(ratio "$(echo "$r_q" | field p99_ms)" "$(echo "$r_i" | field p99_ms)")
    inline+=("$rps_i") queued+=("$rps_q") rps_ratios+=("$rps_ratio") p99_ratios+=("$p99_ratio")
    qrow "$backend" "inline fresh, round $round" "$rps_i" "—" "$(lat "$r_i")" "—" \
      "effects $(echo "$r_i" | field one_effect); $(echo "$r_i" | field statuses)"
    qrow "$backend" "queued acknowledgement (202), round $round" "$rps_q" "$rps_ratio" "$(lat "$r_q")" "$p99_ratio" \
      "bodies $(echo "$r_q" | field bodies_identical); $(echo "$r_q" | field statuses)"
  done
  qrow "$backend" "**queued ack ÷ inline, median of $ROUNDS rounds** (req/s)" \
    "$(median "${queued[@]}") / $(median "${inline[@]}")" "$(median "${rps_ratios[@]}")" "—" \
    "$(median "${p99_ratios[@]}")" "req/s ratios: ${rps_ratios[*]}; p99 ratios: ${p99_ratios[*]}"
  stop_server
  SERVER_TOP= SERVER_ENDPOINTS=
}

start_drainers() { # processes
  local i
  SERVER_TOP=${QUEUE_WORKERS:+queue_workers = $QUEUE_WORKERS} SERVER_ENDPOINTS=$QUEUED_ENDPOINT
  write_config "$WORK/drain.toml"
  SERVER_TOP= SERVER_ENDPOINTS=
  for i in $(seq 1 "$1"); do
    IR_LISTEN=127.0.0.1:$((port + i)) DATABASE_URL=$URL IR_DATA_DIR=$WORK/data RUST_LOG=warn \
      "$BIN" --config "$WORK/drain.toml" serve 2>>"$WORK/server.log" &
    DRAIN_PIDS+=("$!")
  done
}

stop_drainers() {
  local pid
  for pid in "${DRAIN_PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  DRAIN_PIDS=()
}

drain() { # processes [jobs/s of the 1-process drain]
  local n=$1 backlog since started left wall done_n span rate bad missing
  backlog=$(pg "SELECT count(*) FROM queue_jobs WHERE endpoint = 'bench-queued' AND state = 'queued'")
  since=$(pg "SELECT min(received_at) FROM queue_jobs WHERE endpoint = 'bench-queued' AND state = 'queued'")
  pg "VACUUM ANALYZE" >/dev/null
  settle
  say "drain: $backlog jobs, $n process(es)"
  started=$(date +%s.%N)
  start_drainers "$n"
  while :; do
    left=$(pg "SELECT count(*) FROM queue_jobs WHERE endpoint = 'bench-queued' AND state IN ('queued', 'running')")
    [ "$left" = 0 ] && break
    if awk -v s="$started" -v now="$(date +%s.%N)" 'BEGIN { exit !(now - s > 900) }'; then
      echo "the drain did not finish in 900 s ($left jobs left); log:" >&2
      cat "$WORK/server.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  wall=$(awk -v s="$started" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - s }')
  stop_drainers
  read -r done_n span < <(pg "SELECT count(*), extract(epoch FROM max(finished_at) - min(finished_at)) FROM queue_jobs
    WHERE endpoint = 'bench-queued' AND received_at >= '$since' AND state = 'done'" | tr '|' ' ')
  rate=$(awk -v n="$done_n" -v s="$span" 'BEGIN { printf "%.0f", (n - 1) / (s > 0 ? s : 1e-9) }')
  bad=$(pg "SELECT count(*) FROM queue_jobs WHERE endpoint = 'bench-queued' AND state <> 'done'")
  # Exactly once: one ledger row per acknowledged delivery, none twice.
  missing=$(pg "SELECT count(*) FROM deliveries d WHERE d.endpoint = 'bench-queued' AND d.status = 'completed'
    AND (SELECT count(*) FROM ledger_entries l WHERE l.endpoint = d.endpoint AND l.delivery_id = d.delivery_id) <> 1")
  local check="done $done_n of $backlog, not done $bad, deliveries without exactly one ledger row $missing"
  if [ "$done_n" != "$backlog" ] || [ "$bad" != 0 ] || [ "$missing" != 0 ]; then check="FAILED: $check"; fi
  qrow postgres "drain $backlog jobs, $n process(es) × ${QUEUE_WORKERS:-4 (default)} workers (jobs/s)" "$rate" \
    "${2:+$(ratio "$rate" "$2") ÷ 1 process}" "—" "—" \
    "$check; $(printf '%.1f' "$span") s first to last finish, $wall s from launch"
  DRAIN_RATE=$rate
}

if [ "$QUEUE" != 0 ]; then
  say "queued mode: acknowledgement on PostgreSQL"
  queue_ack postgres "$URL"
  drain 1
  one=$DRAIN_RATE
  # An equal backlog for the processes sharing the queue (not measured).
  backlog=$(pg "SELECT count(*) FROM queue_jobs WHERE endpoint = 'bench-queued'")
  SERVER_TOP="queue_workers = 0" SERVER_ENDPOINTS=$QUEUED_ENDPOINT
  start_server "$URL" "$port"
  say "filling a backlog of $backlog jobs"
  "$LOADGEN" --url "http://127.0.0.1:$port" --endpoint bench-queued --secret "$SECRET" --scenario fresh \
    --concurrency "$CONCURRENCY" --duration 100000 --requests "$backlog" --label backlog >/dev/null
  stop_server
  SERVER_TOP= SERVER_ENDPOINTS=
  drain "$DRAIN_PROCESSES" "$one"
  if [ "$SQLITE" = 1 ]; then
    say "queued mode: acknowledgement on SQLite"
    queue_ack sqlite "sqlite://$WORK/data/receiver.db"
  fi
fi

# --- the outbox: the acknowledgement, the relay, receipt → broker ---------
# Per broker (OUTBOX_BROKERS) and backend, one publisher `bus` with its own
# stream, exchange and queue, or keys (outboxbench config), and three
# endpoints: ob-B-plain (handlers ["record"]), ob-B-outbox and ob-B-e2e
# (["record", "publish:bus"]).
# 1. The acknowledgement: plain and outbox alternate ROUNDS times in one
#    server with its relay off (outbox_relay = false), so the ratio is the
#    outbox row's own cost, the outbox filling up as it does while relays
#    lag. Checked: one outbox row per completed delivery, all pending.
# 2. The relay: the backlog those rounds left, published by one new `serve`
#    process (relay on); its rate is the rows over the span from the first
#    `sent_at` to the last (process start-up left out), against the broker's
#    own rate for as many messages of the same size with the same client
#    crate and confirm discipline, OUTBOX_IN_FLIGHT at once (outboxbench
#    baseline, run just before). Checked: every row sent, and what landed on
#    the broker is exactly the outbox's ids, each once (JetStream, Redis) or
#    at least once (RabbitMQ, which cannot drop a repeat).
# 3. End to end: a server with its relay on under OUTBOX_RATE req/s for
#    DURATION s while a consumer on the broker times each message from its
#    CloudEvents `time` (the receipt) to its arrival; beside it, the relay's
#    own ir_outbox_publish_latency_seconds (receipt → broker's confirm) from
#    /metrics, as the bucket bounds its quantiles fall in.
orow() { printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$@" >>"$OUTBOX_RESULTS"; }

oq() { # backend database_url sql
  if [ "$1" = postgres ]; then
    psql -tA -v ON_ERROR_STOP=1 "$2" -c "$3"
  else
    sqlite3 -cmd ".timeout 10000" "${2#sqlite://}" "$3"
  fi
}

span_sql() { # backend column: seconds from its min to its max
  if [ "$1" = postgres ]; then echo "extract(epoch FROM max($2) - min($2))"
  else echo "(julianday(max($2)) - julianday(min($2))) * 86400"; fi
}

outbox_endpoints() { # broker
  local ep handlers
  for ep in plain outbox e2e; do
    handlers='"record", "publish:bus"'
    [ "$ep" = plain ] && handlers='"record"'
    printf '[endpoints.ob-%s-%s]\nprovider = "standard-webhooks"\nsecrets = ["%s"]\nhandlers = [%s]\n' \
      "$1" "$ep" "$SECRET" "$handlers"
  done
}

# The quantiles of the relay's histogram for publisher bus, as the upper
# bounds of the buckets they fall in.
relay_histogram() { # port
  curl -fs "http://127.0.0.1:$1/metrics" | awk '
    index($0, "ir_outbox_publish_latency_seconds_bucket{") == 1 && index($0, "publisher=\"bus\"") {
      match($0, /le="[^"]*"/); n++; le[n] = substr($0, RSTART + 4, RLENGTH - 5); count[n] = $NF
    }
    function q(p,   i) { for (i = 1; i <= n; i++) if (count[i] >= p * count[n]) return le[i] == "+Inf" ? "+Inf" : sprintf("%g", le[i] * 1000); return "?" }
    END { if (n == 0 || count[n] == 0) { print "relay histogram: empty"; exit }
      printf "relay histogram (receipt → confirm, %d samples): p50 ≤ %s ms, p99 ≤ %s ms", count[n], q(0.5), q(0.99) }'
}

# Compares the ids that landed (outboxbench consume --ids-out: "id count")
# with the outbox's rows of `endpoint`: prints "missing extra received
# repeated".
landed_vs_outbox() { # backend url endpoint ids-file
  oq "$1" "$2" "SELECT message_id FROM outbox WHERE endpoint = '$3'" | sort >"$WORK/ids.db"
  awk '{ print $1 }' "$4" | sort >"$WORK/ids.bus"
  printf '%s %s %s %s\n' "$(comm -23 "$WORK/ids.db" "$WORK/ids.bus" | wc -l)" \
    "$(comm -13 "$WORK/ids.db" "$WORK/ids.bus" | wc -l)" \
    "$(awk '{ s += $2 } END { print s + 0 }' "$4")" "$(awk '$2 > 1' "$4" | wc -l)"
}

# Whether what landed is exactly once (JetStream, Redis) or at least once
# with the same message_id (RabbitMQ): "ok" or "FAILED".
once_verdict() { # broker expected missing extra received repeated
  local ok=1
  [ "$3" = 0 ] && [ "$4" = 0 ] || ok=0
  if [ "$1" = rabbitmq ]; then [ "$5" -ge "$2" ] || ok=0
  else [ "$5" = "$2" ] && [ "$6" = 0 ] || ok=0; fi
  if [ "$ok" = 1 ]; then echo ok; else echo FAILED; fi
}

wait_all_sent() { # backend url endpoint
  local started left
  started=$(date +%s)
  while :; do
    left=$(oq "$1" "$2" "SELECT count(*) FROM outbox WHERE endpoint = '$3' AND state <> 'sent'")
    [ "$left" = 0 ] && return 0
    if [ $(( $(date +%s) - started )) -gt 600 ]; then
      echo "the relay did not send every row in 600 s ($left left); log:" >&2
      tail -n 50 "$WORK/server.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}

outbox_broker() { # backend database_url broker
  local backend=$1 url=$2 b=$3 name publisher round r_p r_o rps_p rps_o rps_ratio p99_ratio
  local plain=() outbox=() rps_ratios=() p99_ratios=() ep_plain="ob-$3-plain" ep_out="ob-$3-outbox" ep_e2e="ob-$3-e2e"
  name="irbench$$${backend:0:2}${b:0:2}"
  OUTBOX_MADE+=("$b $name" "$b ${name}base")
  publisher=$("$OUTBOXBENCH" config --broker "$b" --name "$name")
  local endpoints
  endpoints="$(outbox_endpoints "$b")
$publisher"

  # 1. the acknowledgement, relay off
  say "outbox ($backend, $b): acknowledgement, relay off"
  SERVER_TOP="outbox_relay = false" SERVER_ENDPOINTS=$endpoints
  start_server "$url" "$port"
  for round in $(seq 1 "$ROUNDS"); do
    r_p=$(LG_ENDPOINT=$ep_plain loadgen "$backend-$b-plain-$round" "" "$port" fresh --concurrency "$CONCURRENCY")
    r_o=$(LG_ENDPOINT=$ep_out loadgen "$backend-$b-outbox-$round" "" "$port" fresh --concurrency "$CONCURRENCY")
    rps_p=$(echo "$r_p" | field rps) rps_o=$(echo "$r_o" | field rps)
    rps_ratio=$(ratio "$rps_o" "$rps_p")
    p99_ratio=$(ratio "$(echo "$r_o" | field p99_ms)" "$(echo "$r_p" | field p99_ms)")
    plain+=("$rps_p") outbox+=("$rps_o") rps_ratios+=("$rps_ratio") p99_ratios+=("$p99_ratio")
    orow "$backend" "$b" "[\"record\"] fresh, round $round" "$rps_p" "—" "$(lat "$r_p")" \
      "bodies $(echo "$r_p" | field bodies_identical); $(echo "$r_p" | field statuses)"
    orow "$backend" "$b" "[\"record\", \"publish:bus\"] fresh, round $round" "$rps_o" "$rps_ratio" "$(lat "$r_o")" \
      "p99 ÷ record-only $p99_ratio; bodies $(echo "$r_o" | field bodies_identical); $(echo "$r_o" | field statuses)"
  done
  stop_server
  SERVER_TOP= SERVER_ENDPOINTS=
  local completed rows pending check
  completed=$(oq "$backend" "$url" "SELECT count(*) FROM deliveries WHERE endpoint = '$ep_out' AND status = 'completed'")
  read -r rows pending < <(oq "$backend" "$url" "SELECT count(DISTINCT delivery_id), sum(CASE WHEN state = 'pending' THEN 1 ELSE 0 END) FROM outbox WHERE endpoint = '$ep_out'" | tr '|' ' ')
  check="$completed completed deliveries, $rows with an outbox row, $pending pending"
  if [ "$completed" != "$rows" ] || [ "$rows" != "$pending" ]; then check="FAILED: $check"; fi
  orow "$backend" "$b" "**outbox ack ÷ record-only, median of $ROUNDS rounds** (req/s)" \
    "$(median "${outbox[@]}") / $(median "${plain[@]}")" "$(median "${rps_ratios[@]}")" "—" \
    "p99 ÷ record-only $(median "${p99_ratios[@]}"); req/s ratios: ${rps_ratios[*]}; p99 ratios: ${p99_ratios[*]}; $check"

  # 2. the broker's own rate, then the relay's over the backlog
  local backlog size base base_rate started wall sent span rate landed missing extra received repeated
  backlog=$pending
  size=$(oq "$backend" "$url" "SELECT CAST(round(avg(length(body))) AS integer) FROM outbox WHERE endpoint = '$ep_out'")
  say "outbox ($backend, $b): broker baseline, $backlog messages of $size bytes, $OUTBOX_IN_FLIGHT in flight"
  cpu_begin
  base=$(/usr/bin/time -o "$WORK/time.baseline" -f '%U %S' "$OUTBOXBENCH" baseline --broker "$b" --name "${name}base" \
    --messages "$backlog" --in-flight "$OUTBOX_IN_FLIGHT" --size "$size" | tee -a "$WORK/outboxbench.txt" | grep '^RESULT ')
  cpu_end "outboxbench baseline $b ($backlog msgs)" "$WORK/time.baseline"
  "$OUTBOXBENCH" cleanup --broker "$b" --name "${name}base" >/dev/null
  base_rate=$(echo "$base" | field rate)
  orow "$backend" "$b" "broker baseline: $backlog publishes of $size B, $OUTBOX_IN_FLIGHT in flight, each confirmed (msgs/s)" \
    "$(printf '%.0f' "$base_rate")" "—" "$(lat "$base")" "per-publish confirm latency; $(echo "$base" | field wall_rate | xargs printf '%.0f') msgs/s from connect"

  if [ "$backend" = postgres ]; then oq "$backend" "$url" "VACUUM ANALYZE outbox" >/dev/null; settle; fi
  say "outbox ($backend, $b): relay over $backlog rows, 1 process"
  echo "0 0" >"$WORK/time.none"
  SERVER_PID=
  cpu_begin
  started=$(date +%s.%N)
  SERVER_ENDPOINTS=$endpoints
  start_server "$url" "$port"
  SERVER_ENDPOINTS=
  wait_all_sent "$backend" "$url" "$ep_out"
  wall=$(awk -v s="$started" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - s }')
  cpu_end "relay $backend $b ($backlog rows, 1 process)" "$WORK/time.none"
  stop_server
  read -r sent span < <(oq "$backend" "$url" "SELECT count(*), $(span_sql "$backend" sent_at) FROM outbox WHERE endpoint = '$ep_out' AND state = 'sent'" | tr '|' ' ')
  rate=$(awk -v n="$sent" -v s="$span" 'BEGIN { printf "%.0f", (n - 1) / (s > 0 ? s : 1e-9) }')
  rm -f "$WORK/ids.landed" "$WORK/ids.e2e"
  landed=$("$OUTBOXBENCH" consume --broker "$b" --name "$name" --endpoint "$ep_out" --expect "$backlog" \
    --idle 3 --timeout 120 --ids-out "$WORK/ids.landed" | grep '^RESULT ')
  read -r missing extra received repeated < <(landed_vs_outbox "$backend" "$url" "$ep_out" "$WORK/ids.landed")
  check="sent $sent of $backlog; on the broker: $received messages, $(echo "$landed" | field distinct) ids, $repeated repeated, $missing of the outbox's missing, $extra not the outbox's"
  if [ "$sent" != "$backlog" ] || [ "$(once_verdict "$b" "$backlog" "$missing" "$extra" "$received" "$repeated")" != ok ]; then
    check="FAILED: $check"
  fi
  orow "$backend" "$b" "relay: $backlog rows, 1 process (rows/s)" "$rate" "$(ratio "$rate" "$base_rate") ÷ baseline" "—" \
    "$check; $(printf '%.1f' "$span") s first to last sent_at, $wall s from launch"

  # 3. end to end at a steady rate, relay on
  say "outbox ($backend, $b): end to end at $OUTBOX_RATE req/s for ${DURATION}s"
  SERVER_ENDPOINTS=$endpoints
  start_server "$url" "$port"
  SERVER_ENDPOINTS=
  "$OUTBOXBENCH" consume --broker "$b" --name "$name" --endpoint "$ep_e2e" --idle 3 \
    --timeout "$((DURATION + 120))" --ids-out "$WORK/ids.e2e" >"$WORK/consume.e2e" &
  local consumer=$! r_e hist e2e expected
  r_e=$(LG_ENDPOINT=$ep_e2e loadgen "$backend-$b-e2e" "" "$port" fresh --concurrency "$CONCURRENCY" --rate "$OUTBOX_RATE")
  wait_all_sent "$backend" "$url" "$ep_e2e"
  hist=$(relay_histogram "$port")
  stop_server
  wait "$consumer" || true
  e2e=$(grep '^RESULT ' "$WORK/consume.e2e" || echo "RESULT received=0 distinct=0")
  expected=$(oq "$backend" "$url" "SELECT count(*) FROM outbox WHERE endpoint = '$ep_e2e'")
  read -r missing extra received repeated < <(landed_vs_outbox "$backend" "$url" "$ep_e2e" "$WORK/ids.e2e")
  check="$(once_verdict "$b" "$expected" "$missing" "$extra" "$received" "$repeated"): $received messages for $expected outbox rows, $repeated repeated, $missing missing, $extra not the outbox's; $hist"
  orow "$backend" "$b" "end to end, receipt → consumer, at $OUTBOX_RATE req/s (achieved req/s)" \
    "$(echo "$r_e" | field rps)" "—" "$(lat "$e2e")" "$check; ack $(lat "$r_e") ms"
}

if [ "$OUTBOX" != 0 ]; then
  for b in $OUTBOX_BROKERS; do
    outbox_broker postgres "$URL" "$b"
  done
  if [ "$SQLITE" = 1 ]; then
    for b in $OUTBOX_BROKERS; do
      outbox_broker sqlite "sqlite://$WORK/data/outbox.db" "$b"
    done
  fi
fi

echo
echo "$(nproc) cores; load during the run: $(uptime | sed 's/.*load average/load average/'); concurrency $CONCURRENCY; ${DURATION}s per run"
if [ -s "$RESULTS" ]; then
  echo
  echo "| backend | what | req/s (tps) | ÷ pgbench | p50 / p99 / max ms | checks; statuses |"
  echo "|---|---|---|---|---|---|"
  cat "$RESULTS"
fi
echo
echo "Where the CPU went (share of both cores; \"database + rest\" is PostgreSQL and anything else that ran):"
echo
echo "| run | database + rest | receiver | client | idle |"
echo "|---|---|---|---|---|"
cat "$CPU"
if [ "$QUEUE" != 0 ]; then
  echo
  echo "Queued mode (the acknowledgement against the inline path in the same server, then the drain):"
  echo
  echo "| backend | what | req/s (jobs/s) | ÷ inline (÷ 1 process) | p50 / p99 / max ms | p99 ÷ inline | checks; statuses |"
  echo "|---|---|---|---|---|---|---|"
  cat "$QUEUE_RESULTS"
fi
if [ "$OUTBOX" != 0 ]; then
  echo
  echo "The outbox (the acknowledgement with the outbox row against record-only in the same server, relay off; the relay over that backlog against the broker's own rate; receipt → consumer at a steady rate):"
  echo
  echo "| backend | broker | what | req/s (rows/s, msgs/s) | ÷ record-only (÷ baseline) | p50 / p99 / max ms | checks |"
  echo "|---|---|---|---|---|---|---|"
  cat "$OUTBOX_RESULTS"
fi
