//! Reprocessing from the admin surface: one delivery from the API or the
//! key page's form, and the keys a listing filter selects for the
//! `reprocess` command's bulk run. The handlers run again through the
//! engine ([`maintenance::reprocess`]), which records `reprocessed` (or
//! `reprocess-failed`) in the key's history with the actor.

use super::Admin;
use super::auth::actor;
use super::error::AdminError;
use super::listing::PageRequest;
use super::page::{form_of, refused_form};
use super::queue::name;
use super::views::detail_href;
use crate::maintenance::{self, ReprocessError};
use crate::store::{DeliverySummary, PagePosition, Store};
use crate::webhooks::Webhooks;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The query parameter that brings a reprocessing's outcome back to the
/// key's page: only a status number, so nothing a link could forge shows
/// as more than "the handlers answered N".
const OUTCOME: &str = "reprocessed";

/// Keys read per page while a filter is walked.
const PAGE: i64 = 500;

/// A reprocessing's outcome: the handlers' new answer, now the stored one.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct Reprocessed {
    pub endpoint: String,
    pub delivery_id: String,
    /// The HTTP status the handlers answered (redeliveries now replay it).
    pub status: u16,
    /// Who it is recorded as in the key's history.
    pub actor: String,
}

impl From<ReprocessError> for AdminError {
    fn from(error: ReprocessError) -> AdminError {
        match error {
            ReprocessError::UnknownEndpoint(endpoint) => AdminError::UnknownEndpoint(endpoint),
            ReprocessError::NotFound {
                endpoint,
                delivery_id,
            } => AdminError::NotFound {
                endpoint,
                delivery_id,
            },
            error @ (ReprocessError::NoPayload
            | ReprocessError::Busy
            | ReprocessError::Failed(_)) => AdminError::NotReprocessed(error.to_string()),
            ReprocessError::Engine(error) => match error {
                crate::engine::EngineError::Store(error) => AdminError::Store(error),
                error => AdminError::NotReprocessed(error.to_string()),
            },
        }
    }
}

/// Runs one delivery's handlers again as `actor`.
pub async fn reprocess_one(
    webhooks: &Webhooks,
    endpoint: &str,
    delivery_id: &str,
    actor: &str,
) -> Result<Reprocessed, AdminError> {
    let endpoint = name("endpoint", endpoint)?;
    let delivery_id = name("delivery_id", delivery_id)?;
    let response = maintenance::reprocess(webhooks, &endpoint, &delivery_id, actor).await?;
    Ok(Reprocessed {
        endpoint,
        delivery_id,
        status: response.status,
        actor: actor.to_owned(),
    })
}

/// Every key `request`'s filter selects (its cursor and limit ignored),
/// newest first, read in pages: what a bulk reprocess counts first and
/// then runs one by one.
pub async fn matching_keys(
    store: &Store,
    request: &PageRequest,
) -> Result<Vec<(String, String)>, AdminError> {
    let mut keys = Vec::new();
    let mut after: Option<PagePosition> = None;
    loop {
        let rows = store
            .conn()
            .await?
            .list_deliveries(&request.filter, after.as_ref(), PAGE)
            .await?;
        let full = rows.len() == usize::try_from(PAGE).unwrap_or(usize::MAX);
        after = rows.last().map(|row| row.position());
        keys.extend(rows.into_iter().map(|row| (row.endpoint, row.delivery_id)));
        if !full {
            return Ok(keys);
        }
    }
}

/// Runs a stored delivery's handlers again, as the engine defines it (the
/// key's answer is replaced; a failure leaves the earlier one), recorded
/// as `reprocessed` or `reprocess-failed` with the actor.
#[utoipa::path(
    post,
    tag = "admin",
    path = "/admin/deliveries/{endpoint}/{delivery_id}/reprocess",
    params(
        ("endpoint" = String, Path, description = "The endpoint (URL-encoded)"),
        ("delivery_id" = String, Path, description = "The delivery id (URL-encoded)"),
    ),
    responses(
        (status = 200, description = "The handlers ran again; their answer is stored", body = Reprocessed),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
        (status = 404, description = "No such endpoint or delivery", content_type = "application/problem+json"),
        (status = 409, description = "Not reprocessed: its body was not stored, it is being processed, or the handlers failed again (recorded as reprocess-failed)", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn reprocess(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (endpoint, delivery_id) = path.into_inner();
    let actor = actor(&admin, &request);
    match reprocess_one(admin.webhooks(), &endpoint, &delivery_id, &actor).await {
        Ok(done) => HttpResponse::Ok().json(done),
        Err(error) => error.to_response(),
    }
}

/// The key page's form.
#[derive(Deserialize, Default)]
pub(super) struct ReprocessForm {
    endpoint: Option<String>,
    delivery_id: Option<String>,
}

/// The key page's Reprocess button: refused cross-site (403) and without a
/// session (401) as every page form is, then done as the API does it,
/// recorded with the session's token name, and answered with the key's
/// page again (303), which shows the new answer's status.
pub(super) async fn reprocess_form(
    admin: web::Data<Admin>,
    request: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    let form: ReprocessForm = match form_of(&admin, &request, &body, "reprocess") {
        Ok(form) => form,
        Err(refusal) => return *refusal,
    };
    let endpoint = form.endpoint.unwrap_or_default();
    let delivery_id = form.delivery_id.unwrap_or_default();
    let actor = actor(&admin, &request);
    let back = detail_href(&endpoint, &delivery_id);
    match reprocess_one(admin.webhooks(), &endpoint, &delivery_id, &actor).await {
        Ok(done) => HttpResponse::SeeOther()
            .insert_header((
                header::LOCATION,
                format!("{back}?{OUTCOME}={}", done.status),
            ))
            .finish(),
        Err(error) => refused_form(error, &back),
    }
}

/// The status a reprocessing answered, from the key page's query string.
pub(super) fn outcome_of(query: &str) -> Option<u16> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == OUTCOME)
        .and_then(|(_, status)| status.parse().ok())
}

/// The key page's actions: the outcome of the reprocessing that led here,
/// and the form that runs the handlers again.
pub(super) fn section(row: &DeliverySummary, reprocessed: Option<u16>) -> Markup {
    html! {
        @if let Some(status) = reprocessed {
            p.done id="action-done" { "Reprocessed: the handlers answered " (status) ", now the stored answer." }
        }
        form.inline method="post" action="/admin/reprocess" id="reprocess-form" {
            input type="hidden" name="endpoint" value=(row.endpoint);
            input type="hidden" name="delivery_id" value=(row.delivery_id);
            button type="submit" id="reprocess" { "Reprocess" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::outcome_of;

    #[test]
    fn only_a_status_number_comes_back_from_the_query() {
        assert_eq!(outcome_of("reprocessed=200"), Some(200));
        assert_eq!(outcome_of("x=1&reprocessed=422"), Some(422));
        assert_eq!(outcome_of("reprocessed=<b>hi</b>"), None);
        assert_eq!(outcome_of(""), None);
    }
}
