//! The delivery list and the key page in a real headless Chromium: long
//! ids, event types and errors leave no sideways scroll at 1280 px, with
//! "Completed" and "Last error" on screen; the key page's JSON is indented
//! in a box of its own, at 1280 px and on a phone. Screenshots `list-1280`,
//! `key-1280` and `key-phone` are saved where `IR_SCREENSHOT_DIR` says.

use crate::both_backends_with;
use crate::browser::chromium;
use crate::cdp::Browser;
use crate::helpers::{ADMIN_TOKEN, ENDPOINT, TestApp, TestAppBuilder};
use idempotent_receiver::clock::Clock;
use serde_json::json;

fn admin(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin()
}

/// Deliveries whose every text is longer than a column, one with a long
/// error in its history.
async fn seed_long_values(app: &TestApp) -> String {
    let long_id = format!("evt_{}", "9f3c2a7be1d04c55".repeat(6));
    for n in 0..3 {
        let body = json!({
            "type": format!("customer.subscription.trial_will_end.{}", "very_long_segment".repeat(3)),
            "data": {
                "id": format!("sub_{n}_{}", "abcdefghij".repeat(12)),
                "description": "x".repeat(400),
                "items": [{ "price": 1200, "currency": "EUR" }],
            }
        });
        let id = format!("{long_id}{n}");
        assert_eq!(
            app.deliver(&id, body.to_string().as_bytes()).await.status(),
            200
        );
    }
    let mut conn = app.store.conn().await.expect("a connection");
    let error = format!(
        "handler payments failed: downstream https://ledger.internal.example/v1/{}",
        "segment/".repeat(60)
    );
    conn.record_history(
        ENDPOINT,
        &format!("{long_id}0"),
        "released",
        None,
        Some(&error),
        app.clock.naive_now(),
    )
    .await
    .expect("history is written");
    long_id
}

async fn viewport(browser: &mut Browser, width: u32, height: u32, mobile: bool) {
    browser
        .page(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        )
        .await
        .expect("the viewport is set");
}

/// The page is no wider than the window: nothing scrolls sideways.
const FITS: &str = "document.documentElement.scrollWidth <= document.documentElement.clientWidth";

both_backends_with!(admin;
    async fn long_values_leave_the_list_and_the_key_page_without_sideways_scroll(app) {
        let Some(executable) = chromium() else {
            return;
        };
        let long_id = seed_long_values(app).await;
        let mut browser = Browser::launch(&executable).await.expect("Chromium starts");
        let admin = app.admin_address.clone();
        viewport(&mut browser, 1280, 900, false).await;
        browser.goto(&format!("{admin}/admin/login")).await.unwrap();
        browser.fill("#token", ADMIN_TOKEN).await.unwrap();
        browser.click("#login").await.unwrap();
        browser.goto(&format!("{admin}{}", crate::admin_list::LISTING)).await.unwrap();

        assert_eq!(browser.texts("#deliveries a.delivery-link").await.unwrap().len(), 3);
        assert_eq!(browser.eval(FITS).await.unwrap(), json!(true), "the list scrolls sideways at 1280 px");
        let wrapper_still = browser
            .eval("(() => { const w = document.querySelector('.table-wrap'); return w.scrollWidth <= w.clientWidth; })()")
            .await
            .unwrap();
        assert_eq!(wrapper_still, json!(true), "the table scrolls inside its box at 1280 px");
        // Every column, "Completed" and "Last error" included, is on screen.
        let headers_on_screen = browser
            .eval("Array.from(document.querySelectorAll('#deliveries th')).every(th => { const r = th.getBoundingClientRect(); return r.width > 30 && r.right <= window.innerWidth; })")
            .await
            .unwrap();
        assert_eq!(headers_on_screen, json!(true));
        let headers = browser.texts("#deliveries th").await.unwrap();
        assert!(headers.contains(&"Completed (UTC)".to_owned()) && headers.contains(&"Last error".to_owned()), "{headers:?}");
        // Ids are shortened with the whole id in the tooltip.
        let titles = strings(
            browser.eval("Array.from(document.querySelectorAll('#deliveries a.delivery-link')).map(a => a.title)").await.unwrap(),
        );
        assert!(titles.contains(&format!("{long_id}0")), "{titles:?}");
        let shown = browser.texts("#deliveries a.delivery-link").await.unwrap();
        assert!(shown.iter().all(|s| s.contains('…') && s.chars().count() <= 24), "{shown:?}");
        // The totals stand above the table.
        assert_eq!(browser.text("#total-matching").await.unwrap(), "3");
        browser.screenshot("list-1280").await.unwrap();

        // The key page: the whole id, the payload indented in its own box.
        browser.click("#deliveries a.delivery-link[title$='0']").await.unwrap();
        assert_eq!(browser.text("#delivery-id").await.unwrap(), format!("{long_id}0"));
        assert_eq!(browser.eval(FITS).await.unwrap(), json!(true), "the key page scrolls sideways at 1280 px");
        let payload = browser.text("#payload").await.unwrap();
        assert!(payload.starts_with("{\n  \"data\": {\n    \"description\": \"xxx"), "{payload}");
        assert!(payload.contains("\n    \"id\": \"sub_0_"), "{payload}");
        let boxed = browser
            .eval("(() => { const p = document.querySelector('#payload'); const s = getComputedStyle(p); return [s.whiteSpace, s.overflowX, p.scrollWidth > p.clientWidth]; })()")
            .await
            .unwrap();
        assert_eq!(boxed, json!(["pre", "auto", true]), "long lines scroll inside the payload's box, never broken");
        assert!(browser.texts("#history td").await.unwrap().iter().any(|t| t == "released"));
        browser.screenshot("key-1280").await.unwrap();

        // On a phone the key page still fits the screen.
        viewport(&mut browser, 390, 844, true).await;
        browser.goto(&format!("{admin}/admin/view/{ENDPOINT}/{long_id}0")).await.unwrap();
        assert_eq!(browser.eval("window.innerWidth").await.unwrap(), json!(390));
        assert_eq!(browser.eval(FITS).await.unwrap(), json!(true), "the key page scrolls sideways on a phone");
        browser.screenshot("key-phone").await.unwrap();
    }
);

pub(crate) fn strings(value: serde_json::Value) -> Vec<String> {
    serde_json::from_value(value).unwrap_or_default()
}
