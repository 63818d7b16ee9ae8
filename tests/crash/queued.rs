//! Queued mode under faults: a `mode = "queued"` endpoint whose first
//! handler forwards to a slow downstream, so that its workers are
//! mid-handler most of the time. The receiver is `kill -9`ed (once while
//! deliveries are still being acknowledged, then during the drain), or its
//! PostgreSQL is restarted under it. Afterwards every acknowledged delivery
//! must have run exactly once (one job `done`, one event, one ledger row)
//! and none may be missing; and at every kill, every delivery already
//! answered 202 must have its job committed: nothing is acknowledged
//! before its commit.

use crate::postgres::{OwnedServer, SharedSchema, StopMode};
use crate::server::{self, Server};
use crate::slow_downstream::SlowDownstream;
use crate::{SECRET, SERIAL, Workspace, http_client, say, signer};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use futures_util::StreamExt;
use idempotent_receiver::client;
use idempotent_receiver::store::schema::{deliveries, events, ledger_entries, queue_jobs};
use idempotent_receiver::store::{COMPLETED, DatabaseUrl, Store, StoreOptions};
use idempotent_receiver::with_conn;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Distinct deliveries per scenario, each sent until it is answered 202.
const N: usize = 200;
const ENDPOINT: &str = "inbox";
/// How long the downstream holds each forwarded event: the handler's run.
const SLOW: Duration = Duration::from_millis(100);
/// Eight workers at 100 ms a job drain about 80 jobs a second when nothing
/// fails, so the drain lasts a few seconds and every strike lands in it.
const QUEUE_WORKERS: usize = 8;
/// The lease of a job (and of a key): a job left `running` by a killed
/// process is taken again once it has expired.
const LEASE: Duration = Duration::from_secs(2);
/// Everything, the drain after the last strike included, must be done by
/// then.
const BUDGET: Duration = Duration::from_secs(45);
const SENDERS: usize = 16;

