//! The `forward` handler against a downstream whose answer has no end: the
//! answer is read up to a cap and the delivery completes instead of hanging
//! until the timeout and failing, on both backends.

use crate::both_backends_with;
use crate::helpers::{TestAppBuilder, payment};
use actix_web::{App, HttpResponse, HttpServer, web};
use bytes::Bytes;
use serde_json::Value;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Chunks of 8 KiB, for ever.
async fn endless() -> HttpResponse {
    let chunk = Bytes::from(vec![b'x'; 8192]);
    HttpResponse::Ok()
        .content_type("application/json")
        .streaming(futures_util::stream::repeat_with(move || {
            Ok::<_, actix_web::Error>(chunk.clone())
        }))
}

/// 1 MiB with a `Content-Length`.
async fn large() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain")
        .body(vec![b'y'; 1024 * 1024])
}

/// One downstream for the whole test binary, on a thread and runtime of its
/// own so that it outlives each test's runtime.
fn downstream() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("an address").port();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(|| {
                    App::new()
                        .route("/endless", web::post().to(endless))
                        .route("/large", web::post().to(large))
                })
                .workers(1)
                .listen(listener)
                .expect("the downstream listens")
                .run()
                .await
            })
        });
        format!("http://127.0.0.1:{port}")
    })
}

fn forwarding_to_unbounded_answers(builder: TestAppBuilder) -> TestAppBuilder {
    let base = downstream();
    builder
        .endpoints_toml(&format!(
            "[forwarders.endless]\nurl = \"{base}/endless\"\ntimeout = \"5s\"\nretries = 0\n\
             [forwarders.large]\nurl = \"{base}/large\"\ntimeout = \"5s\"\nretries = 0\n"
        ))
        .handler_name("endless")
        .handler_name("large")
}

both_backends_with!(forwarding_to_unbounded_answers;
    async fn a_downstream_answer_past_the_cap_is_not_kept_and_the_delivery_completes(app) {
        let started = Instant::now();
        let response = app.deliver("msg_endless", &payment("pay_endless", 100)).await;
        let elapsed = started.elapsed();
        assert_eq!(response.status(), 200);
        assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}: read until the timeout");
        let answer: Value = response.json().await.unwrap();
        for forwarder in ["endless", "large"] {
            let effect = &answer["effects"][forwarder];
            assert_eq!(effect["status"], 200, "{forwarder}: {effect}");
            assert!(effect["body"].is_null(), "{forwarder}: {effect}");
            assert_eq!(effect["body_omitted"], "longer than 65536 bytes", "{forwarder}");
        }
        let again = app.deliver("msg_endless", &payment("pay_endless", 100)).await;
        assert_eq!(again.headers()["idempotent-replayed"], "true");
    }
);
