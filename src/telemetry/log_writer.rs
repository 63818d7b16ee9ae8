//! The log's writer: each line is formatted on the thread that logs it and
//! appended to one shared buffer, and a thread of its own writes the buffer
//! out in batches.
//!
//! Why not `tracing-appender`'s non-blocking writer, which this replaced: it
//! sends every line through a channel and wakes its thread for each one,
//! which then writes and flushes as soon as the channel is empty. Under load
//! that is a futex wake, a context switch and a `write(2)` per request: a
//! profile of replays at the default level put about a seventh of the
//! process's CPU there. Here the writer, once woken by a line, waits up to
//! [`Limits::linger`] (10 ms) for more, or until [`Limits::batch`] bytes are
//! waiting, and writes them with one call; the loggers wake it only when
//! the buffer goes from empty to not, or passes a batch.
//!
//! Nothing is dropped while the writer runs: past [`Limits::cap`] bytes
//! waiting (stderr cannot keep up), a logger waits for room, as a direct
//! write to stderr would. A line still in the buffer when the process is
//! killed is lost, as in any buffered writer; lines logged after the guard
//! is dropped are discarded (there is no writer left to wait for).

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tracing_subscriber::fmt::MakeWriter;

/// How the writer batches, and how much it lets wait.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes that make a write at once, without waiting out the linger.
    pub batch: usize,
    /// How long a first line waits for others to share its write: the
    /// most a line can appear late.
    pub linger: Duration,
    /// Bytes waiting past which loggers wait for the writer.
    pub cap: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            batch: 64 * 1024,
            linger: Duration::from_millis(10),
            // About 14,000 300-byte lines: the old channel's 8,192 lines
            // and then some, reached only when the output is stuck.
            cap: 4 * 1024 * 1024,
        }
    }
}

struct State {
    waiting: Vec<u8>,
    closed: bool,
    /// The most bytes that ever waited, and how often a logger waited for
    /// room: the cap's own figures.
    most_waiting: usize,
    room_waits: u64,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for lines (or for a batch to fill, or close).
    lines: Condvar,
    /// Loggers wait here for room under the cap.
    room: Condvar,
    limits: Limits,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A logger that panicked mid-append leaves bytes, not a broken
        // invariant: carry on with them.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, line: &[u8]) {
        let mut state = self.lock();
        while !state.closed
            && !state.waiting.is_empty()
            && state.waiting.len() + line.len() > self.limits.cap
        {
            state.room_waits += 1;
            state = self
                .room
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.closed {
            return;
        }
        let before = state.waiting.len();
        state.waiting.extend_from_slice(line);
        let after = state.waiting.len();
        state.most_waiting = state.most_waiting.max(after);
        drop(state);
        // The writer sleeps on an empty buffer, or lingers below a batch:
        // wake it on those two edges only, not for every line.
        let batch = self.limits.batch;
        if before == 0 || (before < batch && after >= batch) {
            self.lines.notify_one();
        }
    }
}

/// The [`MakeWriter`] the log's layer writes through; cheap to clone.
#[derive(Clone)]
pub struct LogWriter {
    /// `None`: straight to stderr, line by line ([`LogWriter::direct`]).
    shared: Option<Arc<Shared>>,
}

impl LogWriter {
    /// A writer without a thread, for when the thread cannot be started:
    /// each line is its own write to stderr.
    pub fn direct() -> LogWriter {
        LogWriter { shared: None }
    }
}

/// One line's writer: tracing's formatter writes each line whole.
pub struct LineWriter<'a>(Line<'a>);

enum Line<'a> {
    Buffered(&'a Shared),
    Direct(std::io::Stderr),
}

impl Write for LineWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match &mut self.0 {
            Line::Buffered(shared) => {
                shared.append(bytes);
                Ok(bytes.len())
            }
            Line::Direct(stderr) => stderr.write(bytes),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.0 {
            Line::Buffered(_) => Ok(()),
            Line::Direct(stderr) => stderr.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(match &self.shared {
            Some(shared) => Line::Buffered(shared),
            None => Line::Direct(std::io::stderr()),
        })
    }
}

