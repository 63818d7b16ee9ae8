//! PostgreSQL's `LISTEN/NOTIFY` between instances, for the queue workers
//! and the outbox relay alike: a listener that wakes this process's tasks
//! when another instance committed work, and a notifier that tells the
//! others after this process's commits (batched, on a connection of its
//! own: a `NOTIFY` inside every delivery's transaction would serialise
//! their commits).

use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How long a notifier waits after a commit, so that the commits of the
/// next moment share one `NOTIFY`.
const NOTIFY_EVERY: Duration = Duration::from_millis(20);

/// Calls `wake` whenever any instance notifies `channel`. A lost
/// connection is re-established; meanwhile the callers' poll covers.
pub(super) async fn listen(
    url: String,
    channel: &'static str,
    what: &'static str,
    wake: impl Fn(),
    mut stopped: watch::Receiver<bool>,
) {
    use diesel_async::{AsyncConnection, RunQueryDsl};
    use futures_util::StreamExt;
    loop {
        let connected = async {
            let mut conn = diesel_async::AsyncPgConnection::establish(&url)
                .await
                .map_err(|e| e.to_string())?;
            diesel::sql_query(format!("LISTEN {channel}"))
                .execute(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(conn)
        };
        let mut conn = match connected.await {
            Ok(conn) => conn,
            Err(error) => {
                // The URL is not in the message: connection errors name the
                // host, never the password.
                tracing::warn!(error = %crate::log_text::escaped(&error), "{what} listener could not connect; relying on the poll");
                tokio::select! {
                    _ = stopped.changed() => return,
                    () = tokio::time::sleep(Duration::from_secs(5)) => continue,
                }
            }
        };
        let mut notifications = std::pin::pin!(conn.notifications_stream());
        loop {
            tokio::select! {
                _ = stopped.changed() => return,
                next = notifications.next() => match next {
                    Some(Ok(_)) => wake(),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "{what} listener lost its connection");
                        break;
                    }
                    None => break,
                },
            }
        }
    }
}

/// Sends `NOTIFY channel` after `committed` is signalled, at most once per
/// [`NOTIFY_EVERY`], until the task is aborted.
pub(super) async fn notify_after_commits(
    store: Store,
    committed: Arc<Notify>,
    channel: &'static str,
    what: &'static str,
) {
    loop {
        committed.notified().await;
        tokio::time::sleep(NOTIFY_EVERY).await;
        let sent = match store.conn().await {
            Ok(mut conn) => conn.notify(channel).await,
            Err(e) => Err(e),
        };
        if let Err(error) = sent {
            tracing::warn!(%error, "could not notify other instances of {what}; they poll");
        }
    }
}
