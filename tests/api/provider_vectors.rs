//! The conformance suite: every provider against the vectors its SDKs or
//! documentation publish (or, where none is published, one computed by a
//! second implementation), from `tests/vectors/<provider>.toml`. Each valid
//! vector is also tampered with, one signed byte at a time, and every
//! tampered copy must be refused.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use idempotent_receiver::problem::Problem;
use idempotent_receiver::providers::{self, Provider, ProviderSpec, SignedRequest};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    provider: String,
    vector: Vec<Vector>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    source: String,
    secrets: Vec<String>,
    url: Option<String>,
    webhook_id: Option<String>,
    certificate: Option<String>,
    now: i64,
    #[serde(default = "post")]
    method: String,
    #[serde(default)]
    query: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    body_base64: Option<String>,
    /// A file under the repository holding the body.
    body_file: Option<String>,
    expect: String,
    secret_index: Option<usize>,
    keys: Option<Vec<String>>,
    event_types: Option<Vec<Option<String>>>,
    key_signed: Option<bool>,
    handshake: Option<String>,
    #[serde(default = "yes")]
    tamper_body: bool,
    tamper_headers: Option<Vec<String>>,
    tolerance: Option<String>,
}

fn post() -> String {
    "POST".into()
}

fn yes() -> bool {
    true
}

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn files() -> Vec<(PathBuf, File)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(vectors_dir())
        .expect("tests/vectors")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable");
            let file: File =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, file)
        })
        .collect()
}

impl Vector {
    fn body(&self) -> Vec<u8> {
        match (&self.body, &self.body_base64, &self.body_file) {
            (Some(text), None, None) => text.clone().into_bytes(),
            (None, Some(encoded), None) => STANDARD.decode(encoded).expect("body_base64"),
            (None, None, Some(file)) => {
                std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).expect("body_file")
            }
            _ => panic!(
                "{}: give exactly one of body, body_base64, body_file",
                self.name
            ),
        }
    }

    fn provider(&self, name: &str) -> Box<dyn Provider> {
        let spec = ProviderSpec {
            secrets: self.secrets.clone(),
            tolerance: self
                .tolerance
                .as_deref()
                .map(|t| idempotent_receiver::duration_text::parse_duration(t).expect("tolerance")),
            url: self.url.clone(),
            webhook_id: self.webhook_id.clone(),
            certificate: self
                .certificate
                .as_ref()
                .map(|c| Path::new(env!("CARGO_MANIFEST_DIR")).join(c)),
            ..ProviderSpec::default()
        };
        providers::build(name, &spec).unwrap_or_else(|e| panic!("{name} {}: {e}", self.name))
    }

    fn headers(&self, headers: &[(String, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("header name"),
                HeaderValue::from_str(value).expect("header value"),
            );
        }
        map
    }

    /// What the provider makes of `headers` and `body`: the problem slug of
    /// a refusal, or `ok` with the verified result.
    fn check(
        &self,
        provider: &dyn Provider,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<providers::Verified, String> {
        let map = self.headers(headers);
        let request = SignedRequest {
            headers: &map,
            body,
            method: &self.method,
            query: &self.query,
        };
        let now = chrono::DateTime::from_timestamp(self.now, 0).expect("now");
        provider
            .verify(&request, now)
            .map_err(|rejection| Problem::from(&rejection).slug().to_owned())
    }
}

/// Every header a tamper test changes: those that carry a signature.
fn signature_headers(vector: &Vector) -> Vec<String> {
    vector.tamper_headers.clone().unwrap_or_else(|| {
        vector
            .headers
            .iter()
            .map(|(name, _)| name.clone())
            .filter(|name| {
                let name = name.to_ascii_lowercase();
                ["sig", "hmac", "hash", "token"]
                    .iter()
                    .any(|part| name.contains(part))
            })
            .collect()
    })
}

/// `text` with one character changed: the last alphanumeric one.
fn changed(text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if let Some(c) = chars.iter_mut().rev().find(|c| c.is_ascii_alphanumeric()) {
        *c = match *c {
            'a' => 'b',
            'A' => 'B',
            '0' => '1',
            _ => 'a',
        };
    } else {
        chars.push('x');
    }
    chars.into_iter().collect()
}

