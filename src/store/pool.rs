use super::claim_batcher::{ClaimBatcher, PgGroupCommitOptions};
use super::group_commit::{GroupCommitMetrics, GroupCommitOptions, WriteGate};
use super::lanes::{self, Lanes};
use super::statement_ledger;
use super::writer_thread::WriterThread;
use super::{
    DbConn, PgConn, Pools, ReplayCache, ReplayCacheOptions, Shared, SqliteConn, Store, StoreError,
};
use crate::clock::SharedClock;
use deadpool::managed::QueueMode;
use diesel::ConnectionError;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use futures_util::FutureExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A parsed `database_url`: `sqlite://path/to/file.db` (relative or, with a
/// third slash, absolute) or `postgres://...` / `postgresql://...`.
///
/// Its `Debug` is [`DatabaseUrl::redacted`]: a URL may carry a password,
/// and anything that prints settings must not print it.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(PathBuf),
    Postgres(String),
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<Self, String> {
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(
                    "a sqlite URL needs a file path, e.g. sqlite://data/receiver.db".into(),
                );
            }
            Ok(DatabaseUrl::Sqlite(PathBuf::from(path)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(DatabaseUrl::Postgres(url.to_owned()))
        } else {
            Err("expected sqlite://PATH or postgres://USER@HOST/DB".into())
        }
    }

    /// The URL with any password masked, for logs.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
            DatabaseUrl::Postgres(url) => crate::secret::redact_url(url),
        }
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseUrl::Sqlite(_) => write!(f, "Sqlite({:?})", self.redacted()),
            DatabaseUrl::Postgres(_) => write!(f, "Postgres({:?})", self.redacted()),
        }
    }
}

/// Pool and timeout settings of a [`Store`].
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// The most connections the store opens, all lanes together.
    pub pool_size: usize,
    /// How many HTTP workers take their PostgreSQL connections from a lane
    /// of their own (see [`Store::join_worker_lane`]); 0, the default,
    /// keeps one pool for every thread. `pool_size` is split between these
    /// lanes and a shared one, each lane getting at least two connections;
    /// a smaller pool stays one. SQLite ignores it: its statements run on
    /// the blocking pool or inline, wherever its connections were opened.
    pub worker_lanes: usize,
    /// With `worker_lanes`: the connections the shared lane keeps for the
    /// threads that are no worker (at least two); the workers split the
    /// rest.
    pub shared_lane: usize,
    /// How long a request waits for a free connection before it gets 503.
    pub acquire_timeout: Duration,
    /// How long a claim waits on a row that a concurrent transaction holds
    /// (PostgreSQL `lock_timeout`) before the request answers 409.
    pub lock_wait: Duration,
    /// How long a SQLite writer waits for the single write lock.
    pub busy_timeout: Duration,
    /// The longest any PostgreSQL statement may run.
    pub statement_timeout: Duration,
    /// The in-process cache of completed keys.
    pub replay_cache: ReplayCacheOptions,
    /// How SQLite's writers share their commits (ignored on PostgreSQL)...
    pub group_commit: GroupCommitOptions,
    /// ...how PostgreSQL's fresh deliveries share their statements (ignored
    /// on SQLite)...
    pub postgres_group_commit: PgGroupCommitOptions,
    /// ...and where both are reported.
    pub group_commit_metrics: GroupCommitMetrics,
    /// Where the store, and the engine above it, read "now".
    pub clock: SharedClock,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            pool_size: 16,
            worker_lanes: 0,
            shared_lane: 2,
            acquire_timeout: Duration::from_secs(5),
            lock_wait: Duration::from_secs(5),
            busy_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            replay_cache: ReplayCacheOptions::default(),
            group_commit: GroupCommitOptions::default(),
            postgres_group_commit: PgGroupCommitOptions::default(),
            group_commit_metrics: GroupCommitMetrics::default(),
            clock: crate::clock::system(),
        }
    }
}

