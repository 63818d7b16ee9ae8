//! The committed fixtures are what `idempotent-receiver fixtures` makes, and
//! the real endpoint gives each the answer it expects.

use crate::helpers::{Backend, TestApp};
use crate::signed_fixtures::{self as fixtures, Fixture, NOW};
use std::path::{Path, PathBuf};

fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn committed() -> Vec<Fixture> {
    let mut all = Vec::new();
    for source in fixtures::sources() {
        let folder = committed_dir().join(&source.provider);
        let mut names: Vec<_> = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        names.sort();
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap();
            all.push(
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            );
        }
    }
    all
}

/// A receiver with one `fx-<provider>` endpoint per provider, verifying at the
/// fixtures' own instant.
pub async fn fixture_app(backend: Backend) -> Option<TestApp> {
    TestApp::builder(backend)
        .endpoints_toml(&fixtures::endpoints_toml())
        .verify_at(NOW)
        .spawn_if_available()
        .await
}

#[test]
fn the_committed_fixtures_are_exactly_what_the_fixtures_command_writes() {
    let fresh = tempfile::tempdir().unwrap();
    let written = fixtures::write_all(fresh.path()).unwrap();
    assert!(written >= 2 * fixtures::sources().len(), "{written}");
    for source in fixtures::sources() {
        for entry in std::fs::read_dir(fresh.path().join(&source.provider)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(fresh.path()).unwrap();
            let committed =
                std::fs::read_to_string(committed_dir().join(name)).unwrap_or_else(|_| {
                    panic!(
                        "tests/fixtures/{} is missing: run `cargo run -- fixtures`",
                        name.display()
                    )
                });
            assert_eq!(
                committed,
                std::fs::read_to_string(&path).unwrap(),
                "tests/fixtures/{} is stale: run `cargo run -- fixtures`",
                name.display()
            );
        }
    }
}

async fn every_fixture_gets_its_expected_answer(backend: Backend) {
    let Some(app) = fixture_app(backend).await else {
        return;
    };
    let all = committed();
    for source in fixtures::sources() {
        let cases: Vec<&str> = all
            .iter()
            .filter(|f| f.provider == source.provider)
            .map(|f| f.case.as_str())
            .collect();
        assert!(
            cases.contains(&"valid") && cases.contains(&"wrong-secret"),
            "{cases:?}"
        );
        assert_eq!(
            cases.contains(&"tampered"),
            source.body_signed,
            "{}",
            source.provider
        );
        assert_eq!(
            cases.contains(&"stale"),
            source.timestamped,
            "{}",
            source.provider
        );
    }
    // Refusals first: they must store nothing, so the valid ones still run.
    let (valid, refused): (Vec<&Fixture>, Vec<&Fixture>) =
        all.iter().partition(|f| f.case == "valid");
    for fixture in refused.iter().chain(valid.iter()) {
        let response = app
            .post_signed(
                &fixture.endpoint,
                &fixture.headers,
                &fixture.query,
                fixture.body.clone().into_bytes(),
            )
            .await;
        let what = format!("{} {}", fixture.provider, fixture.case);
        assert_eq!(response.status(), fixture.expect.status, "{what}");
        let text = response.text().await.unwrap();
        match &fixture.expect.problem {
            Some(kind) => {
                let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    body["type"],
                    format!("urn:idempotent-receiver:problem:{kind}"),
                    "{what}"
                )
            }
            // A provider that dictates its acknowledgement (Adyen's
            // `[accepted]`) gets exactly that.
            None => match fixture.acknowledgement() {
                Some(ack) => assert_eq!(text, ack, "{what}"),
                None => {
                    let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(body["status"], "processed", "{what}: {text}")
                }
            },
        }
        if fixture.case != "valid" {
            assert_eq!(app.count("deliveries").await, 0, "{what} stored a delivery");
        }
    }
    assert_eq!(
        app.count("deliveries").await,
        fixtures::sources().len() as i64
    );
    assert_eq!(app.count("events").await, fixtures::sources().len() as i64);
    // Every fixture whose payload carries a payment moved money once.
    assert!(app.ledger_rows().await >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_gets_its_expected_answer_sqlite() {
    every_fixture_gets_its_expected_answer(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_gets_its_expected_answer_postgres() {
    every_fixture_gets_its_expected_answer(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fixture_clock_a_recorded_delivery_is_stale() {
    // The tolerance stays on in production paths: only the injected clock
    // lets an old recording verify.
    let live = TestApp::builder(Backend::Sqlite)
        .endpoints_toml(&fixtures::endpoints_toml())
        .spawn()
        .await;
    let stripe = committed()
        .into_iter()
        .find(|f| f.provider == "stripe" && f.case == "valid")
        .unwrap();
    let response = live
        .post_to(&stripe.endpoint, &stripe.headers, stripe.body.into_bytes())
        .await;
    crate::helpers::problem(response, 401, "stale-timestamp").await;
}
