//! The listing: its query parameters, and one page of it read from the
//! store. The API, the page and the `list` command all read through here.

use super::cursor;
use super::error::AdminError;
use super::model::{DeliveryItem, DeliveryPage, ListTotals, SearchScan};
use super::payload_search::{self, PayloadSearch};
use crate::store::{COMPLETED, DeliveryFilter, DeliverySummary, IN_PROGRESS, PagePosition, Store};
use chrono::{DateTime, NaiveDateTime};
use serde::Deserialize;
use std::collections::BTreeMap;
use utoipa::IntoParams;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 500;

/// The listing's filters and paging, as query parameters. Empty values
/// count as absent (a form submits its empty fields).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this endpoint (or client-key scope, e.g. `POST /payments`).
    pub endpoint: Option<String>,
    /// `completed` or `in_progress`.
    pub status: Option<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Received at or after: RFC 3339 (`2026-12-01T00:00:00Z`), or a
    /// duration back from now (`24h`).
    pub since: Option<String>,
    /// Received before: RFC 3339, or a duration back from now.
    pub until: Option<String>,
    /// Only delivery ids starting with this (case-sensitive).
    pub id_prefix: Option<String>,
    /// A case-insensitive substring of the verified payload (`%`, `_` and
    /// `\` match themselves). Searches only `since`..`until`: `since`
    /// defaults to 24 h back, the window may span at most 7 days, and at
    /// most `scan_limit` keys of it are read (newest first).
    pub q: Option<String>,
    /// With `q`: how many keys of the window to read at most, 1 to 10000
    /// (default 10000); the answer's `search.capped` says when it stopped
    /// there.
    #[param(value_type = Option<u32>)]
    pub scan_limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Keys per page, 1 to 500 (default 50).
    #[param(value_type = Option<u32>)]
    pub limit: Option<String>,
}

/// A validated listing request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub filter: DeliveryFilter,
    pub after: Option<PagePosition>,
    pub limit: i64,
    /// A payload search; `filter`'s window is then always bounded.
    pub search: Option<PayloadSearch>,
}

fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// The longest text filter: longer than any key or endpoint name stored.
const MAX_TEXT_FILTER: usize = 512;

/// A text filter as given, refused if no stored value could match it in the
/// same way on both backends: PostgreSQL's `text` cannot hold a NUL (the
/// query would fail where SQLite finds nothing), and nothing stored is
/// longer than [`MAX_TEXT_FILTER`].
fn text_filter(
    parameter: &'static str,
    value: &Option<String>,
) -> Result<Option<String>, AdminError> {
    let value = given(value);
    if let Some(text) = &value {
        if text.contains('\0') {
            return Err(AdminError::bad(
                parameter,
                "may not contain a NUL character",
            ));
        }
        if text.len() > MAX_TEXT_FILTER {
            return Err(AdminError::bad(
                parameter,
                format!("longer than {MAX_TEXT_FILTER} bytes"),
            ));
        }
    }
    Ok(value)
}

impl ListQuery {
    /// Checks every parameter; `now` anchors relative times.
    pub fn validate(&self, now: NaiveDateTime) -> Result<PageRequest, AdminError> {
        let status = given(&self.status);
        if let Some(status) = &status {
            if status != COMPLETED && status != IN_PROGRESS {
                return Err(AdminError::bad(
                    "status",
                    format!("{status:?} is neither {COMPLETED:?} nor {IN_PROGRESS:?}"),
                ));
            }
        }
        let limit = count("limit", given(&self.limit), MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT);
        let after = match given(&self.cursor) {
            None => None,
            Some(text) => Some(
                cursor::decode(&text)
                    .ok_or_else(|| AdminError::bad("cursor", "not a cursor this server issued"))?,
            ),
        };
        let mut filter = DeliveryFilter {
            endpoint: text_filter("endpoint", &self.endpoint)?,
            status,
            event_type: text_filter("event_type", &self.event_type)?,
            since: instant("since", given(&self.since), now)?,
            until: instant("until", given(&self.until), now)?,
            id_prefix: text_filter("id_prefix", &self.id_prefix)?,
        };
        let search = match text_filter("q", &self.q)? {
            None => None,
            Some(needle) => Some(PayloadSearch::new(
                &needle,
                &mut filter,
                given(&self.scan_limit),
                now,
            )?),
        };
        Ok(PageRequest {
            filter,
            after,
            limit,
            search,
        })
    }
}

/// A count from 1 to `max`, when given.
pub fn count(
    parameter: &'static str,
    text: Option<String>,
    max: i64,
) -> Result<Option<i64>, AdminError> {
    let Some(text) = text else {
        return Ok(None);
    };
    match text.parse::<i64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
        _ => Err(AdminError::bad(
            parameter,
            format!("{text:?} is not a number from 1 to {max}"),
        )),
    }
}

/// An RFC 3339 instant, or a duration back from `now`.
pub fn instant(
    parameter: &'static str,
    text: Option<String>,
    now: NaiveDateTime,
) -> Result<Option<NaiveDateTime>, AdminError> {
    let Some(text) = text else {
        return Ok(None);
    };
    if let Ok(at) = DateTime::parse_from_rfc3339(&text) {
        return Ok(Some(at.naive_utc()));
    }
    match crate::duration_text::parse_duration(&text) {
        Ok(ago) => Ok(Some(back_from(now, ago))),
        Err(_) => Err(AdminError::bad(
            parameter,
            format!(
                "{text:?} is neither an RFC 3339 time (2026-12-01T00:00:00Z) nor a duration (24h)"
            ),
        )),
    }
}

