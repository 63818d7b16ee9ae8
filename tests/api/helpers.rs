//! `TestApp`: a running receiver on a random port over a fresh database of
//! either backend, with a manual clock, request helpers, and a teardown in
//! `Drop` that checks invariants.

use crate::test_schema;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use idempotent_receiver::clock::{Clock, ManualClock};
use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::{Handler, Registry};
use idempotent_receiver::providers::Provider;
use idempotent_receiver::startup::{self, Application};
use idempotent_receiver::store::schema::deliveries;
use idempotent_receiver::store::{DatabaseUrl, DeliveryRow, Store, StoreOptions};
use idempotent_receiver::with_conn;
use std::io::Write;
use std::sync::{Arc, Once};
use std::time::Duration;

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const OTHER_SECRET: &str = "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg=";
pub const ENDPOINT: &str = "shop";
/// Admin tokens for tests that turn the admin surface on (two: rotation).
pub const ADMIN_TOKEN: &str = "tok_admin_0123456789abcdef";
pub const ADMIN_TOKEN_NEXT: &str = "tok_admin_next_fedcba9876543210";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs the same async test body on SQLite and on PostgreSQL, as two tests
/// named `<name>::sqlite` and `<name>::postgres`.
#[macro_export]
macro_rules! both_backends {
    ($(#[$meta:meta])* async fn $name:ident($app:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            async fn body($app: &$crate::helpers::TestApp) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Sqlite).await;
                body(&app).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(app) = $crate::helpers::TestApp::spawn_if_available($crate::helpers::Backend::Postgres).await else {
                    return;
                };
                body(&app).await;
            }
        }
    };
}

/// [`both_backends!`] with the app built by `$builder` (a function from
/// [`TestAppBuilder`] to [`TestAppBuilder`]).
#[macro_export]
macro_rules! both_backends_with {
    ($builder:path; $(#[$meta:meta])* async fn $name:ident($app:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            async fn body($app: &$crate::helpers::TestApp) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let builder = $crate::helpers::TestApp::builder($crate::helpers::Backend::Sqlite);
                let app = $builder(builder).spawn().await;
                body(&app).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let builder = $crate::helpers::TestApp::builder($crate::helpers::Backend::Postgres);
                let Some(app) = $builder(builder).spawn_if_available().await else {
                    return;
                };
                body(&app).await;
            }
        }
    };
}

/// `$name::sqlite` and `$name::postgres`, each running `$body(backend)`:
/// these tests build their app themselves, to share state with a handler.
#[macro_export]
macro_rules! on_both_backends {
    ($name:ident, $body:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$body($crate::helpers::Backend::Sqlite).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$body($crate::helpers::Backend::Postgres).await;
            }
        }
    };
}

/// Says once per test binary, past libtest's output capture, that the
/// PostgreSQL half was skipped.
fn say_skipped(reason: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "PostgreSQL tests SKIPPED: no server at {} ({reason}); set TEST_DATABASE_URL, or IR_REQUIRE_POSTGRES=1 to fail instead",
            test_schema::database_url()
        );
    });
}

/// A database of its own for one test: a SQLite file in a temporary folder,
/// or a fresh schema in the PostgreSQL test database; both copied from the
/// migrated template (see `test_schema`).
enum Isolation {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres {
        schema: String,
    },
    /// A database the test brought (`database_url`): neither checked nor
    /// dropped.
    Given,
}

