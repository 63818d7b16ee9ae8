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
use super::prepared::{FixedStatement, FixedText, Prepared, SqlText};
use super::{DbConn, StoreError};
use crate::decimal_text::write_before;
use chrono::NaiveDateTime;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment};
use diesel::result::QueryResult;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text, Timestamp};
use diesel_async::RunQueryDsl;
use std::borrow::Cow;

/// A write that travels with the claim: a row of one of the tables the
/// built-in handlers write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedWrite<'a> {
    /// `record`'s row in `events`, replacing an earlier run's.
    Event(PlannedEvent<'a>),
    /// `payments`' row in `ledger_entries`, with an id drawn beforehand
    /// (see [`super::Store::draw_ledger_id`]).
    Ledger(PlannedLedgerEntry<'a>),
}

/// A planned row of `events`, keyed by its delivery when written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent<'a> {
    pub event_type: Option<Cow<'a, str>>,
    pub payload: Cow<'a, str>,
    pub recorded_at: NaiveDateTime,
}

/// A planned row of `ledger_entries`, keyed by its delivery when written.
/// Each backend's statement binds its fields its own way (diesel's values,
/// a `WITH` in one statement, a batch's arrays); a named struct keeps the
/// field list in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedLedgerEntry<'a> {
    pub id: i64,
    pub kind: &'static str,
    pub payment_id: Cow<'a, str>,
    pub order_id: Option<Cow<'a, str>>,
    pub amount: i64,
    pub currency: Cow<'a, str>,
    pub created_at: NaiveDateTime,
}

/// An owned copy of borrowed text.
fn own(text: &str) -> Cow<'static, str> {
    Cow::Owned(text.to_owned())
}

impl PlannedWrite<'_> {
    /// The ledger id this write uses, if it is a ledger row.
    pub fn ledger_id(&self) -> Option<i64> {
        match self {
            PlannedWrite::Ledger(entry) => Some(entry.id),
            PlannedWrite::Event(_) => None,
        }
    }

    /// The same write, owning its values: for a batch that outlives the
    /// request it was planned from (see `claim_batch`).
    pub fn to_owned_write(&self) -> PlannedWrite<'static> {
        match self {
            PlannedWrite::Event(event) => PlannedWrite::Event(PlannedEvent {
                event_type: event.event_type.as_deref().map(own),
                payload: own(&event.payload),
                recorded_at: event.recorded_at,
            }),
            PlannedWrite::Ledger(entry) => PlannedWrite::Ledger(PlannedLedgerEntry {
                payment_id: own(&entry.payment_id),
                order_id: entry.order_id.as_deref().map(own),
                currency: own(&entry.currency),
                ..*entry
            }),
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
        let query = ClaimCompleted {
            claim,
            completed_at,
            status: i32::from(response.status),
            content_type: &response.content_type,
            body: &response.body,
            location: response.location.as_deref(),
            writes,
        };
        // `SELECT 1 FROM claim`: one row where the claim won. A list of up
        // to two writes (the built-in handlers') has a marker of its own, so
        // that its text is rendered once per process and the connection's
        // cache finds its statement by type; a longer list is looked up by
        // its text, which diesel then renders on every execution.
        macro_rules! by_shape {
            ($($code:literal)*) => {
                match shape(writes) {
                    $(Some($code) => FixedText::<Shape<$code>, _>::new(query).execute(c).await?,)*
                    _ => Prepared(query).execute(c).await?,
                }
            };
        }
        let rows = by_shape!(0 1 2 4 5 7 8);
        Ok(rows == 1)
    }
}

/// The statements of the write lists of at most two writes, one marker per
/// list: `Shape<CODE>` with [`shape`]'s code.
struct Shape<const CODE: usize>;

/// How many codes [`shape`] gives: below 3².
const SHAPES: usize = 9;

/// Where each marker's text is kept. A `static` in a generic function is one
/// for all its instances, hence the table.
static SHAPE_TEXTS: [SqlText; SHAPES] = [const { SqlText::new() }; SHAPES];

impl<const CODE: usize> FixedStatement for Shape<CODE> {
    fn text() -> &'static SqlText {
        // A marker outside the table does not compile.
        const { assert!(CODE < SHAPES) };
        &SHAPE_TEXTS[CODE]
    }
}

