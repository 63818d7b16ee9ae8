//! What the dashboard shows, gathered once for the page (`/admin`) and the
//! API (`/admin/dashboard.json`): per endpoint (or all), for a window of
//! 1 h, 24 h or 7 d, the deliveries by outcome over time from the traffic
//! counters, the replay ratio, p50/p99 processing times, each endpoint's
//! retry windows and retention, and the queue's and outbox's backlogs.

use super::error::AdminError;
use super::model::rfc3339;
use crate::duration_text::format_duration;
use crate::store::Store;
use crate::traffic::latency;
use crate::traffic::{PROCESSED, REPLAYED};
use crate::webhooks::Webhooks;
use chrono::{DateTime, NaiveDateTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

/// The windows the dashboard offers, with their bars: (text, length,
/// seconds per bar).
pub const WINDOWS: [(&str, i64, i64); 3] = [
    ("1h", 3600, 60),
    ("24h", 24 * 3600, 30 * 60),
    ("7d", 7 * 24 * 3600, 2 * 3600),
];
pub const DEFAULT_WINDOW: &str = "24h";

#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DashboardQuery {
    /// A configured endpoint; empty or `all`: every endpoint.
    pub endpoint: Option<String>,
    /// `1h`, `24h` (default) or `7d`.
    pub window: Option<String>,
}

/// A validated [`DashboardQuery`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DashboardRequest {
    pub endpoint: Option<String>,
    pub window: &'static str,
    pub window_secs: i64,
    pub slot_secs: i64,
}

impl DashboardQuery {
    pub fn validate(&self, webhooks: &Webhooks) -> Result<DashboardRequest, AdminError> {
        let window = self
            .window
            .as_deref()
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .unwrap_or(DEFAULT_WINDOW);
        let (window, window_secs, slot_secs) = WINDOWS
            .iter()
            .find(|(text, _, _)| *text == window)
            .copied()
            .ok_or_else(|| AdminError::bad("window", "expected 1h, 24h or 7d"))?;
        let endpoint = match self.endpoint.as_deref().map(str::trim) {
            None | Some("") | Some("all") => None,
            Some(name) if webhooks.endpoint(name).is_some() => Some(name.to_owned()),
            Some(_) => {
                return Err(AdminError::bad("endpoint", "not a configured endpoint"));
            }
        };
        Ok(DashboardRequest {
            endpoint,
            window,
            window_secs,
            slot_secs,
        })
    }
}

/// The dashboard's figures.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Dashboard {
    /// The endpoint shown; absent: every endpoint.
    pub endpoint: Option<String>,
    /// `1h`, `24h` or `7d`.
    pub window: String,
    /// The first bar's start and the last bar's end (RFC 3339, UTC).
    pub since: String,
    pub until: String,
    /// `since` in Unix seconds, for the page's labels.
    #[serde(skip)]
    pub since_unix: i64,
    /// Seconds per bar (60, 1800 or 7200).
    pub slot_seconds: i64,
    /// Every configured endpoint, by name.
    pub endpoints: Vec<String>,
    /// Deliveries answered in the window, by outcome: `processed`,
    /// `replayed`, `rejected:<reason>`, `conflict:<kind>`, `failed:<reason>`.
    pub totals: BTreeMap<String, i64>,
    /// Every answer in the window.
    pub total: i64,
    /// replayed / (processed + replayed); absent when both are zero.
    pub replay_ratio: Option<f64>,
    /// Processing times of `processed`, `replayed` and `all` answers.
    pub latency: BTreeMap<String, Latency>,
    /// The bars, oldest first.
    pub slots: Vec<Slot>,
    /// What each shown endpoint is configured with.
    pub settings: Vec<EndpointFacts>,
    /// The shown queued endpoints' unfinished jobs.
    pub queue: Vec<QueueDepth>,
    /// Every publisher's unsent publications.
    pub outbox: Vec<OutboxDepth>,
}

