//! The configuration as operators write it: defaults, environment
//! overrides, and messages that name the key.

use super::*;
use crate::providers::ProviderSpec;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<Settings, ConfigError> {
    Settings::parse(text, "receiver.toml", &no_env)
}

#[test]
fn a_fresh_start_gets_the_defaults_and_the_demo_endpoint_once_its_secret_exists() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_dir = data.to_string_lossy().to_string();
    let env = move |name: &str| (name == "IR_DATA_DIR").then(|| data_dir.clone());
    let settings = Settings::load_with(None, &env).unwrap();
    assert_eq!(settings.listen, "127.0.0.1:8080");
    assert_eq!(settings.retention, Duration::from_secs(72 * 3600));
    assert_eq!(
        settings.database,
        DatabaseUrl::Sqlite(data.join("receiver.db"))
    );
    // Loading wrote nothing: the secret is start-up's to create.
    assert!(settings.demo && settings.endpoints.is_empty());
    assert!(!data.exists());

    crate::demo::ensure_secret(&data).unwrap();
    let settings = settings.with_demo_endpoint().unwrap();
    assert_eq!(settings.endpoints[0].name, "demo");
    let secret = std::fs::read_to_string(data.join("demo.secret")).unwrap();
    // A later load finds it by itself.
    let again = Settings::load_with(None, &env).unwrap();
    assert_eq!(again.endpoints[0].name, "demo");
    assert!(!format!("{settings:?}").contains(&secret[6..]));
}

#[test]
fn endpoints_take_secrets_from_the_file_and_the_environment() {
    let text = format!(
        "[endpoints.shop]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nsecrets_env = \"SHOP_SECRETS\"\ntolerance = \"0\"\n"
    );
    let env = |name: &str| (name == "SHOP_SECRETS").then(|| format!("{SECRET}, {SECRET}"));
    let settings = Settings::parse(&text, "receiver.toml", &env).unwrap();
    let shop = settings.endpoint("shop").unwrap();
    assert_eq!(shop.tolerance, Some(Duration::ZERO));
    assert_eq!(shop.handlers, ["record", "payments"]);
    assert!(settings.endpoint("demo").is_none());
}

#[test]
fn database_url_and_listen_come_from_the_environment_first() {
    let env = |name: &str| match name {
        "DATABASE_URL" => Some("postgres://root@127.0.0.1/test".to_owned()),
        "IR_LISTEN" => Some("0.0.0.0:9000".to_owned()),
        _ => None,
    };
    let text = format!(
        "database_url = \"sqlite://x.db\"\n[endpoints.a]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\n"
    );
    let settings = Settings::parse(&text, "f.toml", &env).unwrap();
    assert!(matches!(settings.database, DatabaseUrl::Postgres(_)));
    assert_eq!(settings.listen, "0.0.0.0:9000");
}

#[test]
fn bad_configuration_names_the_key_and_the_file() {
    let cases = [
        (
            "[endpoints.a]\nprovider = \"paypal\"\nsecrets = [\"x\"]\n",
            "`endpoints.a.provider`",
        ),
        (
            "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"whsec_!!\"]\n",
            "`endpoints.a.secrets`",
        ),
        (
            &format!(
                "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\ntolerance = \"soon\"\n"
            ),
            "`endpoints.a.tolerance`",
        ),
        ("retention = \"three days\"\n", "`retention`"),
        ("listen = \"localhost\"\n", "`listen`"),
        (
            "[idempotency]\nmismatch_status = 400\n",
            "`idempotency.mismatch_status`",
        ),
        ("database_url = \"mysql://x\"\n", "`database_url`"),
        (
            "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets_env = \"NOPE\"\n",
            "`endpoints.a.secrets_env`",
        ),
    ];
    for (text, key) in cases {
        let message = parse(text).unwrap_err().to_string();
        assert!(message.starts_with("receiver.toml: "), "{message}");
        assert!(message.contains(key), "{message} should name {key}");
    }
    let message = parse("retension = \"72h\"\n").unwrap_err().to_string();
    assert!(
        message.contains("receiver.toml") && message.contains("retension"),
        "{message}"
    );
}

