//! `outbox`: publications to message brokers, written in the transaction
//! that completes a delivery and taken by the relay under a lease. Every
//! change after the take is fenced by the lease owner, so that a relay whose
//! lease ran out (and whose row another relay took) cannot overwrite what
//! the other one did.

use super::schema::outbox;
use super::{Backend, DbConn, Scopes, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Binary, Integer, Text, Timestamp};
use diesel_async::RunQueryDsl;

pub const PENDING: &str = "pending";
pub const SENT: &str = "sent";
pub const FAILED: &str = "failed";

/// The PostgreSQL channel relays `LISTEN` on.
pub const OUTBOX_CHANNEL: &str = "idempotent_receiver_outbox";

/// A publication to write with a delivery.
#[derive(Debug, Clone)]
pub struct NewPublication<'a> {
    pub publisher: &'a str,
    pub endpoint: &'a str,
    pub delivery_id: &'a str,
    pub message_id: &'a str,
    pub destination: &'a str,
    pub body: &'a [u8],
    pub received_at: NaiveDateTime,
    pub now: NaiveDateTime,
}

/// A row the relay took: its lease is the relay's until it ends it.
#[derive(QueryableByName, Debug, Clone, PartialEq, Eq)]
pub struct TakenPublication {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Text)]
    pub message_id: String,
    #[diesel(sql_type = Text)]
    pub destination: String,
    #[diesel(sql_type = Binary)]
    pub body: Vec<u8>,
    /// This attempt's number, from 1.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    #[diesel(sql_type = Timestamp)]
    pub received_at: NaiveDateTime,
}

/// A publication as operators see it (without its body).
#[derive(Queryable, Selectable, Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[diesel(table_name = outbox)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub struct PublicationRow {
    pub id: i64,
    pub publisher: String,
    pub endpoint: String,
    pub delivery_id: String,
    pub message_id: String,
    pub destination: String,
    pub state: String,
    pub attempts: i32,
    pub next_attempt_at: NaiveDateTime,
    pub last_error: Option<String>,
    pub confirmation: Option<String>,
    pub received_at: NaiveDateTime,
    pub created_at: NaiveDateTime,
    pub sent_at: Option<NaiveDateTime>,
}

/// Which publications an operator's list or retry applies to.
#[derive(Debug, Clone, Default)]
pub struct PublicationFilter {
    pub publisher: Option<String>,
    pub endpoint: Option<String>,
    pub delivery_id: Option<String>,
    /// `None`: the unsent ones (pending and failed).
    pub states: Option<Vec<String>>,
}

/// One publisher's backlog: what the gauges show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    pub publisher: String,
    pub pending: i64,
    pub failed: i64,
    /// When the oldest unsent row's delivery was received.
    pub oldest: Option<NaiveDateTime>,
}

/// A publisher's due rows, oldest first: pending and due, or taken by a
/// relay whose lease ran out (it died between the broker's confirm and
/// marking the row). On PostgreSQL rows other relays hold are skipped
/// (`SKIP LOCKED`); SQLite has one writer at a time, so its UPDATE alone is
/// atomic.
const TAKE_DUE: &str = "UPDATE outbox SET lease_owner = {1}, lease_expires_at = {2}, attempts = attempts + 1 \
WHERE id IN (\
 SELECT id FROM outbox WHERE publisher = {4} AND state = 'pending' AND next_attempt_at <= {3} \
 AND (lease_expires_at IS NULL OR lease_expires_at < {3}) \
 ORDER BY id LIMIT {5}{lock}) \
RETURNING id, message_id, destination, body, attempts, received_at";

fn take_due_sql(backend: Backend) -> String {
    let (placeholder, lock): (fn(usize) -> String, &str) = match backend {
        Backend::Postgres => (|n| format!("${n}"), " FOR UPDATE SKIP LOCKED"),
        Backend::Sqlite => (|n| format!("?{n}"), ""),
    };
    let mut sql = TAKE_DUE.replace("{lock}", lock);
    for n in 1..=5 {
        sql = sql.replace(&format!("{{{n}}}"), &placeholder(n));
    }
    sql
}

/// Sent rows of `$scopes` confirmed at or before `$before`, as a boxed
/// query typed for the backend of the arm it is pasted into.
macro_rules! sent_in_scopes {
    ($scopes:expr, $before:expr) => {{
        let query = outbox::table
            .filter(outbox::state.eq(SENT))
            .filter(outbox::sent_at.le($before))
            .into_boxed();
        match $scopes {
            Scopes::Only(scope) => query.filter(outbox::endpoint.eq(scope)),
            Scopes::AllBut(excluded) => query.filter(outbox::endpoint.ne_all(excluded)),
        }
    }};
}

