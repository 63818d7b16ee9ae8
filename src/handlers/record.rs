use super::{Event, Handler, HandlerError, Plan};
use crate::store::{
    DbConn, FixedStatement, FixedText, Flight, PlannedEvent, PlannedWrite, event_upsert,
};
use crate::with_conn;
use diesel::pg::Pg;
use diesel::query_builder::QueryFragment;
use diesel::sqlite::Sqlite;
use diesel_async::RunQueryDsl;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::{Value, json};
use std::borrow::Cow;

/// Records every verified event (type and payload), so that operators can see
/// what was processed.
pub struct Record;

/// The body as text. It was verified and parsed as JSON, so it is UTF-8,
/// and `from_utf8` checks it a word at a time where `from_utf8_lossy`
/// walks it in chunks: about 1,500 instructions for a bench delivery's
/// body, on SQLite inside the writer thread. Only a body that is not
/// UTF-8 after all (not possible here) takes the lossy copy.
fn payload_text(raw: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(raw) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(raw),
    }
}

#[async_trait::async_trait(?Send)]
impl Handler for Record {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        let payload = payload_text(&event.raw);
        with_conn!(conn, |c| upsert(event, &payload).execute(c).await)?;
        Ok(Some(recorded()))
    }

    fn handle_in_flight<'a>(
        &'a self,
        event: &'a Event,
        flight: Flight<'a>,
    ) -> Option<LocalBoxFuture<'a, Result<Option<Value>, HandlerError>>> {
        Some(
            async move {
                let payload = payload_text(&event.raw);
                flight.execute(upsert(event, &payload)).await?;
                Ok(Some(recorded()))
            }
            .boxed_local(),
        )
    }

    fn plan<'a>(
        &'a self,
        event: &'a Event,
        _ledger_id: &mut Option<i64>,
    ) -> Option<Result<Plan<'a>, HandlerError>> {
        // The row `upsert` writes, replacing an earlier run's the same way.
        Some(Ok(Plan {
            write: Some(PlannedWrite::Event(PlannedEvent {
                event_type: event.event_type.as_deref().map(Cow::Borrowed),
                payload: payload_text(&event.raw),
                recorded_at: event.received_at,
            })),
            answer: Some(recorded()),
        }))
    }
}

fn recorded() -> Value {
    json!({ "recorded": true })
}

/// The event's row: the statement a planned delivery writes too
/// (`store::event_upsert`), so the two cannot drift apart.
fn upsert<'a>(
    event: &'a Event,
    payload: &'a str,
) -> FixedText<impl FixedStatement, impl QueryFragment<Pg> + QueryFragment<Sqlite> + Send + 'a> {
    event_upsert(
        &event.endpoint,
        &event.delivery_id,
        event.event_type.as_deref(),
        payload,
        event.received_at,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UTF-8 body is borrowed as it is; anything else is what
    /// `from_utf8_lossy` made of it before.
    #[test]
    fn payload_text_borrows_utf8_and_is_lossy_otherwise() {
        let body = "{\"note\":\"Grüße, 東京\"}".as_bytes();
        assert!(matches!(payload_text(body), Cow::Borrowed(text) if text.as_bytes() == body));
        let broken = b"{\"note\":\"\xff\xfe\"}";
        assert_eq!(payload_text(broken), String::from_utf8_lossy(broken));
        assert!(matches!(payload_text(broken), Cow::Owned(_)));
    }
}
