//! Prometheus metrics: every metric's name, and the helpers that record
//! them, live here, so that the rest of the code says what happened
//! (`metrics::delivery_processed(endpoint, provider, elapsed)`) and the
//! names and labels stay in one reviewable place.
//!
//! Labels are bounded on purpose: a configured endpoint, its provider, a
//! route *pattern*, and small fixed sets (reasons, kinds, outcomes). Never
//! a delivery id, an `Idempotency-Key`, a tenant or a raw path: each of
//! those would make a new time series per request, and a tenant or key may
//! be confidential.
//!
//! The recorder is process-wide ([`install`]); until it is installed (the
//! operator commands, unit tests) every helper is a cheap no-op. Each
//! metric's handle is made once per label set and kept (see `Handles`).

use crate::bearer;
use crate::secret::Secret;
use crate::store::{Backend, Store, StoreError};
use actix_web::http::header::{CONTENT_TYPE, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use foldhash::fast::RandomState;
use metrics::{Counter, Histogram, Label};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::borrow::Borrow;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;
use thread_local::ThreadLocal;

pub const DELIVERIES_RECEIVED: &str = "ir_webhook_deliveries_received_total";
pub const DELIVERIES_VERIFIED: &str = "ir_webhook_deliveries_verified_total";
pub const DELIVERIES_REJECTED: &str = "ir_webhook_deliveries_rejected_total";
pub const DELIVERIES_PROCESSED: &str = "ir_webhook_deliveries_processed_total";
pub const DELIVERIES_REPLAYED: &str = "ir_webhook_deliveries_replayed_total";
pub const DELIVERIES_FAILED: &str = "ir_webhook_deliveries_failed_total";
pub const CONFLICTS: &str = "ir_webhook_conflicts_total";
pub const PROCESSING_SECONDS: &str = "ir_webhook_processing_seconds";
pub const LEASE_TAKEOVERS: &str = "ir_lease_takeovers_total";
pub const PURGE_DELETED: &str = "ir_purge_deleted_keys_total";
pub const PURGE_DELETED_PUBLICATIONS: &str = "ir_purge_deleted_publications_total";
pub const RECONCILE_OUTCOMES: &str = "ir_reconcile_claims_total";
pub const CLIENT_KEY_REQUESTS: &str = "ir_client_key_requests_total";
pub const HTTP_REQUESTS: &str = "ir_http_requests_total";
pub const SQLITE_GROUP_MEMBERS: &str = "ir_sqlite_commit_group_members";
pub const SQLITE_GROUPS_ROLLED_BACK: &str = "ir_sqlite_commit_groups_rolled_back_total";
pub const POSTGRES_BATCH_MEMBERS: &str = "ir_postgres_commit_batch_members";
pub const POSTGRES_BATCHES_FAILED: &str = "ir_postgres_commit_batches_failed_total";
pub const POOL_MAX_SIZE: &str = "ir_db_pool_max_size";
pub const POOL_SIZE: &str = "ir_db_pool_size";
pub const POOL_AVAILABLE: &str = "ir_db_pool_available";
pub const POOL_WAITING: &str = "ir_db_pool_waiting";
pub const POOL_LANE_MAX_SIZE: &str = "ir_db_pool_lane_max_size";
pub const POOL_LANE_SIZE: &str = "ir_db_pool_lane_size";
pub const POOL_LANE_WAITING: &str = "ir_db_pool_lane_waiting";
pub const REPLAY_CACHE_ENTRIES: &str = "ir_replay_cache_entries";
pub const ADMIN_LOGIN_LIMITED: &str = "ir_admin_login_limited_total";
pub const QUEUE_JOBS: &str = "ir_queue_jobs";
pub const QUEUE_OLDEST_AGE: &str = "ir_queue_oldest_age_seconds";
pub const QUEUE_PAUSED: &str = "ir_queue_paused";
pub const QUEUE_ATTEMPTS: &str = "ir_queue_attempts_total";
pub const QUEUE_DEAD: &str = "ir_queue_dead_total";
pub const QUEUE_COMPLETION_SECONDS: &str = "ir_queue_completion_seconds";
pub const OUTBOX_ROWS: &str = "ir_outbox_rows";
pub const OUTBOX_OLDEST_AGE: &str = "ir_outbox_oldest_age_seconds";
pub const OUTBOX_PUBLISHED: &str = "ir_outbox_published_total";
pub const OUTBOX_FAILURES: &str = "ir_outbox_publish_failures_total";
pub const OUTBOX_LATENCY_SECONDS: &str = "ir_outbox_publish_latency_seconds";

/// The environment variable that sets `metrics_token`.
pub const TOKEN_ENV: &str = "IR_METRICS_TOKEN";

/// The Prometheus text format's content type.
pub const CONTENT_TYPE_PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Buckets of the processing histogram, in seconds: a replay answers in a
/// millisecond or two, a processed delivery in tens of milliseconds, and
/// the upper end covers `in_progress_wait` (5 s) and slow forwarders.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Buckets of the queue's completion histogram, in seconds: a job run at
/// once ends within a second, a retried one minutes to hours later, and
/// `max_age` defaults to three days.
const COMPLETION_BUCKETS: &[f64] = &[
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
    259200.0,
];

/// Buckets of the SQLite commit groups' sizes, in members: 1 is a writer
/// that committed alone; the default cap is 64.
const GROUP_MEMBER_BUCKETS: &[f64] = &[
    1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0,
];

/// How often histogram samples are folded into their buckets when nobody
/// scrapes: without it, samples pile up in memory between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Why a conflict answered 409.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// Another attempt held the key past `in_progress_wait`.
    InProgress,
    /// The key was used before with another body.
    KeyReused,
}

