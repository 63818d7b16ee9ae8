//! Timestamps bound without chrono's formatter.
//!
//! SQLite keeps a timestamp as text, and diesel binds a `NaiveDateTime` there
//! by formatting it with chrono's `"%F %T%.f"`: a format string parsed
//! again on every bind and written through `fmt::Write` a piece at a time,
//! about 3,000 instructions per timestamp. A fresh delivery binds five (the
//! claim's receipt and lease, the event's, the ledger row's, the
//! completion's), about 3 % of its instructions on SQLite's writer thread.
//! [`BoundTimestamp`] writes the same text directly; PostgreSQL's binary
//! encoding is cheap and is left to diesel.

use chrono::{Datelike, NaiveDateTime, Timelike};
use diesel::expression::AsExpression;
use diesel::pg::Pg;
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::Timestamp;
use diesel::sqlite::Sqlite;

/// A `NaiveDateTime` to bind to a `Timestamp` column: on SQLite the very
/// text diesel's own binding writes, on PostgreSQL diesel's own binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, AsExpression)]
#[diesel(sql_type = Timestamp)]
pub struct BoundTimestamp(pub NaiveDateTime);

impl ToSql<Timestamp, Sqlite> for BoundTimestamp {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        match sqlite_text(&self.0) {
            Some(text) => {
                out.set_value(text);
                Ok(IsNull::No)
            }
            None => <NaiveDateTime as ToSql<Timestamp, Sqlite>>::to_sql(&self.0, out),
        }
    }
}

impl ToSql<Timestamp, Pg> for BoundTimestamp {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        <NaiveDateTime as ToSql<Timestamp, Pg>>::to_sql(&self.0, out)
    }
}

/// chrono's `"%F %T%.f"` of `at`, for years 0 to 9999 and no leap second;
/// `None` otherwise (chrono then formats it).
fn sqlite_text(at: &NaiveDateTime) -> Option<String> {
    let year = at.year();
    let nanos = at.nanosecond();
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        return None;
    }
    let mut text = String::with_capacity(29);
    digits(&mut text, year as u32, 4);
    text.push('-');
    digits(&mut text, at.month(), 2);
    text.push('-');
    digits(&mut text, at.day(), 2);
    text.push(' ');
    digits(&mut text, at.hour(), 2);
    text.push(':');
    digits(&mut text, at.minute(), 2);
    text.push(':');
    digits(&mut text, at.second(), 2);
    // `%.f`: nothing for whole seconds, else milli-, micro- or nanoseconds,
    // whichever is the shortest exact one.
    if nanos != 0 {
        text.push('.');
        if nanos % 1_000_000 == 0 {
            digits(&mut text, nanos / 1_000_000, 3);
        } else if nanos % 1_000 == 0 {
            digits(&mut text, nanos / 1_000, 6);
        } else {
            digits(&mut text, nanos, 9);
        }
    }
    Some(text)
}

/// `value` in decimal, zero-padded to `width` digits (`value` has no more).
fn digits(text: &mut String, value: u32, width: u32) {
    let mut scale = 10u32.pow(width - 1);
    while scale > 0 {
        text.push(char::from(b'0' + (value / scale % 10) as u8));
        scale /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, nanos: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|day| day.and_hms_nano_opt(h, mi, s, nanos))
            .unwrap()
    }

    fn chrono_text(at: &NaiveDateTime) -> String {
        at.format("%F %T%.f").to_string()
    }

    /// The edge cases and a quarter of a million pseudo-random instants
    /// from year 0 to 9999, each to the nanosecond, give chrono's text.
    #[test]
    fn writes_chronos_text() {
        let edges = [
            at(2026, 12, 4, 20, 15, 0, 0),
            at(2026, 12, 4, 20, 15, 0, 1),
            at(2026, 12, 4, 20, 15, 0, 999),
            at(2026, 12, 4, 20, 15, 0, 1_000),
            at(2026, 12, 4, 20, 15, 0, 120_000),
            at(2026, 12, 4, 20, 15, 0, 1_000_000),
            at(2026, 12, 4, 20, 15, 0, 120_000_000),
            at(2026, 12, 4, 20, 15, 0, 100_000_001),
            at(2026, 12, 4, 20, 15, 0, 999_999_999),
            at(0, 1, 1, 0, 0, 0, 0),
            at(1, 2, 3, 4, 5, 6, 7),
            at(999, 12, 31, 23, 59, 59, 999_000_000),
            at(9999, 12, 31, 23, 59, 59, 999_999_999),
            at(2024, 2, 29, 12, 0, 0, 500_000_000),
        ];
        for t in edges {
            assert_eq!(sqlite_text(&t).as_deref(), Some(chrono_text(&t).as_str()));
        }
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..250_000 {
            let nanos = match next(4) {
                0 => 0,
                1 => next(1_000) as u32 * 1_000_000,
                2 => next(1_000_000) as u32 * 1_000,
                _ => next(1_000_000_000) as u32,
            };
            let t = at(
                next(10_000) as i32,
                1 + next(12) as u32,
                1 + next(28) as u32,
                next(24) as u32,
                next(60) as u32,
                next(60) as u32,
                nanos,
            );
            assert_eq!(sqlite_text(&t).as_deref(), Some(chrono_text(&t).as_str()));
        }
    }

    /// Outside what it writes itself, chrono writes: a leap second, years
    /// before 0 and after 9999.
    #[test]
    fn leaves_the_rest_to_chrono() {
        let leap = at(2016, 12, 31, 23, 59, 59, 1_500_000_000);
        for t in [leap, at(-1, 1, 1, 0, 0, 0, 0), at(10_000, 1, 1, 0, 0, 0, 0)] {
            assert_eq!(sqlite_text(&t), None);
        }
    }

    /// Bound in a real SQLite, it stores what diesel's own binding of the
    /// `NaiveDateTime` stores, and reads back as the same instant.
    #[test]
    fn binds_what_diesel_binds_on_sqlite() {
        let mut conn = SqliteConnection::establish(":memory:").unwrap();
        conn.batch_execute("CREATE TABLE t (ours TIMESTAMP, diesels TIMESTAMP)")
            .unwrap();
        let leap = at(2016, 12, 31, 23, 59, 59, 1_500_000_000);
        for t in [
            at(2026, 12, 4, 20, 15, 0, 0),
            at(2026, 12, 4, 20, 15, 0, 120_000),
            leap,
        ] {
            diesel::sql_query("DELETE FROM t")
                .execute(&mut conn)
                .unwrap();
            diesel::sql_query("INSERT INTO t VALUES (?, ?)")
                .bind::<Timestamp, _>(BoundTimestamp(t))
                .bind::<Timestamp, _>(t)
                .execute(&mut conn)
                .unwrap();
            #[derive(QueryableByName)]
            struct Row {
                #[diesel(sql_type = diesel::sql_types::Text)]
                ours: String,
                #[diesel(sql_type = diesel::sql_types::Text)]
                diesels: String,
                #[diesel(sql_type = Timestamp)]
                back: NaiveDateTime,
            }
            let row: Row = diesel::sql_query("SELECT ours, diesels, ours AS back FROM t")
                .get_result(&mut conn)
                .unwrap();
            assert_eq!(row.ours, row.diesels);
            if t != leap {
                assert_eq!(row.back, t);
            }
        }
    }
}
