//! Which shard of an in-memory tally the calling thread writes to.
//!
//! A tally that every worker updates on every request (replays per key,
//! the dashboard's traffic) is cheap to compute and expensive to share:
//! when two cores write the same lock and map in turn, each update waits
//! for those cache lines to come over from the core that wrote them last.
//! Giving each thread a shard of its own keeps them in its core's cache;
//! the reader that empties the tally every few seconds merges the shards.
//!
//! Each shard is a `crossbeam_utils::CachePadded`, on cache lines of its
//! own. Shards side by side in an array share lines (a `Mutex` around a
//! `HashMap` is 56 bytes), so two threads locking shards of their own
//! still passed one line between their cores on every lock: the false
//! sharing the shards were made to avoid. On x86-64 the padding is 128
//! bytes, not 64, because the prefetcher fetches lines in pairs.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The calling thread's shard among `shards` (at least 1): threads are
/// numbered in the order they first ask, so the first `shards` threads
/// (the workers, which start first) each get one of their own; later
/// threads share, which stays correct, only slower.
pub fn of_current_thread(shards: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|number| number % shards.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_shard_and_threads_spread_over_them() {
        let mine = of_current_thread(8);
        assert_eq!(of_current_thread(8), mine, "the same shard every time");
        assert!(mine < 8);
        let others: std::collections::HashSet<usize> = (0..8)
            .map(|_| std::thread::spawn(|| of_current_thread(1 << 20)).join())
            .collect::<Result<_, _>>()
            .expect("no thread panics");
        assert_eq!(others.len(), 8, "eight new threads, eight numbers");
        assert_eq!(of_current_thread(0), 0, "no shards is one shard");
    }

    /// The layout the shards rely on, on the machines the bench runs on.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn padded_shards_share_no_cache_line() {
        let shards: [crossbeam_utils::CachePadded<std::sync::Mutex<u8>>; 4] = Default::default();
        let at = |i: usize| std::ptr::from_ref(&shards[i]) as usize;
        for i in 1..4 {
            assert_eq!(at(i) - at(i - 1), 128, "one shard per 128 bytes");
            assert_eq!(at(i) % 128, 0, "each starts a line pair");
        }
        assert_eq!(
            *shards[0].lock().expect("not poisoned"),
            0,
            "derefs to the shard"
        );
    }
}
