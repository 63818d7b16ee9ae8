//! The key page's pretty-printed bodies and what a delivery left behind:
//! the rows its handlers wrote, its queue job, and links to the other
//! deliveries about the same object (same ordering key).

use super::detail::KeyRecord;
use super::page_text::{detail_href, readable};
use super::pretty::{Shown, show};
use maud::{Markup, html};

/// A stored body in a box of its own that scrolls sideways: JSON indented
/// (lines never broken inside a word), anything else as text.
pub fn body(id: &str, bytes: Option<&[u8]>, absent: &str) -> Markup {
    match bytes.map(show) {
        None => html! { p id=(id) { (absent) } },
        Some(shown) => {
            let kind = match shown {
                Shown::Json(_) => "json",
                Shown::Text(_) => "text",
            };
            html! { pre.body id=(id) data-kind=(kind) { (shown.text()) } }
        }
    }
}

/// A titled table of rows a handler wrote.
fn effect_table(
    title: &str,
    id: &str,
    headers: [&str; 5],
    rows: impl Iterator<Item = [String; 5]>,
) -> Markup {
    html! {
        h3 { (title) }
        div.table-wrap {
            table.fits id=(id) {
                thead { tr { @for header in headers { th { (header) } } } }
                tbody { @for row in rows { tr { @for cell in row { td { (cell) } } } } }
            }
        }
    }
}

pub fn effects(record: &KeyRecord) -> Markup {
    let effects = &record.effects;
    let endpoint = &record.detail.summary.endpoint;
    let nothing = effects.event.is_none()
        && effects.ledger.is_empty()
        && effects.payments.is_empty()
        && effects.job.is_none();
    html! {
        h2 { "Effects" }
        @if nothing {
            p id="no-effects" { "No events row, ledger entry, payment or queue job was written for it." }
        }
        @if let Some(event) = &effects.event {
            h3 { "Events row" }
            dl id="effect-event" {
                dt { "Event type" } dd { (event.event_type.as_deref().unwrap_or("—")) }
                dt { "Recorded (UTC)" } dd { (readable(event.recorded_at)) }
            }
            (body("effect-event-payload", Some(event.payload.as_bytes()), ""))
        }
        @if !effects.ledger.is_empty() {
            (effect_table("Ledger entries", "effect-ledger", ["Created (UTC)", "Kind", "Payment", "Order", "Amount"],
                effects.ledger.iter().map(|e| [
                    readable(e.created_at), e.kind.clone(), e.payment_id.clone(),
                    e.order_id.clone().unwrap_or_default(), format!("{} {}", e.amount, e.currency),
                ])))
        }
        @if !effects.payments.is_empty() {
            (effect_table("Payments", "effect-payments", ["Created (UTC)", "Payment", "Order", "Amount", "Status"],
                effects.payments.iter().map(|p| [
                    readable(p.created_at), p.id.clone(), p.order_id.clone(),
                    format!("{} {}", p.amount, p.currency), p.status.clone(),
                ])))
        }
        @if let Some(job) = &effects.job {
            h3 { "Queue job" }
            dl id="effect-job" {
                dt { "State" } dd id="effect-job-state" { (job.state) }
                dt { "Attempts" } dd { (job.attempts) }
                dt { "Next run (UTC)" } dd { (readable(job.next_run_at)) }
                dt { "Ordering key" } dd id="ordering-key" { (job.ordering_key.as_deref().unwrap_or("—")) }
                @if let Some(at) = job.event_time { dt { "Event time (UTC)" } dd { (readable(at)) } }
                @if let Some(at) = job.finished_at { dt { "Finished (UTC)" } dd { (readable(at)) } }
                @if let Some(error) = &job.last_error { dt { "Last error" } dd { (error) } }
            }
        }
        @if let Some(key) = effects.job.as_ref().and_then(|job| job.ordering_key.as_deref()) {
            h3 { "Same object (ordering key " (key) ")" }
            @if effects.related.is_empty() {
                p id="no-related" { "No other delivery of this endpoint is about it." }
            } @else {
                ul id="related" {
                    @for other in &effects.related {
                        li {
                            a.related-link href=(detail_href(endpoint, &other.delivery_id)) { (other.delivery_id) }
                            " · " (other.state)
                            " · event " (other.event_time.map(readable).unwrap_or_else(|| "time unknown".into()))
                            " · received " (readable(other.received_at))
                        }
                    }
                }
            }
        }
    }
}
