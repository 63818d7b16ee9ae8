//! The admin web page: log in once with a token, then browse the listing
//! and open keys. Server-rendered HTML, no JavaScript.

use super::Admin;
use super::auth::has_session;
use super::detail::fetch_detail;
use super::error::AdminError;
use super::listing::{ListQuery, fetch_page};
use super::{session, views};
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieAge};
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use maud::Markup;
use serde::Deserialize;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("", web::get().to(index))
        .route("/", web::get().to(index))
        .route("/login", web::get().to(login_form))
        .route("/login", web::post().to(login))
        .route("/logout", web::post().to(logout))
        .route("/view/{endpoint}/{delivery_id}", web::get().to(view));
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

async fn index(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if !has_session(&admin, &request) {
        return see_other("/admin/login");
    }
    let query = web::Query::<ListQuery>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .unwrap_or_default();
    let page = match query.validate(Utc::now().naive_utc()) {
        Ok(page) => fetch_page(&admin.store, &page).await,
        Err(error) => Err(error),
    };
    match page {
        Ok(page) => html(StatusCode::OK, views::listing(&query, Ok(page))),
        // A malformed filter is shown above the form, which keeps the values.
        Err(error @ AdminError::BadParameter { .. }) => html(
            StatusCode::BAD_REQUEST,
            views::listing(&query, Err(error.to_string())),
        ),
        Err(error) => error.to_response(),
    }
}

async fn login_form(admin: web::Data<Admin>, request: HttpRequest) -> HttpResponse {
    if has_session(&admin, &request) {
        return see_other("/admin");
    }
    html(StatusCode::OK, views::login(false))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// Checks the token exactly as the API does; on success sets the session
/// cookie, scoped to `/admin`, unreadable by scripts, never sent cross-site.
async fn login(admin: web::Data<Admin>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    let token = std::str::from_utf8(&body)
        .ok()
        .and_then(|form| web::Query::<LoginForm>::from_query(form).ok())
        .map(|form| form.into_inner().token);
    let Some(token) = token.filter(|t| admin.tokens.accepts(t.trim().as_bytes())) else {
        tracing::info!("admin log-in refused");
        return html(StatusCode::UNAUTHORIZED, views::login(true));
    };
    let value = session::issue(token.trim().as_bytes(), Utc::now().timestamp());
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

async fn logout() -> HttpResponse {
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
    if !has_session(&admin, &request) {
        return see_other("/admin/login");
    }
    let (endpoint, delivery_id) = path.into_inner();
    match fetch_detail(&admin.store, &endpoint, &delivery_id).await {
        Ok(record) => html(StatusCode::OK, views::detail(&record)),
        Err(error @ AdminError::NotFound { .. }) => {
            html(StatusCode::NOT_FOUND, views::not_found(&error.to_string()))
        }
        Err(error) => error.to_response(),
    }
}
