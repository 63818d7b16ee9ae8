//! NATS JetStream through `async-nats`.
//!
//! Each message is a JetStream publish with `Nats-Msg-Id` set to the
//! message's id and `Content-Type: application/cloudevents+json`; `publish`
//! returns once the stream's `PubAck` has come back. The stream drops a
//! second message with an id it has seen within its duplicate window and
//! says so in the ack (`duplicate: true`), which becomes
//! [`Confirmed::Duplicate`].
//!
//! The client connects on the first publication and from then on
//! reconnects by itself (forever, with the client's backoff): a publication
//! made while it is disconnected waits at most `ack_timeout` and fails with
//! [`PublishError::Unavailable`].

use super::table::Table;
use super::{
    Broker, CLOUDEVENTS_JSON, Confirmed, DEFAULT_TIMEOUT, Destination, Lazy, Message, PublishError,
    Syntax,
};
use crate::secret::{Secret, redact_url};
use async_nats::jetstream::{self, context::PublishErrorKind, stream};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `[publishers.NAME]` with `kind = "nats"`.
#[derive(Clone)]
pub struct NatsSettings {
    /// `nats://host:port` (default `nats://127.0.0.1:4222`), or `tls://` to
    /// require TLS. Credentials belong in `token_env`, `password_env` or
    /// `credentials_file`; one written into the URL works but ends up in
    /// the configuration file.
    pub url: String,
    /// The subject of each event (default `webhooks.{endpoint}.{event_type}`).
    pub subject: Destination,
    /// The stream to create at connect when it does not exist yet; `None`:
    /// an operator made one that listens on the subjects.
    pub stream: Option<NatsStream>,
    pub auth: NatsAuth,
    /// Require TLS (also implied by a `tls://` URL).
    pub tls: bool,
    /// A PEM file of CA certificates to trust beyond the system's.
    pub ca_file: Option<PathBuf>,
    /// How long a publication waits to connect and for the stream's ack
    /// (default 5 s).
    pub ack_timeout: Duration,
}

/// The stream to make sure of at connect: `stream = "WEBHOOKS"`, or
/// `stream = { name = "WEBHOOKS", subjects = ["webhooks.>"], duplicate_window = "2m" }`.
///
/// A stream that already exists is used as it is: its subjects and window
/// are not changed. A new one keeps its messages in files, under JetStream's
/// default limits (no age or size limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsStream {
    pub name: String,
    /// Default: the subject template's fixed start up to its last dot,
    /// then `>` (`webhooks.{endpoint}.{event_type}` gives `webhooks.>`).
    pub subjects: Vec<String>,
    /// How long the stream remembers a `Nats-Msg-Id` (default 2 min,
    /// JetStream's own default). A repeat later than this is stored again,
    /// so it must outlast the longest time between a publication the stream
    /// stored and its repeat by the relay: the outbox lease plus the longest
    /// retry backoff plus the time a receiver may stay down after a crash.
    /// The stream keeps every id of the window in memory.
    pub duplicate_window: Duration,
}

impl NatsStream {
    pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
}

/// How the client authenticates.
#[derive(Debug, Clone)]
pub enum NatsAuth {
    None,
    /// `token_env`: the variable that holds the token.
    Token(Secret),
    /// `user` and `password_env`.
    UserPassword {
        user: String,
        password: Secret,
    },
    /// `credentials_file`: a `.creds` file (JWT and NKey seed).
    CredentialsFile(PathBuf),
}

impl NatsSettings {
    pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";
    pub const DEFAULT_SUBJECT: &str = "webhooks.{endpoint}.{event_type}";

    const KEYS: &[&str] = &[
        "url",
        "subject",
        "stream",
        "token_env",
        "user",
        "password_env",
        "credentials_file",
        "tls",
        "ca_file",
        "ack_timeout",
    ];