/// A publication's row, due at once, unless this publisher already has a
/// row with its message id (the delivery's handlers ran again): one row
/// written, or none. For [`DbConn::insert_publication`] and the `publish:`
/// handler's flight.
pub fn publication_insert<'a>(
    new: &'a NewPublication<'a>,
) -> impl diesel::query_builder::QueryFragment<diesel::pg::Pg>
+ diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>
+ diesel::query_builder::QueryId
+ Send
+ 'a {
    let row = (
        outbox::publisher.eq(new.publisher),
        outbox::endpoint.eq(new.endpoint),
        outbox::delivery_id.eq(new.delivery_id),
        outbox::message_id.eq(new.message_id),
        outbox::destination.eq(new.destination),
        outbox::body.eq(new.body),
        outbox::state.eq(PENDING),
        outbox::attempts.eq(0),
        outbox::next_attempt_at.eq(new.now),
        outbox::received_at.eq(new.received_at),
        outbox::created_at.eq(new.now),
    );
    diesel::insert_into(outbox::table)
        .values(row)
        .on_conflict((outbox::publisher, outbox::message_id))
        .do_nothing()
}

impl DbConn {
    /// Writes a publication, due at once. `false`: this publisher already
    /// has a row with this message id (the delivery's handlers ran again),
    /// and nothing was written.
    pub async fn insert_publication(
        &mut self,
        new: &NewPublication<'_>,
    ) -> Result<bool, StoreError> {
        let inserted = with_conn!(self, |c| publication_insert(new).execute(c).await)?;
        Ok(inserted == 1)
    }

    /// Tells every instance's relays that publications are due (see
    /// [`DbConn::notify`]).
    pub async fn notify_outbox(&mut self) -> Result<(), StoreError> {
        self.notify(OUTBOX_CHANNEL).await
    }

    /// Takes up to `limit` of `publisher`'s due rows under `owner`'s lease
    /// until `until`.
    pub async fn take_publications(
        &mut self,
        publisher: &str,
        owner: &str,
        until: NaiveDateTime,
        now: NaiveDateTime,
        limit: i64,
    ) -> Result<Vec<TakenPublication>, StoreError> {
        let sql = take_due_sql(self.backend());
        Ok(with_conn!(self, |c| {
            diesel::sql_query(sql.as_str())
                .bind::<Text, _>(owner)
                .bind::<Timestamp, _>(until)
                .bind::<Timestamp, _>(now)
                .bind::<Text, _>(publisher)
                .bind::<BigInt, _>(limit)
                .load::<TakenPublication>(c)
                .await
        })?)
    }

