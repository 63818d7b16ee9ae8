//! Several fresh deliveries in one statement, on PostgreSQL: group commit.
//!
//! The one statement of [`super::one_statement`], for a batch: every
//! member's claim, writes and completion go as one data-modifying `WITH`
//! whose values arrive as one array per column (`unnest`), so its text is
//! the same for a batch of one and of sixty-four, prepared once per
//! connection. A claim that loses (its row, or its body key's, exists)
//! inserts nothing and returns no row, and the writes join the claims that
//! returned one, so a member whose claim lost writes nothing, as alone.
//! The statement is its own transaction: the batch commits together, with
//! one WAL flush, or not at all.
//!
//! What each member costs PostgreSQL shrinks to its rows: the transaction,
//! the commit record and its flush, the protocol's messages, the executor's
//! start-up, and a wake-up of the receiver's thread are paid once a batch.

use super::deliveries::StoredResponse;
use super::one_statement::{PlannedWrite, binds};
use super::prepared::FixedText;
use super::{DbConn, StoreError};
use chrono::NaiveDateTime;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment};
use diesel::result::QueryResult;
use diesel::sql_types::{Array, BigInt, Binary, Integer, Nullable, Text, Timestamp};
use diesel_async::RunQueryDsl;
// Keys of verified deliveries only, as in the replay tally.
use foldhash::fast::RandomState;
use std::collections::HashSet;

/// One fresh delivery of a batch: its claim, completed with `response`, and
/// the writes of its handlers. Owned, since it waits in a queue for the
/// batch that takes it.
#[derive(Debug, Clone)]
pub struct BatchMember {
    pub endpoint: String,
    pub delivery_id: String,
    pub request_hash: String,
    pub event_type: Option<String>,
    pub received_at: NaiveDateTime,
    pub completed_at: NaiveDateTime,
    pub body_key: Option<String>,
    pub request_body: Option<bytes::Bytes>,
    pub response: StoredResponse,
    pub writes: Vec<PlannedWrite<'static>>,
}

impl DbConn {
    /// Claims every member's key with its row completed and makes its writes,
    /// all in one statement that is its own transaction: for each member, in
    /// order, true when its claim won and false when its row (or its body
    /// key's) was there already, and nothing of it was written. The members'
    /// keys must be distinct: two rows of one key in one statement would
    /// both write their effects. PostgreSQL only: on SQLite, `Err`.
    pub async fn claim_completed_batch(
        &mut self,
        members: &[BatchMember],
    ) -> Result<Vec<bool>, StoreError> {
        let DbConn::Pg(c) = self else {
            return Err(StoreError::Unavailable(
                "batched claims are PostgreSQL's".into(),
            ));
        };
        let c: &mut super::PgConn = c;
        let columns = Columns::of(members);
        let won: Vec<(String, String)> =
            FixedText::<BatchStatement, _>::new(columns).load(c).await?;
        // A set, not a search of the rows per member: a batch may hold up
        // to `postgres_group_commit_max` (1,000) members.
        let won: HashSet<(&str, &str), RandomState> =
            won.iter().map(|(e, d)| (e.as_str(), d.as_str())).collect();
        Ok(members
            .iter()
            .map(|m| won.contains(&(m.endpoint.as_str(), m.delivery_id.as_str())))
            .collect())
    }
}

crate::fixed_statement!(
    /// The batch's statement: its text does not depend on the batch.
    BatchStatement
);

/// The batch, one array per column: the claims', the events' and the
/// ledger rows'. Each write carries its delivery's key, by which it joins
/// the claims that won.
#[derive(Default)]
struct Columns<'a> {
    endpoint: Vec<&'a str>,
    delivery_id: Vec<&'a str>,
    request_hash: Vec<&'a str>,
    event_type: Vec<Option<&'a str>>,
    received_at: Vec<NaiveDateTime>,
    completed_at: Vec<NaiveDateTime>,
    body_key: Vec<Option<&'a str>>,
    request_body: Vec<Option<&'a [u8]>>,
    status: Vec<i32>,
    content_type: Vec<&'a str>,
    body: Vec<&'a [u8]>,
    location: Vec<Option<&'a str>>,
    events: EventColumns<'a>,
    ledger: LedgerColumns<'a>,
}

