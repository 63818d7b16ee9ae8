//! Parts of the listing page: the endpoint drop-down, the totals and the
//! payload search's report above the table, and long values shortened so
//! that the table fits a 1280 px screen (the full value in a tooltip, and
//! on the key page).

use super::listing::{Page, SearchReport};
use super::page_text::readable;
use maud::{Markup, html};

/// Longer ids show their start and end around an ellipsis.
const ID_SHOWN: usize = 24;
/// Longer errors show their start.
const ERROR_SHOWN: usize = 160;

/// The first `head` and last `tail` characters of `text` around `…`, or
/// `text` when it is short enough.
fn shortened(text: &str, head: usize, tail: usize) -> Option<String> {
    let count = text.chars().count();
    if count <= head + tail + 1 {
        return None;
    }
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(count - tail).collect();
    Some(format!("{start}…{end}"))
}

/// A delivery id as the listing shows it; `None`: in full.
pub fn short_id(id: &str) -> Option<String> {
    shortened(id, ID_SHOWN - 9, 8)
}

/// A last error as the listing shows it; `None`: in full.
pub fn short_error(error: &str) -> Option<String> {
    shortened(error, ERROR_SHOWN, 0)
}

/// The endpoint filter: the configured endpoints and client-key scopes,
/// and the one asked for if it is none of those (a link may carry any).
pub fn endpoint_select(endpoints: &[String], chosen: &str) -> Markup {
    let listed = endpoints.iter().any(|e| e == chosen);
    html! {
        select name="endpoint" id="endpoint" {
            option value="" selected[chosen.is_empty()] { "any" }
            @for endpoint in endpoints {
                option value=(endpoint) selected[endpoint == chosen] { (endpoint) }
            }
            @if !chosen.is_empty() && !listed {
                option value=(chosen) selected { (chosen) }
            }
        }
    }
}

/// "N deliveries match: a completed, b in progress", and what a payload
/// search read.
pub fn totals(page: &Page) -> Markup {
    let matching = page.totals.matching();
    html! {
        p id="totals" {
            strong id="total-matching" { (matching) }
            @if matching == 1 { " delivery matches" } @else { " deliveries match" }
            @if matching > 0 {
                ": "
                @for (i, (status, count)) in page.totals.by_status.iter().enumerate() {
                    @if i > 0 { ", " }
                    span id={ "total-" (status) } { (count) } " " (status.replace('_', " "))
                }
            }
        }
        @if let Some(search) = &page.search { (search_report(search)) }
    }
}

fn search_report(search: &SearchReport) -> Markup {
    html! {
        p id="search-report" {
            "Payload search of " (readable(search.since)) " to " (readable(search.until)) " UTC: "
            (search.examined) " deliveries read."
        }
        @if search.capped {
            p.notice id="search-capped" {
                "The search stopped after reading " (search.scan_limit)
                " deliveries; older ones of the window were not searched and the totals count only what was read. Narrow the window (since, until) or the filters."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_shortened_around_an_ellipsis() {
        assert_eq!(short_id("msg_1"), None);
        assert_eq!(short_id(&"a".repeat(24)), None);
        let id = format!("evt_{}_end", "x".repeat(60));
        assert_eq!(short_id(&id).as_deref(), Some("evt_xxxxxxxxxxx…xxxx_end"));
        assert_eq!(short_error("short"), None);
        let error = "é".repeat(200);
        assert_eq!(short_error(&error).map(|e| e.chars().count()), Some(161));
    }
}
