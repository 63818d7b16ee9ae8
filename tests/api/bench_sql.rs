//! `bench/fresh.sql` and `bench/replay.sql` are what pgbench runs beside the
//! receiver, and they claim to be "statement for statement" what the
//! receiver sends PostgreSQL. This checks that claim against the SQL diesel
//! generates (its `debug_query` text, caught through diesel's
//! instrumentation while a real delivery runs), so that a column added to a
//! query fails here until the bench follows.
//!
//! PostgreSQL only: the bench is pgbench's.

use crate::helpers::{Backend, TestApp, payment};
use diesel::connection::{Instrumentation, InstrumentationEvent, set_default_instrumentation};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The statements seen while [`RECORDING`], with their binds.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Off except during this test: every connection of this test binary
/// carries the recorder once it is installed, and must not pay for it.
static RECORDING: AtomicBool = AtomicBool::new(false);

fn recorder() -> Option<Box<dyn Instrumentation>> {
    Some(Box::new(|event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::StartQuery { query, .. } = event
            && RECORDING.load(Ordering::Relaxed)
            && let Ok(mut seen) = SEEN.lock()
        {
            seen.push(query.to_string());
        }
    }))
}

/// A statement reduced to what must not drift: its verb and table, and the
/// column lists of what it selects, inserts, sets, conflicts on, filters on
/// and returns, in order. Values are left out: the bench writes literals
/// where diesel binds parameters.
fn shape(sql: &str) -> String {
    let sql = sql.split(" -- binds:").next().unwrap_or_default();
    let sql = sql.trim().trim_end_matches(';');
    match sql.strip_prefix("WITH ") {
        Some(parts) => with_shape(parts),
        None => statement_shape(sql),
    }
}

/// The shapes of a `WITH`'s parts (`name AS (statement), ...`) and of its
/// main statement, in order.
fn with_shape(mut rest: &str) -> String {
    let mut shapes = Vec::new();
    while let Some((name, _)) = rest.split_once(" AS (") {
        // `(statement), ...`: the part, then what follows it.
        let opened = &rest[name.len() + " AS ".len()..];
        let closing = closing_paren(opened);
        shapes.push(format!("{name}: {}", statement_shape(&opened[1..closing])));
        rest = opened[(closing + 1).min(opened.len())..]
            .trim_start_matches(',')
            .trim_start();
    }
    shapes.push(statement_shape(rest));
    shapes.join(" | ")
}

/// Where the parenthesis that opens `text` closes, outside quotes.
fn closing_paren(text: &str) -> usize {
    let (mut depth, mut quoted) = (0, false);
    for (at, c) in text.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => {
                depth -= 1;
                if depth == 0 {
                    return at;
                }
            }
            _ => {}
        }
    }
    text.len()
}

