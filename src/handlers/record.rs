use super::{Event, Handler, HandlerError};
use crate::store::DbConn;
use crate::store::schema::events;
use crate::with_conn;
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
        with_conn!(conn, |c| {
            diesel::insert_into(events::table)
                .values(row)
                .execute(c)
                .await
        })?;
        Ok(Some(json!({ "recorded": true })))
    }
}

use diesel::ExpressionMethods;
