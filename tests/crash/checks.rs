//! What must hold once the dust has settled, read from the database itself
//! through the crate's own store.

use crate::provider::Plan;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use idempotent_receiver::store::schema::{deliveries, events, ledger_entries};
use idempotent_receiver::store::{COMPLETED, DatabaseUrl, DeliveryRow, Store, StoreOptions};
use idempotent_receiver::with_conn;
use std::collections::{BTreeMap, BTreeSet};

/// What the database holds, and every way it breaks the contract.
pub struct Verdict {
    pub ledger_rows: usize,
    /// Deliveries that ran and committed once, but whose "processed"
    /// answer reached no sender: the kill (or the database restart) cut the
    /// connection after the commit and before the answer, so every 2xx they
    /// got was a retry's replay of the stored answer. Expected under chaos;
    /// neither a lost delivery nor a double run (both are violations).
    pub answers_cut_after_commit: usize,
    /// Ledger ids never used. PostgreSQL never hands a sequence value out
    /// twice, so each gap is a ledger insert that was rolled back by the
    /// chaos (after a crash of PostgreSQL itself, also the up to 32 values
    /// its recovery skips). SQLite reuses rolled-back ids: always 0 there.
    pub ledger_id_gaps: i64,
    pub violations: Vec<String>,
}

/// Shows at most this many offenders per kind of violation.
const SHOWN: usize = 5;

fn sample<T: std::fmt::Debug>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().take(SHOWN).map(|i| format!("{i:?}")).collect();
    let more = items.len().saturating_sub(SHOWN);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Reads `endpoint`'s deliveries, ledger and events at `url` and checks
