//! The queries on `deliveries`, each written once for both backends.

use super::schema::deliveries::{self, dsl};
use super::{BoundTimestamp, DbConn, FixedText, StoreError};
use crate::with_conn;
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

pub const IN_PROGRESS: &str = "in_progress";
pub const COMPLETED: &str = "completed";

/// A first claim on a key: the row is inserted `in_progress` with a lease.
#[derive(Debug)]
pub struct NewClaim<'a> {
    pub endpoint: &'a str,
    pub delivery_id: &'a str,
    pub request_hash: &'a str,
    pub status: &'a str,
    pub event_type: Option<&'a str>,
    pub attempts: i32,
    pub lease_owner: Option<&'a str>,
    pub lease_expires_at: Option<NaiveDateTime>,
    pub received_at: NaiveDateTime,
    /// Set only for deliveries whose id is not signed: the body hash, unique
    /// per endpoint, so a replayed body under a fresh id finds this row.
    pub body_key: Option<&'a str>,
    /// The verified request body, kept for reconciliation and reprocessing.
    pub request_body: Option<&'a [u8]>,
}

/// A row as the engine needs it to decide what a repeat gets.
#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = deliveries)]
#[diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))]
pub struct DeliveryRow {
    pub endpoint: String,
    pub delivery_id: String,
    pub request_hash: String,
    pub status: String,
    pub event_type: Option<String>,
    pub response_status: Option<i32>,
    pub response_content_type: Option<String>,
    pub response_body: Option<Vec<u8>>,
    pub attempts: i32,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<NaiveDateTime>,
    pub received_at: NaiveDateTime,
    pub completed_at: Option<NaiveDateTime>,
    pub body_key: Option<String>,
    pub response_location: Option<String>,
}

/// The response a completed key replays, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub content_type: String,
    /// Shared, not copied: the replay cache and every replay's HTTP body
    /// hold the same bytes.
    pub body: bytes::Bytes,
    /// The `Location` header, for routes that create something.
    pub location: Option<String>,
}

impl DeliveryRow {
    /// The stored response of a completed row.
    pub fn stored_response(&self) -> Option<StoredResponse> {
        if self.status != COMPLETED {
            return None;
        }
        Some(StoredResponse {
            status: u16::try_from(self.response_status?).ok()?,
            content_type: self.response_content_type.clone().unwrap_or_default(),
            body: bytes::Bytes::from(self.response_body.clone()?),
            location: self.response_location.clone(),
        })
    }
}

/// A key's stored answer as its columns: set by a completion and inserted
/// by a claim that is completed from the start
/// ([`claim_completed_insert`]), so that a replay's bytes cannot depend on
/// which of the two wrote them. `None` is bound as NULL in both, which
/// keeps each statement's text one per backend.
#[derive(Insertable, AsChangeset)]
#[diesel(table_name = deliveries)]
#[diesel(treat_none_as_null = true, treat_none_as_default_value = false)]
struct Answer<'a> {
    response_status: i32,
    response_content_type: &'a str,
    response_body: &'a [u8],
    response_location: Option<&'a str>,
    completed_at: BoundTimestamp,
}

impl<'a> Answer<'a> {
    fn of(response: &'a StoredResponse, at: NaiveDateTime) -> Answer<'a> {
        Answer {
            response_status: i32::from(response.status),
            response_content_type: &response.content_type,
            response_body: &response.body[..],
            response_location: response.location.as_deref(),
            completed_at: BoundTimestamp(at),
        }
    }
}

/// The columns a key's completion writes: its answer, and no lease any more.
/// One changeset for the engine's fenced completion and an operator's
/// reprocessing, so the two cannot drift apart.
#[derive(AsChangeset)]
#[diesel(table_name = deliveries)]
#[diesel(treat_none_as_null = true)]
struct Completion<'a> {
    status: &'a str,
    #[diesel(embed)]
    answer: Answer<'a>,
    lease_owner: Option<&'a str>,
    lease_expires_at: Option<BoundTimestamp>,
}

