//! Crash tests: the real binary under a provider's load (duplicates, parallel
//! copies, retries) while the test `kill -9`s it at random moments, or
//! restarts PostgreSQL under it. Afterwards the database must show every
//! delivery processed exactly once: one ledger row each, every key
//! completed, and one identical 2xx body per delivery.
//!
//! The chaos schedule and the provider's plan come from a seed, printed at
//! the start of each scenario; `IR_CRASH_SEED=<seed>` replays them (the
//! timing of a run can still differ).

mod checks;
mod outbox;
mod postgres;
mod provider;
mod queued;
mod server;
#[path = "../support/slow_downstream.rs"]
mod slow_downstream;
#[path = "../support/test_schema.rs"]
mod test_schema;

use idempotent_receiver::providers::{self, Provider, ProviderSpec};
use postgres::{OwnedServer, SharedSchema, StopMode};
use provider::{Load, Plan, Stats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use server::Server;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Unique deliveries per scenario; each succeeds once into one ledger row.
const N: usize = 300;
const ENDPOINT: &str = "shop";
/// A published test secret (the API suite's); never use it for real.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Short, so that a key left `in_progress` would be past its lease by the
/// time the checks run, and show up as stuck rather than busy.
const LEASE: Duration = Duration::from_secs(2);
/// The chaos strikes after a random number of 2xx answers since its last
/// strike (in this range), plus a random few milliseconds: a random moment
/// that always falls in the middle of the stream, however fast the host.
const ANSWERS_BETWEEN_STRIKES: std::ops::Range<u64> = 15..60;
const STRIKE_JITTER_MS: std::ops::Range<u64> = 0..15;
/// ... or after this long without that many answers, whatever the load does.
const MAX_PAUSE: Duration = Duration::from_secs(3);
/// Everything a scenario's load does must be done by then; well under the
/// two minutes a scenario may take.
const LOAD_BUDGET: Duration = Duration::from_secs(60);
const MIN_KILLS: u64 = 5;
const MIN_DATABASE_RESTARTS: u64 = 4;

/// The scenarios run one at a time: each has the two cores to itself, so
/// that its figures (and its timing) mean something.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes past libtest's output capture, so that seeds and figures show up
/// in a passing run too.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn seed() -> u64 {
    match std::env::var("IR_CRASH_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("IR_CRASH_SEED={text:?} is not an unsigned integer")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed),
    }
}

/// The scenario's temporary directory (configuration, server log, SQLite
/// file); kept, and its path printed, when the scenario fails.
struct Workspace {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::Builder::new()
            .prefix("ir-crash-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        Workspace {
            path: dir.path().to_path_buf(),
            dir: Some(dir),
        }
    }

    /// The receiver's configuration: one Standard Webhooks endpoint with the
    /// built-in handlers, a short lease, and a short wait on in-progress keys
    /// (1 s), so that a copy held up behind another is answered 409 soon
    /// instead of tying up a sender.
    fn config(&self) -> PathBuf {
        let path = self.path.join("receiver.toml");
        let text = format!(
            "workers = 2\npool_size = 8\nlease = \"{}s\"\nin_progress_wait = \"1s\"\n\n[endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"payments\"]\n",
            LEASE.as_secs()
        );
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // IR_CRASH_KEEP=1 keeps a passing run's files too, to read its log.
        let keep = std::env::var("IR_CRASH_KEEP").is_ok_and(|v| v == "1");
        if std::thread::panicking() || keep {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                say(&format!(
                    "crash test: kept {} (server.log, receiver.toml, the SQLite file)",
                    kept.display()
                ));
            }
        }
    }
}

fn signer() -> Arc<dyn Provider> {
    let spec = ProviderSpec {
        secrets: vec![SECRET.to_owned()],
        ..ProviderSpec::default()
    };
    match providers::build("standard-webhooks", &spec) {
        Ok(provider) => Arc::from(provider),
        Err(e) => panic!("the test secret builds no signer: {e}"),
    }
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|e| panic!("cannot build an HTTP client: {e}"))
}

/// What the chaos did to the receiver or its database.
#[derive(Default)]
struct Chaos {
    kills: u64,
    restarts: u64,
    database_restarts: u64,
}

/// One scenario run: what failure messages and the summary line name.
struct Context<'a> {
    name: &'a str,
    backend: &'a str,
    seed: u64,
    url: &'a str,
    server: &'a Server,
    started: Instant,
}

