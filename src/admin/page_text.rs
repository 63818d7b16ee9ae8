//! How the pages write times and links: UTC to the second, and paths
//! and query values percent-encoded. Shared by the page's views.

use chrono::NaiveDateTime;

/// `2026-12-01 04:12:33`: the page shows UTC, to the second.
pub fn readable(at: NaiveDateTime) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a
/// path segment or a query value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if crate::uri_text::is_unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub fn detail_href(endpoint: &str, delivery_id: &str) -> String {
    format!("/admin/view/{}/{}", encode(endpoint), encode(delivery_id))
}
