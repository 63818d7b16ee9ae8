//! A bounded in-process cache of completed keys, so that a redelivery storm
//! is answered without a database round trip per request.
//!
//! Only completed rows go in. A completed row never changes until its
//! retention ends, so an entry read by one instance stays true whatever the
//! other instances do; that is what makes the cache safe behind a load
//! balancer. Two operator actions do change or remove a completed row before
//! its retention: `reprocess` (new answer) and `purge --older-than` (key
//! forgotten early). Done in this process they evict the entry; done by
//! another process, the entry lives at most `ttl` more. Retention itself is
//! checked on every hit by the engine, exactly as for a row read from the
//! database.

use super::StoredResponse;
use crate::clock::SharedClock;
use chrono::{DateTime, NaiveDateTime, Utc};
use quick_cache::Weighter;
use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, Equivalent, OptionsBuilder};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// What the engine needs of a completed row to answer a repeat.
///
/// Its strings (the request hash, the event type, the content type and
/// the `Location`) are kept one after another in one allocation beside
/// the rest, rather than as four: a repeat reads the hash to compare it and
/// the other three to answer, and each separate block was one more load
/// that could miss the CPU's cache on every replay.
#[derive(Debug)]
pub struct CachedCompletion {
    pub received_at: NaiveDateTime,
    status: u16,
    /// Shared with every replay's HTTP body, never copied.
    body: bytes::Bytes,
    /// The request hash, the event type, the content type and the
    /// location, in that order.
    text: Box<str>,
    /// Where each of the four ends in `text`.
    ends: [usize; 4],
    /// Whether the row had an event type and a location: an empty one is
    /// kept apart from none.
    has_event_type: bool,
    has_location: bool,
    cached_at: DateTime<Utc>,
}

impl CachedCompletion {
    fn new(
        request_hash: &str,
        received_at: NaiveDateTime,
        event_type: Option<&str>,
        response: &StoredResponse,
        cached_at: DateTime<Utc>,
    ) -> CachedCompletion {
        let parts = [
            request_hash,
            event_type.unwrap_or(""),
            response.content_type.as_str(),
            response.location.as_deref().unwrap_or(""),
        ];
        let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
        let mut ends = [0; 4];
        for (end, part) in ends.iter_mut().zip(parts) {
            text.push_str(part);
            *end = text.len();
        }
        CachedCompletion {
            received_at,
            status: response.status,
            body: response.body.clone(),
            text: text.into_boxed_str(),
            ends,
            has_event_type: event_type.is_some(),
            has_location: response.location.is_some(),
            cached_at,
        }
    }

    /// The `i`th of the four strings. Each end was taken after a whole
    /// `str` was pushed, so each is a char boundary.
    fn part(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.text.get(start..self.ends[i]).unwrap_or_default()
    }

    pub fn request_hash(&self) -> &str {
        self.part(0)
    }

    /// The delivery's event type, for the log line and the span of a repeat
    /// answered before its body is parsed.
    pub fn event_type(&self) -> Option<&str> {
        self.has_event_type.then(|| self.part(1))
    }

    /// The stored answer, its body shared.
    pub fn response(&self) -> StoredResponse {
        StoredResponse {
            status: self.status,
            content_type: self.part(2).to_owned(),
            body: self.body.clone(),
            location: self.has_location.then(|| self.part(3).to_owned()),
        }
    }

    /// Bytes held on the heap, besides the fixed overhead.
    fn len(&self) -> usize {
        self.text.len() + self.body.len()
    }

    /// Whether the entry is younger than `ttl` at `now`. A clock set back
    /// since the entry was cached makes the age negative: treated as
    /// expired, so an entry never outlives its TTL.
    fn within(&self, ttl: Duration, now: DateTime<Utc>) -> bool {
        (now - self.cached_at).to_std().is_ok_and(|age| age < ttl)
    }
}

/// The key of one entry: its scope and its key, each hashed and compared
/// as a whole, so that ("a", "b\0c") and ("a\0b", "c") stay apart.
///
/// Both are kept in one allocation, the scope first: a lookup that finds
/// the slot then reads one block of memory to compare them, not two. A
/// replay answered from the cache is mostly such reads, and each that
/// misses the CPU's cache costs more than the rest of the lookup.
#[derive(Debug, PartialEq, Eq)]
struct EntryKey {
    /// The scope, then the key.
    joined: Box<str>,
    /// Where the key starts in `joined`.
    scope_len: usize,
}

