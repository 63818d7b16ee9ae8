#!/usr/bin/env bash
# The performance harness: the receiver (release build) driven over HTTP by
# `loadgen`, every figure set beside a baseline measured in the same run on
# the same machine, the two taking turns ROUNDS times (median of the
# rounds' ratios):
# - PostgreSQL fresh: pgbench of the minimal exactly-once transaction
#   (bench/minimal.sql) and of the receiver's own statements
#   (bench/fresh.sql), then the receiver's `fresh`;
# - replay: nginx answering a fixed 200 (the HTTP floor) under the same
#   client, then the receiver's `replay`; beside them pgbench of the
#   replay's primary-key read;
# - SQLite fresh: `sqliteloop` (the minimal transaction in a loop, one
#   durable commit per delivery, the receiver's SQLite settings), then the
#   receiver's `fresh` with group commit on and off.
# Then storm, mixed, peak RSS, optionally growth (fresh on a database
# loaded with GROWTH_ROWS completed rows, in turns with an empty twin), the
# queued mode and the outbox. Every measured run starts settled (VACUUM
# ANALYZE and CHECKPOINT on PostgreSQL, the SQLite WALs checkpointed). The
# receiver runs at its default log level (RUST_LOG unset: info), as a user
# runs it; one fresh and one replay per backend are repeated at `warn`
# (fresh beside a run at info made just before it on the same table).
# Prints the tables, the CPU split of every run, issue #15's targets
# with this run's figures, and how far the machine's speed drifted over
# the rounds (PostgreSQL's CPU per minimal transaction, round to round).
# Every run is bounded by DURATION seconds; a temporary database and
# folder (and for growth two more databases) are created and removed
# again.
#
#   bench/run.sh                       # defaults below
#   DURATION=20 CONCURRENCY=32 bench/run.sh
#   GROWTH_ROWS=5000000 bench/run.sh   # also: fresh with 5 M rows loaded vs empty
#   QUEUE=only bench/run.sh            # only the queued-mode section
#   OUTBOX=only bench/run.sh           # only the outbox section (brokers)
#   DURATION=3 ROUNDS=1 QUEUE=0 OUTBOX=0 bench/run.sh   # a quick look
#   ALLOCATOR=system bench/run.sh      # the receiver built with glibc's allocator
#
# Environment: PG (base URL, default postgres://root@127.0.0.1:5432),
# DURATION (s, default 10), CONCURRENCY (default 16), STORM_COPIES (64),
# REPLAY_KEYS (2000), GROWTH_ROWS (0 = skip), SQLITE (1 = run it), ROUNDS
# (3: each baseline and the receiver alternate this many times), NGINX (1 =
# the HTTP floor, 0 = skip it), WORKERS (the receiver's `workers`; default:
# its own default, one per core), QUEUE (1 = also the queued-mode section, 0
# = not, only = nothing else), QUEUE_WORKERS (the draining processes'
# `queue_workers`; default: the receiver's own), DRAIN_PROCESSES (the larger
# drain's process count, default 3), OUTBOX (1 = also the outbox section, 0
# = not, only = nothing else), OUTBOX_BROKERS (default "nats rabbitmq
# redis"), OUTBOX_RATE (the end-to-end run's steady req/s, default 200),
# OUTBOX_IN_FLIGHT (the baseline's publications in flight, default 256 = the
# relay's 4 batches of 64), PG_GC_OFF (1 = beside each PostgreSQL fresh
# round, the receiver with `postgres_group_commit = false` on a second
# server; 0 = not), ALLOCATOR (system: built without the default
# features, so with the system's allocator instead of jemalloc; jemalloc,
# the default, was the one other feature), and CARGO_TARGET_DIR as cargo
# reads it.
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
NGINX=${NGINX:-1}
WORKERS=${WORKERS:-}
QUEUE=${QUEUE:-1}
QUEUE_WORKERS=${QUEUE_WORKERS:-}
DRAIN_PROCESSES=${DRAIN_PROCESSES:-3}
OUTBOX=${OUTBOX:-1}
OUTBOX_BROKERS=${OUTBOX_BROKERS:-nats rabbitmq redis}
OUTBOX_RATE=${OUTBOX_RATE:-200}
OUTBOX_IN_FLIGHT=${OUTBOX_IN_FLIGHT:-256}
PG_GC_OFF=${PG_GC_OFF:-1}
# One section alone: QUEUE=only or OUTBOX=only.
ONLY=
if [ "$QUEUE" = only ]; then ONLY=queue OUTBOX=0; fi
if [ "$OUTBOX" = only ]; then ONLY=outbox QUEUE=0; fi
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
TARGET=${CARGO_TARGET_DIR:-target}

command -v /usr/bin/time >/dev/null || { echo "bench/run.sh needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }
if [ "$NGINX" = 1 ] && [ -z "$ONLY" ] && ! command -v nginx >/dev/null; then
  echo "bench/run.sh needs nginx for the HTTP floor (Debian: apt-get install nginx-light), or NGINX=0 to skip it" >&2
  exit 1
fi
# Without the sqlite3 CLI the SQLite WALs are not checkpointed before each
# run (noted under the tables).
SQLITE3=$(command -v sqlite3 || true)

# The receiver, the load generator and the SQLite loop (bench/loadgen, a
# workspace member that is not published).
NO_DEFAULT=
case "${ALLOCATOR:-}" in
  "" | jemalloc) ;;
  system) NO_DEFAULT=--no-default-features ;;
  *) echo "ALLOCATOR is jemalloc (the default) or system, not $ALLOCATOR" >&2; exit 1 ;;
esac
cargo build --release --quiet $NO_DEFAULT --bin idempotent-receiver --bin loadgen --bin outboxbench --bin sqliteloop
BIN=$TARGET/release/idempotent-receiver
echo "receiver: $("$BIN" --version)" >&2
LOADGEN=$TARGET/release/loadgen
OUTBOXBENCH=$TARGET/release/outboxbench
SQLITELOOP=$TARGET/release/sqliteloop

DB=ir_bench_$$
# The growth step's two databases, an empty one and one loaded with
# GROWTH_ROWS rows, made and dropped beside DB.
EMPTY_DB=${DB}_empty GROWN_DB=${DB}_grown
URL=$PG/$DB
# The minimal transaction's tables live in their own schema of the same
# database (bench/minimal-schema.sql), reached through libpq's `options`.
MINIMAL_URL="$URL?options=-csearch_path%3Dminimal"
# pgbench and psql connect as the receiver does: without TLS. The receiver's
# PostgreSQL connections are plain TCP (diesel-async's tokio-postgres
# connection, without a TLS connector), while libpq's default
# (`sslmode=prefer`) negotiates TLS with any server that offers it, as
# Debian's does. Until 2026-12-05 every pgbench baseline here paid for
# encryption that the receiver did not (the minimal transaction ran 23-35 %
# faster without it, side by side), which flattered every PostgreSQL ratio.
export PGSSLMODE=disable
WORK=$(mktemp -d)
SERVER_PID=
# The second receiver of PostgreSQL's fresh rounds, with group commit off.
OFF_PID=
NGINX_PID=
DRAIN_PIDS=()
RESULTS=$WORK/results
TARGETS=$WORK/targets
NOTES=$WORK/notes
QUEUE_RESULTS=$WORK/queue-results
OUTBOX_RESULTS=$WORK/outbox-results
# "broker name" of every stream, exchange and queue, or key prefix made.
OUTBOX_MADE=()

