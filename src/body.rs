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

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;
    use futures_util::stream;

    /// `chunks` read under `limit`, with `declared` as `Content-Length`.
    async fn read(
        chunks: Vec<Result<&'static [u8], ()>>,
        declared: Option<usize>,
        limit: usize,
    ) -> Result<Bytes, Problem> {
        let mut headers = HeaderMap::new();
        if let Some(length) = declared {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        let chunks = chunks
            .into_iter()
            .map(|chunk| chunk.map(Bytes::from_static));
        read_limited(&headers, stream::iter(chunks), limit).await
    }

    fn slug(read: Result<Bytes, Problem>) -> String {
        match read {
            Ok(body) => panic!("read {} bytes, expected a refusal", body.len()),
            Err(problem) => problem.slug().to_owned(),
        }
    }

    #[tokio::test]
    async fn one_chunk_is_that_chunk_and_several_are_joined() {
        let single: &'static [u8] = b"{\"id\":1}";
        let body = read(vec![Ok(single)], None, 64).await.expect("one chunk");
        assert_eq!(body.as_ptr(), single.as_ptr(), "one chunk is not copied");
        let body = read(vec![Ok(b"{\"id\""), Ok(b":"), Ok(b"1}")], Some(8), 64)
            .await
            .expect("three chunks");
        assert_eq!(&body[..], single);
        assert!(read(vec![], None, 64).await.expect("no chunk").is_empty());
        // Exactly at the limit is allowed, in one chunk or in several.
        assert_eq!(
            read(vec![Ok(b"1234")], None, 4)
                .await
                .expect("at the limit")
                .len(),
            4
        );
        assert_eq!(
            read(vec![Ok(b"12"), Ok(b"34")], None, 4)
                .await
                .expect("at the limit")
                .len(),
            4
        );
    }

    #[tokio::test]
    async fn past_the_limit_or_unreadable_is_refused_whichever_chunk_it_is() {
        assert_eq!(
            slug(read(vec![Ok(b"12")], Some(5), 4).await),
            "payload-too-large"
        );
        assert_eq!(
            slug(read(vec![Ok(b"12345")], None, 4).await),
            "payload-too-large"
        );
        assert_eq!(
            slug(read(vec![Ok(b"12"), Ok(b"345")], None, 4).await),
            "payload-too-large"
        );
        assert_eq!(
            slug(read(vec![Ok(b"12"), Ok(b"3"), Ok(b"45")], None, 4).await),
            "payload-too-large"
        );
        assert_eq!(slug(read(vec![Err(())], None, 4).await), "unreadable-body");
        assert_eq!(
            slug(read(vec![Ok(b"12"), Err(())], None, 4).await),
            "unreadable-body"
        );
    }
}