/// them against what the provider sent (`plan`) and was answered (`bodies`).
pub async fn check(
    url: &str,
    endpoint: &str,
    plan: &Plan,
    bodies: &BTreeMap<String, BTreeSet<Vec<u8>>>,
    fresh: &BTreeMap<String, u32>,
) -> Result<Verdict, String> {
    let url = DatabaseUrl::parse(url)?;
    let store = Store::connect(&url, &StoreOptions::default()).map_err(|e| e.to_string())?;
    let mut conn = store.conn().await.map_err(|e| e.to_string())?;
    let rows: Vec<DeliveryRow> = with_conn!(&mut conn, |c| {
        deliveries::table
            .select(DeliveryRow::as_select())
            .load(c)
            .await
    })
    .map_err(|e| format!("cannot read deliveries: {e}"))?;
    let ledger: Vec<(i64, String, String, String)> = with_conn!(&mut conn, |c| {
        ledger_entries::table
            .select((
                ledger_entries::id,
                ledger_entries::endpoint,
                ledger_entries::delivery_id,
                ledger_entries::payment_id,
            ))
            .load(c)
            .await
    })
    .map_err(|e| format!("cannot read ledger_entries: {e}"))?;
    let recorded: i64 = with_conn!(&mut conn, |c| {
        events::table
            .filter(events::endpoint.eq(endpoint))
            .count()
            .get_result(c)
            .await
    })
    .map_err(|e| format!("cannot count events: {e}"))?;

    let mut violations = Vec::new();
    let n = plan.deliveries.len();

    if ledger.len() != n {
        violations.push(format!(
            "ledger_entries holds {} rows for {n} deliveries",
            ledger.len()
        ));
    }
    let mut effects: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (_, scope, id, payment) in &ledger {
        effects
            .entry((scope.as_str(), id.as_str()))
            .or_default()
            .push(payment.as_str());
    }
    let doubled: Vec<_> = effects
        .iter()
        .filter(|(_, payments)| payments.len() > 1)
        .map(|((scope, id), payments)| format!("{scope}/{id}: {} rows", payments.len()))
        .collect();
    if !doubled.is_empty() {
        violations.push(format!(
            "{} deliveries have more than one ledger row (a double effect): {}",
            doubled.len(),
            sample(&doubled)
        ));
    }
    if recorded != n as i64 {
        violations.push(format!("events holds {recorded} rows for {n} deliveries"));
    }

    let stuck: Vec<_> = rows
        .iter()
        .filter(|row| row.status != COMPLETED)
        .map(|row| {
            format!(
                "{}/{} {} (owner {:?}, lease until {:?})",
                row.endpoint, row.delivery_id, row.status, row.lease_owner, row.lease_expires_at
            )
        })
        .collect();
    if !stuck.is_empty() {
        violations.push(format!(
            "{} keys are not completed after their lease expired: {}",
            stuck.len(),
            sample(&stuck)
        ));
    }

    let by_id: BTreeMap<&str, &DeliveryRow> = rows
        .iter()
        .filter(|row| row.endpoint == endpoint)
        .map(|row| (row.delivery_id.as_str(), row))
        .collect();
    let mut missing = Vec::new();
    let mut unbooked = Vec::new();
    let mut wrong_payment = Vec::new();
    let mut varied = Vec::new();
    let mut unlike_stored = Vec::new();
    let mut ran_twice = Vec::new();
    let mut answers_cut_after_commit = 0;
    for delivery in &plan.deliveries {
        let id = delivery.id.as_str();
        if by_id.get(id).is_none_or(|row| row.status != COMPLETED) {
            missing.push(id);
        }
        let expected_payment = format!("pay_{}", id.trim_start_matches("msg_"));
        match effects.get(&(endpoint, id)) {
            None => unbooked.push(id),
            Some(payments) if payments.iter().any(|p| *p != expected_payment) => {
                wrong_payment.push(format!("{id}: {payments:?}"));
            }
            Some(_) => {}
        }
        let answered = bodies.get(id).map(|set| set.len()).unwrap_or(0);
        if answered != 1 {
            // The bodies themselves (the receiver's own JSON), for the
            // first few: which answer strayed is most of the diagnosis.
            let shown: Vec<String> = bodies
                .get(id)
                .into_iter()
                .flatten()
                .map(|body| String::from_utf8_lossy(body).into_owned())
                .collect();
            varied.push(format!("{id}: {answered} distinct 2xx bodies {shown:?}"));
        }
        let stored = by_id.get(id).and_then(|row| row.response_body.as_ref());
        let differs = match (stored, bodies.get(id)) {
            (Some(stored), Some(set)) => set.iter().any(|body| body != stored),
            _ => false,
        };
        if differs {
            unlike_stored.push(id);
        }
        match fresh.get(id).copied().unwrap_or(0) {
            0 => answers_cut_after_commit += 1,
            1 => {}
            more => ran_twice.push(format!("{id}: {more} answers")),
        }
    }
    if !ran_twice.is_empty() {
        violations.push(format!(
            "{} deliveries were answered as processed (not replayed) more than once: {}",
            ran_twice.len(),
            sample(&ran_twice)
        ));
    }
    if !missing.is_empty() {
        violations.push(format!(
            "{} deliveries have no completed key: {}",
            missing.len(),
            sample(&missing)
        ));
    }
    if !unbooked.is_empty() {
        violations.push(format!(
            "{} deliveries have no ledger row (a lost effect): {}",
            unbooked.len(),
            sample(&unbooked)
        ));
    }
    if !wrong_payment.is_empty() {
        violations.push(format!(
            "ledger rows book another delivery's payment: {}",
            sample(&wrong_payment)
        ));
    }
    if !varied.is_empty() {
        violations.push(format!(
            "{} deliveries were not answered one identical 2xx body: {}",
            varied.len(),
            sample(&varied)
        ));
    }
    if !unlike_stored.is_empty() {
        violations.push(format!(
            "{} deliveries were answered a 2xx body other than the stored response: {}",
            unlike_stored.len(),
            sample(&unlike_stored)
        ));
    }
    let unknown: Vec<_> = rows
        .iter()
        .filter(|row| {
            row.endpoint != endpoint || !plan.deliveries.iter().any(|d| d.id == row.delivery_id)
        })
        .map(|row| format!("{}/{}", row.endpoint, row.delivery_id))
        .collect();
    if !unknown.is_empty() {
        violations.push(format!(
            "{} keys were never sent: {}",
            unknown.len(),
            sample(&unknown)
        ));
    }
    let ids = ledger.iter().map(|(id, ..)| *id);
    let ledger_id_gaps = match (ids.clone().min(), ids.max()) {
        (Some(low), Some(high)) => high - low + 1 - ledger.len() as i64,
        _ => 0,
    };
    Ok(Verdict {
        ledger_id_gaps,
        ledger_rows: ledger.len(),
        answers_cut_after_commit,
        violations,
    })
}
