//! The engine: claim a key, run the operation and complete the key in one
//! transaction, or answer a repeat from what is stored. It knows neither HTTP
//! nor providers: it sees a scope, a key, a fingerprint and an operation.
//!
//! Two ways in: [`Engine::process`] runs an [`Operation`] start to finish
//! (the webhook face); [`Engine::claim`] hands out a [`Pending`] claim whose
//! transaction the caller writes through and then completes or releases (the
//! `Idempotency-Key` middleware, which runs an arbitrary actix handler).
//! Maintenance comes in through the same steps: [`Engine::reprocess`] for an
//! operator, [`Engine::take_over_abandoned`] for the reconciler. Nothing
//! else claims, completes or releases a key.

mod claim;
mod in_flight;
mod outcome;
mod planned;
mod queue;
mod replay_tally;
mod traced;

pub use claim::{Claim, Lease, Pending};
pub use outcome::{EngineError, Landed, Operation, OperationError, Outcome, Planned};
pub use queue::{Job, JobOutcome, RetryPolicy};
pub use traced::delivery_attributes;

use crate::store::{
    AfterClaim, Backend, CachedCompletion, Claimed, DbConn, DeliveryRow, Flight, NewClaim, Store,
    StoreError, StoredResponse, Transaction,
};
use chrono::{NaiveDateTime, TimeDelta};
use claim::Purpose;
use futures_util::future::LocalBoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// One logical operation, as the engine sees it.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The namespace of the key: the endpoint, or method + route + tenant.
    pub scope: String,
    pub key: String,
    /// A hash of the request: the same key with another fingerprint is a
    /// caller's error, never a replay.
    pub fingerprint: String,
    pub event_type: Option<String>,
    /// A second unique key for requests whose `key` is not authenticated
    /// (the body hash of a GitHub or Shopify delivery): a request that
    /// matches an earlier one's body key is a repeat of that one.
    pub body_key: Option<String>,
    /// This scope's retention, where it differs from the engine's default
    /// (an endpoint with `retention = ...`).
    pub retention: Option<Duration>,
    /// The verified request, stored with the key so that a claim abandoned
    /// mid-way can be reconciled and an operator can reprocess it.
    pub payload: Option<bytes::Bytes>,
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// How long a claim stays exclusively its owner's before a retry may take
    /// it over (only matters for a claim left `in_progress` by a crash).
    pub lease: Duration,
    /// How long a repeat waits for a concurrent attempt to finish before it is
    /// answered 409 with `Retry-After`.
    pub in_progress_wait: Duration,
    /// How long a completed key is remembered. Past it, the key is forgotten
    /// even if the purge has not deleted the row yet: a repeat runs again.
    pub retention: Duration,
    /// How often the replays answered from what is stored are added to
    /// `deliveries.replays` (see `replay_tally`).
    pub replay_count_every: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lease: Duration::from_secs(60),
            in_progress_wait: Duration::from_secs(5),
            retention: Duration::from_secs(72 * 3600),
            replay_count_every: Duration::from_secs(5),
        }
    }
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    options: EngineOptions,
    instance: String,
    replays: Arc<replay_tally::ReplayTally>,
    /// The keys this process's deliveries are on now.
    in_flight: in_flight::KeysInFlight,
}

/// A key won by the atomic claim, with the `received_at` its row holds now.
struct Won {
    claimed: Claimed,
    received_at: NaiveDateTime,
}

/// What an existing row means for a repeat.
enum Verdict {
    Replay(StoredResponse),
    Mismatch,
    Busy(Duration),
    /// An `in_progress` claim whose lease ran out: the next attempt takes it.
    Stale,
    /// A completed key older than the retention: forgotten, claimable anew.
    Expired,
}

/// A claim about to be tried: the row it inserts, with the lease owner and
/// the "now" it was made at.
struct ClaimRow<'r> {
    request: &'r ClaimRequest,
    owner: String,
    now: NaiveDateTime,
    lease_until: NaiveDateTime,
}