impl Store {
    /// Builds the pool. No connection is opened yet: an unreachable database
    /// shows up as [`StoreError::Unavailable`] on first use, and the pool
    /// recovers by itself once the database is back.
    pub fn connect(url: &DatabaseUrl, options: &StoreOptions) -> Result<Store, StoreError> {
        let pools = match url {
            DatabaseUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
                    })?;
                }
                switch_to_wal(path, options.busy_timeout)?;
                let pragmas = sqlite_pragmas(options.busy_timeout);
                let mut config = ManagerConfig::<SqliteConn>::default();
                config.recycling_method = RecyclingMethod::Fast;
                config.custom_setup = Box::new(move |path| {
                    let pragmas = pragmas.clone();
                    let path = path.to_owned();
                    async move {
                        let mut conn = SqliteConn::establish(&path).await?;
                        conn.batch_execute(&pragmas)
                            .await
                            .map_err(ConnectionError::CouldntSetupConfiguration)?;
                        Ok(conn)
                    }
                    .boxed()
                });
                let manager =
                    AsyncDieselConnectionManager::new_with_config(path.to_string_lossy(), config);
                Pools::Sqlite(build_pool(
                    manager,
                    options.pool_size,
                    options,
                    QueueMode::Lifo,
                )?)
            }
            DatabaseUrl::Postgres(url) => {
                // Every wait on the database is bounded, so that a request
                // never hangs past its budget: a claim waits `lock_wait` on a
                // concurrent duplicate, and no statement runs longer than
                // `statement_timeout`.
                let setup = format!(
                    "SET lock_timeout = '{}ms'; SET statement_timeout = '{}ms'; {ENGLISH_ERRORS}",
                    options.lock_wait.as_millis().max(1),
                    options.statement_timeout.as_millis().max(1)
                );
                // One manager per lane: a manager is not `Clone`, and each
                // lane's pool owns its own.
                let manager = || {
                    let setup = setup.clone();
                    let mut config = ManagerConfig::<PgConn>::default();
                    // No `SELECT 1` per checkout: a connection whose socket
                    // the server closed is already marked broken and is
                    // replaced; one that breaks after the checkout fails
                    // that request with a transient error (503), as it
                    // would have anyway.
                    config.recycling_method = RecyclingMethod::Fast;
                    config.custom_setup = Box::new(move |url| {
                        let setup = setup.clone();
                        let url = url.to_owned();
                        async move {
                            let mut conn = PgConn::establish(&url).await?;
                            statement_ledger::install(&mut conn);
                            conn.batch_execute(&setup)
                                .await
                                .map_err(ConnectionError::CouldntSetupConfiguration)?;
                            Ok(conn)
                        }
                        .boxed()
                    });
                    AsyncDieselConnectionManager::new_with_config(url.clone(), config)
                };
                let sizes =
                    lanes::lane_sizes(options.pool_size, options.worker_lanes, options.shared_lane);
                Pools::Pg(Arc::new(Lanes::new(&sizes, |size| {
                    build_pool(manager(), size, options, QueueMode::Fifo)
                })?))
            }
        };
        let write_gate = matches!(pools, Pools::Sqlite(_)).then(|| {
            Arc::new(WriteGate::new(
                options.acquire_timeout,
                options.busy_timeout,
                options.group_commit.clone(),
                options.group_commit_metrics,
            ))
        });
        let claim_batcher =
            (matches!(pools, Pools::Pg(_)) && options.postgres_group_commit.enabled).then(|| {
                ClaimBatcher::new(
                    &options.postgres_group_commit,
                    options.group_commit_metrics.postgres_committed,
                    options.group_commit_metrics.postgres_failed,
                )
            });
        Ok(Store {
            pools,
            shared: Arc::new(Shared {
                url: url.clone(),
                replays: ReplayCache::new(&options.replay_cache, options.clock.clone()),
                clock: options.clock.clone(),
                ledger_ids: Default::default(),
                claim_batcher,
                // The same cap on blocking threads as the HTTP workers'
                // (`startup`): one per pooled connection, and a few more.
                writer: write_gate
                    .as_ref()
                    .map(|_| WriterThread::new(options.pool_size + 4)),
                write_gate,
            }),
        })
    }

    pub fn url(&self) -> &DatabaseUrl {
        &self.shared.url
    }
}

