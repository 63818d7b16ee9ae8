//! PostgreSQL's pool, split into lanes: one for each HTTP worker and a
//! shared one for every other thread.
//!
//! A connection's driver task (tokio-postgres underneath diesel-async) runs
//! on the runtime that opened it, and each actix worker is a runtime of its
//! own, on its own thread. A request that borrowed a connection opened by
//! the other worker sent every statement to that worker's thread and back,
//! waking it through its eventfd (3.8 `write(2)`s per fresh delivery with
//! one pool, 1.1 with lanes; +7 % to +30 % fresh deliveries side by side,
//! the README's tenth run). So each worker takes its connections from its
//! own lane, where every connection was opened by that worker. The lanes
//! split `pool_size` between them, so the process still opens at most
//! `pool_size` connections: the shared lane what the background work holds
//! at once, the workers the rest.
//!
//! A worker whose lane is in use to the last connection does not wait while
//! another lane has an idle one: it borrows that one (its statements hop,
//! as all of them did before) and only then waits for its own lane. The
//! shared lane serves every other thread: the main runtime (purge,
//! reconciliation, the relay) and a separate admin server. (`serve` keeps
//! one pool in a process that runs queue workers; see
//! `startup::server_store_options`.)

use super::{PgConn, StoreError};
use deadpool::Status;
use deadpool::managed::TimeoutType;
use diesel_async::pooled_connection::deadpool::{Object, Pool, PoolError};
use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// No lane gets fewer connections than this; a smaller pool stays one lane.
pub(super) const MIN_PER_LANE: usize = 2;

thread_local! {
    /// The lane this thread joined. A thread that joined none, or another
    /// store's lanes, uses the shared lane.
    static MEMBERSHIP: RefCell<Option<Membership>> = const { RefCell::new(None) };
}

/// A thread's place in a worker lane: counted in `members[lane]` while it
/// lives, so that a worker that actix starts again after a panic takes the
/// lane its predecessor left, not one that already has a worker. Its
/// `members` also say whose lanes they are: it keeps them alive, so no
/// other store's can share their address.
struct Membership {
    members: Arc<Mutex<Vec<usize>>>,
    lane: usize,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = members.get_mut(self.lane) {
            *count = count.saturating_sub(1);
        }
    }
}

/// The shared lane's index; the workers' lanes follow it.
const SHARED: usize = 0;

pub(super) struct Lanes {
    /// `[SHARED]` first, then one per worker. A single pool when the store
    /// has no worker lanes.
    pools: Box<[Pool<PgConn>]>,
    /// The live threads in each lane (`[SHARED]` unused): a joining thread
    /// takes the worker lane with the fewest.
    members: Arc<Mutex<Vec<usize>>>,
}

/// How `pool_size` is split: `shared` connections (at least
/// [`MIN_PER_LANE`]) for the shared lane, first, and the rest evenly between
/// the workers' lanes, the remainder to the first ones. One lane when there
/// are no workers or too few connections to give each worker lane
/// [`MIN_PER_LANE`].
pub(super) fn lane_sizes(pool_size: usize, workers: usize, shared: usize) -> Vec<usize> {
    let pool_size = pool_size.max(1);
    let shared = shared.max(MIN_PER_LANE);
    if workers == 0 || pool_size < shared + MIN_PER_LANE * workers {
        return vec![pool_size];
    }
    let rest = pool_size - shared;
    let (each, extra) = (rest / workers, rest % workers);
    std::iter::once(shared)
        .chain((0..workers).map(|worker| each + usize::from(worker < extra)))
        .collect()
}

impl Lanes {
    /// One pool per entry of `sizes`, built by `build(size)`.
    pub(super) fn new(
        sizes: &[usize],
        build: impl Fn(usize) -> Result<Pool<PgConn>, StoreError>,
    ) -> Result<Lanes, StoreError> {
        Ok(Lanes {
            pools: sizes
                .iter()
                .map(|&size| build(size))
                .collect::<Result<_, _>>()?,
            members: Arc::new(Mutex::new(vec![0; sizes.len()])),
        })
    }

    /// Makes the calling thread take its connections from the worker lane
    /// with the fewest live threads (the first of them on a tie: round
    /// robin as the workers start). Returns the lane, or `None` when there
    /// is only the shared one. A thread that joins again moves to the
    /// least used lane other than its own.
    pub(super) fn join(&self) -> Option<usize> {
        if self.pools.len() == 1 {
            return None;
        }
        let lane = {
            let mut members = self.members.lock().unwrap_or_else(PoisonError::into_inner);
            let lane = (1..members.len())
                .min_by_key(|&lane| (members[lane], lane))
                .unwrap_or(SHARED);
            members[lane] += 1;
            lane
        };
        let joined = Membership {
            members: self.members.clone(),
            lane,
        };
        // The previous membership, if any, leaves its lane after the count
        // above, so that joining again moves the thread on.
        drop(MEMBERSHIP.replace(Some(joined)));
        Some(lane)
    }

    /// The calling thread's lane.
    pub(super) fn home(&self) -> usize {
        MEMBERSHIP.with_borrow(|membership| match membership {
            Some(joined) if Arc::ptr_eq(&joined.members, &self.members) => joined.lane,
            _ => SHARED,
        })
    }

