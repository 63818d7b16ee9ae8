//! A database of its own for one test. On PostgreSQL a schema of the shared
//! test database: its URL points `search_path` at it, so tests run in
//! parallel on one database. Included by every test binary that needs
//! PostgreSQL (`tests/api`, `tests/crash`, `tests/scale_out.rs`) with
//! `#[path]`.
//!
//! The migrations run once into a template (a schema, or a SQLite file)
//! named after a hash of the migration files, so it is reused by every test
//! and every run until a migration changes; each test's database is a copy
//! of it, which costs one transaction instead of a migration run.

// Each binary uses only part of this file.
#![allow(dead_code)]

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use idempotent_receiver::store::{DatabaseUrl, PgConn, Store, StoreOptions};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::OnceCell;

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

/// Creates the schema `{prefix}{uuid}` with every table of the migrated
/// template, and returns its name. The first call of the process makes sure
/// the template exists.
pub async fn create_migrated(prefix: &str) -> Result<String, String> {
    static CLONE_SCRIPT: OnceCell<String> = OnceCell::const_new();
    let script = CLONE_SCRIPT.get_or_try_init(postgres_template).await?;
    let schema = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    tokio::time::timeout(Duration::from_secs(10), async {
        let mut conn = PgConn::establish(&database_url())
            .await
            .map_err(|e| e.to_string())?;
        conn.batch_execute(&format!(
            "BEGIN; CREATE SCHEMA {schema}; SET LOCAL search_path TO {schema}; {script} COMMIT;"
        ))
        .await
        .map_err(|e| format!("cannot copy the template into {schema}: {e}"))
    })
    .await
    .unwrap_or_else(|_| Err("timed out after 10 s".into()))?;
    Ok(schema)
}

/// Another process building the same template waits on this lock.
const TEMPLATE_LOCK: i64 = 0x6972_7465_6d70_6c74;

/// Makes sure the template schema of the current migrations exists, and
/// returns the SQL that copies it into the schema first on `search_path`.
async fn postgres_template() -> Result<String, String> {
    let template = format!("t_template_{}", migrations_hash("postgres"));
    tokio::time::timeout(Duration::from_secs(60), async {
        let mut conn = PgConn::establish(&database_url())
            .await
            .map_err(|e| e.to_string())?;
        let sql_error = |e: diesel::result::Error| e.to_string();
        conn.batch_execute(&format!("SELECT pg_advisory_lock({TEMPLATE_LOCK})"))
            .await
            .map_err(sql_error)?;
        let built = async {
            let exists =
                diesel::sql_query("SELECT nspname AS name FROM pg_namespace WHERE nspname = $1")
                    .bind::<Text, _>(&template)
                    .load::<Name>(&mut conn)
                    .await
                    .map_err(sql_error)?;
            if exists.is_empty() {
                // Built under another name and renamed when complete, so
                // that a run interrupted half-way leaves no half template.
                let building = format!("{template}_building");
                conn.batch_execute(&format!(
                    "DROP SCHEMA IF EXISTS {building} CASCADE; CREATE SCHEMA {building}"
                ))
                .await
                .map_err(sql_error)?;
                let url = DatabaseUrl::Postgres(url(&database_url(), &building));
                let store =
                    Store::connect(&url, &StoreOptions::default()).map_err(|e| e.to_string())?;
                store.migrate().await.map_err(|e| e.to_string())?;
                conn.batch_execute(&format!("ALTER SCHEMA {building} RENAME TO {template}"))
                    .await
                    .map_err(sql_error)?;
            }
            clone_script(&mut conn, &template).await
        }
        .await;
        let unlocked = conn
            .batch_execute(&format!("SELECT pg_advisory_unlock({TEMPLATE_LOCK})"))
            .await;
        let script = built?;
        unlocked.map_err(sql_error)?;
        Ok(script)
    })
    .await
    .unwrap_or_else(|_| Err("timed out after 60 s building the template".into()))
}

#[derive(QueryableByName)]
struct Name {
    #[diesel(sql_type = Text)]
    name: String,
}

#[derive(QueryableByName)]
struct Column {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    column_name: String,
}

#[derive(QueryableByName)]
struct ForeignKey {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    definition: String,
}