pub struct TestApp {
    pub address: String,
    /// Where `/admin` is served: `address`, or its own with `admin_listen`.
    pub admin_address: String,
    pub registry: Registry,
    pub store: Store,
    /// The settings the app runs with (endpoints, retentions, purge).
    pub settings: Settings,
    /// The app's own database (a SQLite file, or a PostgreSQL URL whose
    /// `search_path` is the test's schema), for the binary to use too.
    pub database_url: String,
    pub client: reqwest::Client,
    pub provider: Arc<dyn Provider>,
    /// The app's clock: it stands still until the test advances it, and
    /// every lease, retention, TTL and stored timestamp follows it.
    pub clock: ManualClock,
    /// The app's endpoints and engine, for driving its queue by hand.
    pub webhooks: idempotent_receiver::webhooks::Webhooks,
    server: actix_web::dev::ServerHandle,
    /// The server with its background tasks, which end when it stops.
    running: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    isolation: Isolation,
    /// Removed with the app.
    _data_dir: tempfile::TempDir,
}

/// Builds a TestApp with extra configuration or handlers.
pub struct TestAppBuilder {
    backend: Backend,
    handlers: Vec<String>,
    registry: Registry,
    database_url: Option<String>,
    endpoints_toml: String,
    top_level: String,
    routes: Option<
        fn(&mut actix_web::web::ServiceConfig, idempotent_receiver::client_keys::Idempotency),
    >,
    verify_at: Option<i64>,
    via: Option<String>,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        TestApp::builder(backend).spawn().await
    }

    pub async fn spawn_if_available(backend: Backend) -> Option<TestApp> {
        TestApp::builder(backend).spawn_if_available().await
    }

    pub fn builder(backend: Backend) -> TestAppBuilder {
        TestAppBuilder {
            backend,
            handlers: vec!["record".into(), "payments".into()],
            registry: Registry::builtin(),
            database_url: None,
            endpoints_toml: String::new(),
            top_level: String::new(),
            routes: None,
            verify_at: None,
            via: None,
        }
    }

    pub fn url(&self) -> String {
        format!("{}/webhooks/{ENDPOINT}", self.address)
    }

    /// Posts raw `headers` and `body` to `endpoint`.
    pub async fn post_to(
        &self,
        endpoint: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/webhooks/{endpoint}", self.address))
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send().await.expect("the receiver answers")
    }

    /// Posts a signed request as its scheme sends it: its query string, its
    /// content type (a form for Twilio and Braintree), its headers.
    pub async fn post_signed(
        &self,
        endpoint: &str,
        headers: &[(String, String)],
        query: &str,
        body: Vec<u8>,
    ) -> reqwest::Response {
        let delivery = idempotent_receiver::client::SignedDelivery {
            headers: headers.to_vec(),
            body,
            query: query.to_owned(),
        };
        let url = delivery.url(&format!("{}/webhooks/{endpoint}", self.address));
        let mut request = self
            .client
            .post(url)
            .header("content-type", delivery.content_type())
            .body(delivery.body.clone());
        for (name, value) in &delivery.headers {
            if !name.eq_ignore_ascii_case("content-type") {
                request = request.header(name, value);
            }
        }
        request.send().await.expect("the receiver answers")
    }

    /// Delivers `body` as `id` to another configured endpoint (`other`).
    pub async fn deliver_to(&self, endpoint: &str, id: &str, body: &[u8]) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/webhooks/{endpoint}", self.address))
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in self.signed_headers(id, self.now(), body) {
            request = request.header(name, value);
        }
        request.send().await.expect("the receiver answers")
    }

    /// Signs `body` for `id` at `timestamp` with the endpoint's first secret.
    pub fn signed_headers(&self, id: &str, timestamp: i64, body: &[u8]) -> Vec<(String, String)> {
        self.provider
            .sign(&idempotent_receiver::providers::SignInput {
                delivery_id: id,
                timestamp,
                body,
                event_type: None,
                signing_key: None,
            })
            .expect("the test endpoint has a secret")
            .headers
    }

    pub async fn post(&self, headers: &[(String, String)], body: Vec<u8>) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url())
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send().await.expect("the receiver answers")
    }

    /// Delivers `body` as `id`, freshly signed by the app's clock.
    pub async fn deliver(&self, id: &str, body: &[u8]) -> reqwest::Response {
        self.deliver_at(id, body, self.now()).await
    }

    /// The app's clock in Unix seconds, for signatures it accepts.
    pub fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    pub async fn deliver_at(&self, id: &str, body: &[u8], timestamp: i64) -> reqwest::Response {
        let headers = self.signed_headers(id, timestamp, body);
        self.post(&headers, body.to_vec()).await
    }

    pub async fn count(&self, table: &str) -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = self.store.conn().await.expect("a connection");
        let sql = format!("SELECT COUNT(*) AS n FROM {table}");
        let row: Count = with_conn!(&mut conn, |c| diesel::sql_query(&sql).get_result(c).await)
            .expect("the count query runs");
        row.n
    }

    pub async fn ledger_rows(&self) -> i64 {
        self.count("ledger_entries").await
    }

    pub async fn delivery(&self, id: &str) -> Option<DeliveryRow> {
        let mut conn = self.store.conn().await.expect("a connection");
        conn.find_delivery(ENDPOINT, id)
            .await
            .expect("the read runs")
    }

    /// POSTs `body` to `path` with an optional `Idempotency-Key` and more headers.
    pub async fn post_json(
        &self,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &serde_json::Value,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}{path}", self.address))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("the receiver answers")
    }

    /// GETs an admin route (`/admin/...`) with `token` as a bearer token.
    pub async fn admin_get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.admin_address));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("the receiver answers")
    }

    /// GETs an admin JSON route with the first admin token, expecting 200.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        let response = self.admin_get(path, Some(ADMIN_TOKEN)).await;
        let status = response.status();
        let text = response.text().await.expect("a body");
        assert_eq!(status, 200, "GET {path}: {text}");
        serde_json::from_str(&text).expect("a JSON body")
    }

    /// Waits for the replay count of the key at `path` (an admin delivery
    /// route) to reach `expected`: it is written after the replay was
    /// answered, by the replay tally's next write.
    pub async fn wait_for_replays(&self, path: &str, expected: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let replays = self.admin_json(path).await["delivery"]["replays"].as_i64();
            if replays == Some(expected) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path}: {replays:?} replays counted, expected {expected}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Moves the `received_at` of the key `key` in `scope` into the past.
    pub async fn age_key(&self, scope: &str, key: &str, by: chrono::TimeDelta) {
        let mut conn = self.store.conn().await.expect("a connection");
        let when = self.clock.naive_now() - by;
        let updated = with_conn!(&mut conn, |c| {
            diesel::update(deliveries::table.find((scope, key)))
                .set(deliveries::received_at.eq(when))
                .execute(c)
                .await
        })
        .expect("the update runs");
        assert_eq!(updated, 1, "no key {key:?} in scope {scope:?}");
        // Time passing is simulated in the database only: the replay cache
        // (which trusts a completed row's received_at) must read it again.
        self.store.replay_cache().forget(scope, key);
    }

    /// The webhook face over this app's store and handlers, for operator
    /// actions (reconcile, reprocess) run by the test itself.
    pub fn webhooks(&self) -> idempotent_receiver::webhooks::Webhooks {
        startup::webhooks(&self.settings, self.store.clone(), &self.registry)
            .expect("the endpoints build")
    }

    /// Deletes every stored delivery, event and ledger row.
    pub async fn forget_deliveries(&self) {
        let mut conn = self.store.conn().await.expect("a connection");
        for table in ["ledger_entries", "events", "deliveries"] {
            let sql = format!("DELETE FROM {table}");
            with_conn!(&mut conn, |c| diesel::sql_query(&sql).execute(c).await)
                .expect("the delete runs");
        }
        self.store.replay_cache().clear();
    }

    /// Moves a delivery's `received_at` into the past, as if it had arrived
    /// that long ago.
    pub async fn age_delivery(&self, id: &str, by: chrono::TimeDelta) {
        self.age_key(ENDPOINT, id, by).await;
    }
}

