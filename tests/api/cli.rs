//! The binary as a new user runs it: `serve` with no configuration at all,
//! then `send` twice with the same id.

use crate::both_backends;
use crate::signed_fixtures as fixtures;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_idempotent-receiver");

pub(crate) struct Server(pub(crate) Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[path = "../support/free_port.rs"]
mod port;

/// A port no other test of this binary was given (see the module).
pub(crate) fn free_port() -> u16 {
    port::free_port().expect("a free port")
}

/// The binary in `dir`, listening (or posting) at `listen`, with none of
/// the caller's own settings variables.
pub(crate) fn binary(dir: &std::path::Path, listen: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .current_dir(dir)
        .env("IR_LISTEN", listen)
        .env_remove("DATABASE_URL")
        .env_remove("IR_CONFIG")
        .env_remove("IR_DATA_DIR")
        .env_remove("IR_ADMIN_TOKENS");
    command
}

fn run(dir: &std::path::Path, listen: &str, args: &[&str]) -> Output {
    binary(dir, listen, args).output().unwrap()
}

async fn wait_until_healthy(port: u16) {
    wait_until_ready(&format!("127.0.0.1:{port}")).await;
}

pub(crate) async fn wait_until_ready(listen: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = format!("http://{listen}/readyz");
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

/// `serve` with every provider's fixture endpoint (`fx-<provider>`), and the
/// binary run with the same configuration.
struct FixtureReceiver {
    _server: Server,
    listen: String,
    config: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl FixtureReceiver {
    async fn start() -> FixtureReceiver {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("receiver.toml");
        std::fs::write(&config, fixtures::endpoints_toml()).unwrap();
        let (server, listen) = serve_with(dir.path(), Some(&config)).await;
        FixtureReceiver {
            _server: server,
            listen,
            config,
            dir,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        run(self.dir.path(), &self.listen, &all)
    }
}

#[tokio::test]
async fn send_and_sign_work_for_every_provider_against_serve() {
    let receiver = FixtureReceiver::start().await;
    let (dir, listen) = (&receiver.dir, &receiver.listen);
    let with_config = |args: &[&str]| receiver.run(args);

    for source in fixtures::sources() {
        let endpoint = source.endpoint();
        // `send` signs with the endpoint's configured secret and its own sample body.
        let id = format!("msg_send_{}", source.provider);
        // Discord and PayPal sign with a private key the receiver never
        // holds: the fixtures' published test key signs.
        let key_file = dir.path().join(format!("{}.key", source.provider));
        let mut send = vec!["send", "--endpoint", &endpoint, "--id", &id];
        if let Some((key, _)) = source.signing_keys {
            std::fs::write(&key_file, key).unwrap();
            send.extend(["--signing-key", key_file.to_str().unwrap()]);
        }
        let sent = with_config(&send);
        let stdout = String::from_utf8_lossy(&sent.stdout);
        assert!(
            stdout.contains("HTTP 200"),
            "send {endpoint}: {stdout}{}",
            String::from_utf8_lossy(&sent.stderr)
        );

        // `sign --format json` produces a fixture that serve accepts.
        let body_file = dir.path().join(format!("{}.json", source.provider));
        std::fs::write(&body_file, &source.body).unwrap();
        let mut args = vec![
            "sign",
            "--endpoint",
            &endpoint,
            "--file",
            body_file.to_str().unwrap(),
            "--format",
            "json",
            "--id",
            &source.delivery_id,
        ];
        if let Some(event_type) = &source.event_type {
            args.extend(["--event-type", event_type]);
        }
        if source.signing_keys.is_some() {
            args.extend(["--signing-key", key_file.to_str().unwrap()]);
        }
        let signed = with_config(&args);
        assert!(
            signed.status.success(),
            "{}",
            String::from_utf8_lossy(&signed.stderr)
        );
        let fixture: serde_json::Value = serde_json::from_slice(&signed.stdout).unwrap();
        let query = fixture["query"].as_str().unwrap_or("");
        let url = if query.is_empty() {
            format!("http://{listen}/webhooks/{endpoint}")
        } else {
            format!("http://{listen}/webhooks/{endpoint}?{query}")
        };
        let mut request = reqwest::Client::new()
            .post(url)
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

/// The README's round trip pasted as it stands: `serve &` and `send` at
/// once. `send` starts first here, and must wait for the listener instead of
/// failing with "Connection refused".
#[tokio::test]
async fn send_waits_for_a_receiver_that_starts_late_then_delivers() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut send = binary(
        dir.path(),
        &listen,
        &[
            "send",
            "--endpoint",
            "demo",
            "--id",
            "msg_late",
            "--wait",
            "60s",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = std::io::BufReader::new(send.stderr.take().unwrap());
    let (lines, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    // The receiver starts only once `send` has said that it waits for one.
    let (said, first) = tokio::task::spawn_blocking(move || {
        let first = said.recv_timeout(Duration::from_secs(30));
        (said, first)
    })
    .await
    .unwrap();
    let first = first.expect("send says why it waits");
    assert!(
        first.contains(&format!(
            "nothing listens at http://{listen}/webhooks/demo yet"
        )) && first.contains("waiting up to 1m"),
        "{first}"
    );
    let server = Server(
        binary(dir.path(), &listen, &["serve"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let output = tokio::task::spawn_blocking(move || send.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rest: Vec<String> = said.try_iter().collect();
    assert!(output.status.success(), "{stdout}\n{rest:?}");
    assert!(stdout.contains("HTTP 200"), "{stdout}");
    assert!(printed_body(&output).contains("\"processed\""), "{stdout}");
    drop(server);
}

/// What `send` and `sign` print is what the receiver stores: the key it
/// reads (Stripe's body `evt_...`, not `--id`), the event type that
/// `--event-type` put in the header, and the endpoint's own URL.
#[tokio::test]
async fn send_and_sign_print_what_the_receiver_will_see() {
    let receiver = FixtureReceiver::start().await;
    let (dir, listen, config) = (&receiver.dir, &receiver.listen, &receiver.config);
    let with_config = |args: &[&str]| receiver.run(args);
    let listed = |endpoint: &str| -> Vec<serde_json::Value> {
        let output = with_config(&["list", "--endpoint", endpoint, "--json"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        // The one line that says which database was read, and from where.
        let expected = format!(
            "database: sqlite://{} ({})",
            std::path::Path::new("data/receiver.db").display(),
            config.display()
        );
        assert!(
            stderr
                .lines()
                .any(|line| line.ends_with(&format!(": {expected}"))),
            "{stderr}"
        );
        let page: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        page["items"].as_array().cloned().unwrap_or_default()
    };

    // `send ARGS` (split at spaces) succeeds and prints `says`.
    let sends = |args: &str, says: &str| {
        let args: Vec<&str> = ["send"].into_iter().chain(args.split(' ')).collect();
        let sent = with_config(&args);
        let stdout = String::from_utf8_lossy(&sent.stdout);
        assert!(
            sent.status.success() && stdout.contains(says),
            "{args:?}: {stdout}"
        );
        assert!(!stdout.contains("msg_"), "{stdout}");
    };

    // GitHub: the header carries --event-type; the body's action completes it.
    let pull_request = dir.path().join("pull_request.json");
    std::fs::write(&pull_request, r#"{"action":"opened","number":7}"#).unwrap();
    sends(
        &format!(
            "--endpoint fx-github --id gh-delivery-1 --event-type pull_request --file {}",
            pull_request.display()
        ),
        "(key gh-delivery-1, event type pull_request.opened)",
    );
    let items = listed("fx-github");
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["delivery_id"], "gh-delivery-1");
    assert_eq!(items[0]["event_type"], "pull_request.opened");

    // Shopify carries it in X-Shopify-Topic.
    sends(
        "--endpoint fx-shopify --id shop-1 --event-type orders/paid",
        "(key shop-1, event type orders/paid)",
    );
    assert_eq!(listed("fx-shopify")[0]["event_type"], "orders/paid");

    // Stripe keys on the body's id, whatever --id says.
    let event = dir.path().join("event.json");
    std::fs::write(
        &event,
        r#"{"id":"evt_cli_1","object":"event","type":"customer.created","data":{"object":{}}}"#,
    )
    .unwrap();
    sends(
        &format!(
            "--endpoint fx-stripe --id ignored-1 --file {}",
            event.display()
        ),
        "(key evt_cli_1, event type customer.created)",
    );
    let items = listed("fx-stripe");
    assert_eq!(items[0]["delivery_id"], "evt_cli_1");

    // `sign ARGS --file event.json --format curl`: its stdout and stderr.
    let curl_of = |args: &str| {
        let file = event.display().to_string();
        let args: Vec<&str> = ["sign"]
            .into_iter()
            .chain(args.split(' '))
            .chain(["--file", &file, "--format", "curl"])
            .collect();
        let signed = with_config(&args);
        assert!(signed.status.success(), "{args:?}");
        signed
    };
    // `sign --format curl` posts to the endpoint's name ...
    let signed = curl_of("--endpoint fx-stripe");
    let curl = String::from_utf8_lossy(&signed.stdout);
    assert!(
        curl.starts_with(&format!(
            "curl -sS -i -X POST 'http://{listen}/webhooks/fx-stripe'"
        )),
        "{curl}"
    );
    // ... and without --endpoint, to the provider's, saying so.
    let signed = curl_of("--provider stripe --secret whsec_x");
    let curl = String::from_utf8_lossy(&signed.stdout);
    assert!(
        curl.contains(&format!("'http://{listen}/webhooks/stripe'")),
        "{curl}"
    );
    let note = String::from_utf8_lossy(&signed.stderr);
    assert!(
        note.contains("/webhooks/stripe") && note.contains("--endpoint"),
        "{note}"
    );
}

#[test]
fn help_names_the_environment_every_route_and_every_option() {
    let help = |args: &[&str]| {
        let output = Command::new(BIN)
            .args(args)
            // A password in the environment never reaches the help text.
            .env("DATABASE_URL", "postgres://root:hunter2@127.0.0.1/test")
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let top = help(&["--help"]);
    for variable in [
        "DATABASE_URL",
        "IR_CONFIG",
        "IR_LISTEN",
        "IR_DATA_DIR",
        "IR_ADMIN_TOKENS",
        "IR_METRICS_TOKEN",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_SERVICE_NAME",
    ] {
        assert!(
            top.contains(variable),
            "--help should name {variable}: {top}"
        );
    }
    for flag in [
        "--listen <ADDRESS>",
        "--database-url <URL>",
        "[env: DATABASE_URL]",
    ] {
        assert!(top.contains(flag), "{flag}: {top}");
    }
    assert!(!top.contains("hunter2"), "{top}");

    let serve = help(&["serve", "--help"]);
    for route in [
        "/webhooks/{endpoint}",
        "/payments",
        "/payments/{id}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/admin",
        "/admin/deliveries",
        "IR_ADMIN_TOKENS",
    ] {
        assert!(
            serve.contains(route),
            "serve --help should list {route}: {serve}"
        );
    }
    let reprocess = help(&["reprocess", "--help"]);
    assert!(
        reprocess.contains("received on") && reprocess.contains("as `list` shows it"),
        "{reprocess}"
    );
    let fixtures = help(&["fixtures", "--help"]);
    assert!(fixtures.contains("The folder to write"), "{fixtures}");
    let send = help(&["send", "--help"]);
    assert!(
        send.contains("--event-type") && send.contains("--wait"),
        "{send}"
    );
}

both_backends!(
    /// `--listen` and `--database-url` win over `IR_LISTEN` and
    /// `DATABASE_URL`: `serve` runs on the test app's database, `send` posts
    /// to it, and the delivery lands in that database.
    async fn listen_and_database_url_flags_override_the_environment(app) {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("receiver.toml");
        std::fs::write(
            &config,
            format!(
                "purge_interval = \"0\"\nreconcile_interval = \"0\"\n[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [{:?}]\n",
                crate::helpers::SECRET
            ),
        )
        .unwrap();
        let unused = format!("127.0.0.1:{}", free_port());
        let listen = format!("127.0.0.1:{}", free_port());
        let decoy = dir.path().join("decoy.db");
        let environment = |command: &mut Command| {
            command
                .env("IR_LISTEN", &unused)
                .env("DATABASE_URL", format!("sqlite://{}", decoy.display()));
        };
        let config_arg = config.to_str().unwrap();
        let mut serve = binary(
            dir.path(),
            &unused,
            &["--config", config_arg, "--listen", &listen, "--database-url", &app.database_url, "serve"],
        );
        environment(&mut serve);
        let _server = Server(serve.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
        wait_until_ready(&listen).await;

        let mut send = binary(
            dir.path(),
            &unused,
            &["--config", config_arg, "--listen", &listen, "send", "--endpoint", "shop", "--id", "msg_flags", "--wait", "0"],
        );
        environment(&mut send);
        let sent = send.output().unwrap();
        let stdout = String::from_utf8_lossy(&sent.stdout);
        assert!(stdout.contains("HTTP 200"), "{stdout}{}", String::from_utf8_lossy(&sent.stderr));
        let row = app.delivery("msg_flags").await.expect("stored in the flag's database");
        assert_eq!(row.status, "completed");
        assert!(!decoy.exists(), "the environment's database was not touched");
    }
);

#[test]
fn the_readme_provider_table_is_what_the_providers_command_prints() {
    let output = Command::new(BIN).arg("providers").output().unwrap();
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| `")).collect();
    // 34 providers; `hmac` is described below the table.
    assert!(rows.len() >= 34, "{table}");
    for row in rows {
        assert!(
            readme.contains(row),
            "README.md lacks this row of `idempotent-receiver providers`; paste the command's table:\n{row}"
        );
    }
}

/// `--version` names the allocator the binary was built with, and it is
/// the one that runs: jemalloc, asked through its own environment variable
/// to print its statistics at exit, answers only in a build with the
/// `jemalloc` feature (the default), and runs with the options compiled
/// into the binary (src/main.rs).
#[test]
fn version_names_the_allocator_that_runs() {
    let (stdout, stderr) = version_with_allocator_options("stats_print:true");
    let allocator = if cfg!(feature = "jemalloc") {
        "jemalloc"
    } else {
        "system"
    };
    assert_eq!(
        stdout.trim(),
        format!(
            "idempotent-receiver {} (allocator: {allocator})",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(
        stderr.contains("Begin jemalloc statistics"),
        cfg!(feature = "jemalloc"),
        "{stderr}"
    );
    if cfg!(feature = "jemalloc") {
        for option in [
            "opt.narenas: 1\n",
            "opt.dirty_decay_ms: 200 ",
            "opt.muzzy_decay_ms: 0 ",
        ] {
            assert!(stderr.contains(option), "{option:?} in {stderr}");
        }
    }
}

/// The environment's `_RJEM_MALLOC_CONF` is read after the compiled-in
/// options, so an operator can change one of them without a rebuild.
#[cfg(feature = "jemalloc")]
#[test]
fn the_environment_overrides_the_compiled_in_allocator_options() {
    let (_, stderr) = version_with_allocator_options("stats_print:true,narenas:3");
    assert!(stderr.contains("opt.narenas: 3\n"), "{stderr}");
    // The others are still the compiled-in ones.
    assert!(stderr.contains("opt.dirty_decay_ms: 200 "), "{stderr}");
}

/// `--version`'s stdout and stderr, run with `_RJEM_MALLOC_CONF` set to
/// `options` (which a system-allocator build ignores).
fn version_with_allocator_options(options: &str) -> (String, String) {
    let output = Command::new(BIN)
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", options)
        .output()
        .unwrap();
    assert!(output.status.success());
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
