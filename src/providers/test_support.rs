//! What the providers' tests build their requests from.

use super::{Provider, ProviderSpec, Rejection, SignedRequest, Verified};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

/// A spec with `secrets` and no `hmac` table.
pub fn spec(secrets: &[&str], tolerance: Option<Duration>) -> ProviderSpec {
    ProviderSpec {
        secrets: secrets.iter().map(|s| s.to_string()).collect(),
        tolerance,
        ..ProviderSpec::default()
    }
}

/// A header map with every pair, in order; a name given twice is sent twice.
pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

pub fn at(timestamp: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(timestamp, 0).unwrap()
}

/// The headers `sign` returned, as the pairs `headers` takes.
pub fn pairs(signed: &[(String, String)]) -> Vec<(&str, &str)> {
    signed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// `p.verify` of `body` under `pairs`, with the clock at `now`.
pub fn verify_request(
    p: &dyn Provider,
    pairs: &[(&str, &str)],
    body: &[u8],
    now: i64,
) -> Result<Verified, Rejection> {
    with_request(pairs, body, |request| p.verify(request, at(now)))
}

/// `p.delivery_id` of `payload` under `pairs`.
pub fn delivery_id_for(
    p: &dyn Provider,
    pairs: &[(&str, &str)],
    body: &[u8],
    payload: &Value,
) -> Result<String, Rejection> {
    with_request(pairs, body, |request| {
        p.deliveries(request, payload)
            .map(|mut deliveries| deliveries.remove(0).key)
    })
}

/// `p.event_type` of `payload` under `pairs`.
pub fn event_type_for(
    p: &dyn Provider,
    pairs: &[(&str, &str)],
    body: &[u8],
    payload: &Value,
) -> Option<String> {
    with_request(pairs, body, |request| {
        p.deliveries(request, payload)
            .ok()
            .and_then(|mut deliveries| deliveries.remove(0).event_type)
    })
}

fn with_request<T>(
    pairs: &[(&str, &str)],
    body: &[u8],
    f: impl FnOnce(&SignedRequest<'_>) -> T,
) -> T {
    let map = headers(pairs);
    f(&SignedRequest::post(&map, body))
}

/// Whether `result` names `header` as malformed.
pub fn malformed_in(result: &Result<Verified, Rejection>, header: &str) -> bool {
    matches!(result, Err(Rejection::MalformedHeader { header: h, .. }) if *h == header)
}

/// Asserts that a delivery signed at `timestamp` verifies with the clock up
/// to `tolerance_secs` behind or ahead of it, and is stale one second beyond
/// either way.
pub fn assert_tolerated_either_way(
    verify_at: impl Fn(i64) -> Result<Verified, Rejection>,
    timestamp: i64,
    tolerance_secs: i64,
) {
    assert!(verify_at(timestamp + tolerance_secs).is_ok());
    assert!(verify_at(timestamp - tolerance_secs).is_ok());
    let stale = Err(Rejection::StaleTimestamp {
        tolerance_secs: tolerance_secs.unsigned_abs(),
    });
    assert_eq!(verify_at(timestamp + tolerance_secs + 1), stale);
    assert_eq!(verify_at(timestamp - tolerance_secs - 1), stale);
}
