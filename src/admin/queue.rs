//! The operator's hold on queued endpoints (issue #13): list the jobs and
//! the paused endpoints, retry one job or every job a filter selects (with
//! a dry run that only counts), cancel one, pause and resume an endpoint.
//! The API, the page and the `queue` command all act through here, so each
//! action is recorded the same way: a job's in `delivery_history` with the
//! actor, in the transaction that changes it; a pause in `queue_pauses`
//! (who and when) and the log, as it belongs to no delivery.

use super::error::AdminError;
use super::listing::instant;
use super::model::rfc3339;
use crate::log_text::escaped;
use crate::store::queue::{CANCELLED, DEAD, DONE, JobFilter, JobRow, QUEUED, RETRYING, RUNNING};
use crate::store::{DbConn, Store};
use chrono::NaiveDateTime;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

pub const DEFAULT_JOBS: i64 = 100;
pub const MAX_JOBS: i64 = 500;
/// The history kinds of the job actions.
pub const RETRIED: &str = "retried";
pub const CANCELLED_KIND: &str = "cancelled";

const STATES: [&str; 6] = [QUEUED, RUNNING, RETRYING, DONE, DEAD, CANCELLED];
/// The states an operator's retry takes a job from (`requeue_job`'s).
const RETRYABLE: [&str; 4] = [QUEUED, RETRYING, DEAD, CANCELLED];
/// The longest endpoint or event type accepted: longer than any stored.
const MAX_TEXT: usize = 512;

/// The queue listing's filters, as query parameters. Empty values count as
/// absent (a form submits its empty fields).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct QueueQuery {
    /// Only this endpoint.
    pub endpoint: Option<String>,
    /// One of queued, running, retrying, done, dead, cancelled (default:
    /// the unfinished ones: queued, running, retrying, dead).
    pub state: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Received at or after: RFC 3339, or a duration back from now (`24h`).
    pub since: Option<String>,
    /// Received before: RFC 3339, or a duration back from now.
    pub until: Option<String>,
    /// Jobs at most, 1 to 500 (default 100), newest first.
    #[param(value_type = Option<u32>)]
    pub limit: Option<String>,
}

/// A bulk retry's filters, as query parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RetryQuery {
    /// Only this endpoint.
    pub endpoint: Option<String>,
    /// One of dead, retrying, queued, cancelled (default: dead).
    pub state: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Received at or after: RFC 3339, or a duration back from now (`24h`).
    pub since: Option<String>,
    /// Received before: RFC 3339, or a duration back from now.
    pub until: Option<String>,
    /// `true`: only count the jobs that would be retried.
    #[param(value_type = Option<bool>)]
    pub dry_run: Option<String>,
}

pub(super) fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// A name as given, refused if nothing stored could match it the same way
/// on both backends (PostgreSQL's text holds no NUL).
pub fn name(parameter: &'static str, text: &str) -> Result<String, AdminError> {
    if text.is_empty() {
        return Err(AdminError::bad(parameter, "may not be empty"));
    }
    if text.contains('\0') {
        return Err(AdminError::bad(
            parameter,
            "may not contain a NUL character",
        ));
    }
    if text.len() > MAX_TEXT {
        return Err(AdminError::bad(
            parameter,
            format!("longer than {MAX_TEXT} bytes"),
        ));
    }
    Ok(text.to_owned())
}

pub(super) fn optional_name(
    parameter: &'static str,
    value: &Option<String>,
) -> Result<Option<String>, AdminError> {
    given(value).map(|text| name(parameter, &text)).transpose()
}

fn state(value: &Option<String>, allowed: &[&str]) -> Result<Option<String>, AdminError> {
    match given(value) {
        None => Ok(None),
        Some(state) if allowed.contains(&state.as_str()) => Ok(Some(state)),
        Some(state) => Err(AdminError::bad(
            "state",
            format!("{state:?} is not one of {}", allowed.join(", ")),
        )),
    }
}

/// `limit`: 1 to `max`, `default` when absent.
pub(super) fn limit(value: &Option<String>, default: i64, max: i64) -> Result<i64, AdminError> {
    match given(value) {
        None => Ok(default),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(AdminError::bad(
                "limit",
                format!("{text:?} is not a number from 1 to {max}"),
            )),
        },
    }
}