impl ClaimRow<'_> {
    fn row(&self) -> NewClaim<'_> {
        let request = self.request;
        NewClaim {
            endpoint: &request.scope,
            delivery_id: &request.key,
            request_hash: &request.fingerprint,
            status: crate::store::IN_PROGRESS,
            event_type: request.event_type.as_deref(),
            attempts: 1,
            lease_owner: Some(&self.owner),
            lease_expires_at: Some(self.lease_until),
            received_at: self.now,
            body_key: request.body_key.as_deref(),
            request_body: request.payload.as_deref(),
        }
    }
}

/// How far a pass got before the claim's outcome is known: answered
/// without a claim, or a transaction with the claim's insert done in it.
enum Begun {
    Answered(Claim),
    /// The claim's transaction, whether it inserted the row, and what the
    /// operation's statements behind the claim gave (`None`: nothing flew).
    Claimed(Result<(Transaction, bool, Option<Flown>), StoreError>),
}

/// What an operation's statements sent with the claim gave.
type Flown = Result<Landed, OperationError>;

/// An operation, as the statements that may follow a claim in its flight.
struct Flying<'o>(&'o dyn Operation);

impl AfterClaim for Flying<'_> {
    type Landed = Flown;

    fn fly<'f>(&'f self, flight: Flight<'f>) -> Option<LocalBoxFuture<'f, Flown>> {
        self.0.run_in_flight(flight)
    }
}

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(250);

