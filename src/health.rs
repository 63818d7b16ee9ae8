//! `/healthz` (the process is alive) and `/readyz` (the database answers and
//! every migration is applied), for orchestrators and load balancers.

use crate::problem::Problem;
use crate::store::Store;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use serde_json::json;

pub fn configure(store: Store) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(store))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz));
    }
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "alive" }))
}

async fn readyz(store: web::Data<Store>) -> HttpResponse {
    match store.migrations_applied().await {
        Ok(true) => HttpResponse::Ok().json(json!({ "status": "ready" })),
        Ok(false) => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not-ready",
            "Not ready",
            "database migrations are pending",
        )
        .to_response(),
        Err(error) => {
            tracing::warn!(%error, "readiness check failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not-ready",
                "Not ready",
                "the database is unreachable",
            )
            .to_response()
        }
    }
}
