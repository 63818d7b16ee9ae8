//! Request ids: every request runs inside a `request` span that carries its
//! id, method and route pattern, and at the end its status and duration;
//! every answer echoes the id in `X-Request-Id`, errors and replays
//! included. An id the caller sends (1 to 128 visible ASCII characters) is
//! kept, so that a gateway's or a sender's id ties our log lines to theirs;
//! anything else gets a fresh UUID.

use super::in_span::InSpanExt;
use super::metrics;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform, forward_ready};
use actix_web::error::InternalError;
use actix_web::http::Method;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::{Error, HttpMessage};
use foldhash::fast::RandomState;
use futures_util::future::LocalBoxFuture;
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::{Ready, ready};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The header read and echoed.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");
/// The longest id accepted from a caller.
pub const MAX_REQUEST_ID: usize = 128;

/// Routes probed or scraped every few seconds: their answers are logged at
/// debug, so that they do not drown the info lines.
const QUIET_ROUTES: &[&str] = &["/healthz", "/readyz", "/metrics"];

/// The request's id, in its extensions, for handlers that want it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Put in a request's extensions by a face that logged its own line at info
/// about the answer ("delivery answered"), so that the request's closing
/// line goes to debug and each request has one info line.
#[derive(Debug, Clone, Copy)]
pub struct AnswerLogged;

/// Literal paths that stand for a pattern in logs and metrics, in an app's
/// data: a face that registers a literal path per name in front of its
/// pattern (see `Webhooks::configure`) names the route by the pattern
/// whichever of the two matched, so that a route's series and lines do not
/// split by name. A matched pattern that ends with one of the paths (the
/// app's own, or the same under a scope's prefix) is named by the pattern,
/// under the same prefix.
#[derive(Debug, Clone)]
pub struct RouteLabel {
    paths: Vec<String>,
    pattern: &'static str,
}

impl RouteLabel {
    pub fn new(paths: impl IntoIterator<Item = String>, pattern: &'static str) -> RouteLabel {
        RouteLabel {
            paths: paths.into_iter().collect(),
            pattern,
        }
    }

    /// `matched` as logs and metrics name it. Once per path and worker
    /// (`RoutePatterns` keeps the answer), so a pass over the paths will do.
    fn name(&self, matched: String) -> String {
        // Each path starts with '/', so a suffix starts at a segment.
        match self
            .paths
            .iter()
            .find_map(|path| matched.strip_suffix(path.as_str()))
        {
            Some(prefix) => format!("{prefix}{}", self.pattern),
            None => matched,
        }
    }
}

/// The middleware; wrap the whole `App` with it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIds;

impl<S, B> Transform<S, ServiceRequest> for RequestIds
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<B>;
    type Error = Error;
    type Transform = RequestIdService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RequestIdService {
            service: Rc::new(service),
            routes: RoutePatterns::default(),
        }))
    }
}

pub struct RequestIdService<S> {
    service: Rc<S>,
    routes: RoutePatterns,
}

impl<S, B> Service<ServiceRequest> for RequestIdService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<B>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let started = Instant::now();
        let id = incoming(req.headers()).unwrap_or_else(fresh_id);
        let method = method_label(req.method());
        // The pattern, never the raw path: it names the route in metrics,
        // where a path with ids in it would be a series per request.
        let route = self.routes.pattern(&req);
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            method = %method,
            route = %route,
            status = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        // The id was checked to be visible ASCII, or is a UUID.
        let header = HeaderValue::from_str(&id).ok();
        req.extensions_mut().insert(RequestId(id));
        let service = self.service.clone();
        Box::pin(
            async move {
                let result = service.call(req).await;
                match result {
                    Ok(mut response) => {
                        if let Some(header) = header {
                            response.headers_mut().insert(REQUEST_ID_HEADER, header);
                        }
                        let logged = response.request().extensions().contains::<AnswerLogged>();
                        close(method, &route, response.status().as_u16(), started, logged);
                        Ok(response)
                    }
                    // An inner middleware's error becomes its response only
                    // after this one returns; make that response here so
                    // that it carries the id too.
                    Err(error) => {
                        let mut response = error.error_response();
                        if let Some(header) = header {
                            response.headers_mut().insert(REQUEST_ID_HEADER, header);
                        }
                        close(method, &route, response.status().as_u16(), started, false);
                        Err(InternalError::from_response(error, response).into())
                    }
                }
            }
            .in_span(span),
        )
    }
}

