//! The delivery list and the key page (issue #16, items 2 and 3) on both
//! backends: totals for the filter, the bounded payload search (its window,
//! its scan limit, `%`/`_`/`\` matched literally), the endpoint drop-down,
//! and the key page's pretty-printed bodies, effects, history and related
//! deliveries.

use crate::both_backends_with;
use crate::helpers::{ADMIN_TOKEN, ENDPOINT, SECRET, TestApp, TestAppBuilder, payment, problem};
use chrono::TimeDelta;
use idempotent_receiver::clock::Clock;
use serde_json::{Value, json};

/// The listing page's path (the dashboard may take `/admin` itself).
pub const LISTING: &str = "/admin/list";

fn admin(builder: TestAppBuilder) -> TestAppBuilder {
    builder.admin()
}

/// The admin surface and a queued endpoint `q` whose deliveries are
/// ordered by `/data/object_id`; no worker runs them.
fn admin_and_ordered_queue(builder: TestAppBuilder) -> TestAppBuilder {
    builder
        .admin()
        .top_level("queue_workers = 0\n")
        .endpoints_toml(&format!(
            "[endpoints.q]\nprovider = \"standard-webhooks\"\nsecrets = [\"{SECRET}\"]\nhandlers = [\"record\", \"payments\"]\nmode = \"queued\"\nordering_key = \"/data/object_id\"\nevent_time = \"/created\"\n"
        ))
}

