//! A schema of its own on the shared PostgreSQL test database, for one test:
//! its URL points `search_path` at it, so tests run in parallel on one
//! database. Included by every test binary that needs PostgreSQL
//! (`tests/api`, `tests/crash`, `tests/scale_out.rs`) with `#[path]`.

// Each binary uses only part of this file.
#![allow(dead_code)]

use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use idempotent_receiver::store::PgConn;
use std::time::Duration;

/// The shared test database: `TEST_DATABASE_URL`, or the local default.
pub fn database_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into())
}

/// `IR_REQUIRE_POSTGRES`: an unreachable server fails the run instead of
/// skipping the PostgreSQL half.
pub fn required() -> bool {
    std::env::var("IR_REQUIRE_POSTGRES").is_ok_and(|v| v == "1" || v == "true")
}

/// Creates the schema `{prefix}{uuid}` and returns its name, or why the
/// server could not be reached within 5 s.
pub async fn create(prefix: &str) -> Result<String, String> {
    let schema = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut conn = PgConn::establish(&database_url())
            .await
            .map_err(|e| e.to_string())?;
        conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|_| Err("timed out after 5 s".into()))?;
    Ok(schema)
}

/// `base` (the test database's URL, or one with another host:port) with
/// `search_path` set to `schema`.
pub fn url(base: &str, schema: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}options=-csearch_path%3D{schema}")
}

/// Drops `schema` and everything in it; false when that did not happen
/// within 10 s (`.ci/run` drops leftover `t_` schemas).
pub async fn drop(schema: &str) -> bool {
    let dropped = tokio::time::timeout(Duration::from_secs(10), async {
        let mut conn = PgConn::establish(&database_url()).await.ok()?;
        conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
            .ok()
    })
    .await;
    matches!(dropped, Ok(Some(())))
}
