use super::{PurgeReport, RetentionPolicy};
use crate::store::{ExpiredKey, ExpiredKind, Expiry, Scopes, Store, StoreError};
use chrono::{NaiveDateTime, TimeDelta};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How the background purge deletes expired keys (`purge_interval`,
/// `purge_batch`, `purge_pause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeSettings {
    /// How often the purge runs; `None` (`"0"`) disables the background task.
    pub interval: Option<Duration>,
    /// Rows per batch: one short transaction each.
    pub batch: usize,
    /// The pause between batches, so that writers queued behind a batch get
    /// the database before the next one.
    pub pause: Duration,
}

impl PurgeSettings {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10 * 60);
    pub const DEFAULT_BATCH: usize = 1000;
    pub const DEFAULT_PAUSE: Duration = Duration::from_millis(50);
    /// The largest batch: a batch's keys are bound into its `DELETE`
    /// statements (SQLite allows 32766 variables), and a larger batch is a
    /// longer transaction that ingestion waits behind.
    pub const MAX_BATCH: usize = 10_000;
}

impl Default for PurgeSettings {
    fn default() -> Self {
        PurgeSettings {
            interval: Some(Self::DEFAULT_INTERVAL),
            batch: Self::DEFAULT_BATCH,
            pause: Self::DEFAULT_PAUSE,
        }
    }
}

/// How a purge runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeOptions {
    /// Rows per transaction. Each batch is one short transaction, so that a
    /// delivery arriving meanwhile waits for one batch at most, never for
    /// the whole purge (SQLite has a single writer; on PostgreSQL a claim on
    /// a key being deleted waits for the row).
    pub batch: usize,
    /// The pause between batches, which lets waiting writers in.
    pub pause: Duration,
    /// Count what has expired, delete nothing.
    pub dry_run: bool,
}

impl PurgeOptions {
    pub fn from_settings(settings: &PurgeSettings) -> PurgeOptions {
        PurgeOptions {
            batch: settings.batch,
            pause: settings.pause,
            dry_run: false,
        }
    }
}

/// A purge that failed part of the way: the batches before the failure are
/// committed and counted in `report`; the failed batch rolled back.
#[derive(Debug, thiserror::Error)]
#[error("the purge stopped after deleting {} expired key(s)", report.total())]
pub struct PurgeError {
    pub report: Box<PurgeReport>,
    #[source]
    pub source: StoreError,
}

/// Deletes the keys of `deliveries` that have outlived their scope's
/// retention under `policy` — completed keys, and abandoned claims whose
/// lease expired too — in batches of `options.batch`, oldest first, and
/// says how many went from which scope. Claims with a live lease stay,
/// however old. With `options.dry_run` it only counts.
///
/// Endpoints with their own retention are purged with their own cut-off,
/// everything else with the policy's default. The clock is read once, so
/// that a long purge does not chase keys that expire while it runs.
pub async fn purge(
    store: &Store,
    policy: &RetentionPolicy,
    options: &PurgeOptions,
) -> Result<PurgeReport, PurgeError> {
    purge_reporting(store, policy, options, &mut |_| {}).await
}

