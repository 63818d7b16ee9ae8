use super::{EngineError, Operation, OperationError, Outcome};
use crate::store::{Claimed, DbConn, Store, StoreError, StoredResponse, Transaction};
use chrono::{NaiveDateTime, TimeDelta};
use std::time::Duration;

/// What a request for a key gets from [`super::Engine::claim`]: the key to
/// run under ([`Outcome::Fresh`]), or an answer that runs nothing.
pub type Claim = Outcome<Pending>;

/// A claimed key with its transaction open. The claim row, the caller's
/// writes and the completion commit together in [`Pending::complete`]; a
/// `Pending` dropped without either call takes its connection out of the
/// pool, so the database rolls everything back and the key is free again.
pub struct Pending {
    tx: Transaction,
    lease: Lease,
    /// The claim row was written by `tx` itself (not committed earlier, as
    /// under a lease): `tx` holds its lock, so the fenced completion cannot
    /// miss it, and may travel with the `COMMIT`.
    claimed_in_tx: bool,
}

/// A claim without an open transaction: committed under a lease that only
/// its owner may complete, renew or release.
pub struct Lease {
    store: Store,
    scope: String,
    claimed: Claimed,
    remembered: Remembered,
    purpose: Purpose,
}

/// Why a key is held. It decides what completing and releasing it write,
/// so that every caller goes through the same fenced steps.
#[derive(Debug, Clone)]
pub(super) enum Purpose {
    /// A request's claim on an `in_progress` row: released, the row goes.
    Claim,
    /// The reconciler's takeover of an abandoned claim: as a claim, and its
    /// completion is recorded in the key's history.
    Reconcile,
    /// An operator runs a stored key again: its completion replaces the
    /// answer; released, the key is left as it was before.
    Reprocess { actor: String },
}

/// What the replay cache needs of a key besides its answer, so that a
/// completion is remembered at once: the parallel duplicates queued behind
/// it are then answered from memory.
pub(super) struct Remembered {
    pub request_hash: String,
    pub received_at: NaiveDateTime,
    pub event_type: Option<String>,
}

impl Pending {
    /// A claim just written by `tx`.
    pub(super) fn new(tx: Transaction, lease: Lease) -> Pending {
        Pending {
            tx,
            lease,
            claimed_in_tx: true,
        }
    }

    /// Commits the claim alone, so that its lease is visible to every other
    /// attempt while work outside the database runs.
    pub async fn commit_claim(self) -> Result<Lease, EngineError> {
        self.tx.commit().await?;
        Ok(self.lease)
    }

    /// Rolls back this transaction's writes but keeps a committed claim.
    pub async fn into_lease(self) -> Lease {
        // Only this transaction's writes go; the lease was committed before.
        let _ = end(self.tx).await;
        self.lease
    }

    /// The claim's transaction: the operation's writes go through it.
    pub fn conn(&mut self) -> &mut DbConn {
        self.tx.conn()
    }

    pub fn claimed(&self) -> &Claimed {
        &self.lease.claimed
    }

    /// Stores `response` as the key's answer and commits, fenced by the lease:
    /// if the claim was taken over meanwhile, everything is rolled back and
    /// [`EngineError::LeaseLost`] returned.
    // The `complete` span, at debug: created only when exported.
    #[tracing::instrument(name = "complete", level = "debug", skip_all)]
    pub async fn complete(mut self, response: &StoredResponse) -> Result<(), EngineError> {
        if self.claimed_in_tx && matches!(self.lease.purpose, Purpose::Claim) {
            // PostgreSQL: one round trip for both where that is safe.
            let lease = &self.lease;
            let flown = self
                .tx
                .complete_claim_in_flight(
                    &lease.scope,
                    &lease.claimed.delivery_id,
                    &lease.claimed.lease_owner,
                    response,
                    lease.now(),
                    || lease.remember(response),
                )
                .await;
            match flown {
                Ok(done) => return Ok(done?),
                Err(tx) => self.tx = tx,
            }
        }
        let completed = self.lease.write_completion(self.tx.conn(), response).await;
        match completed {
            Ok(true) => {
                // Remembered before the connection goes back: a copy that
                // waited for it asks the cache again and must find this.
                let lease = &self.lease;
                self.tx.commit_then(|| lease.remember(response)).await?;
                Ok(())
            }
            // These already answer an error, whatever the rollback says.
            Ok(false) => {
                let _ = end(self.tx).await;
                Err(EngineError::LeaseLost)
            }
            Err(e) => {
                let _ = end(self.tx).await;
                Err(e.into())
            }
        }
    }

    /// Rolls back the claim and everything written through it: the key is
    /// free, and the next attempt runs the operation again.
    pub async fn release(self) {
        let _ = end(self.tx).await;
    }
}

impl Lease {
    pub(super) fn new(
        store: Store,
        scope: String,
        claimed: Claimed,
        remembered: Remembered,
        purpose: Purpose,
    ) -> Lease {
        Lease {
            store,
            scope,
            claimed,
            remembered,
            purpose,
        }
    }

    pub(super) fn with_purpose(mut self, purpose: Purpose) -> Lease {
        self.purpose = purpose;
        self
    }

    pub fn claimed(&self) -> &Claimed {
        &self.claimed
    }

    /// A new transaction under this lease, for the writes that complete it.
    pub async fn begin(self) -> Result<Pending, EngineError> {
        let tx = self.store.begin().await?;
        Ok(Pending {
            tx,
            lease: self,
            claimed_in_tx: false,
        })
    }

