//! The keys this process is working on right now, so that a parallel copy
//! of a delivery does not send its operation's statements ahead of its
//! claim.
//!
//! On PostgreSQL an operation's statements may travel in the claim's own
//! flight, before anyone knows whether the claim won
//! ([`super::Operation::run_in_flight`]). For a fresh key that saves a round
//! trip; for a copy that loses the claim it costs writes that are rolled
//! back, and they queue on the winner's rows. The copies of a storm arrive
//! at one process together, so a key already being worked on here is
//! claimed alone; a copy at another instance still may fly, and its writes
//! still go. Side by side, before this register, a storm of 64 copies ran
//! at half the deliveries per second.
//!
//! Keys are held by a 64-bit hash: two keys that share one only cost each
//! other the flight, never correctness.

use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

#[derive(Default)]
pub(super) struct KeysInFlight {
    hasher: RandomState,
    /// How many of this process's deliveries are on each key's hash now.
    held: Mutex<HashMap<u64, u32, RandomState>>,
}

/// One delivery's hold on its key, let go when dropped.
pub(super) struct Held<'k> {
    keys: &'k KeysInFlight,
    hash: u64,
    /// No other delivery of this process was on the key when this one came.
    pub alone: bool,
}

impl KeysInFlight {
    pub fn hold(&self, scope: &str, key: &str) -> Held<'_> {
        let hash = self.hasher.hash_one((scope, key));
        let alone = match self.held.lock() {
            Ok(mut held) => {
                let count = held.entry(hash).or_insert(0);
                *count += 1;
                *count == 1
            }
            // A poisoned register says nothing: the claim goes alone.
            Err(_) => false,
        };
        Held {
            keys: self,
            hash,
            alone,
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Ok(mut held) = self.keys.held.lock()
            && let Some(count) = held.get_mut(&self.hash)
        {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_alone_until_a_second_delivery_holds_it_and_again_once_both_let_go() {
        let keys = KeysInFlight::default();
        let first = keys.hold("shop", "evt_1");
        assert!(first.alone);
        let other_key = keys.hold("shop", "evt_2");
        assert!(other_key.alone, "another key is not held");
        let other_scope = keys.hold("repo", "evt_1");
        assert!(other_scope.alone, "nor the same key in another scope");
        let second = keys.hold("shop", "evt_1");
        assert!(!second.alone);
        drop(first);
        let third = keys.hold("shop", "evt_1");
        assert!(!third.alone, "the second still holds it");
        drop(second);
        drop(third);
        assert!(keys.hold("shop", "evt_1").alone);
        drop((other_key, other_scope));
        assert!(keys.held.lock().unwrap().is_empty(), "nothing left behind");
    }
}