#[test]
fn every_vector_verifies_as_published_and_every_tampered_copy_is_refused() {
    let mut checked = 0;
    for (path, file) in files() {
        for vector in &file.vector {
            let at = format!("{} {:?} ({})", path.display(), vector.name, vector.source);
            assert!(!vector.source.trim().is_empty(), "{at}: name the source");
            let provider = vector.provider(&file.provider);
            let body = vector.body();
            let result = vector.check(provider.as_ref(), &vector.headers, &body);
            match (&result, vector.expect.as_str()) {
                (Ok(verified), "ok") => {
                    if let Some(index) = vector.secret_index {
                        assert_eq!(verified.secret_index, index, "{at}");
                    }
                    expect_deliveries(provider.as_ref(), vector, &body, verified, &at);
                }
                (Err(slug), expected) if slug == expected => {}
                _ => panic!("{at}: expected {}, got {result:?}", vector.expect),
            }
            checked += 1;
            if vector.expect != "ok" {
                continue;
            }
            if vector.tamper_body && !body.is_empty() {
                // A byte in the middle of the body, so that JSON stays
                // readable where a verifier parses it before checking.
                let mut tampered = body.clone();
                let middle = tampered.len() / 2;
                let position = (middle..tampered.len())
                    .chain(0..middle)
                    .find(|&i| tampered[i].is_ascii_alphanumeric())
                    .unwrap_or(middle);
                tampered[position] = if tampered[position] == b'a' {
                    b'b'
                } else {
                    b'a'
                };
                let result = vector.check(provider.as_ref(), &vector.headers, &tampered);
                assert!(result.is_err(), "{at}: a tampered body verified");
            }
            for name in signature_headers(vector) {
                let headers: Vec<(String, String)> = vector
                    .headers
                    .iter()
                    .map(|(n, v)| {
                        let v = if n.eq_ignore_ascii_case(&name) {
                            changed(v)
                        } else {
                            v.clone()
                        };
                        (n.clone(), v)
                    })
                    .collect();
                let result = vector.check(provider.as_ref(), &headers, &body);
                assert!(result.is_err(), "{at}: a tampered {name} verified");
            }
        }
    }
    assert!(checked > 0);
}

fn expect_deliveries(
    provider: &dyn Provider,
    vector: &Vector,
    body: &[u8],
    verified: &providers::Verified,
    at: &str,
) {
    let expects_something = vector.keys.is_some()
        || vector.event_types.is_some()
        || vector.key_signed.is_some()
        || vector.handshake.is_some();
    if !expects_something {
        // A published vector may sign a body this scheme would not read as
        // a delivery (Slack's slash command, GitHub's "Hello, World!").
        return;
    }
    let map = vector.headers(&vector.headers);
    let request = SignedRequest {
        headers: &map,
        body,
        method: &vector.method,
        query: &vector.query,
    };
    let payload = provider
        .payload(&request)
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    let handshake = provider
        .handshake(&request, &payload, verified)
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    match (&vector.handshake, handshake) {
        (Some(expected), Some(reply)) => {
            assert_eq!(String::from_utf8_lossy(&reply.body), *expected, "{at}");
            return;
        }
        (None, None) => {}
        (expected, got) => panic!("{at}: handshake expected {expected:?}, got {got:?}"),
    }
    let deliveries = provider
        .deliveries(&request, &payload)
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    if let Some(keys) = &vector.keys {
        let got: Vec<&str> = deliveries.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(got, *keys, "{at}");
    }
    if let Some(types) = &vector.event_types {
        let got: Vec<Option<String>> = deliveries.iter().map(|d| d.event_type.clone()).collect();
        assert_eq!(got, *types, "{at}");
    }
    if let Some(signed) = vector.key_signed {
        assert!(deliveries.iter().all(|d| d.key_signed == signed), "{at}");
    }
}

#[test]
fn every_provider_has_vectors() {
    let covered: Vec<String> = files().into_iter().map(|(_, f)| f.provider).collect();
    let missing: Vec<&str> = providers::names()
        .into_iter()
        .filter(|name| *name != "hmac" && !covered.iter().any(|c| c == name))
        .collect();
    assert!(missing.is_empty(), "no tests/vectors file for {missing:?}");
}