/// Keeps the writer thread running; dropping it writes out what waits and
/// stops the thread.
pub struct WriterGuard {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WriterGuard {
    /// The most bytes that ever waited at once, and how many times a
    /// logger waited for room under the cap.
    pub fn pressure(&self) -> (usize, u64) {
        let state = self.shared.lock();
        (state.most_waiting, state.room_waits)
    }
}

impl Drop for WriterGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.lines.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the writer thread over `out`.
pub fn spawn<W: Write + Send + 'static>(
    out: W,
    limits: Limits,
) -> std::io::Result<(LogWriter, WriterGuard)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            waiting: Vec::new(),
            closed: false,
            most_waiting: 0,
            room_waits: 0,
        }),
        lines: Condvar::new(),
        room: Condvar::new(),
        limits,
    });
    let thread = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || write_out(&shared, out))?
    };
    Ok((
        LogWriter {
            shared: Some(shared.clone()),
        },
        WriterGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

/// The writer thread: waits for a line, lets more join it for the linger or
/// up to a batch, writes them with one call, until closed and empty.
fn write_out<W: Write>(shared: &Shared, mut out: W) {
    let limits = shared.limits;
    let mut batch = Vec::new();
    loop {
        let mut state = shared.lock();
        while state.waiting.is_empty() && !state.closed {
            state = shared
                .lines
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let deadline = Instant::now() + limits.linger;
        while state.waiting.len() < limits.batch && !state.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = shared
                .lines
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let closed = state.closed;
        std::mem::swap(&mut state.waiting, &mut batch);
        drop(state);
        shared.room.notify_all();
        if !batch.is_empty() {
            // Nowhere to report a failed write to stderr: the lines are
            // dropped, and the next batch tries again.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
            // A burst that filled the buffer up to the cap should not keep
            // its memory for good.
            if batch.capacity() > 4 * limits.batch {
                batch.shrink_to(limits.batch);
            }
        }
        if closed {
            // Appends stop once closed: what was waiting is now written.
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A sink that keeps every write call's bytes apart.
    #[derive(Clone, Default)]
    struct Calls(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Write for Calls {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().push(bytes.to_vec());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line(writer: &LogWriter, text: &str) {
        writer
            .make_writer()
            .write_all(text.as_bytes())
            .expect("appending cannot fail");
    }

    #[test]
    fn every_line_of_every_thread_is_written_whole_and_in_its_threads_order() {
        let calls = Calls::default();
        let (writer, guard) = spawn(calls.clone(), Limits::default()).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for n in 0..2_000 {
                        line(
                            &writer,
                            &format!("thread {t} line {n:05} {}\n", "x".repeat(n % 300)),
                        );
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        let written: Vec<u8> = calls.0.lock().unwrap().concat();
        let text = String::from_utf8(written).unwrap();
        let mut next = [0usize; 8];
        for l in text.lines() {
            let mut parts = l.split(' ');
            assert_eq!(parts.next(), Some("thread"));
            let t: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(parts.next(), Some("line"));
            let n: usize = parts.next().unwrap().parse().unwrap();
            assert_eq!(n, next[t], "thread {t}'s lines in order, none missing");
            assert_eq!(parts.next().unwrap().len(), n % 300, "the line is whole");
            next[t] += 1;
        }
        assert_eq!(next, [2_000; 8], "every line was written");
    }

    #[test]
    fn lines_share_writes_up_to_a_batch_instead_of_one_write_each() {
        let calls = Calls::default();
        let limits = Limits {
            batch: 1_000,
            // Longer than the test: only a full batch or the close writes.
            linger: Duration::from_secs(3_600),
            cap: 1 << 20,
        };
        let (writer, guard) = spawn(calls.clone(), limits).unwrap();
        for n in 0..95 {
            line(&writer, &format!("{n:099}\n"));
        }
        drop(guard);
        let calls = calls.0.lock().unwrap();
        let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 95 * 100);
        let (last, full) = sizes.split_last().unwrap();
        assert!(full.iter().all(|&size| size >= 1_000), "{sizes:?}");
        assert!(*last > 0, "{sizes:?}");
        assert!(calls.len() <= 10, "95 lines, {} writes", calls.len());
    }

    /// A sink whose writes wait for the test's permission, one each.
    struct Gated {
        permits: mpsc::Receiver<()>,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gated {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let _ = self.permits.recv();
            self.written.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_output_holds_the_loggers_at_the_cap_and_loses_nothing() {
        // A rendezvous: each write waits until the test hands it a permit.
        let (permit, permits) = mpsc::sync_channel(0);
        let written = Arc::new(Mutex::new(Vec::new()));
        let limits = Limits {
            batch: 100,
            linger: Duration::ZERO,
            cap: 1_000,
        };
        let sink = Gated {
            permits,
            written: written.clone(),
        };
        let (writer, guard) = spawn(sink, limits).unwrap();
        // 50 KB of lines against a 1 KB cap, while each write waits for a
        // permit: the loggers can only go on as the writer drains.
        let logger = {
            let writer = writer.clone();
            std::thread::spawn(move || {
                for n in 0..500 {
                    line(&writer, &format!("{n:099}\n"));
                }
            })
        };
        // The first write is stuck until a permit comes: the logger fills
        // the buffer to the cap and waits for room.
        while guard.pressure().1 == 0 {
            std::thread::yield_now();
        }
        let releaser = std::thread::spawn(move || while permit.send(()).is_ok() {});
        logger.join().unwrap();
        let (most, waits) = guard.pressure();
        drop(guard);
        releaser.join().unwrap();
        assert!(waits >= 1);
        assert!(most <= 1_000, "{most} bytes waited, over the cap");
        assert!(most >= 900, "the buffer filled up to the cap: {most}");
        let written = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        let expected: String = (0..500).map(|n| format!("{n:099}\n")).collect();
        assert_eq!(written, expected, "every line, in order");
    }

    #[test]
    fn lines_after_the_guard_is_dropped_are_discarded_without_waiting() {
        let calls = Calls::default();
        let limits = Limits {
            batch: 10,
            linger: Duration::ZERO,
            cap: 10,
        };
        let (writer, guard) = spawn(calls.clone(), limits).unwrap();
        line(&writer, "kept\n");
        drop(guard);
        for _ in 0..100 {
            line(&writer, "discarded, and no wait for room\n");
        }
        assert_eq!(calls.0.lock().unwrap().concat(), b"kept\n");
    }
}