/// One statement's shape (see [`shape`]).
fn statement_shape(sql: &str) -> String {
    let mut sql = sql.to_owned();
    for table in ["deliveries", "events", "ledger_entries"] {
        sql = sql.replace(&format!("\"{table}\"."), "");
    }
    let sql = sql.replace('"', "");
    let columns = |list: &str| -> String {
        split_top_level(list)
            .iter()
            .map(|item| {
                item.split(" = ")
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let filtered = |clause: &str| -> String {
        let words: Vec<&str> = clause
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .filter(|w| !w.is_empty())
            .collect();
        words
            .windows(2)
            .filter(|pair| ["=", "<=", "<", ">", ">="].contains(&pair[1]))
            .map(|pair| pair[0])
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (head, returning) = match sql.split_once(" RETURNING ") {
        Some((head, returning)) => (head, format!(" RETURNING {}", columns(returning))),
        None => (sql.as_str(), String::new()),
    };
    if let Some(rest) = head.strip_prefix("SELECT ") {
        let (selected, rest) = rest.split_once(" FROM ").unwrap_or((rest, ""));
        let (table, rest) = rest.split_once(" WHERE ").unwrap_or((rest, ""));
        let (condition, limit) = match rest.split_once(" LIMIT ") {
            Some((condition, _)) => (condition, " LIMIT"),
            None => (rest, ""),
        };
        format!(
            "SELECT {} FROM {table} WHERE {}{limit}",
            columns(selected),
            filtered(condition)
        )
    } else if let Some(rest) = head.strip_prefix("INSERT INTO ") {
        let (table, rest) = rest.split_once(" (").unwrap_or((rest, ""));
        // `VALUES (...)`, or `SELECT ... FROM source` (a write that reads
        // a `WITH` part): the values are left out, the source kept.
        let (inserted, source, rest) = match rest.split_once(") VALUES ") {
            Some((inserted, rest)) => (inserted, String::new(), rest),
            None => match rest.split_once(") SELECT ") {
                Some((inserted, selected)) => {
                    let from = selected.split_once(" FROM ").map_or("", |(_, from)| from);
                    let (source, rest) = match from.starts_with("unnest(") {
                        true => unnest_source(from),
                        false => {
                            let (source, rest) = from.split_once(' ').unwrap_or((from, ""));
                            (source.to_owned(), rest)
                        }
                    };
                    (inserted, format!(" FROM {source}"), rest)
                }
                None => (rest, String::new(), ""),
            },
        };
        let conflict = match rest.split_once(" ON CONFLICT") {
            Some((_, tail)) => match tail.split_once(" DO UPDATE SET ") {
                Some((target, set)) => {
                    format!(" ON CONFLICT{target} DO UPDATE SET {}", columns(set))
                }
                None => format!(" ON CONFLICT{tail}"),
            },
            None => String::new(),
        };
        format!(
            "INSERT INTO {table} ({}){source}{conflict}{returning}",
            columns(inserted)
        )
    } else if let Some(rest) = head.strip_prefix("UPDATE ") {
        let (table, rest) = rest.split_once(" SET ").unwrap_or((rest, ""));
        let (set, condition) = rest.split_once(" WHERE ").unwrap_or((rest, ""));
        format!(
            "UPDATE {table} SET {} WHERE {}{returning}",
            columns(set),
            filtered(condition)
        )
    } else {
        head.to_owned()
    }
}

/// A batch's source, `unnest(arrays) AS alias (columns)`, then perhaps
/// `JOIN part ON condition`: its alias, columns and joined part, without
/// the arrays (values: the bench writes them as literals) or the join's
/// condition; and what follows it.
fn unnest_source(from: &str) -> (String, &str) {
    let after = &from[(closing_paren(from) + 1).min(from.len())..];
    let Some((alias, listed)) = after
        .strip_prefix(" AS ")
        .and_then(|rest| rest.split_once(" ("))
    else {
        return ("unnest".to_owned(), after);
    };
    let closing = closing_paren(&format!("({listed}")).saturating_sub(1);
    let (listed, mut rest) = listed.split_at(closing.min(listed.len()));
    rest = rest.strip_prefix(')').unwrap_or(rest);
    let mut source = format!("unnest AS {alias} ({})", listed.trim());
    if let Some(joined) = rest.strip_prefix(" JOIN ") {
        let (part, condition) = joined.split_once(" ON ").unwrap_or((joined, ""));
        source.push_str(&format!(" JOIN {part}"));
        rest = match condition.find(" ON CONFLICT") {
            Some(at) => &condition[at..],
            None => "",
        };
    }
    (source, rest)
}

/// `text` split at the commas outside quotes and parentheses.
fn split_top_level(text: &str) -> Vec<String> {
    let (mut items, mut current, mut depth, mut quoted) = (Vec::new(), String::new(), 0, false);
    for c in text.chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
}

/// The statements of a pgbench script: no comments, no `\set`, no BEGIN or
/// COMMIT (diesel's transaction manager sends those itself).
/// The shapes of the recorded statements that bind `id`: other tests run
/// meanwhile, and only this delivery's statements name its id.
fn recorded_for(id: &str) -> Vec<String> {
    SEEN.lock()
        .expect("the recorded statements")
        .iter()
        .filter(|statement| statement.contains(&format!("\"{id}\"")))
        .map(|statement| shape(statement))
        .collect()
}

fn script(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| {
            !line.starts_with("--") && !line.starts_with('\\') && !line.trim().is_empty()
        })
        .filter(|line| !["BEGIN;", "COMMIT;"].contains(&line.trim()))
        .map(shape)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_scripts_are_the_statements_diesel_sends_for_a_fresh_delivery_and_a_replay() {
    set_default_instrumentation(recorder).expect("the recorder is installed");
    let Some(app) = TestApp::spawn_if_available(Backend::Postgres).await else {
        return;
    };
    let id = format!("msg_bench_sql_{}", uuid::Uuid::new_v4().simple());
    RECORDING.store(true, Ordering::Relaxed);
    let fresh = app.deliver(&id, &payment(&format!("pay_{id}"), 4200)).await;
    RECORDING.store(false, Ordering::Relaxed);
    assert_eq!(
        fresh.status(),
        200,
        "{}",
        fresh.text().await.unwrap_or_default()
    );
    // Other tests run meanwhile: this delivery's statements are those that
    // bind its id.
    let sent = recorded_for(&id);

    let bench = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench");
    let read = |name: &str| std::fs::read_to_string(bench.join(name)).expect("a bench script");
    assert_eq!(
        script(&read("fresh.sql")),
        sent,
        "bench/fresh.sql no longer matches what a fresh delivery sends"
    );
    // A repeat that the replay cache misses (another instance's, or one
    // this process has forgotten) meets the one statement's conflict, which
    // writes nothing, then the ordinary claim's, and reads the row:
    // bench/replay.sql is that read.
    app.store.replay_cache().clear();
    SEEN.lock().expect("the recorded statements").clear();
    RECORDING.store(true, Ordering::Relaxed);
    let repeat = app.deliver(&id, &payment(&format!("pay_{id}"), 4200)).await;
    RECORDING.store(false, Ordering::Relaxed);
    assert_eq!(repeat.status(), 200);
    let repeated = recorded_for(&id);
    assert_eq!(
        repeated.first(),
        sent.first(),
        "a repeat starts with the claim"
    );
    let replay = script(&read("replay.sql"));
    assert_eq!(replay.len(), 1, "{replay:?}");
    let ordinary_claim = repeated
        .iter()
        .rposition(|statement| statement.starts_with("INSERT INTO deliveries "))
        .expect("the repeat's ordinary claim");
    assert_eq!(
        replay.first(),
        repeated.get(ordinary_claim + 1),
        "bench/replay.sql is not the read after a repeat's conflicting claim: {repeated:#?}"
    );
}
