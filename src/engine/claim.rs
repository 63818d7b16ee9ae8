use super::{EngineError, OperationError};
use crate::store::{Claimed, DbConn, Store, StoredResponse, Transaction};
use chrono::{NaiveDateTime, TimeDelta};
use std::time::Duration;

/// What a request for a key gets from [`super::Engine::claim`].
// `Fresh` is the large variant and the common one for new work: boxing it
// would allocate once per claim to save moving a few hundred bytes.
#[allow(clippy::large_enum_variant)]
pub enum Claim {
    /// The key is this request's to run: write through [`Pending::conn`],
    /// then [`Pending::complete`] or [`Pending::release`].
    Fresh(Pending),
    /// The key was completed: the stored response, unchanged.
    Replay(StoredResponse),
    /// Another attempt holds the key beyond the bounded wait.
    InProgress { retry_after: Duration },
    /// The key was used with a different payload.
    Mismatch,
}

/// A claimed key with its transaction open. The claim row, the caller's
/// writes and the completion commit together in [`Pending::complete`]; a
/// `Pending` dropped without either call takes its connection out of the
/// pool, so the database rolls everything back and the key is free again.
pub struct Pending {
    tx: Transaction,
    lease: Lease,
}

/// A claim without an open transaction: committed `in_progress` under a
/// lease that only its owner may complete, renew or release.
pub struct Lease {
    store: Store,
    scope: String,
    claimed: Claimed,
    remembered: Remembered,
}

/// What the replay cache needs of a key besides its answer, so that a
/// completion is remembered at once: the parallel duplicates queued behind
/// it are then answered from memory.
pub(super) struct Remembered {
    pub request_hash: String,
    pub received_at: NaiveDateTime,
}

impl Pending {
    pub(super) fn new(
        tx: Transaction,
        store: Store,
        scope: String,
        claimed: Claimed,
        remembered: Remembered,
    ) -> Pending {
        Pending {
            tx,
            lease: Lease {
                store,
                scope,
                claimed,
                remembered,
            },
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
        end(self.tx).await;
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
    pub async fn complete(mut self, response: &StoredResponse) -> Result<(), EngineError> {
        let completed = self
            .tx
            .conn()
            .complete_delivery(
                &self.lease.scope,
                &self.lease.claimed.delivery_id,
                &self.lease.claimed.lease_owner,
                response,
                self.lease.store.clock().naive_now(),
            )
            .await;
        match completed {
            Ok(true) => {
                self.tx.commit().await?;
                let lease = &self.lease;
                lease.store.replay_cache().remember(
                    &lease.scope,
                    &lease.claimed.delivery_id,
                    &lease.remembered.request_hash,
                    lease.remembered.received_at,
                    response,
                );
                Ok(())
            }
            Ok(false) => {
                end(self.tx).await;
                Err(EngineError::LeaseLost)
            }
            Err(e) => {
                end(self.tx).await;
                Err(e.into())
            }
        }
    }

    /// Rolls back the claim and everything written through it: the key is
    /// free, and the next attempt runs the operation again.
    pub async fn release(self) {
        end(self.tx).await;
    }
}

impl Lease {
    pub fn claimed(&self) -> &Claimed {
        &self.claimed
    }

    /// A new transaction under this lease, for the writes that complete it.
    pub async fn begin(self) -> Result<Pending, EngineError> {
        let tx = self.store.begin().await?;
        Ok(Pending { tx, lease: self })
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
    pub async fn fail(self, error: OperationError) -> EngineError {
        let (failure, detail) = match error {
            OperationError::Rejected(response) => {
                let result = match self.begin().await {
                    Ok(pending) => pending.complete(&response).await,
                    Err(e) => Err(e),
                };
                return match result {
                    Ok(()) => EngineError::Rejected(response),
                    Err(e) => e,
                };
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
        failure
    }

    /// Deletes the claim (fenced by its owner), so the key is free again.
    pub async fn release(self, reason: Option<&str>) -> Result<(), EngineError> {
        let mut tx = self.store.begin().await?;
        let conn = tx.conn();
        let released = conn
            .release_claim(
                &self.scope,
                &self.claimed.delivery_id,
                &self.claimed.lease_owner,
            )
            .await?;
        if released {
            conn.record_history(
                &self.scope,
                &self.claimed.delivery_id,
                "released",
                None,
                reason,
                self.store.clock().naive_now(),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Ends a transaction that must not commit. A failed rollback leaves the
/// connection with an open transaction, which the pool then discards, so the
/// database rolls back when the connection closes.
pub(super) async fn end(tx: Transaction) {
    if let Err(error) = tx.rollback().await {
        tracing::warn!(%error, "rollback failed; the connection is discarded");
    }
}
