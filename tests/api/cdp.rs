//! Just enough of the Chrome DevTools Protocol to drive a headless Chromium
//! through a page as a person would: navigate, type, click, read. One page,
//! attached with a flat session over the browser's WebSocket.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const WAIT: Duration = Duration::from_secs(20);

pub struct Browser {
    child: Child,
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where Chromium is: `IR_CHROMIUM`, else the Debian package's binary or
/// another Chromium on the `PATH`.
pub fn executable() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("IR_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let candidates = ["chromium", "chromium-browser", "google-chrome"];
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(PathBuf::from("/usr/bin"))
        .chain(std::env::split_paths(&path))
        .flat_map(|dir| candidates.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

impl Browser {
    /// Starts headless Chromium with a throw-away profile and opens a page.
    pub async fn launch(executable: &Path) -> Result<Browser, String> {
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut child = Command::new(executable)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", executable.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        // Chromium says where its DevTools socket is on stderr; the rest of
        // its chatter is drained so that the pipe never fills and blocks it.
        let (found, address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = found.send(url.trim().to_owned());
                }
            }
        });
        let url = tokio::task::spawn_blocking(move || address.recv_timeout(WAIT))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|_| "Chromium did not open its DevTools socket".to_owned())?;
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = browser
            .send(None, "Target.createTarget", json!({ "url": "about:blank" }))
            .await?;
        let target_id = target["targetId"].as_str().ok_or("no targetId")?.to_owned();
        let attached = browser
            .send(
                None,
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await?;
        browser.session = attached["sessionId"]
            .as_str()
            .ok_or("no sessionId")?
            .to_owned();
        Ok(browser)
    }

    /// Sends one command and waits for its answer, skipping events.
    async fn send(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .map_err(|e| e.to_string())?;
        let answer = tokio::time::timeout(WAIT, async {
            while let Some(frame) = self.socket.next().await {
                let Message::Text(text) = frame.map_err(|e| e.to_string())? else {
                    continue;
                };
                let value: Value =
                    serde_json::from_str(text.as_str()).map_err(|e| e.to_string())?;
                if value["id"] == json!(id) {
                    return Ok(value);
                }
            }
            Err("the DevTools socket closed".to_owned())
        })
        .await
        .map_err(|_| format!("{method}: no answer"))??;
        match answer.get("error") {
            Some(error) => Err(format!("{method}: {error}")),
            None => Ok(answer["result"].clone()),
        }
    }

    /// A command to the page.
    pub async fn page(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let session = self.session.clone();
        self.send(Some(&session), method, params).await
    }

    /// Evaluates `expression` in the page and returns its value as JSON.
    pub async fn eval(&mut self, expression: &str) -> Result<Value, String> {
        let result = self
            .page(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await?;
        if let Some(exception) = result.get("exceptionDetails") {
            return Err(format!("{expression}: {exception}"));
        }
        Ok(result["result"]["value"].clone())
    }

    /// Polls `condition` (a boolean expression) until it holds.
    pub async fn wait_until(&mut self, condition: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            // Between two documents an evaluation may fail: try again.
            if self.eval(condition).await.ok() == Some(json!(true)) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("timed out waiting for {condition}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `action` (which leaves the page) and waits for the next page to
    /// load: the old document is marked first, so that it is never taken
    /// for the new one.
    pub async fn and_wait(&mut self, action: &str) -> Result<(), String> {
        self.eval(&format!("window.__left = true; {action}; true"))
            .await?;
        self.wait_until("window.__left !== true && document.readyState === 'complete'")
            .await
    }

    pub async fn goto(&mut self, url: &str) -> Result<(), String> {
        self.and_wait(&format!("location.href = {}", json!(url)))
            .await
    }

    /// Types `text` into the field `selector`.
    pub async fn fill(&mut self, selector: &str, text: &str) -> Result<(), String> {
        let done = self
            .eval(&format!(
                "(() => {{ const e = document.querySelector({}); if (!e) return false; e.value = {}; return true; }})()",
                json!(selector),
                json!(text)
            ))
            .await?;
        if done == json!(true) {
            Ok(())
        } else {
            Err(format!("no field {selector}"))
        }
    }

    /// Clicks `selector` and waits for the page it leads to.
    pub async fn click(&mut self, selector: &str) -> Result<(), String> {
        let exists = self
            .eval(&format!(
                "document.querySelector({}) !== null",
                json!(selector)
            ))
            .await?;
        if exists != json!(true) {
            return Err(format!("nothing to click at {selector}"));
        }
        self.and_wait(&format!(
            "document.querySelector({}).click()",
            json!(selector)
        ))
        .await
    }

    /// The text of every element matching `selector`, in document order.
    pub async fn texts(&mut self, selector: &str) -> Result<Vec<String>, String> {
        let value = self
            .eval(&format!(
                "Array.from(document.querySelectorAll({})).map(e => e.textContent.trim())",
                json!(selector)
            ))
            .await?;
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    pub async fn text(&mut self, selector: &str) -> Result<String, String> {
        let value = self
            .eval(&format!(
                "(document.querySelector({}) || {{ textContent: '' }}).textContent.trim()",
                json!(selector)
            ))
            .await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }

    /// Saves a PNG of the page as `name`.png in `IR_SCREENSHOT_DIR`, when
    /// that is set: a person can then look at what the test saw.
    pub async fn screenshot(&mut self, name: &str) -> Result<(), String> {
        use base64::Engine as _;
        let Some(dir) = std::env::var_os("IR_SCREENSHOT_DIR") else {
            return Ok(());
        };
        let shot = self
            .page(
                "Page.captureScreenshot",
                json!({ "format": "png", "captureBeyondViewport": true }),
            )
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), png).map_err(|e| e.to_string())
    }

    pub async fn path(&mut self) -> Result<String, String> {
        let value = self.eval("location.pathname").await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }
}

impl Browser {
    /// Emulates a screen of `width` × `height` CSS pixels (a phone's when
    /// `mobile`), for the pages loaded from then on.
    pub async fn viewport(&mut self, width: u32, height: u32, mobile: bool) -> Result<(), String> {
        self.page(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": if mobile { 2 } else { 1 }, "mobile": mobile }),
        )
        .await
        .map(|_| ())
    }
}