/// The code of a list of at most two writes: a base-3 number whose digits
/// are the writes' kinds, the first write the lowest digit (an event 1, a
/// ledger row 2). No kind is 0, so every list has its own code: the empty
/// list 0, one write 1 or 2, two writes 4, 5, 7 or 8.
fn shape(writes: &[PlannedWrite<'_>]) -> Option<usize> {
    if writes.len() > 2 {
        return None;
    }
    Some(writes.iter().rev().fold(0, |code, write| {
        code * 3
            + match write {
                PlannedWrite::Event(_) => 1,
                PlannedWrite::Ledger(_) => 2,
            }
    }))
}

/// The one statement: the claim's insert, already completed, then each write
/// as an `INSERT ... SELECT ... FROM claim`. Its text depends only on which
/// kinds of write come in which order; the values are all bound, each where
/// diesel numbers its placeholder, in the order they are pushed.
struct ClaimCompleted<'a> {
    claim: &'a NewClaim<'a>,
    completed_at: NaiveDateTime,
    status: i32,
    content_type: &'a str,
    body: &'a [u8],
    location: Option<&'a str>,
    writes: &'a [PlannedWrite<'a>],
}

/// Binds each value, with `", "` between them (also `claim_batch`'s arrays).
macro_rules! binds {
    ($out:ident; $first_ty:ty => $first:expr $(, $ty:ty => $value:expr)* $(,)?) => {
        $out.push_bind_param::<$first_ty, _>($first)?;
        $(
            $out.push_sql(", ");
            $out.push_bind_param::<$ty, _>($value)?;
        )*
    };
}
pub(super) use binds;

