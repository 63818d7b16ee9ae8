//! The listing's opaque cursor: where the previous page ended, as
//! URL-safe base64 of `[received_at, endpoint, delivery_id]` in JSON (JSON
//! rather than a separator, since endpoints and ids may contain any visible
//! character). Clients pass it back unchanged; its form may change.

use crate::store::PagePosition;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::NaiveDateTime;

/// The timestamp as written in a cursor: every digit the database keeps,
/// so that the position read back compares equal to the stored value.
const FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.f";

pub fn encode(position: &PagePosition) -> String {
    let parts = [
        position.received_at.format(FORMAT).to_string(),
        position.endpoint.clone(),
        position.delivery_id.clone(),
    ];
    // An array of strings always serialises.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&parts).unwrap_or_default())
}

/// The position `cursor` names, or `None` for anything this module did not
/// produce.
pub fn decode(cursor: &str) -> Option<PagePosition> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim()).ok()?;
    let [received_at, endpoint, delivery_id]: [String; 3] = serde_json::from_slice(&bytes).ok()?;
    Some(PagePosition {
        received_at: NaiveDateTime::parse_from_str(&received_at, FORMAT).ok()?,
        endpoint,
        delivery_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_to_the_microsecond_whatever_the_key_contains() {
        let position = PagePosition {
            received_at: chrono::DateTime::from_timestamp(1_796_000_000, 123_456_000)
                .unwrap()
                .naive_utc(),
            endpoint: "tenant:a|b POST /payments".into(),
            delivery_id: "msg|\"odd\"".into(),
        };
        let cursor = encode(&position);
        assert!(
            cursor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(decode(&cursor), Some(position));
    }

    #[test]
    fn a_cursor_that_was_not_issued_is_refused() {
        for junk in [
            "",
            "!!!",
            "bm9wZQ",
            &URL_SAFE_NO_PAD.encode(b"[\"x\",\"a\",\"b\"]"),
        ] {
            assert_eq!(decode(junk), None, "{junk}");
        }
    }
}
