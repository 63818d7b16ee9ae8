//! `queue_jobs`, `queue_pauses` and `ordering_versions`: the durable inbox
//! of queued endpoints. A job is written in the transaction that claims and
//! completes its key (so a delivery is acknowledged only once its job is
//! committed); workers take due jobs under a lease, and every change of a
//! job after that is fenced by the lease it holds.

use super::schema::{ordering_versions, queue_jobs, queue_pauses};
use super::{Backend, DbConn, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{Integer, Nullable, Text, Timestamp};
use diesel_async::RunQueryDsl;

pub const QUEUED: &str = "queued";
pub const RUNNING: &str = "running";
pub const RETRYING: &str = "retrying";
pub const DONE: &str = "done";
pub const DEAD: &str = "dead";
pub const CANCELLED: &str = "cancelled";

/// The states of a job whose handlers may still run.
pub const UNFINISHED: [&str; 3] = [QUEUED, RUNNING, RETRYING];

/// The PostgreSQL channel workers `LISTEN` on.
pub const QUEUE_CHANNEL: &str = "idempotent_receiver_queue";

/// A job to enqueue with its key.
#[derive(Debug, Clone)]
pub struct NewJob<'a> {
    pub endpoint: &'a str,
    pub delivery_id: &'a str,
    pub ordering_key: Option<&'a str>,
    pub event_time: Option<NaiveDateTime>,
    pub received_at: NaiveDateTime,
}

/// A job a worker took: its lease is `owner`'s until it ends it.
#[derive(QueryableByName, Debug, Clone, PartialEq, Eq)]
pub struct TakenJob {
    #[diesel(sql_type = Text)]
    pub endpoint: String,
    #[diesel(sql_type = Text)]
    pub delivery_id: String,
    /// This attempt's number, from 1.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    #[diesel(sql_type = Timestamp)]
    pub received_at: NaiveDateTime,
    #[diesel(sql_type = Nullable<Text>)]
    pub ordering_key: Option<String>,
    #[diesel(sql_type = Nullable<Timestamp>)]
    pub event_time: Option<NaiveDateTime>,
}

/// A job as operators see it.
#[derive(Queryable, Selectable, Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[diesel(table_name = queue_jobs)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub struct JobRow {
    pub endpoint: String,
    pub delivery_id: String,
    pub state: String,
    pub attempts: i32,
    pub next_run_at: NaiveDateTime,
    #[serde(skip)]
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<NaiveDateTime>,
    pub last_error: Option<String>,
    pub ordering_key: Option<String>,
    pub event_time: Option<NaiveDateTime>,
    pub received_at: NaiveDateTime,
    pub finished_at: Option<NaiveDateTime>,
}

/// A paused endpoint as operators see it.
#[derive(Queryable, Selectable, Debug, Clone, PartialEq, Eq)]
#[diesel(table_name = queue_pauses)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub struct PauseRow {
    pub endpoint: String,
    pub paused_at: NaiveDateTime,
    pub actor: Option<String>,
}

/// Which jobs an operator's list, retry or cancel applies to.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub endpoint: Option<String>,
    /// `None`: the unfinished states (queued, running, retrying, dead).
    pub states: Option<Vec<String>>,
    pub event_type: Option<String>,
    pub received_after: Option<NaiveDateTime>,
    pub received_before: Option<NaiveDateTime>,
}

/// Due jobs, oldest first, skipping paused endpoints and any job whose
/// ordering key has an earlier unfinished job or one running now. On
/// PostgreSQL rows other workers hold are skipped (`SKIP LOCKED`); SQLite
/// has one writer at a time, so its UPDATE alone is atomic.
///
/// Written so that the plan walks `queue_jobs_next` in the `ORDER BY`'s
/// order and stops at the first job it may take, whatever the backlog:
/// the state and `next_run_at` conditions stand alone (they imply the
/// index's predicate; a running job's `next_run_at` is the past time it
/// was due), and the pause check is `NOT IN` a subquery, a filter on each
/// row walked, where `NOT EXISTS` let PostgreSQL plan an anti-join that
/// read and sorted every due job on each take (10 ms at 16,000 waiting).
const TAKE_DUE: &str = "UPDATE queue_jobs SET state = 'running', lease_owner = {1}, lease_expires_at = {2}, attempts = attempts + 1 \
WHERE (endpoint, delivery_id) IN (\
 SELECT j.endpoint, j.delivery_id FROM queue_jobs j \
 WHERE j.state IN ('queued', 'retrying', 'running') AND j.next_run_at <= {3} \
 AND (j.state IN ('queued', 'retrying') OR j.lease_expires_at < {3}) \
 AND j.endpoint NOT IN (SELECT p.endpoint FROM queue_pauses p) \
 AND (j.ordering_key IS NULL OR NOT EXISTS (\
  SELECT 1 FROM queue_jobs o WHERE o.endpoint = j.endpoint AND o.ordering_key = j.ordering_key AND o.delivery_id <> j.delivery_id \
  AND ((o.state = 'running' AND o.lease_expires_at >= {3}) \
   OR (o.state IN ('queued', 'retrying', 'running') AND (COALESCE(o.event_time, o.received_at), o.received_at, o.delivery_id) < (COALESCE(j.event_time, j.received_at), j.received_at, j.delivery_id))))) \
 ORDER BY j.next_run_at, j.received_at LIMIT 1{lock}) \
RETURNING endpoint, delivery_id, attempts, received_at, ordering_key, event_time";

