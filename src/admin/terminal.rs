//! The `list` command's table: one line per key, columns padded to fit.

use super::listing::Page;
use super::page_text::readable;
use crate::store::DeliverySummary;

const HEADERS: [&str; 9] = [
    "RECEIVED (UTC)",
    "ENDPOINT",
    "DELIVERY ID",
    "EVENT TYPE",
    "STATUS",
    "ATTEMPTS",
    "ANSWER",
    "REPLAYS",
    "LAST ERROR",
];

/// `7 match: 6 completed, 1 in_progress` (with a payload search, `of 340
/// read`), for the whole filter.
pub fn totals_line(page: &Page) -> String {
    let by_status: Vec<String> = page
        .totals
        .by_status
        .iter()
        .map(|(status, count)| format!("{count} {status}"))
        .collect();
    let mut line = format!("{} match: {}", page.totals.matching(), by_status.join(", "));
    if let Some(search) = &page.search {
        line.push_str(&format!(" (payload search: {} keys read)", search.examined));
    }
    line
}

/// The rows as an aligned table with a header line, or a line saying
/// there is none.
pub fn table(rows: &[DeliverySummary]) -> String {
    if rows.is_empty() {
        return "no deliveries match\n".to_owned();
    }
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|row| {
            [
                readable(row.received_at),
                row.endpoint.clone(),
                row.delivery_id.clone(),
                row.event_type.clone().unwrap_or_else(|| "-".into()),
                row.status.clone(),
                row.attempts.to_string(),
                row.response_status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                row.replays.to_string(),
                row.last_error
                    .as_deref()
                    .map(one_line)
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    aligned(&HEADERS, &cells)
}

/// `rows` under `headers`, each column padded to its widest cell (the
/// `list`, `queue list` and `outbox list` tables).
pub fn aligned<R: AsRef<[String]>>(headers: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row.as_ref()) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let headers: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for line in std::iter::once(headers.as_slice()).chain(rows.iter().map(AsRef::as_ref)) {
        let padded: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// An error detail on one line of the table, so that rows stay rows.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_whatever_the_values() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T04:12:33Z")
            .unwrap()
            .naive_utc();
        let row = |id: &str| DeliverySummary {
            endpoint: "shop".into(),
            delivery_id: id.into(),
            event_type: Some("payment.succeeded".into()),
            status: "completed".into(),
            attempts: 1,
            response_status: Some(200),
            replays: 2,
            received_at: at,
            completed_at: Some(at),
            last_error: Some("downstream\nunreachable".into()),
        };
        let text = table(&[row("msg_1"), row("msg_long_long_id")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("RECEIVED (UTC)"));
        assert!(lines[1].starts_with("2026-12-01 04:12:33  shop"));
        let column = |line: &str| line.find("payment.succeeded").unwrap();
        assert_eq!(column(lines[1]), column(lines[2]));
        assert!(lines[1].ends_with("downstream unreachable"));
        assert_eq!(table(&[]), "no deliveries match\n");
    }
}
