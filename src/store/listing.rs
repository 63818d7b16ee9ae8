//! The operator's reads of `deliveries`: a filtered listing in keyset pages,
//! newest first; one key's detail; counts by endpoint and status. Each query
//! is written once for both backends.

use super::schema::deliveries::{self, dsl};
use super::schema::delivery_history::dsl as history;
use super::{Backend, COMPLETED, DbConn, IN_PROGRESS, Prepared, StoreError, values_list};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

diesel::define_sql_function! {
    /// `substr(text, start, length)`, the same on SQLite and PostgreSQL. The
    /// id-prefix filter uses it rather than `LIKE`, which ignores ASCII case
    /// on SQLite and would treat `%` and `_` in an id as wildcards.
    fn substr(text: diesel::sql_types::Text, start: diesel::sql_types::Integer, length: diesel::sql_types::Integer) -> diesel::sql_types::Text;
}

/// The history entries whose detail is a key's "last error".
pub const ERROR_KINDS: [&str; 2] = ["released", "reprocess-failed"];

/// What the listing is narrowed to; every field left `None` matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    pub endpoint: Option<String>,
    pub status: Option<String>,
    pub event_type: Option<String>,
    /// Received at or after this instant.
    pub since: Option<NaiveDateTime>,
    /// Received before this instant.
    pub until: Option<NaiveDateTime>,
    /// The delivery id starts with this, byte for byte.
    pub id_prefix: Option<String>,
}

/// The sort key of a listing's row, `(received_at, endpoint, delivery_id)`,
/// all descending: a page starts after the last row of the one before, so a
/// key inserted meanwhile (newer than every row already shown) never shifts
/// the pages that follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagePosition {
    pub received_at: NaiveDateTime,
    pub endpoint: String,
    pub delivery_id: String,
}

/// One row of the listing.
#[derive(Queryable, Debug, Clone, PartialEq, Eq)]
pub struct DeliverySummary {
    pub endpoint: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    pub status: String,
    pub attempts: i32,
    pub response_status: Option<i32>,
    /// Redeliveries answered from the store.
    pub replays: i32,
    pub received_at: NaiveDateTime,
    pub completed_at: Option<NaiveDateTime>,
    /// The detail of the key's latest `released` or `reprocess-failed` entry.
    pub last_error: Option<String>,
}

impl DeliverySummary {
    pub fn position(&self) -> PagePosition {
        PagePosition {
            received_at: self.received_at,
            endpoint: self.endpoint.clone(),
            delivery_id: self.delivery_id.clone(),
        }
    }
}

/// One key with what it stored: its answer and the verified request.
#[derive(Debug, Clone)]
pub struct DeliveryDetail {
    pub summary: DeliverySummary,
    pub response_content_type: Option<String>,
    pub response_body: Option<Vec<u8>>,
    pub response_location: Option<String>,
    pub request_body: Option<Vec<u8>>,
}

/// How many keys one endpoint (or client-key scope) has in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    pub endpoint: String,
    pub status: String,
    pub count: i64,
}

/// The columns of a [`DeliverySummary`], the last error as a subquery on the
/// key's history. Pasted into each backend's arm, like the queries.
macro_rules! summary_columns {
    () => {
        (
            dsl::endpoint,
            dsl::delivery_id,
            dsl::event_type,
            dsl::status,
            dsl::attempts,
            dsl::response_status,
            dsl::replays,
            dsl::received_at,
            dsl::completed_at,
            history::delivery_history
                .filter(history::endpoint.eq(dsl::endpoint))
                .filter(history::delivery_id.eq(dsl::delivery_id))
                .filter(history::kind.eq_any(ERROR_KINDS))
                .order((history::at.desc(), history::id.desc()))
                .select(history::detail)
                .single_value(),
        )
    };
}

