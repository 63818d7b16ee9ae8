//! The sending side, for `send`, tests and benchmarks: sign a body as the
//! endpoint's provider would, and post it.

use crate::providers::{Provider, Rejection, SignError, SignInput, SignedRequest};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

/// A signed delivery, ready to post.
#[derive(Debug, Clone)]
pub struct SignedDelivery {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The query string to post with (schemes that sign the URL), without
    /// `?`; empty: none.
    pub query: String,
}

impl SignedDelivery {
    /// `url` with this delivery's query string.
    pub fn url(&self, url: &str) -> String {
        if self.query.is_empty() {
            url.to_owned()
        } else if url.contains('?') {
            format!("{url}&{}", self.query)
        } else {
            format!("{url}?{}", self.query)
        }
    }

    /// The content type the scheme posts (a form for Twilio and Braintree).
    pub fn content_type(&self) -> &str {
        self.headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map_or("application/json", |(_, value)| value.as_str())
    }
}

pub fn sign(
    provider: &dyn Provider,
    delivery_id: &str,
    timestamp: i64,
    event_type: Option<&str>,
    body: Vec<u8>,
) -> Result<SignedDelivery, SignError> {
    sign_with_key(provider, delivery_id, timestamp, event_type, body, None)
}

/// [`sign`], with a private key for the providers that sign asymmetrically
/// (Discord, PayPal): a test key, never one the receiver holds.
pub fn sign_with_key(
    provider: &dyn Provider,
    delivery_id: &str,
    timestamp: i64,
    event_type: Option<&str>,
    body: Vec<u8>,
    signing_key: Option<&str>,
) -> Result<SignedDelivery, SignError> {
    let signed = provider.sign(&SignInput {
        delivery_id,
        timestamp,
        body: &body,
        event_type,
        signing_key,
    })?;
    Ok(SignedDelivery {
        headers: signed.headers,
        body: signed.body.unwrap_or(body),
        query: signed.query,
    })
}

/// What the receiver will make of a signed delivery: the key it stores it
/// under and the event type it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub key: String,
    pub event_type: Option<String>,
}

/// The keys and event types `provider` reads from `delivery`, exactly as the
/// receiver reads them: from a header for some schemes, from the body for
/// others (Stripe's `evt_...`, Paddle's `event_id`); one per batch item.
pub fn identity(
    provider: &dyn Provider,
    delivery: &SignedDelivery,
) -> Result<Vec<Identity>, Rejection> {
    let mut headers = HeaderMap::new();
    for (name, value) in &delivery.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            headers.append(name, value);
        }
    }
    let request = SignedRequest {
        headers: &headers,
        body: &delivery.body,
        method: "POST",
        query: &delivery.query,
    };
    let payload = provider.payload(&request).unwrap_or(Value::Null);
    Ok(provider
        .deliveries(&request, &payload)?
        .into_iter()
        .map(|d| Identity {
            key: d.key,
            event_type: d.event_type,
        })
        .collect())
}

/// A sample body for `provider`: the catalogue's example for its entries
/// (the id where it reads ids, a batch where it takes batches, a form or an
/// XML document where it posts those), otherwise [`sample_payment`].
pub fn sample_body(provider: &dyn Provider, delivery_id: &str) -> Vec<u8> {
    match crate::providers::entries()
        .iter()
        .find(|entry| entry.name == provider.name())
    {
        Some(entry) => crate::providers::example_body(entry, delivery_id, "payment.succeeded"),
        None => sample_payment(delivery_id),
    }
}

/// A `payment.succeeded` event in the shape the built-in payments handler
/// reads, for trying the receiver out. It carries `delivery_id` where every
/// body-keyed scheme looks for it (`id`, `event_id`), and depends on nothing
/// else, so sending the same id twice sends the same body (a redelivery).
pub fn sample_payment(delivery_id: &str) -> Vec<u8> {
    let body = json!({
        "id": delivery_id,
        "event_id": delivery_id,
        "type": "payment.succeeded",
        "event_type": "payment.succeeded",
        "data": {
            "id": format!("pay_{}", delivery_id.trim_start_matches("msg_")),
            "order_id": "order_1001",
            "amount": 4200,
            "currency": "EUR"
        }
    });
    body.to_string().into_bytes()
}

/// What the receiver answered.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot reach {url}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

impl SendError {
    /// Nothing accepted the connection: the request never reached a
    /// receiver, so posting it again cannot deliver it twice.
    pub fn is_refused(&self) -> bool {
        match self {
            SendError::Transport { source, .. } => source.is_connect(),
        }
    }
}

