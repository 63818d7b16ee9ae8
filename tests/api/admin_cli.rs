//! The binary's side of the admin surface: `list` over either backend, and
//! what `serve` logs about `/admin` (never a token).

use crate::both_backends;
use crate::helpers::{TestApp, payment};
use chrono::TimeDelta;
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_idempotent-receiver");

/// Runs the binary over `app`'s database, with no configuration file.
pub fn run(app: &TestApp, data_dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(data_dir)
        .env("DATABASE_URL", &app.database_url)
        .env("IR_DATA_DIR", data_dir)
        .env_remove("IR_CONFIG")
        .env_remove("IR_ADMIN_TOKENS")
        .output()
        .expect("the binary runs")
}

pub fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json_ids(output: &Output) -> (Vec<String>, Value) {
    let page: Value = serde_json::from_str(&stdout(output)).expect("list --json prints JSON");
    let ids = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["delivery_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    (ids, page["next_cursor"].clone())
}

both_backends!(
    async fn list_prints_the_stored_keys_as_a_table_or_as_json_with_filters(app) {
        assert_eq!(app.deliver("msg_l1", &payment("pay_l1", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_l2", &payment("pay_l2", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_l2", &payment("pay_l2", 100)).await.status(), 200);
        assert_eq!(app.deliver_to("other", "msg_l3", &payment("pay_l3", 100)).await.status(), 200);
        assert_eq!(app.deliver("msg_l0", &payment("pay_l0", 100)).await.status(), 200);
        app.age_delivery("msg_l0", TimeDelta::hours(48)).await;
        let dir = tempfile::tempdir().expect("a temporary folder");

        let table = stdout(&run(app, dir.path(), &["list"]));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 6, "{table}");
        assert_eq!(lines[5], "4 match: 4 completed", "the totals close the table");
        for header in ["RECEIVED (UTC)", "ENDPOINT", "DELIVERY ID", "STATUS", "REPLAYS"] {
            assert!(lines[0].contains(header), "{table}");
        }
        let order: Vec<&str> = lines[1..5]
            .iter()
            .map(|line| line.split_whitespace().nth(3).unwrap_or_default())
            .collect();
        assert_eq!(order, ["msg_l3", "msg_l2", "msg_l1", "msg_l0"], "newest first:\n{table}");
        assert!(lines[2].contains("completed") && lines[2].contains("200"), "{table}");

        let (ids, _) = json_ids(&run(app, dir.path(), &["list", "--endpoint", "shop", "--json"]));
        assert_eq!(ids, ["msg_l2", "msg_l1", "msg_l0"]);
        let (ids, _) = json_ids(&run(app, dir.path(), &["list", "--since", "24h", "--json"]));
        assert_eq!(ids, ["msg_l3", "msg_l2", "msg_l1"]);
        let (ids, next) = json_ids(&run(app, dir.path(), &["list", "--limit", "1", "--json"]));
        assert_eq!(ids, ["msg_l3"]);
        let next = next.as_str().expect("a next cursor").to_owned();
        let (ids, _) = json_ids(&run(app, dir.path(), &["list", "--limit", "1", "--json", "--cursor", &next]));
        assert_eq!(ids, ["msg_l2"]);

        let none = stdout(&run(app, dir.path(), &["list", "--status", "in_progress"]));
        assert_eq!(none.trim(), "no deliveries match");
        let bad = run(app, dir.path(), &["list", "--status", "done"]);
        assert!(!bad.status.success());
        assert!(String::from_utf8_lossy(&bad.stderr).contains("status"));
    }
);

both_backends!(
    /// `list` without `--config` used to read `data/receiver.db` without a
    /// word while the server ran on PostgreSQL: every command that reads a
    /// database says which one, on one stderr line, its password masked.
    async fn every_command_that_reads_the_database_says_which_one_without_its_password(app) {
        assert_eq!(app.deliver("msg_db1", &payment("pay_db1", 100)).await.status(), 200);
        let dir = tempfile::tempdir().expect("a temporary folder");
        // Trust authentication takes any password, so one can be shown masked.
        let with_password = app.database_url.replacen("postgres://root@", "postgres://root:hunter2@", 1);
        let shown = idempotent_receiver::store::DatabaseUrl::parse(&with_password)
            .expect("a database URL")
            .redacted();
        if with_password != app.database_url {
            assert!(shown.contains("root:***@"), "{shown}");
        }
        let database_lines = |output: &Output| -> Vec<String> {
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!stderr.contains("hunter2"), "{stderr}");
            stderr
                .lines()
                .filter_map(|line| line.split_once(": database: "))
                .map(|(_, said)| format!("database: {said}"))
                .collect()
        };
        for command in [&["list"][..], &["purge", "--dry-run"], &["reconcile"], &["migrate"]] {
            let mut args = vec!["--database-url", with_password.as_str()];
            args.extend_from_slice(command);
            let output = run(app, dir.path(), &args);
            stdout(&output);
            assert_eq!(database_lines(&output), [format!("database: {shown} (--database-url)")], "{command:?}");
        }
        let from_environment = run(app, dir.path(), &["list"]);
        assert!(stdout(&from_environment).contains("msg_db1"));
        let shown = idempotent_receiver::store::DatabaseUrl::parse(&app.database_url)
            .expect("a database URL")
            .redacted();
        assert_eq!(database_lines(&from_environment), [format!("database: {shown} (DATABASE_URL)")]);
        // With JSON logs every stderr line stays one JSON object.
        let json = run(app, dir.path(), &["--log-format", "json", "list"]);
        let events: Vec<Value> = String::from_utf8_lossy(&json.stderr)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        assert!(
            events
                .iter()
                .any(|event| event["message"] == format!("database: {shown} (DATABASE_URL)")),
            "{events:?}"
        );
        // Commands that read no database say nothing about one.
        let signed = run(app, dir.path(), &["sign", "--provider", "github", "--secret", "s", "--file", "/dev/null"]);
        assert!(database_lines(&signed).is_empty());
    }
);