impl EntryKey {
    fn new(scope: &str, key: &str) -> EntryKey {
        let mut joined = String::with_capacity(scope.len() + key.len());
        joined.push_str(scope);
        joined.push_str(key);
        EntryKey {
            joined: joined.into_boxed_str(),
            scope_len: scope.len(),
        }
    }

    fn parts(&self) -> (&str, &str) {
        // `scope_len` is a char boundary: the scope's own length.
        self.joined
            .split_at_checked(self.scope_len)
            .unwrap_or_default()
    }

    /// Bytes held on the heap.
    fn len(&self) -> usize {
        self.joined.len()
    }
}

/// The same calls as [`EntryRef`]'s: the scope's `str`, then the key's.
impl Hash for EntryKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (scope, key) = self.parts();
        scope.hash(state);
        key.hash(state);
    }
}

/// An [`EntryKey`] borrowed from a request: a lookup builds no string.
/// Its derived `Hash` makes the same calls as `EntryKey`'s, so the two
/// hash alike.
#[derive(Hash)]
struct EntryRef<'a> {
    scope: &'a str,
    key: &'a str,
}

impl Equivalent<EntryKey> for EntryRef<'_> {
    fn equivalent(&self, stored: &EntryKey) -> bool {
        stored.parts() == (self.scope, self.key)
    }
}

#[derive(Clone)]
struct BytesWeighter;

impl Weighter<EntryKey, Arc<CachedCompletion>> for BytesWeighter {
    fn weight(&self, key: &EntryKey, entry: &Arc<CachedCompletion>) -> u64 {
        // What an entry really holds, plus the fixed overhead of its
        // allocations, so that `bytes` bounds the memory and not a count.
        (key.len() + entry.len() + 160) as u64
    }
}

/// Settings of the cache; `bytes = 0` turns it off.
#[derive(Clone, Debug)]
pub struct ReplayCacheOptions {
    pub bytes: u64,
    pub ttl: Duration,
}

impl Default for ReplayCacheOptions {
    fn default() -> Self {
        ReplayCacheOptions {
            bytes: 8 * 1024 * 1024,
            ttl: Duration::from_secs(60),
        }
    }
}

pub struct ReplayCache {
    entries: Option<Cache<EntryKey, Arc<CachedCompletion>, BytesWeighter>>,
    ttl: Duration,
    clock: SharedClock,
    /// When the next sweep of expired entries is due, in milliseconds of
    /// the clock's Unix time; taken by one caller of `remember` at a time.
    next_sweep: AtomicI64,
    /// Milliseconds between two sweeps: a quarter of the TTL, at least 1.
    sweep_every_ms: i64,
}

/// Responses larger than this are always read from the database: one of
/// them would push many small ones out.
const LARGEST_ENTRY: usize = 64 * 1024;

/// The share of the cache's bytes for its "hot" entries: those put in
/// while it had room, and those read again while on probation. The rest
/// holds the newest completions on probation, and is where a full cache
/// evicts. quick_cache's default, 97 %, suits workloads that favour
/// frequency; a completion is put in once and repeated, if ever, soon after
/// (a storm's copies, a retry after a timeout), which favours recency. At
/// 97 %, a receiver completing 4,000 deliveries a second kept each new one
/// for about a tenth of a second, so a repeat a second later read the
/// database; at 50 % the newest half of the budget is seconds of
/// completions at that rate.
const HOT_SHARE: f64 = 0.5;

/// How many sweeps of expired entries a TTL spans (see
/// [`ReplayCache::sweep_if_due`]).
const SWEEPS_PER_TTL: u32 = 4;

impl ReplayCache {
    pub fn new(options: &ReplayCacheOptions, clock: SharedClock) -> ReplayCache {
        let entries = (options.bytes > 0 && !options.ttl.is_zero()).then(|| {
            // The estimate only sizes the initial tables: ~512 bytes an entry.
            let estimated = (options.bytes / 512).clamp(16, 1 << 20) as usize;
            match OptionsBuilder::new()
                .estimated_items_capacity(estimated)
                .weight_capacity(options.bytes)
                .hot_allocation(HOT_SHARE)
                .build()
            {
                Ok(built) => Cache::with_options(
                    built,
                    BytesWeighter,
                    DefaultHashBuilder::default(),
                    DefaultLifecycle::default(),
                ),
                // Only unset sizes fail to build, and both are set above.
                Err(_) => Cache::with_weighter(estimated, options.bytes, BytesWeighter),
            }
        });
        ReplayCache {
            entries,
            ttl: options.ttl,
            clock,
            next_sweep: AtomicI64::new(i64::MIN),
            sweep_every_ms: i64::try_from((options.ttl / SWEEPS_PER_TTL).as_millis())
                .unwrap_or(i64::MAX)
                .max(1),
        }
    }

