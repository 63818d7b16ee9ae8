//! A provider as the receiver meets it in production: every event sent at
//! least once, duplicates on purpose, several copies in flight at the same
//! moment, and each copy retried with a fresh signature until it gets a 2xx.

use idempotent_receiver::client;
use idempotent_receiver::providers::Provider;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How many copies are posted at once by separate senders.
pub const SENDERS: usize = 16;
/// The first pause after a failed attempt, doubled up to [`MAX_BACKOFF`]: a
/// provider backs off, but this one is in a hurry.
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_millis(400);
/// One attempt's bound: a request to a process that was just killed fails at
/// once, but one to a stalled process must not hold a sender forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The share of the send queue that waits for the chaos to strike its
/// minimum number of times, so that every run has that many while
/// deliveries are still in flight, however fast the host.
const GATED_SHARE: f64 = 0.1;

/// One logical event: its id, its body (the same bytes on every copy) and
/// how many copies the provider sends.
pub struct Delivery {
    pub id: String,
    pub body: Vec<u8>,
    pub copies: usize,
}

/// One entry of the send queue: `at_once` copies of a delivery posted at
/// the same moment.
#[derive(Clone, Copy)]
struct Item {
    delivery: usize,
    at_once: usize,
    gated: bool,
}

/// The send queue the senders share, in release order.
type Queue = Arc<Mutex<VecDeque<(Item, Arc<Delivery>)>>>;

/// What a sender returns when it stopped because something else failed.
pub const ABORTED: &str = "aborted: another sender or the chaos failed";

/// What the provider will send, drawn from the seed.
pub struct Plan {
    pub deliveries: Vec<Arc<Delivery>>,
    items: Vec<Item>,
}

impl Plan {
    /// `n` deliveries, each sent 1 to 3 times; about a third of those sent
    /// more than once have two or three copies posted at the same moment.
    /// The senders post as fast as the receiver answers, so that whenever
    /// the chaos strikes, claims, handlers and commits are in flight.
    pub fn draw(rng: &mut StdRng, n: usize) -> Plan {
        let mut deliveries = Vec::with_capacity(n);
        let mut items = Vec::new();
        for index in 0..n {
            let id = format!("msg_crash_{index:04}");
            let copies = match rng.random_range(0..100) {
                0..40 => 1,
                40..75 => 2,
                _ => 3,
            };
            let mut left = copies;
            if copies >= 2 && rng.random_bool(0.35) {
                let at_once = rng.random_range(2..=copies);
                items.push((index, at_once));
                left -= at_once;
            }
            items.extend(std::iter::repeat_n((index, 1), left));
            deliveries.push(Arc::new(Delivery {
                body: client::sample_payment(&id),
                id,
                copies,
            }));
        }
        items.shuffle(rng);
        let count = items.len();
        let gated_from = count - ((count as f64 * GATED_SHARE) as usize).max(1);
        let items = items
            .into_iter()
            .enumerate()
            .map(|(position, (delivery, at_once))| Item {
                delivery,
                at_once,
                gated: position >= gated_from,
            })
            .collect();
        Plan { deliveries, items }
    }

    pub fn copies(&self) -> usize {
        self.deliveries.iter().map(|d| d.copies).sum()
    }
}

/// Counters of everything the provider saw, shared by the senders.
#[derive(Default)]
pub struct Stats {
    pub attempts: AtomicU64,
    pub successes: AtomicU64,
    pub replayed: AtomicU64,
    /// Attempts that got no HTTP answer: refused, reset, or timed out.
    pub connection_errors: AtomicU64,
    pub status_500: AtomicU64,
    pub status_503: AtomicU64,
    /// 503 answers without `Retry-After`, which the contract promises.
    pub status_503_without_retry_after: AtomicU64,
    pub other_5xx: AtomicU64,
    pub conflict_in_progress: AtomicU64,
    /// 409 answers other than `in-progress` (a `key-reused` would mean the
    /// receiver mistook the same bytes for another body).
    pub conflict_other: AtomicU64,
    pub last_conflict_other: Mutex<Option<String>>,
}

