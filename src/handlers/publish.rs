//! `publish:NAME`: puts a verified event on a message broker through the
//! transactional outbox. The handler only writes the outbox row, in the
//! transaction that completes the delivery's key, so the publication
//! commits with the delivery or not at all; the relay publishes it later
//! (see `maintenance::relay`).

use super::{Event, Handler, HandlerError};
use crate::clock::SharedClock;
use crate::publishers::{Destination, PublisherSettings};
use crate::store::outbox::{NewPublication, publication_insert};
use crate::store::{DbConn, Flight};
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::{Value, json};

/// The handler name prefix: `publish:NAME` publishes with `[publishers.NAME]`.
pub const PREFIX: &str = "publish:";

pub struct Publish {
    publisher: String,
    destination: Destination,
    envelope: EnvelopeSettings,
    clock: SharedClock,
}

/// How a publisher shapes the CloudEvents envelope.
#[derive(Debug, Clone)]
pub struct EnvelopeSettings {
    source: String,
    type_prefix: String,
}

impl EnvelopeSettings {
    pub fn of(settings: &PublisherSettings) -> EnvelopeSettings {
        EnvelopeSettings {
            source: settings.source.clone(),
            type_prefix: settings.type_prefix.clone(),
        }
    }
}

impl Publish {
    pub fn new(settings: &PublisherSettings, clock: SharedClock) -> Publish {
        Publish {
            publisher: settings.name.clone(),
            destination: settings.broker.destination().clone(),
            envelope: EnvelopeSettings::of(settings),
            clock,
        }
    }
}

/// What a publication of one event is made of, before its row is written.
struct Publication {
    message_id: String,
    body: Vec<u8>,
    destination: String,
}

impl Publish {
    fn publication(&self, event: &Event) -> Publication {
        Publication {
            message_id: event.idempotency_key(),
            body: envelope(event, &self.envelope),
            destination: self.destination.render(
                &event.endpoint,
                event.provider,
                event.event_type.as_deref(),
            ),
        }
    }

    fn row<'a>(&'a self, event: &'a Event, publication: &'a Publication) -> NewPublication<'a> {
        NewPublication {
            publisher: &self.publisher,
            endpoint: &event.endpoint,
            delivery_id: &event.delivery_id,
            message_id: &publication.message_id,
            destination: &publication.destination,
            body: &publication.body,
            received_at: event.received_at,
            now: self.clock.naive_now(),
        }
    }

    /// The stored answer says where the event goes, not whether the broker
    /// has it yet: that happens after the commit.
    fn answer(&self, publication: &Publication, written: bool) -> Value {
        json!({
            "publisher": self.publisher,
            "message_id": publication.message_id,
            "destination": publication.destination,
            "outbox": if written { "written" } else { "already-written" },
        })
    }
}

#[async_trait::async_trait(?Send)]
impl Handler for Publish {
    async fn handle(
        &self,
        event: &Event,
        conn: &mut DbConn,
    ) -> Result<Option<Value>, HandlerError> {
        let publication = self.publication(event);
        let written = conn
            .insert_publication(&self.row(event, &publication))
            .await?;
        Ok(Some(self.answer(&publication, written)))
    }

    /// The outbox row is one statement: it travels with the other handlers'
    /// (and, where they all fly, with the claim).
    fn handle_in_flight<'a>(
        &'a self,
        event: &'a Event,
        flight: Flight<'a>,
    ) -> Option<LocalBoxFuture<'a, Result<Option<Value>, HandlerError>>> {
        Some(
            async move {
                let publication = self.publication(event);
                let row = self.row(event, &publication);
                let written = flight.execute(publication_insert(&row)).await? == 1;
                Ok(Some(self.answer(&publication, written)))
            }
            .boxed_local(),
        )
    }
}

/// The CloudEvents 1.0 JSON envelope of `event` (structured content mode).
///
/// `id` is `<endpoint>:<delivery id>`, stable across redeliveries and
/// republishes, so a consumer can deduplicate on it; `time` is when the
/// receiver got the delivery; `data` is the verified payload (a form or XML
/// body as the JSON the provider's description turns it into).
pub fn envelope(event: &Event, settings: &EnvelopeSettings) -> Vec<u8> {
    let fill = |template: &str| {
        template
            .replace("{endpoint}", &event.endpoint)
            .replace("{provider}", event.provider)
    };
    let event_type = event.event_type.as_deref().unwrap_or("webhook");
    let time = event
        .received_at
        .and_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let envelope = json!({
        "specversion": "1.0",
        "id": event.idempotency_key(),
        "source": fill(&settings.source),
        "type": format!("{}{event_type}", fill(&settings.type_prefix)),
        "time": time,
        "datacontenttype": "application/json",
        "provider": event.provider,
        "deliveryid": event.delivery_id,
        "data": event.payload,
    });
    // A `Value` always serializes.
    serde_json::to_vec(&envelope).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn event() -> Event {
        Event {
            endpoint: "shop".into(),
            provider: "stripe",
            delivery_id: "evt_1".into(),
            event_type: Some("payment_intent.succeeded".into()),
            payload: json!({"id": "evt_1", "amount": 100}),
            raw: bytes::Bytes::from_static(b"{}"),
            received_at: NaiveDate::from_ymd_opt(2026, 12, 1)
                .and_then(|d| d.and_hms_micro_opt(18, 30, 5, 120_000))
                .unwrap(),
            stale: false,
        }
    }

    #[test]
    fn the_envelope_is_cloudevents_1_0() {
        let settings = EnvelopeSettings {
            source: PublisherSettings::DEFAULT_SOURCE.into(),
            type_prefix: PublisherSettings::DEFAULT_TYPE_PREFIX.into(),
        };
        let body: Value = serde_json::from_slice(&envelope(&event(), &settings)).unwrap();
        assert_eq!(
            body,
            json!({
                "specversion": "1.0",
                "id": "shop:evt_1",
                "source": "/webhooks/shop",
                "type": "stripe.payment_intent.succeeded",
                "time": "2026-12-01T18:30:05.120000Z",
                "datacontenttype": "application/json",
                "provider": "stripe",
                "deliveryid": "evt_1",
                "data": {"id": "evt_1", "amount": 100},
            })
        );
    }

    #[test]
    fn an_event_without_a_type_is_a_webhook() {
        let settings = EnvelopeSettings {
            source: "urn:acme:{endpoint}".into(),
            type_prefix: "com.acme.".into(),
        };
        let mut e = event();
        e.event_type = None;
        let body: Value = serde_json::from_slice(&envelope(&e, &settings)).unwrap();
        assert_eq!(body["type"], "com.acme.webhook");
        assert_eq!(body["source"], "urn:acme:shop");
    }
}