impl Context<'_> {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{} on {} (seed {}; replay with IR_CRASH_SEED={}): {what}\nserver log {} ends with:\n{}",
            self.name,
            self.backend,
            self.seed,
            self.seed,
            self.server.log.display(),
            self.server.log_tail(40)
        );
    }
}

/// One line per scenario, in a `key=value` form that is easy to grep.
fn summary(
    context: &Context<'_>,
    plan: &Plan,
    stats: &Stats,
    chaos: &Chaos,
    verdict: &checks::Verdict,
) {
    let get = Stats::get;
    say(&format!(
        "crash summary: backend={} scenario={} seed={} N={} sent={} attempts={} kills={} restarts={} db_restarts={} retries={} 5xx={} (500={} 503={}) 409={} (in-progress={}) connection_errors={} replayed={} answers_cut_after_commit={} ledger_id_gaps={} ledger_rows={} seconds={:.1}",
        context.backend,
        context.name,
        context.seed,
        plan.deliveries.len(),
        plan.copies(),
        get(&stats.attempts),
        chaos.kills,
        chaos.restarts,
        chaos.database_restarts,
        stats.retries(),
        stats.status_5xx(),
        get(&stats.status_500),
        get(&stats.status_503),
        stats.status_409(),
        get(&stats.conflict_in_progress),
        get(&stats.connection_errors),
        get(&stats.replayed),
        verdict.answers_cut_after_commit,
        verdict.ledger_id_gaps,
        verdict.ledger_rows,
        context.started.elapsed().as_secs_f64(),
    ));
    if verdict.answers_cut_after_commit > 0 {
        say(&format!(
            "  answers_cut_after_commit={}: deliveries that ran and committed once, but whose answer the chaos cut off after the commit; their retries got the stored answer as a replay (expected, not a loss)",
            verdict.answers_cut_after_commit
        ));
    }
}

/// Builds the provider's load against `server` and starts it.
fn start_load(
    server: &Server,
    plan: &Arc<Plan>,
    seed: u64,
    min_strikes: u64,
) -> (Arc<Load>, tokio::task::JoinHandle<Result<(), String>>) {
    let load = Arc::new(Load {
        provider: signer(),
        url: format!("{}/webhooks/{ENDPOINT}", server.base_url()),
        http: http_client(),
        stats: Stats::default(),
        bodies: Default::default(),
        fresh: Default::default(),
        strikes: AtomicU64::new(0),
        min_strikes,
        abort: AtomicBool::new(false),
        failure: Default::default(),
        deadline: Instant::now() + LOAD_BUDGET,
    });
    let task = {
        let load = load.clone();
        let plan = plan.clone();
        tokio::spawn(async move { load.run(&plan, seed).await })
    };
    (load, task)
}

/// Waits for the chaos's next random moment (see
/// [`ANSWERS_BETWEEN_STRIKES`]), returning early once the load is done.
/// Strikes at random moments while the load runs, until it is done or
/// [`LOAD_BUDGET`] has passed. `strike` brings something down and back up,
/// or says why it could not, which ends the run with that problem.
async fn strike_during_load(
    server: &mut Server,
    rng: &mut StdRng,
    load: &Load,
    task: &tokio::task::JoinHandle<Result<(), String>>,
    mut strike: impl AsyncFnMut(&mut Server, &mut StdRng) -> Result<(), String>,
) -> Vec<String> {
    let deadline = Instant::now() + LOAD_BUDGET;
    let mut problems = Vec::new();
    while !task.is_finished() {
        if Instant::now() >= deadline {
            problems.push(format!("the load was not done within {LOAD_BUDGET:?}"));
            break;
        }
        // Strike while copies are in flight: somewhere between a claim,
        // the handlers' writes, the commit and the answer.
        next_moment(rng, load, task).await;
        if task.is_finished() {
            break;
        }
        if let Err(problem) = strike(server, rng).await {
            problems.push(problem);
            break;
        }
        load.strikes.fetch_add(1, Ordering::Relaxed);
    }
    problems
}

async fn next_moment(
    rng: &mut StdRng,
    load: &Load,
    task: &tokio::task::JoinHandle<Result<(), String>>,
) {
    let answered = || Stats::get(&load.stats.successes);
    let target = answered() + rng.random_range(ANSWERS_BETWEEN_STRIKES);
    let jitter = Duration::from_millis(rng.random_range(STRIKE_JITTER_MS));
    let give_up = Instant::now() + MAX_PAUSE;
    while answered() < target && Instant::now() < give_up && !task.is_finished() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(jitter).await;
}