impl<'a> Completion<'a> {
    fn of(response: &'a StoredResponse, now: NaiveDateTime) -> Completion<'a> {
        Completion {
            status: COMPLETED,
            answer: Answer::of(response, now),
            lease_owner: None,
            lease_expires_at: None,
        }
    }
}

/// What a successful claim holds: the fencing token its completion must show.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The key actually claimed: the request's, or that of the earlier
    /// delivery of the same body whose stale claim this one took over.
    pub delivery_id: String,
    pub lease_owner: String,
    pub attempt: i32,
    pub taken_over: bool,
}

crate::fixed_statement!(pub(super) ClaimInsert);

/// The atomic claim's statement, for [`DbConn::insert_claim`] and the
/// pipelined `BEGIN` + claim of `store::pipeline`.
pub(super) fn claim_insert<'a>(
    claim: &'a NewClaim<'a>,
) -> FixedText<
    ClaimInsert,
    impl diesel::query_builder::QueryFragment<diesel::pg::Pg>
    + diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>
    + Send
    + 'a,
> {
    FixedText::<ClaimInsert, _>::new(
        diesel::insert_into(deliveries::table)
            .values((dsl::endpoint.eq(claim.endpoint), claim_columns(claim)))
            .on_conflict_do_nothing(),
    )
}

/// What a claim writes besides its endpoint: every column bound, `None` as
/// NULL (the columns' default) rather than written as `DEFAULT`, so that
/// the insert's text is one per backend. The insert and the reclaim of an
/// expired row write the same list.
#[allow(clippy::type_complexity)]
fn claim_columns<'a>(
    claim: &'a NewClaim<'a>,
) -> (
    diesel::dsl::Eq<dsl::delivery_id, &'a str>,
    diesel::dsl::Eq<dsl::request_hash, &'a str>,
    diesel::dsl::Eq<dsl::status, &'a str>,
    diesel::dsl::Eq<dsl::event_type, Option<&'a str>>,
    diesel::dsl::Eq<dsl::attempts, i32>,
    diesel::dsl::Eq<dsl::lease_owner, Option<&'a str>>,
    diesel::dsl::Eq<dsl::lease_expires_at, Option<BoundTimestamp>>,
    diesel::dsl::Eq<dsl::received_at, BoundTimestamp>,
    diesel::dsl::Eq<dsl::body_key, Option<&'a str>>,
    diesel::dsl::Eq<dsl::request_body, Option<&'a [u8]>>,
) {
    (
        dsl::delivery_id.eq(claim.delivery_id),
        dsl::request_hash.eq(claim.request_hash),
        dsl::status.eq(claim.status),
        dsl::event_type.eq(claim.event_type),
        dsl::attempts.eq(claim.attempts),
        dsl::lease_owner.eq(claim.lease_owner),
        dsl::lease_expires_at.eq(claim.lease_expires_at.map(BoundTimestamp)),
        dsl::received_at.eq(BoundTimestamp(claim.received_at)),
        dsl::body_key.eq(claim.body_key),
        dsl::request_body.eq(claim.request_body),
    )
}

crate::fixed_statement!(pub(super) ClaimCompletedInsert);

/// The claim of a delivery whose answer is known before it (an operation
/// that plans): the row is inserted already `completed`, with the answer
/// and no lease, so no completion follows it. The same conflict rule as
/// [`claim_insert`]: no target, both unique indexes count. Its text is one
/// per backend, as every column is bound.
pub(super) fn claim_completed_insert<'a>(
    claim: &'a NewClaim<'a>,
    response: &'a StoredResponse,
    completed_at: NaiveDateTime,
) -> FixedText<
    ClaimCompletedInsert,
    impl diesel::query_builder::QueryFragment<diesel::pg::Pg>
    + diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>
    + Send
    + 'a,