fn delivery_ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("a page has items")
        .iter()
        .map(|item| item["delivery_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn with_note(id: &str, note: &str) -> Vec<u8> {
    json!({ "type": "note.added", "data": { "id": id, "note": note } })
        .to_string()
        .into_bytes()
}

/// A page's HTML, read with the admin token.
async fn html(app: &TestApp, path: &str) -> String {
    let response = app.admin_get(path, Some(ADMIN_TOKEN)).await;
    assert_eq!(response.status(), 200, "GET {path}");
    response.text().await.expect("a body")
}

/// The text of an HTML fragment as a browser reads it (maud escapes these).
fn unescape(html: &str) -> String {
    html.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The content of the first element whose start tag contains `marker`.
fn element<'a>(html: &'a str, marker: &str) -> &'a str {
    let start = html
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in {html}"));
    let open_end = start + html[start..].find('>').expect("a start tag ends");
    let rest = &html[open_end + 1..];
    let open = html[..start].rfind('<').expect("inside a start tag");
    let name: String = html[open + 1..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    let close = rest
        .find(&format!("</{name}>"))
        .unwrap_or_else(|| panic!("{marker} is not closed"));
    &rest[..close]
}

both_backends_with!(admin;
    async fn the_totals_count_the_whole_filter_by_status_on_every_page(app) {
        for n in 1..=3 {
            assert_eq!(app.deliver(&format!("msg_t{n}"), &payment(&format!("pay_t{n}"), 100)).await.status(), 200);
        }
        assert_eq!(app.deliver_to("other", "msg_o1", &payment("pay_o1", 100)).await.status(), 200);
        crate::admin::plant_in_progress(app, "msg_busy").await;

        let first = app.admin_json("/admin/deliveries?endpoint=shop&limit=2").await;
        assert_eq!(first["items"].as_array().map(Vec::len), Some(2));
        let totals = json!({ "matching": 4, "by_status": { "completed": 3, "in_progress": 1 } });
        assert_eq!(first["totals"], totals);
        assert!(first.get("search").is_none(), "no search, no search report: {first}");
        let next = first["next_cursor"].as_str().expect("a second page");
        let second = app.admin_json(&format!("/admin/deliveries?endpoint=shop&limit=2&cursor={next}")).await;
        assert_eq!(second["items"].as_array().map(Vec::len), Some(2));
        assert_eq!(second["totals"], totals, "the totals are the filter's, not the page's");

        let completed = app.admin_json("/admin/deliveries?status=completed").await;
        assert_eq!(completed["totals"], json!({ "matching": 4, "by_status": { "completed": 4 } }));
        let none = app.admin_json("/admin/deliveries?id_prefix=nope").await;
        assert_eq!(none["totals"], json!({ "matching": 0, "by_status": {} }));

        // The page shows them above the table.
        let page = html(app, &format!("{LISTING}?endpoint=shop")).await;
        assert_eq!(element(&page, "id=\"total-matching\""), "4");
        assert_eq!(element(&page, "id=\"total-completed\""), "3");
        assert_eq!(element(&page, "id=\"total-in_progress\""), "1");
    }
);

both_backends_with!(admin;
    async fn the_payload_search_finds_a_text_ignoring_case_within_its_window_only(app) {
        assert_eq!(app.deliver("msg_s1", &with_note("n1", "Refund for Order-ABC")).await.status(), 200);
        assert_eq!(app.deliver("msg_s2", &with_note("n2", "nothing to see")).await.status(), 200);
        assert_eq!(app.deliver_to("other", "msg_s3", &with_note("n3", "ORDER-abc again")).await.status(), 200);
        assert_eq!(app.deliver("msg_s_old", &with_note("n4", "order-abc long ago")).await.status(), 200);
        app.age_delivery("msg_s_old", TimeDelta::hours(48)).await;

        // 24 h back by default, any case, any of the listing's filters.
        let found = app.admin_json("/admin/deliveries?q=order-ABC").await;
        assert_eq!(delivery_ids(&found), ["msg_s3", "msg_s1"]);
        assert_eq!(found["totals"], json!({ "matching": 2, "by_status": { "completed": 2 } }));
        let search = &found["search"];
        assert_eq!(search["examined"], 3, "the three keys of the last day were read: {search}");
        assert_eq!(search["capped"], false);
        assert_eq!(search["scan_limit"], 10000);
        let at = |field: &str| {
            chrono::DateTime::parse_from_rfc3339(search[field].as_str().expect("an instant")).expect("RFC 3339")
        };
        assert_eq!(at("until") - at("since"), TimeDelta::hours(24));
        let now = app.clock.naive_now();
        let rfc3339 = |at: chrono::NaiveDateTime| at.and_utc().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let shop = app.admin_json("/admin/deliveries?q=order-abc&endpoint=shop").await;
        assert_eq!(delivery_ids(&shop), ["msg_s1"]);

        // A wider window finds the older one; wider than 7 days is refused.
        let wider = app.admin_json("/admin/deliveries?q=ORDER-ABC&since=72h").await;
        assert_eq!(delivery_ids(&wider), ["msg_s3", "msg_s1", "msg_s_old"]);
        let refused = app.admin_get("/admin/deliveries?q=abc&since=8d", Some(ADMIN_TOKEN)).await;
        let refused = problem(refused, 400, "invalid-parameter").await;
        assert!(refused["detail"].as_str().unwrap_or_default().contains("7 days"), "{refused}");
        let until = rfc3339(now - TimeDelta::hours(30));
        let old_window = app.admin_json(&format!("/admin/deliveries?q=abc&until={until}")).await;
        assert_eq!(delivery_ids(&old_window), ["msg_s_old"], "24 h back from until");
        for bad in ["scan_limit=0", "scan_limit=10001", "q=%00"] {
            let response = app.admin_get(&format!("/admin/deliveries?q=abc&{bad}"), Some(ADMIN_TOKEN)).await;
            problem(response, 400, "invalid-parameter").await;
        }
    }
);

both_backends_with!(admin;
    async fn percent_underscore_and_backslash_in_the_search_match_only_themselves(app) {
        let notes = [
            ("msg_pct", "50% off"),
            ("msg_500", "500 off"),
            ("msg_us", "a_b"),
            ("msg_axb", "axb"),
            ("msg_bs", "c\\d"),
            ("msg_cd", "cd"),
        ];
        for (id, note) in notes {
            // No `_` in the payloads but the one searched for.
            assert_eq!(app.deliver(id, &with_note(&id.replace('_', "-"), note)).await.status(), 200);
        }
        let search = |q: &str| {
            let q = idempotent_receiver_encode(q);
            async move { delivery_ids(&app.admin_json(&format!("/admin/deliveries?q={q}")).await) }
        };
        assert_eq!(search("50%").await, ["msg_pct"]);
        assert_eq!(search("0%").await, ["msg_pct"]);
        assert_eq!(search("a_b").await, ["msg_us"]);
        assert_eq!(search("_").await, ["msg_us"]);
        assert_eq!(search("%").await, ["msg_pct"]);
        // The stored payload is JSON text, where a backslash is written `\\`;
        // one backslash escapes nothing (`c\d` does not find `cd`).
        assert_eq!(search("c\\\\d").await, ["msg_bs"]);
        assert_eq!(search("c\\d").await, Vec::<String>::new());
    }
);

/// Percent-encodes a query value.
fn idempotent_receiver_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

both_backends_with!(admin;
    async fn the_scan_stops_at_its_limit_says_so_and_pages_within_what_it_read(app) {
        for n in 1..=5 {
            assert_eq!(app.deliver(&format!("msg_c{n}"), &with_note(&format!("c{n}"), "needle")).await.status(), 200);
            app.clock.advance(std::time::Duration::from_secs(1));
        }
        assert_eq!(app.deliver("msg_c0", &with_note("c0", "hay")).await.status(), 200);

        let capped = app.admin_json("/admin/deliveries?q=needle&scan_limit=3").await;
        assert_eq!(capped["search"]["examined"], 3);
        assert_eq!(capped["search"]["capped"], true);
        assert_eq!(delivery_ids(&capped), ["msg_c5", "msg_c4"], "of the three newest, one is hay");
        assert_eq!(capped["totals"]["matching"], 2, "only what was read is counted");

        let whole = app.admin_json("/admin/deliveries?q=needle&scan_limit=6").await;
        assert_eq!(whole["search"]["examined"], 6);
        assert_eq!(whole["search"]["capped"], false, "nothing was left unread");
        assert_eq!(whole["totals"]["matching"], 5);

        // Pages of two over the matches, the totals the same on each.
        let mut seen = Vec::new();
        let mut cursor = String::new();
        for _ in 0..4 {
            let page = app.admin_json(&format!("/admin/deliveries?q=NEEDLE&limit=2{cursor}")).await;
            assert_eq!(page["totals"]["matching"], 5);
            seen.extend(delivery_ids(&page));
            match page["next_cursor"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => break,
            }
        }
        assert_eq!(seen, ["msg_c5", "msg_c4", "msg_c3", "msg_c2", "msg_c1"]);

        // The page says when the scan stopped.
        let page = html(app, &format!("{LISTING}?q=needle&scan_limit=3")).await;
        assert!(page.contains("id=\"search-capped\""), "{page}");
        assert!(element(&page, "id=\"search-report\"").contains("3 deliveries read"), "{page}");
    }
);

both_backends_with!(admin;
    async fn the_listing_offers_the_configured_endpoints_and_fits_long_values(app) {
        let long_id = format!("evt_{}_tail", "0123456789".repeat(8));
        assert_eq!(app.deliver(&long_id, &payment("pay_long", 100)).await.status(), 200);
        let mut conn = app.store.conn().await.expect("a connection");
        let long_error = format!("downstream said {}", "no ".repeat(100));
        conn.record_history(ENDPOINT, &long_id, "released", None, Some(&long_error), app.clock.naive_now())
            .await
            .expect("history is written");
        drop(conn);

        let page = html(app, LISTING).await;
        let select = element(&page, "select name=\"endpoint\"");
        for option in ["<option value=\"\" selected>any</option>", "<option value=\"other\">other</option>",
                       "<option value=\"shop\">shop</option>", "<option value=\"POST /payments\">POST /payments</option>"] {
            assert!(select.contains(option), "{option} in {select}");
        }
        let chosen = html(app, &format!("{LISTING}?endpoint=shop")).await;
        assert!(element(&chosen, "select name=\"endpoint\"").contains("<option value=\"shop\" selected>"), "{chosen}");
        // An endpoint a link carries is kept, even if none is configured so.
        let kept = html(app, &format!("{LISTING}?endpoint=tenant%3Aacme%20POST%20%2Fpayments")).await;
        assert!(kept.contains("<option value=\"tenant:acme POST /payments\" selected>"), "{kept}");

        // The long id is shortened, in full in its title and its link.
        let link = format!("href=\"/admin/view/shop/{long_id}\" title=\"{long_id}\"");
        let shown = element(&page, &link);
        assert!(shown.contains('…') && shown.chars().count() < 30, "{shown}");
        let error = element(&page, "td class=\"error\" title=");
        assert!(error.ends_with('…') && error.chars().count() == 161, "{error}");
        assert!(page.contains(&format!("title=\"{}\"", long_error)), "the error in full in the title");
    }
);

both_backends_with!(admin;
    async fn the_key_page_pretty_prints_the_bodies_and_shows_effects_and_history(app) {
        // Keys in no particular order, a number too long for a float.
        let body = r#"{"type":"payment.succeeded","data":{"id":"pay_k1","order_id":"order_7","amount":4200,"currency":"EUR","ref":12345678901234567890123}}"#;
        assert_eq!(app.deliver("msg_k1", body.as_bytes()).await.status(), 200);
        let mut conn = app.store.conn().await.expect("a connection");
        conn.record_history(ENDPOINT, "msg_k1", "reprocessed", Some("admin:ops"), Some("by <hand>"), app.clock.naive_now())
            .await
            .expect("history is written");
        drop(conn);

        let page = html(app, "/admin/view/shop/msg_k1").await;
        let payload = unescape(element(&page, "id=\"payload\""));
        let expected = "{\n  \"type\": \"payment.succeeded\",\n  \"data\": {\n    \"id\": \"pay_k1\",\n    \"order_id\": \"order_7\",\n    \"amount\": 4200,\n    \"currency\": \"EUR\",\n    \"ref\": 12345678901234567890123\n  }\n}";
        assert_eq!(payload, expected);
        assert!(element_tag(&page, "id=\"payload\"").contains("class=\"body\""), "a box that scrolls sideways");
        let answer = unescape(element(&page, "id=\"response-body\""));
        assert!(answer.starts_with("{\n  \""), "{answer}");
        assert_eq!(serde_json::from_str::<Value>(&answer).expect("still JSON")["delivery_id"], "msg_k1");

        // Effects: the events row (`record`) and the ledger (`payments`).
        let event = unescape(element(&page, "id=\"effect-event-payload\""));
        assert_eq!(serde_json::from_str::<Value>(&event).expect("JSON")["data"]["id"], "pay_k1");
        let ledger = element(&page, "id=\"effect-ledger\"");
        assert!(ledger.contains("pay_k1") && ledger.contains("4200 EUR"), "{ledger}");
        assert!(!page.contains("id=\"effect-job\""), "an inline endpoint has no job");
        // The history, escaped.
        let history = element(&page, "id=\"history\"");
        assert!(history.contains("reprocessed") && history.contains("admin:ops"), "{history}");
        assert!(history.contains("by &lt;hand&gt;"), "{history}");

        // A body that is not JSON is shown as text, escaped.
        let key = "key_text_1";
        let created = app
            .client
            .post(format!("{}/payments", app.address))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body("{\"order_id\": \"o<1>\", \"amount\": 5, \"currency\": \"EUR\"}")
            .send()
            .await
            .expect("the receiver answers");
        assert_eq!(created.status(), 201);
        let client_page = html(app, &format!("/admin/view/POST%20%2Fpayments/{key}")).await;
        let payments = element(&client_page, "id=\"effect-payments\"");
        assert!(payments.contains("o&lt;1&gt;") && payments.contains("5 EUR"), "{payments}");
        // A client key's scope has no handlers to run again: no button.
        assert!(!client_page.contains("id=\"reprocess-form\""), "{client_page}");
        assert!(page.contains("id=\"reprocess-form\""), "a webhook's key has the button");
    }
);

/// The start tag of the first element containing `marker`.
fn element_tag<'a>(html: &'a str, marker: &str) -> &'a str {
    let start = html.find(marker).unwrap_or_else(|| panic!("no {marker}"));
    let open = html[..start].rfind('<').unwrap_or(0);
    let end = start + html[start..].find('>').unwrap_or(0);
    &html[open..=end]
}

