use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::pooled_connection::deadpool::PoolError;

/// PostgreSQL's message for SQLSTATE 55P03 from `lock_timeout`...
const LOCK_TIMEOUT: &str = "canceling statement due to lock timeout";
/// ...and for 57014 from `statement_timeout`. diesel-async keeps only the
/// message of a PostgreSQL error, not its SQLSTATE, and the message is in
/// the session's `lc_messages`: every connection sets `lc_messages` to `C`
/// where the role may, and start-up checks that it did (see
/// `Store::check_error_language`), so these English texts are what arrives.
const STATEMENT_TIMEOUT: &str = "canceling statement due to statement timeout";

/// SQLite's message for `SQLITE_BUSY`: another connection holds the lock
/// (and the busy handler, if on, gave up waiting).
const SQLITE_LOCKED: &str = "database is locked";

/// Whether `error` is SQLite's `SQLITE_BUSY`.
pub(super) fn sqlite_locked(error: &DieselError) -> bool {
    matches!(error, DieselError::DatabaseError(_, info) if info.message().contains(SQLITE_LOCKED))
}

/// What can go wrong talking to the database, sorted by what the caller should
/// do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached, the pool is exhausted, or SQLite stayed
    /// locked past its busy timeout. Transient: the client should retry later.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// PostgreSQL's `lock_timeout` fired: another transaction holds the row.
    #[error("timed out waiting for a row lock held by a concurrent transaction")]
    LockTimeout,
    /// PostgreSQL's `statement_timeout` fired: the database is too slow to
    /// answer within the budget. Transient, like an unreachable database.
    #[error("a statement ran past the statement timeout")]
    StatementTimeout,
    #[error(transparent)]
    Query(DieselError),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::LockTimeout | StoreError::StatementTimeout
        )
    }
}

impl From<DieselError> for StoreError {
    fn from(error: DieselError) -> Self {
        // SQLSTATEs such as 55P03 arrive as `Unknown`; only the message tells
        // them apart.
        match &error {
            DieselError::DatabaseError(kind, info) => {
                let message = info.message();
                if message.contains(LOCK_TIMEOUT) {
                    StoreError::LockTimeout
                } else if message.contains(STATEMENT_TIMEOUT) {
                    StoreError::StatementTimeout
                } else if matches!(kind, DatabaseErrorKind::ClosedConnection)
                    || message.contains(SQLITE_LOCKED)
                    || message.contains("connection closed")
                    // tokio-postgres's I/O error: the socket was reset, e.g.
                    // by a PostgreSQL that crashed or was stopped `immediate`.
                    || message.contains("error communicating with the server")
                    || message.contains("terminating connection")
                    || message.contains("the database system is")
                {
                    StoreError::Unavailable(message.to_owned())
                } else {
                    StoreError::Query(error)
                }
            }
            DieselError::BrokenTransactionManager => {
                StoreError::Unavailable("the connection's transaction state is broken".into())
            }
            _ => StoreError::Query(error),
        }
    }
}

impl From<PoolError> for StoreError {
    fn from(error: PoolError) -> Self {
        StoreError::Unavailable(match error {
            PoolError::Timeout(_) => "timed out waiting for a database connection".to_owned(),
            other => other.to_string(),
        })
    }
}
