//! Wiring: settings → store (migrated) → engine → faces → a running server.

use crate::admin::Admin;
use crate::client_keys::{Idempotency, TenantSource};
use crate::config::{ConfigError, Settings};
use crate::duration_text::format_duration;
use crate::engine::{Engine, EngineOptions};
use crate::handlers::Registry;
use crate::health;
use crate::maintenance::{
    PurgeTask, QueueWorkers, ReconcileTask, Relay, RelaySettings, Republisher, short_retentions,
    spawn_notifier,
};
use crate::payments;
use crate::problem;
use crate::publishers::PublisherSettings;
use crate::store::{GroupCommitMetrics, ReplayCacheOptions, Store, StoreError, StoreOptions};
use crate::telemetry::{self, request_id::RequestIds};
use crate::webhooks::{Endpoint, Webhooks};
use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot prepare the database: {0}")]
    Store(#[from] StoreError),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// Loads the settings the commands run with: `path` (or `IR_CONFIG`, or the
/// defaults) and the environment. Without a configured endpoint, the demo
/// endpoint's secret is created here, once, so that the demo endpoint exists.
pub fn load_settings(path: Option<&std::path::Path>) -> Result<Settings, ConfigError> {
    load_settings_with(path, &crate::environment::process_env)
}

/// [`load_settings`] with the environment read through `env` (the command
/// line's `--listen` and `--database-url` stand in for their variables).
pub fn load_settings_with(
    path: Option<&std::path::Path>,
    env: crate::environment::Env<'_>,
) -> Result<Settings, ConfigError> {
    let settings = Settings::load_with(path, env)?;
    if settings.demo {
        crate::demo::ensure_secret(&settings.data_dir)
            .map_err(|message| settings.invalid("endpoints", message))?;
    }
    settings.with_demo_endpoint()
}

pub fn store_options(settings: &Settings) -> StoreOptions {
    StoreOptions {
        pool_size: settings.pool_size,
        lock_wait: settings.in_progress_wait,
        group_commit: settings.group_commit.clone(),
        postgres_group_commit: settings.postgres_group_commit.clone(),
        group_commit_metrics: GroupCommitMetrics {
            committed: telemetry::metrics::sqlite_group_committed,
            rolled_back: telemetry::metrics::sqlite_group_rolled_back,
            postgres_committed: telemetry::metrics::postgres_batch_committed,
            postgres_failed: telemetry::metrics::postgres_batch_failed,
        },
        replay_cache: ReplayCacheOptions {
            bytes: settings.replay_cache_bytes,
            ttl: settings.replay_cache_ttl,
        },
        ..StoreOptions::default()
    }
}

/// [`store_options`] for a server: a PostgreSQL lane for each HTTP worker
/// and a shared one for the background work (see
/// [`StoreOptions::worker_lanes`]), unless this process runs queue
/// workers: they do a delivery's work on the main runtime, as much as the
/// HTTP workers do, and a fixed share of the pool for them cost the
/// acknowledgements more than the lanes gave (see the README's tenth run).
pub fn server_store_options(settings: &Settings) -> StoreOptions {
    let worker_lanes = if runs_queue_workers(settings) {
        0
    } else {
        http_workers(settings)
    };
    StoreOptions {
        worker_lanes,
        shared_lane: background_connections(settings),
        ..store_options(settings)
    }
}

/// Whether `serve` drains a queued endpoint in this process.
pub fn runs_queue_workers(settings: &Settings) -> bool {
    settings.queue_workers > 0
        && settings
            .endpoints
            .iter()
            .any(|endpoint| endpoint.queue.is_some())
}

/// The most connections the server's background work holds at once
/// besides queue workers: the purge and the reconciliation, and one per
/// outbox publisher's relay. Its other tasks (the relay's wake-up helper,
/// the gauges) hold one briefly and borrow an idle one of the workers'
/// lanes when the shared lane is busy.
pub fn background_connections(settings: &Settings) -> usize {
    2 + settings.publishers.len()
}

/// How many HTTP workers `serve` runs: `workers`, or actix's default, one
/// per core.
pub fn http_workers(settings: &Settings) -> usize {
    settings.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    })
}

/// Connects and applies the pending migrations.
pub async fn open_store(settings: &Settings) -> Result<Store, StoreError> {
    open_store_with(settings, &store_options(settings)).await
}

/// [`open_store`] with the given options.
pub async fn open_store_with(
    settings: &Settings,
    options: &StoreOptions,
) -> Result<Store, StoreError> {
    let store = Store::connect(&settings.database, options)?;
    let applied = store.migrate().await?;
    if applied > 0 {
        tracing::info!(applied, "applied database migrations");
    }
    if !store.check_error_language().await? {
        tracing::warn!(
            "PostgreSQL answers in another language than English and this role may not set \
             lc_messages: lock and statement timeouts will answer 500 instead of 409 and 503. \
             As a superuser: ALTER ROLE <role> SET lc_messages = 'C' \
             (or GRANT SET ON PARAMETER lc_messages TO <role>)"
        );
    }
    store.close_idle();
    Ok(store)
}