/// The statement a worker takes the next due job with, as sent to
/// `backend` (binds: lease owner, lease end, now): public so that its plan
/// can be checked with `EXPLAIN`, by the tests and by an operator.
pub fn take_due_sql(backend: Backend) -> String {
    let (placeholder, lock): (fn(usize) -> String, &str) = match backend {
        Backend::Postgres => (|n| format!("${n}"), " FOR UPDATE SKIP LOCKED"),
        Backend::Sqlite => (|n| format!("?{n}"), ""),
    };
    TAKE_DUE
        .replace("{1}", &placeholder(1))
        .replace("{2}", &placeholder(2))
        .replace("{3}", &placeholder(3))
        .replace("{lock}", lock)
}

impl DbConn {
    pub(super) fn backend(&self) -> Backend {
        match self {
            DbConn::Sqlite(_) => Backend::Sqlite,
            DbConn::Pg(_) => Backend::Postgres,
        }
    }

    /// Writes a job, due at once. A job for the key already there (an
    /// expired key claimed again) is queued afresh.
    pub async fn enqueue(&mut self, job: &NewJob<'_>) -> Result<(), StoreError> {
        let row = (
            queue_jobs::endpoint.eq(job.endpoint),
            queue_jobs::delivery_id.eq(job.delivery_id),
            queue_jobs::state.eq(QUEUED),
            queue_jobs::attempts.eq(0),
            queue_jobs::next_run_at.eq(job.received_at),
            queue_jobs::ordering_key.eq(job.ordering_key),
            queue_jobs::event_time.eq(job.event_time),
            queue_jobs::received_at.eq(job.received_at),
        );
        let reset = (
            queue_jobs::state.eq(QUEUED),
            queue_jobs::attempts.eq(0),
            queue_jobs::next_run_at.eq(job.received_at),
            queue_jobs::lease_owner.eq(None::<String>),
            queue_jobs::lease_expires_at.eq(None::<NaiveDateTime>),
            queue_jobs::last_error.eq(None::<String>),
            queue_jobs::finished_at.eq(None::<NaiveDateTime>),
            queue_jobs::received_at.eq(job.received_at),
        );
        with_conn!(self, |c| {
            diesel::insert_into(queue_jobs::table)
                .values(row)
                .on_conflict((queue_jobs::endpoint, queue_jobs::delivery_id))
                .do_update()
                .set(reset)
                .execute(c)
                .await
        })?;
        Ok(())
    }

    /// Tells every instance's workers that a job is due (see
    /// [`DbConn::notify`]).
    pub async fn notify_queue(&mut self) -> Result<(), StoreError> {
        self.notify(QUEUE_CHANNEL).await
    }

    /// Takes the next due job under `owner`'s lease until `until`.
    pub async fn take_due(
        &mut self,
        owner: &str,
        until: NaiveDateTime,
        now: NaiveDateTime,
    ) -> Result<Option<TakenJob>, StoreError> {
        let sql = take_due_sql(self.backend());
        if let DbConn::Pg(c) = self {
            // A queue table's statistics are usually those of an empty or
            // small queue (autovacuum analyses it a minute or more after a
            // backlog forms), and with them PostgreSQL reads every due job
            // through another index and sorts them, on every take. Without
            // sorts, the one plan left is the walk of `queue_jobs_next`.
            // LOCAL: for the caller's transaction only (`take_job` runs
            // the take in one of its own).
            diesel_async::SimpleAsyncConnection::batch_execute(
                &mut **c,
                "SET LOCAL enable_sort = off",
            )
            .await?;
        }
        Ok(with_conn!(self, |c| {
            diesel::sql_query(sql.as_str())
                .bind::<Text, _>(owner)
                .bind::<Timestamp, _>(until)
                .bind::<Timestamp, _>(now)
                .get_result::<TakenJob>(c)
                .await
                .optional()
        })?)
    }

