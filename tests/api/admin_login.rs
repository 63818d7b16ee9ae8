//! Abuse of the admin log-in, on both backends: a burst of wrong tokens is
//! limited per address and for everybody (429 with `Retry-After`, counted on
//! `/metrics`), the right token is refused while limited, and the page's
//! log-in and log-out refuse cross-site posts.

use crate::both_backends_with;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestAppBuilder, problem};
use std::net::{IpAddr, Ipv4Addr};

const WRONG: &str = "tok_wrong_0123456789abcdef";

fn admin(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin()
}

/// Three wrong tokens from all addresses together, a whole hour to refill;
/// each address alone could try many more.
fn admin_with_a_small_global_limit(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .admin()
        .top_level("[admin_login]\nglobal_burst = 3\nglobal_refill = \"1h\"\naddress_burst = 50")
}

/// A client that sees redirects and cookies as they are, from `address`.
fn client_from(address: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(address)
        .build()
        .expect("a client")
}

fn client() -> reqwest::Client {
    client_from(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// POSTs the log-in form with `token` and extra headers.
async fn log_in(
    app: &TestApp,
    client: &reqwest::Client,
    token: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client
        .post(format!("{}/admin/login", app.admin_address))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("the receiver answers")
}

async fn log_out(app: &TestApp, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/admin/logout", app.admin_address))
        .header("cookie", "ir_admin_session=1.00");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("the receiver answers")
}

/// `ir_admin_login_limited_total{scope="..."}` now (the recorder is one per
/// process, so tests compare before and after).
async fn limited_count(app: &TestApp, scope: &str) -> f64 {
    let text = client()
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .expect("the receiver answers")
        .text()
        .await
        .expect("a body");
    let series = format!("ir_admin_login_limited_total{{scope=\"{scope}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0.0, |value| value.trim().parse().expect("a number"))
}

fn retry_after(response: &reqwest::Response) -> u64 {
    response.headers()["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds")
}

both_backends_with!(admin;
    async fn a_burst_of_wrong_tokens_is_limited_per_address_and_then_even_the_right_token_is_refused(app) {
        let before = limited_count(app, "address").await;
        let client = client();
        // The default: ten wrong tokens from one address, at once.
        for attempt in 0..10 {
            let response = log_in(app, &client, WRONG, &[]).await;
            assert_eq!(response.status(), 401, "attempt {attempt}");
        }
        let limited = log_in(app, &client, WRONG, &[]).await;
        assert_eq!(limited.status(), 429);
        let wait = retry_after(&limited);
        assert!((1..=6).contains(&wait), "Retry-After: {wait}");
        assert!(limited.headers().get("set-cookie").is_none());
        let page = limited.text().await.unwrap();
        assert!(page.contains("Too many wrong tokens"), "{page}");

        // The right token is not even looked at now: no cookie.
        let right = log_in(app, &client, ADMIN_TOKEN, &[]).await;
        assert_eq!(right.status(), 429);
        assert!(right.headers().get("set-cookie").is_none());

        // The API shares the limit: bearer tokens are guesses too.
        for token in [WRONG, ADMIN_TOKEN] {
            let response = app.admin_get("/admin/deliveries", Some(token)).await;
            assert!(response.headers().contains_key("retry-after"));
            problem(response, 429, "too-many-attempts").await;
        }
        assert!(limited_count(app, "address").await >= before + 4.0);
    }
);

both_backends_with!(admin;
    async fn wrong_bearer_tokens_on_the_api_are_limited_and_a_right_one_gives_its_attempt_back(app) {
        // Right tokens cost nothing, however many.
        for _ in 0..30 {
            assert_eq!(app.admin_get("/admin/stats", Some(ADMIN_TOKEN)).await.status(), 200);
        }
        // No token at all is not a guess.
        for _ in 0..30 {
            assert_eq!(app.admin_get("/admin/stats", None).await.status(), 401);
        }
        for attempt in 0..10 {
            let response = app.admin_get("/admin/stats", Some(WRONG)).await;
            assert_eq!(response.status(), 401, "attempt {attempt}");
        }
        let limited = app.admin_get("/admin/stats", Some(ADMIN_TOKEN)).await;
        assert!(retry_after(&limited) >= 1);
        let body = problem(limited, 429, "too-many-attempts").await;
        assert!(body["detail"].as_str().unwrap().contains("this address"), "{body}");
        // The page's log-in is limited for this address as well.
        assert_eq!(log_in(app, &client(), ADMIN_TOKEN, &[]).await.status(), 429);
    }
);

both_backends_with!(admin_with_a_small_global_limit;
    async fn wrong_tokens_from_many_addresses_reach_the_global_limit(app) {
        let before = limited_count(app, "global").await;
        // Loopback answers for all of 127/8: three addresses, one guess each.
        for last in 2..5 {
            let client = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)));
            assert_eq!(log_in(app, &client, WRONG, &[]).await.status(), 401);
        }
        // A fourth address, with the right token, finds the surface limited.
        let fresh = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5)));
        let limited = log_in(app, &fresh, ADMIN_TOKEN, &[]).await;
        assert_eq!(limited.status(), 429);
        assert!(retry_after(&limited) > 3000, "an hour's refill");
        assert!(limited.headers().get("set-cookie").is_none());
        let response = fresh
            .get(format!("{}/admin/stats", app.admin_address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        let body = problem(response, 429, "too-many-attempts").await;
        assert!(body["detail"].as_str().unwrap().contains("all addresses"), "{body}");
        assert!(limited_count(app, "global").await >= before + 2.0);
    }
);

both_backends_with!(admin;
    async fn a_cross_site_log_in_gets_403_and_no_cookie_and_a_same_origin_one_logs_in(app) {
        let client = client();
        let own = app.admin_address.clone();
        for headers in [
            vec![("origin", "http://evil.example")],
            vec![("origin", "null")],
            vec![("sec-fetch-site", "cross-site")],
            vec![("sec-fetch-site", "same-site"), ("origin", own.as_str())],
        ] {
            let response = log_in(app, &client, ADMIN_TOKEN, &headers).await;
            assert!(response.headers().get("set-cookie").is_none(), "{headers:?}");
            problem(response, 403, "cross-site-request").await;
        }
        // A browser's same-origin post (its origin hidden as `null` under the
        // page's `Referrer-Policy: no-referrer`, or not), and curl's post
        // with neither header.
        for headers in [
            vec![("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
            vec![("origin", "null"), ("sec-fetch-site", "same-origin")],
            vec![],
        ] {
            let response = log_in(app, &client, ADMIN_TOKEN, &headers).await;
            assert_eq!(response.status(), 303, "{headers:?}");
            let cookie = response.headers()["set-cookie"].to_str().unwrap();
            assert!(cookie.starts_with("ir_admin_session="), "{cookie}");
        }
    }
);

both_backends_with!(admin;
    async fn a_cross_site_log_out_gets_403_and_keeps_the_cookie_and_a_same_origin_one_clears_it(app) {
        for headers in [
            vec![("origin", "http://evil.example")],
            vec![("sec-fetch-site", "cross-site")],
        ] {
            let response = log_out(app, &headers).await;
            assert!(response.headers().get("set-cookie").is_none(), "{headers:?}");
            problem(response, 403, "cross-site-request").await;
        }
        let own = app.admin_address.clone();
        for headers in [
            vec![("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
            vec![],
        ] {
            let response = log_out(app, &headers).await;
            assert_eq!(response.status(), 303, "{headers:?}");
            let cookie = response.headers()["set-cookie"].to_str().unwrap();
            assert!(cookie.starts_with("ir_admin_session=;"), "{cookie}");
        }
    }
);
