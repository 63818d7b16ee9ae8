//! Ledger ids drawn from PostgreSQL's sequence ahead of need.
//!
//! A one-statement delivery (`one_statement`) stores its answer in the same
//! statement that writes its ledger row, and the `payments` answer names
//! the row's id: so the id must be known before the statement is sent.
//! Drawing one with `nextval` first would cost the round trip the statement
//! saves; instead a hundred are drawn at once, as a sequence's own `CACHE`
//! does for each backend. Ids therefore follow the order they were drawn
//! in, not the order of commits, as with any sequence; one that a lost claim
//! did not use goes back to be used by the next delivery, and ids drawn but
//! not used before the process ends are skipped, as a sequence skips the
//! values of a rolled-back transaction.

use super::{DbConn, StoreError};
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use std::sync::Mutex;

/// How many ids one draw takes.
const DRAW: i64 = 100;

/// The ids drawn and not yet used, taken from the end.
#[derive(Default)]
pub(super) struct LedgerIds(Mutex<Vec<i64>>);

#[derive(diesel::QueryableByName)]
struct Drawn {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

impl LedgerIds {
    /// A ledger id no other row has or will have, drawing more on `conn`
    /// when none is left. PostgreSQL only.
    pub(super) async fn take(&self, conn: &mut DbConn) -> Result<i64, StoreError> {
        if let Some(id) = self.spare() {
            return Ok(id);
        }
        let DbConn::Pg(c) = conn else {
            return Err(StoreError::Unavailable(
                "ledger ids are drawn on PostgreSQL".into(),
            ));
        };
        let c: &mut super::PgConn = c;
        let mut drawn: Vec<i64> = diesel::sql_query(
            "SELECT nextval(pg_get_serial_sequence('ledger_entries', 'id')) AS id \
             FROM generate_series(1, $1)",
        )
        .bind::<BigInt, _>(DRAW)
        .load::<Drawn>(c)
        .await?
        .into_iter()
        .map(|d| d.id)
        .collect();
        let mut spare = self.0.lock().unwrap_or_else(|p| p.into_inner());
        spare.append(&mut drawn);
        // Descending, so that ids go out lowest first, and one given back
        // goes out next.
        spare.sort_unstable_by(|a, b| b.cmp(a));
        spare
            .pop()
            .ok_or_else(|| StoreError::Unavailable("the sequence gave no id".into()))
    }

    /// Gives back an id taken but not written, in its place in the
    /// descending order (usually the end: it was the lowest when taken).
    pub(super) fn give_back(&self, id: i64) {
        let mut spare = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let at = spare.partition_point(|&kept| kept > id);
        spare.insert(at, id);
    }

    pub(super) fn spare(&self) -> Option<i64> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }
}
