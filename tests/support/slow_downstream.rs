//! A slow downstream for the `forward` handler: every POST is held for a
//! fixed delay before it is answered 200, so that a queue worker is
//! mid-handler for that long, and every call is logged (which instance's
//! forwarder made it, the event, when it started and ended). The receiver
//! forwards the event's raw body, so the log says which delivery ran when.

// Shared by the crash and scale-out binaries; each uses a part of it.
#![allow(dead_code)]

use actix_web::{App, HttpResponse, HttpServer, web};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One POST the downstream received.
#[derive(Clone, Debug)]
pub struct Call {
    /// The forwarder's path: the name of the instance that forwarded.
    pub instance: String,
    pub body: serde_json::Value,
    pub started: Instant,
    /// `None` while it is held, or when the receiver hung up meanwhile (it
    /// was killed mid-handler).
    pub ended: Option<Instant>,
}

impl Call {
    pub fn id(&self) -> &str {
        self.body["id"].as_str().unwrap_or("")
    }
}

struct State {
    delay: Duration,
    in_flight: AtomicUsize,
    calls: Mutex<Vec<Call>>,
}

/// Counts a held call down however it ends: actix drops the handler's
/// future when the receiver hangs up.
struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn hold(
    state: web::Data<Arc<State>>,
    instance: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    state.in_flight.fetch_add(1, Ordering::SeqCst);
    let held = Held(&state.in_flight);
    let index = {
        let mut calls = state.calls.lock().expect("the call log");
        calls.push(Call {
            instance: instance.into_inner(),
            body,
            started: Instant::now(),
            ended: None,
        });
        calls.len() - 1
    };
    actix_web::rt::time::sleep(state.delay).await;
    state.calls.lock().expect("the call log")[index].ended = Some(Instant::now());
    drop(held);
    HttpResponse::Ok().json(serde_json::json!({ "ok": true }))
}

/// The downstream; it serves until the test binary exits.
pub struct SlowDownstream {
    pub base_url: String,
    state: Arc<State>,
}

impl SlowDownstream {
    /// Listens on a free port, on a thread and runtime of its own (actix's),
    /// so that it lives on whatever the test's runtime does.
    pub fn start(delay: Duration) -> SlowDownstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let state = Arc::new(State {
            delay,
            in_flight: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(move || {
                    App::new()
                        .app_data(web::Data::new(shared.clone()))
                        .route("/{instance}", web::post().to(hold))
                })
                .workers(2)
                .listen(listener)
                .expect("the downstream listens")
                .run()
                .await
            })
        });
        SlowDownstream {
            base_url: format!("http://127.0.0.1:{port}"),
            state,
        }
    }

    /// A `[forwarders.NAME]` table that posts to this downstream as
    /// `instance`, with one attempt per job (the queue retries, not the
    /// forwarder).
    pub fn forwarder_toml(&self, name: &str, instance: &str) -> String {
        format!(
            "[forwarders.{name}]\nurl = \"{}/{instance}\"\ntimeout = \"10s\"\nretries = 0\n",
            self.base_url
        )
    }

    /// Calls held right now.
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().expect("the call log").clone()
    }

    /// How many distinct deliveries were forwarded at least once.
    pub fn distinct(&self) -> usize {
        let calls = self.state.calls.lock().expect("the call log");
        calls
            .iter()
            .map(Call::id)
            .collect::<std::collections::HashSet<_>>()
            .len()
    }
}
