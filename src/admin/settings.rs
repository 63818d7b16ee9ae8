//! `admin_tokens`, `IR_ADMIN_TOKENS`, `admin_listen` and `[admin_login]`:
//! who may use the admin surface, where it listens, and how fast wrong
//! credentials may be tried.

use super::limiter::{LoginLimits, Rate};
use super::tokens::{AdminToken, AdminTokens, valid_name};
use crate::bearer;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// The environment variable with more admin tokens, comma-separated, each
/// `name=token` or a plain token.
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

/// One entry of `admin_tokens`: a plain token (`"tok..."`, recorded by its
/// fingerprint) or a named one (`{name = "ops", token = "tok..."}`,
/// recorded as `admin:ops`); a list may mix both.
#[derive(Debug)]
pub enum RawAdminToken {
    Plain(String),
    Named(NamedToken),
}

/// `{name = "...", token = "..."}`; any other key is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToken {
    name: String,
    token: String,
}

impl std::fmt::Debug for NamedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedToken")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// By hand rather than `#[serde(untagged)]`, whose one error ("did not
/// match any variant") would hide which key of a named token is wrong.
impl<'de> Deserialize<'de> for RawAdminToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entry;
        impl<'de> serde::de::Visitor<'de> for Entry {
            type Value = RawAdminToken;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a token string or a table {name = \"...\", token = \"...\"}")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RawAdminToken, E> {
                Ok(RawAdminToken::Plain(text.to_owned()))
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                map: M,
            ) -> Result<RawAdminToken, M::Error> {
                NamedToken::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawAdminToken::Named)
            }
        }
        deserializer.deserialize_any(Entry)
    }
}

impl From<&str> for RawAdminToken {
    fn from(token: &str) -> RawAdminToken {
        RawAdminToken::Plain(token.to_owned())
    }
}

