//! Reading a request body under a limit, before anything hashes or parses it.

use crate::problem::Problem;
use actix_web::http::header::{CONTENT_LENGTH, HeaderMap};
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

/// Reads `payload` whole, refusing it as soon as it is known to exceed
/// `limit`: from `Content-Length` before reading anything, else while
/// reading, so an oversized body is never buffered.
pub async fn read_limited<S, E>(
    headers: &HeaderMap,
    mut payload: S,
    limit: usize,
) -> Result<Bytes, Problem>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(Problem::payload_too_large(limit));
    }
    // A body that arrives as one chunk (most webhooks: a few hundred bytes
    // in the request's first read) is that chunk, not a copy of it.
    let first = match payload.next().await {
        None => return Ok(Bytes::new()),
        Some(chunk) => chunk.map_err(|_| Problem::unreadable_body())?,
    };
    if first.len() > limit {
        return Err(Problem::payload_too_large(limit));
    }
    let Some(second) = payload.next().await else {
        return Ok(first);
    };
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).clamp(first.len(), limit));
    body.extend_from_slice(&first);
    let mut next = Some(second);
    while let Some(chunk) = next {
        let chunk = chunk.map_err(|_| Problem::unreadable_body())?;
        if body.len() + chunk.len() > limit {
            return Err(Problem::payload_too_large(limit));
        }
        body.extend_from_slice(&chunk);
        next = payload.next().await;
    }
    Ok(body.freeze())
}
