//! A storm's copies that waited for a pooled connection while the first
//! copy ran are answered from the replay cache once they get one: no claim,
//! no read. The app has one connection, and the first copy's handler holds
//! it until the seven other copies wait for it in the pool (on SQLite, in
//! the pool or at the write gate). On PostgreSQL a
//! `BEFORE INSERT` trigger counts the claims that reach the database with a
//! sequence (not rolled back with a refused claim's transaction); on SQLite,
//! which already looks at the cache again behind its write gate, the same
//! storm is checked for its answers and its one effect.

use crate::helpers::{Backend, TestApp, now, payment};
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use futures_util::future::join_all;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::store::{DbConn, Store};
use idempotent_receiver::with_conn;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const COPIES: usize = 8;

#[derive(Default)]
struct HoldState {
    store: OnceLock<Store>,
    entered: AtomicBool,
}

/// Holds the first delivery that reaches it (and with it the pool's one
/// connection) until the other copies wait in the pool.
struct HoldConnection(Arc<HoldState>);

#[async_trait::async_trait(?Send)]
impl Handler for HoldConnection {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let state = &self.0;
        if !state.entered.swap(true, Ordering::SeqCst) {
            let Some(store) = state.store.get() else {
                return Err(HandlerError::Failed("the test's store is not set".into()));
            };
            // Yields until the copies queue; the bound only turns a hang
            // into a failure, nothing is timed.
            let queued = tokio::time::timeout(Duration::from_secs(30), async {
                // In the pool, or on SQLite at the write gate (a copy there
                // holds no connection).
                while store.pool_status().waiting + store.write_gate_waiters() < COPIES - 1 {
                    tokio::task::yield_now().await;
                }
            })
            .await;
            if queued.is_err() {
                return Err(HandlerError::Failed("the copies never queued".into()));
            }
        }
        Ok(None)
    }
}

#[derive(diesel::QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn storm_behind_one_connection(backend: Backend) {
    let state = Arc::new(HoldState::default());
    let Some(app) = TestApp::builder(backend)
        .top_level("pool_size = 1")
        .handler("hold", HoldConnection(state.clone()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let _ = state.store.set(app.store.clone());
    if backend == Backend::Postgres {
        let mut conn = app.store.conn().await.unwrap();
        with_conn!(&mut conn, |c| {
            diesel_async::SimpleAsyncConnection::batch_execute(
                c,
                "CREATE SEQUENCE claim_attempts;
                 CREATE FUNCTION count_claim_attempt() RETURNS trigger LANGUAGE plpgsql
                   AS $$ BEGIN PERFORM nextval('claim_attempts'); RETURN NEW; END $$;
                 CREATE TRIGGER count_claim_attempts BEFORE INSERT ON deliveries
                   FOR EACH ROW EXECUTE FUNCTION count_claim_attempt();",
            )
            .await
        })
        .expect("the counting trigger");
    }

    let body = payment("pay_pool_storm", 4200);
    let answers = join_all((0..COPIES).map(|i| {
        let headers = app.signed_headers("msg_pool_storm", now() - i as i64, &body);
        let body = body.clone();
        let app = &app;
        async move {
            let response = app.post(&headers, body).await;
            let status = response.status().as_u16();
            (status, response.bytes().await.unwrap())
        }
    }))
    .await;

    for (status, body) in &answers {
        assert_eq!(*status, 200, "{}", String::from_utf8_lossy(body));
        assert_eq!(*body, answers[0].1, "every copy gets the stored answer");
    }
    assert_eq!(app.ledger_rows().await, 1, "exactly one effect");
    if backend == Backend::Postgres {
        let mut conn = app.store.conn().await.unwrap();
        let attempts: Count = with_conn!(&mut conn, |c| {
            diesel::sql_query(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS n FROM claim_attempts",
            )
            .get_result(c)
            .await
        })
        .expect("the count");
        assert_eq!(
            attempts.n, 1,
            "only the first copy's claim reached the database; the others were answered from the cache"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_copies_that_waited_for_a_connection_answer_from_the_cache_sqlite() {
    storm_behind_one_connection(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_copies_that_waited_for_a_connection_answer_from_the_cache_postgres() {
    storm_behind_one_connection(Backend::Postgres).await;
}
