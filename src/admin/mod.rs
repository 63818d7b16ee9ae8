//! The operator surface over the stored keys: a JSON API (`/admin/deliveries`,
//! `/admin/stats`, `/admin/dashboard.json`, `/admin/openapi.json`), web
//! pages (the dashboard at `/admin`, the listing at `/admin/list`) and the
//! `list` command's table. Nothing here changes a key but a reprocessing
//! ([`reprocess`]: the engine runs its handlers again); the queue's actions
//! (`/admin/queue`, the page's `/admin/jobs`, the `queue` command) change
//! only jobs and pauses of queued endpoints ([`queue`]), and the outbox's
//! (`/admin/outbox`, a delivery's `republish`, the page's
//! `/admin/publications`, the `outbox` command) only outbox rows and the
//! history of what was republished ([`outbox`]).
//!
//! Every route needs one of the configured admin tokens (`admin_tokens`,
//! `IR_ADMIN_TOKENS`): the API as `Authorization: Bearer <token>`, the page
//! through a session cookie derived from the token at log-in. Every action
//! is recorded with its actor: `admin:<name>` for a named token, else
//! `admin:<fingerprint>` (`auth::actor`). With no token
//! configured nothing is mounted and `/admin` answers 404. Wrong credentials
//! are rate-limited per address and globally ([`limiter`]), and the page's
//! forms refuse cross-site posts ([`origin`]).

mod api;
mod auth;
mod chart;
mod cursor;
mod dashboard;
mod dashboard_view;
mod detail;
mod effects_view;
mod error;
pub mod limiter;
mod listing;
mod listing_view;
mod model;
mod openapi;
pub mod origin;
pub mod outbox;
mod page;
mod page_text;
mod payload_search;
mod pretty;
pub mod queue;
pub mod reprocess;
mod session;
mod settings;
mod stats;
mod terminal;
mod tokens;
mod views;

pub use crate::bearer::{MIN_TOKEN_LEN, constant_time_eq};
pub use dashboard::{Dashboard, DashboardQuery};
pub use detail::{KeyRecord, fetch_detail};
pub use error::AdminError;
pub use limiter::LoginLimits;
pub use listing::{DEFAULT_LIMIT, ListQuery, MAX_LIMIT, Page, PageRequest, fetch_page};
pub use model::{DeliveryItem, DeliveryPage, DeliveryView, EndpointStats, Stats};
pub use openapi::document as openapi_document;
pub use settings::{AdminSettings, InvalidAdminSetting, RawAdminToken, RawLoginLimits, TOKENS_ENV};
pub use terminal::{aligned, table, totals_line};
pub use tokens::{AdminToken, AdminTokens};

use crate::maintenance::Republisher;
use crate::store::Store;
use actix_web::middleware::from_fn;
use actix_web::web;
use limiter::LoginLimiter;
use std::sync::Arc;

/// The admin surface over a store, for the configured tokens.
#[derive(Clone)]
pub struct Admin {
    store: Store,
    tokens: AdminTokens,
    /// One for the whole surface: every worker, the page and the API.
    limiter: Arc<LoginLimiter>,
    /// This process's queue workers, woken after a retry or a resume (on
    /// PostgreSQL every instance's are also told by NOTIFY).
    queue_wake: Option<Arc<tokio::sync::Notify>>,
    /// The endpoints and publishers a republish needs; its outbox signal
    /// wakes the relays after a retry or a republish.
    republisher: Republisher,
    /// What the listing's endpoint filter offers: the configured endpoints
    /// and client-key scopes.
    endpoints: Arc<Vec<String>>,
}

impl Admin {
    /// `None` when no token is configured: the surface is off.
    pub fn new(store: Store, settings: &AdminSettings, republisher: Republisher) -> Option<Admin> {
        settings.enabled().then(|| Admin {
            store,
            tokens: settings.tokens.clone(),
            limiter: Arc::new(LoginLimiter::new(
                settings.login_limits,
                std::time::Instant::now(),
            )),
            queue_wake: None,
            republisher,
            endpoints: Arc::default(),
        })
    }

    /// Offers `endpoints` (configured endpoints, client-key scopes such as
    /// `POST /payments`) in the listing's endpoint filter.
    pub fn listing_endpoints(mut self, endpoints: Vec<String>) -> Admin {
        self.endpoints = Arc::new(endpoints);
        self
    }

    /// Wakes `wake`'s workers after an operator's retry or resume.
    pub fn waking(mut self, wake: Arc<tokio::sync::Notify>) -> Admin {
        self.queue_wake = Some(wake);
        self
    }

    /// The configured endpoints and their engine, for a reprocessing.
    fn webhooks(&self) -> &crate::webhooks::Webhooks {
        self.republisher.webhooks()
    }

    fn wake_workers(&self) {
        if let Some(wake) = &self.queue_wake {
            wake.notify_one();
        }
    }

    /// Wakes the relays (this process's, and other instances' through the
    /// notifier) after an operator's retry or republish.
    fn wake_relays(&self) {
        self.republisher.outbox_signal().committed();
    }

    /// Mounts `/admin`: the page's routes, then the API behind the token.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        cfg.service(
            web::scope("/admin")
                .app_data(web::Data::new(self.clone()))
                .configure(page::configure)
                .service(
                    web::scope("")
                        .wrap(from_fn(auth::require_token))
                        .configure(api::configure),
                ),
        );
    }
}
