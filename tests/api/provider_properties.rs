//! Arbitrary headers and bodies fed to every verifier and key extractor: no
//! input panics, and none verifies without the secret. They run over the
//! fixture sources, which name every provider, and through the public API
//! only, so that neither `providers` nor the library depends on the
//! fixtures or the signing client for them.

use crate::signed_fixtures::{NOW, sources};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use idempotent_receiver::client;
use idempotent_receiver::providers::{self, ProviderSpec, SignedRequest, build};
use proptest::prelude::*;
use std::time::Duration;

/// The headers the hand-written schemes read.
const HAND_WRITTEN: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "x-signature-ed25519",
    "x-signature-timestamp",
    "paypal-transmission-id",
    "paypal-transmission-time",
    "paypal-transmission-sig",
    "paypal-cert-url",
    "paypal-auth-algo",
    "x-acme-signature",
    "x-acme-timestamp",
];

/// Every header any scheme reads, so that the fuzzer hits them: the
/// hand-written ones and every header the catalogue names.
fn names() -> Vec<String> {
    let mut names: Vec<String> = HAND_WRITTEN.iter().map(|n| n.to_string()).collect();
    for entry in providers::entries() {
        for d in std::iter::once(entry).chain(entry.variants.iter()) {
            let named = [
                &d.signature_header,
                &d.timestamp_header,
                &d.id_header,
                &d.event_type_header,
            ];
            names.extend(named.into_iter().flatten().map(|n| n.to_ascii_lowercase()));
            if let Some(when) = &d.when_header {
                names.push(
                    when.split(':')
                        .next()
                        .unwrap_or(when)
                        .trim()
                        .to_ascii_lowercase(),
                );
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

static NAMES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(names);

/// Header values shaped like the real ones often enough to get past the
/// first parse: `t=..,v1=..`, `v1,..`, `sha256=..`, `ts=..;h1=..`, digits.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80),
        "[ -~]{0,120}".prop_map(String::into_bytes),
        "(t=[0-9]{0,12},)?(v[01a]?[=,][0-9a-fA-F+/=]{0,70}[, ]?){0,3}".prop_map(String::into_bytes),
        "(sha256=|v0=|ts=[0-9]{0,11};h1=)[0-9a-f]{0,66}".prop_map(String::into_bytes),
        "-?[0-9]{0,20}".prop_map(String::into_bytes),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(usize, Vec<u8>)>> {
    proptest::collection::vec((0..NAMES.len(), value()), 0..12)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "\\{(\"(id|type|event_id|event_type|action)\":(\"[ -~]{0,20}\"|[0-9]{1,5}|null|\\{\\}),?){0,4}\\}"
            .prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn no_header_or_body_panics_a_verifier_or_verifies_unsigned(pairs in headers(), body in body(), now in 0i64..8_000_000_000) {
        let mut map = HeaderMap::new();
        for (index, raw) in pairs {
            if let Ok(value) = HeaderValue::from_bytes(&raw) {
                map.append(HeaderName::from_bytes(NAMES[index].as_bytes()).unwrap(), value);
            }
        }
        let now = chrono::DateTime::from_timestamp(now, 0).unwrap_or_default();
        for source in sources() {
            for tolerance in [None, Some(Duration::ZERO)] {
                let spec = ProviderSpec { tolerance, ..source.spec(&source.secret) };
                let provider = build(&source.provider, &spec).unwrap();
                let request = SignedRequest::post(&map, &body);
                // Random bytes never carry a valid HMAC of this body.
                prop_assert!(provider.verify(&request, now).is_err(), "{} verified noise", source.provider);
                let payload = provider.payload(&request).unwrap_or(serde_json::Value::Null);
                let _ = provider.deliveries(&request, &payload);
            }
        }
    }

    /// Starts from a correctly signed delivery and overwrites some of its
    /// headers with fuzz: the parsers see nearly-valid input, and the
    /// untouched delivery is the positive control.
    #[test]
    fn mutated_signed_headers_never_panic_and_untouched_ones_verify(
        mutations in proptest::collection::vec((0usize..8, value()), 0..3),
        body in body(),
    ) {
        let now = chrono::DateTime::from_timestamp(NOW, 0).unwrap_or_default();
        for source in sources() {
            let provider = build(&source.provider, &source.spec(&source.secret)).unwrap();
            // The catalogue's own example body where the scheme needs one (a
            // batch, a form, a signature inside the body), else the fuzz.
            let body = if source.hmac.is_none() && source.provider != "standard-webhooks" { source.body.clone() } else { body.clone() };
            let Ok(signed) = client::sign_with_key(provider.as_ref(), &source.delivery_id, NOW, source.event_type.as_deref(), body.clone(), source.signing_keys.map(|(key, _)| key)) else { continue };
            let mut headers = signed.headers.clone();
            let mut changed = false;
            // Adyen signs inside the body and sends no header to mutate.
            let mutations = if headers.is_empty() { &[][..] } else { &mutations[..] };
            for (index, raw) in mutations {
                let slot = index % headers.len();
                if let Ok(text) = String::from_utf8(raw.clone()) {
                    changed |= headers[slot].1 != text;
                    headers[slot].1 = text;
                }
            }
            let mut map = HeaderMap::new();
            for (name, value) in &headers {
                if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
                    map.append(name, value);
                }
            }
            let request = SignedRequest { headers: &map, body: &signed.body, method: "POST", query: &signed.query };
            let result = provider.verify(&request, now);
            if !changed {
                prop_assert!(result.is_ok(), "{}: a correctly signed delivery failed: {:?}", source.provider, result);
            }
            let payload = provider.payload(&request).unwrap_or(serde_json::Value::Null);
            let _ = provider.deliveries(&request, &payload);
        }
    }
}

/// `Provider::header_key` lets the receiver answer an exact repeat from the
/// replay cache before it parses the body, so it must name the key that the
/// full path would find: for every scheme's signed example, a key given
/// there is the key of the request's one delivery, whose stored payload is
/// the body itself (no batch item, no fingerprint of its own).
#[test]
fn a_key_given_before_the_body_is_parsed_is_the_one_the_body_gives() {
    let mut keyed = Vec::new();
    for source in sources() {
        let provider = build(&source.provider, &source.spec(&source.secret)).unwrap();
        let Ok(signed) = client::sign_with_key(
            provider.as_ref(),
            &source.delivery_id,
            NOW,
            source.event_type.as_deref(),
            source.body.clone(),
            source.signing_keys.map(|(key, _)| key),
        ) else {
            continue;
        };
        let mut map = HeaderMap::new();
        for (name, value) in &signed.headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let request = SignedRequest {
            headers: &map,
            body: &signed.body,
            method: "POST",
            query: &signed.query,
        };
        let Some(key) = provider.header_key(&request) else {
            continue;
        };
        let payload = provider.payload(&request).expect("the example parses");
        assert!(
            serde_json::from_slice::<serde_json::Value>(&signed.body).is_ok(),
            "{}: a scheme that names its key in a header stores a JSON body",
            source.provider
        );
        let deliveries = provider.deliveries(&request, &payload).unwrap();
        assert_eq!(deliveries.len(), 1, "{}", source.provider);
        let delivery = &deliveries[0];
        assert_eq!(delivery.key, key, "{}", source.provider);
        assert!(delivery.item.is_none(), "{}", source.provider);
        assert!(delivery.fingerprint.is_none(), "{}", source.provider);
        keyed.push(source.provider.clone());
    }
    for expected in ["standard-webhooks", "github", "shopify"] {
        assert!(
            keyed.iter().any(|p| p == expected),
            "{expected} gives its key in a header; keyed: {keyed:?}"
        );
    }
}