/// The rows of `deliveries` that `$filter` selects after `$after`, newest
/// first, as a boxed query of the arm's backend. Pasted into each backend's
/// arm (a boxed query is typed by its backend), so that the listing, the
/// payload scan and the totals narrow the table in exactly one way.
macro_rules! filtered {
    ($filter:expr, $after:expr) => {{
        let filter: &DeliveryFilter = $filter;
        let mut query = deliveries::table.into_boxed();
        if let Some(endpoint) = &filter.endpoint {
            // Always true (the column is NOT NULL), and what lets the
            // partial `(endpoint, received_at)` index serve the order:
            // see migration 000012.
            query = query
                .filter(dsl::endpoint.eq(endpoint))
                .filter(dsl::received_at.is_not_null());
        }
        if let Some(status) = &filter.status {
            query = query.filter(dsl::status.eq(status));
        }
        if let Some(event_type) = &filter.event_type {
            query = query.filter(dsl::event_type.eq(event_type));
        }
        if let Some(since) = filter.since {
            query = query.filter(dsl::received_at.ge(since));
        }
        if let Some(until) = filter.until {
            query = query.filter(dsl::received_at.lt(until));
        }
        if let Some(prefix) = filter.id_prefix.as_deref().filter(|p| !p.is_empty()) {
            let length = i32::try_from(prefix.chars().count()).unwrap_or(i32::MAX);
            query = query.filter(substr(dsl::delivery_id, 1, length).eq(prefix));
        }
        let after: Option<&PagePosition> = $after;
        if let Some(after) = after {
            query = query.filter(
                dsl::received_at
                    .lt(after.received_at)
                    .or(dsl::received_at
                        .eq(after.received_at)
                        .and(dsl::endpoint.lt(&after.endpoint)))
                    .or(dsl::received_at
                        .eq(after.received_at)
                        .and(dsl::endpoint.eq(&after.endpoint))
                        .and(dsl::delivery_id.lt(&after.delivery_id))),
            );
        }
        query
    }};
}

/// Up to `$limit` rows of [`filtered!`], in the listing's order.
macro_rules! newest_first {
    ($filter:expr, $after:expr, $limit:expr) => {
        filtered!($filter, $after)
            .order((
                dsl::received_at.desc(),
                dsl::endpoint.desc(),
                dsl::delivery_id.desc(),
            ))
            .limit($limit)
    };
}

/// A listing row with the verified request body it stored, for the
/// payload search to read.
pub type ScannedRow = (DeliverySummary, Option<Vec<u8>>);

