//! The dashboard in a real headless Chromium: after a delivery of every
//! outcome, its charts show bars, the page fits 1280 px and a 390 px phone
//! without sideways scrolling, and a screenshot of each is saved
//! (`IR_SCREENSHOT_DIR`). Skipped like `browser.rs` without Chromium.

use crate::both_backends_with;
use crate::browser::chromium;
use crate::cdp::Browser;
use crate::dashboard::{admin_failing, flush, send_every_outcome};
use crate::helpers::{ADMIN_TOKEN, TestApp, payment};
use serde_json::json;
use std::time::Duration;

/// Traffic spread over the last 48 minutes, by the app's clock: 1 to 4
/// fresh deliveries every 4 minutes and a replay every other step, so
/// that the chart has a shape (and the README's screenshot shows one).
/// Returns how many were processed and how many replayed.
async fn earlier_traffic(app: &TestApp) -> (u64, u64) {
    let (mut processed, mut replayed) = (0, 0);
    for step in 0..12_u64 {
        for n in 0..=step % 4 {
            let id = format!("msg_earlier_{step}_{n}");
            let response = app
                .deliver(&id, &payment(&format!("pay_{step}_{n}"), 100))
                .await;
            assert_eq!(response.status(), 200, "{id}");
            processed += 1;
        }
        if step % 2 == 1 {
            let id = format!("msg_earlier_{step}_0");
            let response = app
                .deliver(&id, &payment(&format!("pay_{step}_0"), 100))
                .await;
            assert_eq!(response.status(), 200, "{id}");
            replayed += 1;
        }
        app.clock.advance(Duration::from_secs(4 * 60));
    }
    (processed, replayed)
}

/// The sum of the `data-count`s of `series`' bars in the chart of `size`
/// whose rendered height is above zero.
fn drawn(size: &str, series: &str) -> String {
    format!(
        "Array.from(document.querySelectorAll('.chart-{size} svg rect.bar[data-series=\"{series}\"]'))\
         .filter(r => r.getBoundingClientRect().height > 0)\
         .reduce((n, r) => n + Number(r.dataset.count), 0)"
    )
}

fn shown(selector: &str) -> String {
    format!("getComputedStyle(document.querySelector('{selector}')).display !== 'none'")
}

const FITS: &str = "document.documentElement.scrollWidth <= document.documentElement.clientWidth";

both_backends_with!(admin_failing;
    async fn the_dashboard_draws_real_traffic_and_fits_a_wide_screen_and_a_phone(app) {
        let Some(executable) = chromium() else {
            return;
        };
        let (earlier, earlier_replays) = earlier_traffic(app).await;
        send_every_outcome(app).await;
        flush(app).await;
        let (processed, replayed) = (2 + earlier, 1 + earlier_replays);
        let mut browser = Browser::launch(&executable).await.expect("Chromium starts");
        let admin = app.admin_address.clone();
        browser.goto(&format!("{admin}/admin")).await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/login");
        browser.fill("#token", ADMIN_TOKEN).await.unwrap();
        browser.click("#login").await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin");

        // Choose the endpoint and the window as an operator would.
        browser.fill("#endpoint", "shop").await.unwrap();
        browser.fill("#window", "1h").await.unwrap();
        browser.click("#show").await.unwrap();
        assert_eq!(
            browser.eval("location.search").await.unwrap(),
            json!("?endpoint=shop&window=1h")
        );
        assert_eq!(browser.eval("window.innerWidth").await.unwrap(), json!(1280));
        assert_eq!(browser.eval(&shown(".chart-wide")).await.unwrap(), json!(true));
        assert_eq!(browser.eval(&shown(".chart-narrow")).await.unwrap(), json!(false));
        assert_eq!(browser.eval(&drawn("wide", "processed")).await.unwrap(), json!(processed));
        assert_eq!(browser.eval(&drawn("wide", "replayed")).await.unwrap(), json!(replayed));
        assert_eq!(browser.eval(&drawn("wide", "rejected:invalid-signature")).await.unwrap(), json!(1));
        assert_eq!(browser.eval(&drawn("wide", "failed:processing-failed")).await.unwrap(), json!(1));
        assert_eq!(browser.text("#total").await.unwrap(), (processed + replayed + 2).to_string());
        let ratio = 100.0 * replayed as f64 / (processed + replayed) as f64;
        assert_eq!(browser.text("#replay-ratio").await.unwrap(), format!("{ratio:.1} %"));
        let legend = browser.texts("ul.legend li").await.unwrap();
        assert!(legend.contains(&format!("processed {processed}")), "{legend:?}");
        // The chart spans the content's width, its labels at least 12 px.
        let width = browser
            .eval("document.querySelector('.chart-wide svg').getBoundingClientRect().width")
            .await
            .unwrap();
        assert!(width.as_f64().unwrap() >= 960.0, "{width}");
        assert_eq!(browser.eval(FITS).await.unwrap(), json!(true), "no sideways scroll at 1280 px");
        browser.screenshot("dashboard-1280").await.unwrap();

        // A phone: the narrow drawing, still every bar, nothing wider than the screen.
        browser.viewport(390, 844, true).await.unwrap();
        browser.goto(&format!("{admin}/admin?endpoint=shop&window=1h")).await.unwrap();
        assert_eq!(browser.eval("window.innerWidth").await.unwrap(), json!(390));
        assert_eq!(browser.eval(&shown(".chart-wide")).await.unwrap(), json!(false));
        assert_eq!(browser.eval(&shown(".chart-narrow")).await.unwrap(), json!(true));
        assert_eq!(browser.eval(&drawn("narrow", "processed")).await.unwrap(), json!(processed));
        assert_eq!(browser.eval(&drawn("narrow", "failed:processing-failed")).await.unwrap(), json!(1));
        // 360 units drawn at least 300 px wide: 12-unit labels stay ≥ 10 px.
        let width = browser
            .eval("document.querySelector('.chart-narrow svg').getBoundingClientRect().width")
            .await
            .unwrap()
            .as_f64()
            .unwrap();
        assert!((300.0..=390.0).contains(&width), "{width}");
        assert_eq!(browser.eval(FITS).await.unwrap(), json!(true), "no sideways scroll on a phone");
        browser.screenshot("dashboard-phone").await.unwrap();
    }
);