/// A boolean parameter: `true` or `false`, false when absent.
pub(super) fn flag(parameter: &'static str, value: &Option<String>) -> Result<bool, AdminError> {
    match given(value).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(AdminError::bad(
            parameter,
            format!("{other:?} is neither true nor false"),
        )),
    }
}

fn filter(
    endpoint: &Option<String>,
    states: Option<Vec<String>>,
    event_type: &Option<String>,
    window: (&Option<String>, &Option<String>),
    now: NaiveDateTime,
) -> Result<JobFilter, AdminError> {
    Ok(JobFilter {
        endpoint: optional_name("endpoint", endpoint)?,
        states,
        event_type: optional_name("event_type", event_type)?,
        received_after: instant("since", given(window.0), now)?,
        received_before: instant("until", given(window.1), now)?,
    })
}

impl QueueQuery {
    /// The filter and the limit; `now` anchors relative times.
    pub fn validate(&self, now: NaiveDateTime) -> Result<(JobFilter, i64), AdminError> {
        let states = state(&self.state, &STATES)?.map(|state| vec![state]);
        let limit = limit(&self.limit, DEFAULT_JOBS, MAX_JOBS)?;
        let filter = filter(
            &self.endpoint,
            states,
            &self.event_type,
            (&self.since, &self.until),
            now,
        )?;
        Ok((filter, limit))
    }
}

impl RetryQuery {
    /// The filter (state `dead` unless given) and whether it is a dry run.
    pub fn validate(&self, now: NaiveDateTime) -> Result<(JobFilter, bool), AdminError> {
        let state = state(&self.state, &RETRYABLE)?.unwrap_or_else(|| DEAD.to_owned());
        let dry_run = flag("dry_run", &self.dry_run)?;
        let filter = filter(
            &self.endpoint,
            Some(vec![state]),
            &self.event_type,
            (&self.since, &self.until),
            now,
        )?;
        Ok((filter, dry_run))
    }
}

/// One job of a queued endpoint.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct QueueJob {
    pub endpoint: String,
    pub delivery_id: String,
    /// queued, running, retrying, done, dead or cancelled.
    pub state: String,
    /// Attempts so far (an operator's retry counts afresh).
    pub attempts: i32,
    /// When it is due (RFC 3339, UTC); for a finished job, when it was last.
    pub next_run_at: String,
    /// The last attempt's error (a dead job's reason).
    pub last_error: Option<String>,
    pub ordering_key: Option<String>,
    pub received_at: String,
    pub finished_at: Option<String>,
}

impl From<JobRow> for QueueJob {
    fn from(row: JobRow) -> QueueJob {
        QueueJob {
            endpoint: row.endpoint,
            delivery_id: row.delivery_id,
            state: row.state,
            attempts: row.attempts,
            next_run_at: rfc3339(row.next_run_at),
            last_error: row.last_error,
            ordering_key: row.ordering_key,
            received_at: rfc3339(row.received_at),
            finished_at: row.finished_at.map(rfc3339),
        }
    }
}

/// An endpoint whose processing is paused: its deliveries are still
/// acknowledged and queued.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct PausedEndpoint {
    pub endpoint: String,
    pub paused_at: String,
    pub actor: Option<String>,
}

/// The jobs a filter selects, newest first, and every paused endpoint.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueListing {
    pub jobs: Vec<QueueJob>,
    pub paused: Vec<PausedEndpoint>,
}

/// A bulk retry's outcome.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct BulkRetry {
    /// Jobs the filter selected.
    pub matched: usize,
    /// Jobs retried (0 on a dry run; fewer than matched if some started
    /// running meanwhile).
    pub retried: usize,
    pub dry_run: bool,
}

/// A pause's or resume's outcome.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct PauseState {
    pub endpoint: String,
    pub paused: bool,
    /// Whether this call changed it (pausing a paused endpoint does not).
    pub changed: bool,
}