/// [`purge()`], telling `progress` the report so far after each committed
/// batch (the `purge` command's progress bar).
pub async fn purge_reporting(
    store: &Store,
    policy: &RetentionPolicy,
    options: &PurgeOptions,
    progress: &mut (dyn FnMut(&PurgeReport) + Send),
) -> Result<PurgeReport, PurgeError> {
    // `elapsed` in the report is the real time the work took, not the
    // store's clock, which tests move by hand.
    let started = Instant::now();
    let now = store.clock().naive_now();
    let mut report = PurgeReport::new(options.dry_run);
    let own: Vec<String> = policy.endpoints.keys().cloned().collect();
    let mut rules: Vec<(Scopes<'_>, Duration)> = policy
        .endpoints
        .iter()
        .map(|(name, retention)| (Scopes::Only(name), *retention))
        .collect();
    rules.push((Scopes::AllBut(&own), policy.default));

    for (scopes, retention) in rules {
        let expiry = Expiry {
            scopes,
            cutoff: cutoff(now, retention),
            now,
        };
        let result = if options.dry_run {
            match count(store, &expiry, retention, &mut report).await {
                Ok(()) => count_publications(store, &expiry, &mut report).await,
                Err(error) => Err(error),
            }
        } else {
            match delete_in_batches(store, &expiry, retention, options, &mut report, progress).await
            {
                Ok(()) => delete_publications(store, &expiry, options, &mut report, progress).await,
                Err(error) => Err(error),
            }
        };
        if let Err(source) = result {
            report.elapsed = started.elapsed();
            return Err(PurgeError {
                report: Box::new(report),
                source,
            });
        }
    }
    // The dashboard's counters go after a fixed time, whatever the keys'
    // retention: each purge deletes the few minutes that aged out since
    // the last one.
    if !options.dry_run {
        let before = cutoff(now, crate::traffic::RETENTION).and_utc().timestamp();
        let purged = async { store.conn().await?.purge_traffic(before).await }.await;
        if let Err(source) = purged {
            report.elapsed = started.elapsed();
            return Err(PurgeError {
                report: Box::new(report),
                source,
            });
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// The instant at or before which a key received has expired. A retention
/// too long to subtract means nothing has expired.
fn cutoff(now: NaiveDateTime, retention: Duration) -> NaiveDateTime {
    TimeDelta::from_std(retention)
        .ok()
        .and_then(|retention| now.checked_sub_signed(retention))
        .unwrap_or(NaiveDateTime::MIN)
}

async fn count(
    store: &Store,
    expiry: &Expiry<'_>,
    retention: Duration,
    report: &mut PurgeReport,
) -> Result<(), StoreError> {
    let counts = store.conn().await?.count_expired(expiry).await?;
    for (scope, kind, n) in counts {
        report.add(&scope, retention, kind, n);
    }
    Ok(())
}

async fn delete_in_batches(
    store: &Store,
    expiry: &Expiry<'_>,
    retention: Duration,
    options: &PurgeOptions,
    report: &mut PurgeReport,
    progress: &mut (dyn FnMut(&PurgeReport) + Send),
) -> Result<(), StoreError> {
    let batch = options.batch.max(1);
    loop {
        // Read outside the transaction: on SQLite a read that is later
        // upgraded to a write can fail at once (SQLITE_BUSY_SNAPSHOT) when
        // another writer committed in between; a transaction that starts
        // with its DELETE just waits its turn for the write lock.
        let keys = store.conn().await?.expired_keys(expiry, batch).await?;
        if keys.is_empty() {
            return Ok(());
        }
        let deleted = delete_batch(store, expiry, &keys).await?;
        // A purge with `--older-than` below the retention forgets keys the
        // replay cache would otherwise still answer for.
        for key in &keys {
            store.replay_cache().forget(&key.scope, &key.delivery_id);
        }
        let rows: u64 = deleted.iter().map(|(_, _, n)| n).sum();
        if rows > 0 {
            report.batches += 1;
            report.largest_batch = report
                .largest_batch
                .max(usize::try_from(rows).unwrap_or(usize::MAX));
        }
        let (mut completed, mut abandoned) = (0, 0);
        for (scope, kind, n) in deleted {
            match kind {
                ExpiredKind::Completed => completed += n,
                ExpiredKind::Abandoned => abandoned += n,
            }
            report.add(&scope, retention, kind, n);
        }
        // Per batch, as it commits: a purge that fails later still counts
        // what it deleted.
        crate::telemetry::metrics::purge_deleted(completed, abandoned);
        progress(report);
        if keys.len() < batch {
            return Ok(());
        }
        tokio::time::sleep(options.pause).await;
    }
}

/// Counts the sent publications of `expiry`'s scopes confirmed before its
/// cut-off (a dry run).
async fn count_publications(
    store: &Store,
    expiry: &Expiry<'_>,
    report: &mut PurgeReport,
) -> Result<(), StoreError> {
    let n = store
        .conn()
        .await?
        .count_sent_publications(expiry.scopes, expiry.cutoff)
        .await?;
    report.publications += u64::try_from(n).unwrap_or(0);
    Ok(())
}

/// Deletes the sent publications of `expiry`'s scopes confirmed before its
/// cut-off, a batch per statement (one short transaction each), with the
/// same pause as the keys. Unsent ones stay however old: they are what an
/// outage left, and the relay still owes them to the broker.
async fn delete_publications(
    store: &Store,
    expiry: &Expiry<'_>,
    options: &PurgeOptions,
    report: &mut PurgeReport,
    progress: &mut (dyn FnMut(&PurgeReport) + Send),
) -> Result<(), StoreError> {
    let batch = options.batch.max(1);
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    loop {
        let deleted = store
            .conn()
            .await?
            .purge_sent_publications(expiry.scopes, expiry.cutoff, limit)
            .await?;
        if deleted > 0 {
            report.batches += 1;
            report.largest_batch = report.largest_batch.max(deleted);
            report.publications += deleted as u64;
            crate::telemetry::metrics::purge_deleted_publications(deleted as u64);
            progress(report);
        }
        if deleted < batch {
            return Ok(());
        }
        tokio::time::sleep(options.pause).await;
    }
}

/// Deletes one batch of keys in one transaction, one statement per scope
/// and kind, and returns what each statement deleted. Either the whole
/// batch commits or none of it.
async fn delete_batch(
    store: &Store,
    expiry: &Expiry<'_>,
    keys: &[ExpiredKey],
) -> Result<Vec<(String, ExpiredKind, u64)>, StoreError> {
    let mut groups: BTreeMap<(&str, ExpiredKind), Vec<&str>> = BTreeMap::new();
    for key in keys {
        groups
            .entry((key.scope.as_str(), key.kind))
            .or_default()
            .push(key.delivery_id.as_str());
    }
    let mut tx = store.begin().await?;
    let mut deleted = Vec::with_capacity(groups.len());
    for ((scope, kind), ids) in &groups {
        match tx.conn().delete_expired(expiry, scope, *kind, ids).await {
            Ok(n) => deleted.push(((*scope).to_owned(), *kind, n as u64)),
            Err(error) => {
                if let Err(rollback) = tx.rollback().await {
                    tracing::warn!(error = %rollback, "rollback failed; the connection is discarded");
                }
                return Err(error);
            }
        }
    }
    tx.commit().await?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_too_long_to_subtract_expires_nothing() {
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0)
            .unwrap()
            .naive_utc();
        assert_eq!(cutoff(now, Duration::MAX), NaiveDateTime::MIN);
        assert_eq!(
            cutoff(now, Duration::from_secs(3600)),
            now - TimeDelta::hours(1)
        );
    }
}
