//! The queries that find, count and delete expired keys of `deliveries`,
//! each written once for both backends.
//!
//! A key has expired when its row was received at or before its scope's
//! cut-off (`now - retention`) and it is either completed, or an
//! `in_progress` claim whose lease has run out too (abandoned by a process
//! that died). A claim with a live lease is never expired, however old.

use super::schema::deliveries::{self, dsl};
use super::{COMPLETED, DbConn, IN_PROGRESS, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

/// Which scopes (endpoints, or client-key scopes) a cut-off applies to.
#[derive(Debug, Clone, Copy)]
pub enum Scopes<'a> {
    /// Exactly this scope (an endpoint with its own retention).
    Only(&'a str),
    /// Every scope but these (the global retention covers the rest).
    AllBut(&'a [String]),
}

/// One retention rule, resolved against a clock.
#[derive(Debug, Clone, Copy)]
pub struct Expiry<'a> {
    pub scopes: Scopes<'a>,
    /// Rows received at or before this instant are past the retention.
    pub cutoff: NaiveDateTime,
    /// The instant leases are judged against.
    pub now: NaiveDateTime,
}

/// Why a row is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExpiredKind {
    /// A completed key past the retention.
    Completed,
    /// An `in_progress` claim past the retention whose lease expired.
    Abandoned,
}

impl ExpiredKind {
    fn from_status(status: &str) -> ExpiredKind {
        if status == COMPLETED {
            ExpiredKind::Completed
        } else {
            ExpiredKind::Abandoned
        }
    }

    fn status(self) -> &'static str {
        match self {
            ExpiredKind::Completed => COMPLETED,
            ExpiredKind::Abandoned => IN_PROGRESS,
        }
    }
}

/// An expired row, by its primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredKey {
    pub scope: String,
    pub delivery_id: String,
    pub kind: ExpiredKind,
}

/// The expiry condition, pasted (rather than returned from a function) so
/// that each backend's arm of `with_conn!` gets its own typed copy. A
/// completed row has no lease (`NULL`), so `lease_expires_at <= now` only
/// ever admits `in_progress` rows, and only those whose lease ran out.
/// A queued delivery whose job has not finished is never expired: its key
/// is what keeps a redelivery from queueing it twice.
macro_rules! expired {
    ($expiry:expr) => {
        dsl::received_at
            .le($expiry.cutoff)
            .and(
                dsl::status
                    .eq(COMPLETED)
                    .or(dsl::lease_expires_at.le($expiry.now)),
            )
            .and(diesel::dsl::not(diesel::dsl::exists(
                super::schema::queue_jobs::table
                    .filter(super::schema::queue_jobs::endpoint.eq(dsl::endpoint))
                    .filter(super::schema::queue_jobs::delivery_id.eq(dsl::delivery_id))
                    .filter(super::schema::queue_jobs::state.eq_any(super::queue::UNFINISHED)),
            )))
    };
}

/// `expiry`'s scopes as a boxed filter on `deliveries`, typed for the
/// backend of the arm it is pasted into.
macro_rules! in_scopes {
    ($query:expr, $scopes:expr) => {
        match $scopes {
            Scopes::Only(scope) => $query.filter(dsl::endpoint.eq(scope)),
            Scopes::AllBut(excluded) => $query.filter(dsl::endpoint.ne_all(excluded)),
        }
    };
}

impl DbConn {
    /// Up to `limit` expired keys, oldest first. An index serves both the
    /// range and the order — `(endpoint, received_at)` for one scope,
    /// `received_at` for all but some — so a batch reads only the rows it
    /// returns (plus any live claims it skips).
    pub async fn expired_keys(
        &mut self,
        expiry: &Expiry<'_>,
        limit: usize,
    ) -> Result<Vec<ExpiredKey>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<(String, String, String)> = with_conn!(self, |c| {
            let query = in_scopes!(deliveries::table.into_boxed(), expiry.scopes);
            query
                .filter(expired!(expiry))
                .select((dsl::endpoint, dsl::delivery_id, dsl::status))
                .order(dsl::received_at.asc())
                .limit(limit)
                .load(c)
                .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(scope, delivery_id, status)| ExpiredKey {
                scope,
                delivery_id,
                kind: ExpiredKind::from_status(&status),
            })
            .collect())
    }

    /// Deletes the keys `delivery_ids` of `scope` that are still expired
    /// and of `kind`. The condition is checked again here, so a row that
    /// changed since it was read — reclaimed by a late retry, or taken over
    /// with a fresh lease — stays. Returns how many rows went.
    pub async fn delete_expired(
        &mut self,
        expiry: &Expiry<'_>,
        scope: &str,
        kind: ExpiredKind,
        delivery_ids: &[&str],
    ) -> Result<usize, StoreError> {
        use super::schema::delivery_history::dsl as history;
        let deleted = with_conn!(self, |c| {
            diesel::delete(
                deliveries::table
                    .filter(dsl::endpoint.eq(scope))
                    .filter(dsl::delivery_id.eq_any(delivery_ids))
                    .filter(dsl::status.eq(kind.status()))
                    .filter(expired!(expiry)),
            )
            .execute(c)
            .await
        })?;
        // A forgotten key's finished job goes with it.
        with_conn!(self, |c| {
            use super::schema::queue_jobs::dsl as jobs;
            diesel::delete(
                jobs::queue_jobs
                    .filter(jobs::endpoint.eq(scope))
                    .filter(jobs::delivery_id.eq_any(delivery_ids))
                    .filter(diesel::dsl::not(diesel::dsl::exists(
                        deliveries::table
                            .filter(dsl::endpoint.eq(jobs::endpoint))
                            .filter(dsl::delivery_id.eq(jobs::delivery_id)),
                    ))),
            )
            .execute(c)
            .await
        })?;
        // A forgotten key's history goes with it; a key that stayed keeps its own.
        with_conn!(self, |c| {
            diesel::delete(
                history::delivery_history
                    .filter(history::endpoint.eq(scope))
                    .filter(history::delivery_id.eq_any(delivery_ids))
                    .filter(diesel::dsl::not(diesel::dsl::exists(
                        deliveries::table
                            .filter(dsl::endpoint.eq(history::endpoint))
                            .filter(dsl::delivery_id.eq(history::delivery_id)),
                    ))),
            )
            .execute(c)
            .await
        })?;
        Ok(deleted)
    }

    /// How many keys have expired, by scope and kind, without deleting any
    /// (`purge --dry-run`).
    pub async fn count_expired(
        &mut self,
        expiry: &Expiry<'_>,
    ) -> Result<Vec<(String, ExpiredKind, u64)>, StoreError> {
        let rows: Vec<(String, String, i64)> = with_conn!(self, |c| {
            // Grouped before boxing: diesel boxes a grouped select, but does
            // not group a boxed one.
            let grouped = deliveries::table
                .group_by((dsl::endpoint, dsl::status))
                .select((dsl::endpoint, dsl::status, diesel::dsl::count_star()))
                .into_boxed();
            in_scopes!(grouped, expiry.scopes)
                .filter(expired!(expiry))
                .load(c)
                .await
        })?;
        Ok(rows
            .into_iter()
            .map(|(scope, status, n)| {
                (
                    scope,
                    ExpiredKind::from_status(&status),
                    u64::try_from(n).unwrap_or(0),
                )
            })
            .collect())
    }
}
