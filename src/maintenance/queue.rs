//! The queue workers of every `serve` process: each takes a due job (see
//! `engine::queue`), rebuilds the delivery's event from what was stored with
//! its key, and runs the endpoint's handlers on it. Workers sleep until a
//! job is committed: this process's own enqueue wakes them, and on
//! PostgreSQL so does every other instance's, through `LISTEN/NOTIFY`. A
//! slow poll (`queue_poll`) is only the fallback.

use super::event_of;
use crate::engine::{EngineError, Job, JobOutcome, Operation, OperationError, RetryPolicy};
use crate::handlers::Event;
use crate::problem::{CONTENT_TYPE_PROBLEM, Problem};
use crate::store::queue::QUEUE_CHANNEL;
use crate::store::{Claimed, DatabaseUrl, DbConn, Store, StoredResponse};
use crate::telemetry::metrics::{self, Attempt, QueueGauges};
use crate::telemetry::traces::{self, KeyValue};
use crate::webhooks::{RunHandlers, Webhooks};
use actix_web::http::StatusCode;
use std::time::Duration;
use tracing::Instrument;

/// How often a process with workers samples the queue's gauges (depth,
/// oldest age, paused) from the database: Prometheus's default scrape
/// interval, so that a scrape sees numbers at most that old, for three
/// small queries per interval whatever the traffic.
pub const QUEUE_SAMPLE_EVERY: Duration = Duration::from_secs(15);

/// What one pass over the due jobs did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainReport {
    pub done: usize,
    pub retrying: usize,
    pub dead: usize,
    pub lease_lost: usize,
}

impl DrainReport {
    pub fn ran(&self) -> usize {
        self.done + self.retrying + self.dead + self.lease_lost
    }
}

/// Runs due jobs one after another until none is due (or `limit` ran).
/// Workers call it when woken; tests call it to drain under their clock.
pub async fn run_due(webhooks: &Webhooks, limit: usize) -> Result<DrainReport, EngineError> {
    let mut report = DrainReport::default();
    while report.ran() < limit {
        let Some(job) = webhooks.engine().take_job().await? else {
            break;
        };
        // More may be due: let another idle worker of this process look,
        // so that one wake-up on a backlog sets them all to work.
        webhooks.queue_wake().notify_one();
        let (endpoint, received_at) = (job.taken().endpoint.clone(), job.taken().received_at);
        let attempt = match run_job(webhooks, job).await? {
            JobOutcome::Done => {
                report.done += 1;
                if webhooks.endpoint(&endpoint).is_some_and(|e| e.publishes()) {
                    webhooks.outbox_signal().committed();
                }
                let now = webhooks.engine().store().clock().naive_now();
                let since_receipt = (now - received_at).to_std().unwrap_or_default();
                Attempt::Done { since_receipt }
            }
            JobOutcome::Retrying { .. } => {
                report.retrying += 1;
                Attempt::Retrying
            }
            JobOutcome::Dead { .. } => {
                report.dead += 1;
                Attempt::Dead
            }
            JobOutcome::LeaseLost => {
                report.lease_lost += 1;
                Attempt::LeaseLost
            }
        };
        metrics::queue_attempt(&endpoint, attempt);
    }
    Ok(report)
}

