//! A key is found by its primary key however young the table (migration
//! 000012). PostgreSQL plans a prepared statement generically after its
//! fifth run on a connection and keeps that plan until the table is next
//! analysed; made on a table still empty, the generic plan of
//! `endpoint = $1 AND delivery_id = $2` walked the retention index
//! `(endpoint, received_at)` instead of the primary key, so every
//! completion, lookup and tally write read all of the endpoint's rows until
//! autovacuum's first ANALYZE. The index is now partial on `received_at IS
//! NOT NULL`, which key lookups never imply, while the purge's range and the
//! listing's order still use it.
//!
//! Checked on a freshly migrated, never analysed table: a key lookup's
//! generic plan uses the primary key; the per-endpoint purge and the
//! listing by endpoint can use the partial index. SQLite's index is not
//! partial (SQLite drops `IS NOT NULL` on a NOT NULL column, so the listing
//! could no longer use it); there the same shapes are checked as they are.

use crate::helpers::{Backend, PlanLine, SqlitePlanLine, TestApp};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use idempotent_receiver::store::DbConn;
use idempotent_receiver::with_conn;

/// The statement shapes whose plans matter: a key's completion (every
/// statement that finds a key by its primary key has this `WHERE`), the
/// purge of one endpoint, and the listing of one endpoint, newest first.
const KEY: &str =
    "UPDATE deliveries SET replays = replays + 1 WHERE endpoint = $1 AND delivery_id = $2";
const PURGE: &str = "SELECT delivery_id FROM deliveries WHERE endpoint = $1 AND received_at <= $2::timestamp ORDER BY received_at LIMIT 100";
const LISTING: &str = "SELECT delivery_id FROM deliveries WHERE endpoint = $1 AND received_at IS NOT NULL ORDER BY received_at DESC LIMIT 50";

/// PostgreSQL's generic plan of `sql`, as a connection that ran it five
/// times would keep it; with `index_only`, sequential scans are priced out
/// to ask whether an index can serve it at all.
async fn postgres_plan(conn: &mut DbConn, sql: &str, args: &str, index_only: bool) -> String {
    let setup = format!(
        "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = {}; PREPARE shape AS {sql}",
        if index_only { "off" } else { "on" }
    );
    with_conn!(conn, |c| c.batch_execute(&setup).await).expect("prepared");
    let plan: Vec<PlanLine> = with_conn!(conn, |c| {
        diesel::sql_query(format!("EXPLAIN EXECUTE shape({args})"))
            .load(c)
            .await
    })
    .expect("the plan");
    with_conn!(conn, |c| c
        .batch_execute("DEALLOCATE shape; RESET plan_cache_mode; RESET enable_seqscan")
        .await)
    .expect("reset");
    plan.into_iter()
        .map(|l| l.line)
        .collect::<Vec<_>>()
        .join("\n")
}

async fn sqlite_plan(conn: &mut DbConn, sql: &str) -> String {
    let sql = sql
        .replace("$1", "'shop'")
        .replace("$2::timestamp", "'2026-12-05 00:00:00'")
        .replace("$2", "'evt_1'");
    let plan: Vec<SqlitePlanLine> = with_conn!(conn, |c| {
        diesel::sql_query(format!("EXPLAIN QUERY PLAN {sql}"))
            .load(c)
            .await
    })
    .expect("the plan");
    plan.into_iter()
        .map(|l| l.detail)
        .collect::<Vec<_>>()
        .join("\n")
}

async fn keys_are_found_by_the_primary_key_on_a_young_table(backend: Backend) {
    let Some(app) = TestApp::builder(backend).spawn_if_available().await else {
        return;
    };
    let mut conn = app.store.conn().await.expect("a connection");
    let (key, purge, listing) = match backend {
        Backend::Postgres => (
            postgres_plan(&mut conn, KEY, "'shop', 'evt_1'", false).await,
            postgres_plan(&mut conn, PURGE, "'shop', '2026-12-05'", true).await,
            postgres_plan(&mut conn, LISTING, "'shop'", true).await,
        ),
        Backend::Sqlite => (
            sqlite_plan(&mut conn, KEY).await,
            sqlite_plan(&mut conn, PURGE).await,
            sqlite_plan(&mut conn, LISTING).await,
        ),
    };
    let primary_key = match backend {
        Backend::Postgres => "deliveries_pkey",
        Backend::Sqlite => "sqlite_autoindex_deliveries_1",
    };
    assert!(key.contains(primary_key), "{key}");
    assert!(!key.contains("received_at"), "{key}");
    // The test schema's copy of an index may carry another name than the
    // migration gave it; its columns give it away.
    for plan in [&purge, &listing] {
        let by_endpoint_and_time = match backend {
            Backend::Postgres => plan.contains("endpoint_received_at"),
            Backend::Sqlite => plan.contains("USING INDEX deliveries_endpoint_received_at"),
        };
        assert!(by_endpoint_and_time, "{plan}");
        let sorts = match backend {
            Backend::Postgres => plan.contains("Sort"),
            Backend::Sqlite => plan.contains("TEMP B-TREE"),
        };
        assert!(!sorts, "{plan}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_found_by_the_primary_key_on_a_young_table_sqlite() {
    keys_are_found_by_the_primary_key_on_a_young_table(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_found_by_the_primary_key_on_a_young_table_postgres() {
    keys_are_found_by_the_primary_key_on_a_young_table(Backend::Postgres).await;
}
