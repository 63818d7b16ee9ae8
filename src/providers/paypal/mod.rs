//! PayPal: RSA signatures from a certificate that PayPal names per delivery.
//!
//! PayPal sends `PAYPAL-TRANSMISSION-ID`, `PAYPAL-TRANSMISSION-TIME` (RFC
//! 3339), `PAYPAL-TRANSMISSION-SIG` (base64), `PAYPAL-CERT-URL` and
//! `PAYPAL-AUTH-ALGO`. The signature is RSASSA-PKCS1-v1_5 with SHA-256 over
//! `<transmission id>|<transmission time>|<webhook id>|<CRC32 of the body>`,
//! the time exactly as sent and the CRC32 as an unsigned decimal; the key is
//! the certificate's. Only `SHA256withRSA` is accepted.
//!
//! The certificate is either pinned in configuration (`certificate =
//! "path.pem"`, read once at start-up) or fetched from `PAYPAL-CERT-URL`, and
//! only from PayPal's API hosts ([`CertUrl`]), then cached by URL. Fetching
//! is the one step with I/O: [`PayPal::prepare`] fills the cache before the
//! synchronous, pure [`Provider::verify`], which refuses a certificate it has
//! not been given with `certificate-unavailable` (503, so PayPal retries).
//!
//! Every certificate, pinned or fetched, must have a subject CN ending in
//! `.paypal.com` (the rule of PayPal-Python-SDK's `_is_common_name_valid`), an
//! RSA key of 2048 to 4096 bits, and a validity period that contains the
//! signed transmission time. The certificate chain is not verified (the
//! Python SDK checks it against DigiCert roots it ships): a fetched
//! certificate is authenticated by TLS to a PayPal host, a pinned one by the
//! operator who pinned it.
//!
//! The transmission time is checked against the receiver's clock in both
//! directions. PayPal publishes no tolerance and its SDKs check none; each
//! retry is a new transmission with a fresh time, so the default is the
//! 5 minutes of Standard Webhooks and Slack.
//!
//! The key is the event's `id` (`WH-...`) in the body. The signature covers
//! it only through the CRC32 of the body, and CRC32 is not collision
//! resistant: anyone can change a body and restore its CRC32 with four chosen
//! bytes, so a captured transmission can be replayed, within the tolerance,
//! with a different body (and id) under the same signature. The tolerance
//! bounds that window; it is PayPal's design and cannot be fixed here.

mod cert_url;
mod certificate;
mod signing;
mod source;
#[cfg(test)]
mod tests;

pub use cert_url::{CertUrl, HOSTS as CERT_HOSTS};
pub use signing::{SignWithKeyError, sign_with_key};
pub use source::{CertificateSource, FetchFailed, HttpsSource};

use super::{
    Delivery, Provider, ProviderConfigError, Rejection, RetryWindow, SignError, SignInput, Signed,
    SignedRequest, Verified, check_timestamp, key_at, required_header, text_at,
};
use actix_web::http::header::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use certificate::Certificate;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use quick_cache::sync::Cache;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The default tolerance: see the module documentation.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// The one algorithm accepted, as PayPal names it.
pub const AUTH_ALGO: &str = "SHA256withRSA";
/// How many fetched certificates are kept. PayPal signs with a handful at a
/// time (live and sandbox, across a rotation).
const CACHE_CAPACITY: usize = 64;
/// A 4096-bit signature is 684 base64 characters; anything much longer is
/// refused before it is decoded.
const MAX_SIGNATURE_CHARS: usize = 1024;
/// PayPal's own limit on `transmission_id` is 50; this leaves room.
const MAX_TRANSMISSION_ID: usize = 255;
/// RFC 3339 needs about 35 characters even with nanoseconds.
const MAX_TIME_CHARS: usize = 64;

const ID_HEADER: &str = "paypal-transmission-id";
const TIME_HEADER: &str = "paypal-transmission-time";
const SIG_HEADER: &str = "paypal-transmission-sig";
const CERT_URL_HEADER: &str = "paypal-cert-url";
const ALGO_HEADER: &str = "paypal-auth-algo";

pub struct PayPal {
    webhook_id: String,
    tolerance: Duration,
    /// `Some`: the configured certificate, and `PAYPAL-CERT-URL` is ignored.
    pinned: Option<Arc<Certificate>>,
    fetched: Cache<CertUrl, Arc<Certificate>>,
    source: Arc<dyn CertificateSource>,
}

impl std::fmt::Debug for PayPal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayPal")
            .field("webhook_id", &self.webhook_id)
            .field("tolerance", &self.tolerance)
            .field("pinned", &self.pinned.is_some())
            .field("fetched", &self.fetched.len())
            .field("source", &self.source)
            .finish()
    }
}

