//! The admin tokens and how a presented credential is compared with them.

use crate::secret::Secret;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::{Choice, ConstantTimeEq};

/// The configured admin tokens. Several may be valid at once, so that a
/// token can be rotated without locking anyone out. Never printed.
#[derive(Debug, Clone, Default)]
pub struct AdminTokens(Arc<[Secret]>);

impl AdminTokens {
    pub fn new(tokens: Vec<Secret>) -> AdminTokens {
        AdminTokens(tokens.into())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many tokens are accepted (for the start-up log; never which).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether `candidate` is one of the tokens. Every token is compared
    /// whatever the outcome, so the time taken tells neither which token
    /// matched nor how much of one did.
    pub fn accepts(&self, candidate: &[u8]) -> bool {
        let mut accepted = Choice::from(0);
        for token in self.0.iter() {
            accepted |= equal(token.expose(), candidate);
        }
        accepted.into()
    }

    /// The tokens' bytes, for deriving and checking session cookies.
    pub(super) fn exposed(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Secret::expose)
    }
}

/// Whether `a` and `b` are equal, in time that depends on neither their
/// contents nor where they differ. Both sides are hashed first, so the byte
/// comparison always runs over 32 bytes, and the lengths are compared too
/// (in constant time) rather than returning early when they differ, which
/// would tell an attacker the token's length.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    equal(a, b).into()
}

fn equal(a: &[u8], b: &[u8]) -> Choice {
    let same_length = (a.len() as u64).ct_eq(&(b.len() as u64));
    let same_digest = Sha256::digest(a)
        .as_slice()
        .ct_eq(Sha256::digest(b).as_slice());
    same_length & same_digest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_compare_equal() {
        assert!(constant_time_eq(
            b"tok_0123456789abcdef",
            b"tok_0123456789abcdef"
        ));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn bytes_of_different_lengths_never_compare_equal() {
        assert!(!constant_time_eq(
            b"tok_0123456789abcdef",
            b"tok_0123456789abcde"
        ));
        assert!(!constant_time_eq(
            b"tok_0123456789abcdef",
            b"tok_0123456789abcdefg"
        ));
        assert!(!constant_time_eq(b"tok_0123456789abcdef", b""));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn bytes_of_the_same_length_differing_anywhere_compare_unequal() {
        let token = b"tok_0123456789abcdef";
        for i in 0..token.len() {
            let mut other = *token;
            other[i] ^= 1;
            assert!(!constant_time_eq(token, &other), "differs at {i}");
        }
    }

    #[test]
    fn any_of_several_tokens_is_accepted() {
        let tokens = AdminTokens::new(vec![
            Secret::new(b"tok_old_0123456789ab".to_vec()),
            Secret::new(b"tok_new_0123456789ab".to_vec()),
        ]);
        assert!(tokens.accepts(b"tok_old_0123456789ab"));
        assert!(tokens.accepts(b"tok_new_0123456789ab"));
        assert!(!tokens.accepts(b"tok_new_0123456789a"));
        assert!(!tokens.accepts(b""));
        assert!(!AdminTokens::default().accepts(b""));
    }
}
