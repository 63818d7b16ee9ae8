//! The connections start-up opens are closed before the server borrows
//! them. A PostgreSQL connection's driver task runs on the runtime that
//! opened it; one opened by start-up (migrations, the error-language check)
//! on the main runtime made every query of a request that later borrowed it
//! hop to that runtime's threads and back (measured: about 15 % of the CPU
//! of a PostgreSQL `fresh` delivery).

use crate::both_backends;
use crate::helpers::payment;
use idempotent_receiver::startup;
use idempotent_receiver::store::Backend;

both_backends! {
    /// `close_idle` closes the idle PostgreSQL connections and nothing on
    /// SQLite, and the next delivery opens a connection of its own.
    async fn idle_postgres_connections_are_closed_and_deliveries_open_their_own(app) {
        // One connection borrowed here and returned idle.
        drop(app.store.conn().await.expect("a connection"));
        let closed = app.store.close_idle();
        match app.store.backend() {
            Backend::Postgres => assert!(closed >= 1, "the idle connection is closed"),
            Backend::Sqlite => assert_eq!(closed, 0, "SQLite's connections stay"),
        }
        let response = app.deliver("msg_after_close", &payment("msg_after_close", 700)).await;
        assert_eq!(response.status(), 200);
        assert!(app.delivery("msg_after_close").await.is_some());
    }
}

both_backends! {
    /// `open_store` migrates and checks the server's language over pooled
    /// connections, and leaves none of them open in the pool on PostgreSQL.
    async fn start_up_leaves_no_postgres_connection_in_the_pool(app) {
        let store = startup::open_store(&app.settings).await.expect("the store opens");
        let status = store.pool_status();
        match app.store.backend() {
            Backend::Postgres => assert_eq!(status.size, 0, "{status:?}"),
            Backend::Sqlite => assert!(status.size >= 1, "{status:?}"),
        }
        let conn = store.conn().await;
        assert!(conn.is_ok(), "a connection opens after start-up");
    }
}
