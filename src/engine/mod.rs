//! The engine: claim a key, run the operation and complete the key in one
//! transaction, or answer a repeat from what is stored. It knows neither HTTP
//! nor providers: it sees a scope, a key, a fingerprint and an operation.

mod outcome;

pub use outcome::{EngineError, Operation, OperationError, Outcome};

use crate::store::{Claimed, DbConn, DeliveryRow, NewClaim, Store, StoreError, StoredResponse};
use chrono::{NaiveDateTime, TimeDelta, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One logical operation, as the engine sees it.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The namespace of the key: the endpoint (and tenant, where there is one).
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
}

#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// How long a claim stays exclusively its owner's before a retry may take
    /// it over (only matters for a claim left `in_progress` by a crash).
    pub lease: Duration,
    /// How long a repeat waits for a concurrent attempt to finish before it is
    /// answered 409 with `Retry-After`.
    pub in_progress_wait: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            lease: Duration::from_secs(60),
            in_progress_wait: Duration::from_secs(5),
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
}

/// What one pass over the key found.
enum Step {
    Done(Outcome),
    /// Someone else holds the key; try again after a pause, within the wait.
    Busy(Duration),
    /// The operation gave a final non-success answer: store it alone.
    Rejected(StoredResponse),
}

/// What an existing row means for a repeat.
enum Verdict {
    Final(Outcome),
    Busy(Duration),
    Stale,
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
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }

    /// Runs `operation` exactly once for `request`'s key, or answers from what
    /// is stored. Repeats that find the key busy wait up to `in_progress_wait`.
    #[tracing::instrument(skip_all, fields(scope = %request.scope, key = %request.key))]
    pub async fn process(
        &self,
        request: &ClaimRequest,
        operation: &dyn Operation,
    ) -> Result<Outcome, EngineError> {
        let deadline = Instant::now() + self.inner.options.in_progress_wait;
        let mut pause = FIRST_PAUSE;
        let mut rejection: Option<StoredResponse> = None;
        loop {
            let step = match &rejection {
                Some(response) => self.attempt(request, &Fixed(response.clone())).await?,
                None => self.attempt(request, operation).await?,
            };
            match step {
                Step::Done(outcome) => return Ok(outcome),
                Step::Rejected(response) => rejection = Some(response),
                Step::Busy(retry_after) => {
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    if remaining.is_zero() {
                        return Ok(Outcome::InProgress { retry_after });
                    }
                    tokio::time::sleep(pause.min(remaining)).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        }
    }

    async fn attempt(
        &self,
        request: &ClaimRequest,
        operation: &dyn Operation,
    ) -> Result<Step, EngineError> {
        // A completed row is immutable until it is purged, so a plain read can
        // answer a replay without taking a write lock. Anything else goes to
        // the atomic claim below: this read never decides to run the operation.
        if let Some(row) = lookup(&mut self.store().conn().await?, request).await? {
            match self.judge(&row, request, now())? {
                Verdict::Final(outcome) => return Ok(Step::Done(outcome)),
                Verdict::Busy(retry_after) => return Ok(Step::Busy(retry_after)),
                Verdict::Stale => {}
            }
        }

        let mut tx = self.store().begin().await?;
        let claimed = match self.claim(tx.conn(), request).await {
            Ok(Ok(claimed)) => claimed,
            Ok(Err(step)) => {
                end(tx).await;
                return Ok(step);
            }
            Err(EngineError::Store(StoreError::LockTimeout)) => {
                end(tx).await;
                return Ok(Step::Busy(Duration::from_secs(1)));
            }
            Err(e) => {
                end(tx).await;
                return Err(e);
            }
        };
        if claimed.taken_over {
            tracing::warn!(
                attempt = claimed.attempt,
                "took over a claim whose lease expired"
            );
        }

        let response = match operation.run(tx.conn(), &claimed).await {
            Ok(response) => response,
            Err(error) => {
                end(tx).await;
                return match error {
                    OperationError::Rejected(response) => Ok(Step::Rejected(response)),
                    OperationError::Store(e) => Err(e.into()),
                    OperationError::Failed(e) => Err(EngineError::Operation(e)),
                };
            }
        };

        let completed = tx
            .conn()
            .complete_delivery(
                &request.scope,
                &claimed.delivery_id,
                &claimed.lease_owner,
                &response,
                now(),
            )
            .await;
        match completed {
            Ok(true) => {
                tx.commit().await?;
                Ok(Step::Done(Outcome::Processed(response)))
            }
            Ok(false) => {
                end(tx).await;
                Err(EngineError::LeaseLost)
            }
            Err(e) => {
                end(tx).await;
                Err(e.into())
            }
        }
    }

    /// The atomic claim: insert, or else find out what the existing row means.
    /// `Ok(Err(step))` means the key is not ours to run.
    async fn claim(
        &self,
        conn: &mut DbConn,
        request: &ClaimRequest,
    ) -> Result<Result<Claimed, Step>, EngineError> {
        let now = now();
        let owner = format!("{}/{}", self.inner.instance, uuid::Uuid::new_v4().simple());
        let lease_expires_at = now + self.lease();
        let inserted = conn
            .insert_claim(&NewClaim {
                endpoint: &request.scope,
                delivery_id: &request.key,
                request_hash: &request.fingerprint,
                status: crate::store::IN_PROGRESS,
                event_type: request.event_type.as_deref(),
                attempts: 1,
                lease_owner: Some(&owner),
                lease_expires_at: Some(lease_expires_at),
                received_at: now,
                body_key: request.body_key.as_deref(),
            })
            .await?;
        if inserted {
            return Ok(Ok(Claimed {
                delivery_id: request.key.clone(),
                lease_owner: owner,
                attempt: 1,
                taken_over: false,
            }));
        }
        let Some(row) = lookup(conn, request).await? else {
            // Purged between the insert and the read: go round again.
            return Ok(Err(Step::Busy(Duration::ZERO)));
        };
        match self.judge(&row, request, now)? {
            Verdict::Final(outcome) => Ok(Err(Step::Done(outcome))),
            Verdict::Busy(retry_after) => Ok(Err(Step::Busy(retry_after))),
            Verdict::Stale => {
                let observed = row.lease_owner.as_deref().unwrap_or_default();
                let took = conn
                    .take_over(
                        &request.scope,
                        &row.delivery_id,
                        observed,
                        &owner,
                        lease_expires_at,
                        now,
                    )
                    .await?;
                if took {
                    Ok(Ok(Claimed {
                        delivery_id: row.delivery_id,
                        lease_owner: owner,
                        attempt: row.attempts + 1,
                        taken_over: true,
                    }))
                } else {
                    // Another retry took it over first.
                    Ok(Err(Step::Busy(Duration::ZERO)))
                }
            }
        }
    }

    fn judge(
        &self,
        row: &DeliveryRow,
        request: &ClaimRequest,
        now: NaiveDateTime,
    ) -> Result<Verdict, EngineError> {
        if row.request_hash != request.fingerprint {
            return Ok(Verdict::Final(Outcome::Mismatch));
        }
        if row.status == crate::store::COMPLETED {
            let stored = row
                .stored_response()
                .ok_or(EngineError::Corrupt("a completed row has no response"))?;
            return Ok(Verdict::Final(Outcome::Replayed(stored)));
        }
        match row.lease_expires_at {
            Some(expires) if expires > now => {
                let remaining = (expires - now).to_std().unwrap_or_default();
                Ok(Verdict::Busy(
                    remaining.clamp(Duration::from_secs(1), self.inner.options.lease),
                ))
            }
            _ => Ok(Verdict::Stale),
        }
    }

    fn lease(&self) -> TimeDelta {
        TimeDelta::from_std(self.inner.options.lease).unwrap_or(TimeDelta::seconds(60))
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

fn now() -> NaiveDateTime {
    Utc::now().naive_utc()
}

/// Ends a transaction that must not commit. A failed rollback leaves the
/// connection with an open transaction, which the pool then discards, so the
/// database rolls back when the connection closes.
async fn end(tx: crate::store::Transaction) {
    if let Err(error) = tx.rollback().await {
        tracing::warn!(%error, "rollback failed; the connection is discarded");
    }
}

/// Stores a final answer produced by an earlier attempt, with no effects.
struct Fixed(StoredResponse);

#[async_trait::async_trait(?Send)]
impl Operation for Fixed {
    async fn run(&self, _: &mut DbConn, _: &Claimed) -> Result<StoredResponse, OperationError> {
        Ok(self.0.clone())
    }
}
