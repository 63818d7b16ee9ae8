//! Signing as PayPal does, for tests and fixtures. The receiver holds no
//! PayPal key: the only private key it ever signs with is the published test
//! key in `tests/data/paypal/`.

use super::{AUTH_ALGO, signed_message};
use crate::providers::SignInput;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat};
use rsa::RsaPrivateKey;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::sha2::Sha256;
use rsa::signature::{SignatureEncoding, Signer};
use sha2::Digest;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignWithKeyError {
    #[error("the private key is not a PKCS#8 PEM RSA key")]
    MalformedKey,
    #[error("the timestamp is out of range")]
    TimestampOutOfRange,
}

/// The five headers PayPal would send for `input.body`, signed with
/// `private_key_pem` (PKCS#8 PEM) for the endpoint `webhook_id`. The
/// transmission id is derived from the delivery id and timestamp, so that
/// fixtures are reproducible.
pub fn sign_with_key(
    private_key_pem: &str,
    cert_url: &str,
    webhook_id: &str,
    input: &SignInput<'_>,
) -> Result<Vec<(String, String)>, SignWithKeyError> {
    let key = RsaPrivateKey::from_pkcs8_pem(private_key_pem)
        .map_err(|_| SignWithKeyError::MalformedKey)?;
    let time = DateTime::from_timestamp(input.timestamp, 0)
        .ok_or(SignWithKeyError::TimestampOutOfRange)?
        .to_rfc3339_opts(SecondsFormat::Secs, true);
    let id = transmission_id(input.delivery_id, input.timestamp);
    let message = signed_message(&id, &time, webhook_id, input.body);
    let signature = SigningKey::<Sha256>::new(key).sign(message.as_bytes());
    Ok(vec![
        ("paypal-transmission-id".into(), id),
        ("paypal-transmission-time".into(), time),
        (
            "paypal-transmission-sig".into(),
            STANDARD.encode(signature.to_bytes()),
        ),
        ("paypal-cert-url".into(), cert_url.into()),
        ("paypal-auth-algo".into(), AUTH_ALGO.into()),
    ])
}

/// A UUID, as PayPal's transmission ids are, from the first 16 bytes of
/// SHA-256(`<delivery id>|<timestamp>`).
fn transmission_id(delivery_id: &str, timestamp: i64) -> String {
    let digest = sha2::Sha256::digest(format!("{delivery_id}|{timestamp}"));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}
