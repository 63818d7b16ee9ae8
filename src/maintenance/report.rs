use crate::duration_text::format_duration;
use crate::store::ExpiredKind;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What one purge deleted (or, in a dry run, would delete), by scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeReport {
    pub dry_run: bool,
    /// Keyed by scope: an endpoint name, or a client-key scope such as
    /// `POST /payments`. Only scopes with something expired appear.
    pub scopes: BTreeMap<String, ScopeCounts>,
    /// Sent outbox rows past their endpoint's retention (unsent ones are
    /// never purged).
    pub publications: u64,
    /// Transactions that deleted rows (none in a dry run).
    pub batches: usize,
    /// The most rows one transaction deleted.
    pub largest_batch: usize,
    pub elapsed: Duration,
}

/// One scope's expired keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeCounts {
    /// The retention the scope was purged with.
    pub retention: Duration,
    /// Completed keys past the retention.
    pub completed: u64,
    /// `in_progress` claims past the retention whose lease had expired.
    pub abandoned: u64,
}

impl ScopeCounts {
    pub fn total(&self) -> u64 {
        self.completed + self.abandoned
    }
}

impl PurgeReport {
    pub fn new(dry_run: bool) -> PurgeReport {
        PurgeReport {
            dry_run,
            ..PurgeReport::default()
        }
    }

    /// Every scope's keys together.
    pub fn total(&self) -> u64 {
        self.scopes.values().map(ScopeCounts::total).sum()
    }

    /// The count of `scope`, zero if it had nothing expired.
    pub fn deleted_in(&self, scope: &str) -> u64 {
        self.scopes.get(scope).map(ScopeCounts::total).unwrap_or(0)
    }

    pub(super) fn add(&mut self, scope: &str, retention: Duration, kind: ExpiredKind, n: u64) {
        if n == 0 {
            return;
        }
        let counts = self.scopes.entry(scope.to_owned()).or_default();
        counts.retention = retention;
        match kind {
            ExpiredKind::Completed => counts.completed += n,
            ExpiredKind::Abandoned => counts.abandoned += n,
        }
    }
}

/// The command's output: a headline, one line per scope and the total.
impl fmt::Display for PurgeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        if total == 0 && self.publications == 0 {
            return writeln!(f, "nothing to purge: no key has outlived its retention");
        }
        if total == 0 {
            return self.fmt_publications(f);
        }
        if self.dry_run {
            writeln!(
                f,
                "dry run: {total} expired key(s) would be deleted; nothing was deleted"
            )?;
        } else {
            writeln!(
                f,
                "deleted {total} expired key(s) in {} batch(es) of at most {} row(s), in {:.2} s",
                self.batches,
                self.largest_batch,
                self.elapsed.as_secs_f64()
            )?;
        }
        let width = self
            .scopes
            .keys()
            .map(String::len)
            .chain(["scope".len(), "total".len()])
            .max()
            .unwrap_or(0);
        writeln!(
            f,
            "  {:<width$}  {:>8}  {:>9}  {:>9}  retention",
            "scope", "keys", "completed", "abandoned"
        )?;
        for (scope, counts) in &self.scopes {
            writeln!(
                f,
                "  {scope:<width$}  {:>8}  {:>9}  {:>9}  {}",
                counts.total(),
                counts.completed,
                counts.abandoned,
                format_duration(counts.retention)
            )?;
        }
        writeln!(f, "  {:<width$}  {total:>8}", "total")?;
        self.fmt_publications(f)
    }
}

impl PurgeReport {
    /// The line about sent outbox rows, when there were any.
    fn fmt_publications(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.publications, self.dry_run) {
            (0, _) => Ok(()),
            (n, true) => writeln!(
                f,
                "dry run: {n} sent publication(s) would be deleted from the outbox"
            ),
            (n, false) => writeln!(f, "deleted {n} sent publication(s) from the outbox"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_prints_one_line_per_scope_and_the_total() {
        let mut report = PurgeReport::new(false);
        let day = Duration::from_secs(24 * 3600);
        report.add("shop", day, ExpiredKind::Completed, 6);
        report.add("shop", day, ExpiredKind::Abandoned, 1);
        report.add("POST /payments", 3 * day, ExpiredKind::Completed, 3);
        report.add("idle", day, ExpiredKind::Completed, 0);
        report.batches = 4;
        report.largest_batch = 3;
        let text = report.to_string();
        assert!(text.starts_with("deleted 10 expired key(s) in 4 batch(es) of at most 3 row(s)"));
        assert!(
            text.contains("  shop                   7          6          1  24h\n"),
            "{text}"
        );
        assert!(
            text.contains("  POST /payments         3          3          0  72h\n"),
            "{text}"
        );
        assert!(text.ends_with("  total                 10\n"), "{text}");
        assert!(!text.contains("idle"));
        assert!(!text.contains("publication"));
        report.publications = 2;
        assert!(report.to_string().ends_with(
            "  total                 10\ndeleted 2 sent publication(s) from the outbox\n"
        ));
        assert_eq!(report.deleted_in("shop"), 7);
        assert_eq!(report.deleted_in("idle"), 0);
    }

    #[test]
    fn a_dry_run_says_that_nothing_was_deleted() {
        let mut report = PurgeReport::new(true);
        report.add("shop", Duration::from_secs(60), ExpiredKind::Completed, 2);
        assert!(
            report
                .to_string()
                .starts_with("dry run: 2 expired key(s) would be deleted; nothing was deleted")
        );
        assert_eq!(
            PurgeReport::new(true).to_string(),
            "nothing to purge: no key has outlived its retention\n"
        );
    }
}
