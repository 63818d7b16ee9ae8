//! `sqliteloop`: the SQLite baseline of `bench/run.sh`. The smallest
//! transaction that keeps exactly-once (issue #15: claim the key, write one
//! effect, complete the key), one transaction per delivery, in a loop on one
//! connection, for `--duration` seconds, on a new SQLite file with the
//! receiver's settings (WAL, `synchronous = FULL`, `busy_timeout`).
//!
//! Every commit is durable, as the receiver's are, so this is the rate a
//! receiver that committed each delivery on its own could reach at best;
//! the receiver's own SQLite `fresh` is set beside it.

use anyhow::Context;
use clap::Parser;
use diesel::connection::{Connection, SimpleConnection};
use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use idempotent_receiver::store::Prepared;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What the receiver's SQLite pool runs on each new connection
/// (`sqlite_pragmas` in src/store/pool.rs, with its default busy timeout).
const RECEIVER_PRAGMAS: &str = "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;";

/// The minimal transaction's tables (bench/minimal-schema.sql on
/// PostgreSQL): the key with its stored answer, and the effect.
const SCHEMA: &str = "
CREATE TABLE keys (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  request_hash TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'in_progress',
  response_code INTEGER,
  response_body TEXT,
  created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (scope, key)
);
CREATE INDEX keys_created_at ON keys (created_at);
-- INTEGER PRIMARY KEY is SQLite's bigserial: the rowid, assigned on insert.
CREATE TABLE ledger (
  id INTEGER PRIMARY KEY,
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  amount INTEGER NOT NULL
);
";

diesel::table! {
    keys (scope, key) {
        scope -> Text,
        key -> Text,
        request_hash -> Text,
        status -> Text,
        response_code -> Nullable<Integer>,
        response_body -> Nullable<Text>,
        created_at -> Text,
    }
}

diesel::table! {
    ledger (id) {
        id -> BigInt,
        scope -> Text,
        key -> Text,
        amount -> BigInt,
    }
}

/// The minimal exactly-once transaction in a loop on SQLite.
#[derive(Parser, Debug)]
#[command(name = "sqliteloop")]
struct Args {
    /// How long to loop, in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// The folder of the temporary database file (removed afterwards); put
    /// it on the receiver's file system, so both pay the same fsync.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Label of the `RESULT` line.
    #[arg(long, default_value = "sqlite-loop")]
    label: String,
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("sqliteloop: the check FAILED");
            std::process::ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let args = Args::parse();
    let dir = args.dir.unwrap_or_else(std::env::temp_dir);
    let file = dir.join(format!("sqliteloop-{}.db", std::process::id()));
    let duration = Duration::try_from_secs_f64(args.duration)
        .with_context(|| format!("--duration {} is not a number of seconds", args.duration))?;
    let outcome = measure(&file, duration, &args.label);
    // The database and its WAL go whatever happened.
    for suffix in ["", "-wal", "-shm"] {
        let mut path = file.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    outcome
}

fn measure(file: &std::path::Path, duration: Duration, label: &str) -> anyhow::Result<bool> {
    let path = file.to_str().context("the folder's path is not UTF-8")?;
    let mut conn = SqliteConnection::establish(path).with_context(|| format!("opening {path}"))?;
    conn.batch_execute(RECEIVER_PRAGMAS)
        .context("setting the receiver's pragmas")?;
    conn.batch_execute(SCHEMA).context("creating the tables")?;

    // Random keys, as the load generator's ids are: a run prefix and a
    // counter would insert in key order, which a B-tree likes better.
    let mut latencies_us = Vec::with_capacity(1 << 16);
    let started = Instant::now();
    while started.elapsed() < duration {
        let t = Instant::now();
        let key = uuid::Uuid::new_v4().simple().to_string();
        let hash = format!("{key}{}", uuid::Uuid::new_v4().simple());
        minimal_transaction(&mut conn, &key, &hash)?;
        latencies_us.push(t.elapsed().as_micros() as u64);
    }
    let elapsed = started.elapsed();

    // Every transaction left one completed key and one ledger row.
    let done = latencies_us.len() as i64;
    let completed: i64 = keys::table
        .filter(keys::status.eq("completed"))
        .count()
        .get_result(&mut conn)?;
    let effects: i64 = ledger::table.count().get_result(&mut conn)?;
    let ok = completed == done && effects == done;

    latencies_us.sort_unstable();
    let tps = done as f64 / elapsed.as_secs_f64().max(1e-9);
    let ms = |p: f64| percentile(&latencies_us, p);
    println!(
        "RESULT label={label} tps={tps:.1} transactions={done} seconds={:.1} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} check={}",
        elapsed.as_secs_f64(),
        ms(50.0),
        ms(99.0),
        ms(100.0),
        if ok {
            "ok".to_owned()
        } else {
            format!("FAILED({completed}-completed,{effects}-ledger-rows)")
        },
    );
    Ok(ok)
}

/// BEGIN; claim the key (a conflict returns no row); one effect; complete
/// the key with its answer; COMMIT. Each statement is prepared once.
fn minimal_transaction(conn: &mut SqliteConnection, key: &str, hash: &str) -> anyhow::Result<()> {
    conn.transaction(|c| {
        let claimed: Option<String> = diesel::insert_into(keys::table)
            .values((
                keys::scope.eq("demo"),
                keys::key.eq(key),
                keys::request_hash.eq(hash),
            ))
            .on_conflict((keys::scope, keys::key))
            .do_nothing()
            .returning(keys::key)
            .get_result(c)
            .optional()?;
        // A random 128-bit key never repeats here; were it to, the loop
        // would do what the receiver does with a duplicate: no effect.
        if claimed.is_none() {
            return Ok(());
        }
        diesel::insert_into(ledger::table)
            .values((
                ledger::scope.eq("demo"),
                ledger::key.eq(key),
                ledger::amount.eq(1000_i64),
            ))
            .execute(c)?;
        // Diesel re-prepares every UPDATE unless told its text is fixed.
        let complete = diesel::update(keys::table.find(("demo", key))).set((
            keys::status.eq("completed"),
            keys::response_code.eq(200),
            keys::response_body.eq("{}"),
        ));
        c.execute_returning_count(&Prepared(complete))?;
        Ok::<_, diesel::result::Error>(())
    })
    .context("the minimal transaction")
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}