impl QueryFragment<Pg> for ClaimCompleted<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let claim = self.claim;
        out.push_sql(
            "WITH claim AS (INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, \
             event_type, attempts, received_at, completed_at, body_key, request_body, \
             response_status, response_content_type, response_body, response_location) \
             VALUES (",
        );
        binds!(out;
            Text => &claim.endpoint,
            Text => &claim.delivery_id,
            Text => &claim.request_hash,
        );
        out.push_sql(", 'completed', ");
        out.push_bind_param::<Nullable<Text>, _>(&claim.event_type)?;
        out.push_sql(", 1, ");
        binds!(out;
            Timestamp => &claim.received_at,
            Timestamp => &self.completed_at,
            Nullable<Text> => &claim.body_key,
            Nullable<Binary> => &claim.request_body,
            Integer => &self.status,
            Text => &self.content_type,
            Binary => &self.body,
            Nullable<Text> => &self.location,
        );
        out.push_sql(") ON CONFLICT DO NOTHING RETURNING endpoint, delivery_id)");
        for (i, write) in self.writes.iter().enumerate() {
            out.push_sql(", w");
            // Its name, without a `format!` on every pass over the statement.
            let mut name = [0; 20];
            let start = write_before(i as u64, 1, &mut name, 20);
            out.push_sql(std::str::from_utf8(&name[start..]).unwrap_or_default());
            match write {
                PlannedWrite::Event(PlannedEvent {
                    event_type,
                    payload,
                    recorded_at,
                }) => {
                    out.push_sql(
                        " AS (INSERT INTO events (endpoint, delivery_id, event_type, payload, \
                         recorded_at) SELECT endpoint, delivery_id, ",
                    );
                    binds!(out;
                        Nullable<Text> => event_type,
                        Text => payload,
                        Timestamp => recorded_at,
                    );
                    out.push_sql(
                        " FROM claim ON CONFLICT (endpoint, delivery_id) DO UPDATE SET \
                         event_type = excluded.event_type, payload = excluded.payload, \
                         recorded_at = excluded.recorded_at)",
                    );
                }
                PlannedWrite::Ledger(PlannedLedgerEntry {
                    id,
                    kind,
                    payment_id,
                    order_id,
                    amount,
                    currency,
                    created_at,
                }) => {
                    out.push_sql(
                        " AS (INSERT INTO ledger_entries (id, endpoint, delivery_id, kind, \
                         payment_id, order_id, amount, currency, created_at) SELECT ",
                    );
                    out.push_bind_param::<BigInt, _>(id)?;
                    out.push_sql(", endpoint, delivery_id, ");
                    binds!(out;
                        Text => kind,
                        Text => payment_id,
                        Nullable<Text> => order_id,
                        BigInt => amount,
                        Text => currency,
                        Timestamp => created_at,
                    );
                    out.push_sql(" FROM claim)");
                }
            }
        }
        out.push_sql(" SELECT 1 FROM claim");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ClaimCompleted, NewClaim, PlannedEvent, PlannedLedgerEntry, PlannedWrite, shape};
    use chrono::NaiveDateTime;
    use diesel::pg::Pg;

    fn event(at: NaiveDateTime) -> PlannedWrite<'static> {
        PlannedWrite::Event(PlannedEvent {
            event_type: None,
            payload: "{}".into(),
            recorded_at: at,
        })
    }

    fn ledger(at: NaiveDateTime) -> PlannedWrite<'static> {
        PlannedWrite::Ledger(PlannedLedgerEntry {
            id: 7,
            kind: "charge",
            payment_id: "pay_1".into(),
            order_id: None,
            amount: 100,
            currency: "EUR".into(),
            created_at: at,
        })
    }

    /// The statement for `writes` as diesel renders it, with its binds.
    fn rendered(writes: &[PlannedWrite<'_>]) -> String {
        let claim = NewClaim {
            endpoint: "shop",
            delivery_id: "msg_1",
            request_hash: "ab12",
            status: "completed",
            event_type: Some("payment.succeeded"),
            attempts: 1,
            lease_owner: None,
            lease_expires_at: None,
            received_at: NaiveDateTime::default(),
            body_key: None,
            request_body: Some(b"{}"),
        };
        let query = ClaimCompleted {
            claim: &claim,
            completed_at: NaiveDateTime::default(),
            status: 200,
            content_type: "application/json",
            body: b"{\"ok\":true}",
            location: None,
            writes,
        };
        diesel::debug_query::<Pg, _>(&query).to_string()
    }

    #[test]
    fn each_write_reads_the_claim_and_binds_after_the_claims_twelve() {
        let at = NaiveDateTime::default();
        let text = rendered(&[event(at), ledger(at)]);
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
            ", w1 AS (INSERT INTO ledger_entries (id, endpoint, delivery_id, kind, payment_id, \
             order_id, amount, currency, created_at) \
             SELECT $16, endpoint, delivery_id, $17, $18, $19, $20, $21, $22 FROM claim)"
        ));
        assert!(text.contains(" SELECT 1 FROM claim -- binds: ["), "{text}");
        // The binds, in the order of their placeholders.
        let binds = &text[text.find("-- binds: ").expect("binds")..];
        for (earlier, later) in [
            ("\"shop\"", "\"msg_1\""),
            ("\"msg_1\"", "\"ab12\""),
            ("Some(\"payment.succeeded\")", "200"),
            ("\"application/json\"", "None, None, \"{}\""),
            ("\"{}\"", "7, \"charge\", \"pay_1\", None, 100, \"EUR\""),
        ] {
            let (a, b) = (binds.find(earlier), binds.rfind(later));
            assert!(
                a.is_some() && b.is_some() && a < b,
                "{earlier} before {later}: {binds}"
            );
        }
        // No write (a refusal stored alone): the claim, still one row
        // where it won.
        let alone = rendered(&[]);
        assert!(!alone.contains(" w0 AS "), "{alone}");
        assert!(alone.contains(") SELECT 1 FROM claim -- binds"), "{alone}");
        // Three writes and more: each its own name.
        let many = rendered(&[event(at), ledger(at), ledger(at)]);
        assert!(
            many.contains(", w2 AS (INSERT INTO ledger_entries"),
            "{many}"
        );
        assert!(many.contains("SELECT $23, endpoint"), "{many}");
    }

    /// Every list of up to two writes has a code of its own below the
    /// table's length, and a longer list none (its text is looked up).
    #[test]
    fn each_short_list_of_writes_has_its_own_code() {
        let at = NaiveDateTime::default();
        let kinds = [event(at), ledger(at)];
        let mut lists: Vec<Vec<PlannedWrite<'_>>> = vec![Vec::new()];
        for a in &kinds {
            lists.push(vec![a.clone()]);
            for b in &kinds {
                lists.push(vec![a.clone(), b.clone()]);
            }
        }
        let mut codes: Vec<usize> = lists
            .iter()
            .map(|list| shape(list).expect("a code"))
            .collect();
        assert_eq!(codes, [0, 1, 4, 7, 2, 5, 8], "the codes the dispatch lists");
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), lists.len(), "one code per list");
        assert!(codes.iter().all(|&c| c < super::SHAPES));
        // Two lists of one shape share a code and a text: the values are
        // all bound.
        let other = PlannedWrite::Ledger(PlannedLedgerEntry {
            id: 9,
            kind: "refund",
            payment_id: "pay_2".into(),
            order_id: Some("order_2".into()),
            amount: 5,
            currency: "USD".into(),
            created_at: at,
        });
        assert_eq!(shape(&[event(at), other.clone()]), shape(&kinds));
        let text = |r: String| r[..r.find(" -- binds").expect("binds")].to_owned();
        assert_eq!(text(rendered(&[event(at), other])), text(rendered(&kinds)));
        assert_eq!(shape(&[event(at), event(at), event(at)]), None);
    }
}