/// An `IR_ADMIN_TOKENS` entry: `name=token` when the text before the first
/// `=` is a valid name and the text after it a valid token, else a plain
/// token (so that a plain token ending in base64's `=` stays one).
fn env_entry(entry: &str) -> (Option<&str>, &str) {
    match entry.split_once('=') {
        Some((name, token)) if valid_name(name).is_ok() && bearer::configured(token).is_ok() => {
            (Some(name), token)
        }
        _ => (None, entry),
    }
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
        file_tokens: Option<Vec<RawAdminToken>>,
        listen: Option<String>,
        login: Option<RawLoginLimits>,
        env: crate::environment::Env<'_>,
    ) -> Result<AdminSettings, InvalidAdminSetting> {
        let mut tokens = Vec::new();
        let mut names = BTreeSet::new();
        for (i, entry) in file_tokens.unwrap_or_default().iter().enumerate() {
            let (name, token) = match entry {
                RawAdminToken::Plain(token) => (None, token.as_str()),
                RawAdminToken::Named(named) => (Some(named.name.as_str()), named.token.as_str()),
            };
            tokens.push(admin_token(name, token, &mut names).map_err(|message| {
                InvalidAdminSetting {
                    key: "admin_tokens",
                    from_environment: false,
                    message: format!("token {i}: {message}"),
                }
            })?);
        }
        if let Some(value) = env(TOKENS_ENV) {
            let listed = value.split(',').map(str::trim).filter(|t| !t.is_empty());
            for (i, entry) in listed.enumerate() {
                let (name, token) = env_entry(entry);
                tokens.push(admin_token(name, token, &mut names).map_err(|message| {
                    InvalidAdminSetting {
                        key: TOKENS_ENV,
                        from_environment: true,
                        message: format!("token {i}: {message}"),
                    }
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

/// One token, its name checked and not yet taken (across the file and
/// the environment); the message never contains the token.
fn admin_token(
    name: Option<&str>,
    token: &str,
    names: &mut BTreeSet<String>,
) -> Result<AdminToken, String> {
    if let Some(name) = name {
        valid_name(name)?;
        if !names.insert(name.to_owned()) {
            return Err(format!("the name {name:?} is given to two tokens"));
        }
    }
    Ok(AdminToken {
        name: name.map(str::to_owned),
        secret: bearer::configured(token)?,
    })
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
        let settings =
            AdminSettings::parse(Some(vec![RawAdminToken::from(TOKEN)]), None, None, &env).unwrap();
        assert!(settings.tokens.accepts(TOKEN.as_bytes()));
        assert!(settings.tokens.accepts(b"tok_env_aaaaaaaaaaaa"));
        assert!(settings.tokens.accepts(b"tok_env_bbbbbbbbbbbb"));
        assert!(!settings.tokens.accepts(b"tok_env_cccccccccccc"));
    }

    #[test]
    fn a_short_or_spaced_token_is_refused_without_being_echoed() {
        for bad in ["short-secret", "has a space in it, long"] {
            let error =
                AdminSettings::parse(Some(vec![RawAdminToken::from(bad)]), None, None, &no_env)
                    .unwrap_err();
            assert_eq!(error.key, "admin_tokens");
            assert!(!error.message.contains(bad), "{}", error.message);
        }
        let env = |_: &str| Some("tiny".to_owned());
        let error = AdminSettings::parse(None, None, None, &env).unwrap_err();
        assert_eq!(error.key, TOKENS_ENV);
        assert!(error.from_environment);
    }

    /// The file's `admin_tokens`, as the configuration reads it.
    fn file(text: &str) -> Option<Vec<RawAdminToken>> {
        #[derive(Deserialize)]
        struct File {
            admin_tokens: Vec<RawAdminToken>,
        }
        Some(toml::from_str::<File>(text).unwrap().admin_tokens)
    }

    fn name_of(settings: &AdminSettings, token: &str) -> Option<Option<String>> {
        settings
            .tokens
            .matching(token.as_bytes())
            .map(|t| t.name.clone())
    }

    #[test]
    fn tokens_may_be_named_plain_or_mixed_in_the_file_and_the_environment() {
        let tokens = file(
            r#"admin_tokens = [{name = "ops", token = "tok_ops_0123456789ab"}, "tok_plain_0123456789"]"#,
        );
        let env = |name: &str| {
            (name == TOKENS_ENV).then(|| {
                "oncall=tok_oncall_01234567, tok_env_plain_012345, tok_b64_0123456789ab=="
                    .to_owned()
            })
        };
        let settings = AdminSettings::parse(tokens, None, None, &env).unwrap();
        assert_eq!(settings.tokens.len(), 5);
        assert_eq!(
            name_of(&settings, "tok_ops_0123456789ab"),
            Some(Some("ops".into()))
        );
        assert_eq!(name_of(&settings, "tok_plain_0123456789"), Some(None));
        assert_eq!(
            name_of(&settings, "tok_oncall_01234567"),
            Some(Some("oncall".into()))
        );
        assert_eq!(name_of(&settings, "tok_env_plain_012345"), Some(None));
        // A plain token that ends in `=` stays whole.
        assert_eq!(name_of(&settings, "tok_b64_0123456789ab=="), Some(None));
        assert_eq!(name_of(&settings, "oncall=tok_oncall_01234567"), None);
        let printed = format!("{settings:?}");
        assert!(!printed.contains("tok_"), "{printed}");
    }

    #[test]
    fn names_are_checked_unique_and_a_named_token_takes_no_other_key() {
        let cases = [
            (
                r#"admin_tokens = [{name = "o p s", token = "tok_ops_0123456789ab"}]"#,
                "letters",
            ),
            (
                r#"admin_tokens = [{name = "ops", token = "tok_ops_0123456789ab"}, {name = "ops", token = "tok_two_0123456789ab"}]"#,
                "two tokens",
            ),
            (
                r#"admin_tokens = [{name = "ops", token = "tiny"}]"#,
                "too short",
            ),
        ];
        for (text, expected) in cases {
            let error = AdminSettings::parse(file(text), None, None, &no_env).unwrap_err();
            assert_eq!(error.key, "admin_tokens");
            assert!(error.message.contains(expected), "{}", error.message);
            assert!(!error.message.contains("tok_"), "{}", error.message);
        }
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct File {
            admin_tokens: Vec<RawAdminToken>,
        }
        let error = toml::from_str::<File>(
            r#"admin_tokens = [{name = "ops", token = "tok_ops_0123456789ab", role = "x"}]"#,
        )
        .unwrap_err();
        assert!(
            error.message().contains("unknown field `role`"),
            "{}",
            error.message()
        );
        assert!(!error.message().contains("tok_ops"), "{}", error.message());
        let env = |_: &str| Some("ops=tok_ops_0123456789ab,ops=tok_two_0123456789ab".to_owned());
        let error = AdminSettings::parse(None, None, None, &env).unwrap_err();
        assert_eq!((error.key, error.from_environment), (TOKENS_ENV, true));
        assert!(!error.message.contains("tok_"), "{}", error.message);
    }

    #[test]
    fn admin_listen_must_be_an_address() {
        let error = AdminSettings::parse(
            Some(vec![RawAdminToken::from(TOKEN)]),
            Some("admin".into()),
            None,
            &no_env,
        )
        .unwrap_err();
        assert_eq!(error.key, "admin_listen");
    }

    #[test]
    fn settings_never_print_their_tokens() {
        let settings =
            AdminSettings::parse(Some(vec![RawAdminToken::from(TOKEN)]), None, None, &no_env)
                .unwrap();
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