cleanup() {
  stop_server
  if [ -n "$OFF_PID" ]; then kill -TERM "$OFF_PID" 2>/dev/null || true; fi
  stop_nginx
  stop_drainers
  local made
  for made in "${OUTBOX_MADE[@]}"; do
    # shellcheck disable=SC2086 # "broker name", split on purpose
    set -- $made
    "$OUTBOXBENCH" cleanup --broker "$1" --name "$2" >/dev/null 2>&1 || true
  done
  for made in "$DB" "$EMPTY_DB" "$GROWN_DB"; do
    psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "DROP DATABASE IF EXISTS $made" >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '\n==> %s %s\n' "$(date +%T)" "$*" >&2; }

# Where the CPU went during a run: the client's own (pgbench, loadgen or
# sqliteloop, from /usr/bin/time), the server's (the receiver's, or nginx's
# master and workers when CPU_PID names it, from /proc/PID/stat),
# PostgreSQL's (every `postgres` process, and through the postmaster's
# children's ticks the backends that exited during the run), and the rest
# of the machine's busy time: anything else that ran, and the kernel's
# interrupt work where the kernel charges it to no process
# (CONFIG_IRQ_TIME_ACCOUNTING; without it, a tick in a softirq counts for
# the process it interrupted). Shares of both cores' time, idle included.
CPU=$WORK/cpu
CPU_PID=
# Kernel clock ticks a second: what /proc counts CPU time in.
HZ=$(getconf CLK_TCK)
stat_ticks() { awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $5+$6 }' /proc/stat; }
proc_ticks() { # pid: its CPU ticks and its children's (nginx's workers)
  local p
  if [ -z "${1:-}" ] || [ ! -r "/proc/$1/stat" ]; then echo 0; return; fi
  # shellcheck disable=SC2046 # one pid per word
  for p in "$1" $(ps -o pid= --ppid "$1"); do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk '{ s += $14 + $15 } END { print s + 0 }'
}
# PostgreSQL's ticks: every live `postgres` process's own, plus the reaped
# children's ticks of the postmaster (the processes whose parent is not a
# `postgres`), so that a backend that exits between two readings still
# counts: its ticks move into its parent's when it is reaped.
pg_ticks() {
  local pids p
  pids=$(pgrep -x postgres | tr '\n' ' ' || true)
  if [ -z "$pids" ]; then echo 0; return; fi
  for p in $pids; do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk -v pids="$pids" 'BEGIN { n = split(pids, a, " "); for (i = 1; i <= n; i++) pg[a[i]] = 1 }
      { s += $14 + $15; if (!($4 in pg)) s += $16 + $17 } END { print s + 0 }'
}
# The SQLite writer thread's ticks (see writer_note below); defined here,
# before cpu_begin and cpu_stop read it, for every section's runs.
writer_ticks() { # pid: CPU ticks of the SQLite writer thread (0 before it starts)
  local t
  if [ -z "$1" ]; then echo 0; return 0; fi
  for t in /proc/"$1"/task/*; do
    if [ "$(cat "$t/comm" 2>/dev/null)" = sqlite-writer ]; then
      awk '{ print $14 + $15 }' "$t/stat"
      return 0
    fi
  done
  echo 0
}
cpu_begin() {
  read -r CPU_BUSY0 CPU_IDLE0 < <(stat_ticks)
  CPU_SERVER0=$(proc_ticks "${CPU_PID:-$SERVER_PID}")
  CPU_PG0=$(pg_ticks)
  CPU_WRITER0=$(writer_ticks "${WRITER_OF:-}")
}
# The readings at the end of a run; cpu_row then writes its row.
cpu_stop() {
  read -r CPU_BUSY1 CPU_IDLE1 < <(stat_ticks)
  CPU_SERVER1=$(proc_ticks "${CPU_PID:-$SERVER_PID}")
  CPU_PG1=$(pg_ticks)
  # Set for SQLite's fresh runs: the writer thread's ticks over the same
  # window, and the whole server's, in a file, since loadgen runs in a
  # command substitution.
  [ -z "${WRITER_OF:-}" ] ||
    echo "$(($(writer_ticks "$WRITER_OF") - CPU_WRITER0)) $((CPU_SERVER1 - CPU_SERVER0))" >"$WORK/writer.ticks"
}
# The row's last column is each side's CPU per operation of the run (a
# delivery, a transaction, a message), in µs, where the caller knows how
# many there were: what the shares mean in absolute terms, comparable
# across runs of different rates.
cpu_row() { # label client-ticks [operations]
  awk -v label="$1" -v busy=$((CPU_BUSY1 - CPU_BUSY0)) -v idle=$((CPU_IDLE1 - CPU_IDLE0)) \
    -v server=$((CPU_SERVER1 - CPU_SERVER0)) -v pg=$((CPU_PG1 - CPU_PG0)) -v client="$2" \
    -v ops="${3:-0}" -v hz="$HZ" 'function us(t) { return t > 0 ? sprintf("%.1f", t / hz * 1e6 / ops) : "—" }
    BEGIN {
      all = busy + idle; if (all <= 0) all = 1
      if (pg < 0) pg = 0
      rest = busy - server - client - pg; if (rest < 0) rest = 0
      per = (ops > 0) ? us(pg) " / " us(server) " / " us(client) : "—"
      printf "| %s | %.0f %% | %.0f %% | %.0f %% | %.0f %% | %.0f %% | %s |\n", label, 100 * pg / all, 100 * server / all, 100 * client / all, 100 * rest / all, 100 * idle / all, per
    }' >>"$CPU"
}
cpu_end() { # label client-time-file (/usr/bin/time's "%U %S") [operations]
  cpu_stop
  cpu_row "$1" "$(awk -v hz="$HZ" '{ printf "%d", ($1 + $2) * hz }' "$2" 2>/dev/null || echo 0)" "${3:-}"
}

# Every measured run starts from the same state: fresh statistics and no
# dead rows of the previous run left for autovacuum to clean up in the
# middle of this one (without the VACUUM the receiver's fresh figure fell to
# a third on this machine while pgbench's held, issue #15), no dirty pages
# for a checkpoint to write, and every SQLite WAL folded back into its
# database and truncated. The receiver is idle meanwhile, so the checkpoint
# finds no reader in its way.
# The growth step's two databases while it runs (`settle` vacuums them too).
GROWTH_URLS=()
settle() {
  local url
  for url in "${GROWTH_URLS[@]}"; do
    psql -q -v ON_ERROR_STOP=1 "$url" -c "VACUUM ANALYZE" >/dev/null
  done
  psql -q -v ON_ERROR_STOP=1 "$URL" -c "VACUUM ANALYZE" -c CHECKPOINT >/dev/null
  local db
  [ -n "$SQLITE3" ] || return 0
  for db in "$WORK"/data/*.db; do
    [ -e "$db" ] || continue
    "$SQLITE3" -cmd ".timeout 10000" "$db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
  done
}

# pgbench's "tps = N (without initial connection time)".
pgbench_tps() { sed -n 's/^tps = \([0-9]*\.[0-9]\).*/\1/p' | head -n 1; }

# pgbench at the bench's concurrency and duration, prepared statements:
# the measured runs and the warm-up alike.
PGBENCH=(pgbench -n -M prepared -c "$CONCURRENCY" -j 2 -T "$DURATION")

# One settled pgbench run with durable commits (`synchronous_commit = on`);
# prints its tps.
# When PG_PER_OP names a file, PostgreSQL's CPU per transaction of the run
# (µs) is appended to it.
pgbench_run() { # cpu-label url script extra-args...
  local label=$1 url=$2 script=$3 tps processed
  shift 3
  settle
  cpu_begin
  /usr/bin/time -o "$WORK/time.pgbench" -f '%U %S' "${PGBENCH[@]}" "$@" \
    -f "$script" "$url" >"$WORK/pgbench.last" 2>&1 || {
    # A failed pgbench stops the bench, as it did when its output went
    # through a pipe, and shows what it said.
    cat "$WORK/pgbench.last" >&2
    exit 1
  }
  cat "$WORK/pgbench.last" >>"$WORK/pgbench.txt"
  tps=$(pgbench_tps <"$WORK/pgbench.last")
  processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench.last" | head -n 1)
  cpu_end "$label" "$WORK/time.pgbench" "$processed"
  # The same transactions the CPU table's per-operation column divides by.
  [ -z "${PG_PER_OP:-}" ] || awk -v t=$((CPU_PG1 - CPU_PG0)) -v hz="$HZ" -v n="${processed:-0}" \
    'BEGIN { if (n > 0) printf "%.0f\n", t / hz * 1e6 / n }' >>"$PG_PER_OP"
  echo "$tps"
}

# The machine's drift over the rounds, as the fixed baseline saw it:
# PostgreSQL's CPU per minimal transaction, slowest round ÷ fastest. The
# rounds take turns so that drift moves both sides of a ratio alike; a
# large spread says it moved them within a round too (on the README's
# thirteenth machine it went from 138-160 µs to 181-202 µs within about an
# hour).
drift_note() { # file of µs per transaction, one per round
  [ -s "$1" ] || return 0
  sort -n "$1" | awk '{ v[NR] = $1 } END {
      if (NR < 2 || v[1] <= 0) exit
      spread = v[NR] / v[1]
      printf "- drift: PostgreSQL'"'"'s CPU per minimal transaction over the %d rounds was %d-%d µs (slowest ÷ fastest %.2f)%s.\n", NR, v[1], v[NR], spread,
        (spread > 1.25 ? "; above 1.25 the machine'"'"'s speed moved during the run, and its rounds'"'"' ratios compare less well" : "")
    }' >>"$NOTES"
}