#[derive(Default)]
struct EventColumns<'a> {
    endpoint: Vec<&'a str>,
    delivery_id: Vec<&'a str>,
    event_type: Vec<Option<&'a str>>,
    payload: Vec<&'a str>,
    recorded_at: Vec<NaiveDateTime>,
}

#[derive(Default)]
struct LedgerColumns<'a> {
    id: Vec<i64>,
    endpoint: Vec<&'a str>,
    delivery_id: Vec<&'a str>,
    kind: Vec<&'a str>,
    payment_id: Vec<&'a str>,
    order_id: Vec<Option<&'a str>>,
    amount: Vec<i64>,
    currency: Vec<&'a str>,
    created_at: Vec<NaiveDateTime>,
}

impl<'a> Columns<'a> {
    fn of(members: &'a [BatchMember]) -> Columns<'a> {
        let mut c = Columns::default();
        for m in members {
            c.endpoint.push(&m.endpoint);
            c.delivery_id.push(&m.delivery_id);
            c.request_hash.push(&m.request_hash);
            c.event_type.push(m.event_type.as_deref());
            c.received_at.push(m.received_at);
            c.completed_at.push(m.completed_at);
            c.body_key.push(m.body_key.as_deref());
            c.request_body.push(m.request_body.as_deref());
            c.status.push(i32::from(m.response.status));
            c.content_type.push(&m.response.content_type);
            c.body.push(&m.response.body);
            c.location.push(m.response.location.as_deref());
            for write in &m.writes {
                match write {
                    PlannedWrite::Event(event) => {
                        let e = &mut c.events;
                        e.endpoint.push(&m.endpoint);
                        e.delivery_id.push(&m.delivery_id);
                        e.event_type.push(event.event_type.as_deref());
                        e.payload.push(&event.payload);
                        e.recorded_at.push(event.recorded_at);
                    }
                    PlannedWrite::Ledger(entry) => {
                        let l = &mut c.ledger;
                        l.id.push(entry.id);
                        l.endpoint.push(&m.endpoint);
                        l.delivery_id.push(&m.delivery_id);
                        l.kind.push(entry.kind);
                        l.payment_id.push(&entry.payment_id);
                        l.order_id.push(entry.order_id.as_deref());
                        l.amount.push(entry.amount);
                        l.currency.push(&entry.currency);
                        l.created_at.push(entry.created_at);
                    }
                }
            }
        }
        c
    }
}

impl QueryFragment<Pg> for Columns<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // The claims, in the members' order: a batch's keys are sorted by
        // the caller, so two batches that share keys take their locks in
        // one order and never deadlock.
        out.push_sql(
            "WITH claim AS (INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, \
             event_type, attempts, received_at, completed_at, body_key, request_body, \
             response_status, response_content_type, response_body, response_location) \
             SELECT endpoint, delivery_id, request_hash, 'completed', event_type, 1, \
             received_at, completed_at, body_key, request_body, response_status, \
             response_content_type, response_body, response_location FROM unnest(",
        );
        binds!(out;
            Array<Text> => &self.endpoint,
            Array<Text> => &self.delivery_id,
            Array<Text> => &self.request_hash,
            Array<Nullable<Text>> => &self.event_type,
            Array<Timestamp> => &self.received_at,
            Array<Timestamp> => &self.completed_at,
            Array<Nullable<Text>> => &self.body_key,
            Array<Nullable<Binary>> => &self.request_body,
            Array<Integer> => &self.status,
            Array<Text> => &self.content_type,
            Array<Binary> => &self.body,
            Array<Nullable<Text>> => &self.location,
        );
        out.push_sql(
            ") AS batch (endpoint, delivery_id, request_hash, event_type, received_at, \
             completed_at, body_key, request_body, response_status, response_content_type, \
             response_body, response_location) \
             ON CONFLICT DO NOTHING RETURNING endpoint, delivery_id), \
             event_rows AS (INSERT INTO events (endpoint, delivery_id, event_type, payload, \
             recorded_at) SELECT w.endpoint, w.delivery_id, w.event_type, w.payload, \
             w.recorded_at FROM unnest(",
        );
        let e = &self.events;
        binds!(out;
            Array<Text> => &e.endpoint,
            Array<Text> => &e.delivery_id,
            Array<Nullable<Text>> => &e.event_type,
            Array<Text> => &e.payload,
            Array<Timestamp> => &e.recorded_at,
        );
        out.push_sql(
            ") AS w (endpoint, delivery_id, event_type, payload, recorded_at) \
             JOIN claim ON claim.endpoint = w.endpoint AND claim.delivery_id = w.delivery_id \
             ON CONFLICT (endpoint, delivery_id) DO UPDATE SET \
             event_type = excluded.event_type, payload = excluded.payload, \
             recorded_at = excluded.recorded_at), \
             ledger_rows AS (INSERT INTO ledger_entries (id, endpoint, delivery_id, kind, \
             payment_id, order_id, amount, currency, created_at) SELECT w.id, w.endpoint, \
             w.delivery_id, w.kind, w.payment_id, w.order_id, w.amount, w.currency, \
             w.created_at FROM unnest(",
        );
        let l = &self.ledger;
        binds!(out;
            Array<BigInt> => &l.id,
            Array<Text> => &l.endpoint,
            Array<Text> => &l.delivery_id,
            Array<Text> => &l.kind,
            Array<Text> => &l.payment_id,
            Array<Nullable<Text>> => &l.order_id,
            Array<BigInt> => &l.amount,
            Array<Text> => &l.currency,
            Array<Timestamp> => &l.created_at,
        );
        out.push_sql(
            ") AS w (id, endpoint, delivery_id, kind, payment_id, order_id, amount, currency, \
             created_at) \
             JOIN claim ON claim.endpoint = w.endpoint AND claim.delivery_id = w.delivery_id) \
             SELECT endpoint, delivery_id FROM claim",
        );
        Ok(())
    }
}