> {
    FixedText::<ClaimCompletedInsert, _>::new(
        diesel::insert_into(deliveries::table)
            .values((
                dsl::endpoint.eq(claim.endpoint),
                claim_columns(claim),
                Answer::of(response, completed_at),
            ))
            .on_conflict_do_nothing(),
    )
}

impl DbConn {
    /// `INSERT ... ON CONFLICT DO NOTHING`: true when this call created the
    /// row, false when the key (or, where set, the body key) already exists.
    /// The database decides; there is no read before it. No conflict target
    /// is named, so both unique indexes count.
    pub async fn insert_claim(&mut self, claim: &NewClaim<'_>) -> Result<bool, StoreError> {
        let inserted = with_conn!(self, |c| claim_insert(claim).execute(c).await)?;
        Ok(inserted == 1)
    }

    /// The delivery that claimed `body_key` on `endpoint`, if any.
    pub async fn find_by_body_key(
        &mut self,
        endpoint: &str,
        body_key: &str,
    ) -> Result<Option<DeliveryRow>, StoreError> {
        Ok(with_conn!(self, |c| {
            deliveries::table
                .filter(dsl::endpoint.eq(endpoint))
                .filter(dsl::body_key.eq(body_key))
                .select(DeliveryRow::as_select())
                .get_result(c)
                .await
                .optional()
        })?)
    }

