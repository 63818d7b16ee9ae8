//! Standard Webhooks (the scheme Svix, Clerk, Resend and others send):
//! `webhook-id`, `webhook-timestamp` and `webhook-signature` (or the same with
//! `svix-`), HMAC-SHA256 over `{id}.{timestamp}.{body}`, base64, with the key
//! being the base64 part of a `whsec_...` secret.

use super::mac::{self, Algorithm};
use super::{
    Provider, ProviderConfigError, ProviderSpec, Rejection, SignError, SignInput, SignedRequest,
    Verified, check_key, check_timestamp, header, parse_timestamp,
};
use crate::secret::Secret;
use actix_web::http::header::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

const SECRET_PREFIX: &str = "whsec_";
/// The specification's recommended tolerance.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct StandardWebhooks {
    secrets: Vec<Secret>,
    tolerance: Duration,
}

/// The three headers, each under its `webhook-` or its `svix-` name.
struct Headers<'a> {
    id: &'a str,
    timestamp: &'a str,
    signature: &'a str,
}

impl StandardWebhooks {
    pub fn new(spec: &ProviderSpec) -> Result<Self, ProviderConfigError> {
        let secrets = &spec.secrets;
        let tolerance = spec.tolerance_or(DEFAULT_TOLERANCE);
        if secrets.is_empty() {
            return Err(ProviderConfigError::NoSecret);
        }
        let secrets = secrets
            .iter()
            .enumerate()
            .map(|(index, s)| {
                Self::parse_secret(s)
                    .map_err(|reason| ProviderConfigError::MalformedSecret { index, reason })
            })
            .collect::<Result<_, _>>()?;
        Ok(StandardWebhooks { secrets, tolerance })
    }

    /// `whsec_` followed by base64; the prefix is optional, as in the spec.
    pub fn parse_secret(secret: &str) -> Result<Secret, &'static str> {
        let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| "expected whsec_ followed by base64")?;
        if key.len() < 16 {
            return Err("the key is shorter than 16 bytes");
        }
        Ok(Secret::new(key))
    }

    /// The signature of one message, as it appears after `v1,`.
    pub fn signature(key: &Secret, id: &str, timestamp: &str, body: &[u8]) -> String {
        STANDARD.encode(mac::sign(
            Algorithm::Sha256,
            key.expose(),
            &signed_parts(id, timestamp, body),
        ))
    }

    fn headers<'a>(map: &'a HeaderMap) -> Result<Headers<'a>, Rejection> {
        let either = |primary: &'static str, alias: &'static str| -> Result<&'a str, Rejection> {
            match header(map, primary)? {
                Some(value) => Ok(value),
                None => header(map, alias)?.ok_or(Rejection::MissingHeader(primary)),
            }
        };
        Ok(Headers {
            id: either("webhook-id", "svix-id")?,
            timestamp: either("webhook-timestamp", "svix-timestamp")?,
            signature: either("webhook-signature", "svix-signature")?,
        })
    }
}

/// `{id}.{timestamp}.{body}`, with the timestamp exactly as sent.
fn signed_parts<'a>(id: &'a str, timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [id.as_bytes(), b".", timestamp.as_bytes(), b".", body]
}