/// The receiver's configuration: the queued endpoint forwards to the slow
/// downstream, then records the event and books its payment in the job's
/// transaction. Retries come back soon (100 ms), and idle workers look for
/// due jobs every 250 ms besides their wake-ups, so that a job abandoned by
/// a dead process or a dead database is taken again within the run.
fn config(workspace: &Workspace, downstream: &SlowDownstream) -> std::path::PathBuf {
    let path = workspace.path.join("queued.toml");
    let text = format!(
        "workers = 2\npool_size = 12\nlease = \"{}s\"\nin_progress_wait = \"1s\"\n\
         queue_workers = {QUEUE_WORKERS}\nqueue_poll = \"250ms\"\n\
         purge_interval = \"0\"\nreconcile_interval = \"0\"\n\n{}\n\
         [endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\n\
         mode = \"queued\"\nretry_backoff = \"100ms\"\nretry_backoff_max = \"500ms\"\n\
         handlers = [\"slow\", \"record\", \"payments\"]\n",
        LEASE.as_secs(),
        downstream.forwarder_toml("slow", "receiver"),
    );
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

fn ids() -> Vec<String> {
    (0..N).map(|n| format!("msg_queued_{n:04}")).collect()
}

/// What the senders were answered.
#[derive(Default)]
struct Acks {
    /// Every distinct 2xx body per delivery.
    bodies: BTreeMap<String, BTreeSet<String>>,
    /// Answers other than 202 that ended a delivery's sending.
    wrong: Vec<String>,
    /// Attempts that met no process, a 503 or an in-progress 409, retried.
    retries: u64,
}

/// Sends every delivery until it is answered 202, with a fresh signature
/// per attempt as a provider's retries have, `SENDERS` at a time.
async fn send_all(url: String, acks: Arc<Mutex<Acks>>) -> Result<(), String> {
    let provider = signer();
    let http = http_client();
    let deadline = Instant::now() + BUDGET;
    let sends = ids().into_iter().map(|id| {
        let (provider, http, url, acks) =
            (provider.clone(), http.clone(), url.clone(), acks.clone());
        async move {
            loop {
                if Instant::now() >= deadline {
                    return Err(format!("{id} was not acknowledged within {BUDGET:?}"));
                }
                let delivery = client::sign(
                    provider.as_ref(),
                    &id,
                    chrono::Utc::now().timestamp(),
                    None,
                    client::sample_payment(&id),
                )
                .map_err(|e| format!("cannot sign {id}: {e}"))?;
                let answer = tokio::time::timeout(
                    Duration::from_secs(15),
                    client::post(&http, &url, &delivery),
                )
                .await;
                // The guard is dropped before the pause: it is not `Send`.
                let finished = {
                    let mut acks = acks.lock().map_err(|_| "the answers' lock was poisoned")?;
                    match answer {
                        Ok(Ok(answer)) if answer.status == 202 => {
                            acks.bodies
                                .entry(id.clone())
                                .or_default()
                                .insert(answer.body);
                            true
                        }
                        Ok(Ok(answer)) if matches!(answer.status, 409 | 503) => {
                            acks.retries += 1;
                            false
                        }
                        Ok(Ok(answer)) => {
                            acks.wrong
                                .push(format!("{id}: {} {}", answer.status, answer.body));
                            true
                        }
                        // A killed process: the connection was refused or cut.
                        Ok(Err(_)) | Err(_) => {
                            acks.retries += 1;
                            false
                        }
                    }
                };
                if finished {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let results: Vec<Result<(), String>> = futures_util::stream::iter(sends)
        .buffer_unordered(SENDERS)
        .collect()
        .await;
    results.into_iter().collect()
}

fn store(url: &str) -> Result<Store, String> {
    let url = DatabaseUrl::parse(url)?;
    Store::connect(&url, &StoreOptions::default()).map_err(|e| e.to_string())
}

/// The endpoint's jobs: delivery id -> (state, attempts).
async fn jobs(url: &str) -> Result<BTreeMap<String, (String, i32)>, String> {
    let store = store(url)?;
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let rows: Vec<(String, String, i32)> = with_conn!(&mut conn, |c| {
        queue_jobs::table
            .filter(queue_jobs::endpoint.eq(ENDPOINT))
            .select((
                queue_jobs::delivery_id,
                queue_jobs::state,
                queue_jobs::attempts,
            ))
            .load(c)
            .await
    })
    .map_err(|e| format!("cannot read queue_jobs: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|(id, state, attempts)| (id, (state, attempts)))
        .collect())
}

/// Nothing acknowledged before its commit: every delivery answered 202
/// before the process died (or the database went down) has its job and its
/// completed key in the database. Returns how many jobs were running.
async fn acknowledged_were_committed(
    url: &str,
    acknowledged: &BTreeSet<String>,
) -> Result<usize, String> {
    let jobs = jobs(url).await?;
    let store = store(url)?;
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let completed: BTreeSet<String> = with_conn!(&mut conn, |c| {
        deliveries::table
            .filter(deliveries::endpoint.eq(ENDPOINT))
            .filter(deliveries::status.eq(COMPLETED))
            .select(deliveries::delivery_id)
            .load::<String>(c)
            .await
    })
    .map_err(|e| format!("cannot read deliveries: {e}"))?
    .into_iter()
    .collect();
    let without_job: Vec<_> = acknowledged
        .iter()
        .filter(|id| !jobs.contains_key(*id) || !completed.contains(*id))
        .collect();
    if !without_job.is_empty() {
        return Err(format!(
            "{} deliveries were answered 202 but have no committed job or key: {:?}",
            without_job.len(),
            without_job.iter().take(5).collect::<Vec<_>>()
        ));
    }
    Ok(jobs
        .values()
        .filter(|(state, _)| state == "running")
        .count())
}

/// The figures of a run, for the summary line.
#[derive(Default)]
struct Figures {
    strikes: u32,
    /// Strikes that found the downstream holding calls: workers mid-handler.
    mid_handler: u32,
    /// Jobs the database showed `running` right after a kill.
    running_at_strike: usize,
}

/// Waits until the drain has forwarded `target` distinct deliveries (or the
/// senders have acknowledged `acked` of them) and a worker is mid-handler,
/// or a few seconds passed.
async fn moment(downstream: &SlowDownstream, acks: &Mutex<Acks>, target: usize, acked: usize) {
    let give_up = Instant::now() + Duration::from_secs(8);
    let acknowledged = || acks.lock().map(|a| a.bodies.len()).unwrap_or(0);
    while Instant::now() < give_up
        && !((downstream.distinct() >= target || acknowledged() >= acked)
            && downstream.in_flight() > 0)
    {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until every job is `done` (or the budget is spent).
async fn drained(url: &str, started: Instant) -> Result<(), String> {
    loop {
        let jobs = jobs(url).await.unwrap_or_default();
        let done = jobs.values().filter(|(state, _)| state == "done").count();
        if done == N {
            return Ok(());
        }
        if started.elapsed() >= BUDGET {
            let mut states: BTreeMap<&str, usize> = BTreeMap::new();
            for (state, _) in jobs.values() {
                *states.entry(state.as_str()).or_default() += 1;
            }
            return Err(format!(
                "the queue was not drained within {BUDGET:?}: {} jobs, by state {states:?}",
                jobs.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every acknowledged delivery ran exactly once and none is missing.
async fn exactly_once(url: &str, acks: &Acks) -> Result<(usize, Vec<String>), String> {
    let mut violations = Vec::new();
    let expected: BTreeSet<String> = ids().into_iter().collect();
    let acknowledged: BTreeSet<String> = acks.bodies.keys().cloned().collect();
    if acknowledged != expected {
        violations.push(format!(
            "{} of {N} deliveries were answered 202",
            acknowledged.len()
        ));
    }
    let varied: Vec<_> = acks.bodies.iter().filter(|(_, b)| b.len() != 1).collect();
    if !varied.is_empty() {
        violations.push(format!(
            "{} deliveries were answered differing 202 bodies, e.g. {:?}",
            varied.len(),
            <[_]>::first(&varied)
        ));
    }
    if !acks.wrong.is_empty() {
        violations.push(format!(
            "{} answers were neither 202 nor retryable: {:?}",
            acks.wrong.len(),
            &acks.wrong[..acks.wrong.len().min(5)]
        ));
    }
    let jobs = jobs(url).await?;
    let not_done: Vec<_> = jobs
        .iter()
        .filter(|(_, (state, _))| state != "done")
        .collect();
    if jobs.len() != N || !not_done.is_empty() {
        violations.push(format!(
            "{} jobs for {N} deliveries, {} not done: {:?}",
            jobs.len(),
            not_done.len(),
            not_done.iter().take(5).collect::<Vec<_>>()
        ));
    }
    let rerun = jobs.values().filter(|(_, attempts)| *attempts > 1).count();
    let store = store(url)?;
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let recorded: Vec<String> = with_conn!(&mut conn, |c| {
        events::table
            .filter(events::endpoint.eq(ENDPOINT))
            .select(events::delivery_id)
            .load(c)
            .await
    })
    .map_err(|e| format!("cannot read events: {e}"))?;
    if recorded.len() != N || recorded.iter().cloned().collect::<BTreeSet<_>>() != expected {
        violations.push(format!(
            "events holds {} rows for {N} deliveries",
            recorded.len()
        ));
    }
    let ledger: Vec<(String, String)> = with_conn!(&mut conn, |c| {
        ledger_entries::table
            .filter(ledger_entries::endpoint.eq(ENDPOINT))
            .select((ledger_entries::delivery_id, ledger_entries::payment_id))
            .load(c)
            .await
    })
    .map_err(|e| format!("cannot read ledger_entries: {e}"))?;
    let mut effects: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, payment) in &ledger {
        effects.entry(id).or_default().push(payment);
    }
    let wrong: Vec<_> = expected
        .iter()
        .filter(|id| {
            let payment = format!("pay_{}", id.trim_start_matches("msg_"));
            effects.get(id.as_str()).map(Vec::as_slice) != Some(&[payment.as_str()][..])
        })
        .collect();
    if ledger.len() != N || !wrong.is_empty() {
        violations.push(format!(
            "ledger_entries holds {} rows for {N} deliveries; {} deliveries have not exactly one, their own: {:?}",
            ledger.len(),
            wrong.len(),
            wrong.iter().take(5).collect::<Vec<_>>()
        ));
    }
    Ok((rerun, violations))
}

/// One scenario: start the receiver, send every delivery while `strike`s
/// hit (the first while deliveries are still being acknowledged, the
/// others mid-drain, each while a worker is mid-handler), let it drain,
/// check, and print one summary line.
async fn run(
    name: &str,
    backend: &str,
    url: &str,
    strikes: usize,
    mut strike: impl AsyncFnMut(&mut Server, &Arc<Mutex<Acks>>) -> Result<usize, String>,
) {
    let started = Instant::now();
    let workspace = Workspace::new();
    let downstream = SlowDownstream::start(SLOW);
    let port = server::free_port().unwrap_or_else(|e| panic!("{e}"));
    let mut server = Server::new(
        &workspace.path,
        config(&workspace, &downstream),
        url.to_owned(),
        port,
    );
    let http = http_client();
    if let Err(e) = server.start(&http).await {
        panic!("{name} on {backend}: the first start failed: {e}");
    }
    let acks = Arc::new(Mutex::new(Acks::default()));
    let sending = tokio::spawn(send_all(
        format!("{}/webhooks/{ENDPOINT}", server.base_url()),
        acks.clone(),
    ));
    let mut figures = Figures::default();
    let mut problems = Vec::new();
    for n in 0..strikes {
        // The first strike while a third is acknowledged; the others as
        // the drain passes its fractions.
        let (target, acked) = if n == 0 {
            (usize::MAX, N / 3)
        } else {
            (N * n / strikes, usize::MAX)
        };
        moment(&downstream, &acks, target, acked).await;
        if downstream.in_flight() > 0 {
            figures.mid_handler += 1;
        }
        match strike(&mut server, &acks).await {
            Ok(running) => figures.running_at_strike += running,
            Err(problem) => {
                problems.push(problem);
                break;
            }
        }
        figures.strikes += 1;
    }
    match sending.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => problems.push(e),
        Err(e) => problems.push(format!("the senders panicked: {e}")),
    }
    let acked_at = started.elapsed();
    if problems.is_empty() {
        if let Err(e) = drained(url, started).await {
            problems.push(e);
        }
    }
    let drained_at = started.elapsed();
    let acks = acks
        .lock()
        .map(|mut a| std::mem::take(&mut *a))
        .unwrap_or_default();
    let rerun = match exactly_once(url, &acks).await {
        Ok((rerun, violations)) => {
            problems.extend(violations);
            rerun
        }
        Err(e) => {
            problems.push(format!("cannot read the database: {e}"));
            0
        }
    };
    let panics = server.log_lines("panicked");
    if !panics.is_empty() {
        problems.push(format!("the server panicked: {}", panics.join(" | ")));
    }
    if figures.mid_handler == 0 {
        problems.push("no strike found a worker mid-handler".to_owned());
    }
    let calls = downstream.calls();
    say(&format!(
        "queued crash summary: backend={backend} scenario={name} N={N} strikes={} mid_handler={} running_at_strike={} jobs_run_again={rerun} forwards={} reforwarded={} send_retries={} acked_s={:.1} drained_s={:.1}",
        figures.strikes,
        figures.mid_handler,
        figures.running_at_strike,
        calls.len(),
        calls.len().saturating_sub(downstream.distinct()),
        acks.retries,
        acked_at.as_secs_f64(),
        drained_at.as_secs_f64(),
    ));
    if !problems.is_empty() {
        panic!(
            "{name} on {backend} failed:\n- {}\nserver log {} ends with:\n{}",
            problems.join("\n- "),
            server.log.display(),
            server.log_tail(40)
        );
    }
}

/// Kills the receiver with SIGKILL, checks that everything it acknowledged
/// is committed, and starts it again on the same port and database.
async fn kill_and_restart(
    server: &mut Server,
    acks: &Arc<Mutex<Acks>>,
    url: &str,
) -> Result<usize, String> {
    server.kill();
    let acknowledged: BTreeSet<String> = acks
        .lock()
        .map_err(|_| "the answers' lock was poisoned")?
        .bodies
        .keys()
        .cloned()
        .collect();
    let running = acknowledged_were_committed(url, &acknowledged).await?;
    server.start(&http_client()).await?;
    Ok(running)
}

async fn survive_sigkills(backend: &str, url: &str) {
    let strike = async |server: &mut Server, acks: &Arc<Mutex<Acks>>| {
        kill_and_restart(server, acks, url).await
    };
    run("queued-kill-9", backend, url, 3, strike).await;
}

mod a_queued_receiver_killed_mid_handler {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_every_acknowledged_delivery_exactly_once_on_sqlite() {
        let _serial = SERIAL.lock().await;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("receiver.db").display());
        survive_sigkills("sqlite", &url).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_every_acknowledged_delivery_exactly_once_on_postgres() {
        let _serial = SERIAL.lock().await;
        let schema = match SharedSchema::create().await {
            Ok(schema) => schema,
            Err(reason) => {
                return crate::postgres::unavailable("queued kill-9 on postgres", &reason);
            }
        };
        survive_sigkills("postgres", &schema.url).await;
        schema.drop_schema().await;
    }
}

mod a_postgresql_restarted_mid_drain {
    use super::*;

    /// The receiver is never killed: its workers must ride out the outages
    /// (a job whose end could not be written is taken again once its lease
    /// has expired) and the senders meet 503s meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loses_and_doubles_no_acknowledged_delivery() {
        let _serial = SERIAL.lock().await;
        let name = "queued-postgres-restart";
        let database = match OwnedServer::start() {
            Ok(database) => database,
            Err(reason) => return crate::postgres::unavailable(name, &reason),
        };
        let url = database.url();
        let mut restarts = 0u32;
        let strike = async |server: &mut Server, acks: &Arc<Mutex<Acks>>| {
            let acknowledged: BTreeSet<String> = acks
                .lock()
                .map_err(|_| "the answers' lock was poisoned")?
                .bodies
                .keys()
                .cloned()
                .collect();
            // Alternately a clean stop and a crash of PostgreSQL itself.
            let mode = if restarts % 2 == 0 {
                StopMode::Immediate
            } else {
                StopMode::Fast
            };
            restarts += 1;
            server.note(&format!("stopping PostgreSQL ({mode:?})"));
            database
                .stop(mode)
                .map_err(|e| format!("stopping PostgreSQL failed: {e}"))?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            database
                .start_again()
                .map_err(|e| format!("starting PostgreSQL again failed: {e}"))?;
            server.note("PostgreSQL is back");
            // What was acknowledged before the stop survived it.
            let running = acknowledged_were_committed(&url, &acknowledged).await?;
            server.wait_ready(&http_client()).await?;
            Ok(running)
        };
        run(name, "postgres", &database.url(), 3, strike).await;
    }
}