/// What must hold after every test: no effect twice (no two ledger rows of
/// one delivery for one payment), and no key of the receiver's own left in
/// progress.
async fn check_invariants(store: &Store) -> Result<(), String> {
    #[derive(QueryableByName)]
    struct Dup {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let doubled: Vec<Dup> = with_conn!(&mut conn, |c| {
            diesel::sql_query(
                "SELECT COUNT(*) AS n FROM ledger_entries GROUP BY endpoint, delivery_id, payment_id HAVING COUNT(*) > 1",
            )
            .load(c)
            .await
        })
        .map_err(|e| format!("the invariant query fails: {e}"))?;
    if !doubled.is_empty() {
        return Err(format!(
            "a delivery had {:?} ledger effects",
            doubled.iter().map(|d| d.n).collect::<Vec<_>>()
        ));
    }
    // Claims are taken and completed in one transaction: none of the
    // receiver's own may be left in progress (tests plant `pid1-dead`).
    let stuck: i64 = with_conn!(&mut conn, |c| {
        deliveries::table
            .filter(deliveries::status.eq("in_progress"))
            .filter(deliveries::lease_owner.ne("pid1-dead/0000"))
            .count()
            .get_result(c)
            .await
    })
    .map_err(|e| format!("the invariant query fails: {e}"))?;
    if stuck != 0 {
        return Err("a key was left in progress".into());
    }
    Ok(())
}

/// Checks the invariants (unless the test already failed), stops the
/// server and its background tasks, and drops the PostgreSQL schema;
/// the SQLite file goes with its folder. A failed check is returned
/// after the cleanup, so that a failing test leaves nothing behind.
impl TestApp {
    async fn shut_down(&mut self, check: bool) -> Result<(), String> {
        let checked = if check && !matches!(self.isolation, Isolation::Given) {
            check_invariants(&self.store).await
        } else {
            Ok(())
        };
        self.server.stop(false).await;
        if let Some(running) = self.running.take() {
            let _ = running.await;
        }
        if let Isolation::Postgres { schema } = &self.isolation {
            test_schema::drop(schema).await;
        }
        checked
    }
}

impl TestApp {
    /// [`TestApp::shut_down`] for an app on a current-thread runtime, which
    /// this drop blocks: the server is told to stop and ends with that
    /// runtime, and the checks and the schema's drop run on a thread of
    /// their own, over connections of their own (the pool's may belong to
    /// the blocked runtime).
    fn shut_down_apart(&mut self, check: bool) -> Result<(), String> {
        drop(self.server.stop(false));
        let url = self.database_url.clone();
        let check = check && !matches!(self.isolation, Isolation::Given);
        let schema = match &self.isolation {
            Isolation::Postgres { schema } => Some(schema.clone()),
            _ => None,
        };
        let apart = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let checked = match check {
                    true => {
                        let url = DatabaseUrl::parse(&url)?;
                        let store = Store::connect(&url, &StoreOptions::default())
                            .map_err(|e| e.to_string())?;
                        check_invariants(&store).await
                    }
                    false => Ok(()),
                };
                if let Some(schema) = schema {
                    test_schema::drop(&schema).await;
                }
                checked
            })
        });
        apart
            .join()
            .unwrap_or_else(|_| Err("the teardown's thread panicked".into()))
    }
}