/// Ends a scenario: waits for the load (stopped early when the chaos already
/// failed), waits out the lease, checks the database and the run's figures,
/// prints the summary line, and fails with every problem at once, those
/// found along the way (`problems`) included.
async fn finish(
    context: &Context<'_>,
    plan: &Plan,
    load: &Load,
    task: tokio::task::JoinHandle<Result<(), String>>,
    chaos: &Chaos,
    mut problems: Vec<String>,
) {
    if !problems.is_empty() {
        load.abort.store(true, Ordering::Relaxed);
    }
    match task.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => problems.push(error),
        Err(error) => problems.push(format!("the load task panicked: {error}")),
    }
    // Wait out the lease: a key still in progress now is stuck, not busy.
    tokio::time::sleep(LEASE + Duration::from_millis(500)).await;
    let (bodies, fresh) = match (load.bodies.lock(), load.fresh.lock()) {
        (Ok(bodies), Ok(fresh)) => (bodies.clone(), fresh.clone()),
        _ => context.fail("the answers' locks were poisoned"),
    };
    let verdict = match checks::check(context.url, ENDPOINT, plan, &bodies, &fresh).await {
        Ok(verdict) => verdict,
        Err(error) => {
            problems.push(format!("cannot read the database: {error}"));
            context.fail(&format!("the run failed:\n- {}", problems.join("\n- ")));
        }
    };
    summary(context, plan, &load.stats, chaos, &verdict);
    problems.extend(verdict.violations);
    let panics = context.server.log_lines("panicked");
    if !panics.is_empty() {
        problems.push(format!("the server panicked: {}", panics.join(" | ")));
    }
    // The built-in handlers never fail on these valid payments, so a 500
    // is a database failure the receiver did not recognise as one: the
    // contract answers those 503 + Retry-After ("retry later"), keeping 500
    // for a handler that failed.
    let failed = Stats::get(&load.stats.status_500);
    if failed > 0 {
        let lines = context.server.log_lines("processing failed");
        problems.push(format!(
            "{failed} answers were 500 processing-failed instead of 503; the server logged:\n  {}",
            lines
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n  ")
        ));
    }
    let without_retry_after = Stats::get(&load.stats.status_503_without_retry_after);
    if without_retry_after > 0 {
        problems.push(format!(
            "{without_retry_after} answers were 503 without Retry-After"
        ));
    }
    if Stats::get(&load.stats.conflict_other) > 0 {
        problems.push(format!(
            "{} answers were a 409 other than in-progress for an unchanged body, the last: {:?}",
            Stats::get(&load.stats.conflict_other),
            load.stats
                .last_conflict_other
                .lock()
                .ok()
                .and_then(|s| s.clone())
        ));
    }
    if !problems.is_empty() {
        context.fail(&format!("the run failed:\n- {}", problems.join("\n- ")));
    }
}