#[test]
fn a_malformed_secret_is_never_echoed() {
    let message = parse(
        "[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"whsec_sup3r$ecret\"]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(!message.contains("sup3r"), "{message}");
}

#[test]
fn debug_of_the_settings_shows_no_secret_password_or_token() {
    let text = format!(
        "database_url = \"postgres://app:db-pass-1@db/ir?password=db-pass-2\"\n[forwarders.ship]\nurl = \"https://svc:fwd-pass@ship.test/events\"\n[endpoints.a]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nsecrets_env = \"A_SECRETS\"\n[endpoints.g]\nprovider = \"github\"\nsecrets = [\"gh-plain-secret\"]\n"
    );
    let env = |name: &str| {
        (name == "A_SECRETS").then(|| "whsec_c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg=".to_owned())
    };
    let settings = Settings::parse(&text, "receiver.toml", &env).unwrap();
    let debug = format!("{settings:?}");
    for secret in [
        "db-pass-1",
        "db-pass-2",
        "fwd-pass",
        &SECRET[6..],
        "c2VjcmV0LW51bWJlci10d28tMTIzNDU2Nzg",
        "gh-plain-secret",
    ] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
    }
    let spec = ProviderSpec {
        secrets: vec!["spec-secret".into()],
        ..ProviderSpec::default()
    };
    assert!(!format!("{spec:?}").contains("spec-secret"));
}

#[test]
fn purge_settings_have_defaults_and_zero_turns_the_task_off() {
    let defaults = parse("").unwrap();
    assert_eq!(defaults.purge, PurgeSettings::default());
    assert_eq!(defaults.purge.interval, Some(Duration::from_secs(600)));
    assert_eq!(defaults.purge.batch, 1000);
    assert_eq!(defaults.purge.pause, Duration::from_millis(50));

    let set = parse("purge_interval = \"1h\"\npurge_batch = 250\npurge_pause = \"0\"\n").unwrap();
    assert_eq!(set.purge.interval, Some(Duration::from_secs(3600)));
    assert_eq!(set.purge.batch, 250);
    assert_eq!(set.purge.pause, Duration::ZERO);

    assert_eq!(
        parse("purge_interval = \"0\"\n").unwrap().purge.interval,
        None
    );
}

#[test]
fn an_endpoint_may_keep_its_keys_longer_or_shorter_than_the_rest() {
    let text = format!(
        "retention = \"48h\"\n[endpoints.a]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\nretention = \"96h\"\n[endpoints.b]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\n"
    );
    let settings = parse(&text).unwrap();
    let a = settings.endpoint("a").unwrap();
    let b = settings.endpoint("b").unwrap();
    assert_eq!(a.retention, Some(Duration::from_secs(96 * 3600)));
    assert_eq!(b.retention, None);
    assert_eq!(settings.retention_of(a), Duration::from_secs(96 * 3600));
    assert_eq!(settings.retention_of(b), Duration::from_secs(48 * 3600));
}

#[test]
fn bad_purge_and_retention_settings_name_the_key_and_the_file() {
    let endpoint = |extra: &str| {
        format!("[endpoints.a]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\n{extra}")
    };
    let cases = [
        (
            "purge_interval = \"often\"\n".to_owned(),
            "`purge_interval`",
        ),
        ("purge_pause = \"-1s\"\n".to_owned(), "`purge_pause`"),
        ("purge_batch = 0\n".to_owned(), "`purge_batch`"),
        ("purge_batch = 10001\n".to_owned(), "`purge_batch`"),
        ("purge_batch = -5\n".to_owned(), "`purge_batch`"),
        (
            endpoint("retention = \"a while\"\n"),
            "`endpoints.a.retention`",
        ),
    ];
    for (text, key) in cases {
        let message = parse(&text).unwrap_err().to_string();
        assert!(message.starts_with("receiver.toml: "), "{message}");
        assert!(message.contains(key), "{message} should name {key}");
    }
}

#[test]
fn admin_tokens_come_from_the_file_and_the_environment_and_a_bad_one_is_named_not_echoed() {
    let env =
        |name: &str| (name == "IR_ADMIN_TOKENS").then(|| "tok_from_env_0123456789".to_owned());
    let text = "admin_tokens = [\"tok_from_file_0123456789\"]\nadmin_listen = \"127.0.0.1:0\"\n";
    let settings = Settings::parse(text, "receiver.toml", &env).unwrap();
    assert!(settings.admin.tokens.accepts(b"tok_from_file_0123456789"));
    assert!(settings.admin.tokens.accepts(b"tok_from_env_0123456789"));
    assert_eq!(settings.admin.listen.as_deref(), Some("127.0.0.1:0"));
    assert!(!format!("{settings:?}").contains("tok_from_"));
    assert!(!parse("").unwrap().admin.enabled(), "no default token");

    let message = parse("admin_tokens = [\"tiny-1\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("receiver.toml: `admin_tokens`"),
        "{message}"
    );
    assert!(!message.contains("tiny-1"), "{message}");
    let env = |name: &str| (name == "IR_ADMIN_TOKENS").then(|| "tiny-2".to_owned());
    let message = Settings::parse("", "receiver.toml", &env)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("environment: `IR_ADMIN_TOKENS`"),
        "{message}"
    );
    assert!(!message.contains("tiny-2"), "{message}");
}

