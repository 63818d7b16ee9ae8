use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::pooled_connection::deadpool::PoolError;

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
    #[error(transparent)]
    Query(DieselError),
}

impl StoreError {
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::LockTimeout)
    }
}

impl From<DieselError> for StoreError {
    fn from(error: DieselError) -> Self {
        // SQLSTATEs such as 55P03 arrive as `Unknown`; only the message tells
        // them apart.
        match &error {
            DieselError::DatabaseError(kind, info) => {
                let message = info.message();
                if message.contains("lock timeout") {
                    StoreError::LockTimeout
                } else if matches!(kind, DatabaseErrorKind::ClosedConnection)
                    || message.contains("database is locked")
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
