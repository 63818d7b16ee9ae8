//! How fast admin credentials may be guessed: a token bucket per client
//! address and one for everybody. Every attempt that presents a credential
//! (a log-in, a bearer token) takes a token from both buckets before the
//! credential is looked at, and a right credential gives it back, so only
//! failures count. Taking first makes a burst of parallel guesses count in
//! full; and because the credential is not even compared while a bucket is
//! empty, a limited client learns nothing, not even from the right token.
//!
//! Time is the caller's: every call takes `now`, so tests drive refills
//! with explicit instants instead of sleeping.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed attempts one address may make in a burst...
pub const ADDRESS_BURST: u32 = 10;
/// ...and how often it is given one more: 10 a minute.
pub const ADDRESS_REFILL: Duration = Duration::from_secs(6);
/// Failed attempts all addresses together may make in a burst...
pub const GLOBAL_BURST: u32 = 100;
/// ...and how often they are given one more: 3,600 an hour, for everybody.
pub const GLOBAL_REFILL: Duration = Duration::from_secs(1);
/// Past this many tracked addresses, the full buckets (which mean nothing
/// more than "never seen") are dropped: the global bucket caps how fast new
/// addresses can arrive, so the map stays small.
const PRUNE_ABOVE: usize = 1024;

/// One bucket's size and refill period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub burst: u32,
    pub refill: Duration,
}

/// The per-address and the global rate of failed admin credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimits {
    pub per_address: Rate,
    pub global: Rate,
}

impl Default for LoginLimits {
    fn default() -> Self {
        LoginLimits {
            per_address: Rate {
                burst: ADDRESS_BURST,
                refill: ADDRESS_REFILL,
            },
            global: Rate {
                burst: GLOBAL_BURST,
                refill: GLOBAL_REFILL,
            },
        }
    }
}

/// Which bucket was empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Address,
    Global,
}

impl Scope {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Scope::Address => "address",
            Scope::Global => "global",
        }
    }
}

/// An attempt refused unexamined, and when the next one may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub scope: Scope,
    pub retry_after: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    /// Adds what `rate` gave since the last look. A `now` earlier than the
    /// last (two callers that read the clock in one order and locked in the
    /// other) adds nothing rather than going back.
    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        if rate.refill.is_zero() {
            self.tokens = f64::from(rate.burst);
        } else {
            let gained = elapsed.as_secs_f64() / rate.refill.as_secs_f64();
            self.tokens = (self.tokens + gained).min(f64::from(rate.burst));
        }
        self.at = self.at.max(now);
    }

    /// How long until one whole token is there.
    fn wait(&self, rate: Rate) -> Duration {
        rate.refill.mul_f64((1.0 - self.tokens).max(0.0))
    }

    fn is_full(&self, rate: Rate) -> bool {
        self.tokens >= f64::from(rate.burst)
    }
}

/// Which addresses count as one client: an IPv4 address, or an IPv6 /64
/// (one host usually holds a whole /64, so single IPv6 addresses would
/// give an attacker 2^64 buckets).
fn client_of(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !(u128::from(u64::MAX));
            IpAddr::V6(bits.into())
        }
    }
}

#[derive(Debug)]
struct State {
    global: Bucket,
    addresses: HashMap<IpAddr, Bucket>,
}

/// The buckets of one admin surface, shared by its workers.
#[derive(Debug)]
pub struct LoginLimiter {
    limits: LoginLimits,
    state: Mutex<State>,
}

impl LoginLimiter {
    pub fn new(limits: LoginLimits, now: Instant) -> LoginLimiter {
        LoginLimiter {
            limits,
            state: Mutex::new(State {
                global: Bucket::full(limits.global, now),
                addresses: HashMap::new(),
            }),
        }
    }

    /// Takes one attempt from `address`'s bucket and the global one, or says
    /// which is empty and for how long. Nothing is taken when refused, so
    /// hammering a limited surface does not push the end further away.
    pub fn admit(&self, address: IpAddr, now: Instant) -> Result<(), Limited> {
        let limits = self.limits;
        let mut state = self.lock();
        let State { global, addresses } = &mut *state;
        global.refill(limits.global, now);
        let own = addresses
            .entry(client_of(address))
            .or_insert_with(|| Bucket::full(limits.per_address, now));
        own.refill(limits.per_address, now);
        // The address first: a client over its own limit is told about its
        // own wait, which is the one it can do something about.
        if own.tokens < 1.0 {
            return Err(Limited {
                scope: Scope::Address,
                retry_after: own.wait(limits.per_address),
            });
        }
        if global.tokens < 1.0 {
            return Err(Limited {
                scope: Scope::Global,
                retry_after: global.wait(limits.global),
            });
        }
        own.tokens -= 1.0;
        global.tokens -= 1.0;
        if addresses.len() > PRUNE_ABOVE {
            for bucket in addresses.values_mut() {
                bucket.refill(limits.per_address, now);
            }
            addresses.retain(|_, bucket| !bucket.is_full(limits.per_address));
        }
        Ok(())
    }

