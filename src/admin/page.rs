//! The admin web pages: log in once with a token, land on the dashboard,
//! browse the listing and open keys. Server-rendered HTML, no JavaScript.

use super::Admin;
use super::auth::{Access, check_token, session_access};
use super::auth::{actor, unauthorized};
use super::dashboard::DashboardQuery;
use super::dashboard_view;
use super::detail::fetch_detail;
use super::error::{AdminError, retry_after_secs};
use super::listing::{ListQuery, fetch_page};
use super::origin::same_origin;
use super::outbox::{self, OutboxQuery, OutboxRetryQuery, RepublishQuery};
use super::queue::{self, QueueQuery, RetryQuery};
use super::views::LoginNotice;
use super::{session, views};
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieAge};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use maud::Markup;
use serde::Deserialize;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("", web::get().to(dashboard))
        .route("/", web::get().to(dashboard))
        .route("/list", web::get().to(index))
        .route("/login", web::get().to(login_form))
        .route("/login", web::post().to(login))
        .route("/logout", web::post().to(logout))
        .route("/view/{endpoint}/{delivery_id}", web::get().to(view))
        .route("/jobs", web::get().to(jobs))
        .route("/jobs/{action}", web::post().to(job_action))
        .route("/publications", web::get().to(publications))
        .route("/publications/{action}", web::post().to(publication_action))
        .route(
            "/reprocess",
            web::post().to(super::reprocess::reprocess_form),
        );
}

/// An HTML answer that is never cached, framed or sent with a referrer, and
/// runs no script (the page has none).
fn html(status: StatusCode, markup: Markup) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ))
        .body(markup.into_string())
}

fn see_other(location: &'static str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, HeaderValue::from_static(location)))
        .finish()
}

/// Sends a visitor without a session to the log-in form; `None`: go on.
fn without_session(admin: &Admin, request: &HttpRequest) -> Option<HttpResponse> {
    match session_access(admin, request) {
        Access::Granted => None,
        Access::Denied => Some(see_other("/admin/login")),
        Access::Limited(limited) => Some(AdminError::TooManyAttempts(limited).to_response()),
    }
}

/// The landing page: deliveries by outcome over a window, latencies,
/// retry windows, retention and backlogs (see [`super::dashboard`]).
async fn dashboard(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if let Some(refusal) = without_session(&admin, &request) {
        return refusal;
    }
    let query = web::Query::<DashboardQuery>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let webhooks = admin.republisher.webhooks();
    let mut endpoints: Vec<String> = webhooks.endpoints().map(|e| e.name.clone()).collect();
    endpoints.sort();
    let figures = async {
        let wanted = query.validate(webhooks)?;
        super::dashboard::fetch(&admin.store, webhooks, &wanted).await
    };
    match figures.await {
        Ok(figures) => html(
            StatusCode::OK,
            dashboard_view::dashboard(&query, &endpoints, Ok(figures)),
        ),
        Err(error @ AdminError::BadParameter { .. }) => html(
            StatusCode::BAD_REQUEST,
            dashboard_view::dashboard(&query, &endpoints, Err(error.to_string())),
        ),
        Err(error) => error.to_response(),
    }
}

/// The listing of stored keys, filtered and paged.
async fn index(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if let Some(refusal) = without_session(&admin, &request) {
        return refusal;
    }
    let query = web::Query::<ListQuery>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let page = match query.validate(admin.store.clock().naive_now()) {
        Ok(page) => fetch_page(&admin.store, &page).await,
        Err(error) => Err(error),
    };
    match page {
        Ok(page) => html(
            StatusCode::OK,
            views::listing(&query, &admin.endpoints, Ok(page)),
        ),
        // A malformed filter is shown above the form, which keeps the values.
        Err(error @ AdminError::BadParameter { .. }) => html(
            StatusCode::BAD_REQUEST,
            views::listing(&query, &admin.endpoints, Err(error.to_string())),
        ),
        Err(error) => error.to_response(),
    }
}

