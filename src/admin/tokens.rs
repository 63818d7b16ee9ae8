//! The admin tokens, their operators' names, and how a presented
//! credential is compared with them.

use crate::bearer::equal;
use crate::secret::Secret;
use std::sync::Arc;
use subtle::{Choice, ConditionallySelectable};

/// The longest token name: it is written into every history row the
/// token's actions leave, so it stays short.
pub const MAX_NAME_LEN: usize = 32;

/// One accepted token and, if configured, the operator's name for it.
#[derive(Debug, Clone)]
pub struct AdminToken {
    /// `None`: a plain token, recorded by its fingerprint.
    pub name: Option<String>,
    pub secret: Secret,
}

/// The configured admin tokens. Several may be valid at once, so that a
/// token can be rotated without locking anyone out. Never printed.
#[derive(Debug, Clone, Default)]
pub struct AdminTokens(Arc<[AdminToken]>);

impl AdminTokens {
    pub fn new(tokens: Vec<AdminToken>) -> AdminTokens {
        AdminTokens(tokens.into())
    }

    /// Plain tokens without names (tests and callers with bare secrets).
    pub fn unnamed(tokens: Vec<Secret>) -> AdminTokens {
        AdminTokens::new(
            tokens
                .into_iter()
                .map(|secret| AdminToken { name: None, secret })
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many tokens are accepted (for the start-up log; never which).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether `candidate` is one of the tokens.
    pub fn accepts(&self, candidate: &[u8]) -> bool {
        self.matching(candidate).is_some()
    }

    /// The token `candidate` is. Every token is compared whatever the
    /// outcome, and the index is chosen without branching, so the time
    /// taken tells neither which token matched nor how much of one did.
    pub fn matching(&self, candidate: &[u8]) -> Option<&AdminToken> {
        let mut found = Choice::from(0);
        let mut index = 0u64;
        for (i, token) in self.0.iter().enumerate() {
            let equal = equal(token.secret.expose(), candidate);
            // The first match wins, should a token be listed twice.
            let first = equal & !found;
            index = u64::conditional_select(&index, &(i as u64), first);
            found |= equal;
        }
        if bool::from(found) {
            usize::try_from(index).ok().and_then(|i| self.0.get(i))
        } else {
            None
        }
    }

    /// The tokens, for deriving and checking session cookies.
    pub(super) fn iter(&self) -> impl Iterator<Item = &AdminToken> {
        self.0.iter()
    }
}

/// Checks a token's name: short, letters, digits, `.`, `_` and `-` only,
/// so that it is safe in a history row, a log line and a URL as it is.
pub fn valid_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!(
            "a token's name is 1 to {MAX_NAME_LEN} characters long"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!(
            "{name:?}: a token's name has only letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: Option<&str>, secret: &str) -> AdminToken {
        AdminToken {
            name: name.map(str::to_owned),
            secret: Secret::new(secret.as_bytes().to_vec()),
        }
    }

    #[test]
    fn any_of_several_tokens_is_accepted() {
        let tokens = AdminTokens::unnamed(vec![
            Secret::new(b"tok_old_0123456789ab".to_vec()),
            Secret::new(b"tok_new_0123456789ab".to_vec()),
        ]);
        assert!(tokens.accepts(b"tok_old_0123456789ab"));
        assert!(tokens.accepts(b"tok_new_0123456789ab"));
        assert!(!tokens.accepts(b"tok_new_0123456789a"));
        assert!(!tokens.accepts(b""));
        assert!(!AdminTokens::default().accepts(b""));
    }

    #[test]
    fn the_matching_token_carries_its_name() {
        let tokens = AdminTokens::new(vec![
            token(None, "tok_plain_0123456789"),
            token(Some("ops"), "tok_ops_0123456789ab"),
            token(Some("oncall"), "tok_oncall_01234567"),
        ]);
        let name = |candidate: &str| {
            tokens
                .matching(candidate.as_bytes())
                .map(|t| t.name.clone())
        };
        assert_eq!(name("tok_ops_0123456789ab"), Some(Some("ops".into())));
        assert_eq!(name("tok_oncall_01234567"), Some(Some("oncall".into())));
        assert_eq!(name("tok_plain_0123456789"), Some(None));
        assert_eq!(name("tok_nobody_01234567"), None);
    }

    #[test]
    fn names_are_short_and_plain() {
        for good in ["ops", "alice.b", "ci_deploy-2", &"a".repeat(MAX_NAME_LEN)] {
            assert!(valid_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "has space",
            "ops:1",
            "é",
            "a/b",
            &"a".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(valid_name(bad).is_err(), "{bad}");
        }
    }
}