    /// Gives back what [`LoginLimiter::admit`] took: the credential was right.
    pub fn refund(&self, address: IpAddr) {
        let limits = self.limits;
        let mut state = self.lock();
        state.global.tokens = (state.global.tokens + 1.0).min(f64::from(limits.global.burst));
        if let Some(own) = state.addresses.get_mut(&client_of(address)) {
            own.tokens = (own.tokens + 1.0).min(f64::from(limits.per_address.burst));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a few numbers, consistent after every statement: a
        // panic elsewhere while holding the lock leaves nothing half-done.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    fn limits(address: u32, global: u32) -> LoginLimits {
        LoginLimits {
            per_address: Rate {
                burst: address,
                refill: Duration::from_secs(6),
            },
            global: Rate {
                burst: global,
                refill: Duration::from_secs(1),
            },
        }
    }

    #[test]
    fn an_address_gets_its_burst_then_waits_for_the_refill() {
        let t0 = Instant::now();
        let limiter = LoginLimiter::new(limits(3, 100), t0);
        for _ in 0..3 {
            assert_eq!(limiter.admit(A, t0), Ok(()));
        }
        let limited = limiter.admit(A, t0).unwrap_err();
        assert_eq!(limited.scope, Scope::Address);
        assert_eq!(limited.retry_after, Duration::from_secs(6));
        // Another address is not affected.
        assert_eq!(limiter.admit(B, t0), Ok(()));
        // Refused attempts took nothing: half a period later, half a token.
        let half = t0 + Duration::from_secs(3);
        assert_eq!(
            limiter.admit(A, half).unwrap_err().retry_after,
            Duration::from_secs(3)
        );
        let later = t0 + Duration::from_secs(6);
        assert_eq!(limiter.admit(A, later), Ok(()));
        assert!(limiter.admit(A, later).is_err(), "one token per period");
        // A long pause fills the bucket up to its burst, not beyond.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(limiter.admit(A, much_later), Ok(()));
        }
        assert!(limiter.admit(A, much_later).is_err());
    }

    #[test]
    fn all_addresses_together_share_the_global_bucket() {
        let t0 = Instant::now();
        let limiter = LoginLimiter::new(limits(10, 5), t0);
        for i in 0..5u8 {
            let address = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, i));
            assert_eq!(limiter.admit(address, t0), Ok(()));
        }
        let limited = limiter.admit(B, t0).unwrap_err();
        assert_eq!(limited.scope, Scope::Global);
        assert_eq!(limited.retry_after, Duration::from_secs(1));
        assert_eq!(limiter.admit(B, t0 + Duration::from_secs(1)), Ok(()));
    }

    #[test]
    fn a_right_credential_gives_its_attempt_back() {
        let t0 = Instant::now();
        let limiter = LoginLimiter::new(limits(2, 100), t0);
        for _ in 0..50 {
            assert_eq!(limiter.admit(A, t0), Ok(()));
            limiter.refund(A);
        }
        assert_eq!(limiter.admit(A, t0), Ok(()));
        assert_eq!(limiter.admit(A, t0), Ok(()));
        assert!(limiter.admit(A, t0).is_err());
    }

    #[test]
    fn an_ipv6_slash_64_is_one_client() {
        let t0 = Instant::now();
        let limiter = LoginLimiter::new(limits(1, 100), t0);
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(limiter.admit(one, t0), Ok(()));
        assert_eq!(
            limiter.admit(same_64, t0).unwrap_err().scope,
            Scope::Address
        );
        assert_eq!(limiter.admit(other_64, t0), Ok(()));
    }

    #[test]
    fn a_clock_read_before_the_last_one_neither_refills_nor_panics() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(60);
        let limiter = LoginLimiter::new(limits(1, 100), t1);
        assert_eq!(limiter.admit(A, t1), Ok(()));
        assert!(limiter.admit(A, t0).is_err());
    }

    #[test]
    fn full_buckets_are_forgotten_once_many_addresses_are_tracked() {
        let t0 = Instant::now();
        let limiter = LoginLimiter::new(limits(2, u32::MAX), t0);
        for i in 0..=PRUNE_ABOVE as u32 {
            let address = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(limiter.admit(address, t0), Ok(()));
        }
        // A minute later every one of them has refilled: the next admission
        // prunes them all but the newcomer.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(limiter.admit(A, later), Ok(()));
        assert_eq!(limiter.lock().addresses.len(), 1);
    }
}