impl Conflict {
    pub fn label(self) -> &'static str {
        match self {
            Conflict::InProgress => "in_progress",
            Conflict::KeyReused => "key_reused",
        }
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder, once: later calls (a test
/// binary builds many apps in one process) return the same handle.
///
/// If another recorder is already installed (an embedder's own), that one
/// keeps the metrics and this handle renders an empty page; a warning says
/// so rather than failing start-up over metrics.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            // `set_buckets*` only fail for an empty list, and ours are
            // non-empty constants; fall back to summaries rather than panic.
            let builder = PrometheusBuilder::new()
                .set_buckets(LATENCY_BUCKETS)
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full(QUEUE_COMPLETION_SECONDS.to_owned()),
                        COMPLETION_BUCKETS,
                    )
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full(SQLITE_GROUP_MEMBERS.to_owned()),
                        GROUP_MEMBER_BUCKETS,
                    )
                })
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full(POSTGRES_BATCH_MEMBERS.to_owned()),
                        GROUP_MEMBER_BUCKETS,
                    )
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if ::metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will stay empty");
            }
            describe();
            // After the recorder: handles made before it would be no-ops.
            let _ = HANDLES.set(Handles::new());
            spawn_upkeep(handle.clone());
            handle
        })
        .clone()
}

/// The handle [`install`] made, if it ran.
pub fn handle() -> Option<PrometheusHandle> {
    HANDLE.get().cloned()
}

fn spawn_upkeep(handle: PrometheusHandle) {
    // A plain thread: the recorder outlives any one runtime (tests start and
    // stop many), and upkeep is a few microseconds every few seconds.
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_EVERY);
                handle.run_upkeep();
            }
        });
    if let Err(error) = spawned {
        // Scrapes still fold the samples in; only an unscraped process grows.
        tracing::warn!(%error, "cannot start the metrics upkeep thread");
    }
}

fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        DELIVERIES_RECEIVED,
        "Deliveries posted to a configured webhook endpoint."
    );
    describe_counter!(
        DELIVERIES_VERIFIED,
        "Deliveries whose signature, timestamp and key were valid."
    );
    describe_counter!(
        DELIVERIES_REJECTED,
        "Deliveries refused before anything was stored, by problem type (reason)."
    );
    describe_counter!(
        DELIVERIES_PROCESSED,
        "Deliveries whose handlers ran and whose answer was stored (a stored 422 included)."
    );
    describe_counter!(
        DELIVERIES_REPLAYED,
        "Repeats answered with the stored response."
    );
    describe_counter!(
        DELIVERIES_FAILED,
        "Deliveries that failed after verification and were released, by problem type (reason)."
    );
    describe_counter!(
        CONFLICTS,
        "Deliveries answered 409: another attempt holds the key (in_progress) or the key was used with another body (key_reused)."
    );
    describe_histogram!(
        PROCESSING_SECONDS,
        Unit::Seconds,
        "Time from receiving a delivery to answering it, by outcome."
    );
    describe_counter!(
        LEASE_TAKEOVERS,
        "Claims taken over after their lease expired (by a retry or the reconciler)."
    );
    describe_counter!(
        PURGE_DELETED,
        "Expired keys deleted by the purge, by kind (completed, abandoned)."
    );
    describe_counter!(
        PURGE_DELETED_PUBLICATIONS,
        "Sent outbox rows deleted by the purge once past their endpoint's retention."
    );
    describe_counter!(
        RECONCILE_OUTCOMES,
        "Abandoned claims examined by the reconciler, by outcome."
    );
    describe_counter!(
        CLIENT_KEY_REQUESTS,
        "Requests through the Idempotency-Key middleware, by route pattern and outcome."
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered, by method, route pattern and status."
    );
    describe_histogram!(
        SQLITE_GROUP_MEMBERS,
        "Transactions made durable by one SQLite COMMIT (group commit): members per committed group."
    );
    describe_counter!(
        SQLITE_GROUPS_ROLLED_BACK,
        "SQLite commit groups rolled back as a whole (a failed COMMIT or savepoint, a member dropped mid-transaction); each member answered an error."
    );
    describe_histogram!(
        POSTGRES_BATCH_MEMBERS,
        "Fresh deliveries committed by one PostgreSQL statement (group commit): members per committed batch."
    );
    describe_counter!(
        POSTGRES_BATCHES_FAILED,
        "PostgreSQL batches of fresh deliveries that failed as a whole; each member then sent its own statement."
    );
    describe_gauge!(POOL_MAX_SIZE, "The database pool's maximum size.");
    describe_gauge!(
        POOL_SIZE,
        "Connections the database pool holds, in use or idle."
    );
    describe_gauge!(POOL_AVAILABLE, "Idle connections in the database pool.");
    describe_gauge!(POOL_WAITING, "Callers waiting for a database connection.");
    describe_gauge!(
        POOL_LANE_MAX_SIZE,
        "A pool lane's share of pool_size: the shared lane, or one HTTP worker's (PostgreSQL)."
    );
    describe_gauge!(
        POOL_LANE_SIZE,
        "Connections a pool lane holds, in use or idle."
    );
    describe_gauge!(
        POOL_LANE_WAITING,
        "Callers waiting for a connection of this lane: a worker whose lane is in use to the last connection and found no idle one elsewhere."
    );
    describe_gauge!(
        REPLAY_CACHE_ENTRIES,
        "Completed keys held in memory to answer repeats without the database."
    );
    describe_counter!(
        ADMIN_LOGIN_LIMITED,
        "Admin credentials refused unexamined after too many failures, by scope (address, global)."
    );
    describe_gauge!(
        QUEUE_JOBS,
        "Queued endpoints' unfinished jobs, by state (queued, running, retrying, dead), sampled from the database."
    );
    describe_gauge!(
        QUEUE_OLDEST_AGE,
        Unit::Seconds,
        "Age of each queued endpoint's oldest job not yet done or dead (0 when none waits), sampled from the database."
    );
    describe_gauge!(
        QUEUE_PAUSED,
        "1 while an operator has paused the endpoint's processing, else 0."
    );
    describe_counter!(
        QUEUE_ATTEMPTS,
        "Queued jobs' attempts run by this process, by outcome (done, retrying, dead, lease_lost)."
    );
    describe_counter!(
        QUEUE_DEAD,
        "Queued jobs that became dead in this process: attempts or age ran out, or the event was refused."
    );
    describe_gauge!(
        OUTBOX_ROWS,
        "Publications not yet confirmed by their broker, by publisher and state (pending, failed), sampled from the database."
    );
    describe_gauge!(
        OUTBOX_OLDEST_AGE,
        Unit::Seconds,
        "Age of each publisher's oldest unsent publication, from its delivery's receipt (0 when none waits), sampled from the database."
    );
    describe_counter!(
        OUTBOX_PUBLISHED,
        "Publications this process's relay had confirmed, by publisher and confirmation (published, duplicate: the broker already had the id)."
    );
    describe_counter!(
        OUTBOX_FAILURES,
        "Publication attempts of this process's relay that the broker did not confirm, by publisher and outcome (retrying, failed)."
    );
    describe_histogram!(
        OUTBOX_LATENCY_SECONDS,
        Unit::Seconds,
        "Time from a delivery's receipt to its broker's confirmation of the publication, retries included."
    );
    describe_histogram!(
        QUEUE_COMPLETION_SECONDS,
        Unit::Seconds,
        "Time from a queued delivery's receipt to its job ending done, retries included."
    );
}

