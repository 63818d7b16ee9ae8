//! A fresh key claimed with its answer, for an operation that plans.
//!
//! [`Operation::plan`] gives the answer and the rows before anything is
//! claimed. On PostgreSQL `DbConn::claim_completed` then claims the key
//! with its row completed and writes the rows, in one statement that is its
//! own transaction. On SQLite, where a statement costs no round trip but
//! the writer thread's CPU, `DbConn::claim_completed_in_transaction` does
//! the same as statements in the delivery's savepoint of a commit group:
//! no completion follows the claim on either. A claim that loses writes
//! nothing, and the delivery goes
//! the ordinary way (`Engine::claim_and_run`), which reads what the row
//! means: a replay, a key in progress, another payload, an expired key.
//!
//! With group commit (PostgreSQL's default, `postgres_group_commit`), the
//! statement carries every fresh delivery waiting on this worker, not one
//! (see `store::claim_batcher`): the same claim, writes and completion per
//! member, one transaction and one WAL flush for all of them.

use super::{
    ClaimRequest, Engine, EngineError, Operation, OperationError, Outcome, Planned, claim,
};
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

/// `operation`'s plan for `request`'s key, taking `ledger_id` if it books:
/// its answer and rows, or a refusal to store alone; `None` where it does
/// not plan, or fails (the ordinary path reports that, after its claim).
fn plan_of<'o>(
    request: &ClaimRequest,
    operation: &'o dyn Operation,
    ledger_id: &mut Option<i64>,
) -> Option<Planned<'o>> {
    let claimed = Claimed {
        delivery_id: request.key.clone(),
        lease_owner: String::new(),
        attempt: 1,
        taken_over: false,
    };
    match operation.plan(&claimed, ledger_id) {
        Some(Ok(planned)) => Some(planned),
        // A refusal is stored alone, with no writes.
        Some(Err(OperationError::Rejected(response))) => Some(Planned {
            response,
            writes: Vec::new(),
        }),
        Some(Err(_)) | None => None,
    }
}

