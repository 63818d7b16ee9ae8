//! Group commit on PostgreSQL: fresh deliveries that wait together go as one
//! statement (`store::claim_batch`, `store::claim_batcher`).
//!
//! The store tests run on one thread, so who shares a batch is decided by
//! the test, never by timing: `join_all` queues every member before the
//! drainer task it spawned gets its first turn. The HTTP test runs on both
//! backends; on PostgreSQL it also counts the members the batches
//! committed, from the metrics.

use crate::helpers::{Backend, TestApp, payment};
use crate::observability::scrape;
use crate::on_both_backends;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use futures_util::future::join_all;
use idempotent_receiver::store::{
    BatchMember, Batched, DatabaseUrl, GroupCommitMetrics, PgGroupCommitOptions, PlannedEvent,
    PlannedLedgerEntry, PlannedWrite, Store, StoreOptions, StoredResponse,
};
use idempotent_receiver::with_conn;
use std::sync::Mutex;

const BATCH_MEMBERS: &str = "ir_postgres_commit_batch_members";

/// The batches the store under test committed, by size, and how many
/// failed. One test uses them; the other tests' stores report nowhere.
static COMMITTED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static FAILED: Mutex<usize> = Mutex::new(0);

fn committed() -> Vec<usize> {
    std::mem::take(&mut *COMMITTED.lock().expect("the sizes"))
}

/// A member of `endpoint` with id `id`: a payment's event and ledger row
/// (with ledger id `ledger_id`), as the default handlers plan them.
fn member(id: &str, ledger_id: i64, body_key: Option<&str>) -> BatchMember {
    let at = NaiveDateTime::default();
    BatchMember {
        endpoint: "batched".into(),
        delivery_id: id.into(),
        request_hash: format!("hash-{id}"),
        event_type: Some("payment.succeeded".into()),
        received_at: at,
        completed_at: at,
        body_key: body_key.map(str::to_owned),
        request_body: Some(bytes::Bytes::from(format!("{{\"id\":\"{id}\"}}"))),
        response: StoredResponse {
            status: 200,
            content_type: "application/json".into(),
            body: bytes::Bytes::from(format!("{{\"answered\":\"{id}\"}}")),
            location: None,
        },
        writes: vec![
            PlannedWrite::Event(PlannedEvent {
                event_type: Some("payment.succeeded".into()),
                payload: format!("{{\"id\":\"{id}\"}}").into(),
                recorded_at: at,
            }),
            PlannedWrite::Ledger(PlannedLedgerEntry {
                id: ledger_id,
                kind: "charge",
                payment_id: format!("pay_{id}").into(),
                order_id: None,
                amount: 100,
                currency: "EUR".into(),
                created_at: at,
            }),
        ],
    }
}

/// `members`, queued together on this thread, in one call each.
async fn together(store: &Store, members: Vec<BatchMember>) -> Vec<Batched> {
    join_all(
        members
            .into_iter()
            .map(|m| store.claim_completed_batched(m)),
    )
    .await
}

#[derive(QueryableByName, Debug, PartialEq)]
struct Rows {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    deliveries: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    completed: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    events: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    ledger: i64,
}

/// What the store holds for the `batched` endpoint.
async fn rows(store: &Store) -> Rows {
    let mut conn = store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| {
        diesel::sql_query(
            "SELECT (SELECT COUNT(*) FROM deliveries WHERE endpoint = 'batched') AS deliveries, \
             (SELECT COUNT(*) FROM deliveries WHERE endpoint = 'batched' \
              AND status = 'completed' AND response_status = 200) AS completed, \
             (SELECT COUNT(*) FROM events WHERE endpoint = 'batched') AS events, \
             (SELECT COUNT(*) FROM ledger_entries WHERE endpoint = 'batched') AS ledger",
        )
        .get_result(c)
        .await
    })
    .expect("the counts")
}

fn rows_of(n: i64) -> Rows {
    Rows {
        deliveries: n,
        completed: n,
        events: n,
        ledger: n,
    }
}