    pub async fn find_delivery(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Option<DeliveryRow>, StoreError> {
        // A primary-key read, which a WAL reader does without waiting for
        // any lock: on SQLite it runs inline where the task allows it
        // (see `sqlite_runtime`), not through the blocking pool.
        let _inline = super::InlineStatements::on();
        crate::fixed_statement!(FindDelivery);
        Ok(with_conn!(self, |c| {
            let query = deliveries::table
                .find((endpoint, delivery_id))
                .select(DeliveryRow::as_select());
            FixedText::<FindDelivery, _>::new(query)
                .get_result(c)
                .await
                .optional()
        })?)
    }

    /// Takes over an `in_progress` row whose lease expired, fenced on the owner
    /// that was observed: of several retries racing for the same stale row,
    /// exactly one update matches.
    pub async fn take_over(
        &mut self,
        row: &DeliveryRow,
        observed_owner: &str,
        claim: &NewClaim<'_>,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            diesel::update(deliveries::table.find((&row.endpoint, &row.delivery_id)))
                .filter(dsl::status.eq(IN_PROGRESS))
                .filter(dsl::lease_owner.eq(observed_owner))
                .filter(dsl::lease_expires_at.le(now))
                .set((
                    dsl::lease_owner.eq(claim.lease_owner),
                    dsl::lease_expires_at.eq(claim.lease_expires_at),
                    dsl::attempts.eq(dsl::attempts + 1),
                ))
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Turns a completed row past its retention back into a fresh claim,
    /// fenced on the `received_at` that was observed, so that of several
    /// requests racing for it exactly one wins.
    pub async fn reclaim_expired(
        &mut self,
        row: &DeliveryRow,
        claim: &NewClaim<'_>,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            diesel::update(deliveries::table.find((&row.endpoint, &row.delivery_id)))
                .filter(dsl::status.eq(COMPLETED))
                .filter(dsl::received_at.eq(row.received_at))
                .set((
                    claim_columns(claim),
                    dsl::completed_at.eq(None::<NaiveDateTime>),
                    dsl::response_status.eq(None::<i32>),
                    dsl::response_content_type.eq(None::<String>),
                    dsl::response_body.eq(None::<Vec<u8>>),
                    dsl::response_location.eq(None::<String>),
                    // A forgotten key starts counting its replays afresh.
                    dsl::replays.eq(0),
                ))
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Moves the claim to `completed` with its response, fenced by the lease
    /// owner: false when the claim was taken over meanwhile, and then the
    /// caller must roll back its effects.
    pub async fn complete_delivery(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
        response: &StoredResponse,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            completion_update(endpoint, delivery_id, lease_owner, response, now)
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }
}

crate::fixed_statement!(pub(super) CompletionUpdate);

/// The fenced completion's statement, for [`DbConn::complete_delivery`] and
/// the completion with `COMMIT` of `store::pipeline`.
pub(super) fn completion_update<'a>(
    endpoint: &'a str,
    delivery_id: &'a str,
    lease_owner: &'a str,
    response: &'a StoredResponse,
    now: NaiveDateTime,
) -> FixedText<
    CompletionUpdate,
    impl diesel::query_builder::QueryFragment<diesel::pg::Pg>
    + diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>
    + Send
    + 'a,
> {
    FixedText::new(
        diesel::update(deliveries::table.find((endpoint, delivery_id)))
            .filter(dsl::status.eq(IN_PROGRESS))
            .filter(dsl::lease_owner.eq(lease_owner))
            .set(Completion::of(response, now)),
    )
}

impl DbConn {
    /// Extends a lease, fenced by its owner: false once the key was taken
    /// over (or completed, which clears the owner), and then its owner must
    /// stop. Not fenced on the status: an operator's reprocessing holds a
    /// lease on a completed key.
    pub async fn renew_lease(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
        until: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            diesel::update(deliveries::table.find((endpoint, delivery_id)))
                .filter(dsl::lease_owner.eq(lease_owner))
                .set(dsl::lease_expires_at.eq(until))
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Deletes a committed claim that its owner gives up, fenced by the owner,
    /// so that the next attempt claims the key afresh.
    pub async fn release_claim(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
    ) -> Result<bool, StoreError> {
        let deleted = with_conn!(self, |c| {
            diesel::delete(deliveries::table.find((endpoint, delivery_id)))
                .filter(dsl::status.eq(IN_PROGRESS))
                .filter(dsl::lease_owner.eq(lease_owner))
                .execute(c)
                .await
        })?;
        Ok(deleted == 1)
    }

    /// Claims left `in_progress` past their lease, oldest first.
    pub async fn stale_claims(
        &mut self,
        now: NaiveDateTime,
        limit: i64,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        Ok(with_conn!(self, |c| {
            deliveries::table
                .filter(dsl::status.eq(IN_PROGRESS))
                .filter(dsl::lease_expires_at.le(now))
                .order(dsl::received_at.asc())
                .limit(limit)
                .select(DeliveryRow::as_select())
                .load(c)
                .await
        })?)
    }

    /// The verified body a delivery was claimed with.
    pub async fn request_body(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let body: Option<Option<Vec<u8>>> = with_conn!(self, |c| {
            deliveries::table
                .find((endpoint, delivery_id))
                .select(dsl::request_body)
                .get_result(c)
                .await
                .optional()
        })?;
        Ok(body.flatten())
    }
}

impl DbConn {
    /// Takes a stored key for an operator's reprocessing, fenced like a
    /// takeover on the `row` that was read: its status and `received_at` are
    /// unchanged and no live lease holds it (a claim at work, or another
    /// reprocessing). A completed key stays completed, so that repeats get
    /// its answer meanwhile.
    pub async fn reclaim_for_reprocess(
        &mut self,
        row: &DeliveryRow,
        lease_owner: &str,
        until: NaiveDateTime,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            diesel::update(deliveries::table.find((&row.endpoint, &row.delivery_id)))
                .filter(dsl::status.eq(&row.status))
                .filter(dsl::received_at.eq(row.received_at))
                .filter(
                    dsl::lease_expires_at
                        .is_null()
                        .or(dsl::lease_expires_at.le(now)),
                )
                .set((
                    dsl::lease_owner.eq(lease_owner),
                    dsl::lease_expires_at.eq(until),
                ))
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Stores the new answer of a key that an operator reprocessed, fenced
    /// by the reprocessing's lease, and counts the attempt.
    pub async fn replace_response(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
        response: &StoredResponse,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            diesel::update(deliveries::table.find((endpoint, delivery_id)))
                .filter(dsl::lease_owner.eq(lease_owner))
                .set((
                    Completion::of(response, now),
                    dsl::attempts.eq(dsl::attempts + 1),
                ))
                .execute(c)
                .await
        })?;
        Ok(updated == 1)
    }

    /// Ends a failed reprocessing, fenced by its lease: the key is left as
    /// it was. A completed key loses the lease; a claim's lease ends now, and
    /// keeps the owner that a retry's takeover is fenced on.
    pub async fn end_reprocess(
        &mut self,
        endpoint: &str,
        delivery_id: &str,
        lease_owner: &str,
        now: NaiveDateTime,
    ) -> Result<bool, StoreError> {
        let updated = with_conn!(self, |c| {
            let completed = diesel::update(deliveries::table.find((endpoint, delivery_id)))
                .filter(dsl::lease_owner.eq(lease_owner))
                .filter(dsl::status.eq(COMPLETED))
                .set((
                    dsl::lease_owner.eq(None::<String>),
                    dsl::lease_expires_at.eq(None::<NaiveDateTime>),
                ))
                .execute(c)
                .await?;
            let claimed = diesel::update(deliveries::table.find((endpoint, delivery_id)))
                .filter(dsl::lease_owner.eq(lease_owner))
                .filter(dsl::status.eq(IN_PROGRESS))
                .set(dsl::lease_expires_at.eq(now))
                .execute(c)
                .await?;
            diesel::QueryResult::Ok(completed + claimed)
        })?;
        Ok(updated == 1)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::{DatabaseUrl, DbConn, Store, StoreOptions};
    use diesel::connection::InstrumentationEvent;
    use diesel_async::AsyncConnection;
    use std::sync::{Arc, Mutex};

    /// The lookups by key send no `LIMIT`. On SQLite a bound `LIMIT ?`
    /// makes the prepared statement depend on the bound value (the bundled
    /// SQLite 3.53 reads it while planning, `sqlite3ExprIsInteger` with a
    /// parse context), so each execution's binding expires the statement
    /// and `sqlite3_step` prepares it again: on the lookup that then ran
    /// before every claim, a fifth of the receiver's CPU in `fresh`
    /// (`find_delivery` now serves a claim's conflict and the admin pages).
    /// diesel's `.first()` adds
    /// that `LIMIT`; a primary-key or unique lookup needs no limit, so
    /// these use `.get_result()`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lookups_by_key_send_no_limit() {
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::Sqlite(dir.path().join("lookups.db"));
        let store = Store::connect(&url, &StoreOptions::default()).unwrap();
        store.migrate().await.unwrap();
        let mut conn = store.conn().await.unwrap();
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let DbConn::Sqlite(sqlite) = &mut conn else {
            unreachable!("a sqlite:// store")
        };
        let record = Arc::clone(&sent);
        sqlite.set_instrumentation(move |event: InstrumentationEvent<'_>| {
            if let InstrumentationEvent::StartQuery { query, .. } = event {
                record.lock().unwrap().push(query.to_string());
            }
        });

        assert!(conn.find_delivery("shop", "evt_1").await.unwrap().is_none());
        assert!(conn.find_by_body_key("shop", "k").await.unwrap().is_none());
        assert!(conn.request_body("shop", "evt_1").await.unwrap().is_none());
        assert!(conn.job("shop", "evt_1").await.unwrap().is_none());
        assert!(
            conn.newest_event_time("shop", "obj_1")
                .await
                .unwrap()
                .is_none()
        );

        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 5, "{sent:#?}");
        for statement in sent.iter() {
            assert!(!statement.contains("LIMIT"), "{statement}");
        }
    }
}