/// The outcomes a delivery's latency is recorded under.
const ANSWERS: [&str; 6] = [
    "rejected",
    "processed",
    "replayed",
    "in_progress",
    "key_reused",
    "failed",
];

/// Handles made on first use of a label value, then reused: recording an
/// event is then a lookup by `&str` and an atomic add, where
/// `counter!(...)` would build and hash a key with freshly allocated labels
/// on every call. Label values are bounded (see the module's header), so
/// the maps are too.
///
/// Each thread looks a label up in a copy of its own first, and borrows
/// the handle from it ([`Made::with`]). Taking the shared map's read lock
/// and cloning the handle are atomic writes to memory that every worker
/// writes, five times a replay, and each may wait for a cache line held
/// by the other core. The shared map stays the one place a handle is
/// made, so every thread's copy holds the same handles.
///
/// foldhash rather than SipHash: a delivery makes five of these lookups.
struct Made<K: Send, H: Send> {
    made: RwLock<HashMap<K, H, RandomState>>,
    local: ThreadLocal<RefCell<HashMap<K, H, RandomState>>>,
}

impl<K: Eq + Hash + Send, H: Clone + Send> Default for Made<K, H> {
    fn default() -> Self {
        Made {
            made: RwLock::default(),
            local: ThreadLocal::new(),
        }
    }
}

impl<K: Eq + Hash + Send, H: Clone + Send> Made<K, H> {
    /// `label`'s handle, made with `make` if no thread made it yet.
    fn get<Q>(&self, label: &Q, make: impl FnOnce() -> H) -> H
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq + Hash + ToOwned<Owned = K>,
    {
        self.with(label, make, H::clone)
    }

    /// Runs `use_handle` on `label`'s handle, borrowed from this thread's
    /// copy: no lock and no clone once this thread has used the label.
    fn with<Q, R>(&self, label: &Q, make: impl FnOnce() -> H, use_handle: impl FnOnce(&H) -> R) -> R
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq + Hash + ToOwned<Owned = K>,
    {
        let local = self.local.get_or_default();
        // `try_`: a handle used inside `use_handle` of the same map (none
        // does today) takes the shared path instead of panicking.
        if let Ok(copy) = local.try_borrow()
            && let Some(handle) = copy.get(label)
        {
            return use_handle(handle);
        }
        let handle = self.shared(label, make);
        if let Ok(mut copy) = local.try_borrow_mut() {
            copy.insert(label.to_owned(), handle.clone());
        }
        use_handle(&handle)
    }

