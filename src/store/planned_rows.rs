//! A fresh delivery whose operation plans, as statements in the caller's
//! transaction: the claim inserted already completed, then each planned row.
//!
//! On PostgreSQL the same delivery is one statement (`one_statement`), for
//! the round trips it saves. SQLite has no round trips, but each statement
//! still costs its writer thread: binding, stepping, and for the ordinary
//! path's completion an `UPDATE` that finds the claim's row again and
//! rewrites it whole, request body included. Here the claim's row is
//! written once, with its answer, and the completion is gone. The caller's
//! transaction (a SQLite commit group's savepoint) keeps the claim and the
//! rows together: a claim that loses writes nothing; a row that fails is
//! rolled back with the claim by the caller.
//!
//! The rows' statements are the handlers' own: `record`'s upsert lives here
//! and `record` writes through it too, so the planned row and the run one
//! cannot drift apart.

use super::deliveries::{NewClaim, StoredResponse, claim_completed_insert};
use super::schema::{events, ledger_entries};
use super::{BoundTimestamp, DbConn, FixedText, PlannedLedgerEntry, PlannedWrite, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::ExpressionMethods;
use diesel::pg::Pg;
use diesel::query_builder::QueryFragment;
use diesel::sqlite::Sqlite;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;

crate::fixed_statement!(pub EventUpsert);

/// `record`'s row of a delivery. A key runs again once its retention has
/// passed (purged or not), and `events` is never purged: the row of that
/// earlier run is still there. The new run's payload replaces it — it is
/// what was processed last — instead of failing every retry on the primary
/// key.
pub fn event_upsert<'a>(
    endpoint: &'a str,
    delivery_id: &'a str,
    event_type: Option<&'a str>,
    payload: &'a str,
    recorded_at: NaiveDateTime,
) -> FixedText<EventUpsert, impl QueryFragment<Pg> + QueryFragment<Sqlite> + Send + 'a> {
    let row = (
        events::endpoint.eq(endpoint),
        events::delivery_id.eq(delivery_id),
        events::event_type.eq(event_type),
        events::payload.eq(payload),
        events::recorded_at.eq(BoundTimestamp(recorded_at)),
    );
    let query = diesel::insert_into(events::table)
        .values(row)
        .on_conflict((events::endpoint, events::delivery_id))
        .do_update()
        .set((
            events::event_type.eq(excluded(events::event_type)),
            events::payload.eq(excluded(events::payload)),
            events::recorded_at.eq(excluded(events::recorded_at)),
        ));
    FixedText::new(query)
}

crate::fixed_statement!(pub LedgerRowInsert);

/// A planned ledger row, with the id its plan drew (and named in its
/// answer) instead of the column's default.
fn ledger_row_insert<'a>(
    endpoint: &'a str,
    delivery_id: &'a str,
    entry: &'a PlannedLedgerEntry<'_>,
) -> FixedText<LedgerRowInsert, impl QueryFragment<Pg> + QueryFragment<Sqlite> + Send + 'a> {
    FixedText::new(diesel::insert_into(ledger_entries::table).values((
        ledger_entries::id.eq(entry.id),
        ledger_entries::endpoint.eq(endpoint),
        ledger_entries::delivery_id.eq(delivery_id),
        ledger_entries::kind.eq(entry.kind),
        ledger_entries::payment_id.eq(&*entry.payment_id),
        ledger_entries::order_id.eq(entry.order_id.as_deref()),
        ledger_entries::amount.eq(entry.amount),
        ledger_entries::currency.eq(&*entry.currency),
        ledger_entries::created_at.eq(BoundTimestamp(entry.created_at)),
    )))
}

impl DbConn {
    /// Claims `claim`'s key with its row completed (`response`, at
    /// `completed_at`), then makes `writes`, one statement each, in the
    /// transaction this connection is in: true when the claim won and the
    /// rows were written; false when the key's row (or its body key's) was
    /// there already, and nothing was written. On an error the caller rolls
    /// the transaction back, the claim with it.
    pub async fn claim_completed_in_transaction(
        &mut self,
        claim: &NewClaim<'_>,
        response: &StoredResponse,
        completed_at: NaiveDateTime,
        writes: &[PlannedWrite<'_>],
    ) -> Result<bool, StoreError> {
        let inserted = with_conn!(&mut *self, |c| {
            claim_completed_insert(claim, response, completed_at)
                .execute(c)
                .await
        })?;
        if inserted != 1 {
            return Ok(false);
        }
        for write in writes {
            self.write_planned(claim.endpoint, claim.delivery_id, write)
                .await?;
        }
        Ok(true)
    }

    async fn write_planned(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        write: &PlannedWrite<'_>,
    ) -> Result<(), StoreError> {
        match write {
            PlannedWrite::Event(event) => {
                let upsert = event_upsert(
                    endpoint,
                    delivery_id,
                    event.event_type.as_deref(),
                    &event.payload,
                    event.recorded_at,
                );
                with_conn!(self, |c| upsert.execute(c).await)?;
            }
            PlannedWrite::Ledger(entry) => {
                let insert = ledger_row_insert(endpoint, delivery_id, entry);
                with_conn!(self, |c| insert.execute(c).await)?;
            }
        }
        Ok(())
    }
}
