//! The one source of "now" for everything that judges time: leases,
//! retention, the replay cache's TTL, stale claims and the timestamps written
//! to rows. Production reads the system clock; tests hold a [`ManualClock`]
//! and move it forward instead of sleeping until a lease or a TTL runs out.
//!
//! A leaf: it imports nothing of the product.
//!
//! Only pacing stays on tokio's own timer (the pause between two lease
//! renewals, the purge's interval, the bounded wait for a busy key): those
//! wait for real work to happen, which a manual clock cannot speed up.

use chrono::{DateTime, NaiveDateTime, Utc};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> DateTime<Utc>;

    /// [`Clock::now`] as the database columns store it (UTC, no zone).
    fn naive_now(&self) -> NaiveDateTime {
        self.now().naive_utc()
    }
}

/// The clock every clone of a store, engine and face shares.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock of the machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The system clock, shared.
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock that tests move by hand: [`ManualClock::advance`] jumps it
/// forward, so a test decides when a lease or a TTL runs out instead of
/// sleeping until it does. Clones share one clock, across threads.
///
/// [`ManualClock::new`] stands still between two moves: the strictest, for
/// unit tests. [`ManualClock::starting_now`] also runs with the system clock,
/// as a receiver's clock does, so that keys received one after another
/// still arrive in order; what it was moved by stays added.
#[derive(Clone)]
pub struct ManualClock {
    /// Nanoseconds since the Unix epoch (enough until the year 2262), or,
    /// when `runs` is set, nanoseconds ahead of the system clock.
    nanos: Arc<AtomicI64>,
    runs: bool,
}

impl ManualClock {
    /// A clock standing at `at` until it is moved.
    pub fn new(at: DateTime<Utc>) -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicI64::new(nanos_of(at))),
            runs: false,
        }
    }

    /// The system clock, plus whatever this clock is advanced by.
    pub fn starting_now() -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicI64::new(0)),
            runs: true,
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        self.nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(by))
            })
            .ok();
    }

    /// Puts the clock at `at` (from where a running clock runs on).
    pub fn set(&self, at: DateTime<Utc>) {
        let nanos = match self.runs {
            true => nanos_of(at).saturating_sub(nanos_of(Utc::now())),
            false => nanos_of(at),
        };
        self.nanos.store(nanos, Ordering::Release);
    }

    /// This clock as the shared clock a store or a face takes.
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        let nanos = self.nanos.load(Ordering::Acquire);
        match self.runs {
            true => DateTime::from_timestamp_nanos(nanos_of(Utc::now()).saturating_add(nanos)),
            false => DateTime::from_timestamp_nanos(nanos),
        }
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}

fn nanos_of(at: DateTime<Utc>) -> i64 {
    at.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_move_with_it() {
        let start = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let clock = ManualClock::new(start);
        let shared = clock.shared();
        assert_eq!(shared.now(), start);
        std::thread::spawn({
            let clock = clock.clone();
            move || clock.advance(Duration::from_millis(1500))
        })
        .join()
        .unwrap();
        assert_eq!(shared.now(), start + TimeDelta::milliseconds(1500));
        assert_eq!(
            shared.naive_now(),
            (start + TimeDelta::milliseconds(1500)).naive_utc()
        );
        clock.set(start);
        assert_eq!(clock.now(), start);
    }

    #[test]
    fn a_running_manual_clock_keeps_what_it_was_advanced_by() {
        let clock = ManualClock::starting_now();
        let before = Utc::now();
        clock.advance(Duration::from_secs(3600));
        let now = clock.now();
        assert!(now >= before + TimeDelta::hours(1), "{now} {before}");
        assert!(now < Utc::now() + TimeDelta::hours(1) + TimeDelta::seconds(1));
        let later = clock.now();
        assert!(later >= now, "it runs on, never back");
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        clock.set(at);
        assert!(clock.now() >= at && clock.now() < at + TimeDelta::seconds(1));
    }
}
