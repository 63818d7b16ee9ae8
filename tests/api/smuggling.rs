//! Request smuggling over a raw connection: framing that two HTTP parsers
//! could read differently (both `Content-Length` and `Transfer-Encoding`,
//! two lengths, an obfuscated coding) is refused, nothing is stored, and no
//! request hidden in the body is ever read as a second one.

use crate::both_backends;
use crate::helpers::{ENDPOINT, TestApp, payment};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A signed delivery whose key is `id`, as request-head lines.
fn signed_head(app: &TestApp, id: &str, body: &[u8]) -> String {
    let mut head = format!(
        "POST /webhooks/{ENDPOINT} HTTP/1.1\r\nHost: receiver.test\r\nContent-Type: application/json\r\n"
    );
    for (name, value) in app.signed_headers(id, app.now(), body) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head
}

/// Writes `raw` and returns the status of every answer read before the
/// server closed the connection, a bounded wait ended, or `answers` whole
/// JSON answers arrived (an honest connection stays open).
async fn exchange(app: &TestApp, raw: &[u8], answers: usize) -> Vec<u16> {
    let address = app.address.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(raw).await.expect("write");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&answer);
            if text.matches("HTTP/1.1 ").count() >= answers && text.ends_with('}') {
                break;
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    let text = String::from_utf8_lossy(&answer);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| text[at + 9..at + 12].parse().ok())
        .collect()
}

/// A whole, correctly signed request for `id`, to hide inside a body.
fn hidden_request(app: &TestApp, id: &str) -> String {
    let body = payment(&format!("pay_{id}"), 100);
    format!(
        "{}Content-Length: {}\r\n\r\n{}",
        signed_head(app, id, &body),
        body.len(),
        String::from_utf8_lossy(&body)
    )
}

async fn assert_nothing_stored(app: &TestApp, what: &str) {
    assert_eq!(
        app.count("deliveries").await,
        0,
        "{what}: a delivery was stored"
    );
    assert_eq!(
        app.ledger_rows().await,
        0,
        "{what}: a ledger row was stored"
    );
}

both_backends! {
    async fn content_length_beside_transfer_encoding_is_refused_and_hides_no_request(app) {
        // CL.TE: a front end that trusts Content-Length would forward the
        // whole chunked body, the hidden request included.
        let body = payment("pay_smuggle", 100);
        let hidden = hidden_request(app, "msg_hidden");
        let chunked = format!("{:x}\r\n{}\r\n0\r\n\r\n{hidden}", body.len(), String::from_utf8_lossy(&body));
        let raw = format!(
            "{}Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}",
            signed_head(app, "msg_smuggle", &body),
            chunked.len(),
        );
        let statuses = exchange(app, raw.as_bytes(), 2).await;
        assert_eq!(statuses.len(), 1, "one answer, then the connection closes: {statuses:?}");
        assert_eq!(statuses[0], 400, "{statuses:?}");
        assert_nothing_stored(app, "CL + TE").await;
    }
}

both_backends! {
    async fn two_different_content_lengths_are_refused(app) {
        let body = payment("pay_two_lengths", 100);
        let hidden = hidden_request(app, "msg_hidden_2");
        let raw = format!(
            "{}Content-Length: {}\r\nContent-Length: {}\r\n\r\n{}{hidden}",
            signed_head(app, "msg_two_lengths", &body),
            body.len(),
            body.len() + hidden.len(),
            String::from_utf8_lossy(&body),
        );
        let statuses = exchange(app, raw.as_bytes(), 2).await;
        assert_eq!(statuses.len(), 1, "{statuses:?}");
        assert_eq!(statuses[0], 400, "{statuses:?}");
        assert_nothing_stored(app, "two lengths").await;
    }
}

both_backends! {
    async fn an_obfuscated_transfer_coding_is_refused(app) {
        let body = payment("pay_obfuscated", 100);
        for coding in ["xchunked", "chunked, identity", " chunked", "chunked\t"] {
            let raw = format!(
                "{}Transfer-Encoding: {coding}\r\nContent-Length: {}\r\n\r\n{}",
                signed_head(app, "msg_obfuscated", &body),
                body.len(),
                String::from_utf8_lossy(&body),
            );
            let statuses = exchange(app, raw.as_bytes(), 2).await;
            assert!(
                statuses.first().is_some_and(|s| (400..500).contains(s) || *s == 501),
                "Transfer-Encoding {coding:?} answered {statuses:?}"
            );
            assert_eq!(statuses.len(), 1, "{coding:?}: {statuses:?}");
        }
        assert_nothing_stored(app, "obfuscated coding").await;
    }
}

both_backends! {
    async fn a_well_framed_pipelined_pair_is_two_deliveries(app) {
        // The control: the same bytes, framed honestly, are two requests.
        let raw = format!("{}{}", hidden_request(app, "msg_first"), hidden_request(app, "msg_second"));
        let statuses = exchange(app, raw.as_bytes(), 2).await;
        assert_eq!(statuses, [200, 200]);
        assert_eq!(app.count("deliveries").await, 2);
    }
}
