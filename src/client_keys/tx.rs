//! How a handler behind [`super::Idempotency`] reaches the claim's transaction.

use crate::engine::{EngineError, Pending};
use crate::store::{DbConn, StoreError, Transaction};
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use std::future::{Ready, ready};
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMappedMutexGuard, OwnedMutexGuard};

/// The unit of work a request runs in: a claimed key, or (on a route whose
/// key is optional, when none was sent) a plain transaction.
pub(super) enum Unit {
    Keyed(Pending),
    Plain(Transaction),
}

impl Unit {
    fn conn(&mut self) -> &mut DbConn {
        match self {
            Unit::Keyed(pending) => pending.conn(),
            Unit::Plain(tx) => tx.conn(),
        }
    }

    pub(super) async fn release(self) {
        match self {
            Unit::Keyed(pending) => pending.release().await,
            Unit::Plain(tx) => {
                if let Err(error) = tx.rollback().await {
                    tracing::warn!(%error, "rollback failed; the connection is discarded");
                }
            }
        }
    }

    pub(super) async fn finish(
        self,
        response: &crate::store::StoredResponse,
    ) -> Result<(), EngineError> {
        match self {
            Unit::Keyed(pending) => pending.complete(response).await,
            Unit::Plain(tx) => tx.commit().await.map_err(EngineError::from),
        }
    }
}

/// What the middleware leaves in the request for the handler.
#[derive(Clone)]
pub(super) struct Slot {
    pub(super) unit: Arc<Mutex<Option<Unit>>>,
    pub(super) key: Option<String>,
    pub(super) tenant: Option<String>,
}

/// The extractor: the transaction that the key's completion will commit.
///
/// Everything a handler writes through [`IdempotentTx::conn`] commits
/// together with the stored response, or not at all (a 5xx answer or a
/// crash rolls it back and frees the key).
pub struct IdempotentTx(Slot);

/// A locked view of the transaction's connection; derefs to [`DbConn`].
pub struct TxGuard(OwnedMappedMutexGuard<Option<Unit>, DbConn>);

impl std::ops::Deref for TxGuard {
    type Target = DbConn;
    fn deref(&self) -> &DbConn {
        &self.0
    }
}

impl std::ops::DerefMut for TxGuard {
    fn deref_mut(&mut self) -> &mut DbConn {
        &mut self.0
    }
}

impl IdempotentTx {
    /// The connection inside the claim's transaction.
    pub async fn conn(&self) -> Result<TxGuard, StoreError> {
        let guard: OwnedMutexGuard<Option<Unit>> = self.0.unit.clone().lock_owned().await;
        OwnedMutexGuard::try_map(guard, |unit| unit.as_mut().map(Unit::conn))
            .map(TxGuard)
            .map_err(|_| {
                StoreError::Unavailable("the request's transaction has already ended".into())
            })
    }

    /// The request's `Idempotency-Key`, if it sent one.
    pub fn key(&self) -> Option<&str> {
        self.0.key.as_deref()
    }

    /// The tenant the key is scoped to, if tenants are configured.
    pub fn tenant(&self) -> Option<&str> {
        self.0.tenant.as_deref()
    }
}

impl FromRequest for IdempotentTx {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Slot>()
                .cloned()
                .map(IdempotentTx)
                .ok_or_else(|| {
                    actix_web::error::ErrorInternalServerError(
                        "IdempotentTx is only available behind the Idempotency middleware",
                    )
                }),
        )
    }
}
