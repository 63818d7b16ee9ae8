//! The endpoint a fresh start gets when none is configured: `demo`, Standard
//! Webhooks, with a secret generated once and kept in the data directory
//! (readable by its owner only, never logged).
//!
//! Reading the configuration never writes: start-up creates the secret
//! ([`ensure_secret`]), and the commands that sign for the demo endpoint read
//! it ([`read_secret`]).

use crate::providers;
use crate::webhooks::EndpointSettings;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const ENDPOINT: &str = "demo";
const SECRET_FILE: &str = "demo.secret";

/// Where the demo endpoint's secret is kept.
pub fn secret_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SECRET_FILE)
}

/// The demo endpoint, its secret read from the data directory; `None` when
/// no secret has been created yet.
pub fn endpoint(data_dir: &Path, max_body: usize) -> Result<Option<EndpointSettings>, String> {
    let Some(secret) = read_secret(data_dir)? else {
        return Ok(None);
    };
    let spec = providers::ProviderSpec {
        secrets: vec![secret],
        ..providers::ProviderSpec::default()
    };
    let provider = providers::build("standard-webhooks", &spec).map_err(|e| {
        format!(
            "the demo secret in {} is unusable: {e}",
            secret_path(data_dir).display()
        )
    })?;
    Ok(Some(EndpointSettings {
        name: ENDPOINT.to_owned(),
        provider: Arc::from(provider),
        tolerance: None,
        handlers: EndpointSettings::default_handlers(),
        max_body_bytes: max_body,
        retention: None,
        queue: None,
    }))
}

/// The secret, if one was created.
pub fn read_secret(data_dir: &Path) -> Result<Option<String>, String> {
    let path = secret_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(secret) => Ok(Some(secret.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Creates the secret unless it exists. Two processes starting at once
/// both end up with the one that was published first.
pub fn ensure_secret(data_dir: &Path) -> Result<(), String> {
    use base64::Engine as _;
    let path = secret_path(data_dir);
    if path.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    let key: [u8; 32] = rand::random();
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    write_private(&path, &secret).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Publishes a file only its owner can read, whole or not at all: it is
/// written under a name of its own, then linked into place, which fails if
/// another process got there first (its file is then the one kept). A plain
/// `create_new` would let a racing reader see the file still empty.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let staged = path.with_extension(format!("{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&staged).and_then(|mut file| {
        file.write_all(contents.as_bytes())
            .and_then(|()| file.sync_all())
    });
    let published = written.and_then(|()| match std::fs::hard_link(&staged, path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    });
    let _ = std::fs::remove_file(&staged);
    published
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_created_once_kept_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        assert_eq!(read_secret(&data).unwrap(), None);
        assert!(endpoint(&data, 1024).unwrap().is_none());
        ensure_secret(&data).unwrap();
        let secret = read_secret(&data).unwrap().unwrap();
        assert!(secret.starts_with("whsec_"));
        ensure_secret(&data).unwrap();
        assert_eq!(read_secret(&data).unwrap().unwrap(), secret);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(secret_path(&data))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let demo = endpoint(&data, 1024).unwrap().unwrap();
        assert_eq!(demo.name, ENDPOINT);
        assert!(!format!("{demo:?}").contains(&secret[6..]));
    }
}
