//! The admin JSON API: the listing, one key, the stats, and the OpenAPI
//! document that describes them.

use super::Admin;
use super::auth::actor;
use super::dashboard::{Dashboard, DashboardQuery};
use super::detail::fetch_detail;
use super::error::AdminError;
use super::listing::{ListQuery, fetch_page};
use super::model::{DeliveryPage, DeliveryView, Stats};
use super::outbox::{
    self, OutboxListing, OutboxQuery, OutboxRetry, OutboxRetryQuery, RepublishQuery,
};
use super::queue::{self, BulkRetry, PauseState, QueueJob, QueueListing, QueueQuery, RetryQuery};
use super::stats::{StatsQuery, fetch_stats};
use crate::maintenance::RepublishReport;
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
        .route("/dashboard.json", web::get().to(dashboard))
        .route("/queue", web::get().to(queue_list))
        .route("/queue/retry", web::post().to(queue_retry_matching))
        .route(
            "/queue/{endpoint}/{delivery_id}/retry",
            web::post().to(queue_retry),
        )
        .route(
            "/queue/{endpoint}/{delivery_id}/cancel",
            web::post().to(queue_cancel),
        )
        .route("/queue/{endpoint}/pause", web::post().to(queue_pause))
        .route("/queue/{endpoint}/resume", web::post().to(queue_resume))
        .route("/outbox", web::get().to(outbox_list))
        .route("/outbox/retry", web::post().to(outbox_retry))
        .route(
            "/deliveries/{endpoint}/{delivery_id}/republish",
            web::post().to(republish),
        )
        .route(
            "/deliveries/{endpoint}/{delivery_id}/reprocess",
            web::post().to(super::reprocess::reprocess),
        )
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
        let page = query.validate(admin.store.clock().naive_now())?;
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

