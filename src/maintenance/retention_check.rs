use super::RetentionPolicy;
use crate::duration_text::format_duration;
use crate::providers::RetryWindow;
use crate::webhooks::EndpointSettings;
use std::fmt;
use std::time::Duration;

/// An endpoint that forgets its keys before its provider stops retrying: a
/// retry that arrives after the retention runs the delivery again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShortRetention {
    pub endpoint: String,
    pub provider: &'static str,
    pub retention: Duration,
    pub window: Duration,
    pub schedule: &'static str,
    pub source: &'static str,
}

impl fmt::Display for ShortRetention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "endpoint {:?} keeps keys for {}, but {} retries for up to {} ({}; {}): a retry that comes later runs the delivery again",
            self.endpoint,
            format_duration(self.retention),
            self.provider,
            format_duration(self.window),
            self.schedule,
            self.source,
        )
    }
}

/// The endpoints whose retention under `policy` is shorter than their
/// provider's documented retry window. Providers that
/// do not retry (GitHub) or are unknown (the generic scheme) never appear.
pub fn short_retentions(
    endpoints: &[EndpointSettings],
    policy: &RetentionPolicy,
) -> Vec<ShortRetention> {
    endpoints
        .iter()
        .filter_map(|endpoint| {
            let RetryWindow::Retries {
                window,
                schedule,
                source,
            } = endpoint.provider.retry_window()
            else {
                return None;
            };
            let retention = policy.retention_of(&endpoint.name);
            (retention < window).then(|| ShortRetention {
                endpoint: endpoint.name.clone(),
                provider: endpoint.provider.name(),
                retention,
                window,
                schedule,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{self, Description, ProviderSpec};
    use std::sync::Arc;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const HOUR: u64 = 3600;

    fn endpoint(name: &str, provider: &str, secret: &str) -> EndpointSettings {
        let hmac = (provider == "hmac").then(|| {
            toml::from_str::<Description>("signature_header = \"X-Sig\"\nid_body_hash = true")
                .unwrap()
        });
        let spec = ProviderSpec {
            secrets: vec![secret.to_owned()],
            hmac,
            ..ProviderSpec::default()
        };
        EndpointSettings {
            name: name.to_owned(),
            provider: Arc::from(providers::build(provider, &spec).unwrap()),
            tolerance: None,
            handlers: EndpointSettings::default_handlers(),
            max_body_bytes: 1024,
            retention: None,
            queue: None,
        }
    }

    fn policy(default_hours: u64, endpoints: &[(&str, Duration)]) -> RetentionPolicy {
        RetentionPolicy {
            default: Duration::from_secs(default_hours * HOUR),
            endpoints: endpoints
                .iter()
                .map(|(name, retention)| (name.to_string(), *retention))
                .collect(),
        }
    }

    #[test]
    fn a_retention_shorter_than_the_retry_window_is_named_with_both() {
        let endpoints = [
            endpoint("pay", "stripe", "whsec_x"),
            endpoint("svix", "svix", SECRET),
            endpoint("shop", "shopify", "s"),
            endpoint("gh", "github", "s"),
            endpoint("slack", "slack", "s"),
            endpoint("acme", "hmac", "s"),
        ];
        let policy = policy(
            24,
            &[
                ("svix", Duration::from_secs(30 * HOUR)),
                ("shop", Duration::from_secs(HOUR)),
                ("gh", Duration::from_secs(60)),
                ("acme", Duration::from_secs(1)),
            ],
        );
        let short = short_retentions(&endpoints, &policy);
        let names: Vec<&str> = short.iter().map(|s| s.endpoint.as_str()).collect();
        // Stripe's 3 days > 24 h and Shopify's 4 h > 1 h; Svix's 28 h < 30 h,
        // Slack's minutes < 24 h, GitHub does not retry, hmac is unknown.
        assert_eq!(names, ["pay", "shop"]);
        let message = short[0].to_string();
        assert!(message.contains("\"pay\" keeps keys for 24h"), "{message}");
        assert!(
            message.contains("stripe retries for up to 72h"),
            "{message}"
        );
        assert!(
            message.contains("https://docs.stripe.com/webhooks"),
            "{message}"
        );
    }

    #[test]
    fn the_default_retention_covers_every_documented_window() {
        let endpoints = [
            endpoint("pay", "stripe", "whsec_x"),
            endpoint("paddle", "paddle", "pdl_x"),
        ];
        assert_eq!(short_retentions(&endpoints, &policy(72, &[])), []);
    }
}
