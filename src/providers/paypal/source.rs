//! Where fetched certificates come from. Verification itself stays a pure
//! function of (headers, body, now); fetching is the one step with I/O, so it
//! sits behind a trait that tests replace.

use super::CertUrl;
use super::certificate::MAX_PEM_BYTES;
use async_trait::async_trait;
use std::time::Duration;

/// A fetch that failed. It carries no detail: the reasons (DNS, TLS, a
/// status) are PayPal's side of the network, and the message must not echo
/// the request-chosen URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the certificate could not be fetched")]
pub struct FetchFailed;

/// Fetches the PEM bytes at an allowed certificate URL.
#[async_trait]
pub trait CertificateSource: Send + Sync + std::fmt::Debug {
    async fn fetch(&self, url: &CertUrl) -> Result<Vec<u8>, FetchFailed>;
}

/// How long a fetch may take: PayPal waits for the receiver's answer, and a
/// slow certificate host should not hold a worker.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches over HTTPS, following no redirect (a redirect would leave the
/// allowlist).
#[derive(Debug)]
pub struct HttpsSource {
    client: reqwest::Client,
    /// Tests only: serve the allowed URL's path from a local server instead.
    #[cfg(test)]
    base: Option<String>,
}

impl HttpsSource {
    pub fn new() -> Result<HttpsSource, reqwest::Error> {
        Ok(HttpsSource {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(FETCH_TIMEOUT)
                .build()?,
            #[cfg(test)]
            base: None,
        })
    }

    /// The seam that bypasses the allowlist's host: the path of each allowed
    /// URL is fetched from `base` (a local `http://` server).
    #[cfg(test)]
    pub fn rebased(base: &str) -> HttpsSource {
        HttpsSource {
            base: Some(base.to_owned()),
            ..HttpsSource::new().unwrap()
        }
    }

    fn target(&self, url: &CertUrl) -> String {
        #[cfg(test)]
        if let Some(base) = &self.base {
            return format!("{base}{}", url.path());
        }
        url.as_str().to_owned()
    }
}

#[async_trait]
impl CertificateSource for HttpsSource {
    async fn fetch(&self, url: &CertUrl) -> Result<Vec<u8>, FetchFailed> {
        let mut response = self
            .client
            .get(self.target(url))
            .send()
            .await
            .map_err(|_| FetchFailed)?;
        if !response.status().is_success() {
            return Err(FetchFailed);
        }
        // Read at most one byte past the limit, then let the certificate
        // parser refuse an oversized body by its own rule.
        let mut pem = Vec::new();
        while pem.len() <= MAX_PEM_BYTES {
            match response.chunk().await.map_err(|_| FetchFailed)? {
                Some(chunk) => pem.extend_from_slice(&chunk),
                None => return Ok(pem),
            }
        }
        Err(FetchFailed)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    const URL: &str = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-1";

    /// A one-shot HTTP server that answers the first request with
    /// `response` and reports the request line it saw.
    pub(in crate::providers::paypal) fn serve_once(
        response: Vec<u8>,
    ) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let read = stream.read(&mut request).unwrap();
            // The client may hang up early (the oversized body); that is its right.
            let _ = stream.write_all(&response);
            let text = String::from_utf8_lossy(&request[..read]).into_owned();
            text.lines().next().unwrap_or_default().to_owned()
        });
        (base, handle)
    }

    pub(in crate::providers::paypal) fn http(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
        let mut response = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{headers}\r\n",
            body.len()
        )
        .into_bytes();
        response.extend_from_slice(body);
        response
    }

    /// What `fetch` returns when the server answers `response`, and the
    /// request line the server saw.
    async fn fetch_answered_by(response: Vec<u8>) -> (Result<Vec<u8>, FetchFailed>, String) {
        let (base, server) = serve_once(response);
        let url = CertUrl::parse(URL).unwrap();
        let fetched = HttpsSource::rebased(&base).fetch(&url).await;
        (fetched, server.join().unwrap())
    }

    #[tokio::test]
    async fn the_allowed_path_is_fetched_and_its_body_returned() {
        let (fetched, request) = fetch_answered_by(http("200 OK", "", b"PEM")).await;
        assert_eq!(fetched, Ok(b"PEM".to_vec()));
        assert_eq!(request, "GET /v1/notifications/certs/CERT-1 HTTP/1.1");
    }

    #[tokio::test]
    async fn an_error_status_is_a_failed_fetch() {
        let (fetched, _) = fetch_answered_by(http("404 Not Found", "", b"no")).await;
        assert_eq!(fetched, Err(FetchFailed));
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        let redirect = http("302 Found", "Location: http://127.0.0.1:9/evil\r\n", b"");
        assert_eq!(fetch_answered_by(redirect).await.0, Err(FetchFailed));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_not_read_to_its_end() {
        let oversized = http("200 OK", "", &vec![b'A'; MAX_PEM_BYTES + 2]);
        assert_eq!(fetch_answered_by(oversized).await.0, Err(FetchFailed));
    }
}