# A row of the final table.
row() { printf '| %s | %s | %s | %s | %s | %s |\n' "$@" >>"$RESULTS"; }

field() { tr ' ' '\n' | sed -n "s/^$1=//p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
lat() { printf '%s / %s / %s' "$(echo "$1" | field p50_ms)" "$(echo "$1" | field p99_ms)" "$(echo "$1" | field max_ms)"; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# The receiver's configuration. SERVER_TOP (top-level keys) and
# SERVER_ENDPOINTS (more endpoint tables) are empty except where a section
# sets them.
SERVER_TOP='' SERVER_ENDPOINTS=''
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

# Whether this build takes `setting` (a top-level line of its
# configuration): one from before the setting refuses the key, and
# `migrate` says so without serving. Its files go in $WORK/probe*.
accepts_setting() { # setting database_url
  SERVER_TOP=$1
  write_config "$WORK/probe.toml"
  SERVER_TOP=
  DATABASE_URL=$2 IR_DATA_DIR=$WORK/probe "$BIN" --config "$WORK/probe.toml" migrate >/dev/null 2>&1
}

# The receiver's RUST_LOG; empty: unset, so the receiver's own default
# (info), which is what a user runs.
SERVER_RUST_LOG=
start_server() { # database_url port
  local level=(env -u RUST_LOG)
  if [ -n "$SERVER_RUST_LOG" ]; then level=(env "RUST_LOG=$SERVER_RUST_LOG"); fi
  write_config "$WORK/receiver.toml"
  IR_LISTEN=127.0.0.1:$2 DATABASE_URL=$1 IR_DATA_DIR=$WORK/data "${level[@]}" \
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

# The HTTP floor: nginx answering every request with a fixed 200 and a JSON
# body shaped and sized like the receiver's replay answer (the completion's
# stored answer, as in bench/fresh.sql), Content-Type application/json, one
# worker per core, no access log, and keep-alive as actix-web keeps it: 5 s
# idle, no cap on the requests per connection (nginx closes one after 1000
# by default, which would make the client reconnect).
NGINX_BODY='{"attempt":1,"delivery_id":"lg-0123abcd-r-1042","effects":{"payments":{"kind":"charge","ledger_entry_id":1042},"record":{"recorded":true}},"endpoint":"bench","event_type":"payment.succeeded","processed_at":"2026-12-01T04:11:44.506Z","status":"processed"}'
start_nginx() { # port
  mkdir -p "$WORK/nginx"
  cat >"$WORK/nginx/nginx.conf" <<EOF
daemon off;
worker_processes $(nproc);
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_timeout 5s;
  keepalive_requests 4294967295;
  client_body_temp_path $WORK/nginx/body;
  server {
    listen 127.0.0.1:$1;
    location / {
      default_type application/json;
      return 200 '$NGINX_BODY';
    }
  }
}
EOF
  nginx -e "$WORK/nginx/error.log" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>>"$WORK/nginx/stderr.log" &
  NGINX_PID=$!
  for _ in $(seq 1 100); do
    curl -fs -o /dev/null "http://127.0.0.1:$1/" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nginx did not answer; its log:" >&2
  cat "$WORK/nginx/error.log" "$WORK/nginx/stderr.log" >&2
  exit 1
}

stop_nginx() {
  if [ -n "$NGINX_PID" ] && kill -0 "$NGINX_PID" 2>/dev/null; then
    kill -TERM "$NGINX_PID"
    wait "$NGINX_PID" 2>/dev/null || true
  fi
  NGINX_PID=
}

# LG_ENDPOINT: the endpoint to post to (default bench). LG_SERVER: what
# answers, for the CPU table (default receiver). The CPU is read between
# loadgen's marks: its measured phase, without the ids it processes first
# for `replay` or the effects it counts afterwards; the client's share is
# loadgen's own over the same phase (its RESULT's client_ticks).
loadgen() { # label database_url (empty: no effect check) port scenario extra-args...
  local label=$1 url=$2 port=$3 scenario=$4 pid result ticks
  shift 4
  settle
  say "loadgen $label"
  # A FIFO, held open here for reading and writing: loadgen's writes never
  # block, and the marks are read as they come, with no polling to add CPU
  # of its own to the run's.
  rm -f "$WORK/marks"
  mkfifo "$WORK/marks"
  exec 3<>"$WORK/marks"
  "$LOADGEN" --url "http://127.0.0.1:$port" --endpoint "${LG_ENDPOINT:-bench}" --secret "$SECRET" \
    --scenario "$scenario" --duration "$DURATION" --requests 100000000 \
    --replay-keys "$REPLAY_KEYS" --storm-copies "$STORM_COPIES" --marks "$WORK/marks" \
    ${url:+--database-url "$url"} --label "$label" "$@" >"$WORK/loadgen.out" &
  pid=$!
  await_mark start "$pid"
  cpu_begin
  await_mark end "$pid"
  cpu_stop
  wait "$pid" || true
  exec 3<&-
  tee -a "$WORK/loadgen.txt" <"$WORK/loadgen.out" >&2
  result=$(grep "^RESULT label=$label " "$WORK/loadgen.out" | tail -n 1)
  ticks=$(echo "$result" | field client_ticks)
  case $ticks in '' | *[!0-9]*) ticks=0 ;; esac
  cpu_row "${LG_SERVER:-receiver} $label (loadgen)" "$ticks" "$(echo "$result" | field requests)"
  echo "$result"
}

# Waits until loadgen (pid) has written the mark to the FIFO on fd 3, or
# has exited (a zombie until it is waited for: its state is Z). Builtins
# only: no process is started while a run is measured.
await_mark() { # mark pid
  local mark state
  while :; do
    if read -r -t 1 mark <&3; then
      [ "$mark" = "$1" ] && return 0
      continue
    fi
    read -r _ _ state _ <"/proc/$2/stat" 2>/dev/null || return 0
    [ "$state" = Z ] && return 0
  done
}

record() { # backend label result-line [ratio-text]
  local r=$3 checks
  checks="effects $(echo "$r" | field one_effect), bodies $(echo "$r" | field bodies_identical)"
  checks="$checks; $(echo "$r" | sed -n 's/.*statuses=\(.*\)$/\1/p')"
  row "$1" "$2" "$(echo "$r" | field rps)" "${4:-—}" "$(lat "$r")" "$checks"
}

# The storm target's figure and verdict for one backend: exactly one effect
# per id and p99 < 50 ms.
storm_check() { # result-line
  local ok=1
  [ "$(echo "$1" | field one_effect)" = ok ] || ok=0
  awk -v p="$(echo "$1" | field p99_ms)" 'BEGIN { exit !(p < 50) }' || ok=0
  echo "$ok effects $(echo "$1" | field one_effect), p99 $(echo "$1" | field p99_ms) ms"
}

# A line of the targets block: the target, this run's figure, and met,
# missed, or not measured.
target() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" >>"$TARGETS"; }
verdict() { # value op bound
  if [ -z "$1" ]; then echo "not measured"
  elif awk -v v="$1" -v b="$3" -v op="$2" 'BEGIN { exit !(op == ">=" ? v >= b : v < b) }'; then echo met
  else echo "**missed**"; fi
}

# storm, mixed and the peak RSS of the running server, which is then
# stopped; sets STORM_CHECK and RSS.
STORM_CHECK='' RSS=''
storm_mixed_rss() { # backend label-prefix database_url
  local r
  r=$(loadgen "$2-storm" "$3" "$port" storm --concurrency "$STORM_COPIES")
  record "$1" "receiver storm ×$STORM_COPIES" "$r"
  STORM_CHECK=$(storm_check "$r")
  r=$(loadgen "$2-mixed" "$3" "$port" mixed --concurrency "$CONCURRENCY")
  record "$1" "receiver mixed 70/25/5" "$r"
  RSS=$(peak_rss_mib)
  row "$1" "receiver peak RSS (VmHWM, MiB)" "$RSS" "—" "—" ""
  stop_server
}

# fresh and replay once more, on a new server at RUST_LOG=warn, each beside
# its baseline's median and a figure at the default level (info). For
# fresh that is a run at info made right before it, on the same table: a
# PostgreSQL table that storm and mixed have grown and VACUUM has left
# holes in answers fewer fresh deliveries than the rounds' did minutes
# earlier (README: the thirty-seventh run), and set beside the rounds'
# median the level's cost read as a gain. The warn run comes second, so
# what growth remains counts against it. Replay reads no table: its median
# at info stands.
at_warn() { # backend label-prefix database_url baseline-name baseline replay-at-info
  local r rps info
  start_server "$3" "$port"
  r=$(loadgen "$2-fresh-info-beside-warn" "$3" "$port" fresh --concurrency "$CONCURRENCY")
  info=$(echo "$r" | field rps)
  record "$1" "receiver fresh at info, right before the warn run" "$r" "$(ratio "$info" "$5") ÷ $4"
  stop_server
  SERVER_RUST_LOG=warn
  start_server "$3" "$port"
  r=$(loadgen "$2-fresh-warn" "$3" "$port" fresh --concurrency "$CONCURRENCY")
  rps=$(echo "$r" | field rps)
  record "$1" "receiver fresh at RUST_LOG=warn" "$r" "$(ratio "$rps" "$5") ÷ $4, $(ratio "$rps" "$info") ÷ fresh at info (the run before)"
  r=$(loadgen "$2-replay-warn" "$3" "$port" replay --concurrency "$CONCURRENCY")
  rps=$(echo "$r" | field rps)
  record "$1" "receiver replay at RUST_LOG=warn" "$r" "${NGINX_RPS:+$(ratio "$rps" "$NGINX_RPS") ÷ nginx, }$(ratio "$rps" "$6") ÷ replay at info"
  stop_server
  SERVER_RUST_LOG=
}

say "machine: $(nproc) cores; $(uptime)"
: >"$RESULTS"
: >"$TARGETS"
: >"$NOTES"
: >"$CPU"
: >"$QUEUE_RESULTS"
: >"$OUTBOX_RESULTS"
[ -n "$SQLITE3" ] || echo "- no sqlite3 CLI: the SQLite WALs were not checkpointed before each run (Debian: apt-get install sqlite3)." >>"$NOTES"
psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "CREATE DATABASE $DB" >/dev/null
DATABASE_URL=$URL "$BIN" migrate >/dev/null
psql -q -v ON_ERROR_STOP=1 "$URL" -f bench/minimal-schema.sql >/dev/null

port=$(( 20000 + $$ % 20000 ))
nginx_port=$((port + 100))
# The figures the targets block reads; empty: not measured.
PG_FRESH_RATIO='' SQLITE_FRESH_RATIO='' REPLAY_RATIO='' SQLITE_REPLAY_RATIO='' GROWTH_RATIO='' NGINX_RPS=''
STORM_PG='' STORM_SQLITE='' RSS_PG='' RSS_SQLITE='' GC_RATIO='' PG_GC_RATIO=''

if [ -z "$ONLY" ]; then
  # --- fresh: three take turns, ROUNDS times ---------------------------------
  # pgbench of the minimal exactly-once transaction, pgbench of the
  # receiver's own statements, and the receiver. This machine's throughput
  # drifts by a quarter between runs a minute apart; alternating and taking
  # the median of the rounds' ratios keeps that drift out of the comparison.
  # pgbench runs while the receiver is up and idle.
  say "pgbench: replay keys"
  psql -q -v ON_ERROR_STOP=1 "$URL" <<EOF
INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, event_type, response_status,
  response_content_type, response_body, attempts, received_at, completed_at)
