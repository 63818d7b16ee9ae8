//! Logging: human-readable by default, JSON with `--log-format json`. The
//! level comes from `RUST_LOG` (default `info`). Request ids
//! ([`request_id`]), Prometheus metrics ([`metrics`]) and OpenTelemetry
//! traces ([`traces`]) live beside it.

pub mod in_span;
pub mod log_writer;
pub mod metrics;
pub mod plain_text;
pub mod request_id;
pub mod traces;

use plain_text::{PlainFields, PlainFormat};
use std::io::IsTerminal;
pub use traces::{TraceSettings, Traces};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber; a second call (as in tests) is a no-op.
/// Keep the guard until the process ends: dropping it writes out the lines
/// still queued.
///
/// Lines are formatted on the thread that logs and written by a thread of
/// their own in batches, at most 10 ms after they were logged (see
/// [`log_writer`]): at the default level each request writes a line, and a
/// write (or a wake-up of a writer thread) per line cost a replay a
/// seventh of its CPU. No line is dropped; a line still waiting when the
/// process is killed is lost, as it would be in any buffered writer. If the
/// writer thread cannot be started, lines go straight to stderr.
///
/// Text lines are coloured only when stderr is a terminal: in a file or a
/// pipe the colour codes would be raw ESC bytes around every field. Without
/// colour they are written by [`plain_text`], byte for byte the default
/// format's lines at a fraction of its cost.
///
/// In JSON every line is one object: the event's fields at the top level,
/// `span` (the innermost span with its fields) and `spans` (every span
/// from the outermost, `request`, inwards), so that a line can be found
/// by its request id or its delivery id alike.
///
/// With `traces`, the delivery spans are also exported (see [`traces`]);
/// the log's level filters the log only. Without, the subscriber is the
/// log alone, as before traces existed.
#[must_use = "dropping the guard stops the log writer"]
pub fn init(format: LogFormat, traces: Option<Traces>) -> LogGuard {
    let filter = LogFilter::from_env();
    let (writer, guard) = match log_writer::spawn(std::io::stderr(), log_writer::Limits::default())
    {
        Ok((writer, guard)) => (writer, Some(guard)),
        Err(_) => (log_writer::LogWriter::direct(), None),
    };
    let ansi = std::io::stderr().is_terminal();
    match &traces {
        None => {
            let log = tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(ansi);
            let subscriber = tracing_subscriber::registry().with(filter.into_layer());
            let _ = match format {
                LogFormat::Text => subscriber
                    .with(
                        log.fmt_fields(PlainFields)
                            .event_format(PlainFormat::default()),
                    )
                    .try_init(),
                LogFormat::Json => subscriber
                    .with(
                        log.json()
                            .flatten_event(true)
                            .with_current_span(true)
                            .with_span_list(true),
                    )
                    .try_init(),
            };
        }
        Some(traces) => {
            let log = tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(ansi);
            let log: Box<dyn Layer<Registry> + Send + Sync> = match format {
                LogFormat::Text => Box::new(
                    log.fmt_fields(PlainFields)
                        .event_format(PlainFormat::default())
                        .with_filter(filter.into_filter()),
                ),
                LogFormat::Json => Box::new(
                    log.json()
                        .flatten_event(true)
                        .with_current_span(true)
                        .with_span_list(true)
                        .with_filter(filter.into_filter()),
                ),
            };
            let _ = tracing_subscriber::registry()
                .with(log)
                .with(traces.layer())
                .try_init();
        }
    }
    LogGuard {
        _writer: guard,
        traces,
    }
}

/// The log's level, from `RUST_LOG` (default `info`), in `EnvFilter`'s
/// syntax.
///
/// Directives of targets and levels only (`info`,
/// `idempotent_receiver=debug,warn`) become a [`Targets`]: the matching of
/// `EnvFilter`'s own static directives, without its bookkeeping of spans.
/// `EnvFilter` takes a lock on every enter and exit of every span to find
/// whether a span-scoped directive applies, about 1 % of a replay at the
/// default level. Anything else (a span or a field in brackets, an empty
/// part, a value `Targets` refuses) is an `EnvFilter`, as before, and one
/// that does not parse is `info`.
// Made once at start-up and turned into a layer at once: its size is moot.
#[allow(clippy::large_enum_variant)]
enum LogFilter {
    Targets(Targets),
    Env(EnvFilter),
}

