//! How long a provider keeps retrying a delivery that failed, as it
//! documents it: what the start-up check compares retentions with. The
//! values live with each provider (the catalogue's `retry_window`).
//!
//! A key must be remembered at least as long as its sender may still send
//! it again; past the retention a late retry runs the operation again.

use std::time::Duration;

/// What a provider documents about retrying failed deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryWindow {
    /// Retries automatically for up to `window` after the first attempt.
    Retries {
        window: Duration,
        /// The documented schedule, in words.
        schedule: &'static str,
        /// Where it is documented.
        source: &'static str,
    },
    /// Never retries by itself (only a person or a script redelivers).
    NoAutomaticRetries {
        note: &'static str,
        source: &'static str,
    },
    /// The sender is not known (the generic scheme): nothing to compare.
    Unknown,
}

impl RetryWindow {
    /// The window a retention should cover, where there is one.
    pub fn window(&self) -> Option<Duration> {
        match self {
            RetryWindow::Retries { window, .. } => Some(*window),
            _ => None,
        }
    }

    /// A short description for logs and the CLI.
    pub fn describe(&self) -> String {
        match self {
            RetryWindow::Retries {
                window, schedule, ..
            } => format!(
                "{} ({schedule})",
                crate::duration_text::format_duration(*window)
            ),
            RetryWindow::NoAutomaticRetries { note, .. } => format!("none ({note})"),
            RetryWindow::Unknown => "unknown".to_owned(),
        }
    }
}
