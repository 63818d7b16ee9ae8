//! Durations as operators write them in the configuration and read them in
//! messages: `"72h"`, `"5m"`, `"1500ms"`, and `"0"` for "off".
//!
//! A leaf: it imports nothing of the product, so any module may use it.

use std::time::Duration;

/// `"0"` (disabled, where that means something) or a humantime duration such
/// as `"72h"`, `"5m"`, `"1500ms"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{text:?} is not a duration such as \"72h\" or \"5m\" ({e})"))
}

/// A duration in hours, minutes, seconds and milliseconds (`"72h"`,
/// `"27h 35m 5s"`), never days, so that it reads the same as the
/// `retention` it is compared with. [`parse_duration`] reads it back.
pub fn format_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0".to_owned();
    }
    let secs = duration.as_secs();
    let parts = [
        (secs / 3600, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
        (u64::from(duration.subsec_millis()), "ms"),
    ];
    let text = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        format!("{}us", duration.as_micros())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_shown_in_hours_minutes_and_seconds() {
        assert_eq!(format_duration(Duration::from_secs(72 * 3600)), "72h");
        assert_eq!(format_duration(Duration::from_secs(99_305)), "27h 35m 5s");
        assert_eq!(format_duration(Duration::from_secs(360)), "6m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s 500ms");
        assert_eq!(format_duration(Duration::from_millis(50)), "50ms");
        assert_eq!(format_duration(Duration::ZERO), "0");
        for text in ["72h", "27h 35m 5s", "1s 500ms", "50ms"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    #[test]
    fn durations_accept_zero_and_humantime() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("72h"), Ok(Duration::from_secs(259_200)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("").is_err());
    }
}
