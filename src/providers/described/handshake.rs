//! The handshakes providers demand before they deliver anything. Each is
//! verified like a delivery first; its answer claims no key.

use super::super::{HandshakeReply, Rejection, SignedRequest, header};
use crate::providers::description::Handshake;
use crate::providers::mac::{self, Algorithm};
use crate::secret::Secret;
use serde_json::{Value, json};

const JSON: &str = "application/json";

/// The answer to `payload` if it is the handshake `kind`; `None` for an
/// ordinary delivery.
pub fn answer(
    kind: Handshake,
    request: &SignedRequest<'_>,
    payload: &Value,
    key: Option<&Secret>,
) -> Result<Option<HandshakeReply>, Rejection> {
    let text = |pointer: &'static str| {
        crate::json_pointer::get(payload, pointer)
            .and_then(Value::as_str)
            .ok_or(Rejection::MissingField(pointer))
    };
    let reply = |content_type, body: Vec<u8>| Ok(Some(HandshakeReply { content_type, body }));
    match kind {
        Handshake::SlackUrlVerification => {
            if payload.get("type").and_then(Value::as_str) != Some("url_verification") {
                return Ok(None);
            }
            let challenge = text("/challenge")?;
            reply(
                JSON,
                json!({ "challenge": challenge }).to_string().into_bytes(),
            )
        }
        Handshake::ZoomUrlValidation => {
            if payload.get("event").and_then(Value::as_str) != Some("endpoint.url_validation") {
                return Ok(None);
            }
            let plain = text("/payload/plainToken")?;
            // The secret token that verified the request encrypts the token.
            let key = key.ok_or(Rejection::InvalidSignature)?;
            let encrypted = hex::encode(mac::sign(
                Algorithm::Sha256,
                key.expose(),
                &[plain.as_bytes()],
            ));
            reply(
                JSON,
                json!({ "plainToken": plain, "encryptedToken": encrypted })
                    .to_string()
                    .into_bytes(),
            )
        }
        Handshake::TwitchChallenge => {
            let kind = header(request.headers, "Twitch-Eventsub-Message-Type")?;
            if kind != Some("webhook_callback_verification") {
                return Ok(None);
            }
            reply(
                "text/plain; charset=utf-8",
                text("/challenge")?.as_bytes().to_vec(),
            )
        }
        // A GET, answered by `braintree_challenge` before any verification.
        Handshake::BraintreeChallenge => Ok(None),
    }
}

/// Braintree's destination check: `bt_challenge` of 20 to 32 lowercase hex
/// digits, answered `<public key>|<hex HMAC of it>` (braintree_python
/// `WebhookNotificationGateway.verify`).
pub fn braintree_challenge(
    query: &str,
    key_id: Option<&str>,
    key: &Secret,
    algorithm: Algorithm,
) -> Option<HandshakeReply> {
    let challenge = super::template::query_param(query, "bt_challenge")?;
    let plausible = (20..=32).contains(&challenge.len())
        && challenge
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !plausible {
        return None;
    }
    let tag = hex::encode(mac::sign(algorithm, key.expose(), &[challenge.as_bytes()]));
    Some(HandshakeReply {
        content_type: "text/plain; charset=utf-8",
        body: format!("{}|{tag}", key_id.unwrap_or("")).into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha1::Digest;

    #[test]
    fn braintrees_published_challenge_is_answered() {
        // braintree_python tests/unit/test_webhooks.py
        // test_verify_returns_a_correct_challenge_response.
        let key = Secret::new(sha1::Sha1::digest(b"integration_private_key").to_vec());
        let reply = braintree_challenge(
            "bt_challenge=20f9f8ed05f77439fe955c977e4c8a53",
            Some("integration_public_key"),
            &key,
            Algorithm::Sha1,
        )
        .unwrap();
        assert_eq!(
            reply.body,
            b"integration_public_key|d9b899556c966b3f06945ec21311865d35df3ce4"
        );
    }

    #[test]
    fn only_a_short_hex_challenge_is_answered() {
        let key = Secret::new(vec![1; 20]);
        for (query, answered) in [
            ("", false),
            ("bt_challenge=", false),
            ("bt_challenge=20f9f8ed05f77439fe95", true),
            ("bt_challenge=20F9F8ED05F77439FE955C977E4C8A53", false),
            ("bt_challenge=PD94bWwgdmVyc2lvbj0iMS4wIj8-", false),
            ("bt_challenge=20f9f8ed05f77439fe955c977e4c8a53aa", false),
        ] {
            let reply = braintree_challenge(query, Some("pk"), &key, Algorithm::Sha1);
            assert_eq!(reply.is_some(), answered, "{query}");
        }
    }
}