    /// `label`'s handle from the shared map, made there if it is new.
    fn shared<Q>(&self, label: &Q, make: impl FnOnce() -> H) -> H
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq + Hash + ToOwned<Owned = K>,
    {
        if let Some(handle) = self.made.read().ok().and_then(|m| m.get(label).cloned()) {
            return handle;
        }
        match self.made.write() {
            Ok(mut made) => made.entry(label.to_owned()).or_insert_with(make).clone(),
            // Poisoned: record through a handle of our own rather than not.
            Err(_) => make(),
        }
    }
}

/// Everything counted for one webhook endpoint, made once per endpoint.
struct EndpointHandles {
    received: Counter,
    verified: Counter,
    processed: Counter,
    replayed: Counter,
    in_progress: Counter,
    key_reused: Counter,
    /// By outcome, in the order of [`ANSWERS`].
    latency: [Histogram; ANSWERS.len()],
    rejected: Made<String, Counter>,
    failed: Made<String, Counter>,
    endpoint: String,
    provider: &'static str,
}

impl EndpointHandles {
    fn new(endpoint: &str, provider: &'static str) -> EndpointHandles {
        let labels = || {
            [
                Label::new("endpoint", endpoint.to_owned()),
                Label::new("provider", provider),
            ]
        };
        let counter = |name| ::metrics::counter!(name, labels().iter());
        let conflict = |kind: Conflict| ::metrics::counter!(CONFLICTS, "endpoint" => endpoint.to_owned(), "provider" => provider, "kind" => kind.label());
        EndpointHandles {
            received: counter(DELIVERIES_RECEIVED),
            verified: counter(DELIVERIES_VERIFIED),
            processed: counter(DELIVERIES_PROCESSED),
            replayed: counter(DELIVERIES_REPLAYED),
            in_progress: conflict(Conflict::InProgress),
            key_reused: conflict(Conflict::KeyReused),
            latency: ANSWERS.map(|outcome| {
                ::metrics::histogram!(PROCESSING_SECONDS, "endpoint" => endpoint.to_owned(), "provider" => provider, "outcome" => outcome)
            }),
            rejected: Made::default(),
            failed: Made::default(),
            endpoint: endpoint.to_owned(),
            provider,
        }
    }

    fn answered(&self, outcome: &str, elapsed: Duration) {
        if let Some(i) = ANSWERS.iter().position(|a| *a == outcome) {
            self.latency[i].record(elapsed.as_secs_f64());
        }
    }

    /// Counts one on `name`'s counter for `reason` (a problem type's
    /// suffix: a bounded set), kept in `made`.
    fn count_reason(&self, made: &Made<String, Counter>, name: &'static str, reason: &str) {
        made.with(
            reason,
            || {
                ::metrics::counter!(name, "endpoint" => self.endpoint.clone(), "provider" => self.provider, "reason" => reason.to_owned())
            },
            |counter| counter.increment(1),
        );
    }
}

/// How a queued job's attempt ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The job is done, `since_receipt` after its delivery was received.
    Done {
        since_receipt: Duration,
    },
    Retrying,
    Dead,
    /// Another worker took the job after this one's lease ran out.
    LeaseLost,
}

/// The outcomes attempts are counted under.
const ATTEMPTS: [&str; 4] = ["done", "retrying", "dead", "lease_lost"];

impl Attempt {
    pub fn label(self) -> &'static str {
        ATTEMPTS[self.index()]
    }

    fn index(self) -> usize {
        match self {
            Attempt::Done { .. } => 0,
            Attempt::Retrying => 1,
            Attempt::Dead => 2,
            Attempt::LeaseLost => 3,
        }
    }
}

/// What the workers count for one queued endpoint, made once per endpoint.
struct QueueHandles {
    /// By outcome, in the order of [`ATTEMPTS`].
    attempts: [Counter; ATTEMPTS.len()],
    dead: Counter,
    completion: Histogram,
}

impl QueueHandles {
    fn new(endpoint: &str) -> QueueHandles {
        QueueHandles {
            attempts: ATTEMPTS.map(|outcome| {
                ::metrics::counter!(QUEUE_ATTEMPTS, "endpoint" => endpoint.to_owned(), "outcome" => outcome)
            }),
            dead: ::metrics::counter!(QUEUE_DEAD, "endpoint" => endpoint.to_owned()),
            completion: ::metrics::histogram!(QUEUE_COMPLETION_SECONDS, "endpoint" => endpoint.to_owned()),
        }
    }
}

/// The handles of every metric the receiver records. Made by [`install`],
/// so that no handle is taken from the no-op recorder that stands in
/// before it.
///
/// A new metric: its name as a `const` above, a line in `describe`, a
/// handle here (a field made in [`Handles::new`] for fixed labels, or a
/// [`Made`] map for a bounded label read from the request), and a helper
/// below that records through it.
struct Handles {
    endpoints: Made<String, Arc<EndpointHandles>>,
    queues: Made<String, Arc<QueueHandles>>,
    lease_takeovers: Counter,
    group_members: Histogram,
    groups_rolled_back: Counter,
    batch_members: Histogram,
    batches_failed: Counter,
    purged_completed: Counter,
    purged_abandoned: Counter,
    reconciled: Made<&'static str, Counter>,
    admin_login_limited: Made<&'static str, Counter>,
    client_keys: Made<String, Arc<ByOutcome>>,
    http: Made<String, Arc<ByMethodAndStatus>>,
}