pub async fn list(
    store: &Store,
    filter: &JobFilter,
    limit: i64,
) -> Result<QueueListing, AdminError> {
    let mut conn = store.conn().await?;
    let jobs = conn.jobs(filter, limit).await?;
    let paused = conn.pauses().await?;
    Ok(QueueListing {
        jobs: jobs.into_iter().map(QueueJob::from).collect(),
        paused: paused
            .into_iter()
            .map(|row| PausedEndpoint {
                endpoint: row.endpoint,
                paused_at: rfc3339(row.paused_at),
                actor: row.actor,
            })
            .collect(),
    })
}

/// Why a job action changed nothing: no such job, or one in a state the
/// action does not apply to.
async fn refusal(conn: &mut DbConn, endpoint: &str, delivery_id: &str, action: &str) -> AdminError {
    match conn.job(endpoint, delivery_id).await {
        Ok(Some(job)) => AdminError::Conflict(format!(
            "job {delivery_id:?} of {endpoint:?} is {}: it cannot be {action}",
            job.state
        )),
        Ok(None) => AdminError::NoJob {
            endpoint: endpoint.to_owned(),
            delivery_id: delivery_id.to_owned(),
        },
        Err(error) => error.into(),
    }
}

/// Makes one job due now with its attempts counted afresh, and records it.
pub async fn retry(
    store: &Store,
    endpoint: &str,
    delivery_id: &str,
    actor: &str,
) -> Result<QueueJob, AdminError> {
    let now = store.clock().naive_now();
    let mut tx = store.begin().await?;
    let conn = tx.conn();
    if !requeue(conn, endpoint, delivery_id, actor, now).await? {
        let refused = refusal(conn, endpoint, delivery_id, "retried").await;
        tx.rollback().await?;
        return Err(refused);
    }
    let job = conn.job(endpoint, delivery_id).await?;
    // Delivered at the commit: every instance's workers look now.
    conn.notify_queue().await?;
    tx.commit().await?;
    tracing::info!(endpoint = %escaped(endpoint), delivery_id = %escaped(delivery_id), actor = %escaped(actor), "queue job retried by an operator");
    job.map(QueueJob::from).ok_or_else(|| AdminError::NoJob {
        endpoint: endpoint.to_owned(),
        delivery_id: delivery_id.to_owned(),
    })
}

async fn requeue(
    conn: &mut DbConn,
    endpoint: &str,
    delivery_id: &str,
    actor: &str,
    now: NaiveDateTime,
) -> Result<bool, AdminError> {
    let before = conn.job(endpoint, delivery_id).await?;
    if !conn.requeue_job(endpoint, delivery_id, now).await? {
        return Ok(false);
    }
    let detail = before.map(|job| format!("was {} after {} attempt(s)", job.state, job.attempts));
    conn.record_history(
        endpoint,
        delivery_id,
        RETRIED,
        Some(actor),
        detail.as_deref(),
        now,
    )
    .await?;
    Ok(true)
}

/// Cancels one job that is not running or finished, and records it.
pub async fn cancel(
    store: &Store,
    endpoint: &str,
    delivery_id: &str,
    actor: &str,
) -> Result<QueueJob, AdminError> {
    let now = store.clock().naive_now();
    let mut tx = store.begin().await?;
    let conn = tx.conn();
    let before = conn.job(endpoint, delivery_id).await?;
    if !conn.cancel_job(endpoint, delivery_id, now).await? {
        let refused = refusal(conn, endpoint, delivery_id, "cancelled").await;
        tx.rollback().await?;
        return Err(refused);
    }
    let detail = before.map(|job| format!("was {} after {} attempt(s)", job.state, job.attempts));
    conn.record_history(
        endpoint,
        delivery_id,
        CANCELLED_KIND,
        Some(actor),
        detail.as_deref(),
        now,
    )
    .await?;
    let job = conn.job(endpoint, delivery_id).await?;
    tx.commit().await?;
    tracing::info!(endpoint = %escaped(endpoint), delivery_id = %escaped(delivery_id), actor = %escaped(actor), "queue job cancelled by an operator");
    job.map(QueueJob::from).ok_or_else(|| AdminError::NoJob {
        endpoint: endpoint.to_owned(),
        delivery_id: delivery_id.to_owned(),
    })
}

