//! Counts of the keys received within a window, by endpoint and status.

use super::error::AdminError;
use super::model::{EndpointStats, Stats, rfc3339};
use crate::duration_text::{format_duration, parse_duration};
use crate::store::Store;
use chrono::NaiveDateTime;
use serde::Deserialize;
use utoipa::IntoParams;

pub const DEFAULT_WINDOW: &str = "24h";

#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// How far back to count, e.g. `24h`, `7d`, `30m` (default `24h`).
    pub window: Option<String>,
}

pub async fn fetch_stats(
    store: &Store,
    query: &StatsQuery,
    now: NaiveDateTime,
) -> Result<Stats, AdminError> {
    let text = query
        .window
        .as_deref()
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .unwrap_or(DEFAULT_WINDOW);
    let window = parse_duration(text)
        .ok()
        .filter(|w| !w.is_zero())
        .ok_or_else(|| {
            AdminError::bad("window", format!("{text:?} is not a duration such as 24h"))
        })?;
    let since = super::listing::back_from(now, window);
    let counts = store.conn().await?.count_by_status(since).await?;
    let mut endpoints: Vec<EndpointStats> = Vec::new();
    for count in counts {
        match endpoints.last_mut() {
            Some(last) if last.endpoint == count.endpoint => {
                last.total += count.count;
                last.by_status.insert(count.status, count.count);
            }
            _ => endpoints.push(EndpointStats {
                endpoint: count.endpoint,
                total: count.count,
                by_status: [(count.status, count.count)].into(),
            }),
        }
    }
    Ok(Stats {
        window: format_duration(window),
        since: rfc3339(since),
        endpoints,
    })
}
