use crate::store::{Claimed, DbConn, Flight, PlannedWrite, StoreError, StoredResponse};
use futures_util::future::LocalBoxFuture;
use std::time::Duration;

/// What [`Operation::run_in_flight`]'s statements gave, for
/// [`Operation::finish_flight`]: whatever the operation keeps of them.
pub type Landed = Box<dyn std::any::Any>;

/// The logical operation behind a key. It runs inside the claim's transaction,
/// so whatever it writes through `conn` commits together with the key's
/// completion, or not at all.
#[async_trait::async_trait(?Send)]
pub trait Operation {
    async fn run(
        &self,
        conn: &mut DbConn,
        claim: &Claimed,
    ) -> Result<StoredResponse, OperationError>;

    /// Whether part of the work leaves the database (an HTTP call to another
    /// system). Such work cannot roll back, so it runs under a committed,
    /// renewed lease before [`Operation::run`] (see `Engine::process`).
    fn has_external_effects(&self) -> bool {
        false
    }

    /// The work outside the database, done before [`Operation::run`] with the
    /// claim committed. It must use the key as the downstream's idempotency
    /// key, so that doing it again after a crash is harmless.
    async fn run_external(&self, _claim: &Claimed) -> Result<(), OperationError> {
        Ok(())
    }

    /// [`Operation::run`]'s statements, sent to PostgreSQL in the claim's
    /// own flight (`BEGIN`, the claim, then these), so that a fresh key
    /// costs one round trip less; [`Operation::finish_flight`] then turns
    /// what they gave into the response. `None` (the default): `run` runs
    /// once the claim is known, as always.
    ///
    /// The statements run before anyone knows whether the claim won: where
    /// it lost (a duplicate), the transaction is rolled back, so their
    /// writes never stay, and the operation is not run. They must only
    /// write to the database, and must not depend on the claim's answer.
    fn run_in_flight<'f>(
        &'f self,
        _flight: Flight<'f>,
    ) -> Option<LocalBoxFuture<'f, Result<Landed, OperationError>>> {
        None
    }

    /// The whole operation as data, decided before the claim: the answer
    /// to store and the rows to write with it (see `Handler::plan`), for
    /// `claim`. `ledger_id` is an id drawn for a ledger row, taken by a plan
    /// that writes one. Where an operation plans, a fresh key on PostgreSQL
    /// costs one statement (see `store::one_statement`): the claim, the
    /// writes and the completion, in a transaction of its own. A refusal
    /// (`Err(OperationError::Rejected)`) is stored alone the same way.
    /// `None` (the default), or any other error: the operation runs after
    /// the claim, as always.
    fn plan(
        &self,
        _claim: &Claimed,
        _ledger_id: &mut Option<i64>,
    ) -> Option<Result<Planned<'_>, OperationError>> {
        None
    }

    /// The response, from what [`Operation::run_in_flight`]'s statements
    /// gave, once the claim is known to be this request's.
    fn finish_flight(
        &self,
        _landed: Landed,
        _claim: &Claimed,
    ) -> Result<StoredResponse, OperationError> {
        Err(OperationError::Failed(
            "finish_flight without run_in_flight".into(),
        ))
    }
}

/// An operation decided before its claim: see [`Operation::plan`].
#[derive(Debug)]
pub struct Planned<'a> {
    pub response: StoredResponse,
    pub writes: Vec<PlannedWrite<'a>>,
}

/// How an [`Operation`] can end other than with a response to store.
#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    /// A final answer that is not a success (for example a 422 for a payload
    /// that will never be valid). Its effects are rolled back, but the response
    /// is stored, so every repeat gets the same answer.
    #[error("the operation rejected the request with status {}", .0.status)]
    Rejected(StoredResponse),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A failure worth retrying: everything is rolled back and the key is
    /// released, so the next attempt runs the operation again.
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// What a request for a key gets. One enum for both steps, because the
/// answers that run nothing are the same: [`super::Engine::claim`] gives a
/// [`Claim`] (`Fresh` carries the claim to run under), and
/// [`super::Engine::process`] an `Outcome` (`Fresh` carries the answer the
/// run produced, now stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T = StoredResponse> {
    /// The key is this request's: it runs (ran) the operation.
    Fresh(T),
    /// The key was already completed: the stored response, unchanged.
    Replayed(StoredResponse),
    /// Another request holds the key and did not finish within the bounded
    /// wait. Nothing was run; the caller should retry after the given delay.
    InProgress { retry_after: Duration },
    /// The key was used before with a different payload. Nothing was run.
    Mismatch,
}

impl<T> Outcome<T> {
    /// The fresh claim or answer, or else the answer that ran nothing,
    /// retyped for whatever the caller returns.
    pub fn fresh<U>(self) -> Result<T, Outcome<U>> {
        match self {
            Outcome::Fresh(fresh) => Ok(fresh),
            Outcome::Replayed(stored) => Err(Outcome::Replayed(stored)),
            Outcome::InProgress { retry_after } => Err(Outcome::InProgress { retry_after }),
            Outcome::Mismatch => Err(Outcome::Mismatch),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the operation failed: {0}")]
    Operation(Box<dyn std::error::Error + Send + Sync>),
    /// The claim's lease expired and another attempt took the key over before
    /// this one could complete; this attempt's effects were rolled back.
    #[error("the claim's lease was taken over before it could complete")]
    LeaseLost,
    #[error("the stored key is inconsistent: {0}")]
    Corrupt(&'static str),
}