SELECT 'bench', 'pgr-' || n, md5(n::text) || md5(n::text), 'completed', 'payment.succeeded', 200,
  'application/json', convert_to(repeat('x', 250), 'UTF8'), 1, now()::timestamp, now()::timestamp
FROM generate_series(1, $REPLAY_KEYS) AS n;
EOF
  start_server "$URL" "$port"
  # One unmeasured run of the minimal transaction first, on its tables
  # made empty for this run. Without it the first round cost PostgreSQL half as
  # much CPU again as the rounds after it, in every run (433, 491 and
  # 330 µs a transaction against 201-341 µs in the sixtieth to sixty-second
  # runs), and the first round's ratio always came out the highest
  # (1.46-1.58 ×). pgbench of the receiver's own SQL, on the receiver's
  # database, and the receiver's own first rounds showed no such step.
  say "warm-up: pgbench minimal, unmeasured"
  "${PGBENCH[@]}" -f bench/minimal.sql "$MINIMAL_URL" >>"$WORK/pgbench.txt" 2>&1
  # Beside it, the same receiver with PostgreSQL's group commit off, on a
  # port of its own, idle but for its own turn in each round: what the
  # batches add, measured in turns like everything else. A build from before
  # `postgres_group_commit` refuses the key, and is measured as it is.
  off_port=$((port + 200))
  if [ "$PG_GC_OFF" = 1 ]; then
    if accepts_setting "postgres_group_commit = false" "$URL"; then
      main_pid=$SERVER_PID
      # accepts_setting wrote only the probe's configuration: the setting
      # goes into this server's too (the 83rd and 84th runs' "off" server
      # ran with group commit on, since a change left it out).
      SERVER_TOP="postgres_group_commit = false"
      start_server "$URL" "$off_port"
      SERVER_TOP=
      OFF_PID=$SERVER_PID SERVER_PID=$main_pid
    else
      echo "- this build refuses \`postgres_group_commit = false\` (it predates PostgreSQL's group commit): PostgreSQL fresh ran with its one setting only." >>"$NOTES"
    fi
  fi
  min_all=() own_all=() rx_all=() rx_min=() rx_own=() own_min=() off_all=() pg_on_off=()
  for round in $(seq 1 "$ROUNDS"); do
    say "round $round/$ROUNDS: pgbench minimal, pgbench fresh.sql, receiver fresh ($CONCURRENCY clients, ${DURATION}s each)"
    tps_min=$(PG_PER_OP=$WORK/minimal-us pgbench_run "pgbench minimal, round $round" "$MINIMAL_URL" bench/minimal.sql)
    row postgres "pgbench minimal exactly-once transaction (tps), round $round" "$tps_min" "—" "—" ""
    tps_own=$(pgbench_run "pgbench fresh.sql, round $round" "$URL" bench/fresh.sql)
    row postgres "pgbench the receiver's fresh SQL (tps), round $round" "$tps_own" "$(ratio "$tps_own" "$tps_min") ÷ minimal" "—" ""
    r=$(loadgen "pg-fresh-$round" "$URL" "$port" fresh --concurrency "$CONCURRENCY")
    rps=$(echo "$r" | field rps)
    record postgres "receiver fresh, round $round" "$r" "$(ratio "$rps" "$tps_min") ÷ minimal, $(ratio "$rps" "$tps_own") ÷ own SQL"
    if [ -n "$OFF_PID" ]; then
      r_off=$(CPU_PID=$OFF_PID; loadgen "pg-fresh-gc-off-$round" "$URL" "$off_port" fresh --concurrency "$CONCURRENCY")
      off=$(echo "$r_off" | field rps)
      off_all+=("$off") pg_on_off+=("$(ratio "$rps" "$off")")
      record postgres "receiver fresh, group commit off, round $round" "$r_off" "$(ratio "$off" "$tps_min") ÷ minimal; on ÷ off $(ratio "$rps" "$off")"
    fi
    min_all+=("$tps_min") own_all+=("$tps_own") rx_all+=("$rps")
    rx_min+=("$(ratio "$rps" "$tps_min")") rx_own+=("$(ratio "$rps" "$tps_own")") own_min+=("$(ratio "$tps_own" "$tps_min")")
  done
  pg_min=$(median "${min_all[@]}") pg_own=$(median "${own_all[@]}") fresh_empty=$(median "${rx_all[@]}")
  PG_FRESH_RATIO=$(median "${rx_min[@]}")
  row postgres "**receiver fresh ÷ minimal transaction, median of $ROUNDS rounds** (req/s / tps)" "$fresh_empty / $pg_min" "$PG_FRESH_RATIO" "—" "ratios: ${rx_min[*]}"
  row postgres "**receiver fresh ÷ its own SQL, median** (req/s / tps)" "$fresh_empty / $pg_own" "$(median "${rx_own[@]}")" "—" "ratios: ${rx_own[*]}"
  row postgres "**own SQL ÷ minimal transaction, median** (tps / tps)" "$pg_own / $pg_min" "$(median "${own_min[@]}")" "—" "ratios: ${own_min[*]}"
  if [ -n "$OFF_PID" ]; then
    # The "off" server must not have batched: its batch histogram counts
    # every batch statement it sent, and with the setting off it sends none.
    off_batches=$(curl -fs "http://127.0.0.1:$off_port/metrics" |
      awk '$1 == "ir_postgres_commit_batch_members_count" { n += $2 } END { print n + 0 }') ||
      off_batches="an unknown number of"
    kill -TERM "$OFF_PID" 2>/dev/null || true
    wait "$OFF_PID" 2>/dev/null || true
    OFF_PID=
    if [ "$off_batches" = 0 ]; then
      PG_GC_RATIO=$(median "${pg_on_off[@]}")
      row postgres "**group commit on ÷ off, median** (req/s / req/s)" "$fresh_empty / $(median "${off_all[@]}")" "$PG_GC_RATIO" "—" "ratios: ${pg_on_off[*]}"
    else
      echo "- the server meant to run with \`postgres_group_commit = false\` sent $off_batches batches: its rounds are not a comparison, and no on ÷ off is given." >>"$NOTES"
    fi
  fi
  drift_note "$WORK/minimal-us"

  # --- replay: the HTTP floor and the receiver take turns, ROUNDS times -----
  # Beside them, pgbench of the primary-key read a replay would make without
  # the replay cache.
  say "pgbench replay ($CONCURRENCY clients, ${DURATION}s)"
  pg_replay=$(pgbench_run "pgbench replay lookup" "$URL" bench/replay.sql -D keys="$REPLAY_KEYS")
  row postgres "pgbench replay lookup (tps)" "$pg_replay" "—" "—" ""
  if [ "$NGINX" = 1 ]; then start_nginx "$nginx_port"; fi
  ng_all=() rp_all=() rp_ng=()
  for round in $(seq 1 "$ROUNDS"); do
    vs_nginx=
    if [ "$NGINX" = 1 ]; then
      r=$(CPU_PID=$NGINX_PID; LG_SERVER=nginx; loadgen "nginx-replay-$round" "" "$nginx_port" replay --concurrency "$CONCURRENCY")
      record nginx "nginx fixed 200, the replay client, round $round" "$r"
      ng=$(echo "$r" | field rps)
      ng_all+=("$ng")
    fi
    r=$(loadgen "pg-replay-$round" "$URL" "$port" replay --concurrency "$CONCURRENCY")
    rps=$(echo "$r" | field rps)
    rp_all+=("$rps")
    if [ "$NGINX" = 1 ]; then rp_ng+=("$(ratio "$rps" "$ng")") vs_nginx="$(ratio "$rps" "$ng") ÷ nginx, "; fi
    record postgres "receiver replay, round $round" "$r" "$vs_nginx$(ratio "$rps" "$pg_replay") ÷ pgbench lookup"
  done
  stop_nginx
  pg_replay_rps=$(median "${rp_all[@]}")
  if [ "$NGINX" = 1 ]; then
    NGINX_RPS=$(median "${ng_all[@]}") REPLAY_RATIO=$(median "${rp_ng[@]}")
    row postgres "**receiver replay ÷ nginx, median of $ROUNDS rounds** (req/s / req/s)" "$pg_replay_rps / $NGINX_RPS" "$REPLAY_RATIO" "—" "ratios: ${rp_ng[*]}"
  else
    echo "- NGINX=0: no HTTP floor, the replay target is not measured." >>"$NOTES"
  fi
  storm_mixed_rss postgres pg "$URL"
  STORM_PG=$STORM_CHECK RSS_PG=$RSS
  at_warn postgres pg "$URL" minimal "$pg_min" "$pg_replay_rps"