/// Error messages in English for this session, where the role may set
/// `lc_messages` (a superuser, or one granted `SET` on it): timeouts are told
/// apart by their message (see `StoreError`), and the server's language
/// would otherwise decide. A role that may not keeps the server's language;
/// [`Store::check_error_language`] says so at start-up.
const ENGLISH_ERRORS: &str = "DO $$ BEGIN SET lc_messages TO 'C'; \
     EXCEPTION WHEN insufficient_privilege THEN NULL; END $$";

/// Provokes a statement timeout, in an implicit transaction that ends with it.
const STATEMENT_TIMEOUT_PROBE: &str = "SET LOCAL statement_timeout = '1ms'; SELECT pg_sleep(1)";

impl Store {
    /// Whether PostgreSQL's timeouts are recognised on this store's
    /// connections: provokes a real statement timeout and classifies it.
    /// `false` means the server answers in another language and the role may
    /// not change it; lock and statement timeouts then answer 500 instead of
    /// 409/503. Always `true` on SQLite, whose messages are not translated.
    pub async fn check_error_language(&self) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let DbConn::Pg(conn) = &mut conn else {
            return Ok(true);
        };
        match conn.batch_execute(STATEMENT_TIMEOUT_PROBE).await {
            Err(error) => match StoreError::from(error) {
                StoreError::StatementTimeout => Ok(true),
                StoreError::Unavailable(reason) => Err(StoreError::Unavailable(reason)),
                _ => Ok(false),
            },
            // Only a server that ignores statement_timeout gets here.
            Ok(()) => Ok(false),
        }
    }
}

/// Puts the file in WAL mode (persistent) on one connection, before the
/// pool opens any. Every pooled connection asks for WAL too, but a file still
/// in rollback-journal mode (made by `VACUUM INTO`, a backup tool or the
/// `sqlite3` shell) opened by several connections at once is switched by the
/// one that gets the exclusive lock first, and SQLite answers the others
/// `database is locked` at once, without its busy handler: the first
/// requests of a server would fail with 503. Opening a local file is quick,
/// so this runs here, at start-up, blocking.
fn switch_to_wal(path: &std::path::Path, busy_timeout: Duration) -> Result<(), StoreError> {
    use diesel::Connection;
    use diesel::connection::SimpleConnection;
    let unavailable = |e: &dyn std::fmt::Display| {
        StoreError::Unavailable(format!("cannot open {}: {e}", path.display()))
    };
    let mut conn = diesel::SqliteConnection::establish(&path.to_string_lossy())
        .map_err(|e| unavailable(&e))?;
    conn.batch_execute(&sqlite_pragmas(busy_timeout))
        .map_err(|e| unavailable(&e))
}

/// WAL lets readers (replays, admin) run beside the one writer. `synchronous =
/// FULL` fsyncs the WAL on every commit: with NORMAL a power cut can lose the
/// last commits, and a delivery we already answered 200 for would be lost for
/// good, because the provider will not send it again. That costs throughput,
/// which is PostgreSQL's job to provide.
///
/// The savepoint journal stays in memory without `temp_store = MEMORY`.
/// Every member of a commit group writes inside a savepoint, and SQLite
/// keeps the first image of each page a savepoint changes in a
/// sub-journal. In a temporary file (`temp_store = FILE`, set below), that
/// journal is a memory buffer until it passes `SQLITE_STMTJRNL_SPILL`,
/// 1 MiB in this build (`.cargo/config.toml`; SQLite's default, 64 KiB,
/// was passed by ordinary members), and is emptied at each member's
/// release; once spilled it would stay a file, written with a `pwrite(2)`
/// per page, until the group ends. `temp_store = MEMORY` kept it in memory
/// too, but in 1 KiB pieces, each a `malloc` and a `free`: a tenth of the
/// writer's instructions per delivery (callgrind).
fn sqlite_pragmas(busy_timeout: Duration) -> String {
    format!(
        "{}; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA temp_store = FILE;",
        busy_timeout_pragma(busy_timeout)
    )
}

