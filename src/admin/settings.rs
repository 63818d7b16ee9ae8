//! `admin_tokens`, `IR_ADMIN_TOKENS` and `admin_listen`: who may use the
//! admin surface, and where it listens.

use super::tokens::AdminTokens;
use crate::secret::Secret;

/// The environment variable with more admin tokens, comma-separated.
pub const TOKENS_ENV: &str = "IR_ADMIN_TOKENS";

/// The shortest token accepted: a guessable token guards nothing.
pub const MIN_TOKEN_LEN: usize = 16;

/// How the admin surface is configured. There is no default token: with
/// none configured the surface is off.
#[derive(Debug, Clone, Default)]
pub struct AdminSettings {
    /// Every accepted token (several at once, for rotation); never printed.
    pub tokens: AdminTokens,
    /// A separate address for the admin surface; `None`: the main listener.
    pub listen: Option<String>,
}

/// A bad admin setting, naming the key; the message never contains a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidAdminSetting {
    pub key: &'static str,
    /// The value came from the environment rather than the file.
    pub from_environment: bool,
    pub message: String,
}

impl AdminSettings {
    /// `file_tokens` and `listen` from the configuration file, plus the
    /// tokens of `IR_ADMIN_TOKENS` (both lists are accepted together).
    pub fn parse(
        file_tokens: Option<Vec<String>>,
        listen: Option<String>,
        env: crate::environment::Env<'_>,
    ) -> Result<AdminSettings, InvalidAdminSetting> {
        let mut tokens = Vec::new();
        for (i, token) in file_tokens.unwrap_or_default().iter().enumerate() {
            tokens.push(check(token).map_err(|message| InvalidAdminSetting {
                key: "admin_tokens",
                from_environment: false,
                message: format!("token {i}: {message}"),
            })?);
        }
        if let Some(value) = env(TOKENS_ENV) {
            let listed = value.split(',').map(str::trim).filter(|t| !t.is_empty());
            for (i, token) in listed.enumerate() {
                tokens.push(check(token).map_err(|message| InvalidAdminSetting {
                    key: TOKENS_ENV,
                    from_environment: true,
                    message: format!("token {i}: {message}"),
                })?);
            }
        }
        if let Some(address) = &listen {
            if address.parse::<std::net::SocketAddr>().is_err() {
                return Err(InvalidAdminSetting {
                    key: "admin_listen",
                    from_environment: false,
                    message: format!("{address:?} is not an address such as 127.0.0.1:9090"),
                });
            }
        }
        Ok(AdminSettings {
            tokens: AdminTokens::new(tokens),
            listen,
        })
    }

    /// Whether `/admin` is served at all.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }
}

/// A token as it will be compared. The messages describe, never echo it.
fn check(token: &str) -> Result<Secret, String> {
    let token = token.trim();
    if token.chars().count() < MIN_TOKEN_LEN {
        return Err(format!("too short (at least {MIN_TOKEN_LEN} characters)"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("only visible ASCII characters, without spaces or commas".into());
    }
    if token.contains(',') {
        return Err("only visible ASCII characters, without spaces or commas".into());
    }
    Ok(Secret::new(token.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "tok_0123456789abcdef";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn without_tokens_the_admin_surface_is_off() {
        let settings = AdminSettings::parse(None, None, &no_env).unwrap();
        assert!(!settings.enabled());
    }

    #[test]
    fn tokens_come_from_the_file_and_the_environment_together() {
        let env = |name: &str| {
            (name == TOKENS_ENV).then(|| " tok_env_aaaaaaaaaaaa , tok_env_bbbbbbbbbbbb".to_owned())
        };
        let settings = AdminSettings::parse(Some(vec![TOKEN.into()]), None, &env).unwrap();
        assert!(settings.tokens.accepts(TOKEN.as_bytes()));
        assert!(settings.tokens.accepts(b"tok_env_aaaaaaaaaaaa"));
        assert!(settings.tokens.accepts(b"tok_env_bbbbbbbbbbbb"));
        assert!(!settings.tokens.accepts(b"tok_env_cccccccccccc"));
    }

    #[test]
    fn a_short_or_spaced_token_is_refused_without_being_echoed() {
        for bad in ["short-secret", "has a space in it, long"] {
            let error = AdminSettings::parse(Some(vec![bad.into()]), None, &no_env).unwrap_err();
            assert_eq!(error.key, "admin_tokens");
            assert!(!error.message.contains(bad), "{}", error.message);
        }
        let env = |_: &str| Some("tiny".to_owned());
        let error = AdminSettings::parse(None, None, &env).unwrap_err();
        assert_eq!(error.key, TOKENS_ENV);
        assert!(error.from_environment);
    }

    #[test]
    fn admin_listen_must_be_an_address() {
        let error = AdminSettings::parse(Some(vec![TOKEN.into()]), Some("admin".into()), &no_env)
            .unwrap_err();
        assert_eq!(error.key, "admin_listen");
    }

    #[test]
    fn settings_never_print_their_tokens() {
        let settings = AdminSettings::parse(Some(vec![TOKEN.into()]), None, &no_env).unwrap();
        assert!(!format!("{settings:?}").contains(TOKEN));
    }
}
