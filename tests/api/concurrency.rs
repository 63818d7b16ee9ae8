use crate::both_backends;
use crate::helpers::{TestApp, now, payment};
use futures_util::future::join_all;

/// Sends `copies` deliveries of the same id and body at once, each signed
/// with its own timestamp, and checks the contract: exactly one ledger row,
/// every answer the stored 2xx or a 409, all 2xx bodies identical.
async fn storm(app: &TestApp, copies: usize) {
    let body = payment("pay_storm", 5000);
    let requests = (0..copies).map(|i| {
        let headers = app.signed_headers("msg_storm", now() - i as i64, &body);
        let body = body.clone();
        async move {
            let response = app.post(&headers, body).await;
            let status = response.status().as_u16();
            (status, response.bytes().await.unwrap())
        }
    });
    let answers = join_all(requests).await;

    let mut ok_bodies = answers
        .iter()
        .filter(|(s, _)| (200..300).contains(s))
        .map(|(_, b)| b);
    let first = ok_bodies
        .next()
        .expect("at least one delivery succeeded")
        .clone();
    assert!(
        ok_bodies.all(|b| *b == first),
        "every 2xx body is the stored one"
    );
    for (status, body) in &answers {
        assert!(
            *status == 200 || *status == 409,
            "unexpected {status}: {}",
            String::from_utf8_lossy(body)
        );
    }
    assert_eq!(app.ledger_rows().await, 1, "exactly one effect");
    assert_eq!(app.count("events").await, 1);
    let row = app.delivery("msg_storm").await.unwrap();
    assert_eq!(row.status, "completed");
    assert_eq!(row.attempts, 1);
}

both_backends! {
    async fn two_parallel_duplicates_have_exactly_one_effect(app) {
        storm(app, 2).await;
    }
}

both_backends! {
    async fn sixty_four_parallel_duplicates_have_exactly_one_effect(app) {
        storm(app, 64).await;
    }
}

both_backends! {
    async fn parallel_distinct_deliveries_each_have_their_effect(app) {
        let requests = (0..32).map(|i| {
            let body = payment(&format!("pay_{i}"), 100 + i);
            async move { app.deliver(&format!("msg_{i}"), &body).await.status().as_u16() }
        });
        let statuses = join_all(requests).await;
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        assert_eq!(app.ledger_rows().await, 32);
    }
}
