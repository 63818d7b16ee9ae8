//! PostgreSQL's pool is split into lanes: one per HTTP worker and a shared
//! one. A connection's driver task runs on the runtime that opened it, and
//! each actix worker is a runtime of its own: a worker that borrowed a
//! connection another worker opened sent every statement to that worker's
//! thread and back. Each worker now takes its connections from its own
//! lane; a worker whose lane is in use to the last connection borrows an
//! idle one of another lane before it waits. SQLite has one pool: its
//! statements run on the blocking pool or inline, wherever its connections
//! were opened.

use crate::helpers::{Backend, SECRET, TestApp, payment};
use futures_util::future::join_all;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::store::{DatabaseUrl, DbConn, Store, StoreOptions};
use serde_json::Value;
use std::sync::{Arc, Mutex, OnceLock};

const DELIVERIES: usize = 16;

#[derive(Default)]
struct SeenLanes {
    store: OnceLock<Store>,
    lanes: Mutex<Vec<usize>>,
}

/// Records the lane of the thread each delivery's handler runs on.
struct RecordLane(Arc<SeenLanes>);

#[async_trait::async_trait(?Send)]
impl Handler for RecordLane {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let Some(store) = self.0.store.get() else {
            return Err(HandlerError::Failed("the test's store is not set".into()));
        };
        let lane = store.lane();
        self.0
            .lanes
            .lock()
            .map_err(|_| HandlerError::Failed("a poisoned lock".into()))?
            .push(lane);
        Ok(None)
    }
}