impl Engine {
    pub fn new(store: Store, options: EngineOptions) -> Engine {
        let instance = format!(
            "pid{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        Engine {
            inner: Arc::new(Inner {
                store,
                options,
                instance,
                replays: Arc::default(),
                in_flight: in_flight::KeysInFlight::default(),
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }

    /// Now, by the store's clock: the one every lease and retention is
    /// judged by.
    fn now(&self) -> NaiveDateTime {
        self.store().clock().naive_now()
    }

    /// Runs `operation` exactly once for `request`'s key, or answers from what
    /// is stored. Repeats that find the key busy wait up to `in_progress_wait`.
    #[tracing::instrument(skip_all, fields(scope = %request.scope, key = %request.key))]
    pub async fn process(
        &self,
        request: &ClaimRequest,
        operation: &dyn Operation,
    ) -> Result<Outcome, EngineError> {
        let span = tracing::Span::current();
        crate::telemetry::traces::set_attributes(&span, || {
            delivery_attributes(&request.scope, &request.key, request.event_type.as_deref())
        });
        // SQLite: the write gate's holder runs its statements inline.
        let result = crate::store::inline_scope(self.claim_and_run(request, operation)).await;
        traced::finished(&span, &result);
        result
    }

    /// [`Engine::process`] within its span.
    ///
    /// Each step's future is boxed: held inline, they made this future 13
    /// KiB (the compiler keeps room for every step's state at once, and for
    /// the moved-from ones), and a delivery's task holds it for as long as
    /// the delivery is in flight, including while it waits for the claim.
    /// Boxed, only the step running takes memory.
    async fn claim_and_run(
        &self,
        request: &ClaimRequest,
        operation: &dyn Operation,
    ) -> Result<Outcome, EngineError> {
        let mut rejection: Option<StoredResponse> = None;
        // Where the operation plans, its answer and rows are claimed with
        // the key (`planned`), and otherwise its statements may fly with
        // the claim on PostgreSQL (SQLite has no round trips to save). Not
        // for work outside the database, which needs its lease first, and
        // not for a parallel copy of a delivery this process is already on
        // (see `in_flight`), which would only lose; and on the first pass
        // only (a later one stores a refusal alone).
        let sqlite = self.store().backend() == Backend::Sqlite;
        let held = (!operation.has_external_effects())
            .then(|| self.inner.in_flight.hold(&request.scope, &request.key));
        let alone = held.as_ref().is_some_and(|held| held.alone);
        let mut may_fly = alone && !sqlite;
        if alone {
            // On PostgreSQL the whole delivery in one statement; on SQLite
            // the claim completed and the rows in the delivery's savepoint.
            let planned = if sqlite {
                Box::pin(self.claim_planned_at_gate(request, operation)).await?
            } else {
                Box::pin(self.claim_planned(request, operation)).await?
            };
            match planned {
                planned::OneStatement::Answered(answer) => return Ok(answer),
                planned::OneStatement::NotPlanned => {}
                // The key's row exists: statements sent ahead of the next
                // claim would only be rolled back.
                planned::OneStatement::ClaimLost => may_fly = false,
            }
        }
        let mut first = true;
        loop {
            let fly = (first && may_fly).then_some(operation);
            first = false;
            // At debug: created only when exported (or logged at debug).
            let claiming = tracing::debug_span!("claim");
            let claim = Box::pin(self.claim_with(request, fly).instrument(claiming.clone())).await;
            let (claim, landed) = match claim {
                Ok((claim, landed)) => (Ok(claim), landed),
                Err(e) => (Err(e), None),
            };
            traced::claimed(&claiming, &claim);
            drop(claiming);
            let mut pending = match claim?.fresh() {
                Ok(pending) => pending,
                Err(answer) => return Ok(answer),
            };
            let result = match (&rejection, landed) {
                // A final refusal found by an earlier pass: store it alone.
                (Some(response), _) => Ok(response.clone()),
                (None, _) if operation.has_external_effects() => {
                    let lease = Box::pin(pending.commit_claim()).await?;
                    return Box::pin(self.run_leased(lease, operation)).await;
                }
                (None, Some(landed)) => {
                    landed.and_then(|landed| operation.finish_flight(landed, pending.claimed()))
                }
                (None, None) => {
                    let claimed = pending.claimed().clone();
                    operation.run(pending.conn(), &claimed).await
                }
            };
            match result {
                Ok(response) => {
                    Box::pin(pending.complete(&response)).await?;
                    return Ok(Outcome::Fresh(response));
                }
                // Its effects go, its answer stays: claim again and store
                // only the response.
                Err(OperationError::Rejected(response)) => {
                    Box::pin(pending.release()).await;
                    rejection = Some(response);
                }
                Err(OperationError::Store(e)) => {
                    Box::pin(pending.release()).await;
                    return Err(e.into());
                }
                Err(OperationError::Failed(e)) => {
                    Box::pin(pending.release()).await;
                    return Err(EngineError::Operation(e));
                }
            }
        }
    }

    /// The two-phase path of an operation with effects outside the database,
    /// once its claim is committed (so that its lease is visible to every
    /// other instance): the outside work runs while the lease is renewed;
    /// then the database writes and the completion commit together, fenced
    /// by the lease. A crash in between leaves a claim that expires and is
    /// reconciled (see `maintenance::reconcile`) or taken over by a retry.
    async fn run_leased(
        &self,
        lease: Lease,
        operation: &dyn Operation,
    ) -> Result<Outcome, EngineError> {
        let renewal = lease.keep_alive(self.inner.options.lease);
        let result = match operation.run_external(lease.claimed()).await {
            Ok(()) => lease.finish(operation).await,
            Err(error) => lease.fail(error).await,
        };
        renewal.abort();
        result
    }

    /// Runs a stored key's operation again for an operator (`actor`), whatever
    /// its state, unless another attempt holds it now
    /// ([`Outcome::InProgress`]). The key is taken under a lease fenced like
    /// a takeover, on the `row` that was read; the operation then runs the
    /// two-phase way, so no transaction is open during its outside work.
    /// Until it completes, repeats get the earlier answer; its completion
    /// replaces that answer, and a failure leaves it in place. Either is
    /// recorded in the key's history with the actor.
    pub async fn reprocess(
        &self,
        row: &DeliveryRow,
        actor: &str,
        operation: &dyn Operation,
    ) -> Result<Outcome, EngineError> {
        let now = self.now();
        let owner = format!("reprocess/{actor}/{}", self.new_owner());
        let until = now + to_delta(self.inner.options.lease);
        let mut tx = self.store().begin().await?;
        match tx
            .conn()
            .reclaim_for_reprocess(row, &owner, until, now)
            .await
        {
            Ok(true) => tx.commit().await?,
            Ok(false) => {
                let _ = claim::end(tx).await;
                let remaining = row
                    .lease_expires_at
                    .and_then(|until| (until - now).to_std().ok())
                    .unwrap_or_default();
                return Ok(Outcome::InProgress {
                    retry_after: retry_after(remaining, self.inner.options.lease),
                });
            }
            Err(e) => {
                let _ = claim::end(tx).await;
                return Err(e.into());
            }
        }
        let lease = Lease::new(
            self.store().clone(),
            row.endpoint.clone(),
            Claimed {
                delivery_id: row.delivery_id.clone(),
                lease_owner: owner,
                attempt: row.attempts + 1,
                taken_over: false,
            },
            claim::Remembered {
                request_hash: row.request_hash.clone(),
                received_at: row.received_at,
                event_type: row.event_type.clone(),
            },
            Purpose::Reprocess {
                actor: actor.to_owned(),
            },
        );
        self.run_leased(lease, operation).await
    }

    /// Takes over an abandoned claim for the reconciler, fenced like a
    /// retry's takeover, and commits it: `None` when another attempt got
    /// there first. Complete the lease with [`Lease::finish`] or give it up
    /// with [`Lease::release`]; both are recorded in the key's history.
    pub async fn take_over_abandoned(
        &self,
        request: &ClaimRequest,
    ) -> Result<Option<Lease>, EngineError> {
        let Outcome::Fresh(pending) = self.claim(request).await? else {
            return Ok(None);
        };
        let lease = pending.commit_claim().await?;
        Ok(Some(lease.with_purpose(Purpose::Reconcile)))
    }

    /// Claims `request`'s key, waiting up to `in_progress_wait` while another
    /// attempt holds it. A fresh claim carries the open transaction.
    pub async fn claim(&self, request: &ClaimRequest) -> Result<Claim, EngineError> {
        Ok(self.claim_with(request, None).await?.0)
    }

    /// [`Engine::claim`], with `fly`'s statements sent behind the claim on
    /// the first pass where they can be (see [`Operation::run_in_flight`]):
    /// what they gave comes with a fresh claim.
    async fn claim_with(
        &self,
        request: &ClaimRequest,
        mut fly: Option<&dyn Operation>,
    ) -> Result<(Claim, Option<Flown>), EngineError> {
        let deadline = Instant::now() + self.inner.options.in_progress_wait;
        let mut pause = FIRST_PAUSE;
        loop {
            match self.try_claim(request, fly.take()).await? {
                (Outcome::InProgress { retry_after }, _) => {
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    if remaining.is_zero() {
                        return Ok((Outcome::InProgress { retry_after }, None));
                    }
                    tokio::time::sleep(pause.min(remaining)).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                (claim, landed) => {
                    if matches!(claim, Outcome::Replayed(_)) {
                        self.count_replay_of(request);
                    }
                    return Ok((claim, landed));
                }
            }
        }
    }

    /// One pass over the key; [`Outcome::InProgress`] here means busy at
    /// this instant, to be tried again within the wait.
    async fn try_claim(
        &self,
        request: &ClaimRequest,
        fly: Option<&dyn Operation>,
    ) -> Result<(Claim, Option<Flown>), EngineError> {
        // A completed row is immutable until it expires, so what this
        // process already read of it still holds: most redeliveries end here.
        if let Some(answer) = self.cached(request) {
            return Ok((answer, None));
        }
        // The claim goes first on both backends: a read before it would cost
        // every fresh delivery a statement (on SQLite, on a reader whose page
        // cache each commit empties: a tenth of `fresh`'s CPU samples), and
        // for a repeat the cache missed, the claim's conflict reads the row.
        let claim;
        let begun = if self.store().backend() == Backend::Sqlite {
            claim = self.new_claim(request);
            self.claim_at_gate(request, &claim).await?
        } else {
            let conn = self.store().conn().await?;
            // The checkout may have waited behind the copies of a storm,
            // which hold the pool's connections while the first copy's
            // claim runs: if that answer is known by now, no claim is needed.
            if let Some(answer) = self.cached(request) {
                return Ok((answer, None));
            }
            // `BEGIN` and the claim in one flight, with the operation's
            // statements behind them where it offers them.
            claim = self.new_claim(request);
            let flying = fly.map(Flying);
            Begun::Claimed(
                self.store()
                    .begin_claim_and_fly(conn, &claim.row(), flying.as_ref())
                    .await,
            )
        };
        let (mut tx, inserted, landed) = match begun {
            Begun::Answered(answer) => return Ok((answer, None)),
            Begun::Claimed(Ok(claimed)) => claimed,
            Begun::Claimed(Err(StoreError::LockTimeout)) => {
                return Ok((
                    Outcome::InProgress {
                        retry_after: Duration::from_secs(1),
                    },
                    None,
                ));
            }
            Begun::Claimed(Err(e)) => return Err(e.into()),
        };
        let (outcome, completed) = match self.claim_in(tx.conn(), request, &claim, inserted).await {
            Ok(found) => found,
            Err(EngineError::Store(StoreError::LockTimeout)) => (
                Outcome::InProgress {
                    retry_after: Duration::from_secs(1),
                },
                None,
            ),
            Err(e) => {
                let _ = claim::end(tx).await;
                return Err(e);
            }
        };
        match outcome.fresh() {
            Ok(won) => Ok((Outcome::Fresh(self.pending(tx, request, won)), landed)),
            Err(answer) => {
                // The answer may rest on an uncommitted row of an earlier
                // member of a SQLite commit group: given only once durable,
                // and only then put in the replay cache, which answers the
                // next copy at once. (Cached on reading, such a row answered
                // a copy that arrived before the group's COMMIT, and a
                // kill -9 then lost the row that answer came from.)
                claim::end(tx).await?;
                if let (Outcome::Replayed(stored), Some(row)) = (&answer, completed) {
                    self.remember_completed(&row, stored);
                }
                Ok((answer, None))
            }
        }
    }

    /// SQLite's way in: the write gate, which puts the delivery in a commit
    /// group's transaction, then the claim. A repeat the cache missed (after
    /// a restart, or evicted) queues at the gate too and learns what the
    /// row means from the claim's conflict.
    async fn claim_at_gate(
        &self,
        request: &ClaimRequest,
        claim: &ClaimRow<'_>,
    ) -> Result<Begun, EngineError> {
        let tx = self.store().begin().await?;
        // The gate may have queued this delivery behind a duplicate: if that
        // one's answer is known by now, the claim is not needed.
        if let Some(answer) = self.cached(request) {
            // A cached answer was durable before it was cached.
            let _ = claim::end(tx).await;
            return Ok(Begun::Answered(answer));
        }
        let claimed = tx.insert_claim(&claim.row()).await;
        Ok(Begun::Claimed(
            claimed.map(|(tx, inserted)| (tx, inserted, None)),
        ))
    }

    /// The claim `won` on `tx`, for the caller to run under.
    fn pending(&self, tx: Transaction, request: &ClaimRequest, won: Won) -> Pending {
        let Won {
            claimed,
            received_at,
        } = won;
        if claimed.taken_over {
            crate::telemetry::metrics::lease_taken_over();
            tracing::warn!(
                attempt = claimed.attempt,
                "took over a claim whose lease expired"
            );
        }
        let lease = Lease::new(
            self.store().clone(),
            request.scope.clone(),
            claimed,
            claim::Remembered {
                request_hash: request.fingerprint.clone(),
                received_at,
                event_type: request.event_type.clone(),
            },
            Purpose::Claim,
        );
        Pending::new(tx, lease)
    }

    /// Answers `request` from the replay cache alone: a replay or a
    /// mismatch, without a database round trip or a task of its own.
    /// `None`: only [`Engine::process`] or [`Engine::claim`] can tell.
    pub fn answer_from_cache(&self, request: &ClaimRequest) -> Option<Outcome> {
        let answer = self.cached(request)?;
        if matches!(answer, Outcome::Replayed(_)) {
            self.count_replay_of(request);
        }
        Some(answer)
    }

    /// A repeat of a completed key answered from the replay cache alone:
    /// the stored answer, and the event type it was recorded with. Only an
    /// exact repeat (`fingerprint` equal to the stored one, within
    /// `retention` or the engine's) is answered, and counted as a replay;
    /// anything else is `None`, and the caller takes the full path. The
    /// webhook face asks this before it parses a body whose key a header
    /// gives: the same fingerprint means the same bytes, which the full path
    /// would have parsed into the same delivery. Nothing is allocated on a
    /// miss, which is every fresh delivery.
    pub fn replay_from_cache(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Option<Duration>,
    ) -> Option<(StoredResponse, Option<String>)> {
        let (hit, verdict) = self.judge_cached(scope, key, fingerprint, retention)?;
        if verdict.is_some() {
            return None;
        }
        // No body key: the tally's write finds the row by its key.
        self.count_replay(scope, key, None);
        Some((hit.response(), hit.event_type().map(str::to_owned)))
    }

    fn count_replay(&self, scope: &str, key: &str, body_key: Option<&str>) {
        self.inner.replays.count(
            self.store(),
            scope,
            key,
            body_key,
            self.inner.options.replay_count_every,
        );
    }

    /// [`Engine::count_replay`] for `request`'s key.
    fn count_replay_of(&self, request: &ClaimRequest) {
        self.count_replay(&request.scope, &request.key, request.body_key.as_deref());
    }

    /// The answer the replay cache holds for `request`, if any: a replay or
    /// a mismatch, never a fresh claim.
    fn cached<T>(&self, request: &ClaimRequest) -> Option<Outcome<T>> {
        let (hit, verdict) = self.judge_cached(
            &request.scope,
            &request.key,
            &request.fingerprint,
            request.retention,
        )?;
        match verdict {
            None => Some(Outcome::Replayed(hit.response())),
            Some(Verdict::Mismatch) => Some(Outcome::Mismatch),
            // Past the retention: the database decides what happens.
            Some(_) => None,
        }
    }

    /// The replay cache's completion of `key` in `scope`, if it holds one,
    /// and what it means for a request with `fingerprint` (see
    /// [`Engine::judge_completed`]).
    fn judge_cached(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Option<Duration>,
    ) -> Option<(Arc<CachedCompletion>, Option<Verdict>)> {
        // One reading of the store's clock for the cache's TTL and the
        // key's retention: a replay answered from memory reads it once.
        let now = self.store().clock().now();
        let hit = self.store().replay_cache().get_at(scope, key, now)?;
        let verdict = self.judge_completed(
            hit.request_hash(),
            hit.received_at,
            fingerprint,
            retention,
            now.naive_utc(),
        );
        Some((hit, verdict))
    }

    /// A lease owner no other attempt can hold.
    fn new_owner(&self) -> String {
        format!("{}/{}", self.inner.instance, uuid::Uuid::new_v4().simple())
    }

    /// The claim row for `request`, owned by a new lease owner, as of now.
    fn new_claim<'r>(&self, request: &'r ClaimRequest) -> ClaimRow<'r> {
        let now = self.now();
        ClaimRow {
            request,
            owner: self.new_owner(),
            now,
            lease_until: now + to_delta(self.inner.options.lease),
        }
    }

    /// After the atomic claim's insert (`inserted`: whether it created the
    /// row): the key is won, or else find out what the existing row means.
    /// [`Outcome::InProgress`] means busy at this instant. A replay comes
    /// with the completed row it was read from, for the caller to cache
    /// once that row is known to be durable.
    async fn claim_in(
        &self,
        conn: &mut DbConn,
        request: &ClaimRequest,
        claim_row: &ClaimRow<'_>,
        inserted: bool,
    ) -> Result<(Outcome<Won>, Option<DeliveryRow>), EngineError> {
        let now = claim_row.now;
        let owner = &claim_row.owner;
        let claim = claim_row.row();
        let won = |taken_over, attempt, delivery_id: &str, received_at| {
            Outcome::Fresh(Won {
                claimed: Claimed {
                    delivery_id: delivery_id.to_owned(),
                    lease_owner: owner.clone(),
                    attempt,
                    taken_over,
                },
                received_at,
            })
        };
        // Deleted, taken over or reclaimed meanwhile: go round again.
        let again = Outcome::InProgress {
            retry_after: Duration::ZERO,
        };
        if inserted {
            return Ok((won(false, 1, &request.key, now), None));
        }
        let Some(row) = lookup(conn, request).await? else {
            return Ok((again, None));
        };
        let outcome = match self.judge(&row, request, now)? {
            Verdict::Replay(stored) => return Ok((Outcome::Replayed(stored), Some(row))),
            Verdict::Mismatch => Outcome::Mismatch,
            Verdict::Busy(retry_after) => Outcome::InProgress { retry_after },
            Verdict::Stale => {
                let observed = row.lease_owner.as_deref().unwrap_or_default();
                if conn.take_over(&row, observed, &claim, now).await? {
                    // A takeover keeps the row's received_at.
                    won(true, row.attempts + 1, &row.delivery_id, row.received_at)
                } else {
                    again
                }
            }
            Verdict::Expired => {
                if conn.reclaim_expired(&row, &claim).await? {
                    won(false, 1, &request.key, now)
                } else {
                    again
                }
            }
        };
        Ok((outcome, None))
    }

    /// What a stored row means for `request`. A completed row read here is
    /// not cached yet: on SQLite it may be an earlier commit-group member's
    /// uncommitted write (see [`Engine::remember_completed`]).
    fn judge(
        &self,
        row: &DeliveryRow,
        request: &ClaimRequest,
        now: NaiveDateTime,
    ) -> Result<Verdict, EngineError> {
        if row.status == crate::store::COMPLETED {
            if let Some(verdict) = self.judge_completed(
                &row.request_hash,
                row.received_at,
                &request.fingerprint,
                request.retention,
                now,
            ) {
                return Ok(verdict);
            }
            let stored = row
                .stored_response()
                .ok_or(EngineError::Corrupt("a completed row has no response"))?;
            return Ok(Verdict::Replay(stored));
        }
        if row.request_hash != request.fingerprint {
            return Ok(Verdict::Mismatch);
        }
        match row.lease_expires_at {
            Some(expires) if expires > now => {
                let remaining = (expires - now).to_std().unwrap_or_default();
                Ok(Verdict::Busy(retry_after(
                    remaining,
                    self.inner.options.lease,
                )))
            }
            _ => Ok(Verdict::Stale),
        }
    }

    /// Puts a completed row that a repeat read, and whose transaction has
    /// ended durably, in the replay cache.
    fn remember_completed(&self, row: &DeliveryRow, stored: &StoredResponse) {
        self.store().replay_cache().remember(
            &row.endpoint,
            &row.delivery_id,
            &row.request_hash,
            row.received_at,
            row.event_type.as_deref(),
            stored,
        );
    }

    /// What a completed key means for a request with `fingerprint` under
    /// `retention` (`None`: the engine's), whether the key was read from the
    /// database or the replay cache; `None`: replay its response.
    fn judge_completed(
        &self,
        request_hash: &str,
        received_at: NaiveDateTime,
        fingerprint: &str,
        retention: Option<Duration>,
        now: NaiveDateTime,
    ) -> Option<Verdict> {
        // Past the retention the key is forgotten, whatever it was used
        // for: the docs promise that a repeat then runs again.
        let retention = retention.unwrap_or(self.inner.options.retention);
        if received_at + to_delta(retention) <= now {
            return Some(Verdict::Expired);
        }
        if request_hash != fingerprint {
            return Some(Verdict::Mismatch);
        }
        None
    }
}

/// The row a request's key (or, failing that, its body key) names.
async fn lookup(
    conn: &mut DbConn,
    request: &ClaimRequest,
) -> Result<Option<DeliveryRow>, StoreError> {
    if let Some(row) = conn.find_delivery(&request.scope, &request.key).await? {
        return Ok(Some(row));
    }
    match &request.body_key {
        Some(body_key) => conn.find_by_body_key(&request.scope, body_key).await,
        None => Ok(None),
    }
}

/// What `Retry-After` says for a live claim: its remaining lease, at least
/// a second (the header counts whole seconds) and at most a whole lease.
fn retry_after(remaining: Duration, lease: Duration) -> Duration {
    let second = Duration::from_secs(1);
    remaining.min(lease).max(second)
}

fn to_delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_a_whole_second_at_least_even_for_leases_shorter_than_that() {
        let ms = Duration::from_millis;
        assert_eq!(retry_after(ms(200), ms(300)), Duration::from_secs(1));
        assert_eq!(retry_after(ms(4500), Duration::from_secs(60)), ms(4500));
        assert_eq!(
            retry_after(Duration::from_secs(90), Duration::from_secs(60)),
            Duration::from_secs(60)
        );
    }
}