/// A running `serve`, stopped (and waited for) when dropped.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve` on a free port with `env`, its log in `dir/serve.log`.
async fn serve_logging(dir: &std::path::Path, env: &[(&str, &str)]) -> (Server, String) {
    let port = crate::cli::free_port();
    let listen = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("serve.log")).expect("a log file");
    let mut command = Command::new(BIN);
    command
        .arg("serve")
        .current_dir(dir)
        .env("IR_LISTEN", &listen)
        .env("RUST_LOG", "debug")
        .env_remove("DATABASE_URL")
        .env_remove("IR_CONFIG")
        .env_remove("IR_DATA_DIR")
        .env_remove("IR_ADMIN_TOKENS")
        .stdout(Stdio::null())
        .stderr(log);
    for (name, value) in env {
        command.env(name, value);
    }
    let server = Server(command.spawn().expect("serve starts"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = format!("http://{listen}/readyz");
    while Instant::now() < deadline {
        if reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200) {
            return (server, listen);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("serve did not become ready");
}

fn stop(server: Server) {
    drop(server);
}

#[tokio::test]
async fn serve_says_where_the_admin_surface_is_and_never_logs_a_token() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let token = "tok_logged_never_0123456789";
    let (server, listen) = serve_logging(dir.path(), &[("IR_ADMIN_TOKENS", token)]).await;
    let client = reqwest::Client::new();
    let ok = client
        .get(format!("http://{listen}/admin/deliveries"))
        .bearer_auth(token)
        .send()
        .await
        .expect("an answer");
    assert_eq!(ok.status(), 200);
    let refused = client
        .get(format!("http://{listen}/admin/deliveries"))
        .bearer_auth(format!("{token}-wrong"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), 401);
    let login = client
        .post(format!("http://{listen}/admin/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .expect("an answer");
    assert!(login.status().is_success() || login.status().is_redirection());
    stop(server);
    let log = std::fs::read_to_string(dir.path().join("serve.log")).expect("the log");
    assert!(log.contains("admin surface ready"), "{log}");
    assert!(log.contains("/admin"), "{log}");
    assert!(!log.contains(token), "a token reached the log:\n{log}");
}

#[tokio::test]
async fn serve_without_a_token_says_the_admin_surface_is_off() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let (server, listen) = serve_logging(dir.path(), &[]).await;
    let admin = reqwest::get(format!("http://{listen}/admin"))
        .await
        .expect("an answer");
    assert_eq!(admin.status(), 404);
    stop(server);
    let log = std::fs::read_to_string(dir.path().join("serve.log")).expect("the log");
    assert!(log.contains("the admin surface is off"), "{log}");
}
