//! `outboxbench`, as CI can afford it: its `[publishers.bus]` tables are
//! ones the receiver accepts (no broker needed), and, per broker that is
//! reachable, a small baseline read back by the consumer, each id once,
//! then cleaned up. An unreachable broker prints one `SKIPPED` line.

use idempotent_receiver::config::Settings;
use std::process::Command;

const OUTBOXBENCH: &str = env!("CARGO_BIN_EXE_outboxbench");
const BROKERS: [(&str, &str); 3] = [
    ("nats", "127.0.0.1:4222"),
    ("rabbitmq", "127.0.0.1:5672"),
    ("redis", "127.0.0.1:6379"),
];

fn outboxbench(args: &[&str]) -> String {
    let output = Command::new(OUTBOXBENCH)
        .args(args)
        .output()
        .expect("outboxbench runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "outboxbench {args:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn field<'a>(result: &'a str, name: &str) -> &'a str {
    result
        .split_whitespace()
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {result}"))
}

#[test]
fn its_publisher_tables_are_ones_the_receiver_accepts() {
    for (broker, _) in BROKERS {
        let table = outboxbench(&["config", "--broker", broker, "--name", "irbenchtest"]);
        let config = format!(
            "[endpoints.ob]\nprovider = \"standard-webhooks\"\n\
             secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n\
             handlers = [\"record\", \"publish:bus\"]\n{table}"
        );
        let env = |name: &str| {
            (name == "DATABASE_URL").then(|| "sqlite:///tmp/outboxbench-test.db".to_owned())
        };
        let settings = Settings::parse(&config, "outboxbench.toml", &env)
            .unwrap_or_else(|e| panic!("{broker}: {e}\n{config}"));
        assert_eq!(settings.publishers.len(), 1, "{broker}");
        assert_eq!(settings.publishers[0].broker.kind(), broker);
    }
    let refused = Command::new(OUTBOXBENCH)
        .args(["config", "--broker", "nats", "--name", "a.b"])
        .output()
        .expect("outboxbench runs");
    assert!(!refused.status.success(), "a name with a dot is refused");
}

#[test]
fn a_small_baseline_lands_each_id_once_and_is_cleaned_up() {
    for (broker, addr) in BROKERS {
        if std::net::TcpStream::connect(addr).is_err() {
            eprintln!("SKIPPED: {broker} not reachable at {addr}");
            continue;
        }
        let name = format!(
            "irbenchtest{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let base = outboxbench(&[
            "baseline",
            "--broker",
            broker,
            "--name",
            &name,
            "--messages",
            "200",
            "--in-flight",
            "32",
            "--size",
            "300",
        ]);
        let result = base.lines().find(|l| l.starts_with("RESULT ")).unwrap();
        assert!(
            field(result, "rate").parse::<f64>().unwrap() > 0.0,
            "{result}"
        );
        // The baseline's messages are the consumer's "baseline" endpoint;
        // their bodies carry no CloudEvents `time`, so no latency.
        let landed = outboxbench(&[
            "consume",
            "--broker",
            broker,
            "--name",
            &name,
            "--endpoint",
            "baseline",
            "--expect",
            "200",
            "--idle",
            "2",
            "--timeout",
            "30",
        ]);
        outboxbench(&["cleanup", "--broker", broker, "--name", &name]);
        let result = landed.lines().find(|l| l.starts_with("RESULT ")).unwrap();
        assert_eq!(field(result, "distinct"), "200", "{broker}: {result}");
        assert_eq!(field(result, "received"), "200", "{broker}: {result}");
        assert_eq!(field(result, "repeated_ids"), "0", "{broker}: {result}");
    }
}
