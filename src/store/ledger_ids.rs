//! Ledger ids drawn ahead of need: from PostgreSQL's sequence, or on
//! SQLite reserved past the table's `AUTOINCREMENT` counter.
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
//!
//! SQLite has no sequence, and a SQLite delivery that plans needs the id
//! for the same reason (see `planned_rows`). Its ids are reserved in a
//! transaction of their own: `sqlite_sequence`, where SQLite keeps the
//! largest id an `AUTOINCREMENT` table ever had, is moved a hundred past,
//! so that every row SQLite numbers itself (the ordinary path's, another
//! process's) goes after them. They are spares only once that commits.

use super::{DbConn, StoreError};
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use std::future::Future;
use std::sync::Mutex;

/// How many ids one draw takes.
const DRAW: i64 = 100;

/// The ids drawn and not yet used, taken from the end.
#[derive(Default)]
pub(super) struct LedgerIds(Mutex<Vec<i64>>, tokio::sync::Mutex<()>);

#[derive(diesel::QueryableByName)]
struct Drawn {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

impl LedgerIds {
    /// A ledger id no other row has or will have, drawing more on `conn`
    /// when none is left. PostgreSQL only.
    pub(super) async fn take(&self, conn: &mut DbConn) -> Result<i64, StoreError> {
        self.take_or_draw(|| conn.draw_from_sequence()).await
    }

    /// A spare id, or, when none is left, one of those `draw` gives. The
    /// deliveries that find no spare at once wait for one draw rather than
    /// each making its own, which would leave hundreds unused at the next
    /// stop.
    pub(super) async fn take_or_draw<F, Fut>(&self, draw: F) -> Result<i64, StoreError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<i64>, StoreError>>,
    {
        if let Some(id) = self.spare() {
            return Ok(id);
        }
        let _drawing = self.1.lock().await;
        // Another delivery's draw may have ended while this one waited.
        if let Some(id) = self.spare() {
            return Ok(id);
        }
        let mut drawn = draw().await?;
        let mut spare = self.0.lock().unwrap_or_else(|p| p.into_inner());
        spare.append(&mut drawn);
        // Descending, so that ids go out lowest first, and one given back
        // goes out next.
        spare.sort_unstable_by(|a, b| b.cmp(a));
        spare
            .pop()
            .ok_or_else(|| StoreError::Unavailable("the draw gave no ledger id".into()))
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

impl DbConn {
    /// The sequence's next [`DRAW`] values. PostgreSQL only.
    async fn draw_from_sequence(&mut self) -> Result<Vec<i64>, StoreError> {
        let DbConn::Pg(c) = self else {
            return Err(StoreError::Unavailable(
                "ledger ids are drawn on PostgreSQL".into(),
            ));
        };
        let c: &mut super::PgConn = c;
        Ok(diesel::sql_query(
            "SELECT nextval(pg_get_serial_sequence('ledger_entries', 'id')) AS id \
             FROM generate_series(1, $1)",
        )
        .bind::<BigInt, _>(DRAW)
        .load::<Drawn>(c)
        .await?
        .into_iter()
        .map(|d| d.id)
        .collect())
    }

    /// Reserves the next [`DRAW`] ids of `ledger_entries` on SQLite, in the
    /// transaction this connection is in, which holds the write lock: the
    /// table's `AUTOINCREMENT` counter (`sqlite_sequence`) moves past them,
    /// so no row that SQLite numbers itself, in this process or another,
    /// takes one, as no other session takes a PostgreSQL sequence's values
    /// drawn here. They are reserved only once the transaction commits.
    /// SQLite only.
    pub(super) async fn reserve_ledger_ids(&mut self) -> Result<Vec<i64>, StoreError> {
        let DbConn::Sqlite(c) = self else {
            return Err(StoreError::Unavailable(
                "ledger ids are reserved on SQLite".into(),
            ));
        };
        let c: &mut super::SqliteConn = c;
        // `AUTOINCREMENT`'s own rule for the next id: past the largest the
        // table ever had and past the largest it has.
        let mut last = diesel::sql_query(
            "UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT max(id) FROM ledger_entries), 0)) + ? \
             WHERE name = 'ledger_entries' RETURNING seq AS id",
        )
        .bind::<BigInt, _>(DRAW)
        .load::<Drawn>(c)
        .await?;
        // No row until the table's first insert.
        if last.is_empty() {
            last = diesel::sql_query(
                "INSERT INTO sqlite_sequence (name, seq) \
                 SELECT 'ledger_entries', coalesce(max(id), 0) + ? FROM ledger_entries RETURNING seq AS id",
            )
            .bind::<BigInt, _>(DRAW)
            .load::<Drawn>(c)
            .await?;
        }
        let last = last
            .pop()
            .map(|d| d.id)
            .ok_or_else(|| StoreError::Unavailable("no ledger ids were reserved".into()))?;
        Ok((last - DRAW + 1..=last).collect())
    }
}