/// `ago` before `now`; the earliest representable instant for an absurdly
/// long duration, rather than an overflow.
pub fn back_from(now: NaiveDateTime, ago: std::time::Duration) -> NaiveDateTime {
    chrono::TimeDelta::from_std(ago)
        .ok()
        .and_then(|ago| now.checked_sub_signed(ago))
        .unwrap_or(NaiveDateTime::MIN)
}

/// One page of the listing, as the store returned it.
#[derive(Debug, Clone)]
pub struct Page {
    pub rows: Vec<DeliverySummary>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
    /// How many keys the whole filter selects (every page, not this one).
    pub totals: Totals,
    /// What a payload search read.
    pub search: Option<SearchReport>,
}

/// How many keys a filter selects, by status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub by_status: BTreeMap<String, i64>,
}

impl Totals {
    pub fn matching(&self) -> i64 {
        self.by_status.values().sum()
    }
}

/// How much of its window a payload search read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchReport {
    pub since: NaiveDateTime,
    pub until: NaiveDateTime,
    /// Keys of the window read.
    pub examined: i64,
    /// The most it would read.
    pub scan_limit: i64,
    /// It stopped at `scan_limit` with older keys of the window unread:
    /// the totals count only what was read, and older matches are missed.
    pub capped: bool,
}

/// One page of the listing, with the filter's totals. One row more than
/// asked is read to know whether another page follows.
pub async fn fetch_page(store: &Store, request: &PageRequest) -> Result<Page, AdminError> {
    if let Some(search) = &request.search {
        return payload_search::fetch_page(store, request, search).await;
    }
    let mut conn = store.conn().await?;
    let mut rows = conn
        .list_deliveries(&request.filter, request.after.as_ref(), request.limit + 1)
        .await?;
    let more = rows.len() > usize::try_from(request.limit).unwrap_or(usize::MAX);
    rows.truncate(usize::try_from(request.limit).unwrap_or(usize::MAX));
    let next_cursor = next_cursor(&rows, more);
    let totals = Totals {
        by_status: conn
            .count_matching(&request.filter)
            .await?
            .into_iter()
            .collect(),
    };
    Ok(Page {
        rows,
        next_cursor,
        totals,
        search: None,
    })
}

/// The cursor after `rows`, the last of a page, when `more` keys follow.
pub fn next_cursor(rows: &[DeliverySummary], more: bool) -> Option<String> {
    match rows.last() {
        Some(last) if more => Some(cursor::encode(&last.position())),
        _ => None,
    }
}

impl From<Page> for DeliveryPage {
    fn from(page: Page) -> DeliveryPage {
        DeliveryPage {
            totals: ListTotals {
                matching: page.totals.matching(),
                by_status: page.totals.by_status,
            },
            search: page.search.map(|search| SearchScan {
                since: super::model::rfc3339(search.since),
                until: super::model::rfc3339(search.until),
                examined: search.examined,
                scan_limit: search.scan_limit,
                capped: search.capped,
            }),
            items: page.rows.into_iter().map(DeliveryItem::from).collect(),
            next_cursor: page.next_cursor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> NaiveDateTime {
        DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .unwrap()
            .naive_utc()
    }

    #[test]
    fn empty_parameters_mean_no_filter_and_the_default_page_size() {
        let query = ListQuery {
            endpoint: Some(String::new()),
            status: Some(" ".into()),
            ..ListQuery::default()
        };
        let request = query.validate(now()).unwrap();
        assert_eq!(request.filter, DeliveryFilter::default());
        assert_eq!(request.limit, DEFAULT_LIMIT);
        assert_eq!(request.after, None);
    }

    #[test]
    fn since_takes_rfc3339_or_a_duration_back_from_now() {
        let query = ListQuery {
            since: Some("24h".into()),
            until: Some("2026-12-01T13:00:00+01:00".into()),
            ..ListQuery::default()
        };
        let filter = query.validate(now()).unwrap().filter;
        assert_eq!(filter.since, Some(now() - chrono::TimeDelta::hours(24)));
        assert_eq!(filter.until, Some(now()));
    }

    #[test]
    fn a_bad_parameter_is_named() {
        let cases = [
            (
                ListQuery {
                    status: Some("done".into()),
                    ..Default::default()
                },
                "`status`",
            ),
            (
                ListQuery {
                    limit: Some("0".into()),
                    ..Default::default()
                },
                "`limit`",
            ),
            (
                ListQuery {
                    limit: Some("501".into()),
                    ..Default::default()
                },
                "`limit`",
            ),
            (
                ListQuery {
                    since: Some("yesterday".into()),
                    ..Default::default()
                },
                "`since`",
            ),
            (
                ListQuery {
                    cursor: Some("nope".into()),
                    ..Default::default()
                },
                "`cursor`",
            ),
        ];
        for (query, named) in cases {
            let message = query.validate(now()).unwrap_err().to_string();
            assert!(message.contains(named), "{message}");
        }
    }
}