async fn login_form(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if session_access(&admin, &request) == Access::Granted {
        return see_other("/admin");
    }
    html(StatusCode::OK, views::login(None))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// Checks the token exactly as the API does, limiter included; on success
/// sets the session cookie, scoped to `/admin`, unreadable by scripts, never
/// sent cross-site. A cross-site post gets 403 and no cookie.
async fn login(admin: web::Data<Admin>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    if let Err(cross_site) = same_origin(&request) {
        tracing::info!(reason = %cross_site, "admin log-in refused: cross-site");
        return AdminError::CrossSite(cross_site).to_response();
    }
    let token = std::str::from_utf8(&body)
        .ok()
        .and_then(|form| web::Query::<LoginForm>::from_query(form).ok())
        .map(|form| form.into_inner().token);
    let Some(token) = token else {
        tracing::info!("admin log-in refused");
        return html(
            StatusCode::UNAUTHORIZED,
            views::login(Some(LoginNotice::Refused)),
        );
    };
    let token = token.trim();
    match check_token(&admin, &request, token) {
        Access::Granted => {}
        Access::Denied => {
            tracing::info!("admin log-in refused");
            return html(
                StatusCode::UNAUTHORIZED,
                views::login(Some(LoginNotice::Refused)),
            );
        }
        Access::Limited(limited) => {
            let seconds = retry_after_secs(limited.retry_after);
            let mut response = html(
                StatusCode::TOO_MANY_REQUESTS,
                views::login(Some(LoginNotice::Limited(seconds))),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            return response;
        }
    }
    let value = session::issue(token.as_bytes(), Utc::now().timestamp());
    let cookie = Cookie::build(session::COOKIE, value)
        .path("/admin")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(request.connection_info().scheme() == "https")
        .max_age(CookieAge::seconds(session::LIFETIME_SECS))
        .finish();
    tracing::info!("admin logged in");
    let mut response = see_other("/admin");
    if let Err(error) = response.add_cookie(&cookie) {
        tracing::warn!(%error, "could not set the admin session cookie");
    }
    response
}

/// Clears the cookie; a cross-site post gets 403 and keeps it, so that
/// another site cannot log an operator out.
async fn logout(request: HttpRequest) -> HttpResponse {
    if let Err(cross_site) = same_origin(&request) {
        tracing::info!(reason = %cross_site, "admin log-out refused: cross-site");
        return AdminError::CrossSite(cross_site).to_response();
    }
    let mut cookie = Cookie::build(session::COOKIE, "")
        .path("/admin")
        .http_only(true)
        .same_site(SameSite::Strict)
        .finish();
    cookie.make_removal();
    let mut response = see_other("/admin/login");
    if let Err(error) = response.add_cookie(&cookie) {
        tracing::warn!(%error, "could not clear the admin session cookie");
    }
    response
}

async fn view(
    admin: web::Data<Admin>,
    request: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    if let Some(refusal) = without_session(&admin, &request) {
        return refusal;
    }
    let (endpoint, delivery_id) = path.into_inner();
    let reprocessed = super::reprocess::outcome_of(request.query_string());
    match fetch_detail(&admin.store, &endpoint, &delivery_id).await {
        Ok(record) => {
            let reprocessable = admin.republisher.webhooks().endpoint(&endpoint).is_some();
            html(
                StatusCode::OK,
                views::detail(&record, reprocessable, reprocessed),
            )
        }
        Err(error @ AdminError::NotFound { .. }) => {
            html(StatusCode::NOT_FOUND, views::not_found(&error.to_string()))
        }
        Err(error) => error.to_response(),
    }
}

/// The queue: jobs of queued endpoints (by default the unfinished ones),
/// the paused endpoints, and the forms that act on them.
async fn jobs(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if let Some(refusal) = without_session(&admin, &request) {
        return refusal;
    }
    let query = web::Query::<QueueQuery>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let listing = async {
        let now = admin.store.clock().naive_now();
        let (filter, limit) = query.validate(now)?;
        let listing = queue::list(&admin.store, &filter, limit).await?;
        // What "retry all" would take: the dry run, shown on its button.
        let bulk = RetryQuery {
            endpoint: query.endpoint.clone(),
            state: query.state.clone(),
            event_type: query.event_type.clone(),
            since: query.since.clone(),
            until: query.until.clone(),
            dry_run: Some("true".into()),
        };
        let retryable = match bulk.validate(now) {
            Ok((filter, _)) => Some(
                queue::retry_matching(&admin.store, &filter, "", true)
                    .await?
                    .matched,
            ),
            Err(_) => None,
        };
        Ok::<_, AdminError>((listing, retryable))
    };
    match listing.await {
        Ok((listing, retryable)) => html(
            StatusCode::OK,
            views::queue(&query, Ok((&listing, retryable))),
        ),
        Err(error @ AdminError::BadParameter { .. }) => html(
            StatusCode::BAD_REQUEST,
            views::queue(&query, Err(error.to_string())),
        ),
        Err(error) => error.to_response(),
    }
}

/// The fields of the queue page's forms; each form sends those it needs.
#[derive(Deserialize, Default)]
struct JobForm {
    endpoint: Option<String>,
    delivery_id: Option<String>,
    state: Option<String>,
    event_type: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

/// A form of the queue page: refused cross-site (403) as log-in and
/// log-out are, and without a session (401) before anything is read;
/// then done as the API does it, recorded with the operator's actor, and
/// answered with the queue page again (303).
async fn job_action(
    admin: web::Data<Admin>,
    request: HttpRequest,
    action: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let form: JobForm = match form_of(&admin, &request, &body, "queue") {
        Ok(form) => form,
        Err(refusal) => return *refusal,
    };
    let actor = actor(&admin, &request);
    let done = async {
        let endpoint = queue::name("endpoint", form.endpoint.as_deref().unwrap_or(""));
        let delivery_id = form.delivery_id.as_deref().unwrap_or("");
        match action.as_str() {
            "retry" => {
                queue::retry(&admin.store, &endpoint?, delivery_id, &actor).await?;
            }
            "cancel" => {
                queue::cancel(&admin.store, &endpoint?, delivery_id, &actor).await?;
            }
            "pause" => {
                queue::pause(&admin.store, &endpoint?, &actor).await?;
            }
            "resume" => {
                queue::resume(&admin.store, &endpoint?, &actor).await?;
            }
            "retry-all" => {
                let query = RetryQuery {
                    endpoint: form.endpoint.clone(),
                    state: form.state.clone(),
                    event_type: form.event_type.clone(),
                    since: form.since.clone(),
                    until: form.until.clone(),
                    dry_run: None,
                };
                let (filter, _) = query.validate(admin.store.clock().naive_now())?;
                queue::retry_matching(&admin.store, &filter, &actor, false).await?;
            }
            _ => return Err(AdminError::bad("action", "not a queue action")),
        }
        Ok(())
    };
    match done.await {
        Ok(()) => {
            admin.wake_workers();
            see_other("/admin/jobs")
        }
        Err(error) => refused_form(error, "/admin/jobs"),
    }
}

/// A page form's fields, once it passed the checks every form passes:
/// refused cross-site (403) as log-in and log-out are, and without a
/// session (401) before anything is read.
pub(super) fn form_of<T: serde::de::DeserializeOwned + Default>(
    admin: &Admin,
    request: &HttpRequest,
    body: &[u8],
    what: &str,
) -> Result<T, Box<HttpResponse>> {
    if let Err(cross_site) = same_origin(request) {
        tracing::info!(reason = %cross_site, "admin {what} action refused: cross-site");
        return Err(Box::new(AdminError::CrossSite(cross_site).to_response()));
    }
    match session_access(admin, request) {
        Access::Granted => {}
        Access::Denied => return Err(Box::new(unauthorized())),
        Access::Limited(limited) => {
            return Err(Box::new(AdminError::TooManyAttempts(limited).to_response()));
        }
    }
    Ok(std::str::from_utf8(body)
        .ok()
        .and_then(|form| web::Query::<T>::from_query(form).ok())
        .map(web::Query::into_inner)
        .unwrap_or_default())
}

/// A form that changed nothing: why, on a page that leads `back`, with
/// the problem's status; anything else as problem+json.
pub(super) fn refused_form(error: AdminError, back: &str) -> HttpResponse {
    match error {
        error @ (AdminError::BadParameter { .. }
        | AdminError::NoJob { .. }
        | AdminError::NotFound { .. }
        | AdminError::UnknownEndpoint(_)
        | AdminError::NotRepublishable(_)
        | AdminError::NotReprocessed(_)
        | AdminError::Conflict(_)) => {
            let status =
                StatusCode::from_u16(error.to_problem().status).unwrap_or(StatusCode::BAD_REQUEST);
            html(status, views::notice(&error.to_string(), back))
        }
        error => error.to_response(),
    }
}

/// The outbox: each publisher's backlog and the publications a filter
/// selects (by default the unsent ones), with retry buttons.
async fn publications(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if let Some(refusal) = without_session(&admin, &request) {
        return refusal;
    }
    let query = web::Query::<OutboxQuery>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let listing = async {
        let (filter, limit) = query.validate()?;
        outbox::list(&admin.store, &filter, limit).await
    };
    match listing.await {
        Ok(listing) => html(StatusCode::OK, views::outbox(&query, Ok(&listing))),
        Err(error @ AdminError::BadParameter { .. }) => html(
            StatusCode::BAD_REQUEST,
            views::outbox(&query, Err(error.to_string())),
        ),
        Err(error) => error.to_response(),
    }
}

/// The fields of the outbox forms and the delivery page's republish form.
#[derive(Deserialize, Default)]
struct PublicationForm {
    publisher: Option<String>,
    endpoint: Option<String>,
    delivery_id: Option<String>,
}

/// A form of the outbox page (`retry`) or of a delivery's page
/// (`republish`), checked as the queue's forms are, done as the API does
/// it, and answered with the page it came from (303).
async fn publication_action(
    admin: web::Data<Admin>,
    request: HttpRequest,
    action: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let form: PublicationForm = match form_of(&admin, &request, &body, "outbox") {
        Ok(form) => form,
        Err(refusal) => return *refusal,
    };
    let actor = actor(&admin, &request);
    let endpoint = form.endpoint.clone().unwrap_or_default();
    let delivery_id = form.delivery_id.clone().unwrap_or_default();
    let done = async {
        match action.as_str() {
            "retry" => {
                let query = OutboxRetryQuery {
                    publisher: form.publisher.clone(),
                    endpoint: form.endpoint.clone(),
                    delivery_id: form.delivery_id.clone(),
                };
                let retried = outbox::retry(&admin.store, &query.validate()?, &actor).await?;
                Ok((retried.retried > 0, "/admin/publications".to_owned()))
            }
            "republish" => {
                let query = RepublishQuery {
                    publisher: form.publisher.clone(),
                    dry_run: None,
                };
                let republish = query.one(&endpoint, &delivery_id, &actor)?;
                outbox::republish_one(&admin.republisher, &republish).await?;
                Ok((true, views::detail_href(&endpoint, &delivery_id)))
            }
            _ => Err(AdminError::bad("action", "not an outbox action")),
        }
    };
    match done.await {
        Ok((wake, back)) => {
            if wake {
                admin.wake_relays();
            }
            HttpResponse::SeeOther()
                .insert_header((header::LOCATION, back))
                .finish()
        }
        Err(error) => refused_form(error, "/admin/publications"),
    }
}