/// The provider sends while the test `kill -9`s the receiver at random
/// moments and starts it again on the same port and database.
async fn survive_sigkills(backend: &str, url: &str, workspace: &Workspace, seed: u64) {
    let started = Instant::now();
    let name = "kill-9";
    let port = server::free_port().unwrap_or_else(|e| panic!("{e}"));
    let mut server = Server::new(&workspace.path, workspace.config(), url.to_owned(), port);
    let http = http_client();
    if let Err(e) = server.start(&http).await {
        panic!("{name} on {backend} (seed {seed}): the first start failed: {e}");
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let plan = Arc::new(Plan::draw(&mut rng, N));
    let (load, task) = start_load(&server, &plan, seed, MIN_KILLS);
    let mut chaos = Chaos::default();
    let mut problems =
        strike_during_load(&mut server, &mut rng, &load, &task, async |server, rng| {
            server.kill();
            chaos.kills += 1;
            // Sometimes stay down a little: senders then meet refused
            // connections.
            let downtime = Duration::from_millis(rng.random_range(0..300));
            tokio::time::sleep(downtime).await;
            server
                .start(&http)
                .await
                .map_err(|e| format!("restart #{} failed: {e}", chaos.kills))?;
            chaos.restarts += 1;
            Ok(())
        })
        .await;
    if problems.is_empty() && chaos.kills < MIN_KILLS {
        problems.push(format!(
            "only {} kills happened, not the {MIN_KILLS} required",
            chaos.kills
        ));
    }
    let context = Context {
        name,
        backend,
        seed,
        url,
        server: &server,
        started,
    };
    finish(&context, &plan, &load, task, &chaos, problems).await;
}

mod a_server_killed_at_random_moments {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn still_processes_every_delivery_exactly_once_on_sqlite() {
        let _serial = SERIAL.lock().await;
        let seed = seed();
        say(&format!("crash seed (kill-9, sqlite): {seed}"));
        let workspace = Workspace::new();
        let url = format!("sqlite://{}", workspace.path.join("receiver.db").display());
        survive_sigkills("sqlite", &url, &workspace, seed).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn still_processes_every_delivery_exactly_once_on_postgres() {
        let _serial = SERIAL.lock().await;
        let schema = match SharedSchema::create().await {
            Ok(schema) => schema,
            Err(reason) => return postgres::unavailable("kill-9 on postgres", &reason),
        };
        let seed = seed();
        say(&format!("crash seed (kill-9, postgres): {seed}"));
        let workspace = Workspace::new();
        survive_sigkills("postgres", &schema.url, &workspace, seed).await;
        // Reached only on success: a failed run keeps its schema to look at.
        schema.drop_schema().await;
    }
}

mod a_postgresql_restarted_under_load {
    use super::*;

    /// The receiver is never killed here: it must ride out the outages,
    /// answering 503 while the database is away and recovering on its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn costs_retries_but_never_a_lost_or_doubled_delivery() {
        let _serial = SERIAL.lock().await;
        let name = "postgres-restart";
        let started = Instant::now();
        // A server of the test's own: restarting the shared one would break
        // whatever else uses it (the API suite, a developer's psql).
        let database = match OwnedServer::start() {
            Ok(database) => database,
            Err(reason) => return postgres::unavailable(name, &reason),
        };
        let seed = seed();
        say(&format!("crash seed ({name}): {seed}"));
        let workspace = Workspace::new();
        let url = database.url();
        let port = server::free_port().unwrap_or_else(|e| panic!("{e}"));
        let mut server = Server::new(&workspace.path, workspace.config(), url.clone(), port);
        let http = http_client();
        if let Err(e) = server.start(&http).await {
            panic!("{name} (seed {seed}): the first start failed: {e}");
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let plan = Arc::new(Plan::draw(&mut rng, N));
        let (load, task) = start_load(&server, &plan, seed, MIN_DATABASE_RESTARTS);
        let mut chaos = Chaos::default();
        let mut problems =
            strike_during_load(&mut server, &mut rng, &load, &task, async |server, rng| {
                // pg_ctl blocks this thread for up to a second or two; the
                // senders run on the runtime's workers meanwhile.
                let mode = if rng.random_bool(0.5) {
                    StopMode::Fast
                } else {
                    StopMode::Immediate
                };
                server.note(&format!("stopping PostgreSQL ({mode:?})"));
                database
                    .stop(mode)
                    .map_err(|e| format!("stopping PostgreSQL failed: {e}"))?;
                // Down for a while: deliveries now meet a receiver without
                // its database, which must answer 503 + Retry-After.
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..800))).await;
                database
                    .start_again()
                    .map_err(|e| format!("starting PostgreSQL again failed: {e}"))?;
                server.note("PostgreSQL is back");
                chaos.database_restarts += 1;
                server.wait_ready(&http).await.map_err(|e| {
                    format!(
                        "after PostgreSQL restart #{}: {e}\nPostgreSQL log ends with:\n{}",
                        chaos.database_restarts,
                        database.log_tail(20)
                    )
                })
            })
            .await;
        if let Some(status) = server.exited() {
            problems.push(format!(
                "the server exited ({status}) although only the database was restarted"
            ));
        }
        if problems.is_empty() && chaos.database_restarts < MIN_DATABASE_RESTARTS {
            problems.push(format!(
                "only {} database restarts happened, not the {MIN_DATABASE_RESTARTS} required",
                chaos.database_restarts
            ));
        }
        let context = Context {
            name,
            backend: "postgres",
            seed,
            url: &url,
            server: &server,
            started,
        };
        finish(&context, &plan, &load, task, &chaos, problems).await;
    }
}