/// One route pattern's client-key requests, by outcome.
type ByOutcome = Made<&'static str, Counter>;
/// One route pattern's HTTP requests, by method and status.
type ByMethodAndStatus = Made<(&'static str, u16), Counter>;

impl Handles {
    fn new() -> Handles {
        Handles {
            endpoints: Made::default(),
            queues: Made::default(),
            lease_takeovers: ::metrics::counter!(LEASE_TAKEOVERS),
            group_members: ::metrics::histogram!(SQLITE_GROUP_MEMBERS),
            groups_rolled_back: ::metrics::counter!(SQLITE_GROUPS_ROLLED_BACK),
            batch_members: ::metrics::histogram!(POSTGRES_BATCH_MEMBERS),
            batches_failed: ::metrics::counter!(POSTGRES_BATCHES_FAILED),
            purged_completed: ::metrics::counter!(PURGE_DELETED, "kind" => "completed"),
            purged_abandoned: ::metrics::counter!(PURGE_DELETED, "kind" => "abandoned"),
            reconciled: Made::default(),
            admin_login_limited: Made::default(),
            client_keys: Made::default(),
            http: Made::default(),
        }
    }

    /// Runs `record` on `endpoint`'s handles.
    fn endpoint(
        &self,
        endpoint: &str,
        provider: &'static str,
        record: impl FnOnce(&EndpointHandles),
    ) {
        self.endpoints.with(
            endpoint,
            || Arc::new(EndpointHandles::new(endpoint, provider)),
            |handles| record(handles),
        );
    }
}

static HANDLES: OnceLock<Handles> = OnceLock::new();

/// The handles, once [`install`] made them; until then every helper does
/// nothing.
fn handles() -> Option<&'static Handles> {
    HANDLES.get()
}

/// Runs `record` on `endpoint`'s handles, once [`install`] made them.
fn for_endpoint(endpoint: &str, provider: &'static str, record: impl FnOnce(&EndpointHandles)) {
    if let Some(h) = handles() {
        h.endpoint(endpoint, provider, record);
    }
}

/// A delivery reached a configured endpoint.
pub fn delivery_received(endpoint: &str, provider: &'static str) {
    for_endpoint(endpoint, provider, |h| {
        h.received.increment(1);
    });
}

/// Its signature (and timestamp, and key) checked out.
pub fn delivery_verified(endpoint: &str, provider: &'static str) {
    for_endpoint(endpoint, provider, |h| {
        h.verified.increment(1);
    });
}

/// It was refused before the engine saw it; `reason` is the problem type's
/// suffix (`invalid-signature`, `payload-too-large`, ...).
pub fn delivery_rejected(endpoint: &str, provider: &'static str, reason: &str, elapsed: Duration) {
    for_endpoint(endpoint, provider, |h| {
        h.count_reason(&h.rejected, DELIVERIES_REJECTED, reason);
        h.answered("rejected", elapsed);
    });
}

/// Its handlers ran and the answer was stored.
pub fn delivery_processed(endpoint: &str, provider: &'static str, elapsed: Duration) {
    for_endpoint(endpoint, provider, |h| {
        h.processed.increment(1);
        h.answered("processed", elapsed);
    });
}

/// A repeat got the stored answer.
pub fn delivery_replayed(endpoint: &str, provider: &'static str, elapsed: Duration) {
    for_endpoint(endpoint, provider, |h| {
        h.replayed.increment(1);
        h.answered("replayed", elapsed);
    });
}

/// It was answered 409 without running.
pub fn delivery_conflict(
    endpoint: &str,
    provider: &'static str,
    kind: Conflict,
    elapsed: Duration,
) {
    for_endpoint(endpoint, provider, |h| {
        match kind {
            Conflict::InProgress => h.in_progress.increment(1),
            Conflict::KeyReused => h.key_reused.increment(1),
        }
        h.answered(kind.label(), elapsed);
    });
}

/// It failed after verification (a handler failed, the database was
/// unavailable, the lease was lost) and the key was released; `reason` is
/// the answer's problem type suffix or `lease-lost`.
pub fn delivery_failed(endpoint: &str, provider: &'static str, reason: &str, elapsed: Duration) {
    for_endpoint(endpoint, provider, |h| {
        h.count_reason(&h.failed, DELIVERIES_FAILED, reason);
        h.answered("failed", elapsed);
    });
}

/// A claim whose lease had expired was taken over. No label: the engine
/// sees scopes, and a client-key scope may name a tenant.
pub fn lease_taken_over() {
    if let Some(h) = handles() {
        h.lease_takeovers.increment(1);
    }
}

/// One SQLite COMMIT made `members` transactions durable.
pub fn sqlite_group_committed(members: usize) {
    if let Some(h) = handles() {
        h.group_members.record(members as f64);
    }
}

/// A SQLite commit group was rolled back as a whole.
pub fn sqlite_group_rolled_back() {
    if let Some(h) = handles() {
        h.groups_rolled_back.increment(1);
    }
}