    /// Reads the nats keys of `[publishers.NAME]` (without the common
    /// ones), resolving `*_env` variables through `env`.
    pub fn from_toml(
        table: toml::Table,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut t = Table::new(table, "nats", Self::KEYS, env);
        let url = t
            .string("url")?
            .unwrap_or_else(|| Self::DEFAULT_URL.to_owned());
        if url.trim().is_empty() {
            return Err("`url` is empty".to_owned());
        }
        let template = t
            .string("subject")?
            .unwrap_or_else(|| Self::DEFAULT_SUBJECT.to_owned());
        let subject = Destination::parse(&template, Syntax::NatsSubject)
            .map_err(|e| format!("`subject`: {e}"))?;
        let stream = match t.value("stream") {
            None => None,
            Some(value) => Some(parse_stream(value, &template)?),
        };
        let token = t.env_secret("token_env")?;
        let user = t.string("user")?;
        let password = t.env_secret("password_env")?;
        let credentials_file = t.string("credentials_file")?.map(PathBuf::from);
        let auth = match (token, user, password, credentials_file) {
            (None, None, None, None) => NatsAuth::None,
            (Some(token), None, None, None) => NatsAuth::Token(token),
            (None, Some(user), Some(password), None) => NatsAuth::UserPassword { user, password },
            (None, None, None, Some(path)) => NatsAuth::CredentialsFile(path),
            (None, Some(_), None, None) => return Err("`user` needs `password_env`".to_owned()),
            (None, None, Some(_), None) => return Err("`password_env` needs `user`".to_owned()),
            _ => {
                return Err(
                    "choose one of `token_env`, `user` + `password_env` and `credentials_file`"
                        .to_owned(),
                );
            }
        };
        let tls = t.boolean("tls")?.unwrap_or(false);
        let ca_file = t.string("ca_file")?.map(PathBuf::from);
        let ack_timeout = t
            .positive_duration("ack_timeout")?
            .unwrap_or(DEFAULT_TIMEOUT);
        t.finish()?;
        Ok(NatsSettings {
            url,
            subject,
            stream,
            auth,
            tls,
            ca_file,
            ack_timeout,
        })
    }
}

fn parse_stream(value: toml::Value, template: &str) -> Result<NatsStream, String> {
    let (name, subjects, window) = match value {
        toml::Value::String(name) => (name, None, None),
        toml::Value::Table(mut table) => {
            let name = match table.remove("name") {
                Some(toml::Value::String(name)) => name,
                _ => return Err("`stream.name` must be a string".to_owned()),
            };
            let subjects = match table.remove("subjects") {
                None => None,
                Some(toml::Value::Array(items)) => Some(
                    items
                        .into_iter()
                        .map(|v| match v {
                            toml::Value::String(s) if !s.is_empty() => Ok(s),
                            _ => Err("`stream.subjects` must be non-empty strings".to_owned()),
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                Some(_) => return Err("`stream.subjects` must be an array of strings".to_owned()),
            };
            let window = match table.remove("duplicate_window") {
                None => None,
                Some(toml::Value::String(text)) => Some(
                    crate::duration_text::parse_duration(&text)
                        .map_err(|e| format!("`stream.duplicate_window`: {e}"))?,
                ),
                Some(_) => {
                    return Err(
                        "`stream.duplicate_window` must be a string such as \"2m\"".to_owned()
                    );
                }
            };
            if let Some(key) = table.keys().next() {
                return Err(format!(
                    "unknown key `stream.{key}` (it takes: name, subjects, duplicate_window)"
                ));
            }
            (name, subjects, window)
        }
        other => {
            return Err(format!(
                "`stream` must be a name or a table, not {}",
                other.type_str()
            ));
        }
    };
    if name.is_empty()
        || name.contains(|c: char| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
    {
        return Err(format!(
            "`stream`: {name:?} is not a stream name (no spaces, '.', '*', '>', '/' or '\\')"
        ));
    }
    let subjects = match subjects {
        Some(subjects) if subjects.is_empty() => {
            return Err("`stream.subjects` is empty".to_owned());
        }
        Some(subjects) => subjects,
        None => vec![subjects_of(template).ok_or_else(|| {
            format!(
                "`stream.subjects` is needed: the subject template {template:?} has no fixed start before a dot"
            )
        })?],
    };
    let duplicate_window = window.unwrap_or(NatsStream::DEFAULT_DUPLICATE_WINDOW);
    if duplicate_window.is_zero() {
        return Err("`stream.duplicate_window` must be longer than 0".to_owned());
    }
    Ok(NatsStream {
        name,
        subjects,
        duplicate_window,
    })
}

/// The subjects a stream needs to take every subject of `template`: the
/// template itself when it has no placeholder, else its fixed start up to
/// the last dot followed by `>`.
fn subjects_of(template: &str) -> Option<String> {
    match template.find('{') {
        None => Some(template.to_owned()),
        Some(open) => {
            let fixed = &template[..open];
            let dot = fixed.rfind('.')?;
            let prefix = &fixed[..=dot];
            (!prefix.trim_matches('.').is_empty()).then(|| format!("{prefix}>"))
        }
    }
}

/// The URL without its credentials: NATS takes a bare token as the whole
/// userinfo (`nats://TOKEN@host`), which [`redact_url`] would keep.
fn redacted(url: &str) -> String {
    let url = redact_url(url);
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            match rest[..end].rsplit_once('@') {
                Some((userinfo, host)) if !userinfo.contains(':') => {
                    format!("{scheme}://***@{host}{}", &rest[end..])
                }
                _ => url,
            }
        }
        None => url,
    }
}

impl fmt::Debug for NatsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsSettings")
            .field("url", &redacted(&self.url))
            .field("subject", &self.subject)
            .field("stream", &self.stream)
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("ca_file", &self.ca_file)
            .field("ack_timeout", &self.ack_timeout)
            .finish()
    }
}

