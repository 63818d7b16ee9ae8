//! The sending side, for `send`, tests and benchmarks: sign a body as the
//! endpoint's provider would, and post it.

use crate::providers::{Provider, SignError, SignInput};
use serde_json::json;

/// A signed delivery, ready to post.
#[derive(Debug, Clone)]
pub struct SignedDelivery {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub fn sign(
    provider: &dyn Provider,
    delivery_id: &str,
    timestamp: i64,
    event_type: Option<&str>,
    body: Vec<u8>,
) -> Result<SignedDelivery, SignError> {
    let headers = provider.sign(&SignInput {
        delivery_id,
        timestamp,
        body: &body,
        event_type,
    })?;
    Ok(SignedDelivery { headers, body })
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
    #[error("cannot reach {url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
}

/// Posts a signed delivery and returns the answer, whatever its status.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    delivery: &SignedDelivery,
) -> Result<Answer, SendError> {
    let transport = |source| SendError::Transport {
        url: url.to_owned(),
        source,
    };
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(delivery.body.clone());
    for (name, value) in &delivery.headers {
        request = request.header(name, value);
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

/// A runnable curl command that posts `body_file` with `delivery`'s headers.
pub fn curl_command(url: &str, delivery: &SignedDelivery, body_file: &str) -> String {
    let mut command = format!(
        "curl -sS -i -X POST {} -H {}",
        shell_quote(url),
        shell_quote("content-type: application/json")
    );
    for (name, value) in &delivery.headers {
        command.push_str(&format!(" -H {}", shell_quote(&format!("{name}: {value}"))));
    }
    command.push_str(&format!(" --data-binary @{}", shell_quote(body_file)));
    command
}

/// A fixture object `{headers, body}`.
pub fn fixture_json(delivery: &SignedDelivery) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = delivery
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), serde_json::Value::String(value.clone())))
        .collect();
    json!({ "headers": headers, "body": String::from_utf8_lossy(&delivery.body) })
}

/// Single-quotes `text` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_commands_quote_every_argument() {
        let delivery = SignedDelivery {
            headers: vec![("X-Sig".into(), "it's".into())],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            curl_command("http://h/webhooks/a", &delivery, "body.json"),
            "curl -sS -i -X POST 'http://h/webhooks/a' -H 'content-type: application/json' -H 'X-Sig: it'\\''s' --data-binary @'body.json'"
        );
    }
}
