//! Group commit on SQLite: writers queued at the write gate share one
//! transaction, each in a savepoint of its own, and one COMMIT. The store
//! tests drive the grouping step by step (who waits at the gate is read from
//! the store, never guessed by sleeping); the HTTP tests run on both
//! backends, and on SQLite hold the first delivery inside the gate until the
//! others queue behind it, so that they form one group.

use crate::helpers::{Backend, TestApp, now, payment, until};
use crate::observability::scrape;
use crate::on_both_backends;
use crate::test_schema;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use futures_util::future::join_all;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::store::schema::{events, ledger_entries};
use idempotent_receiver::store::{
    Backend as StoreBackend, DatabaseUrl, DbConn, GroupCommitMetrics, GroupCommitOptions, Store,
    StoreOptions, Transaction, inline_scope,
};
use idempotent_receiver::with_conn;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::oneshot;

const GROUP_MEMBERS: &str = "ir_sqlite_commit_group_members";

/// A store over a fresh SQLite file. Groups stay open for a minute, so that
/// only the waiters decide when a group commits, never the machine's speed.
async fn sqlite_store(enabled: bool) -> (Store, tempfile::TempDir) {
    let group_commit = GroupCommitOptions {
        enabled,
        max_wait: Duration::from_secs(60),
        ..GroupCommitOptions::default()
    };
    store_with(group_commit, GroupCommitMetrics::default()).await
}

async fn store_with(
    group_commit: GroupCommitOptions,
    group_commit_metrics: GroupCommitMetrics,
) -> (Store, tempfile::TempDir) {
    let (store, dir, _file) = store_on_file(StoreOptions {
        group_commit,
        group_commit_metrics,
        ..StoreOptions::default()
    })
    .await;
    (store, dir)
}

/// A store with `options` over a fresh SQLite file, and the file's path.
async fn store_on_file(options: StoreOptions) -> (Store, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let file = dir.path().join("receiver.db");
    test_schema::copy_sqlite_template(&file)
        .await
        .expect("the migrated SQLite template");
    let store = Store::connect(&DatabaseUrl::Sqlite(file.clone()), &options).expect("a pool");
    (store, dir, file)
}

/// Writes an `events` row named `id` in `tx`.
async fn write(tx: &mut Transaction, id: &str) {
    with_conn!(tx.conn(), |c| {
        diesel::insert_into(events::table)
            .values((
                events::endpoint.eq("group"),
                events::delivery_id.eq(id),
                events::payload.eq("{}"),
                events::recorded_at.eq(chrono::Utc::now().naive_utc()),
            ))
            .execute(c)
            .await
    })
    .expect("the insert");
}

/// The `events` rows another connection sees: the committed ones.
async fn committed(store: &Store) -> Vec<String> {
    let mut conn = store.conn().await.expect("a connection");
    with_conn!(&mut conn, |c| {
        events::table
            .select(events::delivery_id)
            .order(events::delivery_id)
            .load::<String>(c)
            .await
    })
    .expect("the read")
}

