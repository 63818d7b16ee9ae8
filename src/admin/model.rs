//! What the admin API answers, as JSON (and in the OpenAPI document).

use super::outbox::Publication;
use crate::store::outbox::PublicationRow;
use crate::store::{DeliveryDetail, DeliverySummary, HistoryEntry};
use chrono::NaiveDateTime;
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// One key in the listing.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct DeliveryItem {
    /// The endpoint, or a client-key scope such as `POST /payments`.
    pub endpoint: String,
    pub delivery_id: String,
    pub event_type: Option<String>,
    /// `completed` or `in_progress`.
    pub status: String,
    pub attempts: i32,
    /// The stored answer's HTTP status, once completed.
    pub response_status: Option<i32>,
    /// How many redeliveries were answered from the store.
    pub replays: i32,
    /// RFC 3339, UTC.
    pub received_at: String,
    pub completed_at: Option<String>,
    /// The detail of the key's latest `released` or `reprocess-failed`
    /// history entry.
    pub last_error: Option<String>,
}

/// A page of the listing, newest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryPage {
    pub items: Vec<DeliveryItem>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
    /// What the whole filter selects, on every page.
    pub totals: ListTotals,
    /// With `q`: how much of the window the payload search read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchScan>,
}

/// How many keys the filter selects. With `q`, among the keys the search
/// read (all of the window unless `search.capped`).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct ListTotals {
    pub matching: i64,
    /// By status (`completed`, `in_progress`); a status nothing has is absent.
    pub by_status: BTreeMap<String, i64>,
}

/// The bounds of a payload search and what it read of them.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct SearchScan {
    /// The window searched (RFC 3339, UTC): `since` inclusive, `until`
    /// exclusive.
    pub since: String,
    pub until: String,
    /// Keys of the window read, newest first.
    pub examined: i64,
    /// The most it reads.
    pub scan_limit: i64,
    /// `true`: it stopped at `scan_limit` with older keys of the window
    /// unread; the totals count only what it read. Narrow the window.
    pub capped: bool,
}

/// The answer stored for a key, replayed to every repeat.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoredAnswer {
    pub status: Option<i32>,
    pub content_type: Option<String>,
    pub location: Option<String>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: Option<String>,
}

/// One entry of a key's history.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryItem {
    pub at: String,
    /// `takeover`, `released`, `reconciled`, `reprocessed`, `reprocess-failed`,
    /// `retried`, `cancelled`, `republished`, ...
    pub kind: String,
    pub actor: Option<String>,
    pub detail: Option<String>,
}

/// One key in full.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryView {
    pub delivery: DeliveryItem,
    pub response: StoredAnswer,
    /// The verified request body as received (text; invalid UTF-8 replaced).
    pub payload: Option<String>,
    /// Oldest first.
    pub history: Vec<HistoryItem>,
    /// Its outbox rows, oldest first (the original publications, then any
    /// an operator republished).
    pub publications: Vec<Publication>,
}

/// Keys received within a window, by endpoint and status.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Stats {
    /// The window as asked, e.g. `24h`.
    pub window: String,
    /// The window's start (RFC 3339, UTC).
    pub since: String,
    pub endpoints: Vec<EndpointStats>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndpointStats {
    pub endpoint: String,
    pub total: i64,
    /// Keys by status (`completed`, `in_progress`).
    pub by_status: BTreeMap<String, i64>,
}

/// RFC 3339 with milliseconds, UTC, as every timestamp of the API.
pub fn rfc3339(at: NaiveDateTime) -> String {
    at.and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn text(bytes: Option<Vec<u8>>) -> Option<String> {
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned())
}

impl From<DeliverySummary> for DeliveryItem {
    fn from(row: DeliverySummary) -> DeliveryItem {
        DeliveryItem {
            endpoint: row.endpoint,
            delivery_id: row.delivery_id,
            event_type: row.event_type,
            status: row.status,
            attempts: row.attempts,
            response_status: row.response_status,
            replays: row.replays,
            received_at: rfc3339(row.received_at),
            completed_at: row.completed_at.map(rfc3339),
            last_error: row.last_error,
        }
    }
}

impl From<HistoryEntry> for HistoryItem {
    fn from(entry: HistoryEntry) -> HistoryItem {
        HistoryItem {
            at: rfc3339(entry.at),
            kind: entry.kind,
            actor: entry.actor,
            detail: entry.detail,
        }
    }
}

impl DeliveryView {
    pub fn new(
        detail: DeliveryDetail,
        history: Vec<HistoryEntry>,
        publications: Vec<PublicationRow>,
    ) -> DeliveryView {
        DeliveryView {
            response: StoredAnswer {
                status: detail.summary.response_status,
                content_type: detail.response_content_type,
                location: detail.response_location,
                body: text(detail.response_body),
            },
            delivery: detail.summary.into(),
            payload: text(detail.request_body),
            history: history.into_iter().map(HistoryItem::from).collect(),
            publications: publications.into_iter().map(Publication::from).collect(),
        }
    }
}
