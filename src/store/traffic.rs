//! `traffic`: per endpoint, minute, outcome and latency bucket, how many
//! deliveries were answered — what the admin dashboard draws. Written only
//! by the traffic recorder's flush, read by the dashboard, trimmed by the
//! purge.

use super::schema::traffic;
use super::{Backend, DbConn, StoreError, values_list};
use crate::with_conn;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Text};
use diesel_async::RunQueryDsl;

/// One counter to add: `count` more deliveries of `endpoint` answered with
/// `outcome` in the minute starting at `minute` (Unix seconds), their
/// processing time in latency bucket `bucket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficCount {
    pub endpoint: String,
    pub minute: i64,
    pub outcome: String,
    pub bucket: i32,
    pub count: i32,
}

/// The upsert of `rows` counters, with `backend`'s numbered placeholders.
fn upsert_sql(rows: usize, backend: Backend) -> String {
    let mut sql =
        String::from("INSERT INTO traffic (endpoint, minute, outcome, bucket, count) VALUES ");
    values_list::push_rows(&mut sql, rows, 5, backend);
    sql.push_str(
        " ON CONFLICT (endpoint, minute, outcome, bucket) \
         DO UPDATE SET count = traffic.count + excluded.count",
    );
    sql
}

/// The counters of minutes from `$since` on, of `$endpoint` (or every
/// endpoint), summed per (`$a`, `$b`): the dashboard's two reads differ
/// only in what they group by.
macro_rules! summed_by {
    ($conn:expr, $since:expr, $endpoint:expr, $a:expr, $b:expr) => {
        with_conn!($conn, |c| {
            let mut query = traffic::table
                .filter(traffic::minute.ge($since))
                .group_by(($a, $b))
                .select(($a, $b, diesel::dsl::sum(traffic::count)))
                .into_boxed();
            if let Some(endpoint) = $endpoint {
                query = query.filter(traffic::endpoint.eq(endpoint));
            }
            query.load(c).await
        })
    };
}

/// SQLite allows 32,766 bound values per statement; five per row.
const ROWS_PER_STATEMENT: usize = 5_000;

impl DbConn {
    /// Adds `counts` to the stored counters, creating the missing ones: one
    /// multi-row `INSERT .. ON CONFLICT DO UPDATE` per 5,000 counters, so
    /// that instances sharing a PostgreSQL database add into the same rows.
    /// (Diesel builds no multi-row upsert for SQLite, hence the SQL text.)
    pub async fn add_traffic(&mut self, counts: &[TrafficCount]) -> Result<(), StoreError> {
        let backend = self.backend();
        for chunk in counts.chunks(ROWS_PER_STATEMENT) {
            let sql = upsert_sql(chunk.len(), backend);
            with_conn!(self, |c| {
                let mut query = diesel::sql_query(sql.as_str()).into_boxed();
                for row in chunk {
                    query = query
                        .bind::<Text, _>(&row.endpoint)
                        .bind::<BigInt, _>(row.minute)
                        .bind::<Text, _>(&row.outcome)
                        .bind::<Integer, _>(row.bucket)
                        .bind::<Integer, _>(row.count);
                }
                query.execute(c).await
            })?;
        }
        Ok(())
    }

    /// From minute `since` on, for `endpoint` (or every endpoint): how many
    /// deliveries each minute had of each outcome (in no particular order).
    pub async fn traffic_by_minute(
        &mut self,
        since: i64,
        endpoint: Option<&str>,
    ) -> Result<Vec<(i64, String, i64)>, StoreError> {
        let rows: Vec<(i64, String, Option<i64>)> =
            summed_by!(self, since, endpoint, traffic::minute, traffic::outcome)?;
        Ok(rows
            .into_iter()
            .map(|(minute, outcome, n)| (minute, outcome, n.unwrap_or(0)))
            .collect())
    }

    /// From minute `since` on, for `endpoint` (or every endpoint): how many
    /// deliveries of each outcome fell in each latency bucket.
    pub async fn traffic_latency(
        &mut self,
        since: i64,
        endpoint: Option<&str>,
    ) -> Result<Vec<(String, i32, i64)>, StoreError> {
        let rows: Vec<(String, i32, Option<i64>)> =
            summed_by!(self, since, endpoint, traffic::outcome, traffic::bucket)?;
        Ok(rows
            .into_iter()
            .map(|(outcome, bucket, n)| (outcome, bucket, n.unwrap_or(0)))
            .collect())
    }

    /// Deletes the counters of minutes before `before`; how many went.
    pub async fn purge_traffic(&mut self, before: i64) -> Result<usize, StoreError> {
        Ok(with_conn!(self, |c| {
            diesel::delete(traffic::table.filter(traffic::minute.lt(before)))
                .execute(c)
                .await
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::upsert_sql;
    use crate::store::Backend;

    #[test]
    fn the_upsert_numbers_five_placeholders_per_row_for_each_backend() {
        assert_eq!(
            upsert_sql(2, Backend::Postgres),
            "INSERT INTO traffic (endpoint, minute, outcome, bucket, count) VALUES \
             ($1,$2,$3,$4,$5),($6,$7,$8,$9,$10) ON CONFLICT (endpoint, minute, outcome, bucket) \
             DO UPDATE SET count = traffic.count + excluded.count"
        );
        assert!(upsert_sql(1, Backend::Sqlite).contains("VALUES (?1,?2,?3,?4,?5) ON CONFLICT"));
    }
}
