//! Work on stored keys outside the request path: reconciling claims abandoned
//! mid-way, and operator reprocessing.

mod reconcile;
mod reprocess;

pub use reconcile::{ReconcileReport, reconcile, reconcile_every};
pub use reprocess::{ReprocessError, reprocess};

use crate::handlers::Event;
use crate::store::DeliveryRow;
use crate::webhooks::Endpoint;

/// The verified event a stored delivery was claimed with.
fn event_of(endpoint: &Endpoint, row: &DeliveryRow, body: Vec<u8>) -> Option<Event> {
    let payload = serde_json::from_slice(&body).ok()?;
    Some(Event {
        endpoint: row.endpoint.clone(),
        provider: endpoint.provider.name(),
        delivery_id: row.delivery_id.clone(),
        event_type: row.event_type.clone(),
        payload,
        raw: body.into(),
        received_at: row.received_at,
    })
}