/// A new request id: a v4 UUID, hyphenated and lower case, as
/// `Uuid::to_string` writes it, but encoded into a buffer and copied once
/// rather than grown through the formatter.
fn fresh_id() -> String {
    let mut buffer = uuid::Uuid::encode_buffer();
    let id: &str = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buffer);
    id.to_owned()
}

/// The route pattern of each path seen lately, per app instance (one per
/// worker). `match_pattern` matches the path against the routes again, with
/// a regex per dynamic segment, and returns a new `String`: about 2,000
/// instructions per request, a fiftieth of a replay's (callgrind). The
/// routes do not change while the app runs, so a path's pattern is found
/// once. The paths are the caller's: at most [`ROUTE_CACHE_PATHS`] of at
/// most [`ROUTE_CACHE_PATH_LEN`] bytes are kept, and a full cache is
/// emptied, so that a scan of many paths costs what it cost before and the
/// paths in steady use come back at once.
#[derive(Default)]
struct RoutePatterns(RefCell<HashMap<Box<str>, Rc<str>, RandomState>>);

/// How many paths [`RoutePatterns`] keeps.
const ROUTE_CACHE_PATHS: usize = 64;
/// The longest path [`RoutePatterns`] keeps.
const ROUTE_CACHE_PATH_LEN: usize = 128;

impl RoutePatterns {
    fn pattern(&self, req: &ServiceRequest) -> Rc<str> {
        let path = req.path();
        if let Some(pattern) = self.0.borrow().get(path) {
            return pattern.clone();
        }
        let pattern: Rc<str> = match req.match_pattern() {
            Some(pattern) => match req.app_data::<RouteLabel>() {
                Some(label) => label.name(pattern).into(),
                None => pattern.into(),
            },
            None => "unmatched".into(),
        };
        if path.len() <= ROUTE_CACHE_PATH_LEN {
            let mut paths = self.0.borrow_mut();
            if paths.len() >= ROUTE_CACHE_PATHS {
                paths.clear();
            }
            paths.insert(path.into(), pattern.clone());
        }
        pattern
    }
}

/// Records the status and duration on the request's span, counts the
/// request, and writes its closing line.
fn close(method: &'static str, route: &str, status: u16, started: Instant, logged: bool) {
    metrics::http_request(method, route, status);
    let quiet = logged || QUIET_ROUTES.contains(&route);
    // The span's last two fields show only on lines written after them, and
    // the closing line is the last line of a request: when it is filtered
    // out (a delivery, which logged its own line, at the default level) the
    // two records would be formatted for no line at all.
    if quiet && !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    // Read only for a line that is written: a clock read and a
    // subtraction a request.
    let duration_ms = millis(started.elapsed());
    let span = tracing::Span::current();
    span.record("status", status);
    span.record("duration_ms", duration_ms);
    if quiet {
        tracing::debug!(status, duration_ms, "request answered");
    } else {
        tracing::info!(status, duration_ms, "request answered");
    }
}

/// Milliseconds with microsecond precision, for log fields.
pub fn millis(elapsed: Duration) -> f64 {
    elapsed.as_micros() as f64 / 1000.0
}

/// The caller's id, if there is exactly one and it is 1 to 128 visible
/// ASCII characters; anything else could forge or break log lines.
fn incoming(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(REQUEST_ID_HEADER);
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let bytes = value.as_bytes();
    let visible = |b: &u8| (0x21..=0x7e).contains(b);
    if bytes.is_empty() || bytes.len() > MAX_REQUEST_ID || !bytes.iter().all(visible) {
        return None;
    }
    value.to_str().ok().map(str::to_owned)
}