/// Runs one job's handlers. A job whose endpoint this process does not know,
/// or whose body was not stored, is refused for good: retrying cannot help.
async fn run_job(webhooks: &Webhooks, job: Job) -> Result<JobOutcome, EngineError> {
    let taken = job.taken().clone();
    let Some(endpoint) = webhooks.endpoint(&taken.endpoint).cloned() else {
        let refusal = Refuse(format!(
            "no endpoint named {:?} is configured here",
            taken.endpoint
        ));
        return job.run(&refusal, &RetryPolicy::default()).await;
    };
    let policy = endpoint
        .queue
        .as_ref()
        .map(|q| q.policy)
        .unwrap_or_default();
    let event = match stored_event(webhooks, &endpoint, &taken).await? {
        Some(event) => event,
        None => {
            let refusal = Refuse("the delivery's body was not stored".to_owned());
            return job.run(&refusal, &policy).await;
        }
    };
    // The worker's run is a trace of its own (the request's ended with the
    // enqueue): a `job` span over its handlers and completion, at debug so
    // that it is created only when exported.
    let span = tracing::debug_span!("job");
    traces::set_attributes(&span, || {
        let mut attributes = vec![
            KeyValue::new("webhook.endpoint", taken.endpoint.clone()),
            KeyValue::new("webhook.delivery_id", traces::capped(&taken.delivery_id)),
            KeyValue::new("webhook.attempt", i64::from(taken.attempts)),
        ];
        if let Some(event_type) = &event.event_type {
            attributes.push(KeyValue::new(
                "webhook.event_type",
                traces::capped(event_type),
            ));
        }
        attributes
    });
    let operation = RunHandlers::new(endpoint, event, webhooks.engine().store().clock().clone());
    let outcome = job.run(&operation, &policy).instrument(span.clone()).await;
    let ended = match &outcome {
        Ok(JobOutcome::Done) => "done",
        Ok(JobOutcome::Retrying { .. }) => "retrying",
        Ok(JobOutcome::Dead { .. }) => "dead",
        Ok(JobOutcome::LeaseLost) => "lease_lost",
        Err(error) => {
            traces::set_error(&span, &error.to_string());
            "failed"
        }
    };
    traces::set_attributes(&span, || vec![KeyValue::new("webhook.outcome", ended)]);
    if matches!(ended, "retrying" | "dead" | "lease_lost") {
        traces::set_error(&span, ended);
    }
    outcome
}

/// The event the key was claimed with, told whether it is stale: older than
/// the newest event already processed for its ordering key.
async fn stored_event(
    webhooks: &Webhooks,
    endpoint: &crate::webhooks::Endpoint,
    taken: &crate::store::queue::TakenJob,
) -> Result<Option<Event>, EngineError> {
    let mut conn = webhooks.engine().store().conn().await?;
    let Some(row) = conn
        .find_delivery(&taken.endpoint, &taken.delivery_id)
        .await?
    else {
        return Ok(None);
    };
    let Some(body) = conn
        .request_body(&taken.endpoint, &taken.delivery_id)
        .await?
    else {
        return Ok(None);
    };
    let Some(mut event) = event_of(endpoint, &row, body) else {
        return Ok(None);
    };
    if let (Some(key), Some(time)) = (&taken.ordering_key, taken.event_time) {
        let newest = conn.newest_event_time(&taken.endpoint, key).await?;
        event.stale = newest.is_some_and(|newest| time < newest);
    }
    Ok(Some(event))
}

/// An operation that refuses the job, for jobs that cannot run here.
struct Refuse(String);

#[async_trait::async_trait(?Send)]
impl Operation for Refuse {
    async fn run(
        &self,
        _conn: &mut DbConn,
        _claim: &Claimed,
    ) -> Result<StoredResponse, OperationError> {
        let problem = Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "event-rejected",
            "Event rejected",
            self.0.clone(),
        );
        Err(OperationError::Rejected(StoredResponse {
            status: problem.status,
            content_type: CONTENT_TYPE_PROBLEM.into(),
            body: problem.body().into(),
            location: None,
        }))
    }
}

/// The running workers of this process.
pub struct QueueWorkers {
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    listener: Option<tokio::task::JoinHandle<()>>,
    gauges: tokio::task::JoinHandle<()>,
}