    /// The second phase of work outside the database: `operation`'s
    /// database writes and the completion in one transaction, fenced by this
    /// lease. A failure ends the lease (see [`Lease::fail`]); a final
    /// refusal is stored, and answered, like any answer.
    pub async fn finish(self, operation: &dyn Operation) -> Result<Outcome, EngineError> {
        let mut pending = self.begin().await?;
        let claimed = pending.claimed().clone();
        match operation.run(pending.conn(), &claimed).await {
            Ok(response) => {
                pending.complete(&response).await?;
                Ok(Outcome::Fresh(response))
            }
            Err(error) => pending.into_lease().await.fail(error).await,
        }
    }

    /// Puts a committed completion in the replay cache.
    fn remember(&self, response: &StoredResponse) {
        self.store.replay_cache().remember(
            &self.scope,
            &self.claimed.delivery_id,
            &self.remembered.request_hash,
            self.remembered.received_at,
            self.remembered.event_type.as_deref(),
            response,
        )
    }

    /// Now, by the store's clock.
    fn now(&self) -> NaiveDateTime {
        self.store.clock().naive_now()
    }

    /// Renews the lease every third of its length until the returned task is
    /// aborted, or until a renewal finds the claim taken over.
    pub fn keep_alive(&self, lease: Duration) -> tokio::task::JoinHandle<()> {
        let store = self.store.clone();
        let scope = self.scope.clone();
        let claimed = self.claimed.clone();
        let length = TimeDelta::from_std(lease).unwrap_or(TimeDelta::seconds(60));
        tokio::spawn(async move {
            let every = (lease / 3).max(Duration::from_millis(100));
            loop {
                tokio::time::sleep(every).await;
                let until = store.clock().naive_now() + length;
                let renewed = match store.conn().await {
                    Ok(mut conn) => {
                        conn.renew_lease(&scope, &claimed.delivery_id, &claimed.lease_owner, until)
                            .await
                    }
                    Err(e) => Err(e),
                };
                match renewed {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(delivery_id = %claimed.delivery_id, "lease lost while working");
                        return;
                    }
                    // A blip: the next renewal may succeed before the lease ends.
                    Err(error) => tracing::warn!(%error, "could not renew a lease"),
                }
            }
        })
    }

    /// Ends the claim after its work failed: a final refusal is stored as the
    /// key's answer; anything else releases the key for the next attempt and
    /// records why in the key's history.
    pub async fn fail(self, error: OperationError) -> Result<Outcome, EngineError> {
        let (failure, detail) = match error {
            OperationError::Rejected(response) => {
                self.begin().await?.complete(&response).await?;
                return Ok(Outcome::Fresh(response));
            }
            OperationError::Store(e) => {
                let detail = e.to_string();
                (EngineError::Store(e), detail)
            }
            OperationError::Failed(e) => {
                let detail = e.to_string();
                (EngineError::Operation(e), detail)
            }
        };
        if let Err(error) = self.release(Some(&detail)).await {
            tracing::warn!(%error, "could not release a failed claim; it will expire");
        }
        Err(failure)
    }

    /// Gives the key up, fenced by its owner: a claim is deleted, so the key
    /// is free again; a reprocessed key keeps its earlier answer. Either way
    /// the key's history says so.
    pub async fn release(self, reason: Option<&str>) -> Result<(), EngineError> {
        let mut tx = self.store.begin().await?;
        let conn = tx.conn();
        let (scope, id, owner) = (
            &self.scope,
            &self.claimed.delivery_id,
            &self.claimed.lease_owner,
        );
        match &self.purpose {
            Purpose::Claim | Purpose::Reconcile => {
                if conn.release_claim(scope, id, owner).await? {
                    conn.record_history(scope, id, "released", None, reason, self.now())
                        .await?;
                }
            }
            Purpose::Reprocess { actor } => {
                let now = self.now();
                if conn.end_reprocess(scope, id, owner, now).await? {
                    conn.record_history(scope, id, "reprocess-failed", Some(actor), reason, now)
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Writes `response` as the key's answer, fenced by the lease, with what
    /// the key's history must say of it; false when the lease was lost.
    async fn write_completion(
        &self,
        conn: &mut DbConn,
        response: &StoredResponse,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        let (scope, id, owner) = (
            &self.scope,
            &self.claimed.delivery_id,
            &self.claimed.lease_owner,
        );
        let (completed, note) = match &self.purpose {
            Purpose::Claim => (
                conn.complete_delivery(scope, id, owner, response, now)
                    .await?,
                None,
            ),
            Purpose::Reconcile => (
                conn.complete_delivery(scope, id, owner, response, now)
                    .await?,
                Some(("reconciled", "reconciler")),
            ),
            Purpose::Reprocess { actor } => (
                conn.replace_response(scope, id, owner, response, now)
                    .await?,
                Some(("reprocessed", actor.as_str())),
            ),
        };
        if let (true, Some((kind, actor))) = (completed, note) {
            let detail = format!("answered {}", response.status);
            conn.record_history(scope, id, kind, Some(actor), Some(&detail), now)
                .await?;
        }
        Ok(completed)
    }
}

/// Ends a transaction that must not commit. A failed rollback leaves the
/// connection with an open transaction, which the pool then discards, so the
/// database rolls back when the connection closes.
///
/// On SQLite with group commit the rollback also waits for the shared
/// transaction, and fails if that did not commit: an answer built on what
/// this transaction read (an earlier member's completed row) must then not
/// be given. Callers that only discard writes may ignore the error.
pub(super) async fn end(tx: Transaction) -> Result<(), StoreError> {
    let ended = tx.rollback().await;
    if let Err(error) = &ended {
        tracing::warn!(%error, "rollback failed; the connection is discarded");
    }
    ended
}
