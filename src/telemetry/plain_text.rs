//! The text log's lines, written directly when they carry no colour.
//!
//! `tracing_subscriber`'s default text format paints every piece of a line
//! (the level, each span's name and braces, each field's name and `=`, the
//! target) through `nu_ansi_term`, even when colour is off and the paint is
//! empty: each piece then costs a `write!` for the prefix, one for the text
//! and one for the suffix. At the default level every delivery writes a
//! line with two spans and nine fields, and that framing, with the
//! timestamp's formatting, was about a sixth of a replay's CPU.
//!
//! [`PlainFormat`] and [`PlainFields`] write the same bytes without it:
//! the same layout, the same `{:?}` of every value, and for what the
//! default treats specially (the message, an error's sources, raw
//! identifiers, `log.` fields, a record from the `log` crate) the default
//! itself. With colour on (stderr is a terminal) both hand everything to
//! the default. A test renders the same events through both and compares
//! the bytes.

use crate::decimal_text::write_before;
use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};
use std::thread::LocalKey;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::span::Record;
use tracing::{Event, Level, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::field::{RecordFields, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Format, Full, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format: `Format<Full>`'s line, written plainly without colour.
#[derive(Debug, Clone)]
pub struct PlainFormat<T = UtcTime> {
    timer: T,
    /// The default, for coloured lines and records from the `log` crate.
    colored: Format<Full, T>,
}

impl Default for PlainFormat<UtcTime> {
    fn default() -> Self {
        PlainFormat::with_timer(UtcTime)
    }
}

impl<T: FormatTime + Clone> PlainFormat<T> {
    pub fn with_timer(timer: T) -> Self {
        PlainFormat {
            colored: Format::default().with_timer(timer.clone()),
            timer,
        }
    }
}

impl<S, N, T> FormatEvent<S, N> for PlainFormat<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A `log` record's own target and level are in its fields; the
        // default finds them.
        if writer.has_ansi_escapes() || event.is_log() {
            return self.colored.format_event(ctx, writer, event);
        }
        let meta = event.metadata();
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        writer.write_char(' ')?;
        writer.write_str(level_label(meta.level()))?;
        writer.write_char(' ')?;
        if let Some(scope) = ctx.event_scope() {
            let mut seen = false;
            for span in scope.from_root() {
                writer.write_str(span.metadata().name())?;
                seen = true;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && !fields.is_empty()
                {
                    writer.write_char('{')?;
                    writer.write_str(fields)?;
                    writer.write_char('}')?;
                }
                writer.write_char(':')?;
            }
            if seen {
                writer.write_char(' ')?;
            }
        }
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// The level as the default pads it to five characters.
fn level_label(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

/// The field format: `DefaultFields`' `name=value` pairs, written plainly
/// without colour.
///
/// A span's fields are kept in a `String` that `tracing_subscriber` starts
/// empty and that each field then grows: four or five reallocations per
/// span, for the `request` and `webhook` spans of every delivery. Here the
/// fields are formatted into a buffer of the thread's and appended with one
/// write, which sizes the span's `String` once.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainFields;

thread_local! {
    /// Where [`PlainFields`] formats fields before appending them.
    static FIELDS: RefCell<String> = const { RefCell::new(String::new()) };
    /// Where [`PlainVisitor`] formats a message before checking it for what
    /// the default escapes.
    static MESSAGE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The most of its capacity a thread's buffer keeps after a line: one huge
/// field does not hold its memory for the life of the thread.
const BUFFER_KEPT: usize = 4096;

/// Runs `use_it` on the thread's `buffer`, emptied; `None` when the buffer
/// is already in use further up this thread's stack.
fn with_buffer<T>(
    buffer: &'static LocalKey<RefCell<String>>,
    use_it: impl FnOnce(&mut String) -> T,
) -> Option<T> {
    buffer.with(|buffer| {
        let mut text = buffer.try_borrow_mut().ok()?;
        text.clear();
        let result = use_it(&mut text);
        if text.capacity() > BUFFER_KEPT {
            *text = String::new();
        }
        Some(result)
    })
}

impl<'writer> FormatFields<'writer> for PlainFields {
    /// A span's fields recorded after it was made (a delivery's id, event
    /// type, outcome and duration on its `webhook` span, once a request):
    /// the default pushes the separating space and then writes the fields,
    /// and each can outgrow the span's `String`, which was sized for the
    /// fields it was made with. Each growth is a `realloc` to a larger size
    /// class, which jemalloc serves outside its thread cache: two of them
    /// were about 1,100 instructions a replay (callgrind), against about
    /// 230 for an allocation and a free through the cache. Here the fields
    /// are formatted into the thread's buffer first, and the span's text is
    /// moved, when it must grow, into one new allocation that holds it all.
    /// The bytes are the default's: the space whenever the span's text is
    /// not empty, even for a record that adds nothing.
    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &Record<'_>,
    ) -> fmt::Result {
        let plain = {
            let writer = current.as_writer();
            !writer.has_ansi_escapes() && writer.sanitizes_ansi_escapes()
        };
        let added = if plain {
            with_buffer(&FIELDS, |buffer| {
                record_plain(Writer::new(buffer), fields)
                    .map(|()| append_fields(&mut current.fields, buffer))
            })
        } else {
            None
        };
        match added {
            Some(added) => added,
            None => {
                if !current.fields.is_empty() {
                    current.fields.push(' ');
                }
                self.format_fields(current.as_writer(), fields)
            }
        }
    }

    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        // The buffer's writer is `Writer::new`'s: plain, sanitising. Any
        // other writer, or a field whose formatting logs (the buffer is
        // then in use), is written to directly.
        if writer.has_ansi_escapes() || !writer.sanitizes_ansi_escapes() {
            return record_plain(writer, fields);
        }
        let mut writer = writer;
        let buffered = with_buffer(&FIELDS, |buffer| {
            record_plain(Writer::new(buffer), &fields).and_then(|()| writer.write_str(buffer))
        });
        match buffered {
            Some(written) => written,
            None => record_plain(writer, fields),
        }
    }
}

/// `more` appended to a span's `fields` after a space (none when `fields`
/// is empty), with at most one new allocation, of at least twice the old.
fn append_fields(fields: &mut String, more: &str) {
    let space = usize::from(!fields.is_empty());
    let needed = fields.len() + space + more.len();
    if needed > fields.capacity() {
        let mut grown = String::with_capacity(needed.max(2 * fields.capacity()));
        grown.push_str(fields);
        *fields = grown;
    }
    if space == 1 {
        fields.push(' ');
    }
    fields.push_str(more);
}

fn record_plain<R: RecordFields>(writer: Writer<'_>, fields: R) -> fmt::Result {
    let mut visitor = PlainVisitor {
        writer,
        is_empty: true,
        result: Ok(()),
    };
    fields.record(&mut visitor);
    visitor.finish()
}

/// What the default's message writer escapes (`tracing_subscriber`'s
/// `EscapingWriter`): the C0 controls that start or sound terminal
/// sequences, DEL, and the C1 controls.
fn escaped_by_default(ch: char) -> bool {
    matches!(
        ch,
        '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
    )
}

pub struct PlainVisitor<'a> {
    writer: Writer<'a>,
    /// Nothing written yet: the next field needs no separating space.
    is_empty: bool,
    result: fmt::Result,
}

impl PlainVisitor<'_> {
    /// A field written as the default writes it: the message (escaped and
    /// unquoted), an error with its sources, a raw identifier, and every
    /// field of a coloured line.
    fn as_default(&mut self, field: &Field, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        // The default skips `log.` fields (a bridged record's metadata)
        // without a separating space.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        self.is_empty = false;
    }

    fn is_special(&self, name: &str) -> bool {
        self.writer.has_ansi_escapes()
            || name == "message"
            || name.starts_with("r#")
            || name.starts_with("log.")
    }

    /// The message as the default writes it, when it holds nothing the
    /// default escapes: `true` when it was written. The default writes it
    /// through an escaping writer a character at a time, which was about a
    /// fiftieth of a replay's instructions for `delivery answered`.
    fn write_message(&mut self, value: &dyn fmt::Debug) -> bool {
        if self.writer.has_ansi_escapes() || self.result.is_err() {
            return false;
        }
        // Otherwise (escapes, or the buffer in use) the default formats the
        // message again and writes it, escaped.
        with_buffer(&MESSAGE, |text| {
            let plain = write!(text, "{value:?}").is_ok() && !text.chars().any(escaped_by_default);
            if plain {
                self.result = self.separate().and_then(|()| self.writer.write_str(text));
            }
            plain
        })
        .unwrap_or(false)
    }

    /// A space before every field but the first.
    fn separate(&mut self) -> fmt::Result {
        if self.is_empty {
            self.is_empty = false;
            Ok(())
        } else {
            self.writer.write_char(' ')
        }
    }

    /// The separating space, the field's name and `=`.
    fn write_name(&mut self, name: &str) -> fmt::Result {
        self.separate()?;
        self.writer.write_str(name)?;
        self.writer.write_char('=')
    }

    fn write_pair(&mut self, name: &str, value: &dyn fmt::Debug) -> fmt::Result {
        self.write_name(name)?;
        write!(self.writer, "{value:?}")
    }
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // The default writes a `str` message as it writes any other.
        if field.name() == "message" {
            return self.record_debug(field, &format_args!("{value}"));
        }
        if self.is_special(field.name()) {
            return self.as_default(field, |visitor| visitor.record_str(field, value));
        }
        self.record_debug(field, &value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.as_default(field, |visitor| visitor.record_error(field, value));
    }

    /// A whole number of thousandths (every `duration_ms`, see
    /// [`crate::telemetry::request_id::millis`]) is written from the
    /// integer; `f64`'s own `{:?}` searches for the shortest digits, about
    /// 540 instructions, once per delivery for the `webhook` span's
    /// duration. Any other value is written by `{:?}` as before.
    fn record_f64(&mut self, field: &Field, value: f64) {
        let mut digits = [0; THOUSANDTHS_LEN];
        match thousandths(value, &mut digits) {
            Some(text) if !self.is_special(field.name()) => {
                if self.result.is_ok() {
                    self.result = self
                        .write_name(field.name())
                        .and_then(|()| self.writer.write_str(text));
                }
            }
            _ => self.record_debug(field, &value),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if name == "message" && self.write_message(value) {
            return;
        }
        if self.is_special(name) {
            return self.as_default(field, |visitor| visitor.record_debug(field, value));
        }
        if self.result.is_ok() {
            self.result = self.write_pair(name, value);
        }
    }
}

impl VisitOutput<fmt::Result> for PlainVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for PlainVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// The longest text [`thousandths`] writes: 12 digits, the point and 3.
const THOUSANDTHS_LEN: usize = 16;

/// `value`'s `{:?}`, written from the integer, when `value` is a whole
/// number of thousandths from 0 to 10^12 (exclusive); `None` otherwise.
///
/// Why the text is `{:?}`'s: `value` equals `n / 1000.0`, the `f64`
/// nearest to the decimal `n / 1000`. That decimal has at most 15
/// significant digits, and any other decimal with no more digits differs
/// from it by at least a unit of its last digit, more than the distance
/// between two neighbouring `f64`s at 15 digits: so it is the only
/// shortest text that reads back as `value`, which is what `{:?}` writes
/// (without an exponent in this range, and with `.0` for a whole number).
/// `thousandths_are_written_as_debug_writes_them` compares the two.
fn thousandths(value: f64, text: &mut [u8; THOUSANDTHS_LEN]) -> Option<&str> {
    // Excludes NaN, the infinities and every negative value, -0.0 too.
    if value.is_sign_negative() || value.is_nan() || value >= 1e12 {
        return None;
    }
    let scaled = (value * 1000.0).round();
    if scaled / 1000.0 != value {
        return None;
    }
    // Below 10^15: exact in an `f64` and in a `u64`.
    let n = scaled as u64;
    let (whole, fraction) = (n / 1000, n % 1000);
    // The fraction without its trailing zeros, and how many digits are
    // left; `.0` for none.
    let (fraction, fraction_len) = match fraction {
        0 => (0, 1),
        f if f % 100 == 0 => (f / 100, 1),
        f if f % 10 == 0 => (f / 10, 2),
        f => (f, 3),
    };
    // Written from the last digit backwards.
    let point = write_before(fraction, fraction_len, text, THOUSANDTHS_LEN) - 1;
    text[point] = b'.';
    let end = write_before(whole, 1, text, point);
    std::str::from_utf8(&text[end..]).ok()
}

/// The default timer's UTC timestamp (`2026-12-04T07:46:56.808132Z`), with
/// the date and time up to the second formatted once per second per
/// thread rather than for every line.
#[derive(Debug, Clone, Copy, Default)]
pub struct UtcTime;

/// The second (since the epoch, plus one; 0: none yet) this thread last
/// wrote, and its `YYYY-MM-DDTHH:MM:SS`.
type SecondText = (u64, [u8; 19]);

thread_local! {
    static SECOND: Cell<SecondText> = const { Cell::new((0, [0; 19])) };
}

impl FormatTime for UtcTime {
    fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
        match utc_text(SystemTime::now()) {
            // ASCII digits and punctuation only.
            Some(text) => writer.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?),
            None => tracing_subscriber::fmt::time::SystemTime.format_time(writer),
        }
    }
}

