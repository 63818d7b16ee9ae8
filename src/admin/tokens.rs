//! The admin tokens and how a presented credential is compared with them.

use crate::bearer::equal;
use crate::secret::Secret;
use std::sync::Arc;
use subtle::Choice;

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

#[cfg(test)]
mod tests {
    use super::*;

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
