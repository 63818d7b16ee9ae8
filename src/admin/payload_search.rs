//! The listing's payload search: keys whose verified payload contains a
//! text, ignoring case, within a bounded window, read by a bounded scan.
//!
//! No index can answer a substring of a body, and the stored body is bytes
//! (`BLOB`/`bytea`), which neither backend compares as text in the same way
//! (PostgreSQL's `ILIKE` folds case by its locale, SQLite's `LIKE` only
//! ASCII, and neither works on bytes). So the store reads the window's keys
//! newest first, in chunks, with their bodies, exactly as the listing
//! filters them, and the text is matched here: once for both backends, as a
//! literal (`%`, `_` and `\` are characters like any other, nothing to
//! escape), Unicode case folded. What it costs is bounded twice: the window
//! (24 h unless given, 7 days at most) and the keys read (`scan_limit`,
//! 10 000 at most); the answer says when the second bound stopped it.

use super::error::AdminError;
use super::listing::{Page, PageRequest, SearchReport, Totals, back_from, count, next_cursor};
use crate::store::{DeliveryFilter, PagePosition, Store};
use chrono::NaiveDateTime;
use std::time::Duration;

/// The window searched when `since` is not given.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// The widest window searched.
pub const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most keys one search reads, and its default.
pub const MAX_SCAN: i64 = 10_000;
/// Keys read per query: their bodies are held only while matched.
const CHUNK: i64 = 200;

/// A validated payload search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadSearch {
    /// The text, case folded.
    needle: String,
    since: NaiveDateTime,
    until: NaiveDateTime,
    scan_limit: i64,
}

impl PayloadSearch {
    /// The search for `needle`, bounding `filter`'s window: `since`
    /// defaults to [`DEFAULT_WINDOW`] before `until` (itself `now` unless
    /// given), and a window wider than [`MAX_WINDOW`] is refused.
    pub fn new(
        needle: &str,
        filter: &mut DeliveryFilter,
        scan_limit: Option<String>,
        now: NaiveDateTime,
    ) -> Result<PayloadSearch, AdminError> {
        let scan_limit = count("scan_limit", scan_limit, MAX_SCAN)?.unwrap_or(MAX_SCAN);
        let until = filter.until.unwrap_or(now);
        let since = filter
            .since
            .unwrap_or_else(|| back_from(until, DEFAULT_WINDOW));
        let widest = back_from(until, MAX_WINDOW);
        if since < widest {
            return Err(AdminError::bad(
                "since",
                "a payload search (`q`) looks at most 7 days back from `until`: narrow the window",
            ));
        }
        filter.since = Some(since);
        filter.until = Some(until);
        Ok(PayloadSearch {
            needle: needle.to_lowercase(),
            since,
            until,
            scan_limit,
        })
    }

    fn matches(&self, body: Option<&[u8]>) -> bool {
        body.is_some_and(|body| {
            String::from_utf8_lossy(body)
                .to_lowercase()
                .contains(&self.needle)
        })
    }
}

/// Whether the scan, at `row`, has passed the previous page's last row
/// `after`. Rows come in the listing's order, so the cursor's own row marks
/// the place; an older timestamp also does, should that row have been
/// purged meanwhile. (Text order is the database's collation, so it is not
/// compared here.)
fn passed(row: &PagePosition, after: &PagePosition) -> bool {
    row.received_at < after.received_at
}

/// One page of the keys whose payload matches, and the totals of every
/// match the scan read. The scan always starts at the window's newest key,
/// so that the totals are the same on every page; the page is the matches
/// after the cursor.
pub async fn fetch_page(
    store: &Store,
    request: &PageRequest,
    search: &PayloadSearch,
) -> Result<Page, AdminError> {
    let mut conn = store.conn().await?;
    let limit = usize::try_from(request.limit).unwrap_or(usize::MAX);
    let mut past_cursor = request.after.is_none();
    let mut totals = Totals::default();
    let mut rows = Vec::new();
    let mut more = false;
    let mut examined = 0;
    let mut position: Option<PagePosition> = None;
    let mut capped = false;
    loop {
        let chunk = CHUNK.min(search.scan_limit - examined);
        if chunk == 0 {
            // Read as far as allowed: is anything older left unread?
            capped = !conn
                .list_deliveries(&request.filter, position.as_ref(), 1)
                .await?
                .is_empty();
            break;
        }
        let read = conn
            .scan_deliveries(&request.filter, position.as_ref(), chunk)
            .await?;
        let last_chunk = i64::try_from(read.len()).unwrap_or(i64::MAX) < chunk;
        for (summary, body) in read {
            examined += 1;
            let here = summary.position();
            let is_cursor = request.after.as_ref() == Some(&here);
            if !past_cursor
                && request
                    .after
                    .as_ref()
                    .is_some_and(|after| is_cursor || passed(&here, after))
            {
                past_cursor = true;
            }
            position = Some(here);
            if !search.matches(body.as_deref()) {
                continue;
            }
            *totals.by_status.entry(summary.status.clone()).or_default() += 1;
            if past_cursor && !is_cursor {
                if rows.len() < limit {
                    rows.push(summary);
                } else {
                    more = true;
                }
            }
        }
        if last_chunk {
            break;
        }
    }
    let next_cursor = next_cursor(&rows, more);
    Ok(Page {
        rows,
        next_cursor,
        totals,
        search: Some(SearchReport {
            since: search.since,
            until: search.until,
            examined,
            scan_limit: search.scan_limit,
            capped,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .naive_utc()
    }

    #[test]
    fn the_window_defaults_to_a_day_and_is_at_most_a_week() {
        let now = at("2026-12-02T12:00:00Z");
        let mut filter = DeliveryFilter::default();
        let search = PayloadSearch::new("Pay", &mut filter, None, now).unwrap();
        assert_eq!(filter.since, Some(at("2026-12-01T12:00:00Z")));
        assert_eq!(filter.until, Some(now));
        assert_eq!(search.scan_limit, MAX_SCAN);
        assert_eq!(search.needle, "pay");

        let mut week = DeliveryFilter {
            since: Some(at("2026-11-25T12:00:00Z")),
            ..DeliveryFilter::default()
        };
        assert!(PayloadSearch::new("x", &mut week, None, now).is_ok());
        let mut longer = DeliveryFilter {
            since: Some(at("2026-11-25T11:59:59Z")),
            ..DeliveryFilter::default()
        };
        let refused = PayloadSearch::new("x", &mut longer, None, now).unwrap_err();
        assert!(refused.to_string().contains("`since`"), "{refused}");
        for bad in ["0", "10001", "many"] {
            let refused =
                PayloadSearch::new("x", &mut DeliveryFilter::default(), Some(bad.into()), now)
                    .unwrap_err();
            assert!(refused.to_string().contains("`scan_limit`"), "{refused}");
        }
    }

    #[test]
    fn the_text_is_literal_and_case_is_ignored() {
        let now = at("2026-12-02T12:00:00Z");
        let search = |needle: &str| {
            PayloadSearch::new(needle, &mut DeliveryFilter::default(), None, now).unwrap()
        };
        assert!(search("ÉTÉ").matches(Some("un été".as_bytes())));
        assert!(search("50%").matches(Some(b"off: 50%")));
        assert!(!search("50%").matches(Some(b"off: 500")));
        assert!(!search("a_b").matches(Some(b"axb")));
        assert!(search("a\\b").matches(Some(b"a\\b")));
        assert!(!search("x").matches(None));
    }
}
