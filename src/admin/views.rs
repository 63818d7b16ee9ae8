//! The admin page's markup. maud escapes every interpolated value, so
//! whatever a delivery carries (its id, event type, payload, answer) is
//! shown as text and never runs as HTML.

use super::detail::KeyRecord;
use super::effects_view;
use super::listing::{ListQuery, Page};
use super::listing_view::{self, endpoint_select, short_error, short_id};
use super::outbox::{OutboxListing, OutboxQuery, Publication};
use super::queue::{QueueJob, QueueListing, QueueQuery};
use crate::store::DeliverySummary;
use maud::{DOCTYPE, Markup, PreEscaped, html};

/// Plain CSS, no build step: readable at 1280 px, usable on a phone; wide
/// tables scroll sideways inside their box rather than widening the page.
const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f5f6f8}
header{display:flex;flex-wrap:wrap;align-items:center;justify-content:space-between;gap:.5rem;padding:.6rem 1rem;background:#1d2330;color:#fff}
header a{color:#fff;text-decoration:none;font-weight:600}
main{max-width:1400px;margin:0 auto;padding:1rem}
h1{font-size:1.3rem;margin:.2rem 0 1rem}
h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
form.filters{display:flex;flex-wrap:wrap;gap:.6rem;align-items:flex-end;margin-bottom:1rem}
form.filters label{display:flex;flex-direction:column;font-size:.8rem;color:#4a5263;min-width:9rem;flex:1 1 9rem}
input,select,button{font:inherit;padding:.35rem .5rem;border:1px solid #b9c0cc;border-radius:4px;background:#fff}
button{background:#2456c7;color:#fff;border-color:#2456c7;cursor:pointer}
header button{background:transparent;border-color:#fff}
.table-wrap{overflow-x:auto;background:#fff;border:1px solid #dde1e8;border-radius:6px}
table{border-collapse:collapse;width:100%;white-space:nowrap}
th,td{text-align:left;padding:.4rem .6rem;border-bottom:1px solid #eceff3;vertical-align:top}
th{font-size:.8rem;color:#4a5263;background:#fafbfc}
td.error{white-space:normal;min-width:10rem;max-width:28rem;color:#a11}
.status-completed{color:#176a2e}.status-in_progress{color:#9a5b00}
pre{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.6rem;overflow-x:auto;white-space:pre-wrap;word-break:break-all;max-height:28rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:.7rem}
dt{color:#4a5263}dd{margin:0;word-break:break-all}
nav.pager{display:flex;gap:1rem;margin:1rem 0}
p.notice{background:#fff3f3;border:1px solid #e3b4b4;padding:.5rem .7rem;border-radius:4px}
p.done{background:#f0fff3;border:1px solid #9fd3ab;padding:.5rem .7rem;border-radius:4px}
form.inline{display:inline;margin:0 .2rem 0 0}
form.inline button{padding:.15rem .45rem;font-size:.85rem}
.login{max-width:26rem;margin:3rem auto;background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:1.2rem}
.login input{width:100%;margin:.4rem 0 .8rem}
table.fits{table-layout:fixed;white-space:normal}
table.fits td,table.fits th{overflow-wrap:anywhere}
table.fits .at{width:7.5rem}table.fits .num{width:4.6rem}table.fits .status{width:6.5rem}
pre.body{white-space:pre;overflow:auto;word-break:normal;overflow-wrap:normal;max-height:32rem}
h3{font-size:1rem;margin:1rem 0 .4rem}
h1,h3,li{overflow-wrap:anywhere}
p#totals{margin:.2rem 0 .6rem}
@media (max-width:600px){main{padding:.6rem}dl{grid-template-columns:1fr}dt{font-weight:600}table.fits{table-layout:auto;min-width:48rem}table.fits td,table.fits th{overflow-wrap:normal}}
"#;

pub use super::page_text::{detail_href, encode, readable};

pub(super) fn layout(title: &str, logged_in: bool, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · idempotent-receiver" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    a href="/admin" { "idempotent-receiver · admin" }
                    @if logged_in {
                        a href="/admin/list" id="deliveries-link" { "Deliveries" }
                        a href="/admin/jobs" id="queue-link" { "Queue" }
                        a href="/admin/publications" id="outbox-link" { "Outbox" }
                        form method="post" action="/admin/logout" {
                            button type="submit" id="logout" { "Log out" }
                        }
                    }
                }
                main { (content) }
            }
        }
    }
}

/// Why the log-in form is shown again.
pub enum LoginNotice {
    /// The token was wrong.
    Refused,
    /// Too many wrong tokens; the form works again in that many seconds.
    Limited(u64),
}

pub fn login(notice: Option<LoginNotice>) -> Markup {
    layout(
        "Log in",
        false,
        html! {
            form.login method="post" action="/admin/login" {
                h1 { "Admin log in" }
                @match notice {
                    Some(LoginNotice::Refused) => {
                        p.notice id="login-error" { "That token is not valid." }
                    }
                    Some(LoginNotice::Limited(seconds)) => {
                        p.notice id="login-limited" {
                            "Too many wrong tokens. Try again in " (seconds) " s."
                        }
                    }
                    None => {}
                }
                label for="token" { "Admin token" }
                input #token type="password" name="token" autocomplete="current-password" required;
                button type="submit" id="login" { "Log in" }
            }
        },
    )
}

/// The filter parameters of `query` without the cursor, for links that
/// keep the filters.
fn filter_params(query: &ListQuery) -> String {
    let pairs = [
        ("endpoint", &query.endpoint),
        ("status", &query.status),
        ("event_type", &query.event_type),
        ("since", &query.since),
        ("until", &query.until),
        ("id_prefix", &query.id_prefix),
        ("q", &query.q),
        ("scan_limit", &query.scan_limit),
        ("limit", &query.limit),
    ];
    pairs
        .iter()
        .filter_map(|(name, value)| {
            let value = value.as_deref().map(str::trim).filter(|v| !v.is_empty())?;
            Some(format!("{name}={}", encode(value)))
        })
        .collect::<Vec<_>>()
        .join("&")
}

pub fn listing(query: &ListQuery, endpoints: &[String], page: Result<Page, String>) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let status = value(&query.status);
    let filters = filter_params(query);
    layout(
        "Deliveries",
        true,
        html! {
            h1 { "Deliveries" }
            form.filters method="get" action="/admin/list" id="filters" {
                label { "Endpoint" (endpoint_select(endpoints, value(&query.endpoint).trim())) }
                label { "Status"
                    select name="status" {
                        option value="" selected[status.is_empty()] { "any" }
                        option value="completed" selected[status == "completed"] { "completed" }
                        option value="in_progress" selected[status == "in_progress"] { "in progress" }
                    }
                }
                label { "Event type" input name="event_type" value=(value(&query.event_type)); }
                label { "Since (RFC 3339 or 24h)" input name="since" value=(value(&query.since)); }
                label { "Until" input name="until" value=(value(&query.until)); }
                label { "Delivery id starts with" input name="id_prefix" value=(value(&query.id_prefix)); }
                label { "Payload contains (within 7 d, 24 h unless since)" input name="q" id="q" value=(value(&query.q)); }
                label { "Per page" input name="limit" inputmode="numeric" value=(value(&query.limit)); }
                button type="submit" id="apply" { "Filter" }
            }
            @match page {
                Err(problem) => p.notice id="query-error" { (problem) },
                Ok(page) => {
                    (listing_view::totals(&page))
                    @if page.rows.is_empty() {
                        p id="empty" { "No deliveries match." }
                    } @else {
                        div.table-wrap {
                            table.fits id="deliveries" {
                                thead { tr {
                                    th.at { "Received (UTC)" } th { "Endpoint" } th { "Delivery id" }
                                    th { "Event type" } th.status { "Status" } th.num { "Attempts" }
                                    th.num { "Answer" } th.num { "Replays" } th.at { "Completed (UTC)" } th { "Last error" }
                                } }
                                tbody {
                                    @for row in &page.rows { (listing_row(row)) }
                                }
                            }
                        }
                    }
                    nav.pager {
                        @if query.cursor.as_deref().is_some_and(|c| !c.is_empty()) {
                            a id="first-page" href={ "/admin/list?" (filters) } { "« First page" }
                        }
                        @if let Some(next) = &page.next_cursor {
                            a id="next-page" href={ "/admin/list?" (filters) @if !filters.is_empty() { "&" } "cursor=" (encode(next)) } { "Next page »" }
                        }
                    }
                }
            }
        },
    )
}

fn listing_row(row: &DeliverySummary) -> Markup {
    html! {
        tr.delivery {
            td { (readable(row.received_at)) }
            td { (row.endpoint) }
            td {
                a.delivery-link href=(detail_href(&row.endpoint, &row.delivery_id)) title=(row.delivery_id) {
                    (short_id(&row.delivery_id).unwrap_or_else(|| row.delivery_id.clone()))
                }
            }
            td { (row.event_type.as_deref().unwrap_or("")) }
            td class={ "status-" (row.status) } { (row.status) }
            td { (row.attempts) }
            td { @if let Some(status) = row.response_status { (status) } }
            td { (row.replays) }
            td { @if let Some(at) = row.completed_at { (readable(at)) } }
            @match row.last_error.as_deref() {
                None => td.error {},
                Some(error) => td.error title=(error) { (short_error(error).unwrap_or_else(|| error.to_owned())) },
            }
        }
    }
}

/// A key's page; `reprocessed`: the status the handlers just answered,
/// when an operator's reprocessing sent them back here. `reprocessable`:
/// the key belongs to a configured endpoint (a client key's scope, such as
/// `POST /payments`, has no handlers to run again, so no button).
pub fn detail(record: &KeyRecord, reprocessable: bool, reprocessed: Option<u16>) -> Markup {
    let row = &record.detail.summary;
    let detail = &record.detail;
    layout(
        &row.delivery_id,
        true,
        html! {
            p { a href="/admin/list" id="back" { "« All deliveries" } }
            h1 id="delivery-id" { (row.delivery_id) }
            @if reprocessable {
                (super::reprocess::section(row, reprocessed))
            }
            dl id="summary" {
                dt { "Endpoint" } dd { (row.endpoint) }
                dt { "Event type" } dd { (row.event_type.as_deref().unwrap_or("—")) }
                dt { "Status" } dd class={ "status-" (row.status) } { (row.status) }
                dt { "Attempts" } dd { (row.attempts) }
                dt { "Replays answered from the store" } dd { (row.replays) }
                dt { "Received (UTC)" } dd { (readable(row.received_at)) }
                dt { "Completed (UTC)" } dd { (row.completed_at.map(readable).unwrap_or_else(|| "—".into())) }
                dt { "Last error" } dd { (row.last_error.as_deref().unwrap_or("—")) }
            }
            h2 { "Stored response" }
            dl id="response" {
                dt { "Status" } dd id="response-status" { (row.response_status.map(|s| s.to_string()).unwrap_or_else(|| "—".into())) }
                dt { "Content type" } dd { (detail.response_content_type.as_deref().unwrap_or("—")) }
                @if let Some(location) = &detail.response_location {
                    dt { "Location" } dd { (location) }
                }
            }
            (effects_view::body("response-body", detail.response_body.as_deref(), "(no body)"))
            h2 { "Verified payload" }
            (effects_view::body("payload", detail.request_body.as_deref(), "(not stored)"))
            (effects_view::effects(record))
            (publications_section(record))
            h2 { "History" }
            @if record.history.is_empty() {
                p id="no-history" { "Nothing happened to this key besides its processing." }
            } @else {
                div.table-wrap {
                    table.fits id="history" {
                        thead { tr { th.at { "At (UTC)" } th { "Kind" } th { "Actor" } th { "Detail" } } }
                        tbody {
                            @for entry in &record.history {
                                tr {
                                    td { (readable(entry.at)) }
                                    td { (entry.kind) }
                                    td { (entry.actor.as_deref().unwrap_or("")) }
                                    // Red only where the detail is a failure's reason.
                                    td.error[failure_kind(&entry.kind)] { (entry.detail.as_deref().unwrap_or("")) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The history kinds whose detail is why something failed.
fn failure_kind(kind: &str) -> bool {
    matches!(kind, "released" | "reprocess-failed") || kind.ends_with("failed")
}

pub fn not_found(message: &str) -> Markup {
    layout(
        "Not found",
        true,
        html! {
            p { a href="/admin/list" { "« All deliveries" } }
            p.notice id="not-found" { (message) }
        },
    )
}

/// The hidden field of a form, when the value is given.
fn hidden(name: &str, value: &Option<String>) -> Markup {
    let value = value.as_deref().map(str::trim).unwrap_or("");
    html! {
        @if !value.is_empty() { input type="hidden" name=(name) value=(value); }
    }
}

/// A one-button form of the queue page: the action, and the job or the
/// endpoint it applies to.
fn action(
    path: &str,
    label: &str,
    id: String,
    endpoint: &str,
    delivery_id: Option<&str>,
) -> Markup {
    html! {
        form.inline method="post" action={ "/admin/jobs/" (path) } {
            input type="hidden" name="endpoint" value=(endpoint);
            @if let Some(delivery_id) = delivery_id {
                input type="hidden" name="delivery_id" value=(delivery_id);
            }
            button type="submit" id=(id) { (label) }
        }
    }
}

/// The queue page: the jobs `query` selects with their actions, the
/// paused endpoints, and (given the listing's retryable count) a bulk retry.
pub fn queue(
    query: &QueueQuery,
    listing: Result<(&QueueListing, Option<usize>), String>,
) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let state = value(&query.state);
    layout(
        "Queue",
        true,
        html! {
            p { a href="/admin/list" id="back" { "« All deliveries" } }
            h1 { "Queue" }
            form.filters method="get" action="/admin/jobs" id="queue-filters" {
                label { "Endpoint" input name="endpoint" value=(value(&query.endpoint)); }
                label { "State"
                    select name="state" {
                        option value="" selected[state.is_empty()] { "unfinished" }
                        @for s in ["queued", "running", "retrying", "dead", "done", "cancelled"] {
                            option value=(s) selected[state == s] { (s) }
                        }
                    }
                }
                label { "Event type" input name="event_type" value=(value(&query.event_type)); }
                label { "Since (RFC 3339 or 24h)" input name="since" value=(value(&query.since)); }
                label { "Until" input name="until" value=(value(&query.until)); }
                button type="submit" id="queue-apply" { "Filter" }
            }
            @match listing {
                Err(problem) => p.notice id="query-error" { (problem) },
                Ok((listing, retryable)) => {
                    h2 { "Paused endpoints" }
                    @if listing.paused.is_empty() {
                        p id="no-pauses" { "None: every endpoint's jobs run." }
                    } @else {
                        div.table-wrap {
                            table id="paused" {
                                thead { tr { th { "Endpoint" } th { "Paused (UTC)" } th { "By" } th {} } }
                                tbody {
                                    @for pause in &listing.paused {
                                        tr {
                                            td { (pause.endpoint) }
                                            td { (pause.paused_at) }
                                            td { (pause.actor.as_deref().unwrap_or("")) }
                                            td { (action("resume", "Resume", format!("resume-{}", encode(&pause.endpoint)), &pause.endpoint, None)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if let Some(endpoint) = query.endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
                        @if !listing.paused.iter().any(|p| p.endpoint == endpoint) {
                            p { (action("pause", "Pause this endpoint", "pause".into(), endpoint, None)) }
                        }
                    }
                    h2 { "Jobs" }
                    @if let Some(count) = retryable.filter(|n| *n > 0) {
                        form.inline method="post" action="/admin/jobs/retry-all" id="retry-all-form" {
                            (hidden("endpoint", &query.endpoint))
                            (hidden("state", &query.state))
                            (hidden("event_type", &query.event_type))
                            (hidden("since", &query.since))
                            (hidden("until", &query.until))
                            button type="submit" id="retry-all" {
                                "Retry all " (count) " " (if state.is_empty() { "dead" } else { state.as_str() }) " job(s) matching"
                            }
                        }
                    }
                    @if listing.jobs.is_empty() {
                        p id="no-jobs" { "No jobs match." }
                    } @else {
                        div.table-wrap {
                            table id="jobs" {
                                thead { tr {
                                    th { "Received (UTC)" } th { "Endpoint" } th { "Delivery id" } th { "State" }
                                    th { "Attempts" } th { "Next run (UTC)" } th { "Last error" } th { "Actions" }
                                } }
                                tbody { @for job in &listing.jobs { (job_row(job)) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn job_row(job: &QueueJob) -> Markup {
    let id = format!("{}-{}", encode(&job.endpoint), encode(&job.delivery_id));
    let retryable = matches!(
        job.state.as_str(),
        "queued" | "retrying" | "dead" | "cancelled"
    );
    let cancellable = matches!(job.state.as_str(), "queued" | "retrying" | "dead");
    html! {
        tr.job {
            td { (job.received_at) }
            td { (job.endpoint) }
            td { a.delivery-link href=(detail_href(&job.endpoint, &job.delivery_id)) { (job.delivery_id) } }
            td class={ "state-" (job.state) } { (job.state) }
            td { (job.attempts) }
            td { (job.next_run_at) }
            td.error { (job.last_error.as_deref().unwrap_or("")) }
            td {
                @if retryable { (action("retry", "Retry", format!("retry-{id}"), &job.endpoint, Some(&job.delivery_id))) }
                @if cancellable { (action("cancel", "Cancel", format!("cancel-{id}"), &job.endpoint, Some(&job.delivery_id))) }
            }
        }
    }
}

/// Why a form changed nothing, with a link `back` to its page.
pub fn notice(message: &str, back: &str) -> Markup {
    let label = match back {
        "/admin/jobs" => "« Queue",
        "/admin/publications" => "« Outbox",
        _ => "« Delivery",
    };
    layout(
        "Not done",
        true,
        html! {
            p { a href=(back) { (label) } }
            p.notice id="form-notice" { (message) }
        },
    )
}

/// A one-button form of the outbox page or a delivery's page: the action,
/// and the publisher, endpoint and delivery it applies to (each when given).
fn publication_form(
    path: &str,
    label: &str,
    id: String,
    fields: [(&str, Option<&str>); 3],
) -> Markup {
    html! {
        form.inline method="post" action={ "/admin/publications/" (path) } {
            @for (name, value) in fields {
                @if let Some(value) = value {
                    input type="hidden" name=(name) value=(value);
                }
            }
            button type="submit" id=(id) { (label) }
        }
    }
}

/// The outbox page: each publisher's backlog with a retry of its failed
/// rows, and the publications `query` selects.
pub fn outbox(query: &OutboxQuery, listing: Result<&OutboxListing, String>) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let state = value(&query.state);
    layout(
        "Outbox",
        true,
        html! {
            p { a href="/admin/list" id="back" { "« All deliveries" } }
            h1 { "Outbox" }
            form.filters method="get" action="/admin/publications" id="outbox-filters" {
                label { "Publisher" input name="publisher" value=(value(&query.publisher)); }
                label { "Endpoint" input name="endpoint" value=(value(&query.endpoint)); }
                label { "Delivery id" input name="delivery_id" value=(value(&query.delivery_id)); }
                label { "State"
                    select name="state" {
                        option value="" selected[state.is_empty()] { "unsent" }
                        @for s in ["pending", "failed", "sent"] {
                            option value=(s) selected[state == s] { (s) }
                        }
                    }
                }
                button type="submit" id="outbox-apply" { "Filter" }
            }
            @match listing {
                Err(problem) => p.notice id="query-error" { (problem) },
                Ok(listing) => {
                    h2 { "Unsent, by publisher" }
                    @if listing.backlog.is_empty() {
                        p id="no-backlog" { "Nothing unsent: every publication is confirmed." }
                    } @else {
                        div.table-wrap {
                            table id="backlog" {
                                thead { tr { th { "Publisher" } th { "Pending" } th { "Failed" } th { "Oldest (UTC)" } th {} } }
                                tbody {
                                    @for b in &listing.backlog {
                                        tr {
                                            td { (b.publisher) }
                                            td { (b.pending) }
                                            td { (b.failed) }
                                            td { (b.oldest.as_deref().unwrap_or("")) }
                                            td {
                                                @if b.failed > 0 {
                                                    (publication_form("retry", &format!("Retry {} failed", b.failed), format!("retry-publisher-{}", encode(&b.publisher)), [("publisher", Some(&b.publisher)), ("endpoint", None), ("delivery_id", None)]))
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    h2 { "Publications" }
                    @if listing.publications.is_empty() {
                        p id="no-publications" { "No publications match." }
                    } @else {
                        div.table-wrap {
                            table id="publications" {
                                thead { tr {
                                    th { "Created (UTC)" } th { "Publisher" } th { "Endpoint" } th { "Delivery id" }
                                    th { "Message id" } th { "Destination" } th { "State" } th { "Attempts" }
                                    th { "Next attempt (UTC)" } th { "Last error" } th {}
                                } }
                                tbody { @for p in &listing.publications { (publication_row(p, true)) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn publication_row(p: &Publication, with_delivery: bool) -> Markup {
    html! {
        tr.publication {
            td { (p.created_at) }
            td { (p.publisher) }
            @if with_delivery {
                td { (p.endpoint) }
                td { a.delivery-link href=(detail_href(&p.endpoint, &p.delivery_id)) { (p.delivery_id) } }
            }
            td { (p.message_id) }
            td { (p.destination) }
            td class={ "state-" (p.state) } { (p.state) @if let Some(c) = &p.confirmation { " (" (c) ")" } }
            td { (p.attempts) }
            td { (p.next_attempt_at) }
            td.error { (p.last_error.as_deref().unwrap_or("")) }
            td {
                @if p.state == "failed" {
                    (publication_form("retry", "Retry", format!("retry-{}", p.id), [("publisher", Some(&p.publisher)), ("endpoint", Some(&p.endpoint)), ("delivery_id", Some(&p.delivery_id))]))
                }
            }
        }
    }
}

/// A delivery's publications on its page, and the form that republishes it.
fn publications_section(record: &KeyRecord) -> Markup {
    let row = &record.detail.summary;
    html! {
        h2 { "Publications" }
        @if record.publications.is_empty() {
            p id="no-publications" { "Not published: its endpoint has no publish handler, or its handlers did not accept it." }
        } @else {
            div.table-wrap {
                table id="publications" {
                    thead { tr {
                        th { "Created (UTC)" } th { "Publisher" } th { "Message id" } th { "Destination" }
                        th { "State" } th { "Attempts" } th { "Next attempt (UTC)" } th { "Last error" } th {}
                    } }
                    tbody {
                        @for p in &record.publications {
                            (publication_row(&super::outbox::Publication::from(p.clone()), false))
                        }
                    }
                }
            }
        }
        p { (publication_form("republish", "Republish to every publisher", "republish".into(), [("publisher", None), ("endpoint", Some(&row.endpoint)), ("delivery_id", Some(&row.delivery_id))])) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_and_query_values_are_percent_encoded() {
        assert_eq!(encode("POST /payments"), "POST%20%2Fpayments");
        assert_eq!(encode("msg_1-a.b~"), "msg_1-a.b~");
        assert_eq!(encode("a&b=c"), "a%26b%3Dc");
        assert_eq!(detail_href("shop", "evt/1"), "/admin/view/shop/evt%2F1");
    }

    #[test]
    fn timestamps_read_as_utc_to_the_second() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T04:12:33.987Z")
            .unwrap()
            .naive_utc();
        assert_eq!(readable(at), "2026-12-01 04:12:33");
    }

    #[test]
    fn the_login_page_is_usable_on_a_phone() {
        let page = login(None).into_string();
        assert!(page.contains(r#"name="viewport""#));
        assert!(page.contains("overflow-x:auto"));
    }
}
