//! idempotent-receiver: verifies signed webhooks and processes every delivery
//! exactly once, on embedded SQLite or PostgreSQL.
//!
//! The pieces: a [`store::Store`] with two backends; the [`engine::Engine`],
//! which claims a key, runs an operation and completes the key in one
//! transaction (or answers a repeat from what is stored); and the faces that
//! feed it — [`webhooks::Webhooks`] for signed deliveries.
//!
//! # Mounting the webhook endpoint in your own app, with your own handler
//!
//! ```
//! use idempotent_receiver::handlers::{Event, Handler, HandlerError, Registry};
//! use idempotent_receiver::store::DbConn;
//! use idempotent_receiver::{config::Settings, startup};
//! use serde_json::{Value, json};
//!
//! /// Counts orders. Whatever it writes through `conn` commits together with
//! /// the delivery's completion, or not at all.
//! struct CountOrders;
//!
//! #[async_trait::async_trait(?Send)]
//! impl Handler for CountOrders {
//!     async fn handle(&self, event: &Event, _conn: &mut DbConn) -> Result<Option<Value>, HandlerError> {
//!         Ok(Some(json!({ "seen": event.event_type })))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let data_dir = dir.path().to_string_lossy().to_string();
//! # let env = move |k: &str| (k == "IR_DATA_DIR").then(|| data_dir.clone());
//! let config = r#"
//!     [endpoints.orders]
//!     provider = "standard-webhooks"
//!     secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
//!     handlers = ["record", "count-orders"]
//! "#;
//! let settings = Settings::parse(config, "example.toml", &env)?;
//! let registry = Registry::builtin().with("count-orders", CountOrders);
//! let store = startup::open_store(&settings).await?;
//! let webhooks = startup::webhooks(&settings, store, &registry)?;
//!
//! // POST /webhooks/orders now verifies, deduplicates and runs the handlers.
//! let app = actix_web::App::new().configure(|cfg| webhooks.configure(cfg));
//! # let _ = app;
//! # Ok(())
//! # }
//! ```

pub mod admin;
pub mod bearer;
pub mod body;
pub mod client;
pub mod client_keys;
pub mod clock;
pub mod config;
pub mod decimal_text;
pub mod demo;
pub mod digest_hex;
pub mod duration_text;
pub mod engine;
pub mod environment;
pub mod handlers;
pub mod health;
pub mod json_pointer;
pub mod log_text;
pub mod maintenance;
pub mod payload;
pub mod payments;
pub mod problem;
pub mod providers;
pub mod publishers;
pub mod reply;
pub mod secret;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod thread_shard;
pub mod traffic;
pub mod uri_text;
pub mod webhooks;