impl Query for Columns<'_> {
    type SqlType = (Text, Text);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{PlannedEvent, PlannedLedgerEntry};

    fn member(id: &str, writes: Vec<PlannedWrite<'static>>) -> BatchMember {
        BatchMember {
            endpoint: "shop".into(),
            delivery_id: id.into(),
            request_hash: "ab12".into(),
            event_type: Some("payment.succeeded".into()),
            received_at: NaiveDateTime::default(),
            completed_at: NaiveDateTime::default(),
            body_key: None,
            request_body: Some(bytes::Bytes::from_static(b"{}")),
            response: StoredResponse {
                status: 200,
                content_type: "application/json".into(),
                body: bytes::Bytes::from_static(b"{\"ok\":true}"),
                location: None,
            },
            writes,
        }
    }

    /// One array per column, whatever the batch: the text binds 26 arrays,
    /// and each write's row carries its own delivery's key.
    #[test]
    fn one_text_for_every_batch_and_each_write_keyed_by_its_delivery() {
        let at = NaiveDateTime::default();
        let event = PlannedWrite::Event(PlannedEvent {
            event_type: None,
            payload: "{}".into(),
            recorded_at: at,
        });
        let ledger = PlannedWrite::Ledger(PlannedLedgerEntry {
            id: 7,
            kind: "charge",
            payment_id: "pay_1".into(),
            order_id: None,
            amount: 100,
            currency: "EUR".into(),
            created_at: at,
        });
        let members = [
            member("a", vec![event.clone(), ledger]),
            member("b", vec![event]),
            member("c", Vec::new()),
        ];
        let text = |members: &[BatchMember]| {
            let rendered = diesel::debug_query::<Pg, _>(&Columns::of(members)).to_string();
            rendered[..rendered.find(" -- binds").expect("binds")].to_owned()
        };
        let three = text(&members);
        assert_eq!(three, text(&members[2..]), "one text for every batch");
        assert!(three.contains("FROM unnest($1, $2, $3"), "{three}");
        assert!(three.contains("$26) AS w (id, endpoint"), "{three}");
        assert!(!three.contains("$27"), "{three}");
        let columns = Columns::of(&members);
        assert_eq!(columns.delivery_id, ["a", "b", "c"]);
        assert_eq!(columns.events.delivery_id, ["a", "b"]);
        assert_eq!(columns.ledger.delivery_id, ["a"]);
        assert_eq!(columns.ledger.id, [7]);
    }
}
