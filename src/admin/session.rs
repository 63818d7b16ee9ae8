//! The admin page's session cookie. It holds no token: its value is an
//! expiry and an HMAC of it keyed with the token that logged in, so it is
//! checked against the configured tokens exactly as a bearer token is (in
//! constant time), it stops working when that token is removed from the
//! configuration, and it expires by itself.

use super::tokens::{AdminToken, AdminTokens};
use crate::providers::mac::{self, Algorithm};

pub const COOKIE: &str = "ir_admin_session";
/// How long a login lasts.
pub const LIFETIME_SECS: i64 = 12 * 3600;
const CONTEXT: &[u8] = b"idempotent-receiver admin session\0";

/// A session value for `token`, valid until `now + LIFETIME_SECS`.
pub fn issue(token: &[u8], now: i64) -> String {
    let expires = (now + LIFETIME_SECS).to_string();
    let tag = mac::sign(Algorithm::Sha256, token, &[CONTEXT, expires.as_bytes()]);
    format!("{expires}.{}", hex::encode(tag))
}

/// Whether `value` is a live session of one of `tokens`. Every token is
/// tried, whichever matches.
pub fn verify(tokens: &AdminTokens, value: &str, now: i64) -> bool {
    holder(tokens, value, now).is_some()
}

/// The token whose live session `value` is: the HMAC's key tells it, so
/// the session remembers which token logged in (and the page's actions
/// are recorded with its name) without holding it. Every token is tried,
/// whichever matches.
pub fn holder<'t>(tokens: &'t AdminTokens, value: &str, now: i64) -> Option<&'t AdminToken> {
    let (expires, tag) = value.split_once('.')?;
    let expiry = expires.parse::<i64>().ok()?;
    let tag = hex::decode(tag).ok()?;
    if expiry <= now || expiry > now + LIFETIME_SECS {
        return None;
    }
    let mut matched = None;
    for token in tokens.iter() {
        let valid = mac::verify(
            Algorithm::Sha256,
            token.secret.expose(),
            &[CONTEXT, expires.as_bytes()],
            &tag,
        );
        if valid && matched.is_none() {
            matched = Some(token);
        }
    }
    matched
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    fn tokens(list: &[&str]) -> AdminTokens {
        AdminTokens::unnamed(
            list.iter()
                .map(|t| Secret::new(t.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn a_session_holds_no_token_and_verifies_until_it_expires() {
        let value = issue(b"tok_0123456789abcdef", 1_000);
        assert!(!value.contains("tok_0123456789abcdef"));
        let configured = tokens(&["tok_other_0123456789", "tok_0123456789abcdef"]);
        assert!(verify(&configured, &value, 1_000));
        assert!(verify(&configured, &value, 1_000 + LIFETIME_SECS - 1));
        assert!(!verify(&configured, &value, 1_000 + LIFETIME_SECS));
    }

    #[test]
    fn a_session_remembers_which_named_token_logged_in() {
        let configured = AdminTokens::new(vec![
            AdminToken {
                name: Some("ops".into()),
                secret: Secret::new(b"tok_ops_0123456789ab".to_vec()),
            },
            AdminToken {
                name: Some("oncall".into()),
                secret: Secret::new(b"tok_oncall_01234567".to_vec()),
            },
        ]);
        let value = issue(b"tok_oncall_01234567", 1_000);
        let holder = holder(&configured, &value, 1_000).map(|t| t.name.clone());
        assert_eq!(holder, Some(Some("oncall".to_owned())));
    }

    #[test]
    fn a_session_of_a_removed_token_or_a_forged_one_is_refused() {
        let value = issue(b"tok_0123456789abcdef", 1_000);
        assert!(!verify(&tokens(&["tok_other_0123456789"]), &value, 1_000));
        let (expiry, tag) = value.split_once('.').unwrap();
        let later: i64 = expiry.parse::<i64>().unwrap() + 1;
        let configured = tokens(&["tok_0123456789abcdef"]);
        assert!(!verify(&configured, &format!("{later}.{tag}"), 1_000));
        for junk in ["", ".", "x.y", "123", "123.zz"] {
            assert!(!verify(&configured, junk, 1_000), "{junk}");
        }
    }
}
