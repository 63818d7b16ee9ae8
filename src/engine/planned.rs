//! A fresh key in one statement, for an operation that plans (PostgreSQL).
//!
//! [`Operation::plan`] gives the answer and the rows before anything is
//! claimed; `DbConn::claim_completed` then claims the key with its row
//! completed and writes the rows, in one statement that is its own
//! transaction. A claim that loses writes nothing, and the delivery goes
//! the ordinary way (`Engine::claim_and_run`), which reads what the row
//! means: a replay, a key in progress, another payload, an expired key.
//!
//! With group commit (PostgreSQL's default, `postgres_group_commit`), the
//! statement carries every fresh delivery waiting on this worker, not one
//! (see `store::claim_batcher`): the same claim, writes and completion per
//! member, one transaction and one WAL flush for all of them.

use super::{ClaimRequest, Engine, EngineError, Operation, OperationError, Outcome, Planned};
use crate::store::{BatchMember, Batched, COMPLETED, Claimed, NewClaim, PlannedWrite, StoreError};
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
        // `process_one`); a delivery that sends its own statement asks
        // again once its connection is checked out, below. A plan that
        // books takes a ledger id, so one is taken first: a spare drawn
        // ahead (a hundred at a time), or, when none is left, a draw on a
        // connection checked out here, which the statement then uses. An
        // operation that does not plan gives it back.
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
        let now = self.now();
        // The statement is the claim and the completion at once: one
        // `claim` span, at debug like the ordinary path's.
        let claiming = tracing::debug_span!("claim");
        // With group commit (PostgreSQL's default), the claim goes in a
        // batch with the other fresh deliveries on this thread; one that
        // failed as a whole sends each member's own statement, below.
        let mut batch_maybe_committed = false;
        let mut batched = None;
        if self.store().batches_claims() {
            // A connection checked out for the draw goes back first: the
            // batch takes its own.
            drop(conn.take());
            let member = BatchMember {
                endpoint: request.scope.clone(),
                delivery_id: request.key.clone(),
                request_hash: request.fingerprint.clone(),
                event_type: request.event_type.clone(),
                received_at: now,
                completed_at: now,
                body_key: request.body_key.clone(),
                request_body: request.payload.clone(),
                response: response.clone(),
                writes: writes.iter().map(PlannedWrite::to_owned_write).collect(),
            };
            match self
                .store()
                .claim_completed_batched(member)
                .instrument(claiming.clone())
                .await
            {
                Batched::Won => batched = Some(true),
                Batched::Lost => batched = Some(false),
                Batched::Alone { maybe_committed } => batch_maybe_committed = maybe_committed,
            }
        }
        // A batch that may have committed may hold the drawn id: it stays
        // out of the spares whatever happens below.
        let batch_holds_id = carried && batch_maybe_committed;
        let claimed = match batched {
            Some(won) => Ok(won),
            None => {
                let mut conn = match conn {
                    Some(conn) => conn,
                    None => match self.store().conn().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            if !batch_holds_id {
                                self.store().return_ledger_id(drawn);
                            }
                            return Err(e.into());
                        }
                    },
                };
                // The checkout may have waited behind a storm's copies (as
                // in `try_claim`): their first may have answered by now.
                if let Some(answer) = self.answer_from_cache(request) {
                    if !batch_holds_id {
                        self.store().return_ledger_id(drawn);
                    }
                    return Ok(OneStatement::Answered(answer));
                }
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
                conn.claim_completed(&row, &response, now, &writes)
                    .instrument(claiming.clone())
                    .await
            }
        };
        match &claimed {
            Ok(won) => traces::set_attributes(&claiming, || {
                vec![
                    KeyValue::new("webhook.claim", if *won { "fresh" } else { "conflict" }),
                    KeyValue::new("webhook.one_statement", true),
                    KeyValue::new("webhook.batched", batched.is_some()),
                ]
            }),
            Err(error) => traces::set_error(&claiming, &error.to_string()),
        }
        drop(claiming);
        // The drawn id goes back unless a row may hold it: one this
        // statement wrote, or may have written where its answer was lost
        // (a timeout is not a "no").
        let maybe_written = batch_holds_id
            || (carried && !matches!(claimed, Ok(false) | Err(StoreError::LockTimeout)));
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
