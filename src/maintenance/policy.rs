use std::collections::BTreeMap;
use std::time::Duration;

/// Which retention applies to which keys: endpoints with their own
/// `retention`, and one default for everything else — the other endpoints,
/// client-key scopes such as `POST /payments`, and rows of endpoints that
/// are no longer configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    pub default: Duration,
    pub endpoints: BTreeMap<String, Duration>,
}

impl RetentionPolicy {
    /// One retention for every key, whatever its scope (`--older-than`).
    pub fn uniform(retention: Duration) -> RetentionPolicy {
        RetentionPolicy {
            default: retention,
            endpoints: BTreeMap::new(),
        }
    }

    /// The retention of the keys of `scope`.
    pub fn retention_of(&self, scope: &str) -> Duration {
        self.endpoints.get(scope).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uniform_policy_overrides_every_endpoint() {
        let policy = RetentionPolicy::uniform(Duration::from_secs(60));
        assert_eq!(policy.retention_of("slow"), Duration::from_secs(60));
    }
}