    /// Marks rows the broker confirmed as sent; the number marked (rows
    /// whose lease is no longer `owner`'s are left alone).
    pub async fn mark_sent(
        &mut self,
        ids: &[i64],
        owner: &str,
        confirmation: &str,
        now: NaiveDateTime,
    ) -> Result<usize, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let changes = (
            outbox::state.eq(SENT),
            outbox::sent_at.eq(Some(now)),
            outbox::confirmation.eq(Some(confirmation)),
            outbox::last_error.eq(None::<String>),
            outbox::lease_owner.eq(None::<String>),
            outbox::lease_expires_at.eq(None::<NaiveDateTime>),
        );
        Ok(with_conn!(self, |c| {
            diesel::update(outbox::table)
                .filter(outbox::id.eq_any(ids))
                .filter(outbox::lease_owner.eq(owner))
                .set(changes)
                .execute(c)
                .await
        })?)
    }

    /// Ends `owner`'s failed attempt: due again at `next_attempt_at`, or
    /// `failed` for good when `give_up`. `false` when the lease is no
    /// longer `owner`'s.
    pub async fn mark_unsent(
        &mut self,
        id: i64,
        owner: &str,
        error: &str,
        next_attempt_at: NaiveDateTime,
        give_up: bool,
    ) -> Result<bool, StoreError> {
        let changes = (
            outbox::state.eq(if give_up { FAILED } else { PENDING }),
            outbox::next_attempt_at.eq(next_attempt_at),
            outbox::last_error.eq(Some(error)),
            outbox::lease_owner.eq(None::<String>),
            outbox::lease_expires_at.eq(None::<NaiveDateTime>),
        );
        let updated = with_conn!(self, |c| {
            diesel::update(outbox::table)
                .filter(outbox::id.eq(id))
                .filter(outbox::lease_owner.eq(owner))
                .set(changes)
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// The publications `filter` selects, newest first, at most `limit`.
    pub async fn publications(
        &mut self,
        filter: &PublicationFilter,
        limit: i64,
    ) -> Result<Vec<PublicationRow>, StoreError> {
        let states = filter
            .states
            .clone()
            .unwrap_or_else(|| vec![PENDING.to_owned(), FAILED.to_owned()]);
        Ok(with_conn!(self, |c| {
            let mut query = outbox::table
                .filter(outbox::state.eq_any(states))
                .select(PublicationRow::as_select())
                .order(outbox::id.desc())
                .limit(limit.max(0))
                .into_boxed();
            if let Some(publisher) = &filter.publisher {
                query = query.filter(outbox::publisher.eq(publisher.clone()));
            }
            if let Some(endpoint) = &filter.endpoint {
                query = query.filter(outbox::endpoint.eq(endpoint.clone()));
            }
            if let Some(delivery_id) = &filter.delivery_id {
                query = query.filter(outbox::delivery_id.eq(delivery_id.clone()));
            }
            query.load(c).await
        })?)
    }

    /// Every publication of one delivery, oldest first.
    pub async fn publications_of(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Vec<PublicationRow>, StoreError> {
        Ok(with_conn!(self, |c| {
            outbox::table
                .filter(outbox::endpoint.eq(endpoint))
                .filter(outbox::delivery_id.eq(delivery_id))
                .select(PublicationRow::as_select())
                .order(outbox::id.asc())
                .load(c)
                .await
        })?)
    }

    /// Makes `failed` rows that `filter` selects due now with their attempts
    /// counted afresh (an operator's retry); the number made due.
    pub async fn retry_publications(
        &mut self,
        filter: &PublicationFilter,
        now: NaiveDateTime,
    ) -> Result<usize, StoreError> {
        let changes = (
            outbox::state.eq(PENDING),
            outbox::attempts.eq(0),
            outbox::next_attempt_at.eq(now),
        );
        Ok(with_conn!(self, |c| {
            let mut query = diesel::update(outbox::table)
                .filter(outbox::state.eq(FAILED))
                .into_boxed();
            if let Some(publisher) = &filter.publisher {
                query = query.filter(outbox::publisher.eq(publisher.clone()));
            }
            if let Some(endpoint) = &filter.endpoint {
                query = query.filter(outbox::endpoint.eq(endpoint.clone()));
            }
            if let Some(delivery_id) = &filter.delivery_id {
                query = query.filter(outbox::delivery_id.eq(delivery_id.clone()));
            }
            query.set(changes).execute(c).await
        })?)
    }

    /// Every publisher's unsent rows: counts and the oldest receipt.
    pub async fn outbox_backlog(&mut self) -> Result<Vec<Backlog>, StoreError> {
        let rows: Vec<(String, String, i64, Option<NaiveDateTime>)> = with_conn!(self, |c| {
            outbox::table
                .filter(outbox::state.eq_any([PENDING, FAILED]))
                .group_by((outbox::publisher, outbox::state))
                .select((
                    outbox::publisher,
                    outbox::state,
                    diesel::dsl::count_star(),
                    diesel::dsl::min(outbox::received_at),
                ))
                .load(c)
                .await
        })?;
        let mut backlog: std::collections::BTreeMap<String, Backlog> = Default::default();
        for (publisher, state, count, oldest) in rows {
            let entry = backlog.entry(publisher.clone()).or_insert(Backlog {
                publisher,
                pending: 0,
                failed: 0,
                oldest: None,
            });
            if state == FAILED {
                entry.failed = count;
            } else {
                entry.pending = count;
            }
            entry.oldest = match (entry.oldest, oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(backlog.into_values().collect())
    }

    /// Deletes up to `limit` sent rows of `scopes` confirmed at or before
    /// `before`, oldest first; the number deleted. Unsent rows are never
    /// purged: they are what an outage left.
    pub async fn purge_sent_publications(
        &mut self,
        scopes: Scopes<'_>,
        before: NaiveDateTime,
        limit: i64,
    ) -> Result<usize, StoreError> {
        Ok(with_conn!(self, |c| {
            let batch = sent_in_scopes!(scopes, before)
                .select(outbox::id)
                .order(outbox::id.asc())
                .limit(limit.max(0));
            let ids: Vec<i64> = batch.load(c).await?;
            // The condition again: a row made due meanwhile (it cannot be,
            // once sent, but an operator's hand may) stays.
            diesel::delete(
                outbox::table
                    .filter(outbox::id.eq_any(ids))
                    .filter(outbox::state.eq(SENT)),
            )
            .execute(c)
            .await
        })?)
    }

    /// How many sent rows of `scopes` were confirmed at or before `before`
    /// (a dry run's count).
    pub async fn count_sent_publications(
        &mut self,
        scopes: Scopes<'_>,
        before: NaiveDateTime,
    ) -> Result<i64, StoreError> {
        Ok(with_conn!(self, |c| {
            sent_in_scopes!(scopes, before).count().get_result(c).await
        })?)
    }
}
