//! How long each provider keeps retrying a delivery that failed: the one
//! table the start-up check compares retentions with, and the README's.
//!
//! A key must be remembered at least as long as its sender may still send
//! it again; past the retention a late retry runs the operation again.

use std::time::Duration;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

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

/// Every provider's retry window, by the name used in configuration. Checked
/// against the providers' documentation when this table was written
/// (sources inline); providers change their schedules, so re-check them when
/// a warning looks wrong.
pub const RETRY_WINDOWS: &[(&str, RetryWindow)] = &[
    (
        "stripe",
        RetryWindow::Retries {
            window: Duration::from_secs(3 * DAY),
            schedule: "live mode: exponential back-off for up to 3 days",
            source: "https://docs.stripe.com/webhooks#retries",
        },
    ),
    (
        "paddle",
        RetryWindow::Retries {
            window: Duration::from_secs(3 * DAY),
            schedule: "live accounts: up to 60 retries over 3 days",
            source: "https://developer.paddle.com/webhooks/about/respond-to-webhooks",
        },
    ),
    (
        "standard-webhooks",
        // Svix's schedule, which Standard Webhooks senders follow: after the
        // first attempt 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h — 27 h 35 min 5 s.
        RetryWindow::Retries {
            window: Duration::from_secs(
                5 + 5 * MINUTE + 30 * MINUTE + 2 * HOUR + 5 * HOUR + 20 * HOUR,
            ),
            schedule: "Svix: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h",
            source: "https://docs.svix.com/retries",
        },
    ),
    (
        "github",
        RetryWindow::NoAutomaticRetries {
            note: "GitHub does not retry failed deliveries; people and scripts may redeliver those of the past 3 days",
            source: "https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries",
        },
    ),
    (
        "shopify",
        // Since 2024-09-10; before, Shopify documented 19 retries over 48 h.
        RetryWindow::Retries {
            window: Duration::from_secs(4 * HOUR),
            schedule: "8 retries over 4 hours",
            source: "https://shopify.dev/changelog/updates-to-webhook-retry-mechanism",
        },
    ),
    (
        "slack",
        // "after 1 minute" and "after 5 minutes" read as successive delays:
        // the longer reading, so that the check errs towards warning.
        RetryWindow::Retries {
            window: Duration::from_secs(6 * MINUTE),
            schedule: "3 retries: immediately, after 1 min, after 5 min",
            source: "https://docs.slack.dev/apis/events-api/#retries",
        },
    ),
    ("hmac", RetryWindow::Unknown),
];

/// The retry window of the provider named `provider` (as in configuration).
pub fn retry_window_of(provider: &str) -> RetryWindow {
    RETRY_WINDOWS
        .iter()
        .find(|(name, _)| *name == provider)
        .map(|(_, window)| *window)
        .unwrap_or(RetryWindow::Unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_has_a_row_in_the_table() {
        for provider in super::super::PROVIDERS {
            assert!(
                RETRY_WINDOWS.iter().any(|(name, _)| name == provider),
                "{provider} has no retry window"
            );
        }
    }

    #[test]
    fn the_svix_schedule_adds_up_to_about_28_hours() {
        let window = retry_window_of("standard-webhooks").window().unwrap();
        assert_eq!(crate::duration_text::format_duration(window), "27h 35m 5s");
    }

    #[test]
    fn github_says_it_does_not_retry_and_hmac_is_unknown() {
        assert!(
            retry_window_of("github")
                .describe()
                .starts_with("none (GitHub does not retry")
        );
        assert_eq!(retry_window_of("hmac"), RetryWindow::Unknown);
        assert_eq!(retry_window_of("hmac").window(), None);
    }
}