    /// The completed row of `key` in `scope`, if it was read within the TTL.
    pub fn get(&self, scope: &str, key: &str) -> Option<Arc<CachedCompletion>> {
        self.get_at(scope, key, self.clock.now())
    }

    /// [`ReplayCache::get`] as of `now`, read by the caller from this
    /// cache's clock (the store's), for a caller that needs the same now.
    pub fn get_at(
        &self,
        scope: &str,
        key: &str,
        now: DateTime<Utc>,
    ) -> Option<Arc<CachedCompletion>> {
        let entries = self.entries.as_ref()?;
        let entry = entries.get(&EntryRef { scope, key })?;
        entry.within(self.ttl, now).then_some(entry)
    }

    /// Remembers a row that was read from the database as completed.
    pub fn remember(
        &self,
        scope: &str,
        key: &str,
        request_hash: &str,
        received_at: NaiveDateTime,
        event_type: Option<&str>,
        response: &StoredResponse,
    ) {
        let Some(entries) = &self.entries else {
            return;
        };
        if response.body.len() > LARGEST_ENTRY {
            return;
        }
        let entry = CachedCompletion::new(
            request_hash,
            received_at,
            event_type,
            response,
            self.clock.now(),
        );
        let now = entry.cached_at;
        entries.insert(EntryKey::new(scope, key), Arc::new(entry));
        self.sweep_if_due(entries, now);
    }

    /// Drops the entries past their TTL, every `ttl / SWEEPS_PER_TTL`.
    ///
    /// The cache evicts by its own policy, which knows nothing of the TTL:
    /// its hot share, filled by the first completions put in while it had
    /// room, stays until entries read on probation push them out. Where
    /// repeats are rare that never happens, and the hot share held keys
    /// that no read would accept any more, while every new completion went
    /// through the probation share alone. A sweep frees that room for new
    /// completions. It takes each shard's lock in turn for one pass over
    /// its entries, once every few seconds.
    fn sweep_if_due(
        &self,
        entries: &Cache<EntryKey, Arc<CachedCompletion>, BytesWeighter>,
        now: DateTime<Utc>,
    ) {
        let now_ms = now.timestamp_millis();
        let due = self.next_sweep.load(Ordering::Relaxed);
        let every = self.sweep_every_ms;
        // Not due yet, unless the due time is further ahead than one
        // interval: then the clock was set back since it was taken, and
        // waiting for the clock to catch up would stop the sweeps for as
        // long as it was set back, while every entry cached before is
        // already unusable (see `CachedCompletion::within`).
        if now_ms < due && due.saturating_sub(now_ms) <= every {
            return;
        }
        let next = now_ms.saturating_add(every);
        // One caller sweeps; the others go on at once.
        if self
            .next_sweep
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        entries.retain(|_, entry| entry.within(self.ttl, now));
    }

    /// Drops the entry of a key whose stored row this process changed or
    /// deleted.
    pub fn forget(&self, scope: &str, key: &str) {
        if let Some(entries) = &self.entries {
            entries.remove(&EntryRef { scope, key });
        }
    }

    pub fn clear(&self) {
        if let Some(entries) = &self.entries {
            entries.clear();
        }
    }

