//! The replay cache: completed keys answered from memory, under the rules
//! the database path keeps (fingerprint, retention), on both backends. The
//! outage test (`outage.rs`) shows a cached key answered while PostgreSQL
//! is unreachable.

use crate::helpers::{ENDPOINT, SECRET, TestAppBuilder, payment, problem};
use crate::{both_backends, both_backends_with};
use std::time::Duration;

/// An endpoint whose keys are remembered for one second, with an
/// idempotent handler (`record` upserts), so that running a key again after
/// its retention is not a doubled effect.
fn brief(builder: TestAppBuilder) -> TestAppBuilder {
    builder.endpoints_toml(&format!(
        "[endpoints.brief]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\"]\nretention = \"1s\"\n"
    ))
}

fn without_cache(builder: TestAppBuilder) -> TestAppBuilder {
    builder.top_level("replay_cache_bytes = 0")
}

fn replayed(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

both_backends_with! { brief;
    async fn a_completed_key_is_remembered_at_once_and_forgotten_at_its_retention(app) {
        let body = payment("pay_brief", 10);
        let first = app.deliver_to("brief", "msg_brief", &body).await;
        assert_eq!(first.status(), 200);
        assert!(!replayed(&first));
        let first_body = first.bytes().await.unwrap();
        // The completion itself filled the cache: duplicates queued behind
        // the first copy need no database read.
        let cached = app
            .store
            .replay_cache()
            .get("brief", "msg_brief")
            .expect("the completion is cached");
        assert_eq!(cached.response().body, first_body.to_vec());

        let again = app.deliver_to("brief", "msg_brief", &body).await;
        assert_eq!(again.status(), 200);
        assert!(replayed(&again));
        assert_eq!(again.bytes().await.unwrap(), first_body);

        // Past the retention the cached entry is still in memory (its TTL
        // is 60 s), but the key is forgotten: the delivery runs again.
        app.clock.advance(Duration::from_millis(1200));
        assert!(app.store.replay_cache().get("brief", "msg_brief").is_some());
        let after = app.deliver_to("brief", "msg_brief", &body).await;
        assert_eq!(after.status(), 200);
        assert!(!replayed(&after), "past the retention a repeat runs again");
        let mut conn = app.store.conn().await.expect("a connection");
        let row = conn
            .find_delivery("brief", "msg_brief")
            .await
            .expect("the read runs")
            .expect("the row");
        assert!(
            row.received_at > cached.received_at,
            "the key was claimed anew: {} after {}",
            row.received_at,
            cached.received_at
        );
    }
}

both_backends_with! { brief;
    async fn another_body_under_a_cached_key_is_refused_and_changes_nothing(app) {
        let body = payment("pay_reuse", 10);
        assert_eq!(app.deliver("msg_reuse", &body).await.status(), 200);
        assert!(app.store.replay_cache().get(crate::helpers::ENDPOINT, "msg_reuse").is_some());

        let other = payment("pay_other", 99);
        problem(app.deliver("msg_reuse", &other).await, 409, "key-reused").await;
        assert_eq!(app.ledger_rows().await, 1);
        let again = app.deliver("msg_reuse", &body).await;
        assert_eq!(again.status(), 200);
        assert!(replayed(&again), "the first body still replays");
    }
}

both_backends! {
    async fn a_cached_key_past_its_ttl_is_read_again_from_the_database(app) {
        let body = payment("pay_ttl", 10);
        assert_eq!(app.deliver("msg_ttl", &body).await.status(), 200);
        let cache = app.store.replay_cache();
        assert!(cache.get(ENDPOINT, "msg_ttl").is_some());
        // The TTL is 60 s: another instance's reprocess is seen by then.
        app.clock.advance(Duration::from_secs(59));
        assert!(cache.get(ENDPOINT, "msg_ttl").is_some(), "within the TTL");
        app.clock.advance(Duration::from_secs(1));
        assert!(cache.get(ENDPOINT, "msg_ttl").is_none(), "past the TTL");
        // The key itself is remembered (retention 72 h): the database
        // answers the repeat, and the cache holds it again.
        let again = app.deliver("msg_ttl", &body).await;
        assert!(replayed(&again));
        assert!(cache.get(ENDPOINT, "msg_ttl").is_some());
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends_with! { without_cache;
    async fn with_no_cache_budget_replays_come_from_the_database(app) {
        let body = payment("pay_nocache", 10);
        let first = app.deliver("msg_nocache", &body).await;
        assert_eq!(first.status(), 200);
        let first_body = first.bytes().await.unwrap();
        assert!(app.store.replay_cache().get(crate::helpers::ENDPOINT, "msg_nocache").is_none());
        assert!(app.store.replay_cache().is_empty());
        let again = app.deliver("msg_nocache", &body).await;
        assert!(replayed(&again));
        assert_eq!(again.bytes().await.unwrap(), first_body);
        assert_eq!(app.ledger_rows().await, 1);
    }
}

both_backends! {
    async fn an_exact_repeat_is_answered_before_its_body_is_parsed(app) {
        // A completed key whose cached fingerprint is this very body's, and
        // a body that is not JSON: only an answer that never parsed it can
        // be the stored 200. (The key comes from `webhook-id`, signed.)
        use idempotent_receiver::clock::Clock;
        use sha2::{Digest, Sha256};
        let body = b"not JSON, and never parsed".to_vec();
        let stored = idempotent_receiver::store::StoredResponse {
            status: 200,
            content_type: "application/json".into(),
            body: bytes::Bytes::from_static(b"{\"seeded\":true}"),
            location: None,
        };
        app.store.replay_cache().remember(
            ENDPOINT,
            "msg_early",
            &hex::encode(Sha256::digest(&body)),
            app.clock.now().naive_utc(),
            Some("payment.succeeded"),
            &stored,
        );
        let early = app.deliver("msg_early", &body).await;
        assert_eq!(early.status(), 200);
        assert!(replayed(&early));
        assert_eq!(early.bytes().await.unwrap(), &b"{\"seeded\":true}"[..]);

        // Another body under the key takes the full path, which parses it
        // and refuses it as before; a bad signature is refused before the
        // cache is asked.
        problem(app.deliver("msg_early", b"also not JSON").await, 400, "malformed-body").await;
        let mut forged = app.signed_headers("msg_early", app.now(), &body);
        for (name, value) in &mut forged {
            if name == "webhook-signature" {
                *value = "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into();
            }
        }
        assert_eq!(app.post(&forged, body.clone()).await.status(), 401);
        assert!(app.delivery("msg_early").await.is_none(), "nothing was stored");

        // A real completion leaves its event type in the cache, for the log
        // line of the repeats answered this way.
        let real = payment("pay_early", 10);
        assert_eq!(app.deliver("msg_real", &real).await.status(), 200);
        let hit = app.store.replay_cache().get(ENDPOINT, "msg_real").expect("cached");
        assert_eq!(hit.event_type(), Some("payment.succeeded"));
        let again = app.deliver("msg_real", &real).await;
        assert!(replayed(&again));
        assert_eq!(app.ledger_rows().await, 1);
    }
}
