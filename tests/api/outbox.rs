//! The transactional outbox through the real endpoint, on both backends,
//! with a broker that cannot be reached: the publication is written in the
//! delivery's transaction (rolled back with a failed or refused delivery,
//! committed with a processed one), once per delivery however many copies
//! arrive at once, in queued mode by the worker rather than at the
//! acknowledgement, and retried with backoff under the injected clock until
//! `max_attempts` leaves it `failed`. What reaches each real broker is in
//! `outbox_brokers.rs`.

use crate::both_backends_with;
use crate::helpers::{SECRET, TestApp, TestAppBuilder, payment};
use crate::queue::FailFirst;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::maintenance::{PublisherRelay, RelaySettings, relay_due, run_due};
use idempotent_receiver::store::DbConn;
use idempotent_receiver::store::outbox::{PublicationFilter, PublicationRow};
use serde_json::Value;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// A publisher no broker answers for: port 1 refuses every connection.
/// This app relays nothing itself (`outbox_relay = false`): the tests drive
/// the relay by hand.
pub(crate) const UNREACHABLE: &str = "[publishers.bus]\nkind = \"nats\"\nurl = \"nats://127.0.0.1:1\"\nretry_backoff = \"10s\"\nretry_backoff_max = \"40s\"\nmax_attempts = 3\n";

fn publishing(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .top_level("outbox_relay = false")
        .handler_name("publish:bus")
        .endpoints_toml(UNREACHABLE)
}

/// Refuses every event for good: its effects roll back, a 422 is stored.
struct RefuseAll;

#[async_trait::async_trait(?Send)]
impl Handler for RefuseAll {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        Err(HandlerError::Rejected("no amount".into()))
    }
}

fn publishing_then_failing(builder: TestAppBuilder) -> TestAppBuilder {
    publishing(builder).handler("fail-first", FailFirst(AtomicUsize::new(1)))
}

fn publishing_then_refusing(builder: TestAppBuilder) -> TestAppBuilder {
    publishing(builder).handler("refuse", RefuseAll)
}

pub(crate) async fn publications(app: &TestApp) -> Vec<PublicationRow> {
    let filter = PublicationFilter {
        states: Some(vec!["pending".into(), "sent".into(), "failed".into()]),
        ..PublicationFilter::default()
    };
    let mut conn = app.store.conn().await.unwrap();
    conn.publications(&filter, 10_000).await.unwrap()
}

both_backends_with! { publishing;
    async fn a_processed_delivery_commits_its_publication(app) {
        let body = payment("pay_o1", 1500);
        let response = app.deliver("msg_o1", &body).await;
        assert_eq!(response.status(), 200);
        let stored: Value = response.json().await.unwrap();
        assert_eq!(stored["effects"]["publish:bus"]["message_id"], "shop:msg_o1");
        assert_eq!(stored["effects"]["publish:bus"]["destination"], "webhooks.shop.payment.succeeded");

        let rows = publications(app).await;
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!((row.publisher.as_str(), row.endpoint.as_str(), row.delivery_id.as_str()), ("bus", "shop", "msg_o1"));
        assert_eq!(row.state, "pending");
        assert_eq!(row.message_id, "shop:msg_o1");

        // The envelope is CloudEvents 1.0 with the verified payload as data.
        let mut conn = app.store.conn().await.unwrap();
        let body_json = outbox_body(&mut conn, row.id).await;
        assert_eq!(body_json["specversion"], "1.0");
        assert_eq!(body_json["id"], "shop:msg_o1");
        assert_eq!(body_json["source"], "/webhooks/shop");
        assert_eq!(body_json["type"], "standard-webhooks.payment.succeeded");
        assert_eq!(body_json["datacontenttype"], "application/json");
        let sent: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body_json["data"], sent);

        // A redelivery replays; nothing more is written.
        assert_eq!(app.deliver("msg_o1", &body).await.status(), 200);
        assert_eq!(publications(app).await.len(), 1);
    }
}

