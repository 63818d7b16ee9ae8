//! `loadgen`: drives a running receiver over HTTP with correctly signed
//! Standard Webhooks deliveries, on keep-alive connections, and prints the
//! throughput, the latency percentiles, the answers per status code and the
//! correctness checks (one ledger row per id, identical 2xx bodies per id).
//!
//! It measures the whole server (HTTP, verification, engine, database), so
//! that `bench/run.sh` can put it beside `pgbench` running the same SQL.

mod wire;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use idempotent_receiver::client::{self, SignedDelivery};
use idempotent_receiver::providers::{self, Provider, ProviderSpec};
use idempotent_receiver::store::schema::ledger_entries;
use idempotent_receiver::store::{DatabaseUrl, Store, StoreOptions};
use idempotent_receiver::with_conn;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// Every request a new id: the full claim + handlers + completion path.
    Fresh,
    /// Ids processed beforehand (not measured), re-signed with a new timestamp.
    Replay,
    /// `--storm-copies` parallel copies of each new id.
    Storm,
    /// 70 % replay, 25 % fresh, 5 % storm (each storm draw fires K copies).
    Mixed,
}

/// Load generator for idempotent-receiver.
#[derive(Parser, Debug)]
#[command(name = "loadgen")]
struct Args {
    /// The receiver's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The endpoint to post to (POST /webhooks/{endpoint}); it must use the
    /// `standard-webhooks` provider with `--secret` and the `payments` handler.
    #[arg(long, default_value = "bench")]
    endpoint: String,
    /// The endpoint's Standard Webhooks secret (whsec_...).
    #[arg(long, env = "LOADGEN_SECRET")]
    secret: String,
    #[arg(long, value_enum, default_value = "fresh")]
    scenario: Scenario,
    /// Requests in flight at once (one keep-alive connection each).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Stop after this many measured requests...
    #[arg(long, default_value_t = 10_000)]
    requests: u64,
    /// ...or after this many seconds, whichever comes first.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// How many parallel copies of one id a storm sends.
    #[arg(long, default_value_t = 64)]
    storm_copies: usize,
    /// How many ids `replay` and `mixed` process first and then replay.
    #[arg(long, default_value_t = 2_000)]
    replay_keys: u64,
    /// The receiver's database, to count the ledger rows of each id sent
    /// (the "one effect per id" check). Without it the check is skipped.
    #[arg(long, env = "LOADGEN_DATABASE_URL")]
    database_url: Option<String>,
    /// Prefix of every id sent (default: a fresh random one), so that runs
    /// against the same database never share ids.
    #[arg(long)]
    id_prefix: Option<String>,
    /// Label of the table row (default: the scenario).
    #[arg(long)]
    label: Option<String>,
    /// Hold the requests to about this many a second in all, spread evenly
    /// over the workers (each sends on its own ticker), instead of as fast
    /// as answers come: steady load below saturation, for latencies that
    /// are not queueing delays.
    #[arg(long)]
    rate: Option<f64>,
    /// Append `start` to this file when the measured phase begins and `end`
    /// when it ends: after the ids that `replay` repeats are processed, and
    /// before the effects are counted. bench/run.sh reads the server's and
    /// PostgreSQL's CPU between the two, so that neither the preparation
    /// nor the check is charged to the run.
    #[arg(long)]
    marks: Option<std::path::PathBuf>,
}

/// What a worker's requests add up to; merged into one at the end, so that
/// no lock is taken per request.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    statuses: BTreeMap<String, u64>,
    /// Per id: the distinct 2xx bodies seen (a replay must be byte-identical).
    bodies: HashMap<String, HashSet<Vec<u8>>>,
    /// Ids sent fresh (or stormed) during the measured phase.
    new_ids: HashSet<String>,
    /// Ids that received at least one 2xx answer.
    acknowledged: HashSet<String>,
}