pub(super) struct NatsBroker {
    settings: NatsSettings,
    connection: Lazy<jetstream::Context>,
}

impl NatsBroker {
    pub(super) fn new(settings: NatsSettings) -> Self {
        NatsBroker {
            settings,
            connection: Lazy::new(),
        }
    }

    async fn connect(&self) -> Result<jetstream::Context, PublishError> {
        let s = &self.settings;
        super::install_tls_provider();
        let unavailable = |e: &dyn fmt::Display| {
            PublishError::Unavailable(format!("cannot connect to {}: {e}", redacted(&s.url)))
        };
        let mut options = async_nats::ConnectOptions::new()
            .name("idempotent-receiver")
            .connection_timeout(s.ack_timeout)
            .request_timeout(Some(s.ack_timeout))
            .max_reconnects(None)
            .event_callback(|event| async move {
                match event {
                    async_nats::Event::Connected => tracing::info!("nats: connected"),
                    async_nats::Event::Disconnected => tracing::warn!("nats: disconnected"),
                    other => tracing::info!("nats: {other}"),
                }
            });
        options = match &s.auth {
            NatsAuth::None => options,
            NatsAuth::Token(token) => options.token(text(token)),
            NatsAuth::UserPassword { user, password } => {
                options.user_and_password(user.clone(), text(password))
            }
            NatsAuth::CredentialsFile(path) => {
                options.credentials_file(path).await.map_err(|e| {
                    PublishError::Refused(format!("cannot read {}: {e}", path.display()))
                })?
            }
        };
        if s.tls {
            options = options.require_tls(true);
        }
        if let Some(ca) = &s.ca_file {
            options = options.add_root_certificates(ca.clone());
        }
        let client = options
            .connect(s.url.as_str())
            .await
            .map_err(|e| unavailable(&e))?;
        let mut context = jetstream::new(client);
        context.set_timeout(s.ack_timeout);
        if let Some(st) = &s.stream {
            let config = stream::Config {
                name: st.name.clone(),
                subjects: st.subjects.clone(),
                duplicate_window: st.duplicate_window,
                storage: stream::StorageType::File,
                ..Default::default()
            };
            context.get_or_create_stream(config).await.map_err(|e| {
                use async_nats::jetstream::context::CreateStreamErrorKind as K;
                let message = format!("cannot create the stream {}: {e}", st.name);
                match e.kind() {
                    K::TimedOut | K::JetStreamUnavailable => PublishError::Unavailable(message),
                    _ => PublishError::Refused(message),
                }
            })?;
        }
        Ok(context)
    }

    async fn publish_on(
        &self,
        context: &Arc<jetstream::Context>,
        message: &Message<'_>,
    ) -> Result<Confirmed, PublishError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, message.id);
        headers.insert("Content-Type", CLOUDEVENTS_JSON);
        let ack = context
            .publish_with_headers(
                message.destination.to_owned(),
                headers,
                bytes::Bytes::copy_from_slice(message.body),
            )
            .await
            .map_err(publish_error)?
            .await;
        let ack = match ack {
            Ok(ack) => ack,
            Err(e) => {
                if e.kind() == PublishErrorKind::StreamNotFound && self.settings.stream.is_some() {
                    // The stream was deleted since it was made: the next
                    // publication connects again and makes it again.
                    self.connection.discard(context).await;
                }
                return Err(publish_error(e));
            }
        };
        Ok(if ack.duplicate {
            Confirmed::Duplicate
        } else {
            Confirmed::Published
        })
    }
}

fn text(secret: &Secret) -> String {
    String::from_utf8_lossy(secret.expose()).into_owned()
}

fn publish_error(e: jetstream::context::PublishError) -> PublishError {
    match e.kind() {
        PublishErrorKind::StreamNotFound => {
            PublishError::Refused("no JetStream stream takes this subject".to_owned())
        }
        PublishErrorKind::TimedOut => {
            PublishError::Unavailable("no ack from JetStream in time".to_owned())
        }
        PublishErrorKind::BrokenPipe | PublishErrorKind::MaxAckPending => {
            PublishError::Unavailable(e.to_string())
        }
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            PublishError::Refused(e.to_string())
        }
        // A JetStream API error (a full stream, a message too large) or a
        // request the client could not queue.
        _ => PublishError::Refused(e.to_string()),
    }
}

