//! The dashboard in a real headless Chromium: after a delivery of every
//! outcome, its charts show bars, the page fits 1280 px and a 390 px phone
//! without sideways scrolling, and a screenshot of each is saved
//! (`IR_SCREENSHOT_DIR`). Skipped like `browser.rs` without Chromium.

use crate::both_backends_with;
use crate::browser::chromium;
use crate::cdp::Browser;
use crate::dashboard::{admin_failing, flush, send_every_outcome};
use crate::helpers::ADMIN_TOKEN;
use serde_json::json;

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
        send_every_outcome(app).await;
        flush(app).await;
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
        assert_eq!(browser.eval(&drawn("wide", "processed")).await.unwrap(), json!(2));
        assert_eq!(browser.eval(&drawn("wide", "replayed")).await.unwrap(), json!(1));
        assert_eq!(browser.eval(&drawn("wide", "rejected:invalid-signature")).await.unwrap(), json!(1));
        assert_eq!(browser.eval(&drawn("wide", "failed:processing-failed")).await.unwrap(), json!(1));
        assert_eq!(browser.text("#total").await.unwrap(), "5");
        assert_eq!(browser.text("#replay-ratio").await.unwrap(), "33.3 %");
        let legend = browser.texts("ul.legend li").await.unwrap();
        assert!(legend.contains(&"processed 2".to_owned()), "{legend:?}");
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
        assert_eq!(browser.eval(&drawn("narrow", "processed")).await.unwrap(), json!(2));
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