/// The five headers, parsed; `cert_url` is `None` when a certificate is
/// pinned.
struct Headers<'a> {
    id: &'a str,
    time_text: &'a str,
    time: i64,
    signature: Vec<u8>,
    cert_url: Option<CertUrl>,
}

impl PayPal {
    /// An endpoint that fetches certificates over HTTPS from PayPal's hosts,
    /// unless `certificate` pins one.
    pub fn new(
        webhook_id: &str,
        certificate: Option<&Path>,
        tolerance: Option<Duration>,
    ) -> Result<PayPal, ProviderConfigError> {
        let source = HttpsSource::new().map_err(|_| {
            ProviderConfigError::Invalid("paypal: the HTTPS client could not be built".into())
        })?;
        PayPal::with_source(webhook_id, certificate, tolerance, Arc::new(source))
    }

    /// Like [`PayPal::new`], with certificates fetched from `source`.
    pub fn with_source(
        webhook_id: &str,
        certificate: Option<&Path>,
        tolerance: Option<Duration>,
        source: Arc<dyn CertificateSource>,
    ) -> Result<PayPal, ProviderConfigError> {
        check_webhook_id(webhook_id)?;
        let pinned = certificate.map(read_pinned).transpose()?;
        Ok(PayPal {
            webhook_id: webhook_id.to_owned(),
            tolerance: tolerance.unwrap_or(DEFAULT_TOLERANCE),
            pinned: pinned.map(Arc::new),
            fetched: Cache::new(CACHE_CAPACITY),
            source,
        })
    }

    /// Makes sure that the certificate `headers` name is at hand, fetching
    /// and caching it if needed, so that the synchronous `verify` can run.
    /// A URL outside PayPal's hosts is refused without any request. Nothing
    /// here trusts the certificate's key yet: `verify` checks the signature
    /// and the validity period.
    pub async fn fetch_certificate(&self, headers: &HeaderMap) -> Result<(), Rejection> {
        if self.pinned.is_some() {
            return Ok(());
        }
        let url = cert_url(headers)?;
        self.fetched
            .get_or_insert_async(&url, async {
                let pem = self.source.fetch(&url).await.map_err(|_| {
                    tracing::warn!(
                        cert_url = %crate::log_text::escaped(url.as_str()),
                        "paypal: the signing certificate could not be fetched"
                    );
                    Rejection::CertificateUnavailable
                })?;
                Certificate::from_pem(&pem)
                    .map(Arc::new)
                    .map_err(Rejection::UntrustedCertificate)
            })
            .await?;
        Ok(())
    }

    fn headers<'a>(&self, map: &'a HeaderMap) -> Result<Headers<'a>, Rejection> {
        let algo = required_header(map, ALGO_HEADER)?;
        if algo != AUTH_ALGO {
            return Err(Rejection::MalformedHeader {
                header: ALGO_HEADER,
                reason: "only SHA256withRSA is accepted",
            });
        }
        let id = required_header(map, ID_HEADER)?;
        if id.is_empty() || id.len() > MAX_TRANSMISSION_ID {
            return Err(Rejection::MalformedHeader {
                header: ID_HEADER,
                reason: "it is empty or longer than 255 characters",
            });
        }
        let time_text = required_header(map, TIME_HEADER)?;
        let time = parse_time(time_text)?;
        let signature = decode_signature(required_header(map, SIG_HEADER)?)?;
        let cert_url = match self.pinned {
            Some(_) => None,
            None => Some(cert_url(map)?),
        };
        Ok(Headers {
            id,
            time_text,
            time,
            signature,
            cert_url,
        })
    }

    /// The pinned certificate, or the one `prepare` fetched for the URL.
    fn certificate(&self, url: Option<&CertUrl>) -> Result<Arc<Certificate>, Rejection> {
        if let Some(pinned) = &self.pinned {
            return Ok(pinned.clone());
        }
        url.and_then(|url| self.fetched.get(url))
            .ok_or(Rejection::CertificateUnavailable)
    }
}

/// PayPal's webhook ids are letters and digits (its API's own pattern).
fn check_webhook_id(webhook_id: &str) -> Result<(), ProviderConfigError> {
    let plain = !webhook_id.is_empty()
        && webhook_id.len() <= 100
        && webhook_id.bytes().all(|b| b.is_ascii_alphanumeric());
    if plain {
        Ok(())
    } else {
        Err(ProviderConfigError::Invalid(
            "paypal: webhook_id must be the webhook's id from PayPal's dashboard \
             (1 to 100 letters and digits)"
                .into(),
        ))
    }
}

