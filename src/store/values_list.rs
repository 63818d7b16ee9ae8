//! The placeholders of a multi-row `VALUES` list, for the statements that
//! write many rows in one (the traffic counters' upsert, the replay
//! counts): diesel builds neither for both backends, so their text is
//! written here, numbered as each backend numbers its binds.

use super::Backend;

/// Appends `rows` rows of `columns` placeholders each, numbered from 1 in
/// bind order: `($1,$2),($3,$4)` on PostgreSQL, `(?1,?2),(?3,?4)` on
/// SQLite.
pub(super) fn push_rows(sql: &mut String, rows: usize, columns: usize, backend: Backend) {
    let sign = match backend {
        Backend::Postgres => '$',
        Backend::Sqlite => '?',
    };
    for row in 0..rows {
        let first = row * columns + 1;
        if row > 0 {
            sql.push(',');
        }
        sql.push('(');
        for n in first..first + columns {
            if n > first {
                sql.push(',');
            }
            sql.push(sign);
            sql.push_str(&n.to_string());
        }
        sql.push(')');
    }
}
