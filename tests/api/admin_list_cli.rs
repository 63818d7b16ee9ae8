//! `list` with the whole filter of the admin listing: event type, until,
//! id prefix, the payload search and its scan limit, and the totals line.

use crate::admin_cli::{run, stdout};
use crate::both_backends;
use crate::helpers::payment;
use chrono::TimeDelta;
use serde_json::{Value, json};

fn note(text: &str) -> Vec<u8> {
    json!({ "type": "note.added", "data": { "note": text } })
        .to_string()
        .into_bytes()
}

fn ids(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| item["delivery_id"].as_str().unwrap_or_default())
        .collect()
}

both_backends!(
    async fn list_takes_the_listings_whole_filter_and_prints_its_totals(app) {
        assert_eq!(app.deliver("ord_1", &payment("pay_1", 100)).await.status(), 200);
        assert_eq!(app.deliver("ord_2", &note("Refund 50% now")).await.status(), 200);
        assert_eq!(app.deliver("msg_3", &note("refund 500 later")).await.status(), 200);
        assert_eq!(app.deliver("ord_old", &note("refund 50% then")).await.status(), 200);
        app.age_delivery("ord_old", TimeDelta::hours(48)).await;
        let dir = tempfile::tempdir().expect("a temporary folder");
        let json = |args: &[&str]| -> Value {
            let mut all = vec!["list", "--json"];
            all.extend_from_slice(args);
            serde_json::from_str(&stdout(&run(app, dir.path(), &all))).expect("JSON")
        };

        let by_type = json(&["--event-type", "note.added"]);
        assert_eq!(ids(&by_type), ["msg_3", "ord_2", "ord_old"]);
        assert_eq!(by_type["totals"], json!({ "matching": 3, "by_status": { "completed": 3 } }));
        assert_eq!(ids(&json(&["--id-prefix", "ord_"])), ["ord_2", "ord_1", "ord_old"]);
        assert_eq!(ids(&json(&["--until", "24h"])), ["ord_old"]);

        let found = json(&["--search", "REFUND 50%"]);
        assert_eq!(ids(&found), ["ord_2"], "the last day, `%` literal, any case");
        assert_eq!(found["search"]["capped"], false);
        assert_eq!(ids(&json(&["--search", "refund 50%", "--since", "72h"])), ["ord_2", "ord_old"]);
        let capped = json(&["--search", "refund", "--scan-limit", "1"]);
        assert_eq!(capped["search"]["examined"], 1);
        assert_eq!(capped["search"]["capped"], true);

        // The table ends with the filter's totals, and says when a search stopped.
        let table = stdout(&run(app, dir.path(), &["list", "--search", "refund", "--scan-limit", "2"]));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[1].contains("msg_3") && lines[2].contains("ord_2"), "{table}");
        assert_eq!(lines[3], "2 match: 2 completed (payload search: 2 keys read)");
        assert!(lines[4].starts_with("the search stopped after reading 2 keys"), "{table}");

        let refused = run(app, dir.path(), &["list", "--search", "x", "--since", "30d"]);
        assert!(!refused.status.success());
        assert!(String::from_utf8_lossy(&refused.stderr).contains("7 days"), "{refused:?}");
    }
);