/// The method as a metric label: the standard ones by name, any other
/// token (a client may send anything) as `OTHER`.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::{App, HttpResponse, test as actix_test, web};

    #[actix_web::test]
    async fn a_paths_pattern_is_the_one_actix_matches_and_few_short_paths_are_kept() {
        let patterns = Rc::new(RoutePatterns::default());
        let seen = Rc::new(RefCell::new(Vec::new()));
        let (cache, log) = (patterns.clone(), seen.clone());
        let app = actix_test::init_service(
            App::new()
                .wrap_fn(move |req, srv| {
                    let cached = cache.pattern(&req).to_string();
                    let matched = req.match_pattern().unwrap_or_else(|| "unmatched".into());
                    log.borrow_mut().push((
                        req.path().to_owned(),
                        cached,
                        matched,
                        cache.0.borrow().len(),
                    ));
                    srv.call(req)
                })
                .route("/webhooks/{endpoint}", web::post().to(HttpResponse::Ok))
                .route("/healthz", web::get().to(HttpResponse::Ok)),
        )
        .await;
        let long = format!("/webhooks/{}", "x".repeat(ROUTE_CACHE_PATH_LEN));
        let mut paths = vec!["/webhooks/shop", "/webhooks/shop", "/healthz", "/nowhere"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        paths.push(long.clone());
        paths.extend((0..150).map(|i| format!("/webhooks/e{i}")));
        paths.push("/webhooks/shop".to_owned());
        for path in &paths {
            let request = actix_test::TestRequest::post().uri(path).to_request();
            let _ = actix_test::call_service(&app, request).await;
        }
        let seen = seen.borrow();
        assert_eq!(seen.len(), paths.len());
        for (path, cached, matched, kept) in seen.iter() {
            assert_eq!(cached, matched, "{path}");
            assert!(*kept <= ROUTE_CACHE_PATHS, "{path}: {kept} paths kept");
        }
        assert_eq!(seen[0].1, "/webhooks/{endpoint}");
        assert_eq!(seen[1].1, "/webhooks/{endpoint}", "from the cache");
        assert_eq!(seen[3].1, "unmatched");
        assert!(
            !patterns.0.borrow().contains_key(long.as_str()),
            "a long path is not kept"
        );
    }

    #[actix_web::test]
    async fn a_literal_path_is_named_by_the_pattern_it_stands_for() {
        let patterns = Rc::new(RoutePatterns::default());
        let seen = Rc::new(RefCell::new(Vec::new()));
        let (cache, log) = (patterns.clone(), seen.clone());
        let label = RouteLabel::new(["/hooks/shop".to_owned()], "/hooks/{name}");
        let app = actix_test::init_service(
            App::new()
                .app_data(label)
                .wrap_fn(move |req, srv| {
                    log.borrow_mut().push(cache.pattern(&req).to_string());
                    srv.call(req)
                })
                .route("/hooks/shop", web::post().to(HttpResponse::Ok))
                .route("/hooks/{name}", web::post().to(HttpResponse::Accepted))
                .service(
                    web::scope("/api")
                        .route("/hooks/shop", web::post().to(HttpResponse::Ok))
                        .route("/hooks/{name}", web::post().to(HttpResponse::Accepted)),
                )
                .route("/shop", web::post().to(HttpResponse::Ok)),
        )
        .await;
        let mut statuses = Vec::new();
        for path in [
            "/hooks/shop",
            "/hooks/other",
            "/api/hooks/shop",
            "/api/hooks/x",
            "/shop",
        ] {
            let request = actix_test::TestRequest::post().uri(path).to_request();
            statuses.push(
                actix_test::call_service(&app, request)
                    .await
                    .status()
                    .as_u16(),
            );
        }
        // The literal path answered where it matched, the pattern elsewhere.
        assert_eq!(statuses, [200, 202, 200, 202, 200]);
        assert_eq!(
            *seen.borrow(),
            [
                "/hooks/{name}",
                "/hooks/{name}",
                "/api/hooks/{name}",
                "/api/hooks/{name}",
                "/shop"
            ]
        );
    }

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(
                REQUEST_ID_HEADER,
                HeaderValue::from_bytes(value).expect("a valid header value"),
            );
        }
        map
    }

    #[test]
    fn a_caller_id_of_visible_ascii_up_to_128_characters_is_kept() {
        assert_eq!(
            incoming(&headers(&[b"req-42_abc:XYZ"])).as_deref(),
            Some("req-42_abc:XYZ")
        );
        let longest = "a".repeat(MAX_REQUEST_ID);
        assert_eq!(
            incoming(&headers(&[longest.as_bytes()])),
            Some(longest.clone())
        );
    }

    #[test]
    fn an_empty_long_spaced_non_ascii_or_repeated_id_is_replaced() {
        let too_long = "a".repeat(MAX_REQUEST_ID + 1);
        for bad in [
            &headers(&[b""]),
            &headers(&[too_long.as_bytes()]),
            &headers(&[b"two words"]),
            &headers(&[b"caf\xc3\xa9"]),
            &headers(&[b"tab\there"]),
            &headers(&[b"one", b"two"]),
            &HeaderMap::new(),
        ] {
            assert_eq!(incoming(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_fresh_id_is_a_v4_uuid_written_as_to_string_writes_it() {
        let first = fresh_id();
        let parsed = uuid::Uuid::parse_str(&first).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(parsed.to_string(), first);
        assert_ne!(fresh_id(), first);
    }

    #[test]
    fn unusual_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        let custom = Method::from_bytes(b"PURGE").expect("a valid token");
        assert_eq!(method_label(&custom), "OTHER");
    }
}
