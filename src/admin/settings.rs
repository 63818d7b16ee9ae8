//! `admin_tokens`, `IR_ADMIN_TOKENS`, `admin_listen` and `[admin_login]`:
//! who may use the admin surface, where it listens, and how fast wrong
//! credentials may be tried.

use super::limiter::{LoginLimits, Rate};
use super::tokens::AdminTokens;
use crate::bearer;
use serde::Deserialize;
use std::time::Duration;

/// The environment variable with more admin tokens, comma-separated.
pub const TOKENS_ENV: &str = "IR_ADMIN_TOKENS";

/// How the admin surface is configured. There is no default token: with
/// none configured the surface is off.
#[derive(Debug, Clone, Default)]
pub struct AdminSettings {
    /// Every accepted token (several at once, for rotation); never printed.
    pub tokens: AdminTokens,
    /// A separate address for the admin surface; `None`: the main listener.
    pub listen: Option<String>,
    /// How many wrong credentials an address, and everybody, may present.
    pub login_limits: LoginLimits,
}

/// `[admin_login]` as written in the file; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLoginLimits {
    address_burst: Option<u32>,
    address_refill: Option<String>,
    global_burst: Option<u32>,
    global_refill: Option<String>,
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
    /// `file_tokens`, `listen` and `login` from the configuration file, plus
    /// the tokens of `IR_ADMIN_TOKENS` (both lists are accepted together).
    pub fn parse(
        file_tokens: Option<Vec<String>>,
        listen: Option<String>,
        login: Option<RawLoginLimits>,
        env: crate::environment::Env<'_>,
    ) -> Result<AdminSettings, InvalidAdminSetting> {
        let mut tokens = Vec::new();
        for (i, token) in file_tokens.unwrap_or_default().iter().enumerate() {
            tokens.push(
                bearer::configured(token).map_err(|message| InvalidAdminSetting {
                    key: "admin_tokens",
                    from_environment: false,
                    message: format!("token {i}: {message}"),
                })?,
            );
        }
        if let Some(value) = env(TOKENS_ENV) {
            let listed = value.split(',').map(str::trim).filter(|t| !t.is_empty());
            for (i, token) in listed.enumerate() {
                tokens.push(
                    bearer::configured(token).map_err(|message| InvalidAdminSetting {
                        key: TOKENS_ENV,
                        from_environment: true,
                        message: format!("token {i}: {message}"),
                    })?,
                );
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
        let login = login.unwrap_or_default();
        let defaults = LoginLimits::default();
        let login_limits = LoginLimits {
            per_address: rate(
                ("admin_login.address_burst", login.address_burst),
                ("admin_login.address_refill", login.address_refill),
                defaults.per_address,
            )?,
            global: rate(
                ("admin_login.global_burst", login.global_burst),
                ("admin_login.global_refill", login.global_refill),
                defaults.global,
            )?,
        };
        Ok(AdminSettings {
            tokens: AdminTokens::new(tokens),
            listen,
            login_limits,
        })
    }

    /// Whether `/admin` is served at all.
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }
}

/// One bucket of `[admin_login]`: a burst of at least one, and a refill
/// period (`"0"`: refilled at once, that limit off).
fn rate(
    (burst_key, burst): (&'static str, Option<u32>),
    (refill_key, refill): (&'static str, Option<String>),
    default: Rate,
) -> Result<Rate, InvalidAdminSetting> {
    let invalid = |key, message| InvalidAdminSetting {
        key,
        from_environment: false,
        message,
    };
    let burst = match burst {
        Some(0) => return Err(invalid(burst_key, "must be at least 1".to_owned())),
        Some(burst) => burst,
        None => default.burst,
    };
    let refill: Duration = match refill {
        Some(text) => crate::duration_text::parse_duration(&text)
            .map_err(|message| invalid(refill_key, message))?,
        None => default.refill,
    };
    Ok(Rate { burst, refill })
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
        let settings = AdminSettings::parse(None, None, None, &no_env).unwrap();
        assert!(!settings.enabled());
    }

    #[test]
    fn tokens_come_from_the_file_and_the_environment_together() {
        let env = |name: &str| {
            (name == TOKENS_ENV).then(|| " tok_env_aaaaaaaaaaaa , tok_env_bbbbbbbbbbbb".to_owned())
        };
        let settings = AdminSettings::parse(Some(vec![TOKEN.into()]), None, None, &env).unwrap();
        assert!(settings.tokens.accepts(TOKEN.as_bytes()));
        assert!(settings.tokens.accepts(b"tok_env_aaaaaaaaaaaa"));
        assert!(settings.tokens.accepts(b"tok_env_bbbbbbbbbbbb"));
        assert!(!settings.tokens.accepts(b"tok_env_cccccccccccc"));
    }

    #[test]
    fn a_short_or_spaced_token_is_refused_without_being_echoed() {
        for bad in ["short-secret", "has a space in it, long"] {
            let error =
                AdminSettings::parse(Some(vec![bad.into()]), None, None, &no_env).unwrap_err();
            assert_eq!(error.key, "admin_tokens");
            assert!(!error.message.contains(bad), "{}", error.message);
        }
        let env = |_: &str| Some("tiny".to_owned());
        let error = AdminSettings::parse(None, None, None, &env).unwrap_err();
        assert_eq!(error.key, TOKENS_ENV);
        assert!(error.from_environment);
    }

    #[test]
    fn admin_listen_must_be_an_address() {
        let error = AdminSettings::parse(
            Some(vec![TOKEN.into()]),
            Some("admin".into()),
            None,
            &no_env,
        )
        .unwrap_err();
        assert_eq!(error.key, "admin_listen");
    }

    #[test]
    fn settings_never_print_their_tokens() {
        let settings = AdminSettings::parse(Some(vec![TOKEN.into()]), None, None, &no_env).unwrap();
        assert!(!format!("{settings:?}").contains(TOKEN));
    }

    #[test]
    fn login_limits_default_to_the_constants_and_can_be_set_but_not_to_a_zero_burst() {
        let settings = AdminSettings::parse(None, None, None, &no_env).unwrap();
        assert_eq!(settings.login_limits, LoginLimits::default());
        let raw: RawLoginLimits =
            toml::from_str("address_burst = 3\naddress_refill = \"1m\"\nglobal_refill = \"0\"")
                .unwrap();
        let settings = AdminSettings::parse(None, None, Some(raw), &no_env).unwrap();
        assert_eq!(settings.login_limits.per_address.burst, 3);
        assert_eq!(
            settings.login_limits.per_address.refill,
            Duration::from_secs(60)
        );
        assert_eq!(
            settings.login_limits.global.burst,
            LoginLimits::default().global.burst
        );
        assert_eq!(settings.login_limits.global.refill, Duration::ZERO);
        let raw: RawLoginLimits = toml::from_str("global_burst = 0").unwrap();
        let error = AdminSettings::parse(None, None, Some(raw), &no_env).unwrap_err();
        assert_eq!(error.key, "admin_login.global_burst");
        let raw: RawLoginLimits = toml::from_str("address_refill = \"soon\"").unwrap();
        let error = AdminSettings::parse(None, None, Some(raw), &no_env).unwrap_err();
        assert_eq!(error.key, "admin_login.address_refill");
    }
}