/// One PostgreSQL statement committed `members` fresh deliveries.
pub fn postgres_batch_committed(members: usize) {
    if let Some(h) = handles() {
        h.batch_members.record(members as f64);
    }
}

/// A PostgreSQL batch of fresh deliveries failed; each member went alone.
pub fn postgres_batch_failed() {
    if let Some(h) = handles() {
        h.batches_failed.increment(1);
    }
}

/// The purge deleted `completed` finished keys and `abandoned` expired claims.
pub fn purge_deleted(completed: u64, abandoned: u64) {
    if let Some(h) = handles() {
        h.purged_completed.increment(completed);
        h.purged_abandoned.increment(abandoned);
    }
}

/// The purge deleted `n` sent outbox rows.
pub fn purge_deleted_publications(n: u64) {
    if handles().is_some() {
        ::metrics::counter!(PURGE_DELETED_PUBLICATIONS).increment(n);
    }
}

/// What the reconciler did with one abandoned claim: `completed`,
/// `released`, `unknown` or `skipped`.
pub fn reconciled(outcome: &'static str) {
    if let Some(h) = handles() {
        h.reconciled
            .get(
                &outcome,
                || ::metrics::counter!(RECONCILE_OUTCOMES, "outcome" => outcome),
            )
            .increment(1);
    }
}

/// A request through the `Idempotency-Key` middleware, by its route
/// *pattern* (`/payments`) and what became of it.
pub fn client_key_request(route: &str, outcome: &'static str) {
    let Some(h) = handles() else {
        return;
    };
    h.client_keys.with(route, Arc::default, |by_route| {
        by_route.with(
            &outcome,
            || {
                ::metrics::counter!(CLIENT_KEY_REQUESTS, "route" => route.to_owned(), "outcome" => outcome)
            },
            |counter| counter.increment(1),
        );
    });
}

/// An answered HTTP request. `route` must be a pattern or a fixed word
/// (`unmatched`), never a raw path.
pub fn http_request(method: &'static str, route: &str, status: u16) {
    let Some(h) = handles() else {
        return;
    };
    h.http.with(route, Arc::default, |by_route| {
        by_route.with(
            &(method, status),
            || {
                ::metrics::counter!(
                    HTTP_REQUESTS,
                    "method" => method,
                    "route" => route.to_owned(),
                    "status" => status.to_string()
                )
            },
            |counter| counter.increment(1),
        );
    });
}

/// An admin credential (a log-in, a bearer token) was refused without being
/// looked at: `scope` is `address` or `global`, whichever limit was reached.
pub fn admin_login_limited(scope: &'static str) {
    if let Some(h) = handles() {
        h.admin_login_limited
            .get(
                &scope,
                || ::metrics::counter!(ADMIN_LOGIN_LIMITED, "scope" => scope),
            )
            .increment(1);
    }
}

/// A queued job's attempt ended. The endpoint is the job's, a configured
/// name, so the label stays bounded.
pub fn queue_attempt(endpoint: &str, attempt: Attempt) {
    let Some(h) = handles() else {
        return;
    };
    let queue = h
        .queues
        .get(endpoint, || Arc::new(QueueHandles::new(endpoint)));
    queue.attempts[attempt.index()].increment(1);
    match attempt {
        Attempt::Done { since_receipt } => queue.completion.record(since_receipt.as_secs_f64()),
        Attempt::Dead => queue.dead.increment(1),
        Attempt::Retrying | Attempt::LeaseLost => {}
    }
}

/// The job states whose counts are the queue's depth. `done` and
/// `cancelled` jobs are history, not depth.
const DEPTH_STATES: [&str; 4] = [
    crate::store::queue::QUEUED,
    crate::store::queue::RUNNING,
    crate::store::queue::RETRYING,
    crate::store::queue::DEAD,
];

/// The queue's gauges (depth, oldest age, paused), set from the database by
/// [`QueueGauges::sample`]. The workers' process samples every few seconds
/// (see `maintenance::queue`), so that neither a delivery nor a scrape runs
/// these queries: `/metrics` renders what the last sample set, and an
/// unauthenticated scraper cannot make the database work.
///
/// The queue is shared: every instance reports the same numbers.
#[derive(Debug, Default)]
pub struct QueueGauges {
    /// The endpoints set at every sample, zero when they have no jobs: the
    /// configured queued endpoints, and every endpoint a sample saw, so
    /// that a count that fell to nothing is set to 0 rather than left.
    endpoints: BTreeSet<String>,
}

impl QueueGauges {
    /// Gauges for `endpoints` (the configured queued ones) from the start.
    pub fn new(endpoints: impl IntoIterator<Item = String>) -> QueueGauges {
        QueueGauges {
            endpoints: endpoints.into_iter().collect(),
        }
    }

