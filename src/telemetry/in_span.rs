//! A future run inside a span, like `tracing::Instrument`, that drops its
//! inner future inside the span as soon as it completes.
//!
//! `tracing`'s `Instrumented` enters its span once more when it is dropped,
//! to drop the inner future inside it, even when that future finished long
//! before. For the two spans of every request (`request` and `webhook`)
//! that was an enter and an exit of each, through every layer, per request
//! for nothing: about 430 instructions of a replay's 93,000 at the default
//! level (callgrind; closing the spans is the rest of what dropping the
//! two futures costs, about 1,700). Here the inner future is dropped
//! inside the span when it completes, and the span is entered on drop only
//! when the future did not complete (a request cancelled by its client),
//! so that what its drop logs still names the request.
//!
//! The span may be owned or borrowed (any `Borrow<Span>`): a face that
//! makes its span and then reads it again while the future runs (to record
//! the answer on it) borrows it rather than asking `Span::current()`, a
//! lookup of the thread's span stack, a clone and a close of the span,
//! each through the registry.

use pin_project_lite::pin_project;
use std::borrow::Borrow;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tracing::Span;

pin_project! {
    /// See the module. Made by [`InSpanExt::in_span`].
    #[must_use = "futures do nothing unless polled"]
    pub struct InSpan<F, S: Borrow<Span>> {
        span: S,
        // `None` once the inner future has completed and been dropped.
        #[pin]
        inner: Option<F>,
    }

    impl<F, S: Borrow<Span>> PinnedDrop for InSpan<F, S> {
        fn drop(this: Pin<&mut Self>) {
            let mut this = this.project();
            if this.inner.is_some() {
                let _entered = (*this.span).borrow().enter();
                this.inner.set(None);
            }
        }
    }
}

impl<F: Future, S: Borrow<Span>> Future for InSpan<F, S> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let _entered = (*this.span).borrow().enter();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            // As an `async` block does: polling a finished future is a bug
            // of the caller's, not something a request can cause.
            panic!("InSpan polled after it completed");
        };
        let output = std::task::ready!(inner.poll(cx));
        this.inner.set(None);
        Poll::Ready(output)
    }
}

/// `.in_span(span)` on any future, with `span` owned or borrowed.
pub trait InSpanExt: Future + Sized {
    fn in_span<S: Borrow<Span>>(self, span: S) -> InSpan<Self, S> {
        InSpan {
            span,
            inner: Some(self),
        }
    }
}

impl<F: Future> InSpanExt for F {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing::Subscriber;
    use tracing::span::Id;
    use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;

    /// What happened, in order: `enter`/`exit` of a span, and `drop` of the
    /// inner value with the span it was dropped in (or `none`).
    #[derive(Clone, Default)]
    struct Journal(Arc<Mutex<Vec<String>>>);

    impl Journal {
        fn push(&self, entry: String) {
            if let Ok(mut entries) = self.0.lock() {
                entries.push(entry);
            }
        }

        fn entries(&self) -> Vec<String> {
            self.0.lock().map(|e| e.clone()).unwrap_or_default()
        }
    }

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Journal {
        fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
            if let Some(span) = ctx.span(id) {
                self.push(format!("enter {}", span.name()));
            }
        }

        fn on_exit(&self, id: &Id, ctx: LayerContext<'_, S>) {
            if let Some(span) = ctx.span(id) {
                self.push(format!("exit {}", span.name()));
            }
        }
    }

    /// Notes, when dropped, which span was current.
    struct NotesDrop(Journal);

    impl Drop for NotesDrop {
        fn drop(&mut self) {
            let current = Span::current()
                .metadata()
                .map_or("none", |meta| meta.name());
            self.0.push(format!("drop in {current}"));
        }
    }

    fn with_journal(run: impl FnOnce(Journal)) {
        let journal = Journal::default();
        let subscriber = tracing_subscriber::registry().with(journal.clone());
        tracing::subscriber::with_default(subscriber, || run(journal));
    }

    #[test]
    fn a_completed_future_is_dropped_inside_its_span_and_the_span_is_not_entered_again() {
        with_journal(|journal| {
            let noted = NotesDrop(journal.clone());
            let future = async move {
                let _held = noted;
                tracing::info!("inside");
                7
            }
            .in_span(tracing::info_span!("outer"));
            let output = futures_util::FutureExt::now_or_never(future);
            assert_eq!(output, Some(7));
            assert_eq!(
                journal.entries(),
                ["enter outer", "drop in outer", "exit outer"],
                "one enter for the poll, and the inner future dropped within it"
            );
        });
    }

    #[test]
    fn a_borrowed_span_is_entered_as_an_owned_one_is() {
        with_journal(|journal| {
            let span = tracing::info_span!("outer");
            let noted = NotesDrop(journal.clone());
            let future = async {
                let _held = noted;
                // The span the future was given is the current one.
                assert_eq!(Span::current().id(), span.id());
                7
            }
            .in_span(&span);
            assert_eq!(futures_util::FutureExt::now_or_never(future), Some(7));
            assert_eq!(
                journal.entries(),
                ["enter outer", "drop in outer", "exit outer"],
            );
        });
    }

    #[test]
    fn a_future_dropped_before_it_completes_is_dropped_inside_its_span() {
        with_journal(|journal| {
            let noted = NotesDrop(journal.clone());
            let mut future = Box::pin(
                async move {
                    let _held = noted;
                    std::future::pending::<()>().await;
                }
                .in_span(tracing::info_span!("outer")),
            );
            assert!(futures_util::FutureExt::now_or_never(future.as_mut()).is_none());
            drop(future);
            assert_eq!(
                journal.entries(),
                [
                    "enter outer",
                    "exit outer",
                    "enter outer",
                    "drop in outer",
                    "exit outer"
                ],
            );
        });
    }
}
