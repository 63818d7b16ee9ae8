//! PostgreSQL for the crash scenarios: a schema of its own on the suite's
//! shared server (as `tests/api` does), or a whole server of the test's own
//! that it can stop and start under load.

use crate::test_schema;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// What a scenario does when PostgreSQL is missing: fail under
/// `IR_REQUIRE_POSTGRES`, else say so on one line, past libtest's capture,
/// and skip.
pub fn unavailable(scenario: &str, reason: &str) {
    if test_schema::required() {
        panic!("PostgreSQL is required (IR_REQUIRE_POSTGRES) but {scenario} cannot run: {reason}");
    }
    let _ = writeln!(
        std::io::stderr(),
        "PostgreSQL crash test SKIPPED ({scenario}): {reason}; set IR_REQUIRE_POSTGRES=1 to fail instead"
    );
}

/// A schema of the test's own on the shared server, dropped at the end
/// unless the test failed (then it is kept for inspection; `.ci/run` drops
/// leftover `t_` schemas).
pub struct SharedSchema {
    pub schema: String,
    pub url: String,
}

impl SharedSchema {
    pub async fn create() -> Result<SharedSchema, String> {
        let schema = test_schema::create("t_crash_")
            .await
            .map_err(|e| format!("no server at {}: {e}", test_schema::database_url()))?;
        Ok(SharedSchema {
            url: test_schema::url(&test_schema::database_url(), &schema),
            schema,
        })
    }

    pub async fn drop_schema(&self) {
        if !test_schema::drop(&self.schema).await {
            let _ = writeln!(
                std::io::stderr(),
                "could not drop schema {} on {}",
                self.schema,
                test_schema::database_url()
            );
        }
    }
}

/// How a test-owned server is brought down before it is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopMode {
    /// `pg_ctl stop -m fast`: sessions are terminated, open transactions
    /// rolled back, a clean shutdown checkpoint.
    Fast,
    /// `pg_ctl stop -m immediate`: every backend is killed at once and the
    /// next start runs crash recovery, as after `kill -9` of the postmaster.
    Immediate,
}

impl StopMode {
    fn flag(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// A PostgreSQL server of the test's own, in a temporary directory on a
/// free port, so that restarting it disturbs no other test or developer.
/// PostgreSQL refuses to run as root: as root, its tools run as the
/// `postgres` user, which owns the directory.
pub struct OwnedServer {
    bin: PathBuf,
    path: PathBuf,
    /// `None` once a failure disarmed the cleanup.
    dir: Option<tempfile::TempDir>,
    pub port: u16,
    run_as_postgres: bool,
}

/// How long `pg_ctl` may wait for a start or a stop (`-t`), crash recovery
/// included.
const PG_CTL_WAIT_SECS: &str = "30";

impl OwnedServer {
    /// initdb + start. Errors say why this host cannot run one (no
    /// binaries, no `postgres` user...), for the skip line.
    pub fn start() -> Result<OwnedServer, String> {
        let bin = bin_dir().ok_or("no PostgreSQL binaries (initdb, pg_ctl) were found")?;
        let run_as_postgres = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("ir-crash-pg-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        if run_as_postgres {
            let chown = Command::new("chown")
                .arg("postgres:")
                .arg(dir.path())
                .output()
                .map_err(|e| format!("cannot run chown: {e}"))?;
            if !chown.status.success() {
                return Err(format!(
                    "cannot give {} to the postgres user: {}",
                    dir.path().display(),
                    String::from_utf8_lossy(&chown.stderr).trim()
                ));
            }
        }
        let port = crate::server::free_port()?;
        let server = OwnedServer {
            bin,
            path: dir.path().to_path_buf(),
            dir: Some(dir),
            port,
            run_as_postgres,
        };
        // A superuser named `root`, trusted on the loopback only, like the
        // suite's shared server. --no-sync: the cluster is thrown away.
        let data = server.data_dir();
        server.tool(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "root".as_ref(),
                "--auth=trust".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        server.start_again()?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("postgres://root@127.0.0.1:{}/postgres", self.port)
    }

    pub fn log(&self) -> PathBuf {
        self.path.join("postgres.log")
    }

    fn data_dir(&self) -> PathBuf {
        self.path.join("data")
    }

    /// `pg_ctl start`, waiting until it accepts connections. fsync stays on:
    /// what is tested is the receiver's behaviour around a restart, and the
    /// stock durability settings are what it meets in production.
    pub fn start_again(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=60",
            self.port,
            self.path.display()
        );
        let data = self.data_dir();
        let log = self.log();
        self.tool(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_WAIT_SECS.as_ref(),
                "start".as_ref(),
            ],
        )
        .map(|_| ())
    }

    pub fn stop(&self, mode: StopMode) -> Result<(), String> {
        let data = self.data_dir();
        self.tool(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                mode.flag().as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_WAIT_SECS.as_ref(),
                "stop".as_ref(),
            ],
        )
        .map(|_| ())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn tool(&self, name: &str, args: &[&std::ffi::OsStr]) -> Result<Output, String> {
        let program = self.bin.join(name);
        let mut command = if self.run_as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&program);
            command
        } else {
            Command::new(&program)
        };
        let output = command
            .args(args)
            // The postgres user may not be able to enter the test's working
            // directory.
            .current_dir(&self.path)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{name} failed ({}): {}{}\nserver log tail:\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout).trim(),
                String::from_utf8_lossy(&output.stderr).trim(),
                self.log_tail(20)
            ));
        }
        Ok(output)
    }
}

impl Drop for OwnedServer {
    fn drop(&mut self) {
        // Immediate: nothing in it is worth a checkpoint.
        let _ = self.stop(StopMode::Immediate);
        // After a failure, keep the data directory and the log to look at.
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                let _ = writeln!(
                    std::io::stderr(),
                    "crash test failed: kept PostgreSQL's data and log in {}",
                    kept.display()
                );
            }
        }
    }
}

/// Whether this process runs as root (then PostgreSQL must run as another
/// user). `/proc/self` belongs to the process's effective user.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `PG_BINDIR`, else the newest `/usr/lib/postgresql/<version>/bin` (Debian's
/// layout; the tools are not on PATH there), else `pg_config --bindir`.
fn bin_dir() -> Option<PathBuf> {
    let usable = |dir: &Path| dir.join("initdb").exists() && dir.join("pg_ctl").exists();
    if let Some(dir) = std::env::var_os("PG_BINDIR").map(PathBuf::from) {
        return usable(&dir).then_some(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| usable(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    let output = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    usable(&dir).then_some(dir)
}
