//! The admin page in a real headless Chromium: log in, filter, page, open a
//! key, read it on a phone, log out — asserting on what the page shows.
//! Skipped, with one line, where no Chromium is installed, unless
//! `IR_REQUIRE_BROWSER=1` (as `.ci/run` sets) makes that a failure.

use crate::both_backends_with;
use crate::cdp::{self, Browser};
use crate::helpers::{ADMIN_TOKEN, ENDPOINT, TestApp, TestAppBuilder, payment};
use idempotent_receiver::clock::Clock;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Once;

fn admin(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin()
}

fn browser_required() -> bool {
    std::env::var("IR_REQUIRE_BROWSER").is_ok_and(|v| v == "1" || v == "true")
}

/// Chromium, or `None` after saying once that the browser test is skipped.
pub(crate) fn chromium() -> Option<PathBuf> {
    if let Some(path) = cdp::executable() {
        return Some(path);
    }
    assert!(
        !browser_required(),
        "IR_REQUIRE_BROWSER is set but no Chromium is installed (apt-get install chromium, or set IR_CHROMIUM)"
    );
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "browser tests SKIPPED: no Chromium found (apt-get install chromium, or set IR_CHROMIUM); set IR_REQUIRE_BROWSER=1 to fail instead"
        );
    });
    None
}

async fn seed(app: &TestApp) {
    for i in 0..5 {
        let response = app
            .deliver(
                &format!("msg_w{i}"),
                &payment(&format!("pay_w{i}"), 100 + i),
            )
            .await;
        assert_eq!(response.status(), 200);
    }
    let hostile = json!({ "type": "<img src=x onerror=alert(1)>", "data": {} });
    assert_eq!(
        app.deliver("msg_xss", hostile.to_string().as_bytes())
            .await
            .status(),
        200
    );
    assert_eq!(
        app.deliver_to("other", "msg_o1", &payment("pay_o1", 100))
            .await
            .status(),
        200
    );
    let mut conn = app.store.conn().await.expect("a connection");
    conn.record_history(
        ENDPOINT,
        "msg_w0",
        "released",
        None,
        Some("downstream <b>unreachable</b>"),
        app.clock.naive_now(),
    )
    .await
    .expect("history is written");
}

fn strings(value: Value) -> Vec<String> {
    serde_json::from_value(value).unwrap_or_default()
}