#[tokio::test]
async fn deliveries_that_wait_together_commit_in_one_statement_and_each_claim_decides_alone() {
    let Some(app) = TestApp::spawn_if_available(Backend::Postgres).await else {
        return;
    };
    let url = DatabaseUrl::parse(&app.database_url).expect("the test's URL");
    let options = StoreOptions {
        postgres_group_commit: PgGroupCommitOptions {
            enabled: true,
            max_members: 8,
        },
        group_commit_metrics: GroupCommitMetrics {
            postgres_committed: |n| COMMITTED.lock().expect("the sizes").push(n),
            postgres_failed: || *FAILED.lock().expect("the failures") += 1,
            ..GroupCommitMetrics::default()
        },
        ..StoreOptions::default()
    };
    let store = Store::connect(&url, &options).expect("a pool");
    assert!(store.batches_claims());
    let ids = |from: usize, to: usize| (from..to).map(|n| format!("b{n}")).collect::<Vec<_>>();

    // Ten at once, at most eight a statement: two statements, every claim
    // won, every row written once.
    let members = ids(0, 10)
        .iter()
        .enumerate()
        .map(|(n, id)| member(id, 9_000_000 + n as i64, None))
        .collect();
    let answers = together(&store, members).await;
    assert_eq!(answers, vec![Batched::Won; 10]);
    assert_eq!(committed(), [8, 2], "a full batch, then the rest");
    assert_eq!(rows(&store).await, rows_of(10));

    // The same ten again with two new ones: each repeat's claim loses and
    // writes nothing (its ledger id is a new one, which would show), while
    // the new ones in the same statements win.
    let members = ids(0, 12)
        .iter()
        .enumerate()
        .map(|(n, id)| member(id, 9_100_000 + n as i64, None))
        .collect();
    let answers = together(&store, members).await;
    let mut expected = vec![Batched::Lost; 10];
    expected.extend([Batched::Won; 2]);
    assert_eq!(answers, expected);
    assert_eq!(committed(), [8, 4]);
    assert_eq!(rows(&store).await, rows_of(12));

    // Two copies of one key never share a statement: the second waits for
    // the next one, where its claim meets the first's row.
    let answers = together(
        &store,
        vec![
            member("twin", 9_200_000, None),
            member("twin", 9_200_001, None),
        ],
    )
    .await;
    assert_eq!(answers, [Batched::Won, Batched::Lost]);
    assert_eq!(committed(), [1, 1]);
    assert_eq!(rows(&store).await, rows_of(13));

    // Two ids with one body key (an unsigned id's body hash) in one
    // statement: the first in key order wins, the other loses and writes
    // nothing.
    let answers = together(
        &store,
        vec![
            member("same-body-b", 9_300_001, Some("bodyhash")),
            member("same-body-a", 9_300_000, Some("bodyhash")),
        ],
    )
    .await;
    assert_eq!(answers, [Batched::Lost, Batched::Won]);
    assert_eq!(committed(), [2]);
    assert_eq!(rows(&store).await, rows_of(14));

    // A member whose row the database refuses (its ledger id is taken)
    // fails the statement, and the whole batch with it: nothing of the
    // others is written, and each is told to go alone, knowing the
    // statement was rolled back.
    let answers = together(
        &store,
        vec![
            member("fine-1", 9_400_000, None),
            member("taken-ledger-id", 9_000_000, None),
            member("fine-2", 9_400_001, None),
        ],
    )
    .await;
    assert_eq!(
        answers,
        vec![
            Batched::Alone {
                maybe_committed: false
            };
            3
        ]
    );
    assert_eq!(committed(), Vec::<usize>::new());
    assert_eq!(*FAILED.lock().expect("the failures"), 1);
    assert_eq!(rows(&store).await, rows_of(14));

    // A store with group commit off batches nothing.
    let off = Store::connect(
        &url,
        &StoreOptions {
            postgres_group_commit: PgGroupCommitOptions {
                enabled: false,
                ..PgGroupCommitOptions::default()
            },
            ..StoreOptions::default()
        },
    )
    .expect("a pool");
    assert!(!off.batches_claims());
    assert_eq!(
        off.claim_completed_batched(member("unbatched", 9_500_000, None))
            .await,
        Batched::Alone {
            maybe_committed: false
        }
    );
    assert_eq!(rows(&store).await, rows_of(14));
}

#[derive(QueryableByName)]
struct Pid {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pid: i32,
}

