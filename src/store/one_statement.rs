//! A fresh delivery in one statement, on PostgreSQL.
//!
//! Where every handler of an operation can say beforehand, from the event
//! alone, what it will write and what it will answer, the claim, those
//! writes and the completion need no answer from the server in between:
//! they go as one data-modifying `WITH`, in a transaction of its own. The
//! claim inserts the key's row already completed, with the stored answer;
//! each write is an `INSERT ... SELECT ... FROM claim`, so it writes
//! nothing where the claim lost (the row exists: its `RETURNING` is empty),
//! and it cannot run before the claim, whose row it reads. One statement is
//! one transaction: the writes and the completion commit together or not
//! at all, as in the transaction of `Store::begin_claim_and_fly`.
//!
//! What it saves is what a PostgreSQL delivery spends on the protocol rather
//! than on the rows: `BEGIN`, three more statements, the completion's second
//! version of the row, and `COMMIT`, each answered with a flush of its own
//! (tokio-postgres ends every statement with a `Sync`).

use super::deliveries::{NewClaim, StoredResponse};
use super::{DbConn, Prepared, StoreError};
use chrono::NaiveDateTime;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text, Timestamp};
use diesel_async::RunQueryDsl;
use std::borrow::Cow;

/// A write that travels with the claim: a row of one of the tables the
/// built-in handlers write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedWrite<'a> {
    /// `record`'s row in `events`, replacing an earlier run's.
    Event {
        event_type: Option<&'a str>,
        payload: Cow<'a, str>,
        recorded_at: NaiveDateTime,
    },
    /// `payments`' row in `ledger_entries`, with an id drawn beforehand
    /// (see [`super::Store::draw_ledger_id`]).
    Ledger {
        id: i64,
        kind: &'static str,
        payment_id: Cow<'a, str>,
        order_id: Option<Cow<'a, str>>,
        amount: i64,
        currency: Cow<'a, str>,
        created_at: NaiveDateTime,
    },
}

impl PlannedWrite<'_> {
    /// The ledger id this write uses, if it is a ledger row.
    pub fn ledger_id(&self) -> Option<i64> {
        match self {
            PlannedWrite::Ledger { id, .. } => Some(*id),
            PlannedWrite::Event { .. } => None,
        }
    }
}