impl DbConn {
    /// Up to `limit` keys matching `filter`, newest first, starting after
    /// `after` (the last row of the previous page).
    pub async fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
        after: Option<&PagePosition>,
        limit: i64,
    ) -> Result<Vec<DeliverySummary>, StoreError> {
        Ok(with_conn!(self, |c| {
            newest_first!(filter, after, limit)
                .select(summary_columns!())
                .load::<DeliverySummary>(c)
                .await
        })?)
    }

    /// [`DbConn::list_deliveries`] with each key's stored request body: one
    /// chunk of the payload search's bounded scan.
    pub async fn scan_deliveries(
        &mut self,
        filter: &DeliveryFilter,
        after: Option<&PagePosition>,
        limit: i64,
    ) -> Result<Vec<ScannedRow>, StoreError> {
        Ok(with_conn!(self, |c| {
            newest_first!(filter, after, limit)
                .select((summary_columns!(), dsl::request_body))
                .load::<ScannedRow>(c)
                .await
        })?)
    }

    /// How many keys `filter` selects, by status; a status none has is
    /// left out. (One count per status: a key is in one of two.)
    pub async fn count_matching(
        &mut self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut counts = Vec::new();
        for status in [COMPLETED, IN_PROGRESS] {
            if filter.status.as_deref().is_some_and(|s| s != status) {
                continue;
            }
            let count: i64 = with_conn!(self, |c| {
                filtered!(filter, None)
                    .filter(dsl::status.eq(status))
                    .select(diesel::dsl::count_star())
                    .get_result(c)
                    .await
            })?;
            if count > 0 {
                counts.push((status.to_owned(), count));
            }
        }
        Ok(counts)
    }

    /// One key's row with its stored answer and request.
    pub async fn delivery_detail(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Option<DeliveryDetail>, StoreError> {
        type Row = (
            DeliverySummary,
            Option<String>,
            Option<Vec<u8>>,
            Option<String>,
            Option<Vec<u8>>,
        );
        let row: Option<Row> = with_conn!(self, |c| {
            deliveries::table
                .find((endpoint, delivery_id))
                .select((
                    summary_columns!(),
                    dsl::response_content_type,
                    dsl::response_body,
                    dsl::response_location,
                    dsl::request_body,
                ))
                .first::<Row>(c)
                .await
                .optional()
        })?;
        Ok(row.map(
            |(summary, response_content_type, response_body, response_location, request_body)| {
                DeliveryDetail {
                    summary,
                    response_content_type,
                    response_body,
                    response_location,
                    request_body,
                }
            },
        ))
    }

    /// How many keys each endpoint received at or after `since`, by status.
    pub async fn count_by_status(
        &mut self,
        since: NaiveDateTime,
    ) -> Result<Vec<StatusCount>, StoreError> {
        let rows: Vec<(String, String, i64)> = with_conn!(self, |c| {
            deliveries::table
                .filter(dsl::received_at.ge(since))
                .group_by((dsl::endpoint, dsl::status))
                .select((dsl::endpoint, dsl::status, diesel::dsl::count_star()))
                .order((dsl::endpoint.asc(), dsl::status.asc()))
                .load(c)
                .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(endpoint, status, count)| StatusCount {
                endpoint,
                status,
                count,
            })
            .collect())
    }

    /// Adds each key's replays, found by its primary key, in one statement
    /// for them all: `UPDATE ... FROM (VALUES (scope, key, n), ...)`. Each
    /// `(scope, key)` must appear once (the tally adds a key's replays up
    /// before it writes): a row matched twice would take one of its counts.
    /// Gives how many rows were updated.
    ///
    /// One statement per write rather than one per key: on PostgreSQL each
    /// of those was a round trip with its own `Sync` and flush, paid by
    /// PostgreSQL and by the receiver's worker while replays stream in. The
    /// text changes with the number of keys, so it is parsed once per
    /// write, as one statement of `3 × keys` binds (at most 1,500).
    pub async fn count_replays_by_key(
        &mut self,
        counts: &[(&str, &str, i32)],
    ) -> Result<usize, StoreError> {
        if counts.is_empty() {
            return Ok(0);
        }
        let text = replays_by_key_text(counts.len(), self.backend());
        let updated = with_conn!(self, |c| {
            let mut query = diesel::sql_query(text.as_str()).into_boxed();
            for (scope, key, n) in counts {
                query = query
                    .bind::<diesel::sql_types::Text, _>(*scope)
                    .bind::<diesel::sql_types::Text, _>(*key)
                    .bind::<diesel::sql_types::Integer, _>(*n);
            }
            query.execute(c).await
        })?;
        Ok(updated)
    }

    /// Adds `n` replays to a key answered from the store whose request had
    /// a body key: the row is the key's own, or the one a repeat matched by
    /// its body under another id. Keys without one go through
    /// [`DbConn::count_replays_by_key`]. Prepared once per connection (the
    /// text is the same for every key): diesel would parse an `UPDATE`
    /// again for each key of a write.
    pub async fn count_replays(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        body_key: &str,
        n: i32,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            Prepared(
                diesel::update(
                    deliveries::table.filter(dsl::endpoint.eq(endpoint)).filter(
                        dsl::delivery_id
                            .eq(delivery_id)
                            .nullable()
                            .or(dsl::body_key.eq(body_key)),
                    ),
                )
                .set(dsl::replays.eq(dsl::replays + n)),
            )
            .execute(c)
            .await
        })?;
        Ok(updated > 0)
    }
}

/// The text of [`DbConn::count_replays_by_key`] for `keys` keys, with
/// `backend`'s numbered placeholders. Both backends name a `VALUES` list's
/// columns `column1`, `column2`, ... (SQLite takes no column list on a
/// subquery's alias).
fn replays_by_key_text(keys: usize, backend: Backend) -> String {
    let mut text =
        String::from("UPDATE deliveries AS d SET replays = d.replays + v.column3 FROM (VALUES ");
    values_list::push_rows(&mut text, keys, 3, backend);
    text.push_str(") AS v WHERE d.endpoint = v.column1 AND d.delivery_id = v.column2");
    text
}

#[cfg(test)]
mod tests {
    use super::replays_by_key_text;
    use crate::store::Backend;

    #[test]
    fn the_replay_write_binds_three_values_a_key_on_either_backend() {
        assert_eq!(
            replays_by_key_text(2, Backend::Postgres),
            "UPDATE deliveries AS d SET replays = d.replays + v.column3 FROM (VALUES ($1,$2,$3),($4,$5,$6)) AS v WHERE d.endpoint = v.column1 AND d.delivery_id = v.column2"
        );
        assert_eq!(
            replays_by_key_text(1, Backend::Sqlite),
            "UPDATE deliveries AS d SET replays = d.replays + v.column3 FROM (VALUES (?1,?2,?3)) AS v WHERE d.endpoint = v.column1 AND d.delivery_id = v.column2"
        );
    }
}
