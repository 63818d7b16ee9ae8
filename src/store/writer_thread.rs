//! One thread for SQLite's deliveries.
//!
//! SQLite has one writer at a time, and the members of a commit group pass
//! the write gate one after another (see [`super::group_commit`]). When the
//! members are tasks of different HTTP workers, each pass is a wake-up of
//! another thread, and the woken member runs only once that worker has
//! finished whatever it was polling and the tasks queued before it: the gate
//! sits idle in between, and the rest of the group waits behind it. Run on
//! one worker (`workers = 1`), SQLite `fresh` answered 7–17 % more
//! deliveries a second with about a fifth less CPU per delivery than on
//! two, but then HTTP itself, replays included, had one core. With this
//! thread and two workers: +6 % to +16 % over five pairs side by side.
//!
//! So a SQLite store runs its deliveries' transactions on a thread of its
//! own: the HTTP workers read, verify and answer, and hand each claim to
//! this thread, where one member follows another on the same thread, with
//! nothing else queued between them. A job is a `Send` closure that builds
//! its future here, since a delivery's future (its operation, its
//! connection) is not `Send`. The thread starts with the first job and ends
//! when the store's last handle is dropped. A running job holds a handle
//! (its engine's), so no job is cut short by the thread's end.

use futures_util::future::LocalBoxFuture;
use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use tokio::sync::{mpsc, oneshot};

type Job = Box<dyn FnOnce() -> LocalBoxFuture<'static, ()> + Send>;

thread_local! {
    /// Set on the writer thread, and only there.
    static ON_WRITER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether this is a store's writer thread: the one thread where a commit
/// group's `COMMIT` may block (see `group_commit::WriteGate::commit`). Any
/// other writer (an HTTP worker's, a background task's) has other work
/// that an fsync must not hold up.
pub(super) fn on_writer_thread() -> bool {
    ON_WRITER_THREAD.with(Cell::get)
}

/// The thread, started on first use.
pub(super) struct WriterThread {
    jobs: OnceLock<Option<mpsc::UnboundedSender<Job>>>,
    /// The most threads its runtime starts for statements that leave the
    /// write gate (a `COMMIT`, a read): each holds a pooled connection, so
    /// the pool's size and a few more, as the HTTP workers have. Tokio's
    /// default (512) would let a burst start hundreds, each with its own
    /// malloc arena.
    max_blocking: usize,
}

/// A delivery's task ended without an answer: it panicked, or its thread
/// stopped.
#[derive(Debug, thiserror::Error)]
#[error("the delivery's task ended without an answer")]
pub struct TaskLost;

impl WriterThread {
    pub(super) fn new(max_blocking: usize) -> WriterThread {
        WriterThread {
            jobs: OnceLock::new(),
            max_blocking: max_blocking.max(1),
        }
    }

    /// Runs the future that `make` builds on the writer thread and returns
    /// its output; it runs to its end even if this future is dropped. Should
    /// the thread not start, the future runs here instead.
    pub(super) async fn run<F, Fut, T>(&self, make: F) -> Result<T, TaskLost>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
        T: Send + 'static,
    {
        let Some(jobs) = self.jobs.get_or_init(|| start(self.max_blocking)) else {
            return Ok(make().await);
        };
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move || {
            Box::pin(async move {
                let _ = answer.send(make().await);
            })
        });
        jobs.send(job).map_err(|_| TaskLost)?;
        answered.await.map_err(|_| TaskLost)
    }
}

/// Starts the thread: a single-threaded runtime whose tasks are the jobs.
/// `None` if the OS refuses a thread or the runtime cannot be built.
fn start(max_blocking: usize) -> Option<mpsc::UnboundedSender<Job>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(max_blocking)
        .thread_name("sqlite-writer-blocking")
        .build()
        .map_err(|error| tracing::error!(%error, "the SQLite writer thread's runtime failed"))
        .ok()?;
    let (jobs, mut received) = mpsc::unbounded_channel::<Job>();
    std::thread::Builder::new()
        .name("sqlite-writer".to_owned())
        .spawn(move || {
            ON_WRITER_THREAD.with(|on| on.set(true));
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                while let Some(job) = received.recv().await {
                    tokio::task::spawn_local(job());
                }
            });
        })
        .map_err(|error| tracing::error!(%error, "the SQLite writer thread did not start"))
        .ok()?;
    Some(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    #[tokio::test]
    async fn jobs_run_on_one_thread_and_a_panic_loses_only_its_own() {
        let writer = WriterThread::new(2);
        let first = writer
            .run(|| async { (thread_name(), on_writer_thread()) })
            .await
            .unwrap();
        assert_eq!(first, ("sqlite-writer".to_owned(), true));
        assert!(!on_writer_thread(), "the caller's thread is not the writer");
        let panicked = writer
            .run(|| async {
                if thread_name() == "sqlite-writer" {
                    panic!("a job's bug");
                }
            })
            .await;
        assert!(matches!(panicked, Err(TaskLost)));
        let after = writer.run(|| async { thread_name() }).await.unwrap();
        assert_eq!(after, "sqlite-writer", "the thread still serves jobs");
    }

    #[tokio::test]
    async fn a_job_runs_to_its_end_when_its_caller_goes_away() {
        let writer = WriterThread::new(2);
        let (go, went) = oneshot::channel::<()>();
        let (done, finished) = oneshot::channel::<&str>();
        let caller = writer.run(move || async move {
            let _ = went.await;
            let _ = done.send("finished");
        });
        // Polled once, so that the job is sent, then dropped.
        assert!(futures_util::poll!(Box::pin(caller)).is_pending());
        let _ = go.send(());
        assert_eq!(finished.await, Ok("finished"));
    }

    /// Statements that leave the write gate run on the runtime's blocking
    /// threads; no more of them start than the cap, however many jobs want
    /// one at once.
    #[tokio::test]
    async fn its_blocking_threads_are_capped() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let writer = WriterThread::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(released));
        let jobs = (0..8).map(|_| {
            let (running, most, released) = (running.clone(), most.clone(), released.clone());
            writer.run(move || async move {
                tokio::task::spawn_blocking(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let _ = released.lock().map(|r| r.recv());
                    running.fetch_sub(1, Ordering::SeqCst);
                })
                .await
            })
        });
        let all = futures_util::future::join_all(jobs);
        let releasing = async {
            // Both capped threads taken before anything is let go: a cap
            // that did not hold would have started all eight by then.
            while running.load(Ordering::SeqCst) < 2 {
                tokio::task::yield_now().await;
            }
            for _ in 0..8 {
                let _ = release.send(());
            }
        };
        let (finished, ()) = tokio::join!(all, releasing);
        assert!(finished.iter().all(|f| matches!(f, Ok(Ok(())))));
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }
}
