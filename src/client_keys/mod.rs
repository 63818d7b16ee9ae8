//! The `Idempotency-Key` contract for client routes (`POST /payments` and any
//! route of yours), over the same engine, table, claim and transaction rules
//! as the webhook endpoint.
//!
//! ```
//! use actix_web::{App, HttpResponse, test, web};
//! use idempotent_receiver::client_keys::{Idempotency, IdempotentTx};
//! use idempotent_receiver::engine::{Engine, EngineOptions};
//! use idempotent_receiver::store::{DatabaseUrl, Store, StoreOptions};
//!
//! async fn create_order(body: web::Bytes, tx: IdempotentTx) -> HttpResponse {
//!     // Writes through `tx.conn()` commit together with the key's completion.
//!     let _conn = tx.conn().await;
//!     HttpResponse::Created().body(body)
//! }
//!
//! fn routes(engine: Engine) -> impl FnOnce(&mut web::ServiceConfig) {
//!     move |cfg| {
//!         cfg.service(
//!             web::resource("/orders")
//!                 .wrap(Idempotency::new(engine).required())
//!                 .route(web::post().to(create_order)),
//!         );
//!     }
//! }
//!
//! # #[actix_web::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let url = DatabaseUrl::Sqlite(dir.path().join("receiver.db"));
//! let store = Store::connect(&url, &StoreOptions::default())?;
//! store.migrate().await?;
//! let engine = Engine::new(store, EngineOptions::default());
//! let app = test::init_service(App::new().configure(routes(engine))).await;
//!
//! let order = || {
//!     test::TestRequest::post()
//!         .uri("/orders")
//!         .insert_header(("Idempotency-Key", "\"0b6e2a64-7c1e-4f5e-9d3a-5a8f1c2e9b77\""))
//!         .set_payload(r#"{"sku":"tea","qty":2}"#)
//!         .to_request()
//! };
//! let first = test::call_service(&app, order()).await;
//! assert_eq!(first.status(), 201);
//! let retry = test::call_service(&app, order()).await;
//! assert_eq!(retry.status(), 201);
//! assert_eq!(retry.headers().get("idempotent-replayed").unwrap(), "true");
//! # Ok(())
//! # }
//! ```

mod fingerprint;
mod key;
mod middleware;
mod settings;
mod tx;

pub use fingerprint::fingerprint;
pub use key::{IdempotencyKey, KeyError};
pub use middleware::{DEFAULT_MAX_BODY, Idempotency, Mismatch, Principal, TenantSource};
pub use settings::IdempotencySettings;
pub use tx::{IdempotentTx, TxGuard};
