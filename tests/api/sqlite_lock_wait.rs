//! SQLite's statements inside the write gate run inline on the request's
//! own thread (`src/store/sqlite_runtime.rs`); only `COMMIT`, and a
//! `BEGIN IMMEDIATE` that finds another process's write lock taken and must
//! wait for it, go to the blocking pool. This checks that choice where it
//! matters: while another process (here: a plain connection of the test,
//! like the CLI's) holds SQLite's write lock, the deliveries that wait for
//! it block no worker, and they go through once the lock is let go.
//!
//! SQLite only: PostgreSQL has no write gate and no blocking pool, and a
//! lock wait there is a socket read like any other.

use crate::helpers::{Backend, TestApp, payment};
use diesel::Connection;
use diesel::connection::SimpleConnection;
use futures_util::future::join_all;
use idempotent_receiver::store::DatabaseUrl;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_waiting_for_another_process_write_lock_block_no_worker() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let Ok(DatabaseUrl::Sqlite(path)) = DatabaseUrl::parse(&app.database_url) else {
        panic!("a SQLite test app");
    };
    // A first payment before the lock is taken: the ledger ids it reserves
    // ahead are there for the deliveries below, which then all wait for the
    // lock at the write gate, as any write does.
    let first = app
        .deliver("msg_before_the_lock", &payment("pay_before", 100))
        .await;
    assert_eq!(first.status(), 200);
    let mut other = diesel::SqliteConnection::establish(&path.to_string_lossy())
        .expect("a second connection to the file");
    other
        .batch_execute("PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE;")
        .expect("the other process takes the write lock");

    let bodies: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            (
                format!("msg_locked_{i}"),
                payment(&format!("pay_locked_{i}"), 100 + i),
            )
        })
        .collect();
    let deliveries = join_all(bodies.iter().map(|(id, body)| app.deliver(id, body)));
    let meanwhile = async {
        // One delivery holds the gate, waiting in BEGIN IMMEDIATE for the
        // lock; the others wait at the gate behind it.
        let waited = tokio::time::timeout(Duration::from_secs(30), async {
            while app.store.write_gate_waiters() < 2 {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(waited.is_ok(), "the deliveries never queued at the gate");
        // A new connection per request, so that both actix workers answer
        // some: a worker blocked in SQLite's busy handler would not.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(4))
            .build()
            .expect("a client");
        for _ in 0..8 {
            let health = client
                .get(format!("{}/healthz", app.address))
                .send()
                .await
                .expect("answered while the deliveries wait for the lock");
            assert_eq!(health.status(), 200);
        }
        assert_eq!(
            app.ledger_rows().await,
            1,
            "nothing written yet but the first"
        );
        other.batch_execute("ROLLBACK").expect("the lock let go");
    };
    let (answers, ()) = tokio::join!(deliveries, meanwhile);

    for answer in answers {
        assert_eq!(answer.status(), 200);
    }
    assert_eq!(app.ledger_rows().await, 4);
}