/// `at` as the default timer writes it, for the years 1970 to 9999; `None`
/// for any other (the default then writes it).
fn utc_text(at: SystemTime) -> Option<[u8; 27]> {
    let since = at.duration_since(UNIX_EPOCH).ok()?;
    let seconds = since.as_secs();
    let mut cached = SECOND.with(Cell::get);
    if cached.0 != seconds + 1 {
        cached = (seconds + 1, second_text(seconds)?);
        SECOND.with(|cell| cell.set(cached));
    }
    let mut text = [0; 27];
    text[..19].copy_from_slice(&cached.1);
    text[19..].copy_from_slice(b".000000Z");
    // Below a million: exactly the six digits between `.` and `Z`.
    write_before(u64::from(since.subsec_micros()), 6, &mut text, 26);
    Some(text)
}

/// `YYYY-MM-DDTHH:MM:SS` of a second since the epoch, if its year has four
/// digits.
fn second_text(seconds: u64) -> Option<[u8; 19]> {
    let at = chrono::DateTime::from_timestamp(i64::try_from(seconds).ok()?, 0)?;
    let mut text = String::with_capacity(19);
    write!(text, "{}", at.format("%Y-%m-%dT%H:%M:%S")).ok()?;
    text.as_bytes().try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;
    use tracing_subscriber::fmt::MakeWriter;

    /// Lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Lines {
        fn text(&self) -> String {
            let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    impl io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            lines.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;

        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    /// One timestamp for both formats, so that whole lines compare.
    #[derive(Debug, Clone, Copy)]
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
            writer.write_str("2026-12-04T07:46:56.808132Z")
        }
    }

    /// A value whose formatting logs, while the buffers are in use (tracing
    /// drops that line: a subscriber is not re-entered).
    struct Noisy;

    impl fmt::Debug for Noisy {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            tracing::info!(nested = true, "logged while formatting");
            f.write_str("noisy")
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the pool timed out")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused: \"127.0.0.1:5432\"")]
    struct Inner;

    /// Events of every kind the receiver logs, and the edge cases of the
    /// default format: every level, nested spans with fields given at
    /// creation, recorded later or never, a span without fields, every
    /// kind of value, quotes, newlines and ESC in values and messages, an
    /// error with its source chain, a raw identifier, a `log.` field, an
    /// event with no message and one with only a message.
    fn events() {
        tracing::trace!(n = 1_u64, "trace line");
        tracing::debug!(flag = true, "debug line");
        tracing::warn!(ratio = 0.25_f64, negative = -7_i64, "warn line");
        tracing::info!(
            whole = 2.0_f64,
            zero = 0.0_f64,
            negative_zero = -0.0_f64,
            thousandths = 1042.007_f64,
            tiny = 1e-7_f64,
            huge = 1e21_f64,
            inexact = 0.1_f64 + 0.2_f64,
            nan = f64::NAN,
            "floats"
        );
        tracing::error!(error = %"boom", "error line");
        tracing::info!("only a message");
        tracing::info!(status = 200);
        tracing::info!(r#type = "raw", "raw identifier");
        tracing::info!(log.target = "somewhere", kept = 1, "a log. field");
        tracing::info!(text = "quote \" newline \n esc \u{1b}[31m", "value escapes");
        tracing::info!("message with \u{1b}[31m esc and \"quotes\" and {}", 42);
        tracing::info!(
            "bell \u{7}, backspace \u{8}, form feed \u{c} and C1 {}",
            '\u{85}'
        );
        tracing::info!(
            message = "a str message with DEL \u{7f} and CSI \u{9b}31m",
            n = 1
        );
        tracing::info!(message = "a plain str message");
        tracing::info!(value = ?Noisy, "a field whose formatting logs");
        let error = Outer(Inner);
        tracing::warn!(
            error = &error as &(dyn std::error::Error + 'static),
            "failed"
        );
        tracing::warn!(
            error = &Inner as &(dyn std::error::Error + 'static),
            "no source"
        );
        tracing::info!(debug = ?Some("x"), display = %"y", bytes = ?b"ab", "formats");
        let request = tracing::info_span!(
            "request",
            request_id = %"2995925d-a4be-4e66-9455-2dc8f08d6aec",
            method = %"POST",
            route = %"/webhooks/{endpoint}",
            status = tracing::field::Empty,
        );
        let _request = request.enter();
        let webhook = tracing::info_span!(
            "webhook",
            endpoint = %"bench",
            delivery_id = tracing::field::Empty,
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let _webhook = webhook.enter();
        tracing::info!("before the records");
        webhook.record("delivery_id", "p1-r-33");
        tracing::record_all!(webhook, outcome = "replayed", duration_ms = 0.242_f64);
        tracing::info!(status = 200_u16, "delivery answered");
        let empty = tracing::info_span!("empty");
        let _empty = empty.enter();
        tracing::info!(detail = %"inside a span without fields", "nested");
        let noisy = tracing::info_span!("noisy", value = ?Noisy);
        noisy.in_scope(|| tracing::info!("inside a span whose formatting logged"));
        let recorded_only = tracing::info_span!("later", value = tracing::field::Empty);
        recorded_only.record("value", 3_i64);
        recorded_only.in_scope(|| tracing::info!("a span whose fields all came later"));
        // A record that adds nothing still adds the default's space; one
        // that adds more than the span's text holds makes it grow.
        let grown = tracing::info_span!(
            "grown",
            a = 1_u8,
            nothing = tracing::field::Empty,
            long = tracing::field::Empty,
        );
        tracing::record_all!(grown, nothing = None::<&str>);
        grown.in_scope(|| tracing::info!("after a record of nothing"));
        grown.record(
            "long",
            "a value long enough to outgrow the span's first allocation",
        );
        grown.in_scope(|| tracing::info!("after a record that grew the span"));
        // A record from a crate that logs through `log`, as `LogTracer`
        // bridges it: its own target and level, its file and line dropped.
        let bridged = tracing_log::format_trace(
            &tracing_log::log::Record::builder()
                .args(format_args!("from the log crate, {} retries", 3))
                .level(tracing_log::log::Level::Warn)
                .target("rustls::conn")
                .module_path_static(Some("rustls::conn"))
                .file_static(Some("src/conn.rs"))
                .line(Some(42))
                .build(),
        );
        if let Err(error) = bridged {
            panic!("the record was not bridged: {error}");
        }
    }

    fn render(plain: bool, ansi: bool) -> String {
        let lines = Lines::default();
        let builder = tracing_subscriber::fmt()
            .with_max_level(Level::TRACE)
            .with_writer(lines.clone())
            .with_ansi(ansi);
        if plain {
            let subscriber = builder
                .fmt_fields(PlainFields)
                .event_format(PlainFormat::with_timer(Fixed))
                .finish();
            tracing::subscriber::with_default(subscriber, events);
        } else {
            let subscriber = builder.with_timer(Fixed).finish();
            tracing::subscriber::with_default(subscriber, events);
        }
        lines.text()
    }

    #[test]
    fn lines_are_the_default_formats_bytes_without_and_with_colour() {
        let default = render(false, false);
        let plain = render(true, false);
        assert_eq!(default.lines().count(), 26, "{default}");
        for (default, plain) in default.lines().zip(plain.lines()) {
            assert_eq!(plain, default);
        }
        assert_eq!(plain, default);
        // The receiver's own line, as an operator reads it.
        assert!(
            plain.contains(
                "2026-12-04T07:46:56.808132Z  INFO request{request_id=2995925d-a4be-4e66-9455-2dc8f08d6aec \
                 method=POST route=/webhooks/{endpoint}}:webhook{endpoint=bench delivery_id=\"p1-r-33\" \
                 outcome=\"replayed\" duration_ms=0.242}: idempotent_receiver::telemetry::plain_text::tests: \
                 delivery answered status=200\n"
            ),
            "{plain}"
        );
        // The default's space for a record of nothing (so two before the
        // next field), and the grown span.
        assert!(
            plain.contains(
                "grown{a=1  long=\"a value long enough to outgrow the span's first allocation\"}: "
            ) && plain.contains("grown{a=1 }: "),
            "{plain}"
        );
        let coloured = render(true, true);
        assert!(
            plain.contains(":empty: rustls::conn: from the log crate, 3 retries\n"),
            "{plain}"
        );
        assert!(coloured.contains('\u{1b}'));
        assert_eq!(coloured, render(false, true));
    }

    #[test]
    fn thousandths_are_written_as_debug_writes_them() {
        let check = |value: f64| {
            let mut text = [0; THOUSANDTHS_LEN];
            if let Some(written) = thousandths(value, &mut text) {
                assert_eq!(written, format!("{value:?}"), "{value:e}");
                true
            } else {
                false
            }
        };
        // Every duration up to 200 ms, to the microsecond, as `millis`
        // makes them, and one in 997 up to 10 minutes.
        for micros in (0..200_000_u64).chain((200_000..600_000_000).step_by(997)) {
            assert!(check(micros as f64 / 1000.0), "{micros} us");
        }
        // Large ones, up to the bound, spread over every magnitude.
        let mut n: u64 = 1;
        while n < 1_000_000_000_000_000 {
            for k in [n, n + 1, n * 7 + 3, n * 9 + 999] {
                if k < 1_000_000_000_000_000 {
                    assert!(check(k as f64 / 1000.0), "{k} thousandths");
                }
            }
            n *= 10;
        }
        // Anything else is left to `{:?}`.
        for other in [
            0.1 + 0.2,
            1e-7,
            0.0005,
            1e12,
            1e15,
            1.5e300,
            f64::MIN_POSITIVE,
            -0.0,
            -1.5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert!(!check(other), "{other:?}");
        }
    }

    #[test]
    fn the_timestamp_is_the_default_timers_utc_to_the_microsecond() {
        let instants = [
            0,
            1,
            59,
            86_399,
            951_782_400,     // 2000-02-29
            1_780_000_000,   // 2026
            4_102_444_799,   // 2099-12-31T23:59:59
            253_402_300_799, // 9999-12-31T23:59:59, the last four-digit year
        ];
        for seconds in instants {
            for micros in [0, 7, 808_132, 999_999] {
                let at = UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros);
                let expected = chrono::DateTime::<chrono::Utc>::from(at)
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
                let text = utc_text(at).map(|text| String::from_utf8_lossy(&text).into_owned());
                assert_eq!(text.as_deref(), Some(expected.as_str()));
                // Again, from the second cached by the first.
                let again = utc_text(at).map(|text| String::from_utf8_lossy(&text).into_owned());
                assert_eq!(again.as_deref(), Some(expected.as_str()));
            }
        }
        // A five-digit year or a clock before 1970: the default writes it.
        assert_eq!(
            utc_text(UNIX_EPOCH + Duration::from_secs(253_402_300_800)),
            None
        );
        assert_eq!(utc_text(UNIX_EPOCH - Duration::from_secs(1)), None);
    }
}