impl Provider for StandardWebhooks {
    fn name(&self) -> &'static str {
        "standard-webhooks"
    }

    fn verify(
        &self,
        request: &SignedRequest<'_>,
        now: DateTime<Utc>,
    ) -> Result<Verified, Rejection> {
        let headers = Self::headers(request.headers)?;
        let timestamp = parse_timestamp(headers.timestamp, "webhook-timestamp")?;
        // `v1,<base64>` entries separated by spaces; other versions (such as
        // `v1a` for asymmetric keys) are not ours to check here.
        let mut candidates = Vec::new();
        for entry in headers.signature.split(' ').filter(|e| !e.is_empty()) {
            let Some((version, encoded)) = entry.split_once(',') else {
                return Err(Rejection::MalformedHeader {
                    header: "webhook-signature",
                    reason: "expected space-separated v1,<base64> entries",
                });
            };
            if version != "v1" {
                continue;
            }
            let decoded = STANDARD
                .decode(encoded)
                .map_err(|_| Rejection::MalformedHeader {
                    header: "webhook-signature",
                    reason: "a v1 signature is not base64",
                })?;
            candidates.push(decoded);
        }
        let matched = self.secrets.iter().position(|secret| {
            candidates.iter().any(|candidate| {
                // Constant-time, and any other length fails, so an empty
                // `v1,` or a prefix of the right tag cannot match.
                mac::verify(
                    Algorithm::Sha256,
                    secret.expose(),
                    &signed_parts(headers.id, headers.timestamp, request.body),
                    candidate,
                )
            })
        });
        let secret_index = matched.ok_or(Rejection::InvalidSignature)?;
        check_timestamp(timestamp, now, self.tolerance)?;
        Ok(Verified { secret_index })
    }

    fn delivery_id(&self, request: &SignedRequest<'_>, _: &Value) -> Result<String, Rejection> {
        let id = Self::headers(request.headers)?.id;
        check_key(id)?;
        Ok(id.to_owned())
    }

    fn event_type(&self, _: &SignedRequest<'_>, payload: &Value) -> Option<String> {
        payload.get("type")?.as_str().map(str::to_owned)
    }

    fn sign(&self, input: &SignInput<'_>) -> Result<Vec<(String, String)>, SignError> {
        let secret = self.secrets.first().ok_or(SignError::NoSecret)?;
        let timestamp = input.timestamp.to_string();
        let signature = Self::signature(secret, input.delivery_id, &timestamp, input.body);
        Ok(vec![
            ("webhook-id".into(), input.delivery_id.into()),
            ("webhook-timestamp".into(), timestamp),
            ("webhook-signature".into(), format!("v1,{signature}")),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    // The example in Svix's "Verifying webhooks manually" documentation, which
    // is also the Standard Webhooks specification's worked example.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn provider(secrets: &[&str]) -> StandardWebhooks {
        StandardWebhooks::new(&spec(secrets, None)).unwrap()
    }

    fn spec(secrets: &[&str], tolerance: Option<Duration>) -> ProviderSpec {
        ProviderSpec {
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
            tolerance,
            hmac: None,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn at(timestamp: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(timestamp, 0).unwrap()
    }

    fn verify(p: &StandardWebhooks, signature: &str, now: i64) -> Result<Verified, Rejection> {
        let ts = TIMESTAMP.to_string();
        let map = headers(&[
            ("webhook-id", ID),
            ("webhook-timestamp", &ts),
            ("webhook-signature", signature),
        ]);
        p.verify(
            &SignedRequest {
                headers: &map,
                body: BODY,
            },
            at(now),
        )
    }

    #[test]
    fn the_published_example_verifies() {
        assert_eq!(
            verify(&provider(&[SECRET]), SIGNATURE, TIMESTAMP),
            Ok(Verified { secret_index: 0 })
        );
    }

    #[test]
    fn signing_reproduces_the_published_signature() {
        let input = SignInput {
            delivery_id: ID,
            timestamp: TIMESTAMP,
            body: BODY,
            event_type: None,
        };
        let headers = provider(&[SECRET]).sign(&input).unwrap();
        assert_eq!(headers[2], ("webhook-signature".into(), SIGNATURE.into()));
    }

    #[test]
    fn any_of_several_signatures_and_any_of_several_secrets_may_match() {
        let other = "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg=";
        let p = provider(&[other, SECRET]);
        let list = format!("v1,AAAA v1a,ignored {SIGNATURE}");
        assert_eq!(
            verify(&p, &list, TIMESTAMP),
            Ok(Verified { secret_index: 1 })
        );
    }

    #[test]
    fn empty_truncated_and_prefix_signatures_fail() {
        let p = provider(&[SECRET]);
        let full = SIGNATURE.strip_prefix("v1,").unwrap();
        let raw = STANDARD.decode(full).unwrap();
        let prefix = format!("v1,{}", STANDARD.encode(&raw[..16]));
        for signature in [
            "v1,",
            "",
            " ",
            "v2,abc",
            &prefix,
            &SIGNATURE[..SIGNATURE.len() - 4],
        ] {
            let result = verify(&p, signature, TIMESTAMP);
            assert!(result.is_err(), "{signature:?} must not verify");
        }
        assert_eq!(
            verify(&p, "v1,", TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
        assert_eq!(
            verify(&p, &prefix, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn a_wrong_secret_fails() {
        let p = provider(&["whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg="]);
        assert_eq!(
            verify(&p, SIGNATURE, TIMESTAMP),
            Err(Rejection::InvalidSignature)
        );
    }

    #[test]
    fn the_timestamp_is_checked_in_both_directions() {
        let p = provider(&[SECRET]);
        assert!(verify(&p, SIGNATURE, TIMESTAMP + 300).is_ok());
        assert!(verify(&p, SIGNATURE, TIMESTAMP - 300).is_ok());
        let stale = Err(Rejection::StaleTimestamp {
            tolerance_secs: 300,
        });
        assert_eq!(verify(&p, SIGNATURE, TIMESTAMP + 301), stale);
        assert_eq!(verify(&p, SIGNATURE, TIMESTAMP - 301), stale);
    }

    #[test]
    fn a_zero_tolerance_accepts_an_old_recorded_delivery() {
        let p = StandardWebhooks::new(&spec(&[SECRET], Some(Duration::ZERO))).unwrap();
        assert!(verify(&p, SIGNATURE, TIMESTAMP + 86_400 * 365).is_ok());
    }

    #[test]
    fn svix_header_names_are_accepted() {
        let ts = TIMESTAMP.to_string();
        let map = headers(&[
            ("svix-id", ID),
            ("svix-timestamp", &ts),
            ("svix-signature", SIGNATURE),
        ]);
        let p = provider(&[SECRET]);
        assert!(
            p.verify(
                &SignedRequest {
                    headers: &map,
                    body: BODY
                },
                at(TIMESTAMP)
            )
            .is_ok()
        );
    }

    fn verify_headers(pairs: &[(&str, &str)]) -> Result<Verified, Rejection> {
        let map = headers(pairs);
        let request = SignedRequest {
            headers: &map,
            body: BODY,
        };
        provider(&[SECRET]).verify(&request, at(TIMESTAMP))
    }

    #[test]
    fn missing_and_malformed_headers_are_told_apart() {
        let ts = TIMESTAMP.to_string();
        assert_eq!(
            verify_headers(&[("webhook-id", ID), ("webhook-signature", SIGNATURE)]),
            Err(Rejection::MissingHeader("webhook-timestamp"))
        );
        let cases = [
            ("soon", SIGNATURE, "webhook-timestamp"),
            (ts.as_str(), "v1,!!notbase64", "webhook-signature"),
        ];
        for (timestamp, signature, header) in cases {
            let result = verify_headers(&[
                ("webhook-id", ID),
                ("webhook-timestamp", timestamp),
                ("webhook-signature", signature),
            ]);
            assert!(
                matches!(result, Err(Rejection::MalformedHeader { header: h, .. }) if h == header),
                "{result:?}"
            );
        }
    }

    #[test]
    fn malformed_secrets_are_refused_at_configuration() {
        for bad in ["whsec_", "whsec_!!!", "whsec_c2hvcnQ="] {
            assert!(matches!(
                StandardWebhooks::new(&spec(&[bad], None)),
                Err(ProviderConfigError::MalformedSecret { index: 0, .. })
            ));
        }
        assert_eq!(
            StandardWebhooks::new(&spec(&[], None)).unwrap_err(),
            ProviderConfigError::NoSecret
        );
    }
}