fi

# --- growth: fresh with GROWTH_ROWS completed rows, beside an empty twin --
# Two new databases, migrated alike: one stays empty, the other is loaded
# with GROWTH_ROWS completed rows. The receiver's `fresh` alternates between
# them, ROUNDS times, a new server each time, and the ratio is the median of
# the rounds' ratios, as every other figure here is set beside a baseline
# measured in turns with it: a machine that drifts during the step moves
# both sides. Until the fifty-first run the loaded rounds ran after all of
# their baseline's, on the bench's own table; on one machine five runs gave
# 0.56 to 1.34 x, while side-by-side runs on separate databases showed no
# penalty (see the README's forty-ninth and fiftieth runs).
if [ "$GROWTH_ROWS" -gt 0 ] && [ -z "$ONLY" ]; then
  empty_url=$PG/$EMPTY_DB
  grown_url=$PG/$GROWN_DB
  for twin in "$EMPTY_DB" "$GROWN_DB"; do
    psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "CREATE DATABASE $twin" >/dev/null
    DATABASE_URL=$PG/$twin "$BIN" migrate >/dev/null
  done
  GROWTH_URLS=("$empty_url" "$grown_url")
  say "loading $GROWTH_ROWS completed rows into $GROWN_DB (INSERT ... SELECT generate_series)"
  psql -q -v ON_ERROR_STOP=1 "$grown_url" <<EOF
INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, event_type, response_status,
  response_content_type, response_body, attempts, received_at, completed_at, request_body)
SELECT 'bench', 'old-' || n, md5(n::text) || md5(n::text), 'completed', 'payment.succeeded', 200,
  'application/json', convert_to(repeat('x', 250), 'UTF8'), 1,
  now()::timestamp - (n % 3600) * interval '1 minute', now()::timestamp, convert_to(repeat('y', 200), 'UTF8')
FROM generate_series(1, $GROWTH_ROWS) AS n;
EOF
  loaded=$(psql -tA "$grown_url" -c "SELECT count(*) FROM deliveries WHERE status = 'completed'")
  say "$GROWN_DB holds $loaded completed rows"
  # The load's first VACUUM (every page's visibility) and the checkpoint
  # that writes it out, once before the rounds rather than in the first
  # loaded round's settle.
  settle
  empty_all=() grown_all=() grown_ratios=()
  # The twins take turns going first (the empty one in odd rounds), so that
  # a machine slowing down during the step does not always count against
  # the twin that runs second: in the fifty-seventh run both slowed over
  # the rounds, and the loaded one, then always second, slowed more.
  for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) -eq 1 ]; then order='empty grown'; else order='grown empty'; fi
    for twin in $order; do
      if [ "$twin" = empty ]; then twin_url=$empty_url; else twin_url=$grown_url; fi
      start_server "$twin_url" "$port"
      r=$(loadgen "pg-fresh-$twin-$round" "$twin_url" "$port" fresh --concurrency "$CONCURRENCY")
      stop_server
      if [ "$twin" = empty ]; then empty_r=$r; else grown_r=$r; fi
    done
    empty_rps=$(echo "$empty_r" | field rps)
    grown_rps=$(echo "$grown_r" | field rps)
    record postgres "receiver fresh, empty twin database, round $round (${order%% *} first)" "$empty_r"
    record postgres "receiver fresh, $GROWTH_ROWS rows loaded, round $round (${order%% *} first)" "$grown_r" "$(ratio "$grown_rps" "$empty_rps") ÷ the empty twin"
    empty_all+=("$empty_rps") grown_all+=("$grown_rps") grown_ratios+=("$(ratio "$grown_rps" "$empty_rps")")
  done
  GROWTH_RATIO=$(median "${grown_ratios[@]}")
  grown=$(median "${grown_all[@]}")
  row postgres "**growth**: fresh($GROWTH_ROWS rows) ÷ fresh(empty twin), median of $ROUNDS rounds (req/s / req/s)" "$grown / $(median "${empty_all[@]}")" "$GROWTH_RATIO" "—" "ratios: ${grown_ratios[*]}; ÷ the first rounds: $(ratio "$grown" "$fresh_empty")"
  GROWTH_URLS=()
  for twin in "$EMPTY_DB" "$GROWN_DB"; do
    psql -q -v ON_ERROR_STOP=1 "$PG/postgres" -c "DROP DATABASE IF EXISTS $twin" >/dev/null
  done
