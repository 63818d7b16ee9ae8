//! PostgreSQL going away mid-life: 503 with Retry-After (no hang, no panic),
//! not ready meanwhile, and recovery by itself when it comes back. The
//! database is cut off by a TCP proxy the test controls, so the shared
//! server is never touched.

use crate::helpers::{Backend, TestApp, payment, problem};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// A TCP proxy to PostgreSQL that can be cut (every connection closed, new
/// ones refused) and restored.
struct Proxy {
    address: String,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (accept_up, accept_links) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !accept_up.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                accept_links.lock().await.push(link);
            }
        });
        Proxy { address, up, links }
    }

    async fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in self.links.lock().await.drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// The PostgreSQL server's host:port from `TEST_DATABASE_URL`.
fn postgres_address() -> String {
    let url = crate::test_schema::database_url();
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(&url);
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    authority
        .rsplit_once('@')
        .map(|(_, a)| a)
        .unwrap_or(authority)
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_gets_503_and_the_receiver_recovers_by_itself() {
    let proxy = Proxy::start(postgres_address()).await;
    let Some(app) = TestApp::builder(Backend::Postgres)
        .postgres_via(&proxy.address)
        .spawn_if_available()
        .await
    else {
        return;
    };
    let before = app.deliver("msg_before", &payment("pay_before", 1)).await;
    assert_eq!(before.status(), 200);
    let before_body = before.bytes().await.unwrap();

    proxy.cut().await;
    // A key this instance saw completed is answered from its replay cache:
    // a provider's redeliveries still get their answer during the outage.
    let replay = app.deliver("msg_before", &payment("pay_before", 1)).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.bytes().await.unwrap(), before_body);
    // Bounded: the pool's acquire/connect timeouts answer well within this.
    let down = tokio::time::timeout(
        Duration::from_secs(20),
        app.deliver("msg_during", &payment("pay_during", 2)),
    )
    .await
    .expect("an outage is answered, not hung");
    let retry_after = down.headers().get("retry-after").cloned();
    let body = problem(down, 503, "storage-unavailable").await;
    assert!(retry_after.is_some());
    assert!(
        !body.to_string().contains(&proxy.address),
        "no internals leak"
    );
    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    let alive = app
        .client
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(alive.status(), 200);

    proxy.restore();
    // The provider retries; within a few seconds the pool has reconnected.
    let mut status = 0;
    for _ in 0..50 {
        status = app
            .deliver("msg_during", &payment("pay_during", 2))
            .await
            .status()
            .as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, 200, "the receiver recovered by itself");
    let ready = app
        .client
        .get(format!("{}/readyz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(app.ledger_rows().await, 2);
}