both_backends_with!(admin;
    async fn an_operator_logs_in_filters_pages_and_opens_a_key_in_a_real_browser(app) {
        let Some(executable) = chromium() else {
            return;
        };
        seed(app).await;
        let mut browser = Browser::launch(&executable).await.expect("Chromium starts");
        let admin = app.admin_address.clone();

        // Not logged in: the listing sends the browser to the login form.
        browser.goto(&format!("{admin}/admin")).await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/login");
        browser.fill("#token", "tok_wrong_0123456789abcdef").await.unwrap();
        browser.click("#login").await.unwrap();
        assert_eq!(browser.text("#login-error").await.unwrap(), "That token is not valid.");

        browser.fill("#token", ADMIN_TOKEN).await.unwrap();
        browser.click("#login").await.unwrap();
        // Logged in, the browser lands on the dashboard; the listing is a
        // link away.
        assert_eq!(browser.path().await.unwrap(), "/admin");
        browser.click("#deliveries-link").await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/list");
        // The session cookie is out of scripts' reach and never sent cross-site.
        assert_eq!(browser.eval("document.cookie").await.unwrap(), json!(""));
        let cookies = browser.page("Network.getCookies", json!({})).await.unwrap();
        let cookie = &cookies["cookies"][0];
        assert_eq!(cookie["name"], "ir_admin_session");
        assert_eq!(cookie["httpOnly"], true);
        assert_eq!(cookie["sameSite"], "Strict");
        assert_eq!(cookie["path"], "/admin");
        assert!(!cookie["value"].as_str().unwrap().contains(ADMIN_TOKEN));

        // Every key, newest first, with readable UTC timestamps.
        let all = browser.texts("#deliveries a.delivery-link").await.unwrap();
        assert_eq!(all.len(), 7, "{all:?}");
        assert_eq!(all[0], "msg_o1");
        let received = browser.texts("#deliveries tbody tr td:first-child").await.unwrap();
        for at in &received {
            assert!(
                at.len() == 19 && at.as_bytes()[10] == b' ' && at.as_bytes()[4] == b'-' && at.as_bytes()[13] == b':',
                "not YYYY-MM-DD HH:MM:SS: {at:?}"
            );
        }
        // What a delivery carries is text, never markup.
        let types = browser.texts("#deliveries tbody tr td:nth-child(4)").await.unwrap();
        assert!(types.contains(&"<img src=x onerror=alert(1)>".to_owned()), "{types:?}");
        assert_eq!(browser.eval("document.querySelectorAll('main img').length").await.unwrap(), json!(0));
        let errors = browser.texts("#deliveries td.error").await.unwrap();
        assert!(errors.contains(&"downstream <b>unreachable</b>".to_owned()), "{errors:?}");

        browser.screenshot("listing-1280").await.unwrap();

        // Filter by endpoint.
        browser.fill("select[name=endpoint]", "other").await.unwrap();
        browser.click("#apply").await.unwrap();
        assert_eq!(browser.texts("#deliveries a.delivery-link").await.unwrap(), ["msg_o1"]);
        assert_eq!(browser.eval("document.querySelector('select[name=endpoint]').value").await.unwrap(), json!("other"));

        // Page through one endpoint's keys, two at a time: each once, in order.
        browser.fill("select[name=endpoint]", ENDPOINT).await.unwrap();
        browser.fill("input[name=limit]", "2").await.unwrap();
        browser.click("#apply").await.unwrap();
        let mut seen = Vec::new();
        for page in 0.. {
            assert!(page < 6, "the pages never ended: {seen:?}");
            let rows = browser.texts("#deliveries a.delivery-link").await.unwrap();
            assert!(!rows.is_empty() && rows.len() <= 2, "{rows:?}");
            seen.extend(rows);
            let endpoints = browser.texts("#deliveries tbody tr td:nth-child(2)").await.unwrap();
            assert!(endpoints.iter().all(|e| e == ENDPOINT), "{endpoints:?}");
            if browser.eval("document.querySelector('#next-page') === null").await.unwrap() == json!(true) {
                break;
            }
            browser.click("#next-page").await.unwrap();
            assert_eq!(
                browser.eval("document.querySelector('input[name=limit]').value").await.unwrap(),
                json!("2"),
                "the filters stay on the next page"
            );
        }
        assert_eq!(seen, ["msg_xss", "msg_w4", "msg_w3", "msg_w2", "msg_w1", "msg_w0"]);
        let unique: BTreeSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len());

        // Open a key: its answer, its payload and its history.
        browser
            .click("#deliveries a.delivery-link[href='/admin/view/shop/msg_w0']")
            .await
            .unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/view/shop/msg_w0");
        assert_eq!(browser.text("#delivery-id").await.unwrap(), "msg_w0");
        assert_eq!(browser.text("#response-status").await.unwrap(), "200");
        let answer: Value = serde_json::from_str(&browser.text("#response-body").await.unwrap()).unwrap();
        assert_eq!(answer["delivery_id"], "msg_w0");
        let payload: Value = serde_json::from_str(&browser.text("#payload").await.unwrap()).unwrap();
        assert_eq!(payload["data"]["id"], "pay_w0");
        let history = strings(browser.eval("Array.from(document.querySelectorAll('#history tbody td')).map(td => td.textContent)").await.unwrap());
        assert!(history.contains(&"released".to_owned()), "{history:?}");
        assert!(history.contains(&"downstream <b>unreachable</b>".to_owned()), "{history:?}");
        assert_eq!(browser.eval("document.querySelectorAll('#history b').length").await.unwrap(), json!(0));

        browser.screenshot("detail-1280").await.unwrap();

        // On a phone the page fits the screen; the table scrolls inside its box.
        browser
            .page(
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true }),
            )
            .await
            .unwrap();
        browser.goto(&format!("{admin}/admin/list")).await.unwrap();
        let fits = browser
            .eval("document.documentElement.scrollWidth <= window.innerWidth + 1")
            .await
            .unwrap();
        assert_eq!(fits, json!(true), "the page scrolls sideways on a phone");
        let scrolls = browser
            .eval("(() => { const w = document.querySelector('.table-wrap'); return w.scrollWidth > w.clientWidth && getComputedStyle(w).overflowX === 'auto'; })()")
            .await
            .unwrap();
        assert_eq!(scrolls, json!(true), "the table scrolls inside its box");
        assert_eq!(browser.eval("window.innerWidth").await.unwrap(), json!(390));
        browser.screenshot("listing-phone").await.unwrap();

        // Log out: the listing asks for the token again.
        browser.click("#logout").await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/login");
        browser.goto(&format!("{admin}/admin")).await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/login");
    }
);