/// The stored envelope of outbox row `id`.
pub(crate) async fn outbox_body(conn: &mut DbConn, id: i64) -> Value {
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    use idempotent_receiver::store::schema::outbox;
    let body: Vec<u8> = idempotent_receiver::with_conn!(conn, |c| {
        outbox::table
            .filter(outbox::id.eq(id))
            .select(outbox::body)
            .first(c)
            .await
    })
    .unwrap();
    serde_json::from_slice(&body).unwrap()
}

both_backends_with! { publishing_then_failing;
    async fn a_failed_delivery_rolls_its_publication_back(app) {
        let body = payment("pay_o2", 1500);
        // The handler after `publish:bus` fails once: the transaction rolls
        // back, the publication with it, and the key is released.
        assert_eq!(app.deliver("msg_o2", &body).await.status(), 500);
        assert!(publications(app).await.is_empty());
        // The provider's retry runs everything again and commits once.
        assert_eq!(app.deliver("msg_o2", &body).await.status(), 200);
        let rows = publications(app).await;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].delivery_id, "msg_o2");
    }
}

both_backends_with! { publishing_then_refusing;
    async fn a_refused_delivery_publishes_nothing(app) {
        let response = app.deliver("msg_o3", &payment("pay_o3", 1)).await;
        assert_eq!(response.status(), 422);
        assert!(publications(app).await.is_empty());
    }
}

both_backends_with! { publishing;
    async fn a_storm_of_64_copies_writes_one_publication(app) {
        let body = payment("pay_storm", 700);
        let answers = futures_util::future::join_all(
            (0..64).map(|_| app.deliver("msg_storm", &body)),
        )
        .await;
        let statuses: Vec<u16> = answers.iter().map(|r| r.status().as_u16()).collect();
        // Every copy is answered with the processed result or told to retry
        // (409 while the first holds the key); none fails.
        assert!(statuses.iter().all(|s| *s == 200 || *s == 409), "{statuses:?}");
        assert!(statuses.contains(&200));
        let rows = publications(app).await;
        assert_eq!(rows.len(), 1, "one publication for 64 copies");
    }
}

both_backends_with! { publishing;
    async fn an_unconfirmed_publication_is_retried_with_backoff_then_failed(app) {
        assert_eq!(app.deliver("msg_o4", &payment("pay_o4", 10)).await.status(), 200);
        let relay = PublisherRelay::new(app.settings.publishers[0].clone());
        let settings = RelaySettings::default();

        // Attempt 1 fails at once (nothing listens on port 1).
        let report = relay_due(&app.store, &relay, &settings).await.unwrap();
        assert_eq!((report.retrying, report.published), (1, 0));
        let row = &publications(app).await[0];
        assert_eq!((row.state.as_str(), row.attempts), ("pending", 1));
        assert!(row.last_error.as_deref().is_some_and(|e| e.contains("unavailable")), "{row:?}");

        // Not due before its backoff (10 s), by the injected clock.
        assert_eq!(relay_due(&app.store, &relay, &settings).await.unwrap().taken(), 0);
        app.clock.advance(Duration::from_secs(10));
        assert_eq!(relay_due(&app.store, &relay, &settings).await.unwrap().retrying, 1);
        // The second backoff is doubled: 20 s.
        app.clock.advance(Duration::from_secs(19));
        assert_eq!(relay_due(&app.store, &relay, &settings).await.unwrap().taken(), 0);
        app.clock.advance(Duration::from_secs(1));
        // Attempt 3 of `max_attempts = 3`: the row is failed and waits for
        // an operator.
        assert_eq!(relay_due(&app.store, &relay, &settings).await.unwrap().failed, 1);
        let row = &publications(app).await[0];
        assert_eq!((row.state.as_str(), row.attempts), ("failed", 3));
        app.clock.advance(Duration::from_secs(3600));
        assert_eq!(relay_due(&app.store, &relay, &settings).await.unwrap().taken(), 0);

        // An operator's retry makes it due again, attempts counted afresh.
        let mut conn = app.store.conn().await.unwrap();
        let retried = conn
            .retry_publications(&PublicationFilter::default(), app.store.clock().naive_now())
            .await
            .unwrap();
        assert_eq!(retried, 1);
        drop(conn);
        assert_eq!(relay_due(&app.store, &relay, &settings).await.unwrap().retrying, 1);
    }
}