    /// Reads the depth, the oldest waiting job and the paused endpoints, and
    /// sets the gauges; ages are by `store`'s clock. Nothing is read before
    /// [`install`]: there is nowhere to show it.
    pub async fn sample(&mut self, store: &Store) -> Result<(), StoreError> {
        if handles().is_none() {
            return Ok(());
        }
        let (depth, oldest, paused) = {
            let mut conn = store.conn().await?;
            (
                conn.queue_depth().await?,
                conn.oldest_waiting().await?,
                conn.paused().await?,
            )
        };
        let now = store.clock().naive_now();
        let seen = depth
            .iter()
            .map(|(endpoint, _, _)| endpoint)
            .chain(oldest.iter().map(|(endpoint, _)| endpoint))
            .chain(&paused);
        self.endpoints.extend(seen.cloned());
        let count = |endpoint: &str, state: &str| {
            depth
                .iter()
                .find(|(e, s, _)| e == endpoint && s == state)
                .map_or(0, |(_, _, n)| *n)
        };
        for endpoint in &self.endpoints {
            for state in DEPTH_STATES {
                ::metrics::gauge!(QUEUE_JOBS, "endpoint" => endpoint.clone(), "state" => state)
                    .set(count(endpoint, state) as f64);
            }
            let age = oldest
                .iter()
                .find(|(e, _)| e == endpoint)
                .and_then(|(_, received_at)| *received_at)
                .map_or(0.0, |received_at| {
                    // A job received "after" now (clocks of two instances
                    // apart) is not negative age.
                    ((now - received_at).num_milliseconds().max(0) as f64) / 1000.0
                });
            ::metrics::gauge!(QUEUE_OLDEST_AGE, "endpoint" => endpoint.clone()).set(age);
            let is_paused = paused.iter().any(|p| p == endpoint);
            ::metrics::gauge!(QUEUE_PAUSED, "endpoint" => endpoint.clone()).set(if is_paused {
                1.0
            } else {
                0.0
            });
        }
        Ok(())
    }
}

/// The relay had a publication confirmed, `since_receipt` after its
/// delivery arrived. Publisher names are configured, so labels stay bounded.
pub fn outbox_published(publisher: &str, duplicate: bool, since_receipt: Duration) {
    let confirmation = if duplicate { "duplicate" } else { "published" };
    ::metrics::counter!(OUTBOX_PUBLISHED, "publisher" => publisher.to_owned(), "confirmation" => confirmation)
        .increment(1);
    ::metrics::histogram!(OUTBOX_LATENCY_SECONDS, "publisher" => publisher.to_owned())
        .record(since_receipt.as_secs_f64());
}

/// A publication attempt failed; `gave_up`: the row is now `failed`.
pub fn outbox_failed(publisher: &str, gave_up: bool) {
    let outcome = if gave_up { "failed" } else { "retrying" };
    ::metrics::counter!(OUTBOX_FAILURES, "publisher" => publisher.to_owned(), "outcome" => outcome)
        .increment(1);
}

/// The outbox's gauges (rows per state, oldest age), set from the database
/// by the relay's sampler, for the same reasons as [`QueueGauges`].
#[derive(Debug, Default)]
pub struct OutboxGauges {
    publishers: BTreeSet<String>,
}

impl OutboxGauges {
    pub fn new(publishers: impl IntoIterator<Item = String>) -> OutboxGauges {
        OutboxGauges {
            publishers: publishers.into_iter().collect(),
        }
    }

    pub async fn sample(&mut self, store: &Store) -> Result<(), StoreError> {
        if handles().is_none() {
            return Ok(());
        }
        let backlog = store.conn().await?.outbox_backlog().await?;
        let now = store.clock().naive_now();
        self.publishers
            .extend(backlog.iter().map(|b| b.publisher.clone()));
        for publisher in &self.publishers {
            let entry = backlog.iter().find(|b| &b.publisher == publisher);
            let (pending, failed) = entry.map_or((0, 0), |b| (b.pending, b.failed));
            ::metrics::gauge!(OUTBOX_ROWS, "publisher" => publisher.clone(), "state" => "pending")
                .set(pending as f64);
            ::metrics::gauge!(OUTBOX_ROWS, "publisher" => publisher.clone(), "state" => "failed")
                .set(failed as f64);
            let age = entry.and_then(|b| b.oldest).map_or(0.0, |oldest| {
                ((now - oldest).num_milliseconds().max(0) as f64) / 1000.0
            });
            ::metrics::gauge!(OUTBOX_OLDEST_AGE, "publisher" => publisher.clone()).set(age);
        }
        Ok(())
    }
}

/// Samples the pool's gauges; called when `/metrics` is scraped, so that
/// the numbers are as fresh as the scrape.
pub fn sample_pool(store: &Store) {
    let status = store.pool_status();
    let backend = match store.backend() {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let gauge = |name: &'static str, value: usize| {
        ::metrics::gauge!(name, "backend" => backend).set(value as f64);
    };
    gauge(POOL_MAX_SIZE, status.max_size);
    gauge(POOL_SIZE, status.size);
    gauge(POOL_AVAILABLE, status.available);
    gauge(POOL_WAITING, status.waiting);
    // A worker's lane can run dry while the others have room; the sums
    // above would not show it.
    for (lane, status) in store.lane_status().iter().enumerate() {
        let lane = match lane {
            0 => "shared".to_owned(),
            worker => format!("worker-{worker}"),
        };
        let gauge = |name: &'static str, value: usize| {
            ::metrics::gauge!(name, "backend" => backend, "lane" => lane.clone()).set(value as f64);
        };
        gauge(POOL_LANE_MAX_SIZE, status.max_size);
        gauge(POOL_LANE_SIZE, status.size);
        gauge(POOL_LANE_WAITING, status.waiting);
    }
    ::metrics::gauge!(REPLAY_CACHE_ENTRIES).set(store.replay_cache().len() as f64);
}

