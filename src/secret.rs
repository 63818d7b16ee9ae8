use std::fmt;

/// Key material. It never prints: `Debug` and `Display` show a placeholder, so
/// a secret cannot reach a log line through formatting.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Box<[u8]>);

impl Secret {
    pub fn new(bytes: impl Into<Box<[u8]>>) -> Secret {
        Secret(bytes.into())
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `url` with its credentials masked, for logs and `Debug`: the password
/// of `scheme://user:password@host/...` and the value of any `password=`
/// query parameter (both of which PostgreSQL URLs accept) become `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    // The last '@' ends the userinfo: a password may itself contain '@'.
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                        format!("{name}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::{Secret, redact_url};

    #[test]
    fn a_url_loses_its_password_in_the_userinfo_and_in_the_query() {
        assert_eq!(
            redact_url("postgres://app:hunter2@db:5432/ir"),
            "postgres://app:***@db:5432/ir"
        );
        assert_eq!(
            redact_url("postgres://app:p@ss@db/ir?sslmode=require"),
            "postgres://app:***@db/ir?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://app@db/ir?password=hunter2&sslmode=require"),
            "postgres://app@db/ir?password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("https://user:token@example.test?x=1"),
            "https://user:***@example.test?x=1"
        );
        assert_eq!(redact_url("postgres://app@db/ir"), "postgres://app@db/ir");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    #[test]
    fn a_secret_never_formats_its_bytes() {
        let secret = Secret::new(b"hunter2".to_vec());
        assert!(!format!("{secret:?} {secret}").contains("hunter2"));
    }
}
