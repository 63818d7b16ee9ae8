//! The `Idempotency-Key` contract for client routes (`POST /payments` and any
//! route of yours), over the same engine, table, claim and transaction rules
//! as the webhook endpoint.
//!
//! ```
//! use actix_web::{HttpResponse, web};
//! use idempotent_receiver::client_keys::{Idempotency, IdempotentTx};
//! use idempotent_receiver::engine::Engine;
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
//! ```

mod fingerprint;
mod key;
mod middleware;
mod tx;

pub use fingerprint::fingerprint;
pub use key::{IdempotencyKey, KeyError};
pub use middleware::{DEFAULT_MAX_BODY, Idempotency, Mismatch, Principal, TenantSource};
pub use tx::{IdempotentTx, TxGuard};
