//! One key in full: its row, its stored answer and request, its history.

use super::error::AdminError;
use super::model::DeliveryView;
use crate::store::outbox::PublicationRow;
use crate::store::{DeliveryDetail, Effects, HistoryEntry, Store};

/// A key as the store holds it.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub detail: DeliveryDetail,
    /// Oldest first.
    pub history: Vec<HistoryEntry>,
    /// Its outbox rows, oldest first: the original publications and any
    /// republished ones.
    pub publications: Vec<PublicationRow>,
    /// What its handlers wrote, its job, and the deliveries about the
    /// same object.
    pub effects: Effects,
}

pub async fn fetch_detail(
    store: &Store,
    endpoint: &str,
    delivery_id: &str,
) -> Result<KeyRecord, AdminError> {
    let not_found = || AdminError::NotFound {
        endpoint: endpoint.to_owned(),
        delivery_id: delivery_id.to_owned(),
    };
    // No key holds a NUL, and PostgreSQL would fail on it where SQLite finds
    // nothing: both answer 404.
    if endpoint.contains('\0') || delivery_id.contains('\0') {
        return Err(not_found());
    }
    let mut conn = store.conn().await?;
    let Some(detail) = conn.delivery_detail(endpoint, delivery_id).await? else {
        return Err(not_found());
    };
    let history = conn.history(endpoint, delivery_id).await?;
    let publications = conn.publications_of(endpoint, delivery_id).await?;
    let effects = conn.effects(endpoint, delivery_id).await?;
    Ok(KeyRecord {
        detail,
        history,
        publications,
        effects,
    })
}

impl From<KeyRecord> for DeliveryView {
    fn from(record: KeyRecord) -> DeliveryView {
        DeliveryView::new(record.detail, record.history, record.publications)
    }
}