/// A batch whose connection is lost with its statement sent says nothing of
/// what committed: its members go alone with `maybe_committed`. The
/// statement is held on a row lock that another transaction takes first,
/// and its backend is then terminated, as a restarted server would.
#[tokio::test]
async fn a_batch_whose_connection_is_lost_tells_its_members_it_may_have_committed() {
    let Some(app) = TestApp::spawn_if_available(Backend::Postgres).await else {
        return;
    };
    let url = DatabaseUrl::parse(&app.database_url).expect("the test's URL");
    let store = Store::connect(&url, &StoreOptions::default()).expect("a pool");
    // Another transaction inserts the key `held` and keeps its row locked.
    let mut holder = store.conn().await.expect("a connection");
    with_conn!(&mut holder, |c| {
        c.batch_execute(
            "BEGIN; INSERT INTO deliveries (endpoint, delivery_id, request_hash, status, \
             response_status, response_content_type, response_body, attempts, received_at, \
             completed_at) VALUES ('batched', 'held', 'h', 'completed', 200, \
             'application/json', '\\x7b7d', 1, now(), now())",
        )
        .await
    })
    .expect("the row is held");
    let holder_pid = with_conn!(&mut holder, |c| {
        diesel::sql_query("SELECT pg_backend_pid() AS pid")
            .get_result::<Pid>(c)
            .await
    })
    .expect("the holder's pid")
    .pid;
    let batch = together(
        &store,
        vec![
            member("free", 9_600_000, None),
            member("held", 9_600_001, None),
        ],
    );
    // The batch's backend, once it waits on the held row, is terminated.
    let killer = async {
        let mut watcher = store.conn().await.expect("a connection");
        let waiting = async {
            loop {
                let blocked = with_conn!(&mut watcher, |c| {
                    diesel::sql_query(format!(
                        "SELECT pid FROM pg_stat_activity \
                         WHERE {holder_pid} = ANY(pg_blocking_pids(pid))"
                    ))
                    .get_result::<Pid>(c)
                    .await
                    .optional()
                })
                .expect("pg_stat_activity");
                if let Some(blocked) = blocked {
                    break blocked.pid;
                }
                tokio::task::yield_now().await;
            }
        };
        // The bound only turns a hang into a failure; nothing is timed.
        let pid = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
            .await
            .expect("the batch waits on the held row");
        with_conn!(&mut watcher, |c| {
            diesel::sql_query(format!("SELECT pg_terminate_backend({pid})"))
                .execute(c)
                .await
        })
        .expect("the backend is terminated");
    };
    let (answers, ()) = futures_util::join!(batch, killer);
    assert_eq!(
        answers,
        vec![
            Batched::Alone {
                maybe_committed: true
            };
            2
        ]
    );
    // The holder lets go; the statement that was cut off left nothing.
    // The dead connection was closed, not given back to the pool: the
    // reads and the next batch each get a live one, and the batch commits.
    with_conn!(&mut holder, |c| c.batch_execute("ROLLBACK").await).expect("the holder rolls back");
    drop(holder);
    assert_eq!(rows(&store).await, rows_of(0));
    let again = together(&store, vec![member("free", 9_600_000, None)]).await;
    assert_eq!(again, [Batched::Won]);
    assert_eq!(rows(&store).await, rows_of(1));
}

/// Fresh deliveries sent at once over HTTP: one effect each, and on
/// PostgreSQL each of them committed by a batch: the members the batches
/// committed grew by at least as many as were sent (the metrics are the
/// test process's, which other tests add to meanwhile).
async fn parallel_fresh_deliveries_each_commit_once_through_the_batches(backend: Backend) {
    let Some(app) = TestApp::spawn_if_available(backend).await else {
        return;
    };
    const N: usize = 24;
    let members = async || {
        scrape(&app)
            .await
            .value(&format!("{BATCH_MEMBERS}_sum"), &[])
    };
    let before = members().await;
    let ids: Vec<String> = (0..N).map(|n| format!("pgc_{n}")).collect();
    let answers = join_all(ids.iter().map(|id| {
        let body = payment(&format!("pay_{id}"), 100);
        let app = &app;
        async move { app.deliver(id, &body).await }
    }))
    .await;
    for answer in answers {
        assert_eq!(answer.status(), 200);
    }
    assert_eq!(app.ledger_rows().await, N as i64);
    assert_eq!(app.count("events").await, N as i64);
    // Again: every one a replay, nothing written.
    for id in ids.iter().take(4) {
        let again = app.deliver(id, &payment(&format!("pay_{id}"), 100)).await;
        assert_eq!(again.status(), 200);
    }
    assert_eq!(app.ledger_rows().await, N as i64);
    if backend == Backend::Postgres {
        let batched = members().await - before;
        assert!(batched >= N as f64, "{batched} members batched");
    }
}

on_both_backends!(
    parallel_fresh_deliveries_each_commit_once_through_the_batches,
    parallel_fresh_deliveries_each_commit_once_through_the_batches
);
