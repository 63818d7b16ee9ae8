//! Where a SQLite statement runs.
//!
//! diesel-async runs every statement of a SQLite connection on tokio's
//! blocking pool: a hand-off to another thread and a wake-up back, per
//! statement. Most of them take a few microseconds. Inside the write gate
//! the statements of one writer after another are serial, so on a busy
//! machine those hand-offs, not SQLite, set how many deliveries a second one
//! SQLite file takes: a delivery's five or six statements waited for a
//! thread and for a worker to be scheduled again, each time.
//!
//! So the holder of the write gate runs its statements inline, on the
//! task's own thread, from the `BEGIN IMMEDIATE` that takes SQLite's write
//! lock to the `COMMIT`. The `BEGIN IMMEDIATE` is tried inline with SQLite's
//! busy handler off and goes to the blocking pool only when another
//! process holds the lock, to wait there (up to `busy_timeout`); see
//! `store::begin_immediate`. On the store's writer thread a commit group's
//! `COMMIT` runs inline too (see `group_commit::WriteGate::commit`): the
//! gate is held while it syncs the file, so nothing else could use that
//! thread meanwhile. Anywhere else, and for a transaction of its own (group
//! commit off), the `COMMIT` goes to the blocking pool. In
//! between, nothing waits on a lock: the lock is held, and WAL readers
//! never block a writer. Reads outside the gate stay on the blocking pool
//! too.
//!
//! The switch is task-local: [`inline_scope`] gives a task the flag, the
//! write gate turns it on while its holder is between `BEGIN` and `COMMIT`
//! ([`InlineStatements`]), and a task without the scope always hands off.

use diesel_async::sync_connection_wrapper::SpawnBlocking;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use std::cell::Cell;
use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

tokio::task_local! {
    /// Whether this task's SQLite statements run inline now.
    static INLINE: Cell<bool>;
}

/// Runs `future` in a scope where the write gate may switch its SQLite
/// statements inline. Without it every statement goes to the blocking pool.
/// A plain function rather than an `async fn`: the latter would hold
/// `future` twice (its argument and the scope's copy), doubling the
/// delivery's task.
pub fn inline_scope<F: Future>(future: F) -> impl Future<Output = F::Output> {
    INLINE.scope(Cell::new(false), future)
}

fn inline_now() -> bool {
    INLINE.try_with(Cell::get).unwrap_or(false)
}

/// Inline statements for as long as it lives (in an [`inline_scope`]); the
/// write gate holds one from its holder's `BEGIN` (or savepoint) until just
/// before the `COMMIT`. Dropping it, however the holder ends, hands off again.
pub(super) struct InlineStatements(bool);

impl InlineStatements {
    pub(super) fn on() -> InlineStatements {
        InlineStatements(INLINE.try_with(|c| c.replace(true)).unwrap_or(false))
    }
}

impl Drop for InlineStatements {
    fn drop(&mut self) {
        let before = self.0;
        let _ = INLINE.try_with(|c| c.set(before));
    }
}

/// The runtime of every pooled SQLite connection: inline when the task's
/// flag says so, otherwise tokio's blocking pool of the runtime the
/// connection was opened on.
pub struct SqliteRuntime {
    handle: Option<tokio::runtime::Handle>,
}

type TaskError = Box<dyn Error + Send + Sync + 'static>;

impl SpawnBlocking for SqliteRuntime {
    fn spawn_blocking<'a, R>(
        &mut self,
        task: impl FnOnce() -> R + Send + 'static,
    ) -> BoxFuture<'a, Result<R, TaskError>>
    where
        R: Send + 'static,
    {
        match &self.handle {
            Some(handle) if !inline_now() => Finishing {
                task: handle.spawn_blocking(task),
            }
            .map(|joined| joined.map_err(TaskError::from))
            .boxed(),
            // No runtime (a connection opened outside one), or inline now.
            _ => std::future::ready(Ok(task())).boxed(),
        }
    }

    fn get_runtime() -> Self {
        SqliteRuntime {
            handle: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

/// A blocking task that is waited for if its future is dropped first, as
/// diesel-async's own runtime does: the connection should not be handed to
/// the next statement (or back to the pool) while the last one still runs.
/// On a current-thread runtime (actix-web's workers), which cannot block in
/// place (diesel-async's own wrapper panics there), the task is left to
/// finish on its own: it holds the connection's mutex, so nothing else runs
/// on the connection meanwhile. A transaction whose future was dropped never
/// goes back to the pool (see `Transaction`), so what can follow such a
/// statement on its connection is only another caller's own work.
struct Finishing<R> {
    task: tokio::task::JoinHandle<R>,
}

impl<R> Future for Finishing<R> {
    type Output = Result<R, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task).poll(cx)
    }
}

impl<R> Drop for Finishing<R> {
    fn drop(&mut self) {
        if self.task.is_finished() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
            let task = &mut self.task;
            tokio::task::block_in_place(|| {
                let _ = handle.block_on(task);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread::{self, ThreadId};

    async fn runs_on(runtime: &mut SqliteRuntime) -> ThreadId {
        runtime
            .spawn_blocking(|| thread::current().id())
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn statements_run_inline_only_while_the_write_gate_says_so() {
        let mut runtime = SqliteRuntime::get_runtime();
        let here = || thread::current().id();
        // No scope: always the blocking pool.
        let _ignored = InlineStatements::on();
        assert_ne!(runs_on(&mut runtime).await, here());
        inline_scope(async {
            assert_ne!(runs_on(&mut runtime).await, here(), "off by default");
            {
                let _inline = InlineStatements::on();
                assert_eq!(runs_on(&mut runtime).await, here(), "inline");
                {
                    let _nested = InlineStatements::on();
                    assert_eq!(runs_on(&mut runtime).await, here());
                }
                assert_eq!(
                    runs_on(&mut runtime).await,
                    here(),
                    "a nested guard restores what was before it"
                );
            }
            assert_ne!(runs_on(&mut runtime).await, here(), "off once dropped");
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_spawned_task_does_not_inherit_the_flag() {
        let mut runtime = SqliteRuntime::get_runtime();
        inline_scope(async {
            let _inline = InlineStatements::on();
            let spawned = tokio::spawn(async move {
                let caller = thread::current().id();
                runs_on(&mut runtime).await != caller
            });
            assert!(spawned.await.unwrap(), "the spawned task hands off");
        })
        .await;
    }
}