/// `request`'s claim row inserted already completed, at `now`: no lease,
/// since no completion follows it.
fn completed_claim(request: &ClaimRequest, now: chrono::NaiveDateTime) -> NewClaim<'_> {
    NewClaim {
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
    }
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
        let Some(Planned { response, writes }) = plan_of(request, operation, &mut ledger_id) else {
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
                let row = completed_claim(request, now);
                conn.claim_completed(&row, &response, now, &writes)
                    .instrument(claiming.clone())
                    .await
            }
        };
        match &claimed {
            Ok(won) => traces::set_attributes(&claiming, || {
                vec![
                    KeyValue::new("webhook.claim", if *won { "fresh" } else { "conflict" }),
                    KeyValue::new("webhook.planned", true),
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
                self.remember_planned(request, now, &response);
                Ok(OneStatement::Answered(Outcome::Fresh(response)))
            }
            Ok(false) => Ok(OneStatement::ClaimLost),
            // Another attempt's transaction held the key for all of
            // `lock_timeout` (the bounded wait): busy, as in `try_claim`.
            Err(StoreError::LockTimeout) => Ok(OneStatement::Answered(busy())),
            Err(e) => Err(e.into()),
        }
    }

    /// A planned claim that won, put in the replay cache once durable.
    fn remember_planned(
        &self,
        request: &ClaimRequest,
        received_at: chrono::NaiveDateTime,
        response: &crate::store::StoredResponse,
    ) {
        self.store().replay_cache().remember(
            &request.scope,
            &request.key,
            &request.fingerprint,
            received_at,
            request.event_type.as_deref(),
            response,
        );
    }

    /// SQLite's way for an operation that plans: in the delivery's savepoint
    /// of a commit group, the claim inserted already completed and the
    /// planned rows after it (`DbConn::claim_completed_in_transaction`), with
    /// no completion to follow. The answer is given, and put in the replay
    /// cache, once the group's `COMMIT` made it durable, as on the ordinary
    /// path.
    pub(super) async fn claim_planned_at_gate(
        &self,
        request: &ClaimRequest,
        operation: &dyn Operation,
    ) -> Result<OneStatement, EngineError> {
        // A plan that books names its row's id in its answer: it is given
        // a spare id, reserved ahead (`Store::take_ledger_id`), and gives it
        // back where the plan or the claim does not use it. With no spare
        // left, a stand-in tells whether the plan books at all: an
        // operation that does not plan, or does not book, reserves nothing;
        // one that books is planned again with a reserved id, once in a
        // hundred, untraced (`replan_untraced`).
        let spare = self.store().spare_ledger_id();
        let mut ledger_id = Some(spare.unwrap_or(0));
        let planned = plan_of(request, operation, &mut ledger_id);
        let booked = ledger_id.is_none();
        let (planned, drawn) = match (planned, spare) {
            (None, _) => (None, spare),
            (Some(planned), Some(id)) => (Some(planned), Some(id)),
            (Some(planned), None) if !booked => (Some(planned), None),
            (Some(_), None) => match self.store().take_ledger_id().await {
                Ok(id) => (replan_untraced(request, operation, id), Some(id)),
                Err(StoreError::LockTimeout) => return Ok(OneStatement::Answered(busy())),
                Err(e) => return Err(e.into()),
            },
        };
        let give_back = |carried: bool| {
            if let (Some(id), false) = (drawn, carried) {
                self.store().return_ledger_id(id);
            }
        };
        let Some(Planned { response, writes }) = planned else {
            give_back(false);
            return Ok(OneStatement::NotPlanned);
        };
        let carried = drawn.is_some_and(|id| writes.iter().any(|w| w.ledger_id() == Some(id)));
        let mut tx = match self.store().begin().await {
            Ok(tx) => tx,
            Err(e) => {
                give_back(false);
                return match e {
                    StoreError::LockTimeout => Ok(OneStatement::Answered(busy())),
                    e => Err(e.into()),
                };
            }
        };
        // The gate may have queued this delivery behind a duplicate whose
        // answer is known by now (as in `claim_at_gate`).
        if let Some(answer) = self.answer_from_cache(request) {
            give_back(false);
            // A cached answer was durable before it was cached.
            let _ = claim::end(tx).await;
            return Ok(OneStatement::Answered(answer));
        }
        let now = self.now();
        let row = completed_claim(request, now);
        let claiming = tracing::debug_span!("claim");
        let claimed = tx
            .conn()
            .claim_completed_in_transaction(&row, &response, now, &writes)
            .instrument(claiming.clone())
            .await;
        match &claimed {
            Ok(won) => traces::set_attributes(&claiming, || {
                vec![
                    KeyValue::new("webhook.claim", if *won { "fresh" } else { "conflict" }),
                    KeyValue::new("webhook.planned", true),
                ]
            }),
            Err(error) => traces::set_error(&claiming, &error.to_string()),
        }
        drop(claiming);
        match claimed {
            Ok(true) => {
                give_back(carried);
                tx.commit_then(|| self.remember_planned(request, now, &response))
                    .await?;
                Ok(OneStatement::Answered(Outcome::Fresh(response)))
            }
            // Nothing was written: the ordinary path reads what the row means.
            Ok(false) => {
                give_back(false);
                claim::end(tx).await?;
                Ok(OneStatement::ClaimLost)
            }
            // A row failed after the claim: both go with the savepoint. The
            // id is skipped, as a failed transaction skips a sequence's.
            Err(e) => {
                let _ = claim::end(tx).await;
                match e {
                    StoreError::LockTimeout => Ok(OneStatement::Answered(busy())),
                    e => Err(e.into()),
                }
            }
        }
    }
}

/// `operation` planned again with the reserved `ledger_id`, after a plan
/// with a stand-in id found that it books. A plan decides from the event
/// and the id alone, so the first one's spans and lines already tell what
/// the handlers decided: this one runs with no subscriber, so that each
/// handler shows once in the delivery's trace and log, not twice.
fn replan_untraced<'o>(
    request: &ClaimRequest,
    operation: &'o dyn Operation,
    ledger_id: i64,
) -> Option<Planned<'o>> {
    tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
        plan_of(request, operation, &mut Some(ledger_id))
    })
}

/// Busy at this instant: another writer held the key (or SQLite's write
/// lock) for the whole bounded wait.
fn busy() -> Outcome {
    Outcome::InProgress {
        retry_after: std::time::Duration::from_secs(1),
    }
}
