//! `forward`: POSTs each verified event to a downstream URL, with the
//! delivery's key as the downstream's `Idempotency-Key`, a timeout and
//! bounded retries; the downstream's answer is stored with the delivery.

use super::{Event, Handler, HandlerError, Reconciled};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

/// The most of a downstream's answer that is kept with the delivery. The
/// answer is stored and replayed with every redelivery, and a downstream
/// (or whoever answers in its place) could otherwise send without end.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The pause before the first retry; each retry doubles it...
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// ...up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// `[forwarders.NAME]`: a `forward` handler usable in `handlers = [...]`.
/// Its `Debug` masks the URL's password: a downstream's URL may carry one.
#[derive(Clone)]
pub struct ForwarderSettings {
    pub name: String,
    pub url: String,
    pub timeout: Duration,
    pub retries: u32,
}

impl ForwarderSettings {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_RETRIES: u32 = 2;
}

impl std::fmt::Debug for ForwarderSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwarderSettings")
            .field("name", &self.name)
            .field("url", &crate::secret::redact_url(&self.url))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .finish()
    }
}

pub struct Forward {
    url: String,
    timeout: Duration,
    retries: u32,
    client: reqwest::Client,
}

/// What one POST to the downstream came to.
enum Answer {
    Accepted(Value),
    Refused(StatusCode),
    /// A timeout, a connection error or a 5xx: the downstream may or may not
    /// have acted; the same key makes asking again safe.
    Unsure(String),
}

impl Forward {
    pub fn new(url: &str, timeout: Duration, retries: u32) -> Forward {
        Forward {
            url: url.to_owned(),
            timeout,
            retries,
            client: reqwest::Client::new(),
        }
    }

    async fn post(&self, event: &Event) -> Answer {
        let mut request = self
            .client
            .post(&self.url)
            .timeout(self.timeout)
            .header("content-type", "application/json")
            .header("idempotency-key", event.idempotency_key())
            .header("x-webhook-endpoint", &event.endpoint)
            .body(event.raw.clone());
        if let Some(event_type) = &event.event_type {
            request = request.header("x-webhook-event-type", event_type);
        }
        // The handler's span as the downstream call's parent, so that the
        // downstream's own spans join the delivery's trace.
        for (name, value) in crate::telemetry::traces::traceparent_headers() {
            request = request.header(name, value);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return Answer::Unsure(without_url(&error)),
        };
        let status = response.status();
        if status.is_server_error()
            || status == StatusCode::CONFLICT
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            return Answer::Unsure(format!("the downstream answered {status}"));
        }
        if !status.is_success() {
            return Answer::Refused(status);
        }
        match read_capped(response, MAX_ANSWER_BYTES).await {
            Ok(Some(body)) => {
                let body = String::from_utf8_lossy(&body);
                let body = serde_json::from_str(&body).unwrap_or(Value::String(body.into_owned()));
                Answer::Accepted(json!({ "status": status.as_u16(), "body": body }))
            }
            // The downstream accepted the event: its answer is too long to
            // keep, not a reason to ask again.
            Ok(None) => Answer::Accepted(json!({
                "status": status.as_u16(),
                "body": null,
                "body_omitted": format!("longer than {MAX_ANSWER_BYTES} bytes"),
            })),
            Err(error) => Answer::Unsure(without_url(&error)),
        }
    }
}

/// The body of `response` if it is at most `cap` bytes, read chunk by chunk;
/// `None` as soon as it is longer, without reading the rest.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|length| length > cap as u64)
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The pause before retry number `retry` (1 for the first): doubling from
/// [`FIRST_BACKOFF`], saturating at [`MAX_BACKOFF`] however many retries
/// are configured.
fn backoff(retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry.saturating_sub(1));
    FIRST_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

/// reqwest's messages name the URL, which may carry credentials.
fn without_url(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "the downstream timed out".to_owned()
    } else if error.is_connect() {
        "the downstream is unreachable".to_owned()
    } else {
        "the request to the downstream failed".to_owned()
    }
}

#[async_trait::async_trait(?Send)]
impl Handler for Forward {
    fn external(&self) -> bool {
        true
    }

    async fn perform(&self, event: &Event) -> Result<Option<Value>, HandlerError> {
        let mut last = String::new();
        for attempt in 0..=self.retries {
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            match self.post(event).await {
                Answer::Accepted(answer) => return Ok(Some(answer)),
                Answer::Refused(status) => {
                    return Err(HandlerError::Rejected(format!(
                        "the downstream refused the event with {status}"
                    )));
                }
                Answer::Unsure(reason) => last = reason,
            }
        }
        Err(HandlerError::Failed(
            format!("{last} after {} attempt(s)", self.retries + 1).into(),
        ))
    }

    /// The downstream deduplicates on the key, so asking again is asking what
    /// happened: a 2xx is its stored answer.
    async fn reconcile(&self, event: &Event) -> Result<Reconciled, HandlerError> {
        Ok(match self.post(event).await {
            Answer::Accepted(answer) => Reconciled::Done(Some(answer)),
            Answer::Refused(_) => Reconciled::NotDone,
            Answer::Unsure(_) => Reconciled::Unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_then_saturates_instead_of_overflowing() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(3), Duration::from_millis(400));
        assert_eq!(backoff(9), Duration::from_millis(25_600));
        assert_eq!(backoff(10), MAX_BACKOFF);
        // `2u32.pow(32)` overflowed (a panic in debug builds).
        for retry in [32, 33, 64, 1_000, u32::MAX] {
            assert_eq!(backoff(retry), MAX_BACKOFF, "{retry}");
        }
        assert_eq!(backoff(0), FIRST_BACKOFF);
    }
}
