use super::EngineError;
use crate::store::{Claimed, DbConn, StoredResponse, Transaction};
use chrono::Utc;
use std::time::Duration;

/// What a request for a key gets from [`super::Engine::claim`].
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
    scope: String,
    claimed: Claimed,
}

impl Pending {
    pub(super) fn new(tx: Transaction, scope: String, claimed: Claimed) -> Pending {
        Pending { tx, scope, claimed }
    }

    /// The claim's transaction: the operation's writes go through it.
    pub fn conn(&mut self) -> &mut DbConn {
        self.tx.conn()
    }

    pub fn claimed(&self) -> &Claimed {
        &self.claimed
    }

    /// Stores `response` as the key's answer and commits, fenced by the lease:
    /// if the claim was taken over meanwhile, everything is rolled back and
    /// [`EngineError::LeaseLost`] returned.
    pub async fn complete(mut self, response: &StoredResponse) -> Result<(), EngineError> {
        let completed = self
            .tx
            .conn()
            .complete_delivery(
                &self.scope,
                &self.claimed.delivery_id,
                &self.claimed.lease_owner,
                response,
                Utc::now().naive_utc(),
            )
            .await;
        match completed {
            Ok(true) => Ok(self.tx.commit().await?),
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

/// Ends a transaction that must not commit. A failed rollback leaves the
/// connection with an open transaction, which the pool then discards, so the
/// database rolls back when the connection closes.
pub(super) async fn end(tx: Transaction) {
    if let Err(error) = tx.rollback().await {
        tracing::warn!(%error, "rollback failed; the connection is discarded");
    }
}
