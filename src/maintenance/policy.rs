use crate::config::Settings;
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
    /// The retentions `settings` configure: the engine forgets keys by the
    /// same rule, so the purge only deletes what is already forgotten.
    pub fn from_settings(settings: &Settings) -> RetentionPolicy {
        RetentionPolicy {
            default: settings.retention,
            endpoints: settings
                .endpoints
                .iter()
                .filter_map(|e| Some((e.name.clone(), e.retention?)))
                .collect(),
        }
    }

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
    fn endpoints_without_their_own_retention_fall_under_the_default() {
        let text = "retention = \"2h\"\n\
            [endpoints.slow]\nprovider = \"github\"\nsecrets = [\"s\"]\nretention = \"96h\"\n\
            [endpoints.plain]\nprovider = \"github\"\nsecrets = [\"s\"]\n";
        let settings = Settings::parse(text, "t.toml", &|_| None).unwrap();
        let policy = RetentionPolicy::from_settings(&settings);
        assert_eq!(policy.default, Duration::from_secs(2 * 3600));
        assert_eq!(policy.endpoints.len(), 1);
        assert_eq!(policy.retention_of("slow"), Duration::from_secs(96 * 3600));
        assert_eq!(policy.retention_of("plain"), Duration::from_secs(2 * 3600));
        assert_eq!(
            policy.retention_of("POST /payments"),
            Duration::from_secs(2 * 3600)
        );
    }

    #[test]
    fn a_uniform_policy_overrides_every_endpoint() {
        let policy = RetentionPolicy::uniform(Duration::from_secs(60));
        assert_eq!(policy.retention_of("slow"), Duration::from_secs(60));
    }
}