impl DbConn {
    /// Claims `claim`'s key with its row completed (`response`, at
    /// `completed_at`) and makes `writes`, all in one statement that is its
    /// own transaction: true when the claim won and everything committed;
    /// false when the row was there already (or its body key was), and
    /// nothing was written. PostgreSQL only: on SQLite, `Err`.
    pub async fn claim_completed(
        &mut self,
        claim: &NewClaim<'_>,
        response: &StoredResponse,
        completed_at: NaiveDateTime,
        writes: &[PlannedWrite<'_>],
    ) -> Result<bool, StoreError> {
        let DbConn::Pg(c) = self else {
            return Err(StoreError::Unavailable(
                "one-statement claims are PostgreSQL's".into(),
            ));
        };
        let c: &mut super::PgConn = c;
        let text = statement_text(writes);
        let mut query = diesel::sql_query(text)
            .into_boxed::<diesel::pg::Pg>()
            .bind::<Text, _>(claim.endpoint)
            .bind::<Text, _>(claim.delivery_id)
            .bind::<Text, _>(claim.request_hash)
            .bind::<Nullable<Text>, _>(claim.event_type)
            .bind::<Timestamp, _>(claim.received_at)
            .bind::<Timestamp, _>(completed_at)
            .bind::<Nullable<Text>, _>(claim.body_key)
            .bind::<Nullable<Binary>, _>(claim.request_body)
            .bind::<Integer, _>(i32::from(response.status))
            .bind::<Text, _>(response.content_type.as_str())
            .bind::<Binary, _>(&response.body[..])
            .bind::<Nullable<Text>, _>(response.location.as_deref());
        for write in writes {
            query = match write {
                PlannedWrite::Event {
                    event_type,
                    payload,
                    recorded_at,
                } => query
                    .bind::<Nullable<Text>, _>(*event_type)
                    .bind::<Text, _>(payload.as_ref())
                    .bind::<Timestamp, _>(*recorded_at),
                PlannedWrite::Ledger {
                    id,
                    kind,
                    payment_id,
                    order_id,
                    amount,
                    currency,
                    created_at,
                } => query
                    .bind::<BigInt, _>(*id)
                    .bind::<Text, _>(*kind)
                    .bind::<Text, _>(payment_id.as_ref())
                    .bind::<Nullable<Text>, _>(order_id.as_deref())
                    .bind::<BigInt, _>(*amount)
                    .bind::<Text, _>(currency.as_ref())
                    .bind::<Timestamp, _>(*created_at),
            };
        }
        // `SELECT 1 FROM claim`: one row where the claim won.
        let rows = Prepared(query).execute(c).await?;
        Ok(rows == 1)
    }
}

/// The statement for `writes`, in their order. Its text depends only on
/// which kinds of write come in which order, so a connection prepares it
/// once per handler list.
fn statement_text(writes: &[PlannedWrite<'_>]) -> String {
    let mut text = String::from(
        "WITH claim AS (INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, \
         event_type, attempts, received_at, completed_at, body_key, request_body, \
         response_status, response_content_type, response_body, response_location) \
         VALUES ($1, $2, $3, 'completed', $4, 1, $5, $6, $7, $8, $9, $10, $11, $12) \
         ON CONFLICT DO NOTHING RETURNING endpoint, delivery_id)",
    );
    let mut n = 12;
    for (i, write) in writes.iter().enumerate() {
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        let part = match write {
            PlannedWrite::Event { .. } => format!(
                ", w{i} AS (INSERT INTO events (endpoint, delivery_id, event_type, payload, \
                 recorded_at) SELECT endpoint, delivery_id, {}, {}, {} FROM claim \
                 ON CONFLICT (endpoint, delivery_id) DO UPDATE SET \
                 event_type = excluded.event_type, payload = excluded.payload, \
                 recorded_at = excluded.recorded_at)",
                next(),
                next(),
                next()
            ),
            PlannedWrite::Ledger { .. } => format!(
                ", w{i} AS (INSERT INTO ledger_entries (id, endpoint, delivery_id, kind, \
                 payment_id, order_id, amount, currency, created_at) SELECT {}, endpoint, \
                 delivery_id, {}, {}, {}, {}, {}, {} FROM claim)",
                next(),
                next(),
                next(),
                next(),
                next(),
                next(),
                next()
            ),
        };
        text.push_str(&part);
    }
    text.push_str(" SELECT 1 FROM claim");
    text
}

#[cfg(test)]
mod tests {
    use super::{PlannedWrite, statement_text};
    use chrono::NaiveDateTime;

    #[test]
    fn each_write_reads_the_claim_and_binds_after_the_claims_twelve() {
        let at = NaiveDateTime::default();
        let writes = [
            PlannedWrite::Event {
                event_type: None,
                payload: "{}".into(),
                recorded_at: at,
            },
            PlannedWrite::Ledger {
                id: 7,
                kind: "charge",
                payment_id: "pay_1".into(),
                order_id: None,
                amount: 100,
                currency: "EUR".into(),
                created_at: at,
            },
        ];
        let text = statement_text(&writes);
        assert!(text.starts_with(
            "WITH claim AS (INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, "
        ));
        assert!(text.contains(
            "VALUES ($1, $2, $3, 'completed', $4, 1, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT DO NOTHING RETURNING endpoint, delivery_id)"
        ));
        assert!(text.contains(
            ", w0 AS (INSERT INTO events (endpoint, delivery_id, event_type, payload, \
             recorded_at) SELECT endpoint, delivery_id, $13, $14, $15 FROM claim ON CONFLICT"
        ));
        assert!(text.contains(
            "SELECT $16, endpoint, delivery_id, $17, $18, $19, $20, $21, $22 FROM claim)"
        ));
        assert!(text.ends_with(" SELECT 1 FROM claim"));
        // No write (a refusal stored alone): the claim, still one row
        // where it won.
        let alone = statement_text(&[]);
        assert!(!alone.contains(" w0 AS "), "{alone}");
        assert!(alone.ends_with(") SELECT 1 FROM claim"), "{alone}");
    }
}