impl Stats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn retries(&self) -> u64 {
        Stats::get(&self.attempts) - Stats::get(&self.successes)
    }

    pub fn status_5xx(&self) -> u64 {
        Stats::get(&self.status_500) + Stats::get(&self.status_503) + Stats::get(&self.other_5xx)
    }

    pub fn status_409(&self) -> u64 {
        Stats::get(&self.conflict_in_progress) + Stats::get(&self.conflict_other)
    }
}

/// Shared state of one load run.
pub struct Load {
    pub provider: Arc<dyn Provider>,
    pub url: String,
    pub http: reqwest::Client,
    pub stats: Stats,
    /// Every 2xx body, per delivery id: all must be the same stored answer.
    pub bodies: Mutex<BTreeMap<String, BTreeSet<Vec<u8>>>>,
    /// How many 2xx answers per delivery id were not replays, i.e. said
    /// "I ran it": more than one is a double run seen from outside; none
    /// means the answer of the run that committed was lost to the chaos.
    pub fresh: Mutex<BTreeMap<String, u32>>,
    /// How many times the chaos struck; the gated tail waits on it.
    pub strikes: AtomicU64,
    pub min_strikes: u64,
    /// Set when a sender (or the chaos) failed, so that the others stop early.
    pub abort: AtomicBool,
    /// The first sender's failure: the cause, where the others only say
    /// they were aborted.
    pub failure: Mutex<Option<String>>,
    pub deadline: Instant,
}

impl Load {
    /// Runs the plan with [`SENDERS`] concurrent senders and returns the
    /// first failure, if any.
    pub async fn run(self: Arc<Self>, plan: &Plan, seed: u64) -> Result<(), String> {
        let queue: Queue = Arc::new(Mutex::new(
            plan.items
                .iter()
                .map(|item| (*item, plan.deliveries[item.delivery].clone()))
                .collect(),
        ));
        let senders = (0..SENDERS).map(|sender| {
            let load = self.clone();
            let queue = queue.clone();
            // Each sender's back-off jitter comes from the seed too.
            let rng = StdRng::seed_from_u64(seed ^ (0x5e4d_0000 + sender as u64));
            tokio::spawn(async move { load.sender(queue, rng).await })
        });
        let mut first_error = None;
        for result in futures_util::future::join_all(senders).await {
            let outcome = result.unwrap_or_else(|e| Err(format!("a sender panicked: {e}")));
            if let Err(error) = outcome {
                first_error.get_or_insert(error);
            }
        }
        match self.failure.lock().ok().and_then(|slot| slot.clone()) {
            Some(cause) => Err(cause),
            None => first_error.map_or(Ok(()), Err),
        }
    }

    /// Keeps the first real failure and stops every sender.
    fn fail(&self, error: String) -> String {
        if error != ABORTED {
            if let Ok(mut slot) = self.failure.lock() {
                slot.get_or_insert_with(|| error.clone());
            }
        }
        self.abort.store(true, Ordering::Relaxed);
        error
    }

    async fn sender(self: Arc<Self>, queue: Queue, mut rng: StdRng) -> Result<(), String> {
        loop {
            let next = queue
                .lock()
                .map_err(|_| "the send queue's lock was poisoned".to_owned())?
                .pop_front();
            let Some((item, delivery)) = next else {
                return Ok(());
            };
            if item.gated {
                self.wait_for_strikes().await.map_err(|e| self.fail(e))?;
            }
            let copies = (0..item.at_once).map(|_| {
                let rng = StdRng::seed_from_u64(rng.random());
                self.send_copy(&delivery, rng)
            });
            let results = futures_util::future::join_all(copies).await;
            if let Some(error) = results.into_iter().find_map(Result::err) {
                return Err(self.fail(error));
            }
        }
    }