    /// A connection: from the thread's own lane when one is idle or the
    /// lane may open another; else an idle one of another lane; else the
    /// first to come back to the thread's own lane, waiting up to the
    /// pool's `acquire_timeout`.
    pub(super) async fn get(&self) -> Result<Object<PgConn>, PoolError> {
        let home = &self.pools[self.home()];
        if self.pools.len() == 1 {
            return home.get().await;
        }
        let mut at_once = home.timeouts();
        at_once.wait = Some(Duration::ZERO);
        match home.timeout_get(&at_once).await {
            Err(PoolError::Timeout(TimeoutType::Wait)) => {}
            other => return other,
        }
        // Only idle ones: a lane that merely has room would open a
        // connection driven by this thread, and keep it, for its own.
        for other in self.pools.iter().filter(|pool| !std::ptr::eq(*pool, home)) {
            if other.status().available > 0
                && let Ok(conn) = other.timeout_get(&at_once).await
            {
                return Ok(conn);
            }
        }
        home.get().await
    }

    /// The lanes' figures added up.
    pub(super) fn status(&self) -> Status {
        self.pools.iter().map(Pool::status).fold(
            Status {
                max_size: 0,
                size: 0,
                available: 0,
                waiting: 0,
            },
            |sum, lane| Status {
                max_size: sum.max_size + lane.max_size,
                size: sum.size + lane.size,
                available: sum.available + lane.available,
                waiting: sum.waiting + lane.waiting,
            },
        )
    }

    /// Each lane's figures, the shared lane first.
    pub(super) fn each_status(&self) -> Vec<Status> {
        self.pools.iter().map(Pool::status).collect()
    }

    /// Closes every idle connection; returns how many.
    pub(super) fn close_idle(&self) -> usize {
        self.pools
            .iter()
            .map(|pool| pool.retain(|_, _| false).removed.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_lane_gets_its_share_and_the_workers_the_rest() {
        // The default pool, two workers, the background's two connections.
        assert_eq!(lane_sizes(16, 2, 2), vec![2, 7, 7]);
        // A larger shared lane: the workers split what is left, the
        // remainder to the first.
        assert_eq!(lane_sizes(16, 2, 7), vec![7, 5, 4]);
        assert_eq!(lane_sizes(64, 8, 2), vec![2, 8, 8, 8, 8, 8, 8, 7, 7]);
        assert_eq!(
            lane_sizes(6, 2, 0),
            vec![2, 2, 2],
            "the shared lane gets two at least"
        );
        for (pool_size, workers, shared) in [(16, 2, 2), (17, 4, 3), (100, 7, 9), (6, 2, 2)] {
            let sizes = lane_sizes(pool_size, workers, shared);
            assert_eq!(sizes.len(), workers + 1);
            assert_eq!(
                sizes.iter().sum::<usize>(),
                pool_size,
                "never more than pool_size"
            );
            assert!(sizes.iter().all(|&size| size >= MIN_PER_LANE), "{sizes:?}");
        }
    }

    /// Lanes whose pools never connect: joining needs none.
    fn lanes(sizes: &[usize]) -> Arc<Lanes> {
        use diesel_async::pooled_connection::AsyncDieselConnectionManager;
        let lanes = Lanes::new(sizes, |size| {
            let manager = AsyncDieselConnectionManager::<PgConn>::new("postgres://unused");
            Pool::builder(manager)
                .max_size(size)
                .build()
                .map_err(|e| StoreError::Unavailable(e.to_string()))
        });
        Arc::new(lanes.expect("pools build without connecting"))
    }

    /// Joins on a thread of its own; the thread ends once `leave` says so.
    fn worker(
        lanes: &Arc<Lanes>,
    ) -> (
        usize,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (joined_tx, joined_rx) = std::sync::mpsc::channel();
        let (leave, leave_rx) = std::sync::mpsc::channel::<()>();
        let lanes = lanes.clone();
        let thread = std::thread::spawn(move || {
            let _ = joined_tx.send(lanes.join().expect("a worker lane"));
            let _ = leave_rx.recv();
        });
        (joined_rx.recv().expect("the lane joined"), leave, thread)
    }

    #[test]
    fn a_restarted_worker_takes_the_lane_its_predecessor_left() {
        let lanes = lanes(&[2, 2, 2]);
        let (first, _stay, _first_thread) = worker(&lanes);
        let (second, leave, second_thread) = worker(&lanes);
        assert_eq!((first, second), (1, 2), "round robin as the workers start");
        let _ = leave.send(());
        second_thread.join().expect("the second worker ends");
        // Round robin would give lane 1, which already has a worker.
        let (restarted, _stay_too, _thread) = worker(&lanes);
        assert_eq!(restarted, 2, "the lane the ended worker left");
        assert_eq!(lanes.home(), SHARED, "this thread joined none");
    }

    #[test]
    fn one_lane_has_nothing_to_join() {
        assert_eq!(lanes(&[16]).join(), None);
    }

    #[test]
    fn a_small_pool_or_no_workers_stays_one_lane() {
        assert_eq!(lane_sizes(16, 0, 2), vec![16]);
        assert_eq!(lane_sizes(5, 2, 2), vec![5]);
        assert_eq!(
            lane_sizes(16, 2, 13),
            vec![16],
            "no room for two per worker"
        );
        assert_eq!(lane_sizes(1, 2, 2), vec![1]);
        assert_eq!(lane_sizes(0, 0, 0), vec![1]);
    }
}