/// Who may scrape `/metrics`: anybody (the default), or whoever presents
/// `metrics_token` as a bearer token. Its `Debug` never shows the token.
#[derive(Debug, Clone, Default)]
pub struct MetricsSettings {
    token: Option<Secret>,
}

/// A bad `metrics_token`; the message never contains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidMetricsSetting {
    pub key: &'static str,
    /// The value came from the environment rather than the file.
    pub from_environment: bool,
    pub message: String,
}

impl MetricsSettings {
    /// `metrics_token` from the file; `IR_METRICS_TOKEN` replaces it.
    pub fn parse(
        file_token: Option<String>,
        env: crate::environment::Env<'_>,
    ) -> Result<MetricsSettings, InvalidMetricsSetting> {
        let (key, from_environment, token) = match env(TOKEN_ENV) {
            Some(token) => (TOKEN_ENV, true, Some(token)),
            None => ("metrics_token", false, file_token),
        };
        let token = token
            .map(|token| bearer::configured(&token))
            .transpose()
            .map_err(|message| InvalidMetricsSetting {
                key,
                from_environment,
                message,
            })?;
        Ok(MetricsSettings { token })
    }

    /// Scrapes need `token` as a bearer token.
    pub fn with_token(token: Secret) -> MetricsSettings {
        MetricsSettings { token: Some(token) }
    }

    /// Whether a scrape needs a token.
    pub fn guarded(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `request` may scrape: always without a token configured,
    /// else only with that token, compared in constant time.
    fn allows(&self, request: &HttpRequest) -> bool {
        match &self.token {
            None => true,
            Some(token) => bearer::presented(request).is_some_and(|presented| {
                bearer::constant_time_eq(token.expose(), presented.as_bytes())
            }),
        }
    }
}

/// Registers `GET /metrics`, open to anybody, rendering `handle` after
/// sampling `store`'s pool.
pub fn configure(store: Store, handle: PrometheusHandle) -> impl FnOnce(&mut web::ServiceConfig) {
    configure_with(store, handle, MetricsSettings::default())
}

/// [`configure`], with access as `settings` says.
pub fn configure_with(
    store: Store,
    handle: PrometheusHandle,
    settings: MetricsSettings,
) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(Scrape {
            store,
            handle,
            settings,
        }))
        .route("/metrics", web::get().to(scrape));
    }
}

struct Scrape {
    store: Store,
    handle: PrometheusHandle,
    settings: MetricsSettings,
}

async fn scrape(scrape: web::Data<Scrape>, request: HttpRequest) -> HttpResponse {
    if !scrape.settings.allows(&request) {
        return bearer::unauthorized(
            "Bearer realm=\"metrics\"",
            "/metrics requires the metrics token: Authorization: Bearer <token>",
        );
    }
    sample_pool(&scrape.store);
    HttpResponse::Ok()
        .insert_header((
            CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPE_PROMETHEUS),
        ))
        .body(scrape.handle.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "tok_metrics_0123456789";

    #[test]
    fn without_a_token_metrics_are_open_and_the_environment_overrides_the_file() {
        let none = |_: &str| None;
        assert!(!MetricsSettings::parse(None, &none).unwrap().guarded());
        let settings = MetricsSettings::parse(Some(TOKEN.into()), &none).unwrap();
        assert!(settings.guarded());
        assert!(!format!("{settings:?}").contains(TOKEN));
        let env = |name: &str| (name == TOKEN_ENV).then(|| "tok_from_env_0123456789".to_owned());
        let settings = MetricsSettings::parse(Some("short".into()), &env).unwrap();
        assert_eq!(
            settings.token.as_ref().map(Secret::expose),
            Some(&b"tok_from_env_0123456789"[..])
        );
    }

    #[test]
    fn a_short_metrics_token_is_refused_naming_the_key_not_the_token() {
        let none = |_: &str| None;
        let error = MetricsSettings::parse(Some("tiny-token".into()), &none).unwrap_err();
        assert_eq!(error.key, "metrics_token");
        assert!(!error.from_environment);
        assert!(!error.message.contains("tiny-token"));
        let env = |_: &str| Some("tiny".to_owned());
        let error = MetricsSettings::parse(None, &env).unwrap_err();
        assert_eq!(error.key, TOKEN_ENV);
        assert!(error.from_environment);
    }

    #[test]
    fn a_handle_is_made_once_per_label_value_and_then_reused() {
        let made: Made<String, Arc<u32>> = Made::default();
        let mut makes = 0;
        let mut make = |n| {
            makes += 1;
            Arc::new(n)
        };
        let first = made.get("shop", || make(1));
        let again = made.get("shop", || make(2));
        let other = made.get("github", || make(3));
        assert!(Arc::ptr_eq(&first, &again), "the same handle");
        assert_eq!((*again, *other), (1, 3));
        assert_eq!(makes, 2, "one per label value");
    }
}