#[test]
fn admin_tokens_may_be_named_and_a_wrong_key_is_named_without_the_token() {
    let text = "admin_tokens = [{name = \"ops\", token = \"tok_named_0123456789\"}, \"tok_plain_0123456789\"]\n";
    let settings = parse(text).unwrap();
    let named = settings.admin.tokens.matching(b"tok_named_0123456789");
    assert_eq!(named.and_then(|t| t.name.as_deref()), Some("ops"));
    let plain = settings.admin.tokens.matching(b"tok_plain_0123456789");
    assert_eq!(plain.map(|t| t.name.is_none()), Some(true));
    assert!(!format!("{settings:?}").contains("tok_"));

    let message = parse(
        "admin_tokens = [{name = \"ops\", token = \"tok_named_0123456789\", role = \"x\"}]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(message.starts_with("receiver.toml: "), "{message}");
    assert!(message.contains("role"), "{message}");
    assert!(!message.contains("tok_named"), "{message}");
    let message = parse("admin_tokens = [{name = \"o/ps\", token = \"tok_named_0123456789\"}]\n")
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("receiver.toml: `admin_tokens`"),
        "{message}"
    );
    assert!(!message.contains("tok_named"), "{message}");
}

#[test]
fn endpoints_without_their_own_retention_fall_under_the_default() {
    let text = "retention = \"2h\"\n\
        [endpoints.slow]\nprovider = \"github\"\nsecrets = [\"s\"]\nretention = \"96h\"\n\
        [endpoints.plain]\nprovider = \"github\"\nsecrets = [\"s\"]\n";
    let settings = Settings::parse(text, "t.toml", &no_env).unwrap();
    let policy = settings.retention_policy();
    assert_eq!(policy.default, Duration::from_secs(2 * 3600));
    assert_eq!(policy.endpoints.len(), 1);
    assert_eq!(policy.retention_of("slow"), Duration::from_secs(96 * 3600));
    assert_eq!(policy.retention_of("plain"), Duration::from_secs(2 * 3600));
    assert_eq!(
        policy.retention_of("POST /payments"),
        Duration::from_secs(2 * 3600)
    );
}

#[test]
fn sqlite_group_commit_is_on_by_default_and_can_be_switched_off_or_bounded() {
    let defaults = parse("").unwrap();
    assert_eq!(defaults.group_commit, GroupCommitOptions::default());
    assert!(defaults.group_commit.enabled);

    let off = parse("sqlite_group_commit = false").unwrap();
    assert!(!off.group_commit.enabled);

    let bounded = parse("sqlite_group_commit_max = 8\nsqlite_group_commit_wait = \"2ms\"").unwrap();
    assert_eq!(bounded.group_commit.max_members, 8);
    assert_eq!(bounded.group_commit.max_wait, Duration::from_millis(2));

    let lingering = parse("sqlite_group_commit_linger = \"1ms\"").unwrap();
    assert_eq!(lingering.group_commit.linger, Duration::from_millis(1));
    let no_linger = parse("sqlite_group_commit_linger = \"0\"").unwrap();
    assert_eq!(no_linger.group_commit.linger, Duration::ZERO);
    assert_eq!(defaults.group_commit.linger, Duration::from_micros(250));

    let error = parse("sqlite_group_commit_max = 0")
        .unwrap_err()
        .to_string();
    assert!(error.contains("sqlite_group_commit_max"), "{error}");
}

#[test]
fn postgres_group_commit_is_on_by_default_and_can_be_switched_off_or_bounded() {
    let defaults = parse("").unwrap();
    assert_eq!(
        defaults.postgres_group_commit,
        crate::store::PgGroupCommitOptions::default()
    );
    assert!(defaults.postgres_group_commit.enabled);
    assert_eq!(defaults.postgres_group_commit.max_members, 64);

    let off = parse("postgres_group_commit = false").unwrap();
    assert!(!off.postgres_group_commit.enabled);
    let bounded = parse("postgres_group_commit_max = 8").unwrap();
    assert_eq!(bounded.postgres_group_commit.max_members, 8);

    for bad in [
        "postgres_group_commit_max = 0",
        "postgres_group_commit_max = 1001",
    ] {
        let error = parse(bad).unwrap_err().to_string();
        assert!(error.contains("postgres_group_commit_max"), "{error}");
    }
}
