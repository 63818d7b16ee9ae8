//! The OTLP exporter's HTTP client: the receiver's own reqwest (rustls, no
//! second HTTP stack), each export spawned on a tokio runtime.
//!
//! The SDK's batch processor exports from a thread of its own and waits on
//! the export there; reqwest's async client needs a tokio reactor, which
//! that thread does not have. Spawning on a runtime's handle gives it one,
//! and only the processor's thread waits: no runtime worker is blocked.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use std::time::Duration;

/// How long one export may take before it is given up (OTLP's default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(super) struct SpawnedReqwest {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl SpawnedReqwest {
    pub(super) fn new(runtime: tokio::runtime::Handle) -> Result<SpawnedReqwest, reqwest::Error> {
        let client = reqwest::Client::builder().timeout(EXPORT_TIMEOUT).build()?;
        Ok(SpawnedReqwest { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for SpawnedReqwest {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let exported = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = exported.await??;
        let mut response = Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
