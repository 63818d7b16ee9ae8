//! The binary as a new user runs it: `serve` with no configuration at all,
//! then `send` twice with the same id.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_idempotent-receiver");

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(dir: &std::path::Path, listen: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("IR_LISTEN", listen)
        .env_remove("DATABASE_URL")
        .env_remove("IR_CONFIG")
        .env_remove("IR_DATA_DIR")
        .output()
        .unwrap()
}

async fn wait_until_healthy(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = format!("http://127.0.0.1:{port}/readyz");
    while Instant::now() < deadline {
        if reqwest::get(&url).await.is_ok_and(|r| r.status() == 200) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server did not become ready");
}

/// The body `send` printed: everything after the first blank line.
fn printed_body(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_once("\n\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_fresh_start_serves_the_demo_endpoint_and_send_round_trips_with_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, listen) = serve_with(dir.path(), None).await;
    let secret = std::fs::read_to_string(dir.path().join("data/demo.secret")).unwrap();
    assert!(dir.path().join("data/receiver.db").exists());

    let first = run(
        dir.path(),
        &listen,
        &["send", "--endpoint", "demo", "--id", "msg_readme"],
    );
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(stdout.contains("HTTP 200"), "{stdout}");
    assert!(!stdout.contains("idempotent-replayed"), "{stdout}");

    let second = run(
        dir.path(),
        &listen,
        &["send", "--endpoint", "demo", "--id", "msg_readme"],
    );
    let stdout = String::from_utf8_lossy(&second.stdout);
    assert!(stdout.contains("HTTP 200"), "{stdout}");
    assert!(stdout.contains("idempotent-replayed: true"), "{stdout}");
    assert_eq!(printed_body(&first), printed_body(&second));
    assert!(printed_body(&first).contains("\"processed\""));

    // The secret never reaches the output of either command.
    let key = secret.trim().trim_start_matches("whsec_");
    for output in [&first, &second] {
        assert!(!String::from_utf8_lossy(&output.stdout).contains(key));
        assert!(!String::from_utf8_lossy(&output.stderr).contains(key));
    }
}

#[test]
fn migrate_applies_the_migrations_once() {
    let dir = tempfile::tempdir().unwrap();
    let first = run(dir.path(), "127.0.0.1:0", &["migrate"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(
        first.starts_with("applied ") && !first.starts_with("applied 0 "),
        "{first}"
    );
    let second = run(dir.path(), "127.0.0.1:0", &["migrate"]);
    assert!(String::from_utf8_lossy(&second.stdout).contains("applied 0 migration"));
}

#[test]
fn every_command_has_help() {
    for command in [
        &["--help"][..],
        &["serve", "--help"],
        &["migrate", "--help"],
        &["send", "--help"],
        &["purge", "--help"],
        &["list", "--help"],
    ] {
        let output = Command::new(BIN).args(command).output().unwrap();
        assert!(output.status.success(), "{command:?}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("Usage"));
    }
    let help = Command::new(BIN)
        .args(["purge", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for documented in [
        "--dry-run",
        "--older-than",
        "retention",
        "live lease",
        "ledger_entries",
    ] {
        assert!(
            help.contains(documented),
            "purge --help should mention {documented}: {help}"
        );
    }
}

#[test]
fn a_bad_configuration_stops_start_up_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("receiver.toml");
    std::fs::write(
        &config,
        "[endpoints.shop]\nprovider = \"paypal\"\nsecrets = [\"x\"]\n",
    )
    .unwrap();
    let output = run(
        dir.path(),
        "127.0.0.1:0",
        &["--config", config.to_str().unwrap(), "serve"],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("receiver.toml") && stderr.contains("endpoints.shop.provider"),
        "{stderr}"
    );
}

/// Starts `serve` in `dir` (with `config`, or none at all) on a free port.
async fn serve_with(dir: &std::path::Path, config: Option<&std::path::Path>) -> (Server, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = Vec::new();
    if let Some(config) = config {
        args.extend(["--config".to_owned(), config.display().to_string()]);
    }
    args.push("serve".to_owned());
    let server = Server(
        Command::new(BIN)
            .args(&args)
            .current_dir(dir)
            .env("IR_LISTEN", &listen)
            .env_remove("DATABASE_URL")
            .env_remove("IR_CONFIG")
            .env_remove("IR_DATA_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until_healthy(port).await;
    (server, listen)
}

#[tokio::test]
async fn send_and_sign_work_for_every_provider_against_serve() {
    use idempotent_receiver::fixtures;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("receiver.toml");
    std::fs::write(&config, fixtures::endpoints_toml()).unwrap();
    let (_server, listen) = serve_with(dir.path(), Some(&config)).await;
    let with_config = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        run(dir.path(), &listen, &all)
    };

    for source in fixtures::sources() {
        let endpoint = source.endpoint();
        // `send` signs with the endpoint's configured secret and its own sample body.
        let id = format!("msg_send_{}", source.provider);
        let sent = with_config(&["send", "--endpoint", &endpoint, "--id", &id]);
        let stdout = String::from_utf8_lossy(&sent.stdout);
        assert!(
            stdout.contains("HTTP 200"),
            "send {endpoint}: {stdout}{}",
            String::from_utf8_lossy(&sent.stderr)
        );

        // `sign --format json` produces a fixture that serve accepts.
        let body_file = dir.path().join(format!("{}.json", source.provider));
        std::fs::write(&body_file, source.body).unwrap();
        let mut args = vec![
            "sign",
            "--endpoint",
            &endpoint,
            "--file",
            body_file.to_str().unwrap(),
            "--format",
            "json",
            "--id",
            source.delivery_id,
        ];
        if let Some(event_type) = source.event_type {
            args.extend(["--event-type", event_type]);
        }
        let signed = with_config(&args);
        assert!(
            signed.status.success(),
            "{}",
            String::from_utf8_lossy(&signed.stderr)
        );
        let fixture: serde_json::Value = serde_json::from_slice(&signed.stdout).unwrap();
        let mut request = reqwest::Client::new()
            .post(format!("http://{listen}/webhooks/{endpoint}"))
            .body(fixture["body"].as_str().unwrap().to_owned());
        for (name, value) in fixture["headers"].as_object().unwrap() {
            request = request.header(name, value.as_str().unwrap());
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status(),
            200,
            "sign {endpoint}: {}",
            response.text().await.unwrap()
        );
    }
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_delivery_finish_before_exiting() {
    use actix_web::{App, HttpResponse, HttpServer, web};
    use idempotent_receiver::store::{DatabaseUrl, Store, StoreOptions};

    // A downstream that takes a while to answer.
    let downstream = HttpServer::new(|| {
        App::new().route(
            "/slow",
            web::post().to(|| async {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                HttpResponse::Created().json(serde_json::json!({ "ok": true }))
            }),
        )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let slow_url = format!("http://{}/slow", downstream.addrs()[0]);
    tokio::spawn(downstream.run());

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("receiver.toml");
    let secret = crate::helpers::SECRET;
    std::fs::write(
        &config,
        format!(
            "shutdown_grace = \"10s\"\n[forwarders.slow]\nurl = {slow_url:?}\n[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [{secret:?}]\nhandlers = [\"record\", \"slow\"]\n"
        ),
    )
    .unwrap();
    let (mut server, listen) = serve_with(dir.path(), Some(&config)).await;

    let body = crate::helpers::payment("pay_term", 10);
    let provider = idempotent_receiver::providers::build(
        "standard-webhooks",
        &idempotent_receiver::providers::ProviderSpec {
            secrets: vec![secret.into()],
            ..Default::default()
        },
    )
    .unwrap();
    let delivery = idempotent_receiver::client::sign(
        provider.as_ref(),
        "msg_term",
        chrono::Utc::now().timestamp(),
        None,
        body,
    )
    .unwrap();
    let url = format!("http://{listen}/webhooks/shop");
    let in_flight = tokio::spawn(async move {
        idempotent_receiver::client::post(&reqwest::Client::new(), &url, &delivery).await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let pid = server.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );

    let answer = in_flight
        .await
        .unwrap()
        .expect("the in-flight delivery is answered");
    assert_eq!(answer.status, 200, "{}", answer.body);
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "{exit:?}");

    let store = Store::connect(
        &DatabaseUrl::Sqlite(dir.path().join("data/receiver.db")),
        &StoreOptions::default(),
    )
    .unwrap();
    let row = store
        .conn()
        .await
        .unwrap()
        .find_delivery("shop", "msg_term")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, "completed", "finished, not left to expire");
}