    /// Ends `owner`'s attempt in `state`; `false` when the lease is no
    /// longer `owner`'s (it expired and another worker took the job).
    pub async fn end_job(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        owner: &str,
        end: &JobEnd<'_>,
    ) -> Result<bool, StoreError> {
        let changes = (
            queue_jobs::state.eq(end.state),
            queue_jobs::next_run_at.eq(end.next_run_at),
            queue_jobs::last_error.eq(end.error),
            queue_jobs::finished_at.eq(end.finished_at),
            queue_jobs::lease_owner.eq(None::<String>),
            queue_jobs::lease_expires_at.eq(None::<NaiveDateTime>),
        );
        let updated = with_conn!(self, |c| {
            diesel::update(queue_jobs::table)
                .filter(queue_jobs::endpoint.eq(endpoint))
                .filter(queue_jobs::delivery_id.eq(delivery_id))
                .filter(queue_jobs::lease_owner.eq(owner))
                .set(changes)
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Extends `owner`'s lease; `false` when it is no longer theirs.
    pub async fn renew_job(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        owner: &str,
        until: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            diesel::update(queue_jobs::table)
                .filter(queue_jobs::endpoint.eq(endpoint))
                .filter(queue_jobs::delivery_id.eq(delivery_id))
                .filter(queue_jobs::lease_owner.eq(owner))
                .set(queue_jobs::lease_expires_at.eq(until))
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// One job, if it exists.
    pub async fn job(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Option<JobRow>, StoreError> {
        Ok(with_conn!(self, |c| {
            queue_jobs::table
                .filter(queue_jobs::endpoint.eq(endpoint))
                .filter(queue_jobs::delivery_id.eq(delivery_id))
                .select(JobRow::as_select())
                .get_result(c)
                .await
                .optional()
        })?)
    }

    /// The jobs `filter` selects, newest first, at most `limit`, in one
    /// query.
    pub async fn jobs(
        &mut self,
        filter: &JobFilter,
        limit: i64,
    ) -> Result<Vec<JobRow>, StoreError> {
        self.select_jobs(filter, Some(limit)).await
    }

    /// The keys of every job `filter` selects, newest first.
    pub async fn matching_jobs(
        &mut self,
        filter: &JobFilter,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(self
            .select_jobs(filter, None)
            .await?
            .into_iter()
            .map(|row| (row.endpoint, row.delivery_id))
            .collect())
    }

    async fn select_jobs(
        &mut self,
        filter: &JobFilter,
        limit: Option<i64>,
    ) -> Result<Vec<JobRow>, StoreError> {
        use super::schema::deliveries;
        let unfinished = [QUEUED, RUNNING, RETRYING, DEAD]
            .map(str::to_owned)
            .to_vec();
        let states = filter.states.clone().unwrap_or(unfinished);
        Ok(with_conn!(self, |c| {
            let mut query = queue_jobs::table
                .inner_join(
                    deliveries::table.on(deliveries::endpoint
                        .eq(queue_jobs::endpoint)
                        .and(deliveries::delivery_id.eq(queue_jobs::delivery_id))),
                )
                .filter(queue_jobs::state.eq_any(states))
                .select(JobRow::as_select())
                .order((
                    queue_jobs::received_at.desc(),
                    queue_jobs::delivery_id.desc(),
                ))
                .into_boxed();
            if let Some(limit) = limit {
                query = query.limit(limit.max(0));
            }
            if let Some(endpoint) = &filter.endpoint {
                query = query.filter(queue_jobs::endpoint.eq(endpoint.clone()));
            }
            if let Some(event_type) = &filter.event_type {
                query = query.filter(deliveries::event_type.eq(event_type.clone()));
            }
            if let Some(after) = filter.received_after {
                query = query.filter(queue_jobs::received_at.ge(after));
            }
            if let Some(before) = filter.received_before {
                query = query.filter(queue_jobs::received_at.lt(before));
            }
            query.load::<JobRow>(c).await
        })?)
    }

    /// Makes a job not running now due at `now` with its attempts counted
    /// afresh (an operator's retry); `false` when it is running or done.
    pub async fn requeue_job(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let changes = (
            queue_jobs::state.eq(QUEUED),
            queue_jobs::attempts.eq(0),
            queue_jobs::next_run_at.eq(now),
            queue_jobs::finished_at.eq(None::<NaiveDateTime>),
        );
        let updated = with_conn!(self, |c| {
            diesel::update(queue_jobs::table)
                .filter(queue_jobs::endpoint.eq(endpoint))
                .filter(queue_jobs::delivery_id.eq(delivery_id))
                .filter(queue_jobs::state.eq_any([QUEUED, RETRYING, DEAD, CANCELLED]))
                .set(changes)
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Cancels a job that is not running or finished; `false` otherwise.
    pub async fn cancel_job(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let changes = (
            queue_jobs::state.eq(CANCELLED),
            queue_jobs::finished_at.eq(now),
        );
        let updated = with_conn!(self, |c| {
            diesel::update(queue_jobs::table)
                .filter(queue_jobs::endpoint.eq(endpoint))
                .filter(queue_jobs::delivery_id.eq(delivery_id))
                .filter(queue_jobs::state.eq_any([QUEUED, RETRYING, DEAD]))
                .set(changes)
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Pauses an endpoint's processing (idempotent).
    pub async fn pause(
        &mut self,
        endpoint: &str,
        actor: &str,
        now: NaiveDateTime,
    ) -> Result<(), StoreError> {
        let row = (
            queue_pauses::endpoint.eq(endpoint),
            queue_pauses::paused_at.eq(now),
            queue_pauses::actor.eq(actor),
        );
        with_conn!(self, |c| {
            diesel::insert_into(queue_pauses::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(c)
                .await
        })?;
        Ok(())
    }

    /// Resumes an endpoint's processing; `false` when it was not paused.
    pub async fn resume(&mut self, endpoint: &str) -> Result<bool, StoreError> {
        let deleted = with_conn!(self, |c| {
            diesel::delete(queue_pauses::table.filter(queue_pauses::endpoint.eq(endpoint)))
                .execute(c)
                .await
        })?;
        Ok(deleted == 1)
    }

    /// The paused endpoints.
    pub async fn paused(&mut self) -> Result<Vec<String>, StoreError> {
        Ok(with_conn!(self, |c| {
            queue_pauses::table
                .select(queue_pauses::endpoint)
                .order(queue_pauses::endpoint)
                .load(c)
                .await
        })?)
    }

    /// The paused endpoints with when and by whom, by endpoint.
    pub async fn pauses(&mut self) -> Result<Vec<PauseRow>, StoreError> {
        Ok(with_conn!(self, |c| {
            queue_pauses::table
                .select(PauseRow::as_select())
                .order(queue_pauses::endpoint)
                .load(c)
                .await
        })?)
    }

    /// How many jobs each endpoint has in each unfinished state (queued,
    /// running, retrying, dead). Done and cancelled jobs are left out: they
    /// pile up until purged, and counting them would read them all.
    pub async fn queue_depth(&mut self) -> Result<Vec<(String, String, i64)>, StoreError> {
        Ok(with_conn!(self, |c| {
            queue_jobs::table
                .filter(queue_jobs::state.eq_any([QUEUED, RUNNING, RETRYING, DEAD]))
                .group_by((queue_jobs::endpoint, queue_jobs::state))
                .select((
                    queue_jobs::endpoint,
                    queue_jobs::state,
                    diesel::dsl::count_star(),
                ))
                .load(c)
                .await
        })?)
    }

    /// When the oldest unfinished job of each endpoint was received.
    pub async fn oldest_waiting(
        &mut self,
    ) -> Result<Vec<(String, Option<NaiveDateTime>)>, StoreError> {
        Ok(with_conn!(self, |c| {
            queue_jobs::table
                .filter(queue_jobs::state.eq_any([QUEUED, RETRYING, RUNNING]))
                .group_by(queue_jobs::endpoint)
                .select((
                    queue_jobs::endpoint,
                    diesel::dsl::min(queue_jobs::received_at),
                ))
                .load(c)
                .await
        })?)
    }

    /// The newest event time processed for `key`.
    pub async fn newest_event_time(
        &mut self,
        endpoint: &str,
        key: &str,
    ) -> Result<Option<NaiveDateTime>, StoreError> {
        Ok(with_conn!(self, |c| {
            ordering_versions::table
                .filter(ordering_versions::endpoint.eq(endpoint))
                .filter(ordering_versions::ordering_key.eq(key))
                .select(ordering_versions::event_time)
                .get_result(c)
                .await
                .optional()
        })?)
    }

    /// Records `time` as processed for `key`, if it is the newest.
    pub async fn record_event_time(
        &mut self,
        endpoint: &str,
        key: &str,
        time: NaiveDateTime,
    ) -> Result<(), StoreError> {
        let row = (
            ordering_versions::endpoint.eq(endpoint),
            ordering_versions::ordering_key.eq(key),
            ordering_versions::event_time.eq(time),
        );
        // The insert, or else an update that only ever moves forward:
        // one statement each, written the same on both backends.
        with_conn!(self, |c| {
            diesel::insert_into(ordering_versions::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(c)
                .await
        })?;
        with_conn!(self, |c| {
            diesel::update(ordering_versions::table)
                .filter(ordering_versions::endpoint.eq(endpoint))
                .filter(ordering_versions::ordering_key.eq(key))
                .filter(ordering_versions::event_time.lt(time))
                .set(ordering_versions::event_time.eq(time))
                .execute(c)
                .await
        })?;
        Ok(())
    }
}

/// How an attempt ends.
#[derive(Debug, Clone, Copy)]
pub struct JobEnd<'a> {
    pub state: &'a str,
    pub next_run_at: NaiveDateTime,
    pub error: Option<&'a str>,
    pub finished_at: Option<NaiveDateTime>,
}
