//! The operator surface over the stored keys: a JSON API (`/admin/deliveries`,
//! `/admin/stats`, `/admin/openapi.json`), a web page (`/admin`) and the
//! `list` command's table. Read-only: nothing here changes a key.
//!
//! Every route needs one of the configured admin tokens (`admin_tokens`,
//! `IR_ADMIN_TOKENS`): the API as `Authorization: Bearer <token>`, the page
//! through a session cookie derived from the token at log-in. With no token
//! configured nothing is mounted and `/admin` answers 404.

mod api;
mod auth;
mod cursor;
mod detail;
mod error;
mod listing;
mod model;
mod openapi;
mod page;
mod session;
mod settings;
mod stats;
mod terminal;
mod tokens;
mod views;

pub use detail::{KeyRecord, fetch_detail};
pub use error::AdminError;
pub use listing::{DEFAULT_LIMIT, ListQuery, MAX_LIMIT, Page, PageRequest, fetch_page};
pub use model::{DeliveryItem, DeliveryPage, DeliveryView, EndpointStats, Stats};
pub use openapi::document as openapi_document;
pub use settings::{AdminSettings, InvalidAdminSetting, MIN_TOKEN_LEN, TOKENS_ENV};
pub use terminal::table;
pub use tokens::{AdminTokens, constant_time_eq};

use crate::store::Store;
use actix_web::middleware::from_fn;
use actix_web::web;

/// The admin surface over a store, for the configured tokens.
#[derive(Clone)]
pub struct Admin {
    store: Store,
    tokens: AdminTokens,
}

impl Admin {
    /// `None` when no token is configured: the surface is off.
    pub fn new(store: Store, tokens: AdminTokens) -> Option<Admin> {
        (!tokens.is_empty()).then_some(Admin { store, tokens })
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