/// The dashboard's figures: deliveries by outcome over a window (from the
/// traffic counters, flushed every `traffic_flush_interval`), the replay
/// ratio, p50/p99 processing times, retry windows, retention and backlogs.
#[utoipa::path(
    get,
    tag = "admin",
    path = "/admin/dashboard.json",
    params(DashboardQuery),
    responses(
        (status = 200, description = "The dashboard's figures", body = Dashboard),
        (status = 400, description = "An unknown endpoint or window", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn dashboard(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let figures = async {
        let query: DashboardQuery = query(&request)?;
        let webhooks = admin.republisher.webhooks();
        let wanted = query.validate(webhooks)?;
        super::dashboard::fetch(&admin.store, webhooks, &wanted).await
    };
    match figures.await {
        Ok(figures) => HttpResponse::Ok().json(figures),
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

/// The jobs of queued endpoints, newest first, and the paused endpoints.
#[utoipa::path(
    get,
    tag = "queue",
    path = "/admin/queue",
    params(QueueQuery),
    responses(
        (status = 200, description = "The selected jobs and every paused endpoint", body = QueueListing),
        (status = 400, description = "A malformed parameter", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn queue_list(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let listing = async {
        let query: QueueQuery = query(&request)?;
        let (filter, limit) = query.validate(admin.store.clock().naive_now())?;
        queue::list(&admin.store, &filter, limit).await
    };
    match listing.await {
        Ok(listing) => HttpResponse::Ok().json(listing),
        Err(error) => error.to_response(),
    }
}

/// Makes one job due now, its attempts counted afresh (a dead, retrying,
/// queued or cancelled one); recorded as `retried` with the actor.
#[utoipa::path(
    post,
    tag = "queue",
    path = "/admin/queue/{endpoint}/{delivery_id}/retry",
    params(
        ("endpoint" = String, Path, description = "The queued endpoint (URL-encoded)"),
        ("delivery_id" = String, Path, description = "The delivery id (URL-encoded)"),
    ),
    responses(
        (status = 200, description = "The job, queued again", body = QueueJob),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
        (status = 404, description = "No such job", content_type = "application/problem+json"),
        (status = 409, description = "The job is running or done", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn queue_retry(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    on_job(&admin, &request, path.into_inner(), JobAction::Retry).await
}

/// Cancels one job that is not running or finished; recorded as
/// `cancelled` with the actor.
#[utoipa::path(
    post,
    tag = "queue",
    path = "/admin/queue/{endpoint}/{delivery_id}/cancel",
    params(
        ("endpoint" = String, Path, description = "The queued endpoint (URL-encoded)"),
        ("delivery_id" = String, Path, description = "The delivery id (URL-encoded)"),
    ),
    responses(
        (status = 200, description = "The job, cancelled", body = QueueJob),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
        (status = 404, description = "No such job", content_type = "application/problem+json"),
        (status = 409, description = "The job is running or finished", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn queue_cancel(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    on_job(&admin, &request, path.into_inner(), JobAction::Cancel).await
}

enum JobAction {
    Retry,
    Cancel,
}

/// One job's retry or cancel, as the actor of `request`; a retry wakes
/// this process's workers.
async fn on_job(
    admin: &Admin,
    request: &HttpRequest,
    (endpoint, delivery_id): (String, String),
    action: JobAction,
) -> HttpResponse {
    let actor = actor(admin, request);
    let done = match action {
        JobAction::Retry => queue::retry(&admin.store, &endpoint, &delivery_id, &actor).await,
        JobAction::Cancel => queue::cancel(&admin.store, &endpoint, &delivery_id, &actor).await,
    };
    match done {
        Ok(job) => {
            if job.state == crate::store::queue::QUEUED {
                admin.wake_workers();
            }
            HttpResponse::Ok().json(job)
        }
        Err(error) => error.to_response(),
    }
}

/// Retries every job the filter selects (state `dead` unless given), or
/// with `dry_run=true` only counts them; each is recorded as `retried`.
#[utoipa::path(
    post,
    tag = "queue",
    path = "/admin/queue/retry",
    params(RetryQuery),
    responses(
        (status = 200, description = "How many jobs matched and were retried", body = BulkRetry),
        (status = 400, description = "A malformed parameter", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn queue_retry_matching(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let outcome = async {
        let query: RetryQuery = query(&request)?;
        let (filter, dry_run) = query.validate(admin.store.clock().naive_now())?;
        let actor = actor(&admin, &request);
        queue::retry_matching(&admin.store, &filter, &actor, dry_run).await
    };
    match outcome.await {
        Ok(outcome) => {
            if outcome.retried > 0 {
                admin.wake_workers();
            }
            HttpResponse::Ok().json(outcome)
        }
        Err(error) => error.to_response(),
    }
}

/// Pauses an endpoint's processing: its deliveries are still acknowledged
/// and queued, and no worker takes them until it is resumed.
#[utoipa::path(
    post,
    tag = "queue",
    path = "/admin/queue/{endpoint}/pause",
    params(("endpoint" = String, Path, description = "The queued endpoint (URL-encoded)")),
    responses(
        (status = 200, description = "The endpoint is paused", body = PauseState),
        (status = 400, description = "A malformed endpoint", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn queue_pause(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let outcome = async {
        let endpoint = queue::name("endpoint", &path)?;
        queue::pause(&admin.store, &endpoint, &actor(&admin, &request)).await
    };
    match outcome.await {
        Ok(state) => HttpResponse::Ok().json(state),
        Err(error) => error.to_response(),
    }
}

/// Resumes an endpoint's processing; its due jobs run at once.
#[utoipa::path(
    post,
    tag = "queue",
    path = "/admin/queue/{endpoint}/resume",
    params(("endpoint" = String, Path, description = "The queued endpoint (URL-encoded)")),
    responses(
        (status = 200, description = "The endpoint runs again", body = PauseState),
        (status = 400, description = "A malformed endpoint", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn queue_resume(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let outcome = async {
        let endpoint = queue::name("endpoint", &path)?;
        queue::resume(&admin.store, &endpoint, &actor(&admin, &request)).await
    };
    match outcome.await {
        Ok(state) => {
            admin.wake_workers();
            HttpResponse::Ok().json(state)
        }
        Err(error) => error.to_response(),
    }
}

/// Outbox rows, newest first (by default the unsent ones: pending and
/// failed), and every publisher's backlog.
#[utoipa::path(
    get,
    tag = "outbox",
    path = "/admin/outbox",
    params(OutboxQuery),
    responses(
        (status = 200, description = "The selected publications and each publisher's backlog", body = OutboxListing),
        (status = 400, description = "A malformed parameter", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn outbox_list(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let listing = async {
        let query: OutboxQuery = query(&request)?;
        let (filter, limit) = query.validate()?;
        outbox::list(&admin.store, &filter, limit).await
    };
    match listing.await {
        Ok(listing) => HttpResponse::Ok().json(listing),
        Err(error) => error.to_response(),
    }
}

/// Makes the failed publications the filter selects due now, their
/// attempts counted afresh, and wakes the relays.
#[utoipa::path(
    post,
    tag = "outbox",
    path = "/admin/outbox/retry",
    params(OutboxRetryQuery),
    responses(
        (status = 200, description = "How many failed publications are due again", body = OutboxRetry),
        (status = 400, description = "A malformed parameter", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn outbox_retry(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    let outcome = async {
        let query: OutboxRetryQuery = query(&request)?;
        let filter = query.validate()?;
        outbox::retry(&admin.store, &filter, &actor(&admin, &request)).await
    };
    match outcome.await {
        Ok(outcome) => {
            if outcome.retried > 0 {
                admin.wake_relays();
            }
            HttpResponse::Ok().json(outcome)
        }
        Err(error) => error.to_response(),
    }
}

/// Publishes a stored delivery again: a new outbox row per publisher its
/// endpoint publishes to (or only `publisher`), message id
/// `<endpoint>:<delivery id>#republish-<n>`, each recorded as
/// `republished` with the actor. With `dry_run=true` it only says what
/// would be written.
#[utoipa::path(
    post,
    tag = "outbox",
    path = "/admin/deliveries/{endpoint}/{delivery_id}/republish",
    params(
        ("endpoint" = String, Path, description = "The endpoint (URL-encoded)"),
        ("delivery_id" = String, Path, description = "The delivery id (URL-encoded)"),
        RepublishQuery,
    ),
    responses(
        (status = 200, description = "The outbox rows written (or, in a dry run, that would be)", body = RepublishReport),
        (status = 400, description = "A malformed parameter, or a publisher the endpoint does not publish to", content_type = "application/problem+json"),
        (status = 401, description = "No valid admin token", content_type = "application/problem+json"),
        (status = 404, description = "No such endpoint or delivery", content_type = "application/problem+json"),
        (status = 409, description = "The delivery cannot be republished (its body was not stored, its endpoint publishes to nothing, its handlers did not accept it)", content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn republish(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (endpoint, delivery_id) = path.into_inner();
    let outcome = async {
        let query: RepublishQuery = query(&request)?;
        let republish = query.one(&endpoint, &delivery_id, &actor(&admin, &request))?;
        outbox::republish_one(&admin.republisher, &republish).await
    };
    match outcome.await {
        Ok(report) => HttpResponse::Ok().json(report),
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