/// How long SQLite's busy handler waits for another connection's lock
/// (`ZERO`: it answers `database is locked` at once).
pub(super) fn busy_timeout_pragma(busy_timeout: Duration) -> String {
    format!("PRAGMA busy_timeout = {}", busy_timeout.as_millis())
}

/// SQLite's pool hands out the connection returned last (`Lifo`). In WAL
/// mode a connection keeps its page cache only as long as no other
/// connection has written since its own last transaction: handed out in
/// turn (`Fifo`, deadpool's default), each commit group's connection was
/// the one that had waited longest, its cache emptied by the commits of the
/// others, and the group read its index pages from the file again (about 27
/// `pread(2)` per COMMIT, counted with `strace -c` during `fresh`; 4 with
/// `Lifo`). The same connection now serves group after group, its cache
/// warm; reads between groups get a recently used one too. PostgreSQL
/// keeps `Fifo`: its connections hold no cache that a commit empties.
fn build_pool<C>(
    manager: AsyncDieselConnectionManager<C>,
    max_size: usize,
    options: &StoreOptions,
    queue_mode: QueueMode,
) -> Result<Pool<C>, StoreError>
where
    C: diesel_async::pooled_connection::PoolableConnection + Send + 'static,
    AsyncDieselConnectionManager<C>:
        deadpool::managed::Manager<Type = C, Error = diesel_async::pooled_connection::PoolError>,
{
    Pool::builder(manager)
        .max_size(max_size.max(1))
        .wait_timeout(Some(options.acquire_timeout))
        .create_timeout(Some(options.acquire_timeout))
        .recycle_timeout(Some(options.acquire_timeout))
        .runtime(deadpool::Runtime::Tokio1)
        .queue_mode(queue_mode)
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_and_postgres_urls_are_told_apart() {
        assert_eq!(
            DatabaseUrl::parse("sqlite://data/receiver.db"),
            Ok(DatabaseUrl::Sqlite("data/receiver.db".into()))
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:///var/lib/ir.db"),
            Ok(DatabaseUrl::Sqlite("/var/lib/ir.db".into()))
        );
        assert!(matches!(
            DatabaseUrl::parse("postgresql://u@h/db"),
            Ok(DatabaseUrl::Postgres(_))
        ));
        assert!(DatabaseUrl::parse("mysql://h/db").is_err());
        assert!(DatabaseUrl::parse("sqlite://").is_err());
    }

    #[test]
    fn a_password_in_a_postgres_url_is_masked() {
        let url = DatabaseUrl::parse("postgres://app:hunter2@db:5432/ir").unwrap();
        assert_eq!(url.redacted(), "postgres://app:***@db:5432/ir");
        let url = DatabaseUrl::parse("postgres://app@db/ir").unwrap();
        assert_eq!(url.redacted(), "postgres://app@db/ir");
    }

    #[test]
    fn debug_shows_a_postgres_url_without_its_password() {
        let url = DatabaseUrl::parse("postgres://app:hunter2@db/ir?password=hunter2").unwrap();
        let debug = format!("{url:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("app:***@db"), "{debug}");
    }

    /// Pooled connections keep their savepoint journals in memory: a
    /// journal in a temporary file (`temp_store = FILE`) is a memory buffer
    /// up to the build's `STMTJRNL_SPILL`, which `.cargo/config.toml` sets
    /// to 1 MiB, beside `DEFAULT_MEMSTATUS=0`, `THREADSAFE=2` and no
    /// `ENABLE_MEMORY_MANAGEMENT`. Without those flags the bundled SQLite
    /// still works, slower; this says they were lost.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pooled_connections_journal_savepoints_in_one_megabyte_of_memory() {
        #[derive(diesel::QueryableByName)]
        struct TempStore {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            temp_store: i32,
        }
        #[derive(diesel::QueryableByName)]
        struct CompileOption {
            #[diesel(sql_type = diesel::sql_types::Text)]
            compile_options: String,
        }
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::Sqlite(dir.path().join("temp.db"));
        let options = StoreOptions {
            pool_size: 1,
            ..StoreOptions::default()
        };
        let store = Store::connect(&url, &options).unwrap();
        store.migrate().await.unwrap();
        let mut conn = store.conn().await.unwrap();
        let temp_store: Vec<TempStore> = crate::with_conn!(&mut conn, |c| {
            diesel_async::RunQueryDsl::load(diesel::sql_query("PRAGMA temp_store"), c).await
        })
        .unwrap();
        let compiled: Vec<CompileOption> = crate::with_conn!(&mut conn, |c| {
            diesel_async::RunQueryDsl::load(diesel::sql_query("PRAGMA compile_options"), c).await
        })
        .unwrap();
        assert_eq!(temp_store.len(), 1);
        assert_eq!(temp_store[0].temp_store, 1, "FILE");
        let compiled: Vec<&str> = compiled
            .iter()
            .map(|o| o.compile_options.as_str())
            .collect();
        for flag in [
            "STMTJRNL_SPILL=1048576",
            "DEFAULT_MEMSTATUS=0",
            "THREADSAFE=2",
        ] {
            assert!(compiled.contains(&flag), "{flag} not in {compiled:?}");
        }
        assert!(
            !compiled.contains(&"ENABLE_MEMORY_MANAGEMENT"),
            "ENABLE_MEMORY_MANAGEMENT in {compiled:?}"
        );
    }

    /// SQLite's pool hands out the connection that came back last, so that
    /// one connection, its page cache warm, serves commit group after
    /// commit group. A temporary table, which only its own connection sees,
    /// marks which connection a checkout got.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_hands_out_the_connection_returned_last() {
        let dir = tempfile::tempdir().unwrap();
        let url = DatabaseUrl::Sqlite(dir.path().join("lifo.db"));
        let store = Store::connect(&url, &StoreOptions::default()).unwrap();
        let mut first = store.conn().await.unwrap();
        let mut second = store.conn().await.unwrap();
        for (conn, name) in [(&mut first, "first"), (&mut second, "second")] {
            crate::with_conn!(conn, |c| c
                .batch_execute(&format!("CREATE TEMP TABLE marker_{name} (x INTEGER)"))
                .await)
            .unwrap();
        }
        drop(first);
        drop(second);
        let mut next = store.conn().await.unwrap();
        let second_marked = crate::with_conn!(&mut next, |c| c
            .batch_execute("SELECT x FROM marker_second")
            .await);
        let first_marked = crate::with_conn!(&mut next, |c| c
            .batch_execute("SELECT x FROM marker_first")
            .await);
        assert!(second_marked.is_ok(), "the connection returned last");
        assert!(first_marked.is_err(), "not the one that waited longest");
    }

    /// A file in rollback-journal mode (what `VACUUM INTO` writes) is in WAL
    /// mode once the store is built, before any pooled connection opens:
    /// several first connections racing to switch it would fail with
    /// `database is locked`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rollback_journal_file_is_switched_to_wal_before_the_pool_opens() {
        use diesel::Connection;
        use diesel::connection::SimpleConnection;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollback.db");
        let mut setup = diesel::SqliteConnection::establish(&path.to_string_lossy()).unwrap();
        setup
            .batch_execute("PRAGMA journal_mode = DELETE; CREATE TABLE t (x INTEGER);")
            .unwrap();
        drop(setup);
        let journal_mode = || std::fs::read(&path).unwrap()[18];
        assert_eq!(journal_mode(), 1, "rollback journal before");
        let store =
            Store::connect(&DatabaseUrl::Sqlite(path.clone()), &StoreOptions::default()).unwrap();
        assert_eq!(journal_mode(), 2, "WAL once the store is built");
        let opened = futures_util::future::join_all((0..8).map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut conn = store.conn().await?;
                crate::with_conn!(&mut conn, |c| c
                    .batch_execute("INSERT INTO t VALUES (1)")
                    .await)?;
                Ok::<(), StoreError>(())
            })
        }))
        .await;
        for result in opened {
            result.unwrap().unwrap();
        }
    }
}
