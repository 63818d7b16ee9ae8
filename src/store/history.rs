//! `delivery_history`: what happened to a key besides its first processing.

use super::schema::delivery_history::{self, dsl};
use super::{DbConn, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

/// One entry of a key's history.
#[derive(Queryable, Selectable, Debug, Clone, serde::Serialize)]
#[diesel(table_name = delivery_history)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub struct HistoryEntry {
    #[serde(skip)]
    pub id: i64,
    pub endpoint: String,
    pub delivery_id: String,
    pub at: NaiveDateTime,
    /// `takeover`, `failed`, `released`, `reconciled`, `reprocessed`.
    pub kind: String,
    pub actor: Option<String>,
    pub detail: Option<String>,
}

impl DbConn {
    pub async fn record_history(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        kind: &str,
        actor: Option<&str>,
        detail: Option<&str>,
        at: chrono::NaiveDateTime,
    ) -> Result<(), StoreError> {
        let row = (
            dsl::endpoint.eq(endpoint),
            dsl::delivery_id.eq(delivery_id),
            dsl::at.eq(at),
            dsl::kind.eq(kind),
            dsl::actor.eq(actor),
            dsl::detail.eq(detail),
        );
        with_conn!(self, |c| {
            diesel::insert_into(delivery_history::table)
                .values(row)
                .execute(c)
                .await
        })?;
        Ok(())
    }

    /// A key's history, oldest first.
    pub async fn history(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Vec<HistoryEntry>, StoreError> {
        Ok(with_conn!(self, |c| {
            delivery_history::table
                .filter(dsl::endpoint.eq(endpoint))
                .filter(dsl::delivery_id.eq(delivery_id))
                .order((dsl::at.asc(), dsl::id.asc()))
                .select(HistoryEntry::as_select())
                .load(c)
                .await
        })?)
    }
}