impl Tally {
    fn record(&mut self, id: &str, sample: Sample) {
        self.latencies_us.push(sample.elapsed.as_micros() as u64);
        let status = match &sample.answer {
            Ok(a) => a.status.to_string(),
            Err(_) => "transport-error".to_owned(),
        };
        *self.statuses.entry(status).or_default() += 1;
        if let Ok(a) = sample.answer
            && (200..300).contains(&a.status)
        {
            if !self.acknowledged.contains(id) {
                self.acknowledged.insert(id.to_owned());
            }
            let bodies = self.bodies.entry(id.to_owned()).or_default();
            if !bodies.contains(&a.body) {
                bodies.insert(a.body);
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latencies_us.extend(other.latencies_us);
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        for (id, bodies) in other.bodies {
            self.bodies.entry(id).or_default().extend(bodies);
        }
        self.new_ids.extend(other.new_ids);
        self.acknowledged.extend(other.acknowledged);
    }
}

/// One timed request.
struct Sample {
    elapsed: Duration,
    answer: anyhow::Result<wire::Answer>,
}

struct Driver {
    target: wire::Target,
    storm_conns: wire::Pool,
    provider: Box<dyn Provider>,
    prefix: String,
    next_id: AtomicU64,
    /// Measured requests sent so far, against `--requests`.
    sent: AtomicU64,
}

impl Driver {
    fn new_id(&self, kind: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{}-{kind}-{n}", self.prefix)
    }

    fn replay_id(&self, n: u64) -> String {
        format!("{}-r-{n}", self.prefix)
    }

    /// Signs now, so that a replay carries a new timestamp and signature
    /// while its body stays the same (a real redelivery).
    fn signed(&self, id: &str) -> anyhow::Result<SignedDelivery> {
        let body = client::sample_payment(id);
        let now = chrono::Utc::now().timestamp();
        Ok(client::sign(self.provider.as_ref(), id, now, None, body)?)
    }

    /// One request on `conn`, timed from the send to the last byte of the
    /// body.
    async fn send(&self, conn: &mut wire::Conn, id: &str) -> anyhow::Result<Sample> {
        let delivery = self.signed(id)?;
        let started = Instant::now();
        let answer = conn.post(&delivery.headers, &delivery.body).await;
        Ok(Sample {
            elapsed: started.elapsed(),
            answer,
        })
    }

    async fn measured(
        &self,
        conn: &mut wire::Conn,
        tally: &mut Tally,
        id: &str,
    ) -> anyhow::Result<()> {
        let sample = self.send(conn, id).await?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        tally.record(id, sample);
        Ok(())
    }

    /// `copies` parallel copies of a new id, each on its own connection.
    async fn storm(&self, copies: usize, tally: &mut Tally) -> anyhow::Result<()> {
        let id = self.new_id("s");
        tally.new_ids.insert(id.clone());
        let mut conns = self.storm_conns.take(copies);
        let sends = conns.iter_mut().map(|conn| self.send(conn, &id));
        let samples = futures_util::future::join_all(sends).await;
        self.storm_conns.give_back(conns);
        for sample in samples {
            self.sent.fetch_add(1, Ordering::Relaxed);
            tally.record(&id, sample?);
        }
        Ok(())
    }

    async fn fresh(&self, conn: &mut wire::Conn, tally: &mut Tally) -> anyhow::Result<()> {
        let id = self.new_id("f");
        tally.new_ids.insert(id.clone());
        self.measured(conn, tally, &id).await
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("loadgen: a correctness check FAILED");
            std::process::ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<bool> {
    let args = Args::parse();
    let spec = ProviderSpec {
        secrets: vec![args.secret.clone()],
        ..ProviderSpec::default()
    };
    let provider = providers::build("standard-webhooks", &spec).context("--secret")?;
    let concurrency = args.concurrency.max(1);
    let prefix = args
        .id_prefix
        .clone()
        .unwrap_or_else(|| format!("lg{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    let target = wire::Target::parse(&format!(
        "{}/webhooks/{}",
        args.url.trim_end_matches('/'),
        args.endpoint
    ))?;
    let driver = Arc::new(Driver {
        storm_conns: wire::Pool::new(target.clone()),
        target,
        provider,
        prefix,
        next_id: AtomicU64::new(0),
        sent: AtomicU64::new(0),
    });

    let replays = matches!(args.scenario, Scenario::Replay | Scenario::Mixed);
    if replays {
        prepare(&driver, args.replay_keys.max(1), concurrency).await?;
    }

    let budget = args.requests;
    let deadline = Instant::now() + Duration::from_secs_f64(args.duration);
    // A storm fires all its copies at once, so fewer storms run side by side.
    let workers = match args.scenario {
        Scenario::Storm => (concurrency / args.storm_copies.max(1)).max(1),
        _ => concurrency,
    };
    mark(args.marks.as_deref(), "start")?;
    let ticks_before = own_cpu_ticks();
    let started = Instant::now();
    // Each worker's ticker: `workers / rate` seconds apart, the workers'
    // first ticks spread over one period.
    let period = args
        .rate
        .filter(|r| *r > 0.0)
        .map(|rate| Duration::from_secs_f64(workers as f64 / rate));
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let driver = driver.clone();
        let scenario = args.scenario;
        let (copies, keys) = (args.storm_copies.max(1), args.replay_keys.max(1));
        let mut ticker = period.map(|period| {
            let first =
                tokio::time::Instant::now() + period.mul_f64(worker as f64 / workers as f64);
            let mut ticker = tokio::time::interval_at(first, period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            // One keep-alive connection for single requests; storms take
            // theirs from the shared pool.
            let mut conn = wire::Conn::new(driver.target.clone());
            let mut draw = (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            while driver.sent.load(Ordering::Relaxed) < budget && Instant::now() < deadline {
                if let Some(ticker) = ticker.as_mut() {
                    ticker.tick().await;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                // xorshift: cheap, and reproducible per worker.
                draw ^= draw << 13;
                draw ^= draw >> 7;
                draw ^= draw << 17;
                let replay = driver.replay_id(draw % keys);
                match scenario {
                    Scenario::Fresh => driver.fresh(&mut conn, &mut tally).await,
                    Scenario::Replay => driver.measured(&mut conn, &mut tally, &replay).await,
                    Scenario::Storm => driver.storm(copies, &mut tally).await,
                    Scenario::Mixed => match draw % 100 {
                        0..70 => driver.measured(&mut conn, &mut tally, &replay).await,
                        70..95 => driver.fresh(&mut conn, &mut tally).await,
                        _ => driver.storm(copies, &mut tally).await,
                    },
                }?;
            }
            anyhow::Ok(tally)
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        tally.merge(task.await.context("a worker panicked")??);
    }
    let elapsed = started.elapsed();
    let client_ticks = own_cpu_ticks()
        .zip(ticks_before)
        .map(|(after, before)| after.saturating_sub(before));
    mark(args.marks.as_deref(), "end")?;

    let effects = match &args.database_url {
        Some(url) => Some(count_effects(url, &args.endpoint, &driver.prefix).await?),
        None => None,
    };
    let label = args
        .label
        .clone()
        .unwrap_or_else(|| format!("{:?}", args.scenario).to_lowercase());
    Ok(report(
        &label,
        concurrency,
        elapsed,
        tally,
        effects,
        client_ticks,
    ))
}

/// Appends `what` and a newline to `marks`, if given.
fn mark(marks: Option<&std::path::Path>, what: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let Some(path) = marks else { return Ok(()) };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening the marks file {}", path.display()))?;
    file.write_all(format!("{what}\n").as_bytes())
        .with_context(|| format!("writing the marks file {}", path.display()))
}

/// This process's CPU so far, user and system, in clock ticks
/// (`/proc/self/stat`); `None` where there is no such file.
fn own_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count from the last `)`. utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Processes the ids that `replay` will repeat; not measured.
async fn prepare(driver: &Arc<Driver>, keys: u64, concurrency: usize) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (driver, next) = (driver.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = wire::Conn::new(driver.target.clone());
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= keys {
                    return anyhow::Ok(());
                }
                let id = driver.replay_id(n);
                match driver.send(&mut conn, &id).await?.answer {
                    Ok(a) if (200..300).contains(&a.status) => {}
                    Ok(a) => bail!(
                        "preparing {id}: HTTP {}: {}",
                        a.status,
                        String::from_utf8_lossy(&a.body)
                    ),
                    Err(e) => return Err(e.context(format!("preparing {id}"))),
                }
            }
        }));
    }
    for task in tasks {
        task.await.context("a preparing worker panicked")??;
    }
    Ok(())
}

/// Ledger rows per id of this run (ids start with the run's prefix).
async fn count_effects(
    url: &str,
    endpoint: &str,
    prefix: &str,
) -> anyhow::Result<HashMap<String, i64>> {
    // Scoped here: diesel's `load` would shadow `AtomicU64::load` elsewhere.
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    let url = DatabaseUrl::parse(url).map_err(anyhow::Error::msg)?;
    let options = StoreOptions {
        pool_size: 1,
        ..StoreOptions::default()
    };
    let store = Store::connect(&url, &options)?;
    let mut conn = store.conn().await?;
    let pattern = format!("{prefix}-%");
    let rows: Vec<(String, i64)> = with_conn!(&mut conn, |c| {
        ledger_entries::table
            .filter(ledger_entries::endpoint.eq(endpoint))
            .filter(ledger_entries::delivery_id.like(&pattern))
            .group_by(ledger_entries::delivery_id)
            .select((ledger_entries::delivery_id, diesel::dsl::count_star()))
            .load(c)
            .await
    })
    .context("counting ledger rows")?;
    Ok(rows.into_iter().collect())
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// Prints the table and a `RESULT` line for scripts; true when every
/// correctness check passed.
fn report(
    label: &str,
    concurrency: usize,
    elapsed: Duration,
    tally: Tally,
    effects: Option<HashMap<String, i64>>,
    client_ticks: Option<u64>,
) -> bool {
    let mut latencies = tally.latencies_us;
    latencies.sort_unstable();
    let sent = latencies.len() as u64;
    let rps = sent as f64 / elapsed.as_secs_f64().max(1e-9);
    let statuses = tally
        .statuses
        .iter()
        .map(|(status, n)| format!("{status}:{n}"))
        .collect::<Vec<_>>()
        .join(" ");

    // Every answer must be 2xx, or 409 for a copy that waited out
    // `in_progress_wait`; anything else (5xx, transport errors) is a failure.
    let bad_status = tally
        .statuses
        .keys()
        .any(|s| !(s.starts_with('2') || s == "409"));
    let bodies_identical = tally.bodies.values().all(|set| set.len() == 1);
    let one_effect = effects.as_ref().map(|effects| {
        let (new_ids, acknowledged) = (&tally.new_ids, &tally.acknowledged);
        // An acknowledged id has exactly one row; none has two.
        effects.values().all(|&n| n == 1)
            && new_ids
                .iter()
                .filter(|id| acknowledged.contains(*id))
                .all(|id| effects.get(id) == Some(&1))
    });
    let verdict = |ok: bool| if ok { "ok" } else { "FAILED" };

    println!(
        "| scenario | conc | requests | seconds | req/s | p50 ms | p90 ms | p99 ms | max ms | statuses | one effect per id | 2xx bodies identical |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {label} | {concurrency} | {sent} | {:.1} | {rps:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {statuses} | {} | {} |",
        elapsed.as_secs_f64(),
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 100.0),
        one_effect.map_or("not checked", verdict),
        verdict(bodies_identical),
    );
    // `statuses` last: bench/run.sh reads it as the rest of the line.
    println!(
        "RESULT label={label} rps={rps:.1} p50_ms={:.3} p90_ms={:.3} p99_ms={:.3} max_ms={:.3} requests={sent} one_effect={} bodies_identical={} bad_status={bad_status} client_ticks={} statuses={}",
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 100.0),
        one_effect.map_or("unchecked", verdict),
        verdict(bodies_identical),
        client_ticks.map_or("unknown".to_owned(), |ticks| ticks.to_string()),
        statuses.replace(' ', ","),
    );
    !bad_status && bodies_identical && one_effect.unwrap_or(true)
}