/// The SQL that recreates `template`'s tables, with their data (the
/// migrations table), in the schema first on `search_path`: each table
/// `LIKE` its template (columns, defaults, checks, indexes), then a sequence
/// of its own for each serial column (a copied default would draw from the
/// template's), then the foreign keys, which `LIKE` leaves out.
async fn clone_script(conn: &mut PgConn, template: &str) -> Result<String, String> {
    let sql_error = |e: diesel::result::Error| e.to_string();
    let unsupported = diesel::sql_query(
        "SELECT c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relkind IN ('v', 'm', 'f', 'p') \
         UNION ALL SELECT t.tgname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT t.tgisinternal \
         UNION ALL SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname = $1",
    )
    .bind::<Text, _>(template)
    .load::<Name>(conn)
    .await
    .map_err(sql_error)?;
    if let [object, ..] = unsupported.as_slice() {
        return Err(format!(
            "the template {template} has {:?}, which tests/support/test_schema.rs does not copy yet",
            object.name
        ));
    }
    let tables = diesel::sql_query(
        "SELECT c.relname::text AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname",
    )
    .bind::<Text, _>(template)
    .load::<Name>(conn)
    .await
    .map_err(sql_error)?;
    let serials = diesel::sql_query(
        "SELECT table_name::text AS table_name, column_name::text AS column_name \
         FROM information_schema.columns \
         WHERE table_schema = $1 AND column_default LIKE 'nextval(%' ORDER BY table_name, column_name",
    )
    .bind::<Text, _>(template)
    .load::<Column>(conn)
    .await
    .map_err(sql_error)?;
    // Read with the template first on the path, so that the definitions
    // name the tables they reference without a schema.
    conn.batch_execute(&format!("SET search_path TO {template}"))
        .await
        .map_err(sql_error)?;
    let foreign_keys = diesel::sql_query(
        "SELECT c.relname::text AS table_name, k.conname::text AS name, \
         pg_get_constraintdef(k.oid) AS definition FROM pg_constraint k \
         JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND k.contype = 'f' ORDER BY c.relname, k.conname",
    )
    .bind::<Text, _>(template)
    .load::<ForeignKey>(conn)
    .await
    .map_err(sql_error)?;
    let mut script = String::new();
    for Name { name: table } in &tables {
        script.push_str(&format!(
            "CREATE TABLE {table} (LIKE {template}.{table} INCLUDING ALL); \
             INSERT INTO {table} SELECT * FROM {template}.{table}; "
        ));
    }
    for Column {
        table_name,
        column_name,
    } in &serials
    {
        let sequence = format!("{table_name}_{column_name}_seq");
        script.push_str(&format!(
            "CREATE SEQUENCE {sequence} OWNED BY {table_name}.{column_name}; \
             ALTER TABLE {table_name} ALTER COLUMN {column_name} SET DEFAULT nextval('{sequence}'); "
        ));
    }
    for key in &foreign_keys {
        script.push_str(&format!(
            "ALTER TABLE {} ADD CONSTRAINT {} {}; ",
            key.table_name, key.name, key.definition
        ));
    }
    Ok(script)
}

/// A fresh copy of the migrated SQLite template at `path`. The first call of
/// the process makes sure the template exists.
pub async fn copy_sqlite_template(path: &Path) -> Result<(), String> {
    static TEMPLATE: OnceCell<PathBuf> = OnceCell::const_new();
    let template = TEMPLATE.get_or_try_init(sqlite_template).await?;
    std::fs::copy(template, path)
        .map(|_| ())
        .map_err(|e| format!("cannot copy {}: {e}", template.display()))
}

/// The migrated SQLite template of the current migrations, in cargo's
/// temporary folder for tests; made by the first test that needs it.
async fn sqlite_template() -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let template = dir.join(format!("sqlite-template-{}.db", migrations_hash("sqlite")));
    if template.exists() {
        return Ok(template);
    }
    // Migrated apart and moved into place complete: tests of another binary
    // may be copying the template at the same time.
    let building = dir.join(format!("sqlite-template-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&building).map_err(|e| e.to_string())?;
    let file = building.join("template.db");
    let url = DatabaseUrl::Sqlite(building.join("migrated.db"));
    let store = Store::connect(&url, &StoreOptions::default()).map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())?;
    // One self-contained file, whatever is still in the write-ahead log.
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let vacuum = format!("VACUUM INTO '{}'", file.display());
    idempotent_receiver::with_conn!(&mut conn, |c| c.batch_execute(&vacuum).await)
        .map_err(|e| e.to_string())?;
    std::mem::drop(conn);
    std::mem::drop(store);
    std::fs::rename(&file, &template).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&building);
    Ok(template)
}

/// A short hash of every file under `migrations/{backend}`: a changed
/// migration makes a new template.
fn migrations_hash(backend: &str) -> String {
    fn files(dir: &Path, found: &mut Vec<PathBuf>) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    files(&path, found);
                } else {
                    found.push(path);
                }
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(backend);
    let mut found = Vec::new();
    files(&root, &mut found);
    found.sort();
    let mut hash = Sha256::new();
    for path in found {
        hash.update(
            path.strip_prefix(&root)
                .unwrap_or(&path)
                .to_string_lossy()
                .as_bytes(),
        );
        hash.update(std::fs::read(&path).unwrap_or_default());
    }
    hex::encode(&hash.finalize()[..8])
}