/// The test app runs two workers with the default `pool_size` of 16.
async fn deliveries_run_on_their_workers_lanes(backend: Backend) {
    let seen = Arc::new(SeenLanes::default());
    let Some(app) = TestApp::builder(backend)
        .handler("lane", RecordLane(seen.clone()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let _ = seen.store.set(app.store.clone());

    // Sent at once, so that the client opens a connection for each and
    // actix hands them to both workers in turn.
    let answers = join_all((0..DELIVERIES).map(|i| {
        let id = format!("msg_lane_{i}");
        let app = &app;
        async move {
            let response = app.deliver(&id, &payment(&id, 100 + i as i64)).await;
            response.status().as_u16()
        }
    }))
    .await;
    assert!(answers.iter().all(|&status| status == 200), "{answers:?}");
    assert_eq!(app.ledger_rows().await, DELIVERIES as i64);

    let mut lanes = seen.lanes.lock().unwrap().clone();
    assert_eq!(lanes.len(), DELIVERIES);
    lanes.sort_unstable();
    lanes.dedup();
    // The test's own thread is no worker: the factory that joins a lane
    // runs on the workers' threads only.
    assert_eq!(
        app.store.lane(),
        0,
        "the test's thread uses the shared lane"
    );
    let status = app.store.lane_status();
    match backend {
        Backend::Postgres => {
            assert_eq!(lanes, [1, 2], "each worker ran deliveries, in its own lane");
            let max_sizes: Vec<usize> = status.iter().map(|lane| lane.max_size).collect();
            assert_eq!(
                max_sizes,
                [2, 7, 7],
                "two for the background, the rest to the workers"
            );
            assert!(status[1].size >= 1 && status[2].size >= 1, "{status:?}");
            assert_eq!(app.store.pool_status().max_size, 16, "the lanes add up");
        }
        Backend::Sqlite => {
            assert_eq!(lanes, [0], "SQLite has one pool");
            assert_eq!(status.len(), 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_take_connections_from_their_workers_lane_sqlite() {
    deliveries_run_on_their_workers_lanes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_take_connections_from_their_workers_lane_postgres() {
    deliveries_run_on_their_workers_lanes(Backend::Postgres).await;
}

/// Runs `body` on a thread of its own with a single-threaded runtime, as an
/// actix worker runs: a lane belongs to a thread, and a multi-thread
/// runtime may move a task between threads at any `.await`.
async fn on_own_thread<F: Future<Output = ()>>(body: impl FnOnce() -> F + Send + 'static) {
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(body());
    });
    let joined = tokio::task::spawn_blocking(move || thread.join()).await;
    assert!(matches!(joined, Ok(Ok(()))), "the thread's checks pass");
}

/// Makes the current thread take its connections from `lane`: joining
/// hands the lanes out round robin.
fn join_lane(store: &Store, lane: usize) {
    for _ in 0..8 {
        if store.join_worker_lane() == Some(lane) {
            return;
        }
    }
    panic!("lane {lane} was never handed out");
}

/// (size, idle) of each lane, the shared lane first.
fn lanes(store: &Store) -> Vec<(usize, usize)> {
    store
        .lane_status()
        .iter()
        .map(|lane| (lane.size, lane.available))
        .collect()
}

async fn a_full_lane_borrows_an_idle_connection_then_waits_for_its_own(backend: Backend) {
    let Some(app) = TestApp::spawn_if_available(backend).await else {
        return;
    };
    // Six connections for a shared lane and two workers: two each.
    let options = StoreOptions {
        pool_size: 6,
        worker_lanes: 2,
        ..StoreOptions::default()
    };
    let url = DatabaseUrl::parse(&app.database_url).expect("the test's URL");
    let store = Store::connect(&url, &options).expect("a pool");
    on_own_thread(move || async move {
        if store.backend() == idempotent_receiver::store::Backend::Sqlite {
            assert_eq!(store.join_worker_lane(), None, "SQLite has no lanes");
            assert_eq!(store.lane_status().len(), 1);
            return;
        }
        assert_eq!(store.lane(), 0, "a thread that joined nothing");
        drop(store.conn().await.expect("a shared connection"));
        assert_eq!(
            lanes(&store),
            [(1, 1), (0, 0), (0, 0)],
            "opened in the shared lane"
        );

        join_lane(&store, 1);
        let first = store.conn().await.expect("a first connection");
        let second = store.conn().await.expect("a second connection");
        assert_eq!(
            lanes(&store),
            [(1, 1), (2, 0), (0, 0)],
            "its own lane, full"
        );

        // Its lane is full and lane 2 has room but nothing idle: the shared
        // lane's idle connection is borrowed, and lane 2 opens nothing.
        let borrowed = store.conn().await.expect("an idle one of another lane");
        assert_eq!(lanes(&store), [(1, 0), (2, 0), (0, 0)]);

        // Nothing idle anywhere: it waits for its own lane's first return,
        // not for room elsewhere.
        let (third, ()) = tokio::join!(store.conn(), async {
            while store.lane_status()[1].waiting == 0 {
                tokio::task::yield_now().await;
            }
            drop(first);
        });
        let third = third.expect("the connection its lane got back");
        assert_eq!(lanes(&store), [(1, 0), (2, 0), (0, 0)]);

        drop((second, third, borrowed));
        assert_eq!(
            lanes(&store),
            [(1, 1), (2, 2), (0, 0)],
            "each back in its lane"
        );
        join_lane(&store, 2);
        let own = store.conn().await.expect("lane 2's own");
        assert_eq!(lanes(&store), [(1, 1), (2, 2), (1, 0)], "opened in lane 2");
        drop(own);
        assert_eq!(store.close_idle(), 4, "every lane's idle connections");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_lane_borrows_an_idle_connection_then_waits_for_its_own_sqlite() {
    a_full_lane_borrows_an_idle_connection_then_waits_for_its_own(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_lane_borrows_an_idle_connection_then_waits_for_its_own_postgres() {
    a_full_lane_borrows_an_idle_connection_then_waits_for_its_own(Backend::Postgres).await;
}

/// A process that drains a queued endpoint keeps one pool: its queue
/// workers do a delivery's work on the main runtime, and a fixed share of
/// the pool for them cost the acknowledgements more than the lanes gave.
/// An ingest-only process (`queue_workers = 0`) keeps the lanes.
async fn queue_workers_keep_one_pool(backend: Backend) {
    let queued = format!(
        "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nmode = \"queued\"\n"
    );
    for (workers, lanes) in [(2, 1), (0, 3)] {
        let Some(app) = TestApp::builder(backend)
            .top_level(&format!("queue_workers = {workers}\n"))
            .endpoints_toml(&queued)
            .spawn_if_available()
            .await
        else {
            return;
        };
        let expected = match backend {
            Backend::Postgres => lanes,
            Backend::Sqlite => 1,
        };
        assert_eq!(
            app.store.lane_status().len(),
            expected,
            "queue_workers = {workers}"
        );
        let response = app
            .deliver("msg_queued_lanes", &payment("pay_ql", 300))
            .await;
        assert_eq!(response.status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_workers_keep_one_pool_sqlite() {
    queue_workers_keep_one_pool(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_workers_keep_one_pool_postgres() {
    queue_workers_keep_one_pool(Backend::Postgres).await;
}
