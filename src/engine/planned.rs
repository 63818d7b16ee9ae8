//! A fresh key in one statement, for an operation that plans (PostgreSQL).
//!
//! [`Operation::plan`] gives the answer and the rows before anything is
//! claimed; `DbConn::claim_completed` then claims the key with its row
//! completed and writes the rows, in one statement that is its own
//! transaction. A claim that loses writes nothing, and the delivery goes
//! the ordinary way (`Engine::claim_and_run`), which reads what the row
//! means: a replay, a key in progress, another payload, an expired key.

use super::{ClaimRequest, Engine, EngineError, Operation, OperationError, Outcome, Planned};
use crate::store::{COMPLETED, Claimed, NewClaim, StoreError};
use crate::telemetry::traces::{self, KeyValue};
use tracing::Instrument;

/// How far [`Engine::claim_planned`] got.
pub(super) enum OneStatement {
    /// The claim won (or the replay cache answered): the delivery's answer.
    Answered(Outcome),
    /// The operation does not plan: nothing was sent.
    NotPlanned,
    /// The key's row (or its body key's) exists: nothing was written.
    ClaimLost,
}

impl Engine {
    /// `request`'s key claimed, `operation`'s writes made and its answer
    /// stored in one statement, where the operation plans.
    pub(super) async fn claim_planned(
        &self,
        request: &ClaimRequest,
        operation: &dyn Operation,
    ) -> Result<OneStatement, EngineError> {
        // The caller asked the replay cache just before (`webhooks`'
        // `process_one`); it is asked again once a connection is checked
        // out, below. A plan that books takes a ledger id, so one is taken
        // first: a spare drawn ahead (a hundred at a time), or, when none is
        // left, a draw on a connection checked out here, which the
        // statement then uses. An operation that does not plan gives it
        // back.
        let mut conn = None;
        let drawn = match self.store().spare_ledger_id() {
            Some(id) => id,
            None => {
                let mut fresh = self.store().conn().await?;
                let id = self.store().draw_ledger_id(&mut fresh).await?;
                conn = Some(fresh);
                id
            }
        };
        let mut ledger_id = Some(drawn);
        let claimed = Claimed {
            delivery_id: request.key.clone(),
            lease_owner: String::new(),
            attempt: 1,
            taken_over: false,
        };
        let planned = match operation.plan(&claimed, &mut ledger_id) {
            Some(Ok(planned)) => Some(planned),
            // A refusal is stored alone, with no writes.
            Some(Err(OperationError::Rejected(response))) => Some(Planned {
                response,
                writes: Vec::new(),
            }),
            // A failure is the ordinary path's to report, after its claim.
            Some(Err(_)) | None => None,
        };
        let Some(Planned { response, writes }) = planned else {
            self.store().return_ledger_id(drawn);
            return Ok(OneStatement::NotPlanned);
        };
        // Whether a row of this statement carries the drawn id.
        let carried = writes.iter().any(|w| w.ledger_id() == Some(drawn));
        let mut conn = match conn {
            Some(conn) => conn,
            None => match self.store().conn().await {
                Ok(conn) => conn,
                Err(e) => {
                    self.store().return_ledger_id(drawn);
                    return Err(e.into());
                }
            },
        };
        // The checkout may have waited behind a storm's copies (as in
        // `try_claim`): their first may have answered by now.
        if let Some(answer) = self.answer_from_cache(request) {
            self.store().return_ledger_id(drawn);
            return Ok(OneStatement::Answered(answer));
        }
        let now = self.now();
        let row = NewClaim {
            endpoint: &request.scope,
            delivery_id: &request.key,
            request_hash: &request.fingerprint,
            status: COMPLETED,
            event_type: request.event_type.as_deref(),
            attempts: 1,
            lease_owner: None,
            lease_expires_at: None,
            received_at: now,
            body_key: request.body_key.as_deref(),
            request_body: request.payload.as_deref(),
        };
        // The statement is the claim and the completion at once: one
        // `claim` span, at debug like the ordinary path's.
        let claiming = tracing::debug_span!("claim");
        let claimed = conn
            .claim_completed(&row, &response, now, &writes)
            .instrument(claiming.clone())
            .await;
        match &claimed {
            Ok(won) => traces::set_attributes(&claiming, || {
                vec![
                    KeyValue::new("webhook.claim", if *won { "fresh" } else { "conflict" }),
                    KeyValue::new("webhook.one_statement", true),
                ]
            }),
            Err(error) => traces::set_error(&claiming, &error.to_string()),
        }
        drop(claiming);
        // The drawn id goes back unless a row may hold it: one this
        // statement wrote, or may have written where its answer was lost
        // (a timeout is not a "no").
        let maybe_written = carried && !matches!(claimed, Ok(false) | Err(StoreError::LockTimeout));
        if !maybe_written {
            self.store().return_ledger_id(drawn);
        }
        match claimed {
            Ok(true) => {
                self.store().replay_cache().remember(
                    &request.scope,
                    &request.key,
                    &request.fingerprint,
                    now,
                    request.event_type.as_deref(),
                    &response,
                );
                Ok(OneStatement::Answered(Outcome::Fresh(response)))
            }
            Ok(false) => Ok(OneStatement::ClaimLost),
            // Another attempt's transaction held the key for all of
            // `lock_timeout` (the bounded wait): busy, as in `try_claim`.
            Err(StoreError::LockTimeout) => Ok(OneStatement::Answered(Outcome::InProgress {
                retry_after: std::time::Duration::from_secs(1),
            })),
            Err(e) => Err(e.into()),
        }
    }
}
