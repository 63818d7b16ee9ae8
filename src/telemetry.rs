//! Logging: human-readable by default, JSON with `--log-format json`. The
//! level comes from `RUST_LOG` (default `info`). Request ids
//! ([`request_id`]) and Prometheus metrics ([`metrics`]) live beside it.

pub mod metrics;
pub mod request_id;

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber; a second call (as in tests) is a no-op.
///
/// Text lines are coloured only when stderr is a terminal: in a file or a
/// pipe the colour codes would be raw ESC bytes around every field.
///
/// In JSON every line is one object: the event's fields at the top level,
/// `span` (the innermost span with its fields) and `spans` (every span
/// from the outermost, `request`, inwards), so that a line can be found
/// by its request id or its delivery id alike.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}
