//! How configured secret strings become keys. Every provider refuses a bad
//! secret at configuration, by its index and a fixed reason, so that a typo
//! fails at start-up rather than as an endpoint that silently accepts nothing,
//! and so that the secret itself never reaches a log or an error.

use super::ProviderConfigError;
use crate::secret::Secret;

/// Parses every configured secret with `parse`; an endpoint without any could
/// verify nothing, so it is refused too.
pub(crate) fn parse_each<T>(
    secrets: &[String],
    parse: impl Fn(&str) -> Result<T, &'static str>,
) -> Result<Vec<T>, ProviderConfigError> {
    if secrets.is_empty() {
        return Err(ProviderConfigError::NoSecret);
    }
    secrets
        .iter()
        .enumerate()
        .map(|(index, secret)| {
            parse(secret).map_err(|reason| ProviderConfigError::MalformedSecret { index, reason })
        })
        .collect()
}

/// A secret a person chose and typed (GitHub's, Shopify's, the generic
/// scheme's), used as its bytes: anything but an empty string or one with
/// whitespace at either end. Such a secret may well hold spaces or any other
/// character (GitHub's own example does), but whitespace at an end is a stray
/// newline or space far more often than part of a real secret (and could not
/// come through `secrets_env`, which trims).
pub(crate) fn typed(secret: &str) -> Result<Secret, &'static str> {
    non_empty(secret)?;
    if secret.trim() != secret {
        return Err("it begins or ends with whitespace");
    }
    Ok(Secret::new(secret.as_bytes()))
}

/// A secret the sender generated (Stripe's, Paddle's, Slack's), used as its
/// bytes. Those are tokens of visible ASCII, so any other character, a space
/// inside included, is a copy-and-paste accident rather than part of the key.
pub(crate) fn generated(secret: &str) -> Result<Secret, &'static str> {
    non_empty(secret)?;
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("it has characters other than visible ASCII");
    }
    Ok(Secret::new(secret.as_bytes()))
}

fn non_empty(secret: &str) -> Result<(), &'static str> {
    if secret.is_empty() {
        return Err("it is empty");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_secret_at_all_is_refused_and_a_bad_one_is_named_by_index() {
        assert_eq!(parse_each(&[], typed), Err(ProviderConfigError::NoSecret));
        let secrets = ["good".to_owned(), " bad".to_owned()];
        assert_eq!(
            parse_each(&secrets, typed),
            Err(ProviderConfigError::MalformedSecret {
                index: 1,
                reason: "it begins or ends with whitespace"
            })
        );
    }

    #[test]
    fn a_typed_secret_may_hold_spaces_inside_but_a_generated_one_may_not() {
        let secret = "It's a Secret to Everybody";
        assert_eq!(typed(secret), Ok(Secret::new(secret.as_bytes())));
        assert!(generated(secret).is_err());
        for bad in ["", " padded", "newline\n"] {
            assert!(typed(bad).is_err(), "{bad:?}");
            assert!(generated(bad).is_err(), "{bad:?}");
        }
        assert!(typed("naïve").is_ok());
        assert!(generated("naïve").is_err());
    }
}
