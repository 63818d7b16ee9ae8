//! Which statements a PostgreSQL connection has prepared for good.
//!
//! Two statements sent in one flight reach the server in the order they are
//! queued, and a statement that is not yet in the connection's cache queues
//! its `Parse` first and its execution only once that is answered, so a
//! statement sent beside it can overtake it. `store::pipeline` sends the
//! completion with `COMMIT` only where the completion cannot be overtaken:
//! when this ledger has seen the connection prepare that very SQL text.
//!
//! Diesel tells a connection's [`Instrumentation`] when it prepares a
//! statement for its cache (`CacheQuery`, before the `Parse`) and when the
//! statement has run (`FinishQuery`). A text counts as prepared only once a
//! run that prepared it finished without an error: a `Parse` that failed
//! leaves nothing in diesel's cache, and a run that failed after a good
//! `Parse` merely leaves the ledger more careful than it needs to be. The
//! cache is unbounded on PostgreSQL, so a text, once in it, stays for the
//! connection's life, and so does its entry here.
//!
//! The finished statement's text is read from its `Display`, which diesel
//! does not promise to keep as the bare SQL: should that change, no text
//! ever counts as prepared and every completion takes its own round trip
//! again, slower but as safe (`tests/api/pipeline.rs` checks that the
//! completion does fly).

use super::PgConn;
use diesel::connection::{Instrumentation, InstrumentationEvent};
use diesel_async::AsyncConnection;
use std::collections::HashSet;

/// The connection's [`Instrumentation`]; see the module's doc.
#[derive(Default)]
pub(super) struct StatementLedger {
    /// Texts whose `Parse` was sent and whose run has not finished.
    parsing: Vec<String>,
    prepared: HashSet<String>,
    /// The instrumentation the ledger took the place of (diesel's default,
    /// which an application may set): it still gets every event.
    inner: Option<Box<dyn Instrumentation>>,
}

impl Instrumentation for StatementLedger {
    fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
        self.note(&event);
        if let Some(inner) = &mut self.inner {
            inner.on_connection_event(event);
        }
    }
}

impl StatementLedger {
    fn note(&mut self, event: &InstrumentationEvent<'_>) {
        match event {
            InstrumentationEvent::CacheQuery { sql, .. } => self.parsing.push((*sql).to_owned()),
            // Only while a `Parse` is outstanding, which is once per text
            // and connection: every other statement costs a match and no
            // formatting.
            InstrumentationEvent::FinishQuery { query, error, .. } if !self.parsing.is_empty() => {
                let sql = query.to_string();
                if let Some(at) = self.parsing.iter().position(|p| *p == sql) {
                    let sql = self.parsing.swap_remove(at);
                    if error.is_none() {
                        self.prepared.insert(sql);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Gives a new connection its ledger, in front of diesel's default
/// instrumentation if the application set one.
pub(super) fn install(conn: &mut PgConn) {
    let ledger = StatementLedger {
        inner: diesel::connection::get_default_instrumentation(),
        ..StatementLedger::default()
    };
    AsyncConnection::set_instrumentation(conn, ledger);
}

/// Whether `conn` has prepared `sql` for good. False for a connection
/// without a ledger (one not opened by the store's pool).
pub(super) fn has_prepared(conn: &mut PgConn, sql: &str) -> bool {
    AsyncConnection::instrumentation(conn)
        .downcast_ref::<StatementLedger>()
        .is_some_and(|ledger| ledger.prepared.contains(sql))
}
