//! The database itself refuses a row the engine would never write: a status
//! other than in progress or completed, an in-progress row without its
//! lease, a completed row without the answer it replays, a ledger entry of
//! another kind or without a positive amount; a queue job in an unknown
//! state or running without its lease; an outbox row in an unknown state or
//! with half a lease. On PostgreSQL one CHECK per table says it (migrations
//! 000013 and 000014: each table's checks were read back and planned again
//! on every INSERT and UPDATE); SQLite keeps its original ones. The same
//! rows are refused on both, and the rows the engine writes are accepted.

use diesel_async::SimpleAsyncConnection;
use idempotent_receiver::store::DbConn;
use idempotent_receiver::with_conn;

const COLUMNS: &str = "endpoint, delivery_id, request_hash, status, lease_owner, lease_expires_at, \
                       response_status, response_body, completed_at, received_at";
const AT: &str = "'2026-12-06 08:00:00'";

/// A `deliveries` row's values after the endpoint and id: status, lease
/// owner and expiry, answer status and body, completion time.
fn delivery(id: &str, status: &str, lease: bool, answer: bool) -> String {
    let (owner, expires) = if lease {
        ("'pid1/x'", AT)
    } else {
        ("NULL", "NULL")
    };
    let (code, body, completed) = if answer {
        ("200", "'{}'", AT)
    } else {
        ("NULL", "NULL", "NULL")
    };
    format!(
        "INSERT INTO deliveries ({COLUMNS}) VALUES ('checks', '{id}', 'h', '{status}', \
         {owner}, {expires}, {code}, {body}, {completed}, {AT})"
    )
}

fn ledger(id: &str, kind: &str, amount: i64) -> String {
    format!(
        "INSERT INTO ledger_entries (endpoint, delivery_id, kind, payment_id, amount, currency, created_at) \
         VALUES ('checks', '{id}', '{kind}', 'pay_1', {amount}, 'EUR', {AT})"
    )
}

/// A `queue_jobs` row in `state`, without a lease (a running job gets its
/// lease by update).
fn job(id: &str, state: &str) -> String {
    format!(
        "INSERT INTO queue_jobs (endpoint, delivery_id, state, next_run_at, received_at) \
         VALUES ('checks', '{id}', '{state}', {AT}, {AT})"
    )
}

/// An `outbox` row in `state`, with a lease owner and a lease expiry each
/// given or not.
fn outbox(id: &str, state: &str, owner: bool, expires: bool) -> String {
    let owner = if owner { "'pid1/x'" } else { "NULL" };
    let expires = if expires { AT } else { "NULL" };
    format!(
        "INSERT INTO outbox (publisher, endpoint, delivery_id, message_id, destination, body, \
         state, next_attempt_at, lease_owner, lease_expires_at, received_at, created_at) \
         VALUES ('bus', 'checks', '{id}', 'checks:{id}', 'events', '{{}}', '{state}', {AT}, \
         {owner}, {expires}, {AT}, {AT})"
    )
}

/// An `UPDATE` of one of this test's rows of `table`.
fn update(table: &str, id: &str, set: &str) -> String {
    format!("UPDATE {table} SET {set} WHERE endpoint = 'checks' AND delivery_id = '{id}'")
}

async fn accepted(conn: &mut DbConn, sql: &str) {
    run(conn, sql).await.expect(sql);
}

async fn run(conn: &mut DbConn, sql: &str) -> Result<(), String> {
    with_conn!(conn, |c| c.batch_execute(sql).await).map_err(|e| e.to_string())
}

async fn refused(conn: &mut DbConn, sql: &str) {
    let error = run(conn, sql).await.expect_err(sql);
    assert!(error.to_lowercase().contains("check"), "{sql}: {error}");
}

crate::both_backends!(
    async fn the_database_refuses_rows_the_engine_never_writes(app) {
        let mut conn = app.store.conn().await.expect("a connection");
        // What the engine writes: a claim with its lease, a completion with
        // its answer (the lease cleared), a charge and a refund.
        let unleased = "lease_owner = NULL, lease_expires_at = NULL";
        accepted(&mut conn, &delivery("ok_claimed", "in_progress", true, false)).await;
        accepted(&mut conn, &delivery("ok_done", "completed", false, true)).await;
        let completion = "status = 'completed', response_status = 200, response_body = '{}', \
                          completed_at = '2026-12-06 08:00:01'";
        accepted(&mut conn, &update("deliveries", "ok_claimed", &format!("{completion}, {unleased}"))).await;
        accepted(&mut conn, &ledger("ok_done", "charge", 1)).await;
        accepted(&mut conn, &ledger("ok_claimed", "refund", 4200)).await;

        refused(&mut conn, &delivery("bad_status", "pending", true, true)).await;
        refused(&mut conn, &delivery("claim_without_lease", "in_progress", false, false)).await;
        refused(&mut conn, &delivery("done_without_answer", "completed", true, false)).await;
        // An update is checked as well: back to in progress without a lease.
        refused(&mut conn, &update("deliveries", "ok_done", "status = 'in_progress'")).await;
        refused(&mut conn, &update("deliveries", "ok_done", "response_body = NULL")).await;
        refused(&mut conn, &ledger("x", "payout", 1)).await;
        refused(&mut conn, &ledger("x", "charge", 0)).await;
        refused(&mut conn, &ledger("x", "refund", -5)).await;

        // A job's life: queued, running under a lease, done; and the other
        // states a worker or an operator leaves it in.
        let leased = "lease_owner = 'pid1/x', lease_expires_at = '2026-12-06 08:01:00'";
        accepted(&mut conn, &job("job_ok", "queued")).await;
        accepted(&mut conn, &update("queue_jobs", "job_ok", &format!("state = 'running', {leased}"))).await;
        accepted(&mut conn, &update("queue_jobs", "job_ok", &format!("state = 'done', {unleased}"))).await;
        for state in ["retrying", "dead", "cancelled"] {
            accepted(&mut conn, &job(&format!("job_{state}"), state)).await;
        }
        refused(&mut conn, &job("job_bad_state", "paused")).await;
        refused(&mut conn, &job("job_running_unleased", "running")).await;
        refused(&mut conn, &update("queue_jobs", "job_ok", "state = 'running'")).await;

        // An outbox row: pending, taken under a lease, sent; failed.
        accepted(&mut conn, &outbox("out_ok", "pending", false, false)).await;
        accepted(&mut conn, &update("outbox", "out_ok", leased)).await;
        accepted(&mut conn, &update("outbox", "out_ok", &format!("state = 'sent', {unleased}"))).await;
        accepted(&mut conn, &outbox("out_failed", "failed", false, false)).await;
        refused(&mut conn, &outbox("out_bad_state", "queued", false, false)).await;
        refused(&mut conn, &outbox("out_owner_only", "pending", true, false)).await;
        refused(&mut conn, &outbox("out_expiry_only", "pending", false, true)).await;
        refused(&mut conn, &update("outbox", "out_ok", "lease_owner = 'pid1/x'")).await;

        let kept: Vec<String> = with_conn!(&mut conn, |c| {
            use diesel::prelude::*;
            use diesel_async::RunQueryDsl;
            use idempotent_receiver::store::schema::deliveries;
            deliveries::table
                .filter(deliveries::endpoint.eq("checks"))
                .select(deliveries::status)
                .load(c)
                .await
        })
        .expect("the rows are read");
        assert_eq!(kept, ["completed", "completed"]);
    }
);
