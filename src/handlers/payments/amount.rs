//! Amounts as exact integers in the currency's minor unit. Providers send
//! either minor units already (an integer, or Paddle's digit string) or a
//! decimal string in major units ("10.99"); the latter is scaled by the
//! currency's ISO 4217 exponent. Nothing is rounded and no float is involved:
//! a ledger that silently drops a fraction of a cent cannot be reconciled.

use serde_json::Value;

/// How a provider writes an amount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Units {
    /// A JSON integer, or a string of ASCII digits, already in minor units.
    Minor,
    /// A string `123` or `123.45` in major units of the currency.
    Decimal,
}

/// ISO 4217 currencies whose minor unit is not the hundredth (list one,
/// "Minor unit" column). Everything else, including codes ISO does not list,
/// is taken to have two decimals.
const EXPONENTS: &[(&str, u32)] = &[
    ("BIF", 0),
    ("CLP", 0),
    ("DJF", 0),
    ("GNF", 0),
    ("ISK", 0),
    ("JPY", 0),
    ("KMF", 0),
    ("KRW", 0),
    ("PYG", 0),
    ("RWF", 0),
    ("UGX", 0),
    ("UYI", 0),
    ("VND", 0),
    ("VUV", 0),
    ("XAF", 0),
    ("XOF", 0),
    ("XPF", 0),
    ("BHD", 3),
    ("IQD", 3),
    ("JOD", 3),
    ("KWD", 3),
    ("LYD", 3),
    ("OMR", 3),
    ("TND", 3),
    ("CLF", 4),
    ("UYW", 4),
];

/// The number of decimals of `currency` (an upper-case ISO 4217 code).
pub(super) fn exponent(currency: &str) -> u32 {
    EXPONENTS
        .iter()
        .find(|(code, _)| *code == currency)
        .map_or(2, |(_, e)| *e)
}

/// Reads `value` as a positive count of minor units of `currency`, or says
/// what it should have been (the caller names the pointer).
pub(super) fn minor_units(value: &Value, units: Units, currency: &str) -> Result<i64, String> {
    match units {
        Units::Minor => match value {
            Value::Number(n) => n.as_i64(),
            Value::String(s) if all_digits(s) => s.parse().ok(),
            _ => None,
        }
        .filter(|a| *a > 0)
        .ok_or_else(|| "a positive integer in minor units".to_owned()),
        Units::Decimal => {
            let exp = exponent(currency);
            value.as_str().and_then(|s| scaled(s, exp)).ok_or_else(|| {
                format!("a positive decimal string with at most {exp} decimals for {currency}")
            })
        }
    }
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `text` (`digits` or `digits.digits`, no sign, no exponent, no spaces)
/// times 10^`exp`, if that is a positive integer that fits an i64.
fn scaled(text: &str, exp: u32) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let has_point = text.len() != whole.len();
    // "12." and ".5" are refused: no provider writes them, so seeing one
    // means the field is not what this table thinks it is.
    if !all_digits(whole) || (has_point && !all_digits(fraction)) {
        return None;
    }
    // More decimals than the currency has would need rounding to book.
    let padding = exp.checked_sub(u32::try_from(fraction.len()).ok()?)?;
    let mut units: i64 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        units = units.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
    }
    units = units.checked_mul(10_i64.checked_pow(padding)?)?;
    Some(units).filter(|u| *u > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decimal(text: &str, currency: &str) -> Result<i64, String> {
        minor_units(&json!(text), Units::Decimal, currency)
    }

    #[test]
    fn a_decimal_string_is_scaled_by_the_currency_exponent() {
        assert_eq!(decimal("10.99", "USD"), Ok(1099));
        assert_eq!(decimal("10.9", "EUR"), Ok(1090));
        assert_eq!(decimal("10", "GBP"), Ok(1000));
        assert_eq!(decimal("0.01", "USD"), Ok(1));
        assert_eq!(decimal("007.50", "USD"), Ok(750));
        assert_eq!(decimal("1500", "JPY"), Ok(1500));
        assert_eq!(decimal("1500", "KRW"), Ok(1500));
        assert_eq!(decimal("12.345", "KWD"), Ok(12345));
        assert_eq!(decimal("1.5", "BHD"), Ok(1500));
        assert_eq!(decimal("3", "TND"), Ok(3000));
        assert_eq!(decimal("0.0001", "CLF"), Ok(1));
        // An unlisted code gets the common two decimals.
        assert_eq!(decimal("1.23", "XYZ"), Ok(123));
    }

    #[test]
    fn more_decimals_than_the_currency_has_are_refused_not_rounded() {
        for (text, currency) in [
            ("10.999", "USD"),
            ("10.990", "USD"),
            ("1500.0", "JPY"),
            ("1500.00", "KRW"),
            ("1.2345", "OMR"),
            ("1.2345", "JOD"),
        ] {
            let refused = decimal(text, currency).expect_err(text);
            assert!(refused.contains(currency), "{refused}");
        }
    }

    #[test]
    fn anything_but_a_plain_positive_decimal_is_refused() {
        for text in [
            "",
            "0",
            "0.00",
            "-1.00",
            "+1.00",
            "1e3",
            "1E3",
            "1.2e1",
            ".5",
            "5.",
            "1.2.3",
            " 1.00",
            "1.00 ",
            "1,00",
            "1_000",
            "0x10",
            "NaN",
            "inf",
            "１.００",
            "1.0\u{0}",
        ] {
            assert!(decimal(text, "USD").is_err(), "{text:?} was accepted");
        }
        // Numbers are refused too: a JSON 10.99 has already been through a float.
        for value in [json!(10.99), json!(10), json!(null), json!(true)] {
            assert!(minor_units(&value, Units::Decimal, "USD").is_err());
        }
    }

    #[test]
    fn amounts_beyond_an_i64_are_refused_instead_of_wrapping() {
        // i64::MAX is 9223372036854775807.
        assert_eq!(decimal("92233720368547758.07", "USD"), Ok(i64::MAX));
        assert!(decimal("92233720368547758.08", "USD").is_err());
        assert!(decimal("9223372036854775807", "USD").is_err());
        assert_eq!(decimal("9223372036854775807", "JPY"), Ok(i64::MAX));
        assert!(decimal("99999999999999999999999999", "JPY").is_err());
    }

    #[test]
    fn minor_units_are_integers_or_digit_strings() {
        let minor = |v: Value| minor_units(&v, Units::Minor, "USD");
        assert_eq!(minor(json!(1999)), Ok(1999));
        assert_eq!(minor(json!("1999")), Ok(1999));
        for v in [
            json!(12.5),
            json!(-3),
            json!(0),
            json!("0"),
            json!("1.50"),
            json!("-5"),
            json!(""),
            Value::Null,
        ] {
            assert!(minor(v.clone()).is_err(), "{v} was accepted");
        }
    }
}