#[async_trait::async_trait]
impl Broker for NatsBroker {
    async fn publish(&self, message: &Message<'_>) -> Result<Confirmed, PublishError> {
        let timeout = self.settings.ack_timeout;
        let result = tokio::time::timeout(timeout, async {
            let context = self.connection.get(|| self.connect(), |_| true).await?;
            self.publish_on(&context, message).await
        })
        .await;
        result.unwrap_or_else(|_| {
            Err(PublishError::Unavailable(format!(
                "NATS did not confirm within {timeout:?}"
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<NatsSettings, String> {
        let env = |name: &str| match name {
            "NATS_TOKEN" => Some("tok-s3cret".to_owned()),
            "NATS_PASSWORD" => Some("pw-s3cret".to_owned()),
            _ => None,
        };
        NatsSettings::from_toml(text.parse().unwrap(), &env)
    }

    #[test]
    fn defaults_fill_an_empty_table() {
        let s = parse("").unwrap();
        assert_eq!(s.url, NatsSettings::DEFAULT_URL);
        assert_eq!(
            s.subject.render("shop", "stripe", Some("a.b")),
            "webhooks.shop.a.b"
        );
        assert_eq!(s.ack_timeout, Duration::from_secs(5));
        assert!(s.stream.is_none() && !s.tls && matches!(s.auth, NatsAuth::None));
    }

    #[test]
    fn a_stream_takes_the_subjects_of_the_template_fixed_start() {
        let s = parse("stream = \"WEBHOOKS\"").unwrap();
        assert_eq!(
            s.stream,
            Some(NatsStream {
                name: "WEBHOOKS".into(),
                subjects: vec!["webhooks.>".into()],
                duplicate_window: Duration::from_secs(120),
            })
        );
        let s = parse(
            "subject = \"acme.hooks.x{endpoint}\"\nstream = { name = \"S\", duplicate_window = \"1h\" }",
        )
        .unwrap();
        let stream = s.stream.unwrap();
        assert_eq!(stream.subjects, vec!["acme.hooks.>".to_owned()]);
        assert_eq!(stream.duplicate_window, Duration::from_secs(3600));
        assert_eq!(subjects_of("fixed.subject"), Some("fixed.subject".into()));
        assert!(
            parse("subject = \"{endpoint}.x\"\nstream = \"S\"")
                .unwrap_err()
                .contains("stream.subjects")
        );
        let s =
            parse("subject = \"{endpoint}.x\"\nstream = { name = \"S\", subjects = [\"*.x\"] }")
                .unwrap();
        assert_eq!(s.stream.unwrap().subjects, vec!["*.x".to_owned()]);
        assert!(parse("stream = \"a.b\"").is_err());
        assert!(
            parse("stream = { name = \"S\", nope = 1 }")
                .unwrap_err()
                .contains("stream.nope")
        );
    }

    #[test]
    fn credentials_come_from_the_environment_and_never_print() {
        let s = parse("token_env = \"NATS_TOKEN\"").unwrap();
        assert!(matches!(&s.auth, NatsAuth::Token(t) if t.expose() == b"tok-s3cret"));
        assert!(!format!("{s:?}").contains("tok-s3cret"));
        let s = parse("user = \"app\"\npassword_env = \"NATS_PASSWORD\"").unwrap();
        assert!(!format!("{s:?}").contains("pw-s3cret"));
        let s = parse("url = \"nats://app:pw-s3cret@host:4222\"").unwrap();
        assert!(!format!("{s:?}").contains("pw-s3cret"));
        let s = parse("url = \"tls://tok-s3cret@host:4222\"").unwrap();
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("tok-s3cret") && debug.contains("tls://***@host:4222"),
            "{debug}"
        );
        assert!(
            parse("token_env = \"UNSET\"")
                .unwrap_err()
                .contains("UNSET")
        );
        assert!(parse("user = \"app\"").is_err());
        assert!(parse("token_env = \"NATS_TOKEN\"\ncredentials_file = \"x.creds\"").is_err());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        assert!(parse("subjekt = \"x\"").unwrap_err().contains("`subjekt`"));
        assert!(
            parse("ack_timeout = \"soon\"")
                .unwrap_err()
                .contains("ack_timeout")
        );
        assert!(parse("ack_timeout = \"0\"").is_err());
        assert!(parse("subject = \"a.*\"").unwrap_err().contains("subject"));
        assert!(parse("tls = \"yes\"").unwrap_err().contains("tls"));
    }
}
