//! The real binary as an operator runs it: `serve` in a child process that
//! the test can `kill -9` and start again on the same port and database.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_idempotent-receiver");

/// How long a fresh process may take to answer `/readyz` 200. Start-up is
/// a connection and a migration check; 30 s only matters on a stalled host.
const READY_WITHIN: Duration = Duration::from_secs(30);

#[path = "../support/free_port.rs"]
mod port;

/// A port nobody listens on right now and no other test of this binary was
/// given. Another process could take it before the server binds it; `start`
/// would then see the server exit and say so.
pub fn free_port() -> Result<u16, String> {
    port::free_port().map_err(|e| format!("cannot find a free port: {e}"))
}

/// One `serve` process at a time, always on the same port, configuration and
/// database; its stderr goes to `log`, one section per incarnation.
pub struct Server {
    child: Option<Child>,
    config: PathBuf,
    data_dir: PathBuf,
    database_url: String,
    pub port: u16,
    pub log: PathBuf,
    /// How many processes were started, the first one included.
    pub starts: u32,
}

impl Server {
    pub fn new(dir: &Path, config: PathBuf, database_url: String, port: u16) -> Server {
        Server {
            child: None,
            config,
            data_dir: dir.join("data"),
            database_url,
            port,
            log: dir.join("server.log"),
            starts: 0,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Appends a marker to the log, so that a failure's log shows which
    /// incarnation said what and when the test intervened.
    pub fn note(&self, text: &str) {
        if let Ok(mut file) = OpenOptions::new().create(true).append(true).open(&self.log) {
            let _ = writeln!(
                file,
                "===== [test] {} {text}",
                chrono::Utc::now().format("%H:%M:%S%.3f")
            );
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("cannot open {}: {e}", self.log.display()))?;
        let child = Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .arg("serve")
            .env("IR_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("DATABASE_URL", &self.database_url)
            .env("IR_DATA_DIR", &self.data_dir)
            .env_remove("IR_CONFIG")
            .env("RUST_LOG", "info")
            // Plain text: the log is read by people and grepped by the test.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start {BIN}: {e}"))?;
        self.starts += 1;
        self.note(&format!(
            "started process {} (start #{})",
            child.id(),
            self.starts
        ));
        self.child = Some(child);
        Ok(())
    }

    /// Starts a process and waits for `/readyz`. A process that exits before
    /// it is ready (the port still held, the database refusing connections)
    /// is started again until the deadline.
    pub async fn start(&mut self, http: &reqwest::Client) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        self.spawn()?;
        loop {
            if let Some(status) = self.exited() {
                self.note(&format!("process exited before it was ready: {status}"));
                if Instant::now() >= deadline {
                    return Err(format!(
                        "the server exited before it was ready ({status}); log tail:\n{}",
                        self.log_tail(40)
                    ));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                self.spawn()?;
                continue;
            }
            if self.ready(http).await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server did not answer /readyz 200 within {READY_WITHIN:?}; log tail:\n{}",
                    self.log_tail(40)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether `/readyz` answers 200 (the database answers and is migrated).
    pub async fn ready(&self, http: &reqwest::Client) -> bool {
        let request = http
            .get(format!("{}/readyz", self.base_url()))
            .timeout(Duration::from_secs(2))
            .send();
        matches!(request.await, Ok(response) if response.status() == 200)
    }

    /// Waits until `/readyz` answers 200 again, e.g. after the database came
    /// back; fails if the process died meanwhile.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "the server exited ({status}) while it should have kept running; log tail:\n{}",
                    self.log_tail(40)
                ));
            }
            if self.ready(http).await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the server did not become ready again within {READY_WITHIN:?}; log tail:\n{}",
                    self.log_tail(40)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `kill -9`: SIGKILL, so nothing in the process gets to clean up, then
    /// reaps it so that its port and database handles are released.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id();
            // `Child::kill` is SIGKILL on Unix.
            let _ = child.kill();
            let _ = child.wait();
            self.note(&format!("killed process {pid} with SIGKILL"));
        }
    }

    /// The exit status, if the current process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The log lines of every incarnation that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