/// Percentiles read from log-scale buckets: each is its bucket's upper
/// bound, at most √2 above the true value.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct Latency {
    pub count: i64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Slot {
    /// RFC 3339, UTC.
    pub start: String,
    /// By outcome; outcomes with none are left out.
    pub counts: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndpointFacts {
    pub endpoint: String,
    pub provider: String,
    /// How long the provider retries a failed delivery, as it documents it.
    pub retry_window: String,
    /// How long keys are remembered.
    pub retention: String,
    /// Whether the retention covers the provider's retry window (absent
    /// when the provider documents none).
    pub retention_covers_retries: Option<bool>,
    /// A queued endpoint's own retries: attempts and how long.
    pub queue_retries: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct QueueDepth {
    pub endpoint: String,
    pub queued: i64,
    pub running: i64,
    pub retrying: i64,
    pub dead: i64,
    /// Seconds since the oldest unfinished job's delivery was received.
    pub oldest_age_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct OutboxDepth {
    pub publisher: String,
    pub pending: i64,
    pub failed: i64,
    /// Seconds since the oldest unsent row's delivery was received.
    pub oldest_age_seconds: Option<i64>,
}

/// The bars' bounds: `until` is the end of the slot holding `now`, so that
/// bars start on round times (10:00, 10:30).
fn bounds(now: i64, request: &DashboardRequest) -> (i64, i64) {
    let until = (now.div_euclid(request.slot_secs) + 1) * request.slot_secs;
    (until - request.window_secs, until)
}

fn at(unix: i64) -> NaiveDateTime {
    DateTime::from_timestamp(unix, 0)
        .map(|at| at.naive_utc())
        .unwrap_or_default()
}

fn millis(duration: Duration) -> f64 {
    duration.as_micros() as f64 / 1000.0
}

fn age(now: NaiveDateTime, since: Option<NaiveDateTime>) -> Option<i64> {
    since.map(|since| (now - since).num_seconds().max(0))
}

pub async fn fetch(
    store: &Store,
    webhooks: &Webhooks,
    request: &DashboardRequest,
) -> Result<Dashboard, AdminError> {
    let now = store.clock().now().timestamp();
    let (since, until) = bounds(now, request);
    let endpoint = request.endpoint.as_deref();
    let mut conn = store.conn().await?;
    let by_minute = conn.traffic_by_minute(since, endpoint).await?;
    let by_bucket = conn.traffic_latency(since, endpoint).await?;

    let count = usize::try_from(request.window_secs / request.slot_secs).unwrap_or(0);
    let mut slots: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); count];
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    for (minute, outcome, n) in by_minute {
        let Ok(index) = usize::try_from((minute - since) / request.slot_secs) else {
            continue;
        };
        // A minute past `until` (another instance's clock ahead) is left out.
        let Some(slot) = slots.get_mut(index) else {
            continue;
        };
        *slot.entry(outcome.clone()).or_default() += n;
        *totals.entry(outcome).or_default() += n;
    }
    let processed = totals.get(PROCESSED).copied().unwrap_or(0);
    let replayed = totals.get(REPLAYED).copied().unwrap_or(0);
    let verified = processed + replayed;
    let replay_ratio = (verified > 0).then(|| replayed as f64 / verified as f64);

    let mut buckets: BTreeMap<&str, BTreeMap<i32, i64>> = BTreeMap::new();
    for (outcome, bucket, n) in &by_bucket {
        for group in ["all", outcome.as_str()] {
            if group == "all" || group == PROCESSED || group == REPLAYED {
                *buckets
                    .entry(group)
                    .or_default()
                    .entry(*bucket)
                    .or_default() += n;
            }
        }
    }
    let latency = ["all", PROCESSED, REPLAYED]
        .into_iter()
        .map(|group| {
            let counted = buckets.remove(group).unwrap_or_default();
            let figures = Latency {
                count: counted.values().sum(),
                p50_ms: latency::percentile(&counted, 0.5).map(millis),
                p99_ms: latency::percentile(&counted, 0.99).map(millis),
            };
            (group.to_owned(), figures)
        })
        .collect();

    let mut configured: Vec<_> = webhooks.endpoints().collect();
    configured.sort_by(|a, b| a.name.cmp(&b.name));
    let shown: Vec<_> = configured
        .iter()
        .filter(|e| endpoint.is_none_or(|name| e.name == name))
        .collect();
    let default_retention = webhooks.engine().options().retention;
    let settings = shown
        .iter()
        .map(|e| {
            let retention = e.retention.unwrap_or(default_retention);
            let window = e.provider.retry_window();
            EndpointFacts {
                endpoint: e.name.clone(),
                provider: e.provider.name().to_owned(),
                retry_window: window.describe(),
                retention: format_duration(retention),
                retention_covers_retries: window.window().map(|w| retention >= w),
                queue_retries: e.queue.as_ref().map(|q| {
                    format!(
                        "{} attempts within {} (backoff {} doubling to {})",
                        q.policy.max_attempts,
                        format_duration(q.policy.max_age),
                        format_duration(q.policy.backoff),
                        format_duration(q.policy.backoff_max)
                    )
                }),
            }
        })
        .collect();

    let naive_now = store.clock().naive_now();
    let depths = conn.queue_depth().await?;
    let oldest = conn.oldest_waiting().await?;
    let queue = shown
        .iter()
        .filter(|e| e.queue.is_some())
        .map(|e| {
            let of = |state: &str| {
                depths
                    .iter()
                    .filter(|(name, s, _)| *name == e.name && s == state)
                    .map(|(_, _, n)| *n)
                    .sum()
            };
            QueueDepth {
                endpoint: e.name.clone(),
                queued: of(crate::store::queue::QUEUED),
                running: of(crate::store::queue::RUNNING),
                retrying: of(crate::store::queue::RETRYING),
                dead: of(crate::store::queue::DEAD),
                oldest_age_seconds: age(
                    naive_now,
                    oldest
                        .iter()
                        .find(|(name, _)| *name == e.name)
                        .and_then(|(_, at)| *at),
                ),
            }
        })
        .collect();
    let outbox = conn
        .outbox_backlog()
        .await?
        .into_iter()
        .map(|backlog| OutboxDepth {
            publisher: backlog.publisher,
            pending: backlog.pending,
            failed: backlog.failed,
            oldest_age_seconds: age(naive_now, backlog.oldest),
        })
        .collect();

    Ok(Dashboard {
        endpoint: request.endpoint.clone(),
        window: request.window.to_owned(),
        since: rfc3339(at(since)),
        until: rfc3339(at(until)),
        since_unix: since,
        slot_seconds: request.slot_secs,
        endpoints: configured.iter().map(|e| e.name.clone()).collect(),
        total: totals.values().sum(),
        totals,
        replay_ratio,
        latency,
        slots: slots
            .into_iter()
            .enumerate()
            .map(|(i, counts)| Slot {
                start: rfc3339(at(since + i as i64 * request.slot_secs)),
                counts,
            })
            .collect(),
        settings,
        queue,
        outbox,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(window: usize) -> DashboardRequest {
        let (text, window_secs, slot_secs) = WINDOWS[window];
        DashboardRequest {
            endpoint: None,
            window: text,
            window_secs,
            slot_secs,
        }
    }

    #[test]
    fn the_bars_end_with_the_slot_that_holds_now_and_start_on_round_times() {
        // 2026-12-02 10:47:12 UTC.
        let now = 1_796_208_432;
        let (since, until) = bounds(now, &request(0));
        assert_eq!((until - since, until % 60), (3600, 0));
        assert!(since < now - 3540 && now < until);
        let (since, until) = bounds(now, &request(1));
        assert_eq!((until - since, since % 1800), (24 * 3600, 0));
        assert!(now < until && until - now <= 1800);
        let (since, until) = bounds(now, &request(2));
        assert_eq!((until - since, since % 7200), (7 * 24 * 3600, 0));
    }
}