/// Posts a signed delivery and returns the answer, whatever its status.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    delivery: &SignedDelivery,
) -> Result<Answer, SendError> {
    // reqwest's own message names the URL too; the variant already does.
    let transport = |source: reqwest::Error| SendError::Transport {
        url: url.to_owned(),
        source: source.without_url(),
    };
    let mut request = client
        .post(delivery.url(url))
        .header("content-type", delivery.content_type())
        .body(delivery.body.clone());
    for (name, value) in &delivery.headers {
        if !name.eq_ignore_ascii_case("content-type") {
            request = request.header(name, value);
        }
    }
    let response = request.send().await.map_err(transport)?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter(|(name, _)| {
            matches!(
                name.as_str(),
                "content-type" | "idempotent-replayed" | "retry-after"
            )
        })
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = response.text().await.map_err(transport)?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// A runnable curl command that posts `body_file` (or, where signing changed
/// the body, the signed body itself) with `delivery`'s headers.
pub fn curl_command(url: &str, delivery: &SignedDelivery, body_file: Option<&str>) -> String {
    let mut command = format!(
        "curl -sS -i -X POST {} -H {}",
        shell_quote(&delivery.url(url)),
        shell_quote(&format!("content-type: {}", delivery.content_type()))
    );
    for (name, value) in delivery
        .headers
        .iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("content-type"))
    {
        command.push_str(&format!(" -H {}", shell_quote(&format!("{name}: {value}"))));
    }
    match body_file {
        Some(file) => command.push_str(&format!(" --data-binary @{}", shell_quote(file))),
        None => command.push_str(&format!(
            " --data-binary {}",
            shell_quote(&String::from_utf8_lossy(&delivery.body))
        )),
    }
    command
}

/// A fixture object `{headers, body}`.
pub fn fixture_json(delivery: &SignedDelivery) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = delivery
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), serde_json::Value::String(value.clone())))
        .collect();
    let mut fixture =
        json!({ "headers": headers, "body": String::from_utf8_lossy(&delivery.body) });
    if !delivery.query.is_empty() {
        fixture["query"] = json!(delivery.query);
    }
    fixture
}

/// Single-quotes `text` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ProviderSpec, build};

    /// Every message of an error's chain, as `{:#}` of anyhow prints it.
    fn chain(error: &dyn std::error::Error) -> String {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_url_once() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .expect("a free port");
        let url = format!("http://127.0.0.1:{port}/webhooks/demo");
        let delivery = SignedDelivery {
            query: String::new(),
            headers: Vec::new(),
            body: b"{}".to_vec(),
        };
        let error = post(&reqwest::Client::new(), &url, &delivery)
            .await
            .expect_err("nothing listens there");
        assert!(error.is_refused());
        let text = chain(&error);
        assert_eq!(text.matches(&url).count(), 1, "{text}");
        assert_eq!(text.matches("127.0.0.1").count(), 1, "{text}");
    }

    #[test]
    fn the_identity_is_the_key_the_provider_reads_from_the_body_or_a_header() {
        let spec = |secret: &str| ProviderSpec {
            secrets: vec![secret.to_owned()],
            ..ProviderSpec::default()
        };
        let stripe = build("stripe", &spec("whsec_test")).expect("stripe");
        let body = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#.to_vec();
        let delivery = sign(stripe.as_ref(), "msg_ignored", 0, None, body).expect("signed");
        assert_eq!(
            identity(stripe.as_ref(), &delivery).expect("a key")[0],
            Identity {
                key: "evt_1".into(),
                event_type: Some("payment_intent.succeeded".into()),
            }
        );
        let github = build("github", &spec("s3cret")).expect("github");
        let body = br#"{"action":"opened"}"#.to_vec();
        let delivery = sign(github.as_ref(), "d-1", 0, Some("pull_request"), body).expect("signed");
        assert_eq!(
            identity(github.as_ref(), &delivery).expect("a key")[0],
            Identity {
                key: "d-1".into(),
                event_type: Some("pull_request.opened".into()),
            }
        );
    }

    #[test]
    fn curl_commands_quote_every_argument() {
        let delivery = SignedDelivery {
            query: String::new(),
            headers: vec![("X-Sig".into(), "it's".into())],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            curl_command("http://h/webhooks/a", &delivery, Some("body.json")),
            "curl -sS -i -X POST 'http://h/webhooks/a' -H 'content-type: application/json' -H 'X-Sig: it'\\''s' --data-binary @'body.json'"
        );
    }
}