/// Retries every job `filter` selects (or only counts them), one short
/// transaction each, so that a large retry never holds the SQLite writer
/// for long; a job that started running meanwhile is left alone.
pub async fn retry_matching(
    store: &Store,
    filter: &JobFilter,
    actor: &str,
    dry_run: bool,
) -> Result<BulkRetry, AdminError> {
    retry_matching_reporting(store, filter, actor, dry_run, &mut |_, _| {}).await
}

/// [`retry_matching`], telling `progress` how many of the matched jobs
/// were retried after each one (the `queue retry --all` progress bar).
pub async fn retry_matching_reporting(
    store: &Store,
    filter: &JobFilter,
    actor: &str,
    dry_run: bool,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<BulkRetry, AdminError> {
    let keys = store.conn().await?.matching_jobs(filter).await?;
    let matched = keys.len();
    if dry_run {
        return Ok(BulkRetry {
            matched,
            retried: 0,
            dry_run,
        });
    }
    let mut retried = 0;
    for (endpoint, delivery_id) in &keys {
        let now = store.clock().naive_now();
        let mut tx = store.begin().await?;
        if requeue(tx.conn(), endpoint, delivery_id, actor, now).await? {
            retried += 1;
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        progress(retried, matched);
    }
    if retried > 0 {
        store.conn().await?.notify_queue().await?;
    }
    tracing::info!(matched, retried, actor = %escaped(actor), "queue jobs retried in bulk by an operator");
    Ok(BulkRetry {
        matched,
        retried,
        dry_run,
    })
}

/// Pauses an endpoint's processing; its deliveries are still acknowledged
/// and queued.
pub async fn pause(store: &Store, endpoint: &str, actor: &str) -> Result<PauseState, AdminError> {
    let now = store.clock().naive_now();
    let mut conn = store.conn().await?;
    let was = conn.paused().await?.iter().any(|e| e == endpoint);
    conn.pause(endpoint, actor, now).await?;
    tracing::info!(endpoint = %escaped(endpoint), actor = %escaped(actor), changed = !was, "queue endpoint paused by an operator");
    Ok(PauseState {
        endpoint: endpoint.to_owned(),
        paused: true,
        changed: !was,
    })
}

/// Resumes an endpoint's processing and wakes the workers.
pub async fn resume(store: &Store, endpoint: &str, actor: &str) -> Result<PauseState, AdminError> {
    let mut conn = store.conn().await?;
    let changed = conn.resume(endpoint).await?;
    if changed {
        conn.notify_queue().await?;
    }
    tracing::info!(endpoint = %escaped(endpoint), actor = %escaped(actor), changed, "queue endpoint resumed by an operator");
    Ok(PauseState {
        endpoint: endpoint.to_owned(),
        paused: false,
        changed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> NaiveDateTime {
        chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .unwrap()
            .naive_utc()
    }

    #[test]
    fn a_bulk_retry_takes_dead_jobs_unless_told_and_never_running_ones() {
        let (filter, dry) = RetryQuery::default().validate(now()).unwrap();
        assert_eq!(filter.states, Some(vec!["dead".to_owned()]));
        assert!(!dry);
        let query = RetryQuery {
            state: Some("running".into()),
            ..RetryQuery::default()
        };
        assert!(query.validate(now()).is_err());
        let query = RetryQuery {
            dry_run: Some("true".into()),
            since: Some("1h".into()),
            ..RetryQuery::default()
        };
        let (filter, dry) = query.validate(now()).unwrap();
        assert!(dry);
        assert_eq!(
            filter.received_after,
            Some(now() - chrono::TimeDelta::hours(1))
        );
    }

    #[test]
    fn the_listing_refuses_unknown_states_and_limits() {
        for query in [
            QueueQuery {
                state: Some("lost".into()),
                ..QueueQuery::default()
            },
            QueueQuery {
                limit: Some("501".into()),
                ..QueueQuery::default()
            },
            QueueQuery {
                endpoint: Some("a\0b".into()),
                ..QueueQuery::default()
            },
        ] {
            assert!(query.validate(now()).is_err(), "{query:?}");
        }
        let (filter, limit) = QueueQuery::default().validate(now()).unwrap();
        assert_eq!((filter.states, limit), (None, DEFAULT_JOBS));
    }
}
