//! `providers`: every provider name `provider = "..."` accepts, with what it
//! signs, where its key comes from, its timestamp, handshake and retry
//! window, read from the catalogue (and, for the hand-written schemes, from
//! the small table below). The README's provider table is this output.

use idempotent_receiver::providers::description::{Handshake, TimestampUnit};
use idempotent_receiver::providers::{self, Description, ProviderSpec};

/// One row of the table.
pub struct Row {
    pub name: String,
    pub signed: String,
    pub id: String,
    pub timestamp: String,
    pub handshake: String,
    pub retry: String,
}

/// The schemes that are code, described by hand.
const HAND_WRITTEN: &[(&str, &str, &str, &str, &str)] = &[
    (
        "clerk",
        "HMAC-SHA256 of `{id}.{timestamp}.{body}` (Standard Webhooks, `svix-` headers)",
        "`svix-id` (signed)",
        "`svix-timestamp`, s, ±5 min",
        "—",
    ),
    (
        "discord",
        "ed25519 of `{timestamp}{body}`",
        "`/id` (signed)",
        "`X-Signature-Timestamp`, s, ±5 min",
        "PING → `{\"type\":1}`",
    ),
    (
        "paypal",
        r"RSA-SHA256 of `id\|time\|webhook id\|crc32(body)`",
        "`/id` (signed, by CRC32 only)",
        "`PAYPAL-TRANSMISSION-TIME`, RFC 3339, ±5 min",
        "—",
    ),
    (
        "resend",
        "HMAC-SHA256 of `{id}.{timestamp}.{body}` (Standard Webhooks, `svix-` headers)",
        "`svix-id` (signed)",
        "`svix-timestamp`, s, ±5 min",
        "—",
    ),
    (
        "standard-webhooks",
        "HMAC-SHA256 (or ed25519) of `{id}.{timestamp}.{body}`",
        "`webhook-id` (signed)",
        "`webhook-timestamp`, s, ±5 min",
        "—",
    ),
];

