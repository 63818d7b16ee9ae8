//! Taking the next due job costs the same whatever the backlog: the take
//! walks `queue_jobs_next` in its `ORDER BY`'s order and stops at the first
//! job it may run. Before, PostgreSQL planned an anti-join that read and
//! sorted every due job on each take (10 ms per take at 16,000 waiting, and
//! the drain slowed as its backlog grew).
//!
//! Checked on a backlog of 10,000 due jobs, not analysed, behind a paused
//! endpoint's and an ordering key's blocked jobs: the right job is taken,
//! and the plan walks `queue_jobs_next` without a sort.

use crate::helpers::{Backend, PlanLine, SqlitePlanLine, TestApp};
use chrono::{Duration as Span, NaiveDateTime};
use diesel::sql_types::{Text, Timestamp};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use idempotent_receiver::clock::Clock;
use idempotent_receiver::store::DbConn;
use idempotent_receiver::store::queue::TakenJob;
use idempotent_receiver::store::queue::take_due_sql;
use idempotent_receiver::with_conn;

const BACKLOG: i64 = 10_000;

/// `BACKLOG` due jobs of `ready`, one a second, the oldest first; before
/// them in the order, 200 jobs of a paused endpoint and 200 events of one
/// object whose oldest event is running under a live lease: none of those
/// may be taken.
async fn seed(conn: &mut DbConn, now: NaiveDateTime) {
    let start = now - Span::seconds(BACKLOG + 1_000);
    let rows = |from: i64, count: i64, endpoint: &str, ordering: bool| {
        (from..from + count)
            .map(|n| {
                let at = start + Span::seconds(n);
                let key = if ordering { "'obj_1'" } else { "NULL" };
                format!(
                    "('{endpoint}', 'job_{endpoint}_{n:05}', 'queued', 0, '{at}', '{at}', {key})"
                )
            })
            .collect::<Vec<_>>()
            .join(",\n")
    };
    let sql = format!(
        "INSERT INTO queue_pauses (endpoint, paused_at, actor) VALUES ('paused', '{start}', 'test');
         INSERT INTO queue_jobs (endpoint, delivery_id, state, attempts, next_run_at, received_at, ordering_key) VALUES
         {paused};
         INSERT INTO queue_jobs (endpoint, delivery_id, state, attempts, next_run_at, received_at, ordering_key) VALUES
         {ordered};
         UPDATE queue_jobs SET state = 'running', attempts = 1, lease_owner = 'elsewhere', lease_expires_at = '{lease}'
           WHERE delivery_id = 'job_ordered_00200';
         INSERT INTO queue_jobs (endpoint, delivery_id, state, attempts, next_run_at, received_at, ordering_key) VALUES
         {ready};",
        paused = rows(0, 200, "paused", false),
        ordered = rows(200, 200, "ordered", true),
        ready = rows(400, BACKLOG, "ready", false),
        lease = now + Span::minutes(5),
    );
    // Not analysed: a queue's statistics are usually those of an empty
    // queue when a backlog forms, and the take must not depend on them.
    with_conn!(conn, |c| c.batch_execute(&sql).await).expect("the backlog is written");
}

async fn take(conn: &mut DbConn, until: NaiveDateTime, now: NaiveDateTime) -> TakenJob {
    conn.take_due("worker", until, now)
        .await
        .expect("the take")
        .expect("a job is due")
}

async fn take_is_independent_of_the_backlog(backend: Backend) {
    let Some(app) = TestApp::builder(backend).spawn_if_available().await else {
        return;
    };
    let now = app.clock.naive_now();
    let mut conn = app.store.conn().await.expect("a connection");
    seed(&mut conn, now).await;
    let until = now + Span::minutes(1);

    // On PostgreSQL, the take runs in a transaction as `take_job`'s does,
    // and its plan is explained in it afterwards, with the settings the
    // take made for it: without them, on these statistics, PostgreSQL
    // reads every due job and sorts them.
    let postgres = backend == Backend::Postgres;
    if postgres {
        with_conn!(&mut conn, |c| c.batch_execute("BEGIN").await).expect("BEGIN");
    }
    let taken = take(&mut conn, until, now).await;
    assert_eq!(
        (taken.endpoint.as_str(), taken.delivery_id.as_str()),
        ("ready", "job_ready_00400"),
        "the oldest job that may run: not a paused endpoint's, not one behind a running event of its object"
    );

    let sql = take_due_sql(app.store.backend());
    let explain = |prefix: &str| {
        diesel::sql_query(format!("{prefix} {sql}"))
            .bind::<Text, _>("worker")
            .bind::<Timestamp, _>(until)
            .bind::<Timestamp, _>(now)
    };
    let plan: Vec<String> = match backend {
        Backend::Postgres => {
            with_conn!(&mut conn, |c| explain("EXPLAIN").load::<PlanLine>(c).await)
                .expect("the plan")
                .into_iter()
                .map(|l| l.line)
                .collect()
        }
        Backend::Sqlite => with_conn!(&mut conn, |c| explain("EXPLAIN QUERY PLAN")
            .load::<SqlitePlanLine>(c)
            .await)
        .expect("the plan")
        .into_iter()
        .map(|l| l.detail)
        .collect(),
    };
    let plan = plan.join("\n");
    assert!(plan.contains("queue_jobs_next"), "{plan}");
    assert!(!plan.contains("Sort"), "the take sorts: {plan}");
    assert!(
        !plan.contains("B-TREE FOR ORDER BY"),
        "the take sorts: {plan}"
    );
    if postgres {
        with_conn!(&mut conn, |c| c.batch_execute("COMMIT").await).expect("COMMIT");
    }

    // The next take moves on to the next job.
    let next = take(&mut conn, until, now).await;
    assert_eq!(next.delivery_id, "job_ready_00401");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_a_job_walks_the_due_order_and_stops_sqlite() {
    take_is_independent_of_the_backlog(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_a_job_walks_the_due_order_and_stops_postgres() {
    take_is_independent_of_the_backlog(Backend::Postgres).await;
}