/// The teardown runs even when the test panics; its invariant checks only
/// when the test passed so far (a second panic while unwinding would abort
/// the whole test binary).
impl Drop for TestApp {
    fn drop(&mut self) {
        let check = !std::thread::panicking();
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let result = match runtime {
            Some(runtime) => {
                tokio::task::block_in_place(|| runtime.block_on(self.shut_down(check)))
            }
            None => self.shut_down_apart(check),
        };
        if let Err(broken) = result {
            panic!("{broken}");
        }
    }
}

/// `url` with its host:port replaced by `address`.
fn with_authority(url: &str, address: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}{address}{path}")
}

/// Yields until `condition` holds. The bound only turns a hang into a
/// failure; nothing is timed.
pub async fn until(what: &str, condition: impl AsyncFn() -> bool) {
    let waited = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while !condition().await {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(waited.is_ok(), "never happened: {what}");
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub fn payment(payment_id: &str, amount: i64) -> Vec<u8> {
    serde_json::json!({
        "type": "payment.succeeded",
        "data": { "id": payment_id, "order_id": "order_7", "amount": amount, "currency": "EUR" }
    })
    .to_string()
    .into_bytes()
}

impl TestAppBuilder {
    /// Runs a handler that the configuration defines (a forwarder).
    pub fn handler_name(mut self, name: &str) -> Self {
        self.handlers.push(name.to_owned());
        self
    }

    pub fn handler(mut self, name: &str, handler: impl Handler) -> Self {
        self.registry = self.registry.with(name, handler);
        self.handlers.push(name.to_owned());
        self
    }

    /// Runs `handler` under a name the endpoints' list already has (a
    /// built-in's), in its place.
    pub fn replace_handler(mut self, name: &str, handler: impl Handler) -> Self {
        self.registry = self.registry.with(name, handler);
        self
    }

    /// More `[endpoints.NAME]` tables.
    pub fn endpoints_toml(mut self, toml: &str) -> Self {
        self.endpoints_toml.push_str(toml);
        self
    }

    /// Turns the admin surface on with both test tokens.
    pub fn admin(self) -> Self {
        self.top_level(&format!(
            "admin_tokens = [\"{ADMIN_TOKEN}\", \"{ADMIN_TOKEN_NEXT}\"]"
        ))
    }

    /// Top-level settings (`retention = "1h"`), placed before every table.
    pub fn top_level(mut self, toml: &str) -> Self {
        self.top_level.push_str(toml);
        self.top_level.push('\n');
        self
    }

    /// Mounts test routes, given the configured `Idempotency` middleware.
    pub fn routes(
        mut self,
        routes: fn(
            &mut actix_web::web::ServiceConfig,
            idempotent_receiver::client_keys::Idempotency,
        ),
    ) -> Self {
        self.routes = Some(routes);
        self
    }

    /// Reaches PostgreSQL through `address` (a proxy the test controls)
    /// instead of directly; the test's schema is still made directly.
    pub fn postgres_via(mut self, address: &str) -> Self {
        self.via = Some(address.to_owned());
        self
    }

    /// Verifies signatures as if it were `unix_seconds` now; the app's own
    /// clock (leases, retention) is unchanged.
    pub fn verify_at(mut self, unix_seconds: i64) -> Self {
        self.verify_at = Some(unix_seconds);
        self
    }

    /// Points the app at another database, as it is (not migrated).
    pub fn database_url(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_owned());
        self
    }

    pub async fn spawn(self) -> TestApp {
        match self.spawn_if_available().await {
            Some(app) => app,
            None => panic!("PostgreSQL is required for this test"),
        }
    }

    pub async fn spawn_if_available(self) -> Option<TestApp> {
        let data_dir = tempfile::tempdir().expect("a temporary folder");
        let (url, isolation) = match (&self.database_url, self.backend) {
            (Some(url), _) => (url.clone(), Isolation::Given),
            (None, Backend::Sqlite) => {
                let dir = tempfile::tempdir().expect("a temporary folder");
                let file = dir.path().join("receiver.db");
                test_schema::copy_sqlite_template(&file)
                    .await
                    .expect("the migrated SQLite template");
                let url = format!("sqlite://{}", file.display());
                (url, Isolation::Sqlite(dir))
            }
            (None, Backend::Postgres) => {
                let schema = match test_schema::create_migrated("t_").await {
                    Ok(schema) => schema,
                    Err(reason) if test_schema::required() => panic!(
                        "PostgreSQL is required (IR_REQUIRE_POSTGRES) but unreachable at {}: {reason}",
                        test_schema::database_url()
                    ),
                    Err(reason) => {
                        say_skipped(&reason);
                        return None;
                    }
                };
                let base = match &self.via {
                    Some(via) => with_authority(&test_schema::database_url(), via),
                    None => test_schema::database_url(),
                };
                let url = test_schema::url(&base, &schema);
                (url, Isolation::Postgres { schema })
            }
        };
        let handlers: Vec<String> = self.handlers.iter().map(|h| format!("{h:?}")).collect();
        let config = format!(
            "listen = \"127.0.0.1:0\"\nworkers = 2\nin_progress_wait = \"500ms\"\nreplay_count_interval = \"100ms\"\n{top}[endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\", \"{OTHER_SECRET}\"]\nhandlers = [{handlers}]\n[endpoints.other]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [{handlers}]\n{extra}",
            handlers = handlers.join(", "),
            extra = self.endpoints_toml,
            top = self.top_level,
        );
        let data = data_dir.path().to_string_lossy().to_string();
        let database_url = url.clone();
        let env = move |name: &str| match name {
            "DATABASE_URL" => Some(url.clone()),
            "IR_DATA_DIR" => Some(data.clone()),
            _ => None,
        };
        let settings =
            Settings::parse(&config, "test.toml", &env).expect("the test configuration is valid");
        let clock = ManualClock::starting_now();
        let options = StoreOptions {
            clock: clock.shared(),
            ..startup::server_store_options(&settings)
        };
        let store = Store::connect(&settings.database, &options).expect("a pool");
        let mut webhooks = startup::webhooks(&settings, store.clone(), &self.registry)
            .expect("the endpoints build");
        if let Some(at) = self.verify_at {
            let at = chrono::DateTime::from_timestamp(at, 0).expect("a valid instant");
            webhooks = webhooks.with_clock(ManualClock::new(at).shared());
        }
        let idempotency = startup::idempotency(&settings, webhooks.engine().clone());
        let routes = self.routes;
        let extra: startup::ExtraRoutes = Arc::new(move |cfg| {
            if let Some(routes) = routes {
                routes(cfg, idempotency.clone());
            }
        });
        let app = Application::serve_with(&settings, webhooks.clone(), store.clone(), extra)
            .expect("the app builds");
        let port = app.port();
        let admin_port = app.admin_port().unwrap_or(port);
        let server = app.server().handle();
        let running = tokio::spawn(app.run_until_stopped());
        let provider = settings
            .endpoint(ENDPOINT)
            .expect("the test endpoint")
            .provider
            .clone();
        Some(TestApp {
            address: format!("http://127.0.0.1:{port}"),
            admin_address: format!("http://127.0.0.1:{admin_port}"),
            registry: self.registry,
            store,
            settings,
            database_url,
            client: reqwest::Client::new(),
            provider,
            clock,
            webhooks,
            server,
            running: Some(running),
            isolation,
            _data_dir: data_dir,
        })
    }
}

/// Asserts that `response` is a problem+json of `status` and `kind`, and
/// returns its body.
pub async fn problem(response: reqwest::Response, status: u16, kind: &str) -> serde_json::Value {
    assert_eq!(response.status(), status, "expected {status} {kind}");
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: serde_json::Value = response.json().await.expect("a JSON problem");
    assert_eq!(
        body["type"],
        format!("urn:idempotent-receiver:problem:{kind}")
    );
    assert_eq!(body["status"], status);
    body
}

/// A line of PostgreSQL's `EXPLAIN`.
#[derive(diesel::QueryableByName)]
pub struct PlanLine {
    #[diesel(sql_type = diesel::sql_types::Text)]
    #[diesel(column_name = "QUERY PLAN")]
    pub line: String,
}

/// A line of SQLite's `EXPLAIN QUERY PLAN`.
#[derive(diesel::QueryableByName)]
pub struct SqlitePlanLine {
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub detail: String,
}
