//! The dashboard's markup (`/admin`): the endpoint and window selector, the
//! headline figures, the chart of deliveries by outcome, and each shown
//! endpoint's retry windows, retention and backlogs.

use super::chart::{self, Chart, Series, Size};
use super::dashboard::{Dashboard, DashboardQuery, WINDOWS};
use super::views::layout;
use crate::traffic::{PROCESSED, REPLAYED};
use chrono::DateTime;
use maud::{Markup, PreEscaped, html};

/// The dashboard's own rules: the page's CSS shows one of the two drawn
/// sizes of each chart.
const STYLE: &str = r#"
.figures{display:grid;grid-template-columns:repeat(auto-fit,minmax(11rem,1fr));gap:.6rem;margin:0 0 1rem}
.figure{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.5rem .7rem}
.figure span{display:block;font-size:.8rem;color:#4a5263}
.figure strong{font-size:1.3rem}
.panel{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.6rem}
ul.legend{display:flex;flex-wrap:wrap;gap:.3rem 1rem;list-style:none;padding:0;margin:.5rem 0 0;font-size:.85rem}
.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.3rem;vertical-align:-1px}
.chart-narrow{display:none}
@media (max-width:600px){.chart-wide{display:none}.chart-narrow{display:block}}
table.wrap{white-space:normal}
@media (max-width:600px){table.wrap thead{display:none}table.wrap tr{display:block;border-bottom:1px solid #eceff3}table.wrap td{display:grid;grid-template-columns:7.5rem 1fr;gap:.5rem;border:0}table.wrap td::before{content:attr(data-label);color:#4a5263;font-size:.8rem}}
"#;

/// Colours for outcome kinds; reasons of one kind take the kind's
/// palette in turn.
fn color(outcome: &str, nth_of_kind: usize) -> &'static str {
    const REJECTED: [&str; 5] = ["#c0392b", "#8e44ad", "#d35400", "#a93226", "#6c3483"];
    const FAILED: [&str; 3] = ["#1d2330", "#5b2c2c", "#4a5263"];
    match outcome.split(':').next().unwrap_or("") {
        PROCESSED => "#2e8540",
        REPLAYED => "#2456c7",
        "conflict" => ["#e0a100", "#b7950b"][nth_of_kind % 2],
        "rejected" => REJECTED[nth_of_kind % REJECTED.len()],
        _ => FAILED[nth_of_kind % FAILED.len()],
    }
}

/// Processed and replayed first, then conflicts, rejections and failures.
fn rank(outcome: &str) -> u8 {
    match outcome.split(':').next().unwrap_or("") {
        PROCESSED => 0,
        REPLAYED => 1,
        "conflict" => 2,
        "rejected" => 3,
        _ => 4,
    }
}

fn chart_of(dashboard: &Dashboard) -> Chart {
    let mut outcomes: Vec<&String> = dashboard.totals.keys().collect();
    outcomes.sort_by_key(|o| (rank(o), o.as_str()));
    let mut seen_of_kind = [0usize; 5];
    let series = outcomes
        .into_iter()
        .map(|outcome| {
            let kind = usize::from(rank(outcome));
            let nth = seen_of_kind[kind];
            seen_of_kind[kind] += 1;
            Series {
                name: outcome.clone(),
                color: color(outcome, nth),
                values: dashboard
                    .slots
                    .iter()
                    .map(|slot| slot.counts.get(outcome).copied().unwrap_or(0))
                    .collect(),
            }
        })
        .collect();
    let slot = dashboard.slot_seconds;
    let week = dashboard.window == "7d";
    let time = |unix: i64| {
        let at = DateTime::from_timestamp(unix, 0).unwrap_or_default();
        if week {
            at.format("%m-%d %H:%M").to_string()
        } else {
            at.format("%H:%M").to_string()
        }
    };
    let starts: Vec<i64> = (0..dashboard.slots.len())
        .map(|i| dashboard.since_unix + i as i64 * slot)
        .collect();
    Chart {
        title: format!(
            "Deliveries by outcome, {} per bar (UTC)",
            crate::duration_text::format_duration(std::time::Duration::from_secs(
                slot.unsigned_abs()
            ))
        ),
        tooltips: starts
            .iter()
            .map(|&start| format!("{}–{} UTC", time(start), time(start + slot)))
            .collect(),
        axis_labels: starts.iter().map(|&start| time(start)).collect(),
        series,
    }
}

fn millis(ms: Option<f64>) -> String {
    match ms {
        None => "—".to_owned(),
        Some(ms) if ms >= 1000.0 => format!("≤ {:.1} s", ms / 1000.0),
        Some(ms) => format!("≤ {ms:.1} ms"),
    }
}

fn age(seconds: Option<i64>) -> String {
    seconds
        .map(|s| {
            crate::duration_text::format_duration(std::time::Duration::from_secs(s.unsigned_abs()))
        })
        .unwrap_or_else(|| "—".to_owned())
}

/// The page for `query`: its figures, or why there are none; `endpoints`
/// (the configured ones) fill the selector either way.
pub fn dashboard(
    query: &DashboardQuery,
    endpoints: &[String],
    dashboard: Result<Dashboard, String>,
) -> Markup {
    let chosen_endpoint = query.endpoint.clone().unwrap_or_default();
    let chosen_window = query
        .window
        .clone()
        .filter(|w| !w.trim().is_empty())
        .unwrap_or_else(|| super::dashboard::DEFAULT_WINDOW.to_owned());
    layout(
        "Dashboard",
        true,
        html! {
            style { (PreEscaped(STYLE)) }
            h1 { "Dashboard" }
            form.filters method="get" action="/admin" id="dashboard-filters" {
                label { "Endpoint"
                    select name="endpoint" id="endpoint" {
                        option value="" selected[chosen_endpoint.is_empty()] { "all endpoints" }
                        @for name in endpoints {
                            option value=(name) selected[*name == chosen_endpoint] { (name) }
                        }
                    }
                }
                label { "Window"
                    select name="window" id="window" {
                        @for (text, _, _) in WINDOWS {
                            option value=(text) selected[text == chosen_window] { (text) }
                        }
                    }
                }
                button type="submit" id="show" { "Show" }
            }
            @match dashboard {
                Err(problem) => p.notice id="query-error" { (problem) },
                Ok(dashboard) => (body(&dashboard)),
            }
        },
    )
}

fn body(dashboard: &Dashboard) -> Markup {
    let chart = chart_of(dashboard);
    let processed = dashboard.latency.get(PROCESSED);
    let all = dashboard.latency.get("all");
    html! {
        div.figures {
            div.figure { span { "Deliveries answered" } strong id="total" { (dashboard.total) } }
            div.figure {
                span { "Replay ratio: replayed ÷ (processed + replayed)" }
                strong id="replay-ratio" {
                    @match dashboard.replay_ratio {
                        Some(ratio) => { (format!("{:.1} %", ratio * 100.0)) }
                        None => { "—" }
                    }
                }
            }
            div.figure { span { "Processing p50 / p99 (processed)" }
                strong id="latency-processed" { (millis(processed.and_then(|l| l.p50_ms))) " / " (millis(processed.and_then(|l| l.p99_ms))) } }
            div.figure { span { "Answer p50 / p99 (all outcomes)" }
                strong id="latency-all" { (millis(all.and_then(|l| l.p50_ms))) " / " (millis(all.and_then(|l| l.p99_ms))) } }
        }
        h2 { "Deliveries by outcome" }
        div.panel id="outcomes" {
            @if dashboard.total == 0 {
                p id="no-traffic" { "No deliveries answered in this window." }
            }
            div.chart-wide { (chart::stacked_bars(&chart, Size::Wide)) }
            div.chart-narrow { (chart::stacked_bars(&chart, Size::Narrow)) }
            (chart::legend(&chart))
        }
        h2 { "Retry windows and retention" }
        div.table-wrap {
            table.wrap id="endpoint-settings" {
                thead { tr { th { "Endpoint" } th { "Provider" } th { "Provider retries for" } th { "Retention" } th { "Queue retries" } } }
                tbody {
                    @for facts in &dashboard.settings {
                        tr data-endpoint=(facts.endpoint) {
                            td data-label="Endpoint" { (facts.endpoint) }
                            td data-label="Provider" { (facts.provider) }
                            td data-label="Provider retries for" { (facts.retry_window) }
                            td data-label="Retention" {
                                (facts.retention)
                                @if facts.retention_covers_retries == Some(false) {
                                    " " strong.short { "(shorter than the retries)" }
                                }
                            }
                            td data-label="Queue retries" { (facts.queue_retries.as_deref().unwrap_or("— (inline)")) }
                        }
                    }
                }
            }
        }
        h2 { "Queue" }
        @if dashboard.queue.is_empty() {
            p id="no-queue" { "No queued endpoint shown." }
        } @else {
            div.table-wrap {
                table id="queue-depth" {
                    thead { tr { th { "Endpoint" } th { "Queued" } th { "Running" } th { "Retrying" } th { "Dead" } th { "Oldest waiting" } } }
                    tbody {
                        @for depth in &dashboard.queue {
                            tr data-endpoint=(depth.endpoint) {
                                td { (depth.endpoint) } td { (depth.queued) } td { (depth.running) }
                                td { (depth.retrying) } td { (depth.dead) } td { (age(depth.oldest_age_seconds)) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Outbox" }
        @if dashboard.outbox.is_empty() {
            p id="no-outbox" { "No unsent publications." }
        } @else {
            div.table-wrap {
                table id="outbox-depth" {
                    thead { tr { th { "Publisher" } th { "Pending" } th { "Failed" } th { "Oldest unsent" } } }
                    tbody {
                        @for depth in &dashboard.outbox {
                            tr data-publisher=(depth.publisher) {
                                td { (depth.publisher) } td { (depth.pending) } td { (depth.failed) }
                                td { (age(depth.oldest_age_seconds)) }
                            }
                        }
                    }
                }
            }
        }
    }
}
