//! A minimal HTTP/1.1 keep-alive client: one connection, one request at a
//! time, as `wrk` or `pgbench` drive their servers. A general client (URL
//! parsing, a header map and a pool per request) cost the load generator as
//! much CPU as the receiver spent answering; on a 2-core machine that CPU is
//! taken from the system under test, so the client is kept to the wire.

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where requests go: `http://host:port/path`. No TLS: the load generator
/// runs beside the receiver.
#[derive(Clone, Debug)]
pub struct Target {
    pub authority: String,
    pub path: String,
}

impl Target {
    pub fn parse(url: &str) -> anyhow::Result<Target> {
        let rest = url
            .strip_prefix("http://")
            .context("the load generator speaks plain http:// only")?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            bail!("no host in {url}");
        }
        Ok(Target {
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// One keep-alive connection, reopened after an error or `Connection: close`.
pub struct Conn {
    target: Target,
    stream: Option<TcpStream>,
    request: Vec<u8>,
    response: Vec<u8>,
}

/// Idle connections shared by the workers' storms, so that a run opens as
/// many connections as it has requests in flight, not copies × workers.
pub struct Pool {
    target: Target,
    idle: std::sync::Mutex<Vec<Conn>>,
}

impl Pool {
    pub fn new(target: Target) -> Pool {
        Pool {
            target,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// `n` connections: idle ones first, new ones for the rest.
    pub fn take(&self, n: usize) -> Vec<Conn> {
        let mut taken = match self.idle.lock() {
            Ok(mut idle) => {
                let keep = idle.len().saturating_sub(n);
                idle.split_off(keep)
            }
            Err(_) => Vec::new(),
        };
        while taken.len() < n {
            taken.push(Conn::new(self.target.clone()));
        }
        taken
    }

    pub fn give_back(&self, conns: Vec<Conn>) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.extend(conns);
        }
    }
}

/// The most a response head may take.
const MOST_HEAD: usize = 16 * 1024;

impl Conn {
    pub fn new(target: Target) -> Conn {
        Conn {
            target,
            stream: None,
            request: Vec::with_capacity(2048),
            response: Vec::with_capacity(4096),
        }
    }

    /// POSTs `body` with `headers` (and a JSON content type). On any error
    /// the connection is dropped, and the next call opens a new one. A
    /// kept-alive connection that fails is retried once on a new one, as
    /// HTTP clients do: the server closes connections idle past its
    /// keep-alive timeout, and a storm's pooled connections sit idle between
    /// storms. (Repeating a delivery is safe here: that is the contract.)
    pub async fn post(
        &mut self,
        headers: &[(String, String)],
        body: &[u8],
    ) -> anyhow::Result<Answer> {
        let reused = self.stream.is_some();
        let mut result = self.exchange(headers, body).await;
        if result.is_err() {
            self.stream = None;
            if reused {
                result = self.exchange(headers, body).await;
                if result.is_err() {
                    self.stream = None;
                }
            }
        }
        result
    }

    async fn exchange(
        &mut self,
        headers: &[(String, String)],
        body: &[u8],
    ) -> anyhow::Result<Answer> {
        use std::io::Write;
        self.request.clear();
        write!(
            self.request,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.target.path,
            self.target.authority,
            body.len()
        )?;
        for (name, value) in headers {
            write!(self.request, "{name}: {value}\r\n")?;
        }
        self.request.extend_from_slice(b"\r\n");
        self.request.extend_from_slice(body);

        if self.stream.is_none() {
            let stream = TcpStream::connect(&self.target.authority)
                .await
                .with_context(|| format!("connecting to {}", self.target.authority))?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
        }
        let Some(stream) = self.stream.as_mut() else {
            bail!("no connection");
        };
        stream.write_all(&self.request).await?;

        // Read until the head is complete, then exactly Content-Length more.
        self.response.clear();
        let (status, head_len, body_len, close) = loop {
            if self.response.len() > MOST_HEAD {
                bail!("a response head over {MOST_HEAD} bytes");
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                bail!("the server closed the connection");
            }
            self.response.extend_from_slice(&chunk[..n]);
            let mut parsed_headers = [httparse::EMPTY_HEADER; 32];
            let mut parsed = httparse::Response::new(&mut parsed_headers);
            if let httparse::Status::Complete(head_len) = parsed.parse(&self.response)? {
                let status = parsed.code.context("no status code")?;
                let mut body_len = None;
                let mut close = false;
                for header in parsed.headers.iter() {
                    if header.name.eq_ignore_ascii_case("content-length") {
                        body_len = Some(std::str::from_utf8(header.value)?.trim().parse()?);
                    } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                        bail!("chunked responses are not supported");
                    } else if header.name.eq_ignore_ascii_case("connection") {
                        close = header.value.eq_ignore_ascii_case(b"close");
                    }
                }
                break (status, head_len, body_len.unwrap_or(0), close);
            }
        };
        let wanted = head_len + body_len;
        while self.response.len() < wanted {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                bail!("the server closed the connection mid-body");
            }
            self.response.extend_from_slice(&chunk[..n]);
        }
        if self.response.len() > wanted {
            bail!("more bytes than Content-Length");
        }
        let body = self.response[head_len..].to_vec();
        if close {
            self.stream = None;
        }
        Ok(Answer { status, body })
    }
}