pub fn rows() -> Vec<Row> {
    let mut rows: Vec<Row> = HAND_WRITTEN
        .iter()
        .map(|(name, signed, id, timestamp, handshake)| Row {
            name: (*name).to_owned(),
            signed: (*signed).to_owned(),
            id: (*id).to_owned(),
            timestamp: (*timestamp).to_owned(),
            handshake: (*handshake).to_owned(),
            retry: retry(name),
        })
        .collect();
    rows.extend(providers::entries().iter().map(row));
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

fn row(d: &Description) -> Row {
    let signature = d.variants.first().unwrap_or(d);
    let mac = match signature.mac {
        providers::description::MacKind::Token => "a static token (no MAC)".to_owned(),
        providers::description::MacKind::KeyPrefixedHash => format!(
            "{:?} of the secret then `{}`",
            signature.algorithm, signature.signed_content
        ),
        providers::description::MacKind::Hmac => format!(
            "HMAC-{:?} of `{}`",
            signature.algorithm, signature.signed_content
        ),
    }
    .replace("Sha", "SHA");
    let variants = if d.variants.len() > 1 {
        format!(" ({} versions)", d.variants.len())
    } else {
        String::new()
    };
    let id = match (&d.id_header, &d.id_pointer, &d.id_fields, &d.id_query) {
        (Some(h), ..) => format!("`{h}`"),
        (_, Some(p), ..) => format!("`{p}`"),
        (_, _, Some(fields), _) => fields
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(" + "),
        (.., Some(q)) => format!("query `{q}`"),
        _ => "SHA-256 of the body".to_owned(),
    };
    let batch = if d.items.is_some() {
        ", per batch item"
    } else {
        ""
    };
    let signed = providers::build(
        &d.name,
        &ProviderSpec {
            secrets: vec![providers::example_secret(d, "table")],
            url: Some("https://receiver.example/".into()),
            ..ProviderSpec::default()
        },
    )
    .ok()
    .and_then(|p| {
        let body = providers::example_body(d, "id_1", "payment.succeeded");
        let delivery = idempotent_receiver::client::sign(
            p.as_ref(),
            "id_1",
            1_767_225_600,
            Some("payment.succeeded"),
            body,
        )
        .ok()?;
        let mut headers = actix_web::http::header::HeaderMap::new();
        for (name, value) in &delivery.headers {
            headers.append(name.parse().ok()?, value.parse().ok()?);
        }
        let request = providers::SignedRequest {
            headers: &headers,
            body: &delivery.body,
            method: "POST",
            query: &delivery.query,
        };
        let payload = p.payload(&request).ok()?;
        Some(p.deliveries(&request, &payload).ok()?.first()?.key_signed)
    });
    let signed_text = match signed {
        Some(true) => "signed",
        Some(false) => "not signed",
        None => "?",
    };
    let timestamp = match (
        &signature.timestamp_header,
        &signature.timestamp_pointer,
        &signature.timestamp_key,
    ) {
        (Some(h), ..) => format!("`{h}`"),
        (_, Some(p), _) => format!("`{p}`"),
        (_, _, Some(k)) => format!("`{k}=` in the signature"),
        _ if d.signs_timestamp() => "in the signature".to_owned(),
        _ => "none".to_owned(),
    };
    let timestamp = if d.signs_timestamp() {
        let unit = match signature.timestamp_unit {
            TimestampUnit::Seconds => "s",
            TimestampUnit::Milliseconds => "ms",
            TimestampUnit::Rfc3339 => "RFC 3339",
            TimestampUnit::Auto => "s or ms",
        };
        format!(
            "{timestamp}, {unit}, {} {}",
            if signature.timestamp_check == providers::description::TimestampCheck::Age {
                "not older than"
            } else {
                "±"
            },
            signature.tolerance.as_deref().unwrap_or("5m")
        )
    } else {
        timestamp
    };
    let handshake = match (d.handshake, &d.acknowledgement) {
        (Some(Handshake::SlackUrlVerification), _) => {
            "`url_verification` → its challenge".to_owned()
        }
        (Some(Handshake::ZoomUrlValidation), _) => {
            "`endpoint.url_validation` → `plainToken` + `encryptedToken`".to_owned()
        }
        (Some(Handshake::TwitchChallenge), _) => {
            "`webhook_callback_verification` → the raw challenge".to_owned()
        }
        (Some(Handshake::BraintreeChallenge), _) => {
            "`GET ?bt_challenge=` → `public key\\|HMAC`".to_owned()
        }
        (None, Some(ack)) => format!("answers `{ack}`"),
        _ => "—".to_owned(),
    };
    Row {
        name: d.name.clone(),
        signed: format!("{mac}{variants}"),
        id: format!("{id} ({signed_text}{batch})"),
        timestamp,
        handshake,
        retry: retry(&d.name),
    }
}

fn retry(name: &str) -> String {
    // Any secret of the right form will do: only the retry window is read.
    const CANDIDATES: &[&str] = &[
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        // RFC 8032 TEST 1's public key, for Discord.
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    ];
    let secrets: Vec<String> = match providers::entries().iter().find(|d| d.name == name) {
        Some(d) => vec![providers::example_secret(d, "table")],
        None => CANDIDATES.iter().map(|s| s.to_string()).collect(),
    };
    secrets
        .into_iter()
        .find_map(|secret| {
            providers::build(
                name,
                &ProviderSpec {
                    secrets: vec![secret],
                    url: Some("https://receiver.example/".into()),
                    webhook_id: Some("WEBHOOKID".into()),
                    ..ProviderSpec::default()
                },
            )
            .ok()
        })
        .map_or_else(
            || "see the provider's docs".to_owned(),
            |p| p.retry_window().describe(),
        )
}

/// The table as Markdown.
pub fn markdown() -> String {
    let mut text = String::from(
        "| provider | what is signed | key (signed?) | timestamp | handshake | retry window |\n|---|---|---|---|---|---|\n",
    );
    for row in rows() {
        text.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            row.name, row.signed, row.id, row.timestamp, row.handshake, row.retry
        ));
    }
    text
}

pub fn run() {
    print!("{}", markdown());
    println!("\n`hmac`: your own description in `[endpoints.NAME.hmac]` (see the README).");
}
