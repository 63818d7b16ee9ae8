use super::{Event, Handler, HandlerError};
use crate::store::schema::events;
use crate::store::{DbConn, Prepared};
use crate::with_conn;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

/// Records every verified event (type and payload), so that operators can see
/// what was processed.
pub struct Record;

#[async_trait::async_trait(?Send)]
impl Handler for Record {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        // The body was verified and parsed as JSON, so it is UTF-8.
        let payload = String::from_utf8_lossy(&event.raw);
        let row = (
            events::endpoint.eq(&event.endpoint),
            events::delivery_id.eq(&event.delivery_id),
            events::event_type.eq(event.event_type.as_deref()),
            events::payload.eq(payload.as_ref()),
            events::recorded_at.eq(event.received_at),
        );
        // A key runs again once its retention has passed (purged or not),
        // and this table is never purged: the row of that earlier run is
        // still here. The new run's payload replaces it — it is what was
        // processed last — instead of failing every retry on the primary key.
        with_conn!(conn, |c| {
            Prepared(
                diesel::insert_into(events::table)
                    .values(row)
                    .on_conflict((events::endpoint, events::delivery_id))
                    .do_update()
                    .set((
                        events::event_type.eq(excluded(events::event_type)),
                        events::payload.eq(excluded(events::payload)),
                        events::recorded_at.eq(excluded(events::recorded_at)),
                    )),
            )
            .execute(c)
            .await
        })?;
        Ok(Some(json!({ "recorded": true })))
    }
}

use diesel::ExpressionMethods;
