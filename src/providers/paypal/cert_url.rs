//! Which `PAYPAL-CERT-URL`s the receiver will fetch a certificate from.
//!
//! The header is chosen by whoever sends the request, so the rule is a
//! literal string check, not a URL parser's idea of a host (parsers disagree
//! on `\`, `@`, `%2e`, trailing dots and IDNA, and each disagreement has been
//! an allowlist bypass somewhere). A URL is fetched only when it is exactly
//! `https://<host>/v1/notifications/certs/<name>` where:
//!
//! - `<host>` is one of [`HOSTS`], byte for byte in lowercase: PayPal's REST
//!   API hosts, live and sandbox. Not any subdomain of `paypal.com`: that
//!   would trust every PayPal web property, redirector and user-content host
//!   with our signing keys. There is no userinfo, port, query or fragment.
//! - `<name>` is letters, digits, `-`, `_` and `.` (no `..`), as in
//!   `CERT-360caa42-fca2a594-a5cafa77`.
//!
//! If PayPal ever serves its certificates elsewhere, every delivery is refused
//! (fail closed) until the list is extended or the certificate is pinned.

use std::fmt;

/// PayPal's REST API hosts, live and sandbox.
pub const HOSTS: &[&str] = &[
    "api.paypal.com",
    "api-m.paypal.com",
    "api.sandbox.paypal.com",
    "api-m.sandbox.paypal.com",
];

/// Where PayPal serves its webhook signing certificates.
const PATH_PREFIX: &str = "/v1/notifications/certs/";
/// PayPal's own limit on `cert_url` in its verify-webhook-signature API.
const MAX_LENGTH: usize = 500;

/// A certificate URL that passed [`CertUrl::parse`]: the only kind a
/// [`super::CertificateSource`] is ever asked for.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CertUrl(String);

impl CertUrl {
    /// Accepts exactly the URLs described in the module documentation. The
    /// reason is a fixed string: the URL itself is request-derived text and
    /// is never echoed.
    pub fn parse(url: &str) -> Result<CertUrl, &'static str> {
        if url.len() > MAX_LENGTH {
            return Err("it is longer than 500 characters");
        }
        let rest = url
            .strip_prefix("https://")
            .ok_or("it is not an https:// URL")?;
        let (host, path) = rest
            .find('/')
            .map(|slash| rest.split_at(slash))
            .ok_or("it has no path")?;
        if !HOSTS.contains(&host) {
            return Err("its host is not one of PayPal's API hosts");
        }
        let name = path
            .strip_prefix(PATH_PREFIX)
            .ok_or("its path is not under /v1/notifications/certs/")?;
        let name_is_plain = !name.is_empty()
            && !name.contains("..")
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !name_is_plain {
            return Err("its certificate name is not letters, digits, '-', '_' and '.'");
        }
        Ok(CertUrl(url.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path and name, for a test source that serves them from another
    /// base URL.
    #[cfg(test)]
    pub fn path(&self) -> &str {
        let after_scheme = &self.0["https://".len()..];
        after_scheme
            .find('/')
            .map_or("", |slash| &after_scheme[slash..])
    }
}

impl fmt::Debug for CertUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Checked above to be plain ASCII from a fixed alphabet.
        f.debug_tuple("CertUrl").field(&self.0).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The URL in paypal/PayPal-node-SDK test/notification.js and
    // paypal/PayPal-Python-SDK test/unit_tests/notifications_test.py.
    const SANDBOX: &str =
        "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77";

    #[test]
    fn paypal_s_own_certificate_urls_are_accepted() {
        assert_eq!(CertUrl::parse(SANDBOX).unwrap().as_str(), SANDBOX);
        for host in HOSTS {
            let url = format!("https://{host}/v1/notifications/certs/CERT-abc_1.2");
            assert!(CertUrl::parse(&url).is_ok(), "{url}");
        }
    }

    #[test]
    fn the_path_of_an_accepted_url_is_everything_after_the_host() {
        let url = CertUrl::parse(SANDBOX).unwrap();
        assert_eq!(
            url.path(),
            "/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77"
        );
    }

    #[test]
    fn hostile_certificate_urls_are_refused() {
        let certs = "/v1/notifications/certs/CERT-1";
        let hostile = [
            // Not https.
            format!("http://api.paypal.com{certs}"),
            format!("HTTPS://api.paypal.com{certs}"),
            format!("//api.paypal.com{certs}"),
            format!("ftp://api.paypal.com{certs}"),
            format!("https:/api.paypal.com{certs}"),
            format!(" https://api.paypal.com{certs}"),
            // Lookalike and suffix hosts.
            format!("https://paypal.com.evil.com{certs}"),
            format!("https://api.paypal.com.evil.com{certs}"),
            format!("https://evil.com/api.paypal.com{certs}"),
            format!("https://evilpaypal.com{certs}"),
            format!("https://api-paypal.com{certs}"),
            format!("https://api.paypal.co{certs}"),
            format!("https://api.paypal.com.{certs}"),
            format!("https://API.PAYPAL.COM{certs}"),
            format!("https://xn--pypal-4ve.com{certs}"),
            format!("https://аpi.paypal.com{certs}"),
            // Other PayPal hosts are not trusted with signing keys.
            format!("https://www.paypal.com{certs}"),
            format!("https://paypal.com{certs}"),
            format!("https://evil.api.paypal.com{certs}"),
            format!("https://www.sandbox.paypal.com{certs}"),
            // Userinfo tricks.
            format!("https://api.paypal.com@evil.com{certs}"),
            format!("https://user:pass@api.paypal.com{certs}"),
            format!("https://api.paypal.com:443@evil.com{certs}"),
            format!("https://evil.com#@api.paypal.com{certs}"),
            format!("https://evil.com?@api.paypal.com{certs}"),
            format!("https://evil.com\\@api.paypal.com{certs}"),
            format!("https://api.paypal.com\\@evil.com{certs}"),
            // Ports, even the default one.
            format!("https://api.paypal.com:443{certs}"),
            format!("https://api.paypal.com:8443{certs}"),
            // Encoded or odd hosts.
            format!("https://api%2epaypal.com{certs}"),
            format!("https://api.paypal.com%2f@evil.com{certs}"),
            format!("https://127.0.0.1{certs}"),
            format!("https://[::1]{certs}"),
            format!("https://169.254.169.254{certs}"),
            "https://api.paypal.com".to_owned(),
            // Other paths on a trusted host: redirects, traversal, queries.
            "https://api.paypal.com/".to_owned(),
            "https://api.paypal.com/v1/oauth2/token".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/../../redirect".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/%2e%2e/x".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/a/b".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/CERT-1?next=https://evil.com".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/CERT-1#frag".to_owned(),
            "https://api.paypal.com/v1/notifications/certs/CERT 1".to_owned(),
            "https://api.paypal.com//v1/notifications/certs/CERT-1".to_owned(),
            "https://api.paypal.com/V1/notifications/certs/CERT-1".to_owned(),
            "https://api.paypal.com/v1/notifications/certs\\CERT-1".to_owned(),
            format!("https://api.paypal.com{certs}\r\nHost: evil.com"),
            format!(
                "https://api.paypal.com/v1/notifications/certs/{}",
                "A".repeat(500)
            ),
            String::new(),
        ];
        for url in &hostile {
            assert!(CertUrl::parse(url).is_err(), "accepted {url:?}");
        }
    }
}
