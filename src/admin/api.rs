//! The admin JSON API: the listing, one key, the stats, and the OpenAPI
//! document that describes them.

use super::Admin;
use super::detail::fetch_detail;
use super::error::AdminError;
use super::listing::{ListQuery, fetch_page};
use super::model::{DeliveryPage, DeliveryView, Stats};
use super::stats::{StatsQuery, fetch_stats};
use crate::problem::Problem;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;

/// Registers the API's routes (inside the `/admin` scope, behind the token).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/deliveries", web::get().to(list))
        .route(
            "/deliveries/{endpoint}/{delivery_id}",
            web::get().to(detail),
        )
        .route("/stats", web::get().to(stats))
        .route("/openapi.json", web::get().to(openapi));
}

/// Query parameters as a problem+json 400 rather than actix's plain text.
fn query<T: serde::de::DeserializeOwned>(request: &HttpRequest) -> Result<T, AdminError> {
    web::Query::<T>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| AdminError::bad("query", e.to_string()))
}

/// Keys, newest first, in pages.
#[utoipa::path(
    get,
    tag = "admin",
    path = "/admin/deliveries",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of keys, newest first", body = DeliveryPage),
        (status = 400, description = "A malformed parameter", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn list(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let page = async {
        let query: ListQuery = query(&request)?;
        let page = query.validate(Utc::now().naive_utc())?;
        fetch_page(&admin.store, &page).await
    };
    match page.await {
        Ok(page) => HttpResponse::Ok().json(DeliveryPage::from(page)),
        Err(error) => error.to_response(),
    }
}

/// One key: its stored answer, its verified payload and its history.
#[utoipa::path(
    get,
    tag = "admin",
    path = "/admin/deliveries/{endpoint}/{delivery_id}",
    params(
        ("endpoint" = String, Path, description = "The endpoint or client-key scope (URL-encoded)"),
        ("delivery_id" = String, Path, description = "The delivery id or idempotency key (URL-encoded)"),
    ),
    responses(
        (status = 200, description = "The key in full", body = DeliveryView),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
        (status = 404, description = "No such key", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn detail(admin: web::Data<Admin>, path: web::Path<(String, String)>) -> HttpResponse {
    let (endpoint, delivery_id) = path.into_inner();
    match fetch_detail(&admin.store, &endpoint, &delivery_id).await {
        Ok(record) => HttpResponse::Ok().json(DeliveryView::from(record)),
        Err(error) => error.to_response(),
    }
}

/// Keys received within a window, by endpoint and status.
#[utoipa::path(
    get,
    tag = "admin",
    path = "/admin/stats",
    params(StatsQuery),
    responses(
        (status = 200, description = "Counts by endpoint and status", body = Stats),
        (status = 400, description = "A malformed window", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn stats(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let stats = async {
        let query: StatsQuery = query(&request)?;
        fetch_stats(&admin.store, &query, Utc::now().naive_utc()).await
    };
    match stats.await {
        Ok(stats) => HttpResponse::Ok().json(stats),
        Err(error) => error.to_response(),
    }
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    tag = "admin",
    path = "/admin/openapi.json",
    responses(
        (status = 200, description = "The OpenAPI document", content_type = "application/json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn openapi() -> HttpResponse {
    match super::openapi::document().to_json() {
        Ok(json) => HttpResponse::Ok()
            .content_type("application/json")
            .body(json),
        Err(error) => {
            tracing::error!(%error, "the OpenAPI document did not serialise");
            Problem::processing_failed().to_response()
        }
    }
}
