use super::{Backend, DatabaseUrl, DbConn, PgConn, Store, StoreError};
use diesel::connection::SimpleConnection;
use diesel::migration::MigrationSource;
use diesel::prelude::*;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::{AsyncConnection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

const POSTGRES: EmbeddedMigrations = embed_migrations!("migrations/postgres");
const SQLITE: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// Held while migrating, so that several instances starting at once on one
/// PostgreSQL apply each migration exactly once.
const PG_MIGRATION_LOCK: i64 = 0x6964_656d_7263_7631;

impl Store {
    /// Applies the pending embedded migrations and returns how many ran.
    ///
    /// Diesel's migration harness is synchronous, so it runs on the blocking
    /// pool (never with `block_in_place`, which would panic on a
    /// current-thread runtime).
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        match self.url() {
            DatabaseUrl::Sqlite(_) => {
                let mut conn = self.conn().await?;
                match &mut conn {
                    DbConn::Sqlite(conn) => Ok(conn
                        .spawn_blocking(|c| {
                            c.run_pending_migrations(SQLITE)
                                .map(|done| done.len())
                                .map_err(diesel::result::Error::QueryBuilderError)
                        })
                        .await?),
                    DbConn::Pg(_) => Err(StoreError::Unavailable(
                        "a sqlite URL built a postgres pool".into(),
                    )),
                }
            }
            DatabaseUrl::Postgres(url) => {
                let conn = PgConn::establish(url)
                    .await
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                let mut conn: AsyncConnectionWrapper<PgConn> = conn.into();
                tokio::task::spawn_blocking(move || {
                    conn.batch_execute(&format!("SELECT pg_advisory_lock({PG_MIGRATION_LOCK})"))?;
                    let applied = conn
                        .run_pending_migrations(POSTGRES)
                        .map(|done| done.len())
                        .map_err(diesel::result::Error::QueryBuilderError);
                    conn.batch_execute(&format!("SELECT pg_advisory_unlock({PG_MIGRATION_LOCK})"))?;
                    applied
                })
                .await
                .map_err(|e| StoreError::Unavailable(format!("migration task failed: {e}")))?
                .map_err(StoreError::from)
            }
        }
    }

    /// Whether every embedded migration has been applied (for `/readyz`):
    /// compares the versions recorded in `__diesel_schema_migrations` with the
    /// embedded ones, on a pooled connection.
    pub async fn migrations_applied(&self) -> Result<bool, StoreError> {
        #[derive(QueryableByName)]
        struct Applied {
            #[diesel(sql_type = diesel::sql_types::Text)]
            version: String,
        }
        let embedded = match self.backend() {
            Backend::Postgres => versions::<diesel::pg::Pg>(&POSTGRES),
            Backend::Sqlite => versions::<diesel::sqlite::Sqlite>(&SQLITE),
        }
        .map_err(diesel::result::Error::QueryBuilderError)?;
        let mut conn = self.conn().await?;
        let applied: Vec<Applied> = crate::with_conn!(&mut conn, |c| {
            diesel::sql_query("SELECT version FROM __diesel_schema_migrations")
                .load(c)
                .await
        })?;
        Ok(embedded
            .iter()
            .all(|v| applied.iter().any(|a| &a.version == v)))
    }
}

fn versions<B: diesel::backend::Backend>(
    source: &EmbeddedMigrations,
) -> diesel::migration::Result<Vec<String>>
where
    EmbeddedMigrations: MigrationSource<B>,
{
    Ok(MigrationSource::<B>::migrations(source)?
        .iter()
        .map(|m| m.name().version().to_string())
        .collect())
}