fi

# --- the embedded SQLite default ------------------------------------------
# What bounds SQLite's fresh figure is the one writer, not the cores (the
# machine is about half idle): its thread's CPU over the run says how much
# of the time it executed statements, and the server's own histogram how
# many deliveries each COMMIT made durable. Since 2026-12-06 that CPU
# includes the group's COMMIT, which runs on the writer thread; the rest of
# its time is the fsync and waiting for the next delivery.
group_members() { # port: mean members per COMMIT since the server started
  curl -fs "http://127.0.0.1:$1/metrics" | awk '
    /^ir_sqlite_commit_group_members_sum / { s = $2 }
    /^ir_sqlite_commit_group_members_count / { c = $2 }
    END { if (c > 0) printf "%.1f", s / c; else printf "—" }'
}
# The writer's share of the run, and its CPU and the rest of the
# receiver's (the HTTP workers') per delivery: the writer's is the serial
# part, which a slower CPU stretches (the README's sixteenth machine).
writer_note() { # "writer-ticks server-ticks" port result-line
  local n
  n=$(echo "$3" | field requests)
  awk -v t="${1%% *}" -v all="${1##* }" -v n="${n:-0}" -v d="$DURATION" -v hz="$HZ" -v m="$(group_members "$2")" \
    'BEGIN {
      printf "writer busy %.0f %%, %s members per COMMIT", 100 * t / (d * hz), m
      if (n > 0 && all >= t) printf "; writer %.0f µs a delivery, the rest %.0f µs", t / hz * 1e6 / n, (all - t) / hz * 1e6 / n
    }'
}

# The loop of the minimal transaction, the receiver with group commit on
# (its default) and the receiver with it off take turns, ROUNDS times, on
# one database file, each server started for its run.
if [ "$SQLITE" = 1 ] && [ -z "$ONLY" ]; then
  sqlite_url="sqlite://$WORK/data/receiver.db"
  # A build from before `sqlite_group_commit` (issue #15) refuses the key
  # and has no group commit to turn off.
  gc_off=1
  if ! accepts_setting "sqlite_group_commit = false" "sqlite://$WORK/probe.db"; then
    gc_off=0
    echo "- this build refuses \`sqlite_group_commit = false\` (it predates group commit): SQLite fresh ran with its one setting only." >>"$NOTES"
  fi
  rm -rf "$WORK/probe" "$WORK"/probe.db*
  modes="group commit on, then off"
  [ "$gc_off" = 1 ] || modes="one setting"
  loop_all=() on_all=() off_all=() on_loop=() on_off=() off_loop=()
  for round in $(seq 1 "$ROUNDS"); do
    say "round $round/$ROUNDS: sqliteloop, receiver fresh ($modes; ${DURATION}s each)"
    settle
    cpu_begin
    l=$(/usr/bin/time -o "$WORK/time.sqliteloop" -f '%U %S' "$SQLITELOOP" --duration "$DURATION" --dir "$WORK" \
      --label "sqlite-loop-$round" | tee -a "$WORK/sqliteloop.txt" | grep '^RESULT ')
    cpu_end "sqliteloop, round $round" "$WORK/time.sqliteloop" "$(echo "$l" | field transactions)"
    loop=$(echo "$l" | field tps)
    row sqlite "sqliteloop: the minimal transaction, one durable commit each (tps), round $round" "$loop" "—" "$(lat "$l")" "check $(echo "$l" | field check)"
    start_server "$sqlite_url" "$port"
    WRITER_OF=$SERVER_PID
    r=$(loadgen "sqlite-fresh-$round" "$sqlite_url" "$port" fresh --concurrency "$CONCURRENCY")
    WRITER_OF=
    writer=$(writer_note "$(cat "$WORK/writer.ticks" 2>/dev/null || echo 0 0)" "$port" "$r")
    stop_server
    on=$(echo "$r" | field rps)
    loop_all+=("$loop") on_all+=("$on") on_loop+=("$(ratio "$on" "$loop")")
    if [ "$gc_off" = 1 ]; then
      SERVER_TOP="sqlite_group_commit = false"
      start_server "$sqlite_url" "$port"
      SERVER_TOP=
      r_off=$(loadgen "sqlite-fresh-gc-off-$round" "$sqlite_url" "$port" fresh --concurrency "$CONCURRENCY")
      stop_server
      off=$(echo "$r_off" | field rps)
      off_all+=("$off") on_off+=("$(ratio "$on" "$off")") off_loop+=("$(ratio "$off" "$loop")")
      record sqlite "receiver fresh, round $round" "$r" "$(ratio "$on" "$loop") ÷ loop, $(ratio "$on" "$off") ÷ group commit off; $writer"
      record sqlite "receiver fresh, group commit off, round $round" "$r_off" "$(ratio "$off" "$loop") ÷ loop"
    else
      record sqlite "receiver fresh, round $round" "$r" "$(ratio "$on" "$loop") ÷ loop; $writer"
    fi
  done
  sqlite_loop=$(median "${loop_all[@]}") sqlite_fresh=$(median "${on_all[@]}")
  SQLITE_FRESH_RATIO=$(median "${on_loop[@]}")
  row sqlite "**receiver fresh ÷ loop, median of $ROUNDS rounds** (req/s / tps)" "$sqlite_fresh / $sqlite_loop" "$SQLITE_FRESH_RATIO" "—" "ratios: ${on_loop[*]}"
  if [ "$gc_off" = 1 ]; then
    GC_RATIO=$(median "${on_off[@]}")
    row sqlite "**group commit on ÷ off, median** (req/s / req/s)" "$sqlite_fresh / $(median "${off_all[@]}")" "$GC_RATIO" "—" "ratios: ${on_off[*]}"
    row sqlite "**group commit off ÷ loop, median** (req/s / tps)" "$(median "${off_all[@]}") / $sqlite_loop" "$(median "${off_loop[@]}")" "—" "ratios: ${off_loop[*]}"
  fi

  start_server "$sqlite_url" "$port"
  r=$(loadgen sqlite-replay "$sqlite_url" "$port" replay --concurrency "$CONCURRENCY")
  sqlite_replay=$(echo "$r" | field rps)
  if [ -n "$NGINX_RPS" ]; then SQLITE_REPLAY_RATIO=$(ratio "$sqlite_replay" "$NGINX_RPS"); fi
  record sqlite "receiver replay" "$r" "${SQLITE_REPLAY_RATIO:+$SQLITE_REPLAY_RATIO ÷ nginx (median)}"
  storm_mixed_rss sqlite sqlite "$sqlite_url"
  STORM_SQLITE=$STORM_CHECK RSS_SQLITE=$RSS
  at_warn sqlite sqlite "$sqlite_url" loop "$sqlite_loop" "$sqlite_replay"
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
  SERVER_TOP='' SERVER_ENDPOINTS=''
}