/// Reads the pinned certificate at start-up, so that a wrong path or file
/// stops the receiver rather than every delivery.
fn read_pinned(path: &Path) -> Result<Certificate, ProviderConfigError> {
    let invalid = |reason: &str| {
        ProviderConfigError::Invalid(format!("paypal: certificate {}: {reason}", path.display()))
    };
    let pem = std::fs::read(path).map_err(|error| invalid(&error.to_string()))?;
    Certificate::from_pem(&pem).map_err(invalid)
}

fn cert_url(headers: &HeaderMap) -> Result<CertUrl, Rejection> {
    CertUrl::parse(required_header(headers, CERT_URL_HEADER)?).map_err(|reason| {
        Rejection::MalformedHeader {
            header: CERT_URL_HEADER,
            reason,
        }
    })
}

fn parse_time(text: &str) -> Result<i64, Rejection> {
    let malformed = Rejection::MalformedHeader {
        header: TIME_HEADER,
        reason: "it is not an RFC 3339 date and time",
    };
    if text.len() > MAX_TIME_CHARS {
        return Err(malformed);
    }
    DateTime::parse_from_rfc3339(text)
        .map(|time| time.timestamp())
        .map_err(|_| malformed)
}

fn decode_signature(text: &str) -> Result<Vec<u8>, Rejection> {
    let malformed = |reason| Rejection::MalformedHeader {
        header: SIG_HEADER,
        reason,
    };
    if text.len() > MAX_SIGNATURE_CHARS {
        return Err(malformed("it is longer than 1024 characters"));
    }
    STANDARD
        .decode(text)
        .map_err(|_| malformed("it is not base64"))
}

/// `<transmission id>|<transmission time>|<webhook id>|<crc32>`, the time as
/// sent. CRC32 binds the body only weakly: see the module documentation.
pub(crate) fn signed_message(id: &str, time: &str, webhook_id: &str, body: &[u8]) -> String {
    format!("{id}|{time}|{webhook_id}|{}", crc32fast::hash(body))
}

/// The certificate URL test signatures name: allow-listed, and never
/// fetched by an endpoint that pins its certificate.
const TEST_CERT_URL: &str =
    "https://api-m.paypal.com/v1/notifications/certs/CERT-idempotent-receiver-test";

/// "PayPal tries to resend the notification message 25 times over the
/// course of three days."
const RETRY_WINDOW: RetryWindow = RetryWindow::Retries {
    window: Duration::from_secs(3 * 24 * 3600),
    schedule: "up to 25 retries over 3 days",
    source: "https://developer.paypal.com/api/rest/webhooks/",
};

impl Provider for PayPal {
    fn name(&self) -> &'static str {
        "paypal"
    }

    fn prepare<'a>(
        &'a self,
        headers: &'a HeaderMap,
    ) -> Option<BoxFuture<'a, Result<(), Rejection>>> {
        Some(Box::pin(self.fetch_certificate(headers)))
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let headers = self.headers(request.headers)?;
        let certificate = self.certificate(headers.cert_url.as_ref())?;
        let message = signed_message(
            headers.id,
            headers.time_text,
            &self.webhook_id,
            request.body,
        );
        if !certificate.verifies(message.as_bytes(), &headers.signature) {
            return Err(Rejection::InvalidSignature);
        }
        // Against the signed time, not `now`: an old published transmission
        // verifies at its own time, and a certificate that expired since
        // signing is caught by the tolerance instead.
        if !certificate.valid_at(headers.time) {
            return Err(Rejection::UntrustedCertificate(
                "it was not valid at the transmission time",
            ));
        }
        check_timestamp(headers.time, now, self.tolerance)?;
        Ok(Verified { secret_index: 0 })
    }

    /// The event's `WH-...` id in the body, covered (weakly: CRC32) by the
    /// signature.
    fn deliveries(
        &self,
        _: &SignedRequest<'_>,
        payload: &Value,
    ) -> Result<Vec<Delivery>, Rejection> {
        Ok(Delivery::single_signed(
            key_at(payload, "/id")?,
            text_at(payload, "/event_type"),
        ))
    }

    fn retry_window(&self) -> RetryWindow {
        RETRY_WINDOW
    }

    /// PayPal signs with its private key, which the receiver never holds;
    /// tests and fixtures sign with [`sign_with_key`] and the published test
    /// key.
    fn sign(&self, input: &SignInput<'_>) -> Result<Signed, SignError> {
        let key = input.signing_key.ok_or(SignError::NoSigningKey)?;
        let headers = sign_with_key(key, TEST_CERT_URL, &self.webhook_id, input)
            .map_err(|e| SignError::Body(e.to_string()))?;
        Ok(Signed::headers(headers))
    }
}