both_backends_with!(admin_and_ordered_queue;
    async fn the_key_page_links_the_other_deliveries_of_the_same_object(app) {
        let event = |id: &str, object: &str, created: i64| {
            json!({ "type": "payment.succeeded", "created": created,
                    "data": { "id": id, "object_id": object, "order_id": "o1", "amount": 100, "currency": "EUR" } })
            .to_string()
            .into_bytes()
        };
        assert_eq!(app.deliver_to("q", "evt_a1", &event("pay_a1", "sub_a", 2000)).await.status(), 202);
        assert_eq!(app.deliver_to("q", "evt_a0", &event("pay_a0", "sub_a", 1000)).await.status(), 202);
        assert_eq!(app.deliver_to("q", "evt_b1", &event("pay_b1", "sub_b", 1500)).await.status(), 202);

        let page = html(app, "/admin/view/q/evt_a1").await;
        assert_eq!(element(&page, "id=\"ordering-key\""), "sub_a");
        assert_eq!(element(&page, "id=\"effect-job-state\""), "queued");
        let related = element(&page, "ul id=\"related\"");
        assert!(related.contains("href=\"/admin/view/q/evt_a0\""), "{related}");
        assert!(!related.contains("evt_b1") && !related.contains("evt_a1\""), "{related}");
        let alone = html(app, "/admin/view/q/evt_b1").await;
        assert!(alone.contains("id=\"no-related\""), "{alone}");
        // An inline endpoint's key has no ordering key: no such section.
        assert_eq!(app.deliver("msg_inline", &payment("pay_i", 1)).await.status(), 200);
        let inline = html(app, "/admin/view/shop/msg_inline").await;
        assert!(!inline.contains("id=\"related\"") && !inline.contains("id=\"no-related\""), "{inline}");
    }
);

both_backends_with!(admin;
    async fn the_openapi_document_describes_the_search_and_the_totals(app) {
        let document = app.admin_json("/admin/openapi.json").await;
        let parameters = document["paths"]["/admin/deliveries"]["get"]["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>();
        for name in ["endpoint", "status", "event_type", "since", "until", "id_prefix", "q", "scan_limit", "cursor", "limit"] {
            assert!(parameters.contains(&name.to_owned()), "{name} in {parameters:?}");
        }
        let schemas = &document["components"]["schemas"];
        assert!(schemas["DeliveryPage"]["properties"]["totals"].is_object(), "{}", schemas["DeliveryPage"]);
        assert!(schemas["SearchScan"]["properties"]["capped"].is_object(), "{}", schemas["SearchScan"]);
        assert!(schemas["ListTotals"]["properties"]["by_status"].is_object());
    }
);
