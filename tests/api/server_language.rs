//! PostgreSQL answering in German (`lc_messages`): lock and statement
//! timeouts are still told apart and answered as in English (409, 503).
//! diesel-async passes on only a PostgreSQL error's message, which the
//! server translates; the store sets `lc_messages = 'C'` on each connection
//! where the role may. PostgreSQL only: SQLite's messages are not translated.
//!
//! Needs the `de_DE.UTF-8` locale on the database server (`.ci/run` makes
//! it); the tests check first that the server does answer in German.

use crate::helpers::{Backend, TestApp, payment, problem};
use crate::test_schema;
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::store::{DbConn, PgConn, Store, StoreError, StoreOptions};
use serde_json::Value;
use std::time::Duration;

/// `url` with the session's messages in German.
fn in_german(url: &str) -> String {
    assert!(url.contains("options="), "{url}");
    format!("{url}%20-clc_messages%3Dde_DE.UTF-8")
}

/// A fresh schema and its German URL; `None` when PostgreSQL is optional
/// and absent.
async fn german_schema() -> Option<(String, String)> {
    let schema = match test_schema::create("t_").await {
        Ok(schema) => schema,
        Err(reason) if test_schema::required() => panic!("PostgreSQL is required: {reason}"),
        Err(_) => return None,
    };
    let url = in_german(&test_schema::url(&test_schema::database_url(), &schema));
    Some((schema, url))
}

/// Runs `sql` on `conn`, expecting PostgreSQL to cancel it.
async fn cancelled(conn: &mut PgConn, sql: &str) -> diesel::result::Error {
    conn.batch_execute(sql)
        .await
        .expect_err("the statement is cancelled")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_statement_timeouts_in_german_are_classified_as_in_english() {
    let Some((schema, url)) = german_schema().await else {
        return;
    };
    // The premise: a plain German session's timeout is not recognised by
    // its message, which is what the receiver got before it set lc_messages.
    let mut plain = PgConn::establish(&url).await.expect("a connection");
    let error = cancelled(
        &mut plain,
        "SET LOCAL statement_timeout = '1ms'; SELECT pg_sleep(1)",
    )
    .await;
    assert!(
        error.to_string().contains("Zeitüberschreitung"),
        "the server does not answer in German (is de_DE.UTF-8 generated?): {error}"
    );
    assert!(matches!(StoreError::from(error), StoreError::Query(_)));

    let options = StoreOptions {
        pool_size: 2,
        lock_wait: Duration::from_millis(200),
        statement_timeout: Duration::from_millis(300),
        ..StoreOptions::default()
    };
    let store = Store::connect(
        &idempotent_receiver::store::DatabaseUrl::parse(&url).unwrap(),
        &options,
    )
    .unwrap();
    assert!(store.check_error_language().await.unwrap());
    let mut conn = store.conn().await.unwrap();
    let DbConn::Pg(conn) = &mut conn else {
        panic!("a PostgreSQL connection")
    };

    // A real lock timeout: the plain session holds the lock.
    plain
        .batch_execute("SELECT pg_advisory_lock(711)")
        .await
        .unwrap();
    let error = cancelled(conn, "SELECT pg_advisory_lock(711)").await;
    assert!(
        matches!(StoreError::from(error), StoreError::LockTimeout),
        "not a lock timeout"
    );
    plain
        .batch_execute("SELECT pg_advisory_unlock(711)")
        .await
        .unwrap();

    // A real statement timeout, transient like an outage.
    let error = cancelled(conn, "SELECT pg_sleep(2)").await;
    let error = StoreError::from(error);
    assert!(matches!(error, StoreError::StatementTimeout), "{error}");
    assert!(error.is_transient());
    test_schema::drop(&schema).await;
}

/// Holds its transaction (and so the delivery's row) for a while, or runs
/// a statement past a short statement timeout, as the body asks.
struct Slow;

#[async_trait::async_trait(?Send)]
impl Handler for Slow {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        let DbConn::Pg(conn) = conn else {
            return Ok(None);
        };
        if event.raw.windows(9).any(|w| w == b"slow-lock") {
            tokio::time::sleep(Duration::from_millis(2000)).await;
        }
        if event.raw.windows(8).any(|w| w == b"slow-sql") {
            conn.batch_execute("SET LOCAL statement_timeout = '100ms'; SELECT pg_sleep(2)")
                .await?;
        }
        Ok(None)
    }
}

fn body(marker: &str) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(&payment("pay_de", 100)).unwrap();
    value["data"]["note"] = marker.into();
    value.to_string().into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_german_server_still_answers_409_to_a_parallel_duplicate_and_503_to_a_statement_timeout()
{
    let Some((schema, url)) = german_schema().await else {
        return;
    };
    let store = Store::connect(
        &idempotent_receiver::store::DatabaseUrl::parse(&url).unwrap(),
        &StoreOptions::default(),
    )
    .unwrap();
    store.migrate().await.expect("migrations apply");
    let app = TestApp::builder(Backend::Postgres)
        .database_url(&url)
        .handler("slow", Slow)
        .spawn()
        .await;

    // The first copy holds the key's row for 2 s; the second waits on it
    // for `in_progress_wait` (500 ms, the claim's lock_timeout), then 409.
    let slow = body("slow-lock");
    let first = app.deliver("msg_de_lock", &slow);
    let second = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.deliver("msg_de_lock", &slow).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.status(), 200);
    let conflict = problem(second, 409, "in-progress").await;
    assert!(conflict["detail"].is_string());

    let timed_out = app.deliver("msg_de_sql", &body("slow-sql")).await;
    problem(timed_out, 503, "storage-unavailable").await;
    assert!(
        app.delivery("msg_de_sql").await.is_none(),
        "the key was released"
    );

    test_schema::drop(&schema).await;
}

/// `url` (the test database's) logged in as `role` instead.
fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}@{host}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_tells_whether_the_role_may_switch_a_german_server_to_english() {
    let Some((schema, _)) = german_schema().await else {
        return;
    };
    let role = format!("ir_t_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut superuser = PgConn::establish(&test_schema::database_url())
        .await
        .expect("a connection");
    // The server answers this role in German, and the role may not change it.
    superuser
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; ALTER ROLE {role} SET lc_messages = 'de_DE.UTF-8'"
        ))
        .await
        .expect("the test role is made");
    let url = idempotent_receiver::store::DatabaseUrl::parse(&as_role(
        &test_schema::database_url(),
        &role,
    ))
    .unwrap();
    let unprivileged = Store::connect(&url, &StoreOptions::default())
        .unwrap()
        .check_error_language()
        .await;
    // Once it may (PostgreSQL 15+), each connection switches to English.
    superuser
        .batch_execute(&format!("GRANT SET ON PARAMETER lc_messages TO {role}"))
        .await
        .expect("the grant is made");
    let granted = Store::connect(&url, &StoreOptions::default())
        .unwrap()
        .check_error_language()
        .await;
    superuser
        .batch_execute(&format!(
            "REVOKE SET ON PARAMETER lc_messages FROM {role}; DROP ROLE {role}"
        ))
        .await
        .expect("the test role is dropped");
    assert!(
        !unprivileged.expect("the probe runs"),
        "German went unnoticed"
    );
    assert!(
        granted.expect("the probe runs"),
        "the granted role stays German"
    );
    test_schema::drop(&schema).await;
}