fn queued_publishing(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .top_level("outbox_relay = false\nqueue_workers = 0")
        .endpoints_toml(&format!(
            "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"publish:bus\"]\nmode = \"queued\"\n{UNREACHABLE}"
        ))
}

both_backends_with! { queued_publishing;
    async fn a_queued_delivery_publishes_when_its_job_runs(app) {
        let response = app.deliver_to("q", "msg_q", &payment("pay_q", 5)).await;
        assert_eq!(response.status(), 202);
        // Acknowledged: the job is committed, the handlers have not run.
        assert!(publications(app).await.is_empty());
        let report = run_due(&app.webhooks, 10).await.unwrap();
        assert_eq!(report.done, 1);
        let rows = publications(app).await;
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].endpoint.as_str(), rows[0].message_id.as_str()), ("q", "q:msg_q"));
    }
}

fn publishing_on_one_connection(builder: TestAppBuilder) -> TestAppBuilder {
    publishing(builder).top_level("pool_size = 1")
}

/// The outbox row's id of `delivery_id`'s publication.
async fn publication_id(app: &TestApp, delivery_id: &str) -> i64 {
    let rows = publications(app).await;
    let mut ids = rows
        .iter()
        .filter(|row| row.delivery_id == delivery_id)
        .map(|row| row.id);
    let id = ids
        .next()
        .unwrap_or_else(|| panic!("no publication of {delivery_id}"));
    assert!(ids.next().is_none(), "one publication of {delivery_id}");
    id
}

both_backends_with! { publishing_on_one_connection;
    /// `publish:` writes its outbox row in the flight of the other
    /// handlers, so that on PostgreSQL an endpoint that publishes still
    /// sends its handlers with the claim. A repeat that the replay cache
    /// does not know loses the claim: its outbox insert ran and was rolled
    /// back, which the outbox's id sequence shows as a gap (`nextval` is
    /// not undone; SQLite shows none), and it left no second row.
    async fn a_publication_flies_with_the_claim_and_a_lost_claims_row_is_rolled_back(app) {
        let postgres = app.database_url.starts_with("postgres");
        // Prepares the claim's statement on the one connection.
        assert_eq!(app.deliver("msg_of_1", &payment("pay_of_1", 100)).await.status(), 200);
        let body = payment("pay_of_2", 200);
        let first = app.deliver("msg_of_2", &body).await;
        assert_eq!(first.status(), 200);
        let answer = first.bytes().await.unwrap();
        let mut last = publication_id(app, "msg_of_2").await;
        let mut fresh = 2;
        let mut gap_seen = false;
        for round in 0..20 {
            app.store.replay_cache().clear();
            let repeat = app.deliver("msg_of_2", &body).await;
            assert_eq!(repeat.status(), 200);
            assert_eq!(repeat.bytes().await.unwrap(), answer, "byte for byte");
            let id = format!("msg_of_next_{round}");
            let response = app.deliver(&id, &payment(&format!("pay_{id}"), 300)).await;
            assert_eq!(response.status(), 200);
            let stored: Value = response.json().await.unwrap();
            assert_eq!(stored["effects"]["publish:bus"]["outbox"], "written");
            fresh += 1;
            let next = publication_id(app, &id).await;
            assert!((last + 1..=last + 2).contains(&next), "{last} then {next}");
            gap_seen |= next > last + 1;
            last = next;
            if gap_seen {
                break;
            }
        }
        assert_eq!(gap_seen, postgres, "only PostgreSQL's lost claim flew");
        assert_eq!(publications(app).await.len(), fresh, "one publication per delivery");
        assert_eq!(app.ledger_rows().await, fresh as i64);
    }
}