    /// How many entries are held now, for the metrics.
    pub fn len(&self) -> usize {
        self.entries.as_ref().map_or(0, Cache::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn response(body: &str) -> StoredResponse {
        StoredResponse {
            status: 200,
            content_type: "application/json".into(),
            body: bytes::Bytes::copy_from_slice(body.as_bytes()),
            location: None,
        }
    }

    fn at() -> NaiveDateTime {
        DateTime::from_timestamp(1_800_000_000, 0)
            .expect("a valid instant")
            .naive_utc()
    }

    /// A manual clock at [`at`].
    fn clock_at_start() -> ManualClock {
        ManualClock::new(at().and_utc())
    }

    fn system() -> SharedClock {
        crate::clock::system()
    }

    #[test]
    fn a_remembered_key_is_found_in_its_scope_only() {
        let cache = ReplayCache::new(&ReplayCacheOptions::default(), system());
        cache.remember("shop", "msg_1", "h1", at(), None, &response("{}"));
        let hit = cache.get("shop", "msg_1").expect("a hit");
        assert_eq!(hit.request_hash(), "h1");
        assert_eq!(hit.response().body, &b"{}"[..]);
        assert!(cache.get("other", "msg_1").is_none());
        // Scope and key are compared apart, whatever bytes they hold.
        cache.remember("a", "b", "h", at(), None, &response("1"));
        assert!(cache.get("a\u{0}b", "").is_none());
        assert!(cache.get("ab", "").is_none());
        cache.remember("a", "b\u{0}c", "h", at(), None, &response("1"));
        assert!(cache.get("a\u{0}b", "c").is_none());
        assert!(cache.get("a", "b\u{0}c").is_some());
    }

    #[test]
    fn a_hit_gives_back_every_part_of_the_row_as_it_was_remembered() {
        let cache = ReplayCache::new(&ReplayCacheOptions::default(), system());
        let created = StoredResponse {
            status: 201,
            content_type: "application/problem+json; charset=utf-8".into(),
            body: bytes::Bytes::from_static(b"{\"id\":\"pay_1\"}"),
            location: Some("/payments/pay_1".into()),
        };
        cache.remember(
            "shop",
            "k1",
            "hash-\u{e9}",
            at(),
            Some("charge.\u{fc}"),
            &created,
        );
        let hit = cache.get("shop", "k1").expect("a hit");
        assert_eq!(hit.request_hash(), "hash-\u{e9}");
        assert_eq!(hit.event_type(), Some("charge.\u{fc}"));
        assert_eq!(hit.received_at, at());
        let answer = hit.response();
        assert_eq!(answer.status, 201);
        assert_eq!(answer.content_type, created.content_type);
        assert_eq!(answer.body, created.body);
        assert_eq!(answer.location, created.location);

        // An empty event type or location is not the same as none.
        let mut bare = response("");
        bare.content_type = String::new();
        cache.remember("shop", "k2", "", at(), None, &bare);
        let hit = cache.get("shop", "k2").expect("a hit");
        assert_eq!((hit.request_hash(), hit.event_type()), ("", None));
        assert_eq!(hit.response().location, None);
        assert_eq!(hit.response().content_type, "");
        bare.location = Some(String::new());
        cache.remember("shop", "k3", "h", at(), Some(""), &bare);
        let hit = cache.get("shop", "k3").expect("a hit");
        assert_eq!(hit.event_type(), Some(""));
        assert_eq!(hit.response().location.as_deref(), Some(""));
    }

    #[test]
    fn a_hit_shares_the_remembered_body_rather_than_copying_it() {
        let cache = ReplayCache::new(&ReplayCacheOptions::default(), system());
        let stored = response("{\"ok\":true}");
        cache.remember("shop", "msg_1", "h1", at(), None, &stored);
        let hit = cache.get("shop", "msg_1").expect("a hit");
        let replayed = hit.response();
        assert_eq!(replayed.body.as_ptr(), stored.body.as_ptr());
    }

    #[test]
    fn forget_and_the_ttl_end_an_entry() {
        let clock = clock_at_start();
        let cache = ReplayCache::new(
            &ReplayCacheOptions {
                bytes: 1 << 20,
                ttl: Duration::from_millis(30),
            },
            clock.shared(),
        );
        cache.remember("shop", "msg_1", "h1", at(), None, &response("{}"));
        cache.remember("shop", "msg_2", "h2", at(), None, &response("{}"));
        cache.forget("shop", "msg_1");
        assert!(cache.get("shop", "msg_1").is_none());
        assert!(cache.get("shop", "msg_2").is_some());
        clock.advance(Duration::from_millis(29));
        assert!(cache.get("shop", "msg_2").is_some(), "within the TTL");
        clock.advance(Duration::from_millis(1));
        assert!(cache.get("shop", "msg_2").is_none(), "past the TTL");
    }

    #[test]
    fn an_entry_cached_before_the_clock_was_set_back_is_not_trusted() {
        let clock = clock_at_start();
        let cache = ReplayCache::new(&ReplayCacheOptions::default(), clock.shared());
        cache.remember("shop", "msg_1", "h1", at(), None, &response("{}"));
        clock.set(clock.now() - chrono::TimeDelta::seconds(1));
        assert!(cache.get("shop", "msg_1").is_none());
    }

    #[test]
    fn the_byte_budget_bounds_what_is_held() {
        let cache = ReplayCache::new(
            &ReplayCacheOptions {
                bytes: 64 * 1024,
                ttl: Duration::from_secs(60),
            },
            system(),
        );
        let body = "x".repeat(900);
        for n in 0..1000 {
            remember_numbered(&cache, n, &body);
        }
        // 64 KiB holds at most ~60 entries of ~1 KiB.
        assert!(cache.len() <= 64, "{} entries held", cache.len());
        assert!(!cache.is_empty());
        cache.remember(
            "shop",
            "huge",
            "h",
            at(),
            None,
            &response(&"y".repeat(100_000)),
        );
        assert!(cache.get("shop", "huge").is_none(), "too large to cache");
    }

    /// A cache of 4 MiB on `clock`, with the default TTL.
    fn four_mib(clock: &ManualClock) -> ReplayCache {
        ReplayCache::new(
            &ReplayCacheOptions {
                bytes: 4 << 20,
                ttl: Duration::from_secs(60),
            },
            clock.shared(),
        )
    }

    /// Completions `from..to` of about 1.1 KiB each, 250 µs apart, none of
    /// them read, as under fresh traffic with no repeats.
    fn fill(cache: &ReplayCache, clock: &ManualClock, from: usize, to: usize) {
        let body = "x".repeat(900);
        for n in from..to {
            remember_numbered(cache, n, &body);
            clock.advance(Duration::from_micros(250));
        }
    }

    fn numbered(n: usize) -> String {
        format!("msg_{n}")
    }

    /// Completion [`numbered`]`(n)` of scope `shop`, answered with `body`.
    fn remember_numbered(cache: &ReplayCache, n: usize, body: &str) {
        cache.remember("shop", &numbered(n), "h", at(), None, &response(body));
    }

    /// How many of the completions `from..to` are answered from memory.
    fn held(cache: &ReplayCache, from: usize, to: usize) -> usize {
        (from..to)
            .filter(|n| cache.get("shop", &numbered(*n)).is_some())
            .count()
    }

    #[test]
    fn the_newest_completions_stay_under_a_stream_of_new_ones() {
        let clock = clock_at_start();
        // 12,000 completions in 3 s, three times what the budget holds.
        let cache = four_mib(&clock);
        fill(&cache, &clock, 0, 12_000);
        // The newest 1,000 (a quarter of the budget, the last quarter
        // second) are all answered from memory. With quick_cache's default
        // hot share (97 %) about 120 of them were.
        assert_eq!(held(&cache, 11_000, 12_000), 1_000);
    }

    #[test]
    fn entries_past_the_ttl_make_room_for_new_ones() {
        let clock = clock_at_start();
        let cache = four_mib(&clock);
        fill(&cache, &clock, 0, 4_000);
        assert!(
            held(&cache, 0, 4_000) > 3_000,
            "the budget holds about 3,800"
        );
        // A minute later the first ones are past the TTL; 3,000 new
        // completions (four fifths of the budget) all stay. Without the
        // sweep, the hot half still held expired ones, and the new ones
        // had only the other half.
        clock.advance(Duration::from_secs(61));
        fill(&cache, &clock, 4_000, 7_000);
        assert_eq!(held(&cache, 4_000, 7_000), 3_000);
        assert_eq!(held(&cache, 0, 4_000), 0, "past the TTL");
        assert!(cache.len() <= 4_000, "{} entries held", cache.len());
    }

    #[test]
    fn a_clock_set_back_does_not_put_off_the_sweep() {
        let clock = clock_at_start();
        let cache = four_mib(&clock);
        fill(&cache, &clock, 0, 4_000);
        // The clock is set back an hour: what was cached is from the future
        // now, never answered again. The next sweep is not an hour away:
        // the 3,000 new completions all stay, as after a TTL's wait.
        // Without the check, the sweep waited for the old due time and
        // about 1,900 of them stayed.
        clock.set(clock.now() - chrono::TimeDelta::hours(1));
        fill(&cache, &clock, 4_000, 7_000);
        assert_eq!(held(&cache, 4_000, 7_000), 3_000);
        assert_eq!(
            held(&cache, 0, 4_000),
            0,
            "cached before the clock was set back"
        );
    }

    #[test]
    fn a_zero_budget_turns_the_cache_off() {
        let cache = ReplayCache::new(
            &ReplayCacheOptions {
                bytes: 0,
                ttl: Duration::from_secs(60),
            },
            system(),
        );
        cache.remember("shop", "msg_1", "h1", at(), None, &response("{}"));
        assert!(cache.get("shop", "msg_1").is_none());
    }
}