impl LogFilter {
    fn from_env() -> LogFilter {
        match std::env::var(EnvFilter::DEFAULT_ENV) {
            Err(std::env::VarError::NotPresent) => LogFilter::parse("info"),
            Ok(directives) => LogFilter::parse(&directives),
            Err(std::env::VarError::NotUnicode(_)) => LogFilter::Env(EnvFilter::new("info")),
        }
    }

    fn parse(directives: &str) -> LogFilter {
        let plain = directives
            .split(',')
            .all(|part| !part.is_empty() && !part.contains(['[', ']', '{', '}', ' ']));
        if plain && let Ok(targets) = directives.parse::<Targets>() {
            return LogFilter::Targets(targets);
        }
        LogFilter::Env(EnvFilter::try_new(directives).unwrap_or_else(|_| EnvFilter::new("info")))
    }

    /// The filter of every layer.
    fn into_layer(self) -> Box<dyn Layer<Registry> + Send + Sync> {
        match self {
            LogFilter::Targets(targets) => Box::new(targets),
            LogFilter::Env(env) => Box::new(env),
        }
    }

    /// The filter of the log's layer alone.
    fn into_filter(
        self,
    ) -> Box<dyn tracing_subscriber::layer::Filter<Registry> + Send + Sync + 'static> {
        match self {
            LogFilter::Targets(targets) => Box::new(targets),
            LogFilter::Env(env) => Box::new(env),
        }
    }
}

/// Keeps the log writer thread running, and the trace exporter if any; see
/// [`init`].
pub struct LogGuard {
    _writer: Option<log_writer::WriterGuard>,
    traces: Option<Traces>,
}

impl LogGuard {
    /// Sends the spans still queued and stops the trace exporter, off the
    /// runtime's workers (it waits for the last export); a failure is
    /// logged, since the command's own result is what the caller reports.
    pub async fn shutdown_traces(&mut self) {
        let Some(traces) = self.traces.take() else {
            return;
        };
        match tokio::task::spawn_blocking(move || traces.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the last spans were not exported"),
            Err(error) => tracing::warn!(%error, "the trace exporter's shutdown panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn targets(directives: &str) -> Option<Targets> {
        match LogFilter::parse(directives) {
            LogFilter::Targets(targets) => Some(targets),
            LogFilter::Env(_) => None,
        }
    }

    #[test]
    fn targets_and_levels_make_targets_with_env_filters_matching() {
        let default = targets("info").expect("a bare level");
        assert!(default.would_enable("idempotent_receiver::webhooks", &Level::INFO));
        assert!(!default.would_enable("idempotent_receiver::webhooks", &Level::DEBUG));
        let mixed = targets("idempotent_receiver::engine=debug,actix_server=off,warn")
            .expect("targets and levels");
        // The longest matching target decides, else the bare level.
        assert!(mixed.would_enable("idempotent_receiver::engine::claim", &Level::DEBUG));
        assert!(!mixed.would_enable("idempotent_receiver::webhooks", &Level::INFO));
        assert!(mixed.would_enable("idempotent_receiver::webhooks", &Level::WARN));
        assert!(!mixed.would_enable("actix_server::worker", &Level::ERROR));
    }

    #[test]
    fn spans_fields_empty_parts_and_nonsense_stay_env_filters() {
        for directives in [
            "[webhook]=debug",
            "idempotent_receiver[webhook{endpoint=shop}]=trace",
            "",
            "info,",
            "info, warn",
            "idempotent_receiver=loud",
            "a=b=c",
        ] {
            assert!(targets(directives).is_none(), "{directives:?}");
        }
    }
}