/// The engine both faces share.
pub fn engine(settings: &Settings, store: Store) -> Engine {
    Engine::new(
        store,
        EngineOptions {
            lease: settings.lease,
            in_progress_wait: settings.in_progress_wait,
            retention: settings.retention,
            replay_count_every: settings.replay_count_interval,
        },
    )
}

/// The `Idempotency-Key` middleware as `[idempotency]` configures it.
pub fn idempotency(settings: &Settings, engine: Engine) -> Idempotency {
    let tenant = match &settings.idempotency.tenant_header {
        Some(name) => TenantSource::Header(name.clone()),
        None => TenantSource::None,
    };
    Idempotency::new(engine)
        .mismatch(settings.idempotency.mismatch)
        .tenant(tenant)
        .max_body(settings.idempotency.max_body_bytes)
}

/// What the admin listing's endpoint filter offers: every configured
/// endpoint, and `POST /payments`'s client-key scope (a tenant's scope is
/// `tenant:<t> POST /payments`, one per tenant, so none is offered then).
fn listing_endpoints(settings: &Settings, webhooks: &Webhooks) -> Vec<String> {
    let mut names: Vec<String> = webhooks.endpoints().map(|e| e.name.clone()).collect();
    names.sort();
    if settings.idempotency.tenant_header.is_none() {
        names.push("POST /payments".to_owned());
    }
    names
}

/// More routes for the app (tests, embedders).
pub type ExtraRoutes = Arc<dyn Fn(&mut web::ServiceConfig) + Send + Sync>;