start_drainers() { # processes
  local i
  SERVER_TOP=${QUEUE_WORKERS:+queue_workers = $QUEUE_WORKERS} SERVER_ENDPOINTS=$QUEUED_ENDPOINT
  write_config "$WORK/drain.toml"
  SERVER_TOP='' SERVER_ENDPOINTS=''
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
  SERVER_TOP='' SERVER_ENDPOINTS=''
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
  SERVER_TOP='' SERVER_ENDPOINTS=''
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
  cpu_end "outboxbench baseline $b ($backlog msgs)" "$WORK/time.baseline" "$backlog"
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
  cpu_end "relay $backend $b ($backlog rows, 1 process)" "$WORK/time.none" "$backlog"
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

# --- issue #15's targets, with this run's figures ---------------------------
if [ -z "$ONLY" ]; then
  target "PostgreSQL fresh ≥ 0.8 × pgbench of the minimal transaction" "${PG_FRESH_RATIO:-—} × (median of $ROUNDS rounds)${PG_GC_RATIO:+; group commit on ÷ off $PG_GC_RATIO ×}" "$(verdict "$PG_FRESH_RATIO" ">=" 0.8)"
  if [ "$SQLITE" = 1 ]; then
    target "SQLite fresh ≥ 1.5 × the one-commit-per-delivery loop" "${SQLITE_FRESH_RATIO:-—} × (median of $ROUNDS rounds)${GC_RATIO:+; group commit on ÷ off $GC_RATIO ×}" "$(verdict "$SQLITE_FRESH_RATIO" ">=" 1.5)"
  else
    target "SQLite fresh ≥ 1.5 × the one-commit-per-delivery loop" "— (SQLITE=0)" "not measured"
  fi
  # The verdict is PostgreSQL's, over the rounds that alternate with
  # nginx; SQLite's one run is beside it, against nginx's median.
  if [ "$NGINX" = 1 ]; then
    target "replay ≥ 0.8 × the fixed-answer HTTP floor (nginx)" "${REPLAY_RATIO:-—} × on PostgreSQL (median of $ROUNDS rounds)${SQLITE_REPLAY_RATIO:+; $SQLITE_REPLAY_RATIO × on SQLite (one run)}" "$(verdict "$REPLAY_RATIO" ">=" 0.8)"
  else
    target "replay ≥ 0.8 × the fixed-answer HTTP floor (nginx)" "— (NGINX=0: no HTTP floor)" "not measured"
  fi
  storm_ok=1 storm_fig=
  for s in "postgres:$STORM_PG" "sqlite:$STORM_SQLITE"; do
    [ -n "${s#*:}" ] || continue
    read -r ok rest <<<"${s#*:}"
    [ "$ok" = 1 ] || storm_ok=0
    storm_fig="$storm_fig${storm_fig:+; }${s%%:*}: $rest"
  done
  if [ "$SQLITE" != 1 ]; then storm_fig="$storm_fig (SQLite not run)"; fi
  if [ "$storm_ok" = 1 ]; then storm_verdict=met; else storm_verdict="**missed**"; fi
  target "storm ×$STORM_COPIES: exactly one effect, p99 < 50 ms (both backends)" "$storm_fig" "$storm_verdict"
  rss_max=$(printf '%s\n' "$RSS_PG" "${RSS_SQLITE:-0}" | sort -g | tail -n 1)
  target "peak RSS < 64 MiB" "$RSS_PG MiB on PostgreSQL${RSS_SQLITE:+, $RSS_SQLITE MiB on SQLite}" "$(verdict "$rss_max" "<" 64)"
  if [ "$GROWTH_ROWS" -gt 0 ]; then
    target "fresh with 5 M rows ≥ 0.9 × empty" "$GROWTH_RATIO × with $GROWTH_ROWS rows (median of $ROUNDS rounds, each beside an empty twin database)" "$(verdict "$GROWTH_RATIO" ">=" 0.9)"
  else
    target "fresh with 5 M rows ≥ 0.9 × empty" "— (GROWTH_ROWS=0; run with GROWTH_ROWS=5000000)" "not measured"
  fi
fi

echo
echo "$(nproc) cores; load during the run: $(uptime | sed 's/.*load average/load average/'); concurrency $CONCURRENCY; ${DURATION}s per run; $ROUNDS round(s)"
if [ -s "$RESULTS" ]; then
  echo
  echo "| backend | what | req/s (tps) | ratio | p50 / p99 / max ms | checks; statuses |"
  echo "|---|---|---|---|---|---|"
  cat "$RESULTS"
fi
echo
echo "Where the CPU went (share of both cores; \"server\" is the receiver, or nginx's master and workers in nginx's runs; \"rest\" is anything else that ran; the last column divides each side's CPU by the run's deliveries, transactions or messages):"
echo
echo "| run | PostgreSQL | server | client | rest | idle | µs an operation: PostgreSQL / server / client |"
echo "|---|---|---|---|---|---|---|"
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
if [ -s "$TARGETS" ]; then
  echo
  echo "Targets (issue #15), this run:"
  echo
  echo "| target | this run | |"
  echo "|---|---|---|"
  cat "$TARGETS"
fi
if [ -s "$NOTES" ]; then
  echo
  cat "$NOTES"
fi