/// A member that writes `id`, then holds its transaction until `go`, then
/// commits or rolls back.
fn member(
    store: &Store,
    id: &'static str,
    keep: bool,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), String>>,
) {
    let (go, wait) = oneshot::channel::<()>();
    let store = store.clone();
    let task = tokio::spawn(async move {
        let mut tx = store.begin().await.map_err(|e| e.to_string())?;
        write(&mut tx, id).await;
        let _ = wait.await;
        let ended = if keep {
            tx.commit().await
        } else {
            tx.rollback().await
        };
        ended.map_err(|e| e.to_string())
    });
    (go, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_waiting_at_the_gate_share_one_commit_and_a_failing_one_rolls_back_alone() {
    let (store, _dir) = sqlite_store(true).await;
    let mut a = store.begin().await.unwrap();
    write(&mut a, "a").await;
    let (go_b, b) = member(&store, "b", false);
    let (go_c, c) = member(&store, "c", true);
    until("B and C wait at the gate", async || {
        store.write_gate_waiters() == 2
    })
    .await;

    // A is done while B and C wait: it leaves the group to them and waits
    // for the group's COMMIT.
    let a = tokio::spawn(a.commit());
    until("A let the gate go to B or C", async || {
        store.write_gate_waiters() == 1
    })
    .await;
    assert!(!a.is_finished(), "A's commit returned before the group's");
    assert!(
        committed(&store).await.is_empty(),
        "nothing is durable before the group commits"
    );

    let _ = go_b.send(());
    let _ = go_c.send(());
    assert_eq!(b.await.unwrap(), Ok(()), "B rolled back its own writes");
    assert_eq!(c.await.unwrap(), Ok(()));
    assert!(a.await.unwrap().is_ok());
    assert_eq!(committed(&store).await, ["a", "c"]);

    // The gate and the pool are free again.
    let mut d = store.begin().await.unwrap();
    write(&mut d, "d").await;
    d.commit().await.unwrap();
    assert_eq!(committed(&store).await, ["a", "c", "d"]);
}

/// The sizes of the groups committed by [`lingering_store`]'s store.
static LINGERING_GROUPS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// A store whose groups linger a minute for company: only the writers
/// decide, never the machine's speed.
async fn lingering_store() -> (Store, tempfile::TempDir) {
    recording_store(Duration::from_secs(60), |members| {
        push(&LINGERING_GROUPS, members)
    })
    .await
}

/// A store whose groups stay open for a minute and linger for `linger`,
/// reporting each COMMIT's size to `committed`.
async fn recording_store(linger: Duration, committed: fn(usize)) -> (Store, tempfile::TempDir) {
    let group_commit = GroupCommitOptions {
        max_wait: Duration::from_secs(60),
        linger,
        ..GroupCommitOptions::default()
    };
    let metrics = GroupCommitMetrics {
        committed,
        ..GroupCommitMetrics::default()
    };
    store_with(group_commit, metrics).await
}

fn push(groups: &std::sync::Mutex<Vec<usize>>, members: usize) {
    groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(members)
}

fn sizes(groups: &std::sync::Mutex<Vec<usize>>) -> Vec<usize> {
    groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// After a group of two, a writer alone at the gate does not commit a group
/// of one: it keeps the gate (for up to `linger`) until the next writer
/// comes, and leaves the group to it. Writers that come one at a time, as
/// the first two here, commit at once: a minute's linger would hang them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_group_of_several_a_lone_writer_lingers_for_the_next() {
    let (store, _dir) = lingering_store().await;
    let groups = || sizes(&LINGERING_GROUPS);
    let bounded = |what: &'static str, commit| async move {
        tokio::time::timeout(Duration::from_secs(30), commit)
            .await
            .unwrap_or_else(|_| panic!("{what} lingered with nobody to wait for"))
    };
    for id in ["one", "two"] {
        let mut alone = store.begin().await.unwrap();
        write(&mut alone, id).await;
        bounded("a writer alone after nobody", alone.commit())
            .await
            .unwrap();
    }
    assert_eq!(groups(), [1, 1]);

    // A group of two: A is done while B waits at the gate.
    let mut a = store.begin().await.unwrap();
    write(&mut a, "a").await;
    let (go_b, b) = member(&store, "b", true);
    until("B waits at the gate", async || {
        store.write_gate_waiters() == 1
    })
    .await;
    let a = tokio::spawn(a.commit());
    let _ = go_b.send(());
    assert_eq!(b.await.unwrap(), Ok(()));
    assert!(a.await.unwrap().is_ok());
    assert_eq!(groups(), [1, 1, 2]);

    // C is alone at the gate, in a group smaller than the last: it lingers.
    let mut c = store.begin().await.unwrap();
    write(&mut c, "c").await;
    let c = tokio::spawn(c.commit());
    until("C lingers at the gate", async || {
        store.write_gate_lingering()
    })
    .await;
    let (began_d, d_began) = oneshot::channel::<()>();
    let (go_d, wait_d) = oneshot::channel::<()>();
    let d = tokio::spawn({
        let store = store.clone();
        async move {
            let mut d = store.begin().await.unwrap();
            write(&mut d, "d").await;
            let _ = began_d.send(());
            let _ = wait_d.await;
            d.commit().await
        }
    });
    d_began.await.expect("D got the gate from C");
    assert_eq!(groups(), [1, 1, 2], "C did not commit alone");
    assert!(!c.is_finished(), "C waits for its group's COMMIT");
    let _ = go_d.send(());
    assert!(d.await.unwrap().is_ok());
    assert!(c.await.unwrap().is_ok());
    assert_eq!(groups(), [1, 1, 2, 2], "C and D shared one COMMIT");
    assert_eq!(committed(&store).await, ["a", "b", "c", "d", "one", "two"]);
}

/// The sizes of the groups committed by
/// [`writers_handed_to_the_thread_while_a_member_runs_inline_join_its_group`].
static INLINE_GROUPS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// On the store's writer thread a member's statements and its group's
/// COMMIT run inline, with no await that lets the thread go. Writers handed
/// to that thread while a member runs have not been polled when it
/// finishes, so none of them counts at the gate yet: the member yields once
/// before it decides, and they join its group. Without that yield each of
/// the three commits alone here ([1, 1, 1]).
#[tokio::test]
async fn writers_handed_to_the_thread_while_a_member_runs_inline_join_its_group() {
    let (store, _dir) = recording_store(GroupCommitOptions::default().linger, |members| {
        push(&INLINE_GROUPS, members)
    })
    .await;
    let writer = |store: Store, id: &'static str| {
        inline_scope(async move {
            let mut tx = store.begin().await.map_err(|e| e.to_string())?;
            write(&mut tx, id).await;
            tx.commit().await.map_err(|e| e.to_string())
        })
    };
    let first = store.clone();
    let (a, others) = store
        .run_delivery(move || {
            inline_scope(async move {
                let mut a = first.begin().await.map_err(|e| e.to_string())?;
                write(&mut a, "a").await;
                // Spawned on the writer thread while A holds it: polled only
                // when A lets the thread go.
                let others =
                    ["b", "c"].map(|id| tokio::task::spawn_local(writer(first.clone(), id)));
                let committed = a.commit().await.map_err(|e| e.to_string());
                Ok::<_, String>((committed, others))
            })
        })
        .await
        .expect("the writer thread's answer")
        .expect("A's transaction");
    assert_eq!(a, Ok(()));
    for other in others {
        assert_eq!(other.await.unwrap(), Ok(()));
    }
    assert_eq!(sizes(&INLINE_GROUPS), [3], "A, B and C share one COMMIT");
    assert_eq!(committed(&store).await, ["a", "b", "c"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_dropped_mid_transaction_fails_its_whole_group_and_nothing_commits() {
    let (store, _dir) = sqlite_store(true).await;
    let mut a = store.begin().await.unwrap();
    write(&mut a, "a").await;
    let (go_b, b) = oneshot::channel::<()>();
    let dropped = tokio::spawn({
        let store = store.clone();
        async move {
            let mut tx = store.begin().await.unwrap();
            write(&mut tx, "b").await;
            let _ = b.await;
            // As a panic or a cancelled request would: the transaction is
            // dropped open, holding the group's connection.
            drop(tx);
        }
    });
    until("B waits at the gate", async || {
        store.write_gate_waiters() == 1
    })
    .await;
    let a = tokio::spawn(a.commit());
    until("B holds the gate", async || store.write_gate_waiters() == 0).await;
    let _ = go_b.send(());
    dropped.await.unwrap();

    let error = a.await.unwrap().expect_err("A's group did not commit");
    assert!(error.is_transient(), "{error}");
    assert!(committed(&store).await.is_empty());

    // The group's connection was closed, so SQLite's write lock is free.
    let mut c = store.begin().await.unwrap();
    write(&mut c, "c").await;
    c.commit().await.unwrap();
    assert_eq!(committed(&store).await, ["c"]);
}

/// `PRAGMA busy_timeout` in milliseconds.
#[derive(QueryableByName)]
struct BusyTimeout {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    timeout: i64,
}

async fn busy_timeout_of(tx: &mut Transaction) -> i64 {
    with_conn!(tx.conn(), |c| {
        diesel::sql_query("PRAGMA busy_timeout")
            .get_result::<BusyTimeout>(c)
            .await
    })
    .expect("PRAGMA busy_timeout")
    .timeout
}

/// The gate's holder tries `BEGIN IMMEDIATE` on its own thread with SQLite's
/// busy handler off, and waits on the blocking pool only when another
/// process holds the write lock. On a current-thread runtime a wait in the
/// busy handler would stop everything, the lock's release below included:
/// the begin would fail after the busy timeout instead of going through.
#[tokio::test(flavor = "current_thread")]
async fn a_begin_that_finds_the_write_lock_taken_waits_for_it_off_the_thread() {
    let (store, _dir, file) = store_on_file(StoreOptions {
        busy_timeout: Duration::from_secs(30),
        ..StoreOptions::default()
    })
    .await;

    // The lock is free: the transaction begins, and its connection still
    // waits for a locked file as configured.
    let mut tx = inline_scope(store.begin()).await.expect("a transaction");
    assert_eq!(busy_timeout_of(&mut tx).await, 30_000);
    tx.rollback().await.expect("rolled back");

    // Another process holds the lock: the begin waits until it goes.
    let mut other = diesel::SqliteConnection::establish(&file.to_string_lossy())
        .expect("a second connection to the file");
    diesel::connection::SimpleConnection::batch_execute(&mut other, "BEGIN IMMEDIATE")
        .expect("the other process takes the write lock");
    let began = AtomicBool::new(false);
    let begin = async {
        let tx = inline_scope(store.begin()).await;
        began.store(true, Ordering::SeqCst);
        tx
    };
    let release = async {
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        assert!(
            !AtomicBool::load(&began, Ordering::SeqCst),
            "the begin neither failed nor went through while the lock was held"
        );
        diesel::connection::SimpleConnection::batch_execute(&mut other, "ROLLBACK")
            .expect("the lock let go");
    };
    let (tx, ()) = tokio::join!(begin, release);
    let mut tx = tx.expect("the transaction, once the lock was let go");
    assert_eq!(
        busy_timeout_of(&mut tx).await,
        30_000,
        "the busy handler is back on after the attempt without it"
    );
    write(&mut tx, "after-the-lock").await;
    tx.commit().await.expect("committed");
    assert_eq!(committed(&store).await, vec!["after-the-lock"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_group_commit_each_writer_commits_on_its_own() {
    let (store, _dir) = sqlite_store(false).await;
    let mut a = store.begin().await.unwrap();
    write(&mut a, "a").await;
    let (go_b, b) = member(&store, "b", true);
    until("B waits at the gate", async || {
        store.write_gate_waiters() == 1
    })
    .await;
    // B waits, and A's commit does not wait for it.
    a.commit().await.unwrap();
    assert_eq!(committed(&store).await, ["a"]);
    let _ = go_b.send(());
    assert_eq!(b.await.unwrap(), Ok(()));
    assert_eq!(committed(&store).await, ["a", "b"]);
}

/// What the `hold` handler and its test share.
#[derive(Default)]
struct HoldState {
    /// The app's store, set once the app is up.
    store: OnceLock<Store>,
    /// Set by the first delivery that reaches the handler.
    entered: AtomicBool,
    /// How many writers must queue behind that first delivery.
    waiters: usize,
}

/// Runs after `record` and `payments`, so inside the delivery's transaction
/// (and on SQLite inside the write gate). The first delivery that reaches it
/// waits until `waiters` more writers queue at the gate, so that on SQLite
/// they all join its group. Then deliveries of payment `pay_fail` fail.
struct Hold(Arc<HoldState>);

#[async_trait::async_trait(?Send)]
impl Handler for Hold {
    async fn handle(&self, event: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let state = &self.0;
        if !state.entered.swap(true, Ordering::SeqCst) {
            if let Some(store) = state
                .store
                .get()
                .filter(|s| s.backend() == StoreBackend::Sqlite)
            {
                until("the other deliveries queue behind the first", async || {
                    store.write_gate_waiters() >= state.waiters
                })
                .await;
            }
        }
        if event.payload["data"]["id"] == "pay_fail" {
            return Err(HandlerError::Failed("the downstream ledger said no".into()));
        }
        Ok(None)
    }
}

/// An app with the `hold` handler, whose groups stay open as long as
/// writers wait (and below the 64-member cap), however slow the machine.
async fn spawn_holding(backend: Backend, waiters: usize) -> Option<(TestApp, Arc<HoldState>)> {
    let state = Arc::new(HoldState {
        waiters,
        ..HoldState::default()
    });
    let app = TestApp::builder(backend)
        .top_level("sqlite_group_commit_wait = \"1h\"")
        .handler("hold", Hold(state.clone()))
        .spawn_if_available()
        .await?;
    let _ = state.store.set(app.store.clone());
    Some((app, state))
}

/// Commits so far of more than `members` members (any test's: the recorder
/// is the process's, so this only grows).
async fn groups_over(app: &TestApp, members: &str) -> f64 {
    let scrape = scrape(app).await;
    scrape.value(&format!("{GROUP_MEMBERS}_count"), &[])
        - scrape.value(&format!("{GROUP_MEMBERS}_bucket"), &[("le", members)])
}

/// How many ledger rows each delivery id has.
async fn ledger_rows_by_id(app: &TestApp) -> Vec<(String, i64)> {
    let mut conn = app.store.conn().await.unwrap();
    with_conn!(&mut conn, |c| {
        ledger_entries::table
            .group_by(ledger_entries::delivery_id)
            .select((ledger_entries::delivery_id, diesel::dsl::count_star()))
            .order(ledger_entries::delivery_id)
            .load::<(String, i64)>(c)
            .await
    })
    .unwrap()
}

/// 16 distinct deliveries and 64 copies of one more: the first delivery
/// alone, then, once it holds the gate, all the others at once. On SQLite
/// they queue behind it and commit in groups of up to 64.
async fn deliveries_and_storm(backend: Backend) {
    let Some((app, held)) = spawn_holding(backend, 15 + 64).await else {
        return;
    };
    let app = &app;
    let before = groups_over(app, "48").await;
    let deliver = |i: i64| async move {
        let body = payment(&format!("pay_g{i}"), 100 + i);
        app.deliver(&format!("msg_g{i:02}"), &body)
            .await
            .status()
            .as_u16()
    };
    let first_body = payment("pay_g0", 100);
    let first = app.deliver("msg_g00", &first_body);
    let storm_body = payment("pay_gstorm", 5000);
    let others = async {
        until("the first delivery holds the gate", async || {
            AtomicBool::load(&held.entered, Ordering::SeqCst)
        })
        .await;
        let storm = (0..64).map(|i| {
            let headers = app.signed_headers("msg_gstorm", now() - i, &storm_body);
            let body = storm_body.clone();
            async move {
                let response = app.post(&headers, body).await;
                let status = response.status().as_u16();
                (status, response.bytes().await.unwrap())
            }
        });
        tokio::join!(join_all((1..16).map(deliver)), join_all(storm))
    };
    let (first, (statuses, answers)) = tokio::join!(first, others);

    assert_eq!(first.status(), 200);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let mut ok_bodies = answers.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b);
    let stored = ok_bodies.next().expect("a storm copy succeeded").clone();
    assert!(
        ok_bodies.all(|b| *b == stored),
        "every 200 is the stored answer"
    );
    for (status, body) in &answers {
        assert!(
            *status == 200 || *status == 409,
            "unexpected {status}: {}",
            String::from_utf8_lossy(body)
        );
    }
    let mut expected: Vec<(String, i64)> = (0..16).map(|i| (format!("msg_g{i:02}"), 1)).collect();
    expected.push(("msg_gstorm".to_owned(), 1));
    assert_eq!(
        ledger_rows_by_id(app).await,
        expected,
        "exactly one effect per id"
    );
    if backend == Backend::Sqlite {
        assert!(
            groups_over(app, "48").await > before,
            "one COMMIT took the held delivery and the 63 queued behind it"
        );
    }
}

on_both_backends!(
    parallel_deliveries_and_a_storm_commit_in_groups_with_one_effect_per_id,
    deliveries_and_storm
);

/// A delivery whose handler fails holds the gate until 9 others queue: on
/// SQLite they all share its group. It answers 500 and leaves nothing; a
/// payment with a malformed amount answers its stored 422; the rest 200,
/// committed.
async fn a_failure_inside_a_group(backend: Backend) {
    let Some((app, held)) = spawn_holding(backend, 9).await else {
        return;
    };
    let app = &app;
    let before = groups_over(app, "8").await;
    let failing_body = payment("pay_fail", 100);
    let failing = app.deliver("msg_fail", &failing_body);
    let malformed = serde_json::json!({
        "type": "payment.succeeded",
        "data": { "id": "pay_malformed", "order_id": "o", "amount": 12.5, "currency": "EUR" }
    })
    .to_string()
    .into_bytes();
    let others = async {
        until("the failing delivery holds the gate", async || {
            AtomicBool::load(&held.entered, Ordering::SeqCst)
        })
        .await;
        let good = (0..8).map(|i| async move {
            let body = payment(&format!("pay_ok{i}"), 100 + i);
            app.deliver(&format!("msg_ok{i}"), &body)
                .await
                .status()
                .as_u16()
        });
        tokio::join!(join_all(good), app.deliver("msg_malformed", &malformed))
    };
    let (failing, (statuses, rejected)) = tokio::join!(failing, others);

    assert_eq!(failing.status(), 500);
    assert_eq!(rejected.status(), 422);
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let expected: Vec<(String, i64)> = (0..8).map(|i| (format!("msg_ok{i}"), 1)).collect();
    assert_eq!(ledger_rows_by_id(app).await, expected);
    assert_eq!(app.count("events").await, 8);
    assert!(
        app.delivery("msg_fail").await.is_none(),
        "the failure kept nothing"
    );
    assert_eq!(
        app.delivery("msg_malformed").await.unwrap().status,
        "completed"
    );
    if backend == Backend::Sqlite {
        assert!(
            groups_over(app, "8").await > before,
            "one COMMIT took the failing delivery's group of 10"
        );
    }
}

on_both_backends!(
    a_failing_delivery_inside_a_group_fails_alone_and_the_others_commit,
    a_failure_inside_a_group
);

/// What the `pause` handler and its test share.
#[derive(Default)]
struct PauseState {
    /// The app's store, set once the app is up.
    store: OnceLock<Store>,
    /// Set once the delivery of `pay_first` is inside its handler.
    first: AtomicBool,
    /// Set once the delivery of `pay_hold` is inside its handler.
    holding: AtomicBool,
    /// Lets the delivery of `pay_hold` go on.
    release: AtomicBool,
}

/// On SQLite, the delivery of `pay_first` waits inside the gate until two
/// more writers queue behind it; the delivery of `pay_hold` (on both
/// backends) waits inside its transaction until released.
struct Pause(Arc<PauseState>);

#[async_trait::async_trait(?Send)]
impl Handler for Pause {
    async fn handle(&self, event: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let state = &self.0;
        match event.payload["data"]["id"].as_str() {
            Some("pay_first") => {
                state.first.store(true, Ordering::SeqCst);
                if let Some(store) = state
                    .store
                    .get()
                    .filter(|s| s.backend() == StoreBackend::Sqlite)
                {
                    until("two writers queue behind the first delivery", async || {
                        store.write_gate_waiters() >= 2
                    })
                    .await;
                }
            }
            Some("pay_hold") => {
                state.holding.store(true, Ordering::SeqCst);
                until("the held delivery is released", async || {
                    AtomicBool::load(&state.release, Ordering::SeqCst)
                })
                .await;
            }
            _ => {}
        }
        Ok(None)
    }
}

/// A repeat that reads an earlier group member's completed row (copy B of
/// `msg_x`, behind copy A in A's SQLite group) must not put that row in the
/// replay cache before the group commits: a third copy (C) would be
/// answered from the cache at once, from a row that a crash before the
/// COMMIT loses (the crash suite's kill -9 on SQLite once saw two different
/// 2xx bodies for one delivery this way). A third writer (`msg_w`) holds
/// the group open while C arrives. On PostgreSQL there is no group: C is
/// answered at once, from a committed row.
async fn a_repeat_inside_an_open_group(backend: Backend) {
    let state = Arc::new(PauseState::default());
    let Some(app) = TestApp::builder(backend)
        .top_level("sqlite_group_commit_wait = \"1h\"")
        .handler("pause", Pause(state.clone()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let _ = state.store.set(app.store.clone());
    let app = &app;
    let sqlite = backend == Backend::Sqlite;
    let x = payment("pay_first", 100);
    let w = payment("pay_hold", 200);
    let a = app.deliver("msg_x", &x);
    let b = async {
        if sqlite {
            until("A holds the gate", async || {
                AtomicBool::load(&state.first, Ordering::SeqCst)
            })
            .await;
        }
        app.deliver("msg_x", &x).await
    };
    let w_answer = async {
        if sqlite {
            // A holds the gate (so B, sent then, waits behind it).
            until("B queues at the gate behind A", async || {
                AtomicBool::load(&state.first, Ordering::SeqCst)
                    && app.store.write_gate_waiters() >= 1
            })
            .await;
        }
        app.deliver("msg_w", &w).await
    };
    let c = async {
        until("W holds its transaction", async || {
            AtomicBool::load(&state.holding, Ordering::SeqCst)
        })
        .await;
        let mut c = std::pin::pin!(app.deliver("msg_x", &x));
        // SQLite: C must queue at the gate behind W, since nothing of A's
        // group is durable yet. PostgreSQL: C is answered.
        let queued = async {
            if sqlite {
                until("C queues at the gate", async || {
                    app.store.write_gate_waiters() >= 1
                })
                .await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let early = tokio::select! {
            answer = &mut c => Some(answer),
            () = queued => None,
        };
        let committed_then = app.delivery("msg_x").await.map(|row| row.status);
        state.release.store(true, Ordering::SeqCst);
        let answer = match early {
            Some(answer) => {
                assert_eq!(
                    committed_then.as_deref(),
                    Some("completed"),
                    "a copy was answered from a completion that was not committed"
                );
                answer
            }
            None => c.await,
        };
        let replayed = answer
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes().to_vec());
        (
            answer.status().as_u16(),
            replayed,
            answer.bytes().await.unwrap(),
        )
    };
    let (a, b, w_answer, (c_status, c_replayed, c_body)) = tokio::join!(a, b, w_answer, c);

    assert_eq!(a.status(), 200);
    assert_eq!(w_answer.status(), 200);
    assert_eq!(b.status(), 200);
    let a_body = a.bytes().await.unwrap();
    assert_eq!(b.bytes().await.unwrap(), a_body, "B replays A's answer");
    assert_eq!(c_status, 200);
    assert_eq!(c_replayed.as_deref(), Some(&b"true"[..]));
    assert_eq!(c_body, a_body, "C replays A's answer");
    let stored = app.delivery("msg_x").await.expect("the key");
    assert_eq!(stored.response_body.as_deref(), Some(&a_body[..]));
    assert_eq!(
        ledger_rows_by_id(app).await,
        [("msg_w".to_owned(), 1), ("msg_x".to_owned(), 1)]
    );
}

on_both_backends!(
    a_repeat_read_inside_an_open_sqlite_group_is_cached_only_once_the_group_commits,
    a_repeat_inside_an_open_group
);