    async fn wait_for_strikes(&self) -> Result<(), String> {
        while self.strikes.load(Ordering::Relaxed) < self.min_strikes {
            if self.abort.load(Ordering::Relaxed) {
                return Err(ABORTED.into());
            }
            if Instant::now() >= self.deadline {
                return Err(format!(
                    "the chaos struck {} times, not the {} required, before the deadline",
                    self.strikes.load(Ordering::Relaxed),
                    self.min_strikes
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Sends one copy until it gets a 2xx, re-signed with a fresh timestamp
    /// on every attempt as a provider does. Connection errors, 5xx and 409
    /// mean "later"; any other answer is a failure of the receiver.
    async fn send_copy(&self, delivery: &Delivery, mut rng: StdRng) -> Result<(), String> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Err(ABORTED.into());
            }
            let signed = client::sign(
                self.provider.as_ref(),
                &delivery.id,
                chrono::Utc::now().timestamp(),
                None,
                delivery.body.clone(),
            )
            .map_err(|e| format!("cannot sign {}: {e}", delivery.id))?;
            self.stats.attempts.fetch_add(1, Ordering::Relaxed);
            let answer = tokio::time::timeout(
                REQUEST_TIMEOUT,
                client::post(&self.http, &self.url, &signed),
            )
            .await;
            let last;
            match answer {
                Ok(Ok(answer)) if (200..300).contains(&answer.status) => {
                    self.stats.successes.fetch_add(1, Ordering::Relaxed);
                    if header(&answer, "idempotent-replayed") == Some("true") {
                        self.stats.replayed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        *self
                            .fresh
                            .lock()
                            .map_err(|_| "the answers' lock was poisoned".to_owned())?
                            .entry(delivery.id.clone())
                            .or_default() += 1;
                    }
                    self.bodies
                        .lock()
                        .map_err(|_| "the bodies' lock was poisoned".to_owned())?
                        .entry(delivery.id.clone())
                        .or_default()
                        .insert(answer.body.into_bytes());
                    return Ok(());
                }
                Ok(Ok(answer)) => {
                    last = format!("HTTP {}: {}", answer.status, answer.body);
                    match answer.status {
                        500 => self.stats.status_500.fetch_add(1, Ordering::Relaxed),
                        503 => {
                            if header(&answer, "retry-after").is_none() {
                                self.stats
                                    .status_503_without_retry_after
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                            self.stats.status_503.fetch_add(1, Ordering::Relaxed)
                        }
                        501..=599 => self.stats.other_5xx.fetch_add(1, Ordering::Relaxed),
                        409 if answer.body.contains("problem:in-progress") => self
                            .stats
                            .conflict_in_progress
                            .fetch_add(1, Ordering::Relaxed),
                        409 => {
                            if let Ok(mut slot) = self.stats.last_conflict_other.lock() {
                                *slot = Some(format!("{}: {}", delivery.id, answer.body));
                            }
                            self.stats.conflict_other.fetch_add(1, Ordering::Relaxed)
                        }
                        // A 4xx other than 409 is final for a provider: the
                        // receiver refused a correctly signed delivery.
                        _ => {
                            return Err(format!(
                                "delivery {} was refused for good: {last}",
                                delivery.id
                            ));
                        }
                    };
                }
                Ok(Err(error)) => {
                    last = format!("no answer: {error}");
                    self.stats.connection_errors.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    last = format!("no answer within {REQUEST_TIMEOUT:?}");
                    self.stats.connection_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            if Instant::now() >= self.deadline {
                return Err(format!(
                    "delivery {} got no 2xx before the scenario's deadline; last answer: {last}",
                    delivery.id
                ));
            }
            // Full jitter keeps the retries of simultaneous copies apart.
            let pause = backoff.mul_f64(rng.random_range(0.5..1.0));
            tokio::time::sleep(pause).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

fn header<'a>(answer: &'a client::Answer, name: &str) -> Option<&'a str> {
    answer
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}
