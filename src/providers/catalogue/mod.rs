//! The catalogue: every HMAC-style provider as one [`Description`], in
//! `catalogue/*.toml`. Adding such a provider is an entry there plus its
//! vectors in `tests/vectors/`; names, `--help`, retry windows, fixtures,
//! `sign`/`send`, the property tests and the conformance tests all read
//! this table.

use super::description::Description;
use serde::Deserialize;
use std::sync::LazyLock;

/// One catalogue entry.
pub type Entry = Description;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Catalogue {
    #[serde(default)]
    provider: Vec<Description>,
}

/// The catalogue's files, by theme; each is a list of `[[provider]]`.
const FILES: &[(&str, &str)] = &[
    ("core.toml", include_str!("core.toml")),
    ("payments.toml", include_str!("payments.toml")),
    ("commerce.toml", include_str!("commerce.toml")),
    ("platforms.toml", include_str!("platforms.toml")),
];

static CATALOGUE: LazyLock<Vec<Description>> = LazyLock::new(|| {
    // The files are part of the binary: a test parses them and builds every
    // entry, so a mistake in one fails the build's tests, never a start-up.
    FILES
        .iter()
        .flat_map(|(file, text)| match toml::from_str::<Catalogue>(text) {
            Ok(catalogue) => catalogue.provider,
            Err(error) => panic!("src/providers/catalogue/{file} is invalid: {error}"),
        })
        .collect()
});

/// Every entry, in the file's order.
pub fn entries() -> &'static [Description] {
    &CATALOGUE
}

/// The entry named `name`.
pub fn find(name: &str) -> Option<&'static Description> {
    CATALOGUE.iter().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ProviderSpec, build};

    #[test]
    fn every_entry_has_a_unique_name_a_title_and_a_documented_secret() {
        let mut names = std::collections::BTreeSet::new();
        for entry in entries() {
            assert!(names.insert(entry.name.as_str()), "{} twice", entry.name);
            assert!(!entry.title.is_empty(), "{} has no title", entry.name);
            assert!(
                entry.secret_location.is_some(),
                "{}: where is the secret?",
                entry.name
            );
            assert!(
                entry.retry_window.is_none() || entry.retry_source.is_some(),
                "{}: a retry window needs its source",
                entry.name
            );
        }
    }

    #[test]
    fn every_entry_builds() {
        for entry in entries() {
            let spec = ProviderSpec {
                secrets: vec![crate::providers::example_secret(entry, "a")],
                url: Some("https://receiver.example/webhooks/x".into()),
                ..ProviderSpec::default()
            };
            if let Err(error) = build(&entry.name, &spec) {
                panic!("{}: {error}", entry.name);
            }
        }
    }
}
