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
        payload
            .pointer(pointer)
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
    }
}