/// The webhook face for the configured endpoints, with handlers looked up by
/// name in `registry`.
pub fn webhooks(
    settings: &Settings,
    store: Store,
    registry: &Registry,
) -> Result<Webhooks, ConfigError> {
    let registry = registry
        .clone()
        .with_forwarders(&settings.forwarders)
        .with_publishers(&settings.publishers, store.clock());
    let engine = engine(settings, store);
    let registry = &registry;
    let mut endpoints = Vec::new();
    for endpoint in &settings.endpoints {
        let mut handlers = Vec::new();
        for name in &endpoint.handlers {
            let handler = registry.get(name).ok_or_else(|| {
                settings.invalid(
                    &format!("endpoints.{}.handlers", endpoint.name),
                    format!(
                        "unknown handler {name:?} (known: {})",
                        registry.names().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            handlers.push((name.clone(), handler));
        }
        endpoints.push(Endpoint {
            name: endpoint.name.clone(),
            provider: endpoint.provider.clone(),
            handlers,
            max_body: endpoint.max_body_bytes,
            retention: endpoint.retention,
            queue: endpoint.queue.clone(),
        });
    }
    Ok(Webhooks::new(engine, endpoints))
}

/// A bound, not yet running server.
pub struct Application {
    port: u16,
    server: Server,
    store: Store,
    purge: Option<PurgeTask>,
    reconcile: Option<ReconcileTask>,
    /// The queue workers' settings, started with the server.
    queue: (Webhooks, usize, Duration),
    /// The outbox relay's publishers and settings, started with the server.
    relay: (Vec<PublisherSettings>, RelaySettings),
    /// The admin surface's own server, when `admin_listen` is set.
    admin: Option<(Server, u16)>,
    /// How often the dashboard's traffic counters are flushed.
    traffic_flush: Duration,
}

impl Application {
    /// Opens the store, migrates it, and binds `settings.listen` (port 0 picks
    /// a free port; see [`Application::port`]).
    pub async fn build(
        settings: &Settings,
        registry: &Registry,
    ) -> Result<Application, StartupError> {
        let store = open_store_with(settings, &server_store_options(settings)).await?;
        Application::build_with_store(settings, registry, store)
    }

    pub fn build_with_store(
        settings: &Settings,
        registry: &Registry,
        store: Store,
    ) -> Result<Application, StartupError> {
        let webhooks = webhooks(settings, store.clone(), registry)?;
        Application::serve(settings, webhooks, store)
    }

    /// Binds the listener and wires an already built webhook face.
    pub fn serve(
        settings: &Settings,
        webhooks: Webhooks,
        store: Store,
    ) -> Result<Application, StartupError> {
        Application::serve_with(settings, webhooks, store, Arc::new(|_| {}))
    }

    /// [`Application::serve`] with `extra` routes mounted beside the built-in
    /// ones.
    pub fn serve_with(
        settings: &Settings,
        webhooks: Webhooks,
        store: Store,
        extra: ExtraRoutes,
    ) -> Result<Application, StartupError> {
        let listen_error = |source| StartupError::Listen {
            address: settings.listen.clone(),
            source,
        };
        let listener = TcpListener::bind(&settings.listen).map_err(listen_error)?;
        let port = listener.local_addr().map_err(listen_error)?.port();
        let republisher = Republisher::new(webhooks.clone(), &settings.publishers);
        let admin = Admin::new(store.clone(), &settings.admin, republisher).map(|admin| {
            admin
                .waking(webhooks.queue_wake().clone())
                .listing_endpoints(listing_endpoints(settings, &webhooks))
        });
        // `admin_listen` is bound before anything starts, so that a busy
        // address stops start-up with nothing left running.
        let (admin_here, admin_apart) = match (&settings.admin.listen, admin) {
            (Some(address), Some(admin)) => (None, Some((admin, bind(address)?))),
            (_, admin) => (admin, None),
        };
        let reconcile = ReconcileTask::new(webhooks.clone(), settings.reconcile_interval);
        let queue = (
            webhooks.clone(),
            settings.queue_workers,
            settings.queue_poll,
        );
        let relay = (settings.publishers.clone(), settings.relay.clone());
        let health_store = store.clone();
        let idempotency = idempotency(settings, webhooks.engine().clone());
        let metrics_handle = telemetry::metrics::install();
        let payments_body = settings.idempotency.max_body_bytes;
        let metrics_settings = settings.metrics.clone();
        let server = HttpServer::new(move || {
            // Runs once on each worker's thread, as the worker starts.
            if let Some(lane) = health_store.join_worker_lane() {
                tracing::debug!(lane, "HTTP worker takes its connections from its own lane");
            }
            App::new()
                // The framework's own errors (extractors, 404, 405) as
                // problem+json, like every other refusal.
                .wrap(problem::framework_errors())
                // Outermost: every answer, a 404 or an inner middleware's
                // error included, carries the request id.
                .wrap(RequestIds)
                .configure(telemetry::metrics::configure_with(
                    health_store.clone(),
                    metrics_handle.clone(),
                    metrics_settings.clone(),
                ))
                .configure(|cfg| webhooks.configure(cfg))
                .configure(|cfg| {
                    if let Some(admin) = &admin_here {
                        admin.configure(cfg);
                    }
                })
                .configure(payments::configure(
                    health_store.clone(),
                    idempotency.clone(),
                    payments_body,
                ))
                .configure(health::configure(health_store.clone()))
                .configure(|cfg| extra(cfg))
        })
        // SIGTERM/SIGINT: stop accepting, let in-flight requests finish for
        // up to the grace period, then exit. A claim still open then rolls
        // back with its connection; a committed lease simply expires and is
        // reconciled.
        .shutdown_timeout(settings.shutdown_grace.as_secs())
        .client_request_timeout(Duration::from_secs(10))
        // SQLite's calls run on the blocking pool, at most one per pooled
        // connection. actix's default (512 threads) lets a burst start
        // hundreds of threads, each with its own malloc arena: memory that
        // stays taken long after the burst.
        .worker_max_blocking_threads(settings.pool_size + 4)
        // The same figure the store's lanes were counted from: a lane for
        // every worker.
        .workers(http_workers(settings));
        let server = server.listen(listener).map_err(listen_error)?.run();
        for endpoint in &settings.endpoints {
            tracing::info!(
                endpoint = %endpoint.name,
                provider = endpoint.provider.name(),
                url = %format!("http://{}:{port}/webhooks/{}", host_of(&settings.listen), endpoint.name),
                retention = %format_duration(settings.retention_of(endpoint)),
                retry_window = %endpoint.provider.retry_window().describe(),
                "endpoint ready"
            );
        }
        for short in short_retentions(&settings.endpoints, &settings.retention_policy()) {
            tracing::warn!(
                endpoint = %short.endpoint,
                retention = %format_duration(short.retention),
                retry_window = %format_duration(short.window),
                "{short}"
            );
        }
        let purge = PurgeTask::new(store.clone(), settings.retention_policy(), &settings.purge);
        match &purge {
            Some(task) => tracing::info!(
                every = %format_duration(task.interval()),
                batch = settings.purge.batch,
                "expired keys are purged in the background"
            ),
            None => tracing::info!("the background purge is off (purge_interval = \"0\")"),
        }
        let admin = match admin_apart {
            Some((admin, (listener, address))) => {
                Some(admin_server(settings, admin, listener, address)?)
            }
            None => None,
        };
        log_admin(settings, port, admin.as_ref().map(|(_, port)| *port));
        tracing::info!(database = %settings.database.redacted(), port, "listening");
        Ok(Application {
            port,
            server,
            store,
            purge,
            reconcile,
            queue,
            relay,
            admin,
            traffic_flush: settings.traffic_flush_interval,
        })
    }

    /// The admin surface's own port, when `admin_listen` is set.
    pub fn admin_port(&self) -> Option<u16> {
        self.admin.as_ref().map(|(_, port)| *port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Serves until the server stops, running the background purge and the
    /// reconciler beside it (see [`PurgeTask`], [`ReconcileTask`]); both
    /// stop with the server.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        // First the one that can fail to start, so that nothing is left
        // running when it does.
        let reconciler = self.reconcile.map(ReconcileTask::spawn).transpose()?;
        let (webhooks, count, poll) = self.queue;
        let (publishers, relay_settings) = self.relay;
        let relay = Relay::spawn(
            self.store.clone(),
            &publishers,
            relay_settings,
            webhooks.outbox_signal().clone(),
        );
        let notifier = spawn_notifier(webhooks.clone());
        let traffic = webhooks
            .traffic()
            .spawn_flusher(self.store.clone(), self.traffic_flush);
        let workers = QueueWorkers::spawn(webhooks, count, poll)?;
        let purge = self.purge.map(PurgeTask::spawn);
        // The admin server lives as long as the main one, and no longer.
        let admin = self.admin.map(|(server, _)| {
            let handle = server.handle();
            (tokio::spawn(server), handle)
        });
        let stopped = self.server.await;
        if let Some(purge) = purge {
            purge.abort();
        }
        if let Some(reconciler) = reconciler {
            reconciler.stop().await;
        }
        if let Some(workers) = workers {
            workers.stop().await;
        }
        // After the workers: their last jobs may have written publications.
        if let Some(relay) = relay {
            relay.stop().await;
        }
        if let Some(notifier) = notifier {
            notifier.abort();
        }
        // Last: what the final requests and jobs counted is written too.
        traffic.stop().await;
        if let Some((task, handle)) = admin {
            handle.stop(true).await;
            let _ = task.await;
        }
        stopped
    }
}

/// Binds `address`, keeping it for messages.
fn bind(address: &str) -> Result<(TcpListener, String), StartupError> {
    TcpListener::bind(address)
        .map(|listener| (listener, address.to_owned()))
        .map_err(|source| StartupError::Listen {
            address: address.to_owned(),
            source,
        })
}

/// The admin surface alone on `admin_listen`, so that it can be kept off
/// the address the providers reach.
fn admin_server(
    settings: &Settings,
    admin: Admin,
    listener: TcpListener,
    address: String,
) -> Result<(Server, u16), StartupError> {
    let listen_error = |source| StartupError::Listen {
        address: address.clone(),
        source,
    };
    let port = listener.local_addr().map_err(listen_error)?.port();
    let server = HttpServer::new(move || App::new().configure(|cfg| admin.configure(cfg)))
        .workers(1)
        .shutdown_timeout(settings.shutdown_grace.as_secs())
        .client_request_timeout(Duration::from_secs(10))
        .listen(listener)
        .map_err(listen_error)?
        .run();
    Ok((server, port))
}

/// Says at start-up where the admin surface is, or that it is off. Never
/// the tokens: only how many there are.
fn log_admin(settings: &Settings, port: u16, admin_port: Option<u16>) {
    if !settings.admin.enabled() {
        tracing::info!(
            "the admin surface is off: no admin token is configured (admin_tokens, IR_ADMIN_TOKENS)"
        );
        return;
    }
    let url = match (admin_port, &settings.admin.listen) {
        (Some(admin_port), Some(listen)) => {
            format!("http://{}:{admin_port}/admin", host_of(listen))
        }
        _ => format!("http://{}:{port}/admin", host_of(&settings.listen)),
    };
    tracing::info!(%url, tokens = settings.admin.tokens.len(), "admin surface ready");
}

fn host_of(listen: &str) -> &str {
    listen
        .rsplit_once(':')
        .map(|(host, _)| host)
        .unwrap_or(listen)
}

#[cfg(test)]
mod tests {
    use super::store_options;
    use crate::config::Settings;

    /// Both backends' group commit settings reach the store.
    #[test]
    fn the_store_gets_both_group_commit_settings() {
        let settings = Settings::parse(
            "postgres_group_commit_max = 8\nsqlite_group_commit = false",
            "receiver.toml",
            &|_| None,
        )
        .expect("valid settings");
        let options = store_options(&settings);
        assert_eq!(
            options.postgres_group_commit,
            settings.postgres_group_commit
        );
        assert_eq!(options.postgres_group_commit.max_members, 8);
        assert!(options.postgres_group_commit.enabled);
        assert!(!options.group_commit.enabled);
    }
}
