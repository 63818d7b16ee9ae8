//! The load generator itself, as CI can afford it: a few hundred requests
//! against a receiver on SQLite, with the correctness columns checked. The
//! receiver runs in this process, built by the library as `serve` builds it.

use idempotent_receiver::config::Settings;
use idempotent_receiver::handlers::Registry;
use idempotent_receiver::startup::Application;
use std::process::Command;

const LOADGEN: &str = env!("CARGO_BIN_EXE_loadgen");
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ENDPOINT: &str = "bench";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_load_generator_storm_reports_one_effect_per_id_and_identical_bodies() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let database_url = format!("sqlite://{}", dir.path().join("receiver.db").display());
    let config = format!(
        "listen = \"127.0.0.1:0\"\nworkers = 2\npool_size = 8\npurge_interval = \"0\"\n\
         reconcile_interval = \"0\"\n[endpoints.{ENDPOINT}]\nprovider = \"standard-webhooks\"\n\
         secrets = [\"{SECRET}\"]\n"
    );
    let data_dir = dir.path().display().to_string();
    let url = database_url.clone();
    let env = move |name: &str| match name {
        "DATABASE_URL" => Some(url.clone()),
        "IR_DATA_DIR" => Some(data_dir.clone()),
        _ => None,
    };
    let settings = Settings::parse(&config, "smoke.toml", &env).expect("the configuration");
    let app = Application::build(&settings, &Registry::builtin())
        .await
        .expect("the receiver starts");
    let base_url = format!("http://127.0.0.1:{}", app.port());
    let server = app.server().handle();
    let serving = tokio::spawn(app.run_until_stopped());

    for (scenario, requests) in [("storm", "320"), ("mixed", "300")] {
        let mut command = Command::new(LOADGEN);
        command
            .args(["--url", &base_url, "--endpoint", ENDPOINT])
            .args(["--secret", SECRET, "--scenario", scenario])
            .args(["--concurrency", "16", "--storm-copies", "16"])
            .args(["--requests", requests, "--duration", "60"])
            .args(["--replay-keys", "50", "--database-url", &database_url]);
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("the load generator's thread")
            .expect("the load generator runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "loadgen {scenario} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let result = stdout
            .lines()
            .find(|line| line.starts_with("RESULT "))
            .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"));
        assert!(result.contains("one_effect=ok"), "{result}");
        assert!(result.contains("bodies_identical=ok"), "{result}");
        assert!(result.contains("bad_status=false"), "{result}");
    }
    server.stop(true).await;
    serving
        .await
        .expect("the server task")
        .expect("the server stops cleanly");
}
