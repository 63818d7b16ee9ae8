use crate::config::{Settings, format_duration};
use crate::providers::RetryWindow;
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

/// The endpoints whose retention (their own, else the global one) is
/// shorter than their provider's documented retry window. Providers that
/// do not retry (GitHub) or are unknown (the generic scheme) never appear.
pub fn short_retentions(settings: &Settings) -> Vec<ShortRetention> {
    settings
        .endpoints
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
            let retention = settings.retention_of(endpoint);
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

    fn settings(text: &str) -> Settings {
        Settings::parse(text, "t.toml", &|_| None).unwrap()
    }

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn a_retention_shorter_than_the_retry_window_is_named_with_both() {
        let settings = settings(&format!(
            "retention = \"24h\"\n\
             [endpoints.pay]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n\
             [endpoints.svix]\nprovider = \"svix\"\nsecrets = [\"{SECRET}\"]\nretention = \"30h\"\n\
             [endpoints.shop]\nprovider = \"shopify\"\nsecrets = [\"s\"]\nretention = \"1h\"\n\
             [endpoints.gh]\nprovider = \"github\"\nsecrets = [\"s\"]\nretention = \"1m\"\n\
             [endpoints.slack]\nprovider = \"slack\"\nsecrets = [\"s\"]\n\
             [endpoints.acme.hmac]\nsignature_header = \"X-Sig\"\nid_body_hash = true\n\
             [endpoints.acme]\nprovider = \"hmac\"\nsecrets = [\"s\"]\nretention = \"1s\"\n"
        ));
        let short = short_retentions(&settings);
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
        let settings = settings(
            "[endpoints.pay]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n\
             [endpoints.paddle]\nprovider = \"paddle\"\nsecrets = [\"pdl_x\"]\n",
        );
        assert_eq!(short_retentions(&settings), []);
    }
}