impl QueueWorkers {
    /// Starts `count` workers, each on a thread of its own driven by the
    /// caller's runtime (as the reconciler is: handlers' futures are not
    /// `Send`), on PostgreSQL one listener for other instances' jobs, and
    /// the sampler of the queue's gauges. `None` when no endpoint is queued.
    pub fn spawn(
        webhooks: Webhooks,
        count: usize,
        poll: Duration,
    ) -> std::io::Result<Option<QueueWorkers>> {
        if count == 0 || !webhooks.endpoints().any(|e| e.queue.is_some()) {
            return Ok(None);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let listener = match webhooks.engine().store().url() {
            DatabaseUrl::Postgres(url) => {
                let wake = webhooks.queue_wake().clone();
                Some(runtime.spawn(super::wakeups::listen(
                    url.clone(),
                    QUEUE_CHANNEL,
                    "queue",
                    move || wake.notify_one(),
                    stopped.clone(),
                )))
            }
            DatabaseUrl::Sqlite(_) => None,
        };
        let queued = webhooks
            .endpoints()
            .filter(|e| e.queue.is_some())
            .map(|e| e.name.clone());
        let gauges = runtime.spawn(sample_gauges(
            QueueGauges::new(queued),
            webhooks.engine().store().clone(),
            stopped.clone(),
        ));
        let threads = (0..count)
            .map(|n| {
                let (webhooks, stopped, runtime) =
                    (webhooks.clone(), stopped.clone(), runtime.clone());
                std::thread::Builder::new()
                    .name(format!("queue-worker-{n}"))
                    .spawn(move || runtime.block_on(work(webhooks, poll, stopped)))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        tracing::info!(workers = count, "queue workers started");
        Ok(Some(QueueWorkers {
            stop,
            threads,
            listener,
            gauges,
        }))
    }

    /// Stops the workers after the job each is running, and waits for them.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Some(listener) = self.listener {
            listener.abort();
        }
        self.gauges.abort();
        for thread in self.threads {
            if tokio::task::spawn_blocking(move || thread.join())
                .await
                .is_err()
            {
                tracing::warn!("a queue worker's thread could not be joined");
            }
        }
    }
}

async fn work(webhooks: Webhooks, poll: Duration, mut stopped: tokio::sync::watch::Receiver<bool>) {
    let wake = webhooks.queue_wake().clone();
    loop {
        if *stopped.borrow() {
            return;
        }
        match run_due(&webhooks, 16).await {
            // More may be due: look again before sleeping.
            Ok(report) if report.ran() == 16 => continue,
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "queue worker could not take a job"),
        }
        tokio::select! {
            biased;
            _ = stopped.changed() => return,
            () = wake.notified() => {}
            () = tokio::time::sleep(poll) => {}
        }
    }
}

/// Samples the queue's gauges now and every [`QUEUE_SAMPLE_EVERY`], until
/// stopped. A failed sample keeps the last numbers: the database's outage
/// is `/readyz`'s and the workers' to report, once per attempt rather than
/// again here.
async fn sample_gauges(
    mut gauges: QueueGauges,
    store: Store,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        match tokio::time::timeout(QUEUE_SAMPLE_EVERY, gauges.sample(&store)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, "could not sample the queue's gauges"),
            Err(_) => tracing::debug!("sampling the queue's gauges timed out"),
        }
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(QUEUE_SAMPLE_EVERY) => {}
        }
    }
}

/// Tells other instances' workers, through PostgreSQL's `NOTIFY`, that this
/// process committed jobs: after the commits, batched, on a connection of
/// its own (see `wakeups`). Runs in every `serve` process
/// with a queued endpoint on PostgreSQL, whether or not it has workers.
pub fn spawn_notifier(webhooks: Webhooks) -> Option<tokio::task::JoinHandle<()>> {
    let postgres = matches!(webhooks.engine().store().url(), DatabaseUrl::Postgres(_));
    if !postgres || !webhooks.endpoints().any(|e| e.queue.is_some()) {
        return None;
    }
    let store = webhooks.engine().store().clone();
    let committed = webhooks.queue_enqueued().clone();
    Some(tokio::spawn(super::wakeups::notify_after_commits(
        store,
        committed,
        QUEUE_CHANNEL,
        "new jobs",
    )))
}
