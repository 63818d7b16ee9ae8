//! `deliveries.replays`: how many redeliveries of a key were answered from
//! the store, for operators (the admin listing). Never part of the answer.

use crate::store::Store;

/// Counts one replay of `key` in `scope` after the replay has been answered.
///
/// The answer must not wait for bookkeeping: the increment is a write (on
/// SQLite it queues for the one write lock), so it runs in a task of its
/// own, and the replay is answered without it. A lost increment is
/// acceptable, a slower replay is not: when requests already queue for a
/// database connection, or the write fails, the count is simply skipped.
pub fn count_in_background(store: &Store, scope: String, key: String, body_key: Option<String>) {
    if store.pool_status().waiting > 0 {
        tracing::debug!(%scope, %key, "replay not counted: the pool is busy");
        return;
    }
    let store = store.clone();
    // `tokio::spawn`, not actix's local spawn: this also works for an
    // embedder that drives the faces outside an actix worker.
    tokio::spawn(async move {
        let counted = match store.conn().await {
            Ok(mut conn) => conn.count_replay(&scope, &key, body_key.as_deref()).await,
            Err(error) => Err(error),
        };
        if let Err(error) = counted {
            tracing::debug!(%error, %scope, %key, "replay not counted");
        }
    });
}
